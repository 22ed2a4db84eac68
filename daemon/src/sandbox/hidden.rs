//! What sandboxed commands cannot read at all: the credential stores of the user's home by
//! default (`[sandbox] hidden` replaces the list), and what the session's read deny rules
//! name. Each is covered in the command's mount namespace: a directory by an empty read-only
//! tmpfs, a file by `/dev/null`.

use std::path::{Path, PathBuf};

/// The credential stores hidden unless the config says otherwise, relative to the home
/// directory: keys and tokens that a command has no business reading, and that a command
/// which can reach the network could send anywhere.
pub(crate) const DEFAULT_IN_HOME: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".pgpass",
    ".password-store",
    ".local/share/keyrings",
    ".vault-token",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".terraform.d/credentials.tfrc.json",
];

/// [`DEFAULT_IN_HOME`] under `$HOME`; none without a home.
pub(crate) fn default_paths() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute())
    else {
        return Vec::new();
    };
    DEFAULT_IN_HOME.iter().map(|path| home.join(path)).collect()
}

/// What `read_file`'s deny rules cover, as the sandbox hides it from commands: each pattern's
/// files found when a command starts (under the session's roots for a pattern that matches
/// anywhere, such as `.env`; under its own directory for one anchored elsewhere).
#[derive(Debug, Clone, Default)]
pub struct DeniedReads {
    patterns: Vec<DeniedPattern>,
    /// A rule without a path (`deny read_file`): no file may be read, so the roots are hidden
    /// whole.
    pub(crate) everything: bool,
}

#[derive(Debug, Clone)]
struct DeniedPattern {
    /// The absolute glob, as the rule compiled it.
    text: String,
    matcher: globset::GlobMatcher,
    /// The directory below which every match lies: the glob's components up to the first
    /// with a wildcard.
    base: PathBuf,
    /// What follows `base`: `None` for a path without wildcards, `Some(true)` for `base/**`
    /// (the directory whole), `Some(false)` for anything else, which is looked for.
    rest: Option<bool>,
}

impl PartialEq for DeniedReads {
    fn eq(&self, other: &Self) -> bool {
        self.everything == other.everything
            && self
                .patterns
                .iter()
                .map(|pattern| &pattern.text)
                .eq(other.patterns.iter().map(|pattern| &pattern.text))
    }
}

/// How many entries one command's search for denied files looks at before it stops (a root of
/// millions of files would otherwise delay every command).
const MAX_ENTRIES_SEARCHED: usize = 500_000;

impl DeniedReads {
    /// Adds a rule's pattern: `text` the absolute glob it was compiled to, `matcher` that glob.
    pub(crate) fn add(&mut self, text: &str, matcher: globset::GlobMatcher) {
        let wildcard = |part: &str| part.contains(['*', '?', '[', ']', '{', '}', '\\']);
        let parts: Vec<&str> = text.trim_start_matches('/').split('/').collect();
        let literal = parts.iter().take_while(|part| !wildcard(part)).count();
        let base = Path::new("/").join(parts[..literal].join("/"));
        let rest = match &parts[literal..] {
            [] => None,
            ["**"] => Some(true),
            _ => Some(false),
        };
        self.patterns.push(DeniedPattern {
            text: text.to_owned(),
            matcher,
            base,
            rest,
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.everything && self.patterns.is_empty()
    }

    /// The existing files and directories to hide from a command of a session with `roots`;
    /// an error when there are too many entries to look through (a command must not run with a
    /// denied file left in sight).
    pub(crate) fn paths(&self, roots: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
        if self.everything {
            return Ok(roots.to_vec());
        }
        let mut found = Vec::new();
        let mut searched = 0;
        for pattern in &self.patterns {
            match pattern.rest {
                None | Some(true) => {
                    if std::fs::symlink_metadata(&pattern.base).is_ok() {
                        found.push(pattern.base.clone());
                    }
                }
                Some(false) => {
                    let starts: Vec<&Path> =
                        if roots.iter().any(|root| pattern.base.starts_with(root))
                            || pattern.base != Path::new("/")
                                && !roots.iter().any(|root| root.starts_with(&pattern.base))
                        {
                            vec![pattern.base.as_path()]
                        } else {
                            roots
                                .iter()
                                .filter(|root| root.starts_with(&pattern.base))
                                .map(PathBuf::as_path)
                                .collect()
                        };
                    for start in starts {
                        search(start, &pattern.matcher, &mut found, &mut searched);
                    }
                }
            }
        }
        if searched >= MAX_ENTRIES_SEARCHED {
            return Err(format!(
                "the command did not run: looking for the files its session's read deny rules \
                 hide from it went past {MAX_ENTRIES_SEARCHED} entries; name the files or \
                 directories in the rules (`secrets/**`, `./.env`) rather than a name matched \
                 anywhere (`.env`)"
            ));
        }
        found.sort();
        found.dedup();
        Ok(found)
    }
}

/// Looks under `dir` for entries `matcher` matches (a directory that matches is hidden whole,
/// not looked into; symlinks are not followed).
fn search(
    dir: &Path,
    matcher: &globset::GlobMatcher,
    found: &mut Vec<PathBuf>,
    searched: &mut usize,
) {
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            *searched += 1;
            if *searched >= MAX_ENTRIES_SEARCHED {
                return;
            }
            let path = entry.path();
            if matcher.is_match(&path) {
                found.push(path);
            } else if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> globset::GlobMatcher {
        let text = match text.strip_suffix("/**") {
            Some(dir) => format!("{{{dir},{dir}/**}}"),
            None => text.to_owned(),
        };
        globset::GlobBuilder::new(&text)
            .literal_separator(true)
            .build()
            .unwrap()
            .compile_matcher()
    }

    #[test]
    fn each_pattern_finds_what_it_names_under_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for file in [".env", "app/.env", "app/.envrc", "secrets/key", "notes.txt"] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        let mut denied = DeniedReads::default();
        for text in [
            "/**/.env".to_owned(),
            format!("{}/secrets/**", root.display()),
            format!("{}/notes.txt", root.display()),
            format!("{}/missing.txt", root.display()),
        ] {
            denied.add(&text, glob(&text));
        }
        assert_eq!(
            denied.paths(std::slice::from_ref(&root)).unwrap(),
            vec![
                root.join(".env"),
                root.join("app/.env"),
                root.join("notes.txt"),
                root.join("secrets"),
            ]
        );
        let everything = DeniedReads {
            everything: true,
            ..DeniedReads::default()
        };
        assert_eq!(
            everything.paths(std::slice::from_ref(&root)).unwrap(),
            vec![root]
        );
    }
}
