//! Command lines nested in a line: the bodies of substitutions, and the words a command runs
//! as a line (`sh -c`, `eval`, an alias, a `trap` action, a `mapfile` callback, a shell
//! reading its program from a here-document), each walked as a line of its own whose commands
//! only deny and ask rules apply to; and `find -exec`'s payload, a command like any other.
//!
//! Nesting is bounded ([`MAX_NESTING`]): deeper, the line is just opaque.

use brush_parser::ast::CompoundList;

use crate::shell::programs::{self, SHELLS};

use super::variables::{REWRITES_LOOKUP, rewrites_lookup};
use super::{MAX_NESTING, Nested, Stdin, Walker};

impl Walker<'_> {
    /// Walks a command line nested in another: the body of a substitution (`Nested::Body`),
    /// or a word's value run as a line (`sh -c`, `eval`: `Nested::Value`).
    pub(super) fn walk_nested(&mut self, line: &str, nested: Nested, why: &str) {
        self.opaque(why);
        if self.depth >= MAX_NESTING {
            self.opaque("commands nested too deep to follow");
            return;
        }
        // Only a body's substitutions are in the text [`substitutions_in`] counts; counting a
        // value's too could make up for ones the parser missed.
        let mut uncounted = 0;
        let substitutions_seen = match nested {
            Nested::Body => &mut *self.substitutions_seen,
            Nested::Value => &mut uncounted,
        };
        let mut inner = Walker {
            out: &mut *self.out,
            substitutions_seen,
            progress: &mut *self.progress,
            depth: self.depth + 1,
            nested: true,
            stdin: Stdin::Inherited,
        };
        inner.walk_line(line);
    }

    /// A shell or an interpreter reading its program from its input: shell code from a
    /// here-string or here-document of known text is walked as a nested line; anything else
    /// is code the analysis cannot see.
    fn program_from_input(&mut self, program: programs::FromInput) {
        match &self.stdin {
            Stdin::Text(text) if program.shell_code => {
                let text = text.clone();
                self.walk_nested(
                    &text,
                    Nested::Value,
                    "a command line a shell reads from its input",
                );
            }
            _ => self.hidden_code(program.why),
        }
    }

    pub(super) fn walk_substituted_list(&mut self, list: &CompoundList) {
        let mut inner = Walker {
            out: &mut *self.out,
            substitutions_seen: &mut *self.substitutions_seen,
            progress: &mut *self.progress,
            depth: self.depth + 1,
            nested: true,
            stdin: Stdin::Inherited,
        };
        inner.walk_list(list);
    }

    /// Command lines a command runs from its arguments (`sh -c`, `eval`, `find -exec`, an
    /// alias's value, a `trap` action, a `mapfile` callback), and builtins that change what
    /// later commands of the line mean in ways the analysis does not follow.
    pub(super) fn nested_commands(&mut self, name: &str, words: &[String], computed: &[bool]) {
        let args = &words[1..];
        if words
            .iter()
            .any(|word| word == "HOME" || word.starts_with("HOME="))
        {
            self.progress.home_changed = true;
        }
        if words.iter().any(|word| rewrites_lookup(word)) {
            self.unreadable(REWRITES_LOOKUP.to_owned());
        }
        match name {
            _ if SHELLS.contains(&name) => {
                let shell_args = if name == "busybox" {
                    args.get(1..).unwrap_or_default()
                } else {
                    args
                };
                if let Some(script) = shell_c_script(shell_args) {
                    self.walk_nested(script, Nested::Value, "a command line run by `sh -c`");
                    let at = words
                        .iter()
                        .position(|word| std::ptr::eq(word.as_str(), script));
                    if at.is_some_and(|at| computed.get(at).copied().unwrap_or(true)) {
                        self.hidden_code(format!(
                            "`{name} -c` of a command line computed at run time"
                        ));
                    }
                } else if let Some(program) = programs::reads_program_from_input(name, args) {
                    self.program_from_input(program);
                }
            }
            "eval" => {
                self.walk_nested(&args.join(" "), Nested::Value, "`eval`");
                if computed.iter().skip(1).any(|computed| *computed) {
                    self.hidden_code("`eval` of a command line computed at run time".to_owned());
                }
            }
            "alias" => {
                // With `expand_aliases` on, bash reads an alias's value as part of a later line.
                for value in args.iter().filter_map(|arg| arg.split_once('=')) {
                    self.walk_nested(value.1, Nested::Value, "an alias");
                }
                if args.is_empty() || args.iter().any(|arg| !arg.contains('=')) {
                    self.opaque("`alias`");
                }
            }
            "trap" => {
                let mut rest = args.iter().skip_while(|arg| arg.starts_with('-'));
                if let Some(action) = rest.next() {
                    self.walk_nested(action, Nested::Value, "a `trap` action");
                }
            }
            "mapfile" | "readarray" => {
                let callback = args
                    .iter()
                    .position(|arg| arg == "-C")
                    .and_then(|at| args.get(at + 1));
                if let Some(callback) = callback {
                    self.walk_nested(callback, Nested::Value, "a `mapfile` callback");
                }
            }
            "shopt" if args.iter().any(|arg| changes_parsing(arg)) => {
                self.unreadable("`shopt` changes how bash reads the rest of the line".to_owned());
            }
            "enable" => {
                self.unreadable("`enable`, which turns builtins off or loads new ones".to_owned());
            }
            "hash"
                if args
                    .iter()
                    .any(|arg| arg.starts_with('-') && arg.contains('p')) =>
            {
                self.unreadable(
                    "`hash -p`, which makes a command name run another program".to_owned(),
                );
            }
            _ if let Some(program) = programs::reads_program_from_input(name, args) => {
                self.program_from_input(program);
            }
            "find" => {
                let mut rest = args;
                while let Some(start) = rest
                    .iter()
                    .position(|w| matches!(w.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
                {
                    let payload = &rest[start + 1..];
                    let end = payload
                        .iter()
                        .position(|w| w == ";" || w == "+")
                        .unwrap_or(payload.len());
                    if end > 0 {
                        // find runs it directly: a command like any other, allow rules included.
                        let nested = self.nested;
                        self.push_layers(&[], &payload[..end], &[]);
                        self.nested = nested;
                    }
                    rest = &payload[end.min(payload.len())..];
                }
            }
            _ => {}
        }
    }
}

/// `shopt` options that change how bash parses what follows (`extglob`) or what a command
/// name means (`expand_aliases`).
fn changes_parsing(arg: &str) -> bool {
    matches!(arg, "extglob" | "expand_aliases")
}

/// `word` quoted for bash, so that a nested line keeps it one word.
pub(super) fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The script of `sh [options] -c SCRIPT …`, `-c` possibly combined (`-ec`, `-lc`).
fn shell_c_script(args: &[String]) -> Option<&str> {
    let mut index = 0;
    let mut wants_script = false;
    while let Some(arg) = args.get(index) {
        if wants_script {
            return Some(arg);
        }
        if arg == "--" || !arg.starts_with('-') && !arg.starts_with('+') {
            return None;
        }
        if arg.starts_with('-') && !arg.starts_with("--") && arg.contains('c') {
            wants_script = true;
        }
        // `-o option` takes the next word.
        if arg == "-o" || arg == "+o" {
            index += 1;
        }
        index += 1;
    }
    None
}
