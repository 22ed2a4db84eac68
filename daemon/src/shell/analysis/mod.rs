//! The analysis of a command line over the parser's syntax tree: every simple command that
//! would run, nested ones included, with the forms rules match, the paths redirections and
//! options read and write, and what makes the line opaque or unreadable.
//!
//! One [`Walker`] goes over the line; its work is split by concern: walking the syntax tree
//! (`traverse`), expanding words as bash would (`expansion`), the command lines a line runs
//! inside it (`nested`), the forms of each simple command found (`forms`), and the variables
//! the line assigns or names (`variables`). This file holds the walker's state and what it
//! records about the line as a whole.

use super::CommandLine;

mod expansion;
mod forms;
mod nested;
mod traverse;
mod variables;

/// How deep `sh -c` strings, `eval` and substitutions may nest before the line is just opaque.
const MAX_NESTING: usize = 8;

/// Why a line is unreadable when brush-parser panicked on it. It has, on input found by fuzzing
/// (a huge file descriptor number, a huge `~-N`): every call into it is guarded, so that such a
/// line is unreadable instead of a crash of the analysis.
const PARSER_PANICKED: &str = "the shell parser failed on it";

/// Walks `line`: its analysis, and how many substitutions the walk saw in it.
pub(super) fn walk(line: &str) -> (CommandLine, usize) {
    let mut analysis = CommandLine::default();
    let mut seen = 0;
    let mut progress = Progress::default();
    Walker {
        out: &mut analysis,
        substitutions_seen: &mut seen,
        progress: &mut progress,
        depth: 0,
        nested: false,
        stdin: Stdin::Inherited,
    }
    .walk_line(line);
    progress.judge_paths(&mut analysis);
    (analysis, seen)
}

/// Where a nested command line comes from.
#[derive(Clone, Copy)]
enum Nested {
    /// The body of a substitution: part of the line's own text.
    Body,
    /// A word's value run as a command line (`sh -c`, `eval`).
    Value,
}

/// What the walk met that changes where paths lead, anywhere in the line, nested lines
/// included: a `cd` in a subshell changes only the subshell, but assuming it changed
/// everything only makes more of the line opaque.
#[derive(Default)]
struct Progress {
    /// A `cd`, `pushd` or `popd` is in the line: relative paths are not where it started.
    directory_changed: bool,
    /// `HOME` is assigned or unset in the line: a `~` is not the home the engine knows.
    home_changed: bool,
    /// A link is made in the line (`ln`, `cp -s`): a path may lead through it, made after the
    /// judgment. How many written paths the linking commands themselves gave.
    links_made: Option<usize>,
}

impl Progress {
    /// Paths are judged from the directory and the home the line starts with. Once the line
    /// changes either, a relative (or `~`) path is opaque wherever it is written: the order of
    /// the text is not the order things run in (a loop body's redirection runs again after the
    /// `cd` at its end; a function's runs where it is called).
    fn judge_paths(&self, analysis: &mut CommandLine) {
        let paths = || analysis.written_paths.iter().chain(&analysis.read_paths);
        let relative = paths().any(|path| !path.starts_with('/') && !path.starts_with('~'));
        let tilde = paths().any(|path| path.starts_with('~'));
        if self.directory_changed && relative {
            let why =
                "a relative path in a line that changes the directory (`cd`, `pushd`, `popd`)";
            analysis.opaque.push(why.to_owned());
        }
        if self.home_changed && tilde {
            analysis
                .opaque
                .push("a `~` path in a line that changes `HOME`".to_owned());
        }
        if let Some(linking) = self.links_made
            && analysis.written_paths.len() + analysis.read_paths.len() > linking
        {
            analysis.opaque.push(
                "a path written or read in a line that makes a link (`ln`, `cp -s`, `cp -l`): \
                 it may lead through the new link"
                    .to_owned(),
            );
        }
    }
}

struct Walker<'a> {
    out: &'a mut CommandLine,
    /// Command and process substitutions found, nested ones included.
    substitutions_seen: &'a mut usize,
    progress: &'a mut Progress,
    depth: usize,
    /// Inside a substitution, `sh -c` string or `eval`.
    nested: bool,
    /// The standard input of the simple command being walked.
    stdin: Stdin,
}

/// Where a simple command's standard input comes from, as far as its own redirections say.
#[derive(Clone, Default)]
enum Stdin {
    /// Its pipeline's or its enclosing command's: not known here.
    #[default]
    Inherited,
    /// A here-string or here-document whose text is known.
    Text(String),
    /// A file, or a here-document or here-string whose text is only known when it runs.
    Unknown,
}

impl Walker<'_> {
    fn opaque(&mut self, why: impl Into<String>) {
        let why = why.into();
        if !self.out.opaque.contains(&why) {
            self.out.opaque.push(why);
        }
    }

    /// Code the line runs that the analysis cannot see ([`CommandLine::hidden_code`]).
    fn hidden_code(&mut self, why: String) {
        self.opaque(why.clone());
        if !self.out.hidden_code.contains(&why) {
            self.out.hidden_code.push(why);
        }
    }

    fn unreadable(&mut self, why: String) {
        self.opaque(why.clone());
        self.out.unreadable.get_or_insert(why);
    }
}
