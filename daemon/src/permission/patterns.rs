//! The patterns inside a rule's parentheses: the wildcard of command lines, arguments and tool
//! names (only `*` is special), and the gitignore-style path glob, made absolute when the rule
//! is read.
//!
//! A wildcard's match is linear in practice and never exponential.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use super::rule_error::RuleError;

/// A glob where only `*` is special and matches anything, `/` and spaces included. A trailing
/// ` *` also matches nothing, so `cargo test *` covers `cargo test`.
#[derive(Debug, Clone)]
pub(super) struct Wildcard {
    parts: Vec<String>,
    optional_tail: bool,
}

impl Wildcard {
    pub(super) fn new(pattern: &str) -> Self {
        let optional_tail = pattern.ends_with(" *");
        Self {
            parts: pattern.split('*').map(str::to_owned).collect(),
            optional_tail,
        }
    }

    pub(super) fn matches(&self, text: &str) -> bool {
        if self.optional_tail {
            let head = &self.parts[..self.parts.len() - 1];
            let without_tail = head.join("*");
            if let Some(stem) = without_tail.strip_suffix(' ')
                && Wildcard::new(stem).matches(text)
            {
                return true;
            }
        }
        wildcard_match(&self.parts, text)
    }
}

/// Matches `text` against literal `parts` separated by `*`s, with the usual greedy-with-backtrack
/// walk: linear in practice, and never exponential.
fn wildcard_match(parts: &[String], text: &str) -> bool {
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return text.is_empty(),
    };
    let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last.as_str())
}

/// A gitignore-style path glob made absolute: `//x` is `/x`, `~/x` is under home, `/x` under
/// the directory of the file the rule is written in, `x/y` and `./x` under the cwd, and a
/// pattern without `/` matches that name in any directory. As in a gitignore file, a pattern
/// that matches a directory covers everything inside it (`secrets` and `secrets/` cover
/// `secrets/key`), and `dir/**` matches `dir` too.
#[derive(Debug, Clone)]
pub(super) struct PathGlob {
    /// The absolute glob `anywhere` was compiled from.
    pub(super) anywhere_text: String,
    /// The glob alone, without what lies inside its matches (for the sandbox, which hides
    /// each match whole).
    pub(super) anywhere_itself: GlobMatcher,
    /// Matches wherever the path is (for deny and ask).
    anywhere: GlobSet,
    /// Matches only under the cwd (for allows); the same as `anywhere` for anchored patterns.
    under_cwd: GlobSet,
}

impl PathGlob {
    pub(super) fn new(
        rule: &str,
        pattern: &str,
        cwd: &Path,
        home: &Path,
        anchor: Option<&Path>,
    ) -> Result<Self, RuleError> {
        let pattern = pattern.trim();
        let escaped = |dir: &Path| globset::escape(&dir.to_string_lossy());
        let cwd_glob = escaped(cwd);
        let (anywhere, under_cwd) = if let Some(absolute) = pattern.strip_prefix("//") {
            let glob = format!("/{absolute}");
            (glob.clone(), glob)
        } else if let Some(in_home) = pattern.strip_prefix("~/") {
            let glob = format!("{}/{in_home}", escaped(home));
            (glob.clone(), glob)
        } else if let Some(in_anchor) = pattern.strip_prefix('/') {
            let anchor = anchor.ok_or_else(|| RuleError::NoAnchor(rule.to_owned()))?;
            let glob = format!("{}/{in_anchor}", escaped(anchor));
            (glob.clone(), glob)
        } else {
            let relative = pattern.strip_prefix("./").unwrap_or(pattern);
            let trimmed = relative.trim_end_matches('/');
            if trimmed.contains('/') {
                let glob = format!("{cwd_glob}/{relative}");
                (glob.clone(), glob)
            } else {
                (
                    format!("/**/{relative}"),
                    format!("{cwd_glob}/**/{relative}"),
                )
            }
        };
        // `dir/` is the directory's contents, as `dir/**` (which covers `dir` itself too).
        let contents = |glob: String| match glob.strip_suffix('/') {
            Some(dir) => format!("{}/**", dir.trim_end_matches('/')),
            None => glob,
        };
        let (anywhere, under_cwd) = (contents(anywhere), contents(under_cwd));
        // `dir/**` covers `dir` itself: `{dir,dir/**}`.
        let itself = match anywhere.strip_suffix("/**") {
            Some(dir) => format!("{{{dir},{dir}/**}}"),
            None => anywhere.clone(),
        };
        let anywhere_itself = GlobBuilder::new(&itself)
            .literal_separator(true)
            .build()
            .map_err(|error| bad_glob(rule, &error))?
            .compile_matcher();
        Ok(Self {
            anywhere: compile_path_glob(rule, &anywhere)?,
            under_cwd: compile_path_glob(rule, &under_cwd)?,
            anywhere_itself,
            anywhere_text: anywhere,
        })
    }

    pub(super) fn matches(&self, path: &Path, scope: Scope) -> bool {
        match scope {
            Scope::Anywhere => self.anywhere.is_match(path),
            Scope::UnderCwd => self.under_cwd.is_match(path),
        }
    }
}

fn bad_glob(rule: &str, error: &globset::Error) -> RuleError {
    RuleError::BadGlob {
        rule: rule.to_owned(),
        reason: error.kind().to_string(),
    }
}

/// A path glob and what lies inside what it matches: `G` and `G/**` (`dir/**` is `dir` and
/// `dir/**`).
fn compile_path_glob(rule: &str, glob: &str) -> Result<GlobSet, RuleError> {
    let (itself, inside) = match glob.strip_suffix("/**") {
        Some(dir) if !dir.is_empty() => (dir.to_owned(), glob.to_owned()),
        _ => (
            glob.to_owned(),
            format!("{}/**", glob.trim_end_matches('/')),
        ),
    };
    let mut set = GlobSetBuilder::new();
    for glob in [itself, inside] {
        set.add(
            GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map_err(|error| bad_glob(rule, &error))?,
        );
    }
    set.build().map_err(|error| bad_glob(rule, &error))
}

#[derive(Clone, Copy)]
pub(super) enum Scope {
    Anywhere,
    UnderCwd,
}
