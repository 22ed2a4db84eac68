//! What a repository's config names that git runs or reads as config: the hooks directory
//! `core.hooksPath` points to (husky's `.husky/_`, lefthook's), and the files `include.path`
//! and `includeIf.*.path` pull in. Writing there makes code run at the next `git commit` or
//! `git status` just as writing `.git/hooks/` or `.git/config` does.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The most of a config file read: git configs are small, and a huge one made to hold up the
/// daemon is not read whole.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// What the config file `config` of the git directory `git_dir` names, each made absolute:
/// `core.hooksPath` relative to the working tree (`work_tree`, when the repository has one),
/// `include` paths relative to the config file's directory, `~/` from `$HOME`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) hooks_dirs: Vec<PathBuf>,
    pub(crate) included: Vec<PathBuf>,
}

/// Reads `config` (of a repository whose working tree is `work_tree`, if any).
pub(crate) fn named_by(config: &Path, work_tree: Option<&Path>) -> Named {
    let mut text = String::new();
    let read = std::fs::File::open(config)
        .and_then(|file| file.take(MAX_CONFIG_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return Named::default();
    }
    let base = config.parent().unwrap_or(Path::new("/"));
    let mut named = Named::default();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            // `[core]`, `[include]`, `[includeIf "gitdir:…"]`: the name before a space or `]`.
            section = header
                .split([' ', ']', '"', '.'])
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = unquoted(value);
        if value.is_empty() {
            continue;
        }
        match (section.as_str(), key.as_str()) {
            ("core", "hookspath") => {
                let relative_to = work_tree.unwrap_or(base);
                named.hooks_dirs.push(absolute(&value, relative_to));
            }
            ("include" | "includeif", "path") => named.included.push(absolute(&value, base)),
            _ => {}
        }
    }
    named
}

/// A value without its comment and quotes (`"a b" # c` → `a b`).
fn unquoted(value: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = value.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => out.extend(chars.next()),
            '#' | ';' if !quoted => break,
            _ => out.push(c),
        }
    }
    out.trim().to_owned()
}

fn absolute(value: &str, relative_to: &Path) -> PathBuf {
    let path = match value.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(value),
        },
        None => PathBuf::from(value),
    };
    crate::paths::normalize_lexically(&relative_to.join(path))
}

/// What the configs of the repositories of `dirs` (each directory's nearest `.git`, and the
/// git directory a `.git` file names) name: the places where writing makes code run.
pub(crate) fn named_for(dirs: &[&Path]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in dirs {
        let Some((work_tree, git_dir)) = repository_of(dir) else {
            continue;
        };
        let named = named_by(&git_dir.join("config"), Some(&work_tree));
        for path in named.hooks_dirs.into_iter().chain(named.included) {
            let resolved = crate::paths::resolve_symlinks(&path);
            for form in [path, resolved] {
                if !found.contains(&form) {
                    found.push(form);
                }
            }
        }
    }
    found
}

/// The nearest repository holding `dir`: its working tree and git directory.
fn repository_of(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    for ancestor in dir.ancestors() {
        let dot_git = ancestor.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if meta.is_dir() {
            return Some((ancestor.to_owned(), dot_git));
        }
        if meta.is_file() {
            return Some((
                ancestor.to_owned(),
                crate::paths::named_by_git_file(ancestor, &dot_git)?,
            ));
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_path_and_includes_are_read_as_git_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\trepositoryformatversion = 0\n\
             \tHooksPath = \".husky/_\" # husky\n\
             [include]\n\tpath = ../shared.gitconfig\n\
             [includeIf \"gitdir:~/work/\"]\n\tpath = /etc/other.gitconfig\n\
             [user]\n\tname = x\n",
        )
        .unwrap();
        let named = named_by(&root.join(".git/config"), Some(&root));
        assert_eq!(named.hooks_dirs, vec![root.join(".husky/_")]);
        assert_eq!(
            named.included,
            vec![
                root.join("shared.gitconfig"),
                PathBuf::from("/etc/other.gitconfig")
            ]
        );
        let found = named_for(&[&root.join("sub")]);
        assert!(found.contains(&root.join(".husky/_")), "{found:?}");
    }
}
