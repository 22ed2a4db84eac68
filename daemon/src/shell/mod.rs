//! Command lines as the permission engine sees them: every simple command that would run, the
//! forms its rules match against, and what makes a line opaque to allow rules.
//!
//! The line is parsed by a real shell parser (brush-parser), never split by hand. The walk goes
//! into compound commands, functions, pipelines, substitutions, process substitutions,
//! here-documents, `sh -c` strings, `eval` and the payload of `find -exec`, and past leading
//! `VAR=value` words and wrappers (`env`, `command`, `nice`, `timeout`, `xargs`, …).
//!
//! What the rules match:
//! - deny and ask rules match any form of any command found, nested ones included: the words as
//!   written (quotes removed), with the command's basename (`/usr/bin/rm` → `rm`), without its
//!   `VAR=` prefix, and each command a wrapper runs;
//! - an allow rule covers a line only if the line is not opaque and every command's
//!   `allow_forms` all match allow rules. The allow form is the innermost command as written,
//!   with every `VAR=value` the line sets for it in front (`PATH=/x git status` is not
//!   `git status`); privilege wrappers (`sudo`, `doas`, `chroot`) are not transparent to allows.
//!
//! The analysis runs in two parts: the guards (`guards.rs`), which keep from the parser the
//! lines it would take exponential time or memory on and count a line's substitutions from its
//! text alone, and the walk (`analysis/`) over the parser's syntax tree.

use serde::{Deserialize, Serialize};

mod analysis;
mod braces;
mod guards;
pub mod isolated;
mod programs;
mod wrappers;
mod writers;

/// A command line, analysed. Serialized between the daemon and its parser workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLine {
    /// Every simple command that would run, in source order.
    pub commands: Vec<FoundCommand>,
    /// Why no allow rule can cover the line; empty when every command is visible.
    pub opaque: Vec<String>,
    /// Code the line runs that the analysis cannot see — a shell or an interpreter reading its
    /// program from its input (a pipe, a redirection, a here-document of unknown text), a
    /// command line computed at run time (`bash -c "$x"`) — and why: any command a deny rule
    /// forbids could hide in it.
    #[serde(default)]
    pub hidden_code: Vec<String>,
    /// Set when the line (or a line nested in it) could not be read at all, and why: no rule
    /// can be checked inside it, so the permission engine asks whatever the mode.
    pub unreadable: Option<String>,
    /// Paths that redirections (and options such as `time -o`) write to, as written (`~` not
    /// expanded); the permission engine judges them against the roots.
    pub written_paths: Vec<String>,
    /// Paths that redirections (`<`, `<>`, `$(< file)`) and options such as `xargs -a` read,
    /// as written; the permission engine judges them against `read_file` deny rules.
    #[serde(default)]
    pub read_paths: Vec<String>,
}

/// One simple command and the forms rules match against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundCommand {
    /// Every form deny and ask rules are matched against.
    pub match_forms: Vec<String>,
    /// The forms that must all match allow rules for the command to be allowed.
    pub allow_forms: Vec<String>,
    /// Found inside a substitution, `sh -c` or `eval`: only deny and ask rules apply to it.
    pub nested: bool,
    /// The words of the command it runs (past wrappers), when every one is known as written
    /// and means only itself to bash (`is_plain_word` in `analysis/forms.rs`), with no
    /// assignment or privilege wrapper before them; empty otherwise. What the known-safe list
    /// judges.
    #[serde(default)]
    pub plain_words: Vec<String>,
}

impl CommandLine {
    /// A line no rule can be checked inside, and why.
    pub(crate) fn unreadable(why: impl Into<String>) -> Self {
        let why = why.into();
        Self {
            opaque: vec![why.clone()],
            unreadable: Some(why),
            ..Self::default()
        }
    }
}

/// Analyses a command line, on the calling thread. A line that does not parse is opaque, with
/// no commands found. The daemon calls this only inside its parser workers
/// ([`isolated::ShellParser`]): on some lines the parser takes exponential time.
pub fn analyze(line: &str) -> CommandLine {
    let (mut analysis, seen) = analysis::walk(line);
    // The parser has misread substitutions as text (`echo $(cho $((0 ? 2) 2))` came back as
    // plain words, found by fuzzing), and a substitution it does not see is one no rule looks
    // at: a line holding more than it saw cannot be checked.
    if analysis.unreadable.is_none() && guards::substitutions_in(line) > seen {
        let why = "the shell parser missed a substitution in it".to_owned();
        analysis.opaque.push(why.clone());
        analysis.unreadable = Some(why);
    }
    analysis
}

#[cfg(test)]
mod tests;
