//! The variables a line assigns or names: a loop variable programs may read counts as an
//! assignment, a name bash evaluates (a subscript runs commands) is opaque, and an assignment
//! to bash's lookup tables makes the line unreadable.

use super::Walker;
use super::expansion::Expanded;

/// Builtins whose operands bash takes as variable names (or, for `let`, as arithmetic) and
/// evaluates: a subscript in a name runs the commands in it.
const NAME_TAKING_BUILTINS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "unset",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "getopts",
    "wait",
    "let",
    "printf",
    "test",
    "[",
];

impl Walker<'_> {
    /// A `for` loop assigns its variable each value in turn (and `coproc NAME` assigns NAME).
    /// For a variable that bash or the programs it runs may read (a name with a capital
    /// letter, as bash's own and the environment's are, `PATH`, `HOME`, `GIT_DIR`; or a
    /// `*_proxy`), that is an assignment like a bare `NAME=value`, which allow rules must
    /// cover (`for PATH in /tmp/x; do git status; done` is not `git status`). A lowercase loop
    /// variable reaches no program unless the line exports it, which is a command of its own.
    pub(super) fn loop_variable(&mut self, name: &str, values: &[String]) {
        if rewrites_lookup(name) {
            self.unreadable(REWRITES_LOOKUP.to_owned());
        }
        if name == "HOME" {
            self.progress.home_changed = true;
        }
        let read_by_others =
            name.bytes().any(|byte| byte.is_ascii_uppercase()) || name.ends_with("_proxy");
        if read_by_others {
            let form = if values.is_empty() {
                format!("{name}=")
            } else {
                values
                    .iter()
                    .map(|value| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            self.push_command(vec![form.clone()], vec![form], Vec::new());
        }
    }

    /// A word that bash takes as a variable's name (`printf -v NAME`, `read NAME`, `[[ -v NAME ]]`)
    /// and evaluates: a subscript in it (`a[$(cmd)]`) runs commands, so a name that is computed
    /// or has a subscript is opaque.
    pub(super) fn variable_name(&mut self, name: &Expanded) {
        let subscripted = name.text.as_deref().is_none_or(|text| text.contains('['));
        if name.dynamic || subscripted {
            self.opaque("a variable name that is computed or subscripted, which bash evaluates");
        }
    }

    /// The words of builtins that name variables, each judged by [`Self::variable_name`]. For
    /// the builtins that take names as operands every operand counts (an option's value too:
    /// rough in the safe direction); for `printf` only `-v`'s value, for `test` the word after
    /// `-v` or `-R`; `let` evaluates each argument as arithmetic.
    pub(super) fn names_taken(&mut self, name: &str, arguments: &[String], computed: &[bool]) {
        if !NAME_TAKING_BUILTINS.contains(&name) {
            return;
        }
        let word = |index: usize, text: &str| Expanded {
            text: Some(text.to_owned()),
            dynamic: computed.get(index).copied().unwrap_or(true),
            unquoted: Vec::new(),
        };
        // `declare -n r=VALUE` makes VALUE a name that every later `$r` evaluates.
        let nameref = arguments
            .iter()
            .any(|argument| argument.starts_with('-') && argument.contains('n'));
        for (index, argument) in arguments.iter().enumerate() {
            match name {
                "let" => self.walk_arithmetic(argument),
                "printf" => {
                    if argument == "-v" {
                        if let Some(next) = arguments.get(index + 1) {
                            self.variable_name(&word(index + 1, next));
                        }
                    } else if let Some(attached) = argument.strip_prefix("-v") {
                        self.variable_name(&word(index, attached));
                    }
                }
                "test" | "[" => {
                    if (argument == "-v" || argument == "-R")
                        && let Some(next) = arguments.get(index + 1)
                    {
                        self.variable_name(&word(index + 1, next));
                    }
                }
                // The name is what comes before `=`; the value is data.
                _ => match argument.split_once('=') {
                    Some((named, value)) => {
                        self.variable_name(&Expanded {
                            text: Some(named.to_owned()),
                            dynamic: named.contains(['$', '`']),
                            unquoted: Vec::new(),
                        });
                        if nameref {
                            self.variable_name(&word(index, value));
                        }
                    }
                    None => self.variable_name(&word(index, argument)),
                },
            }
        }
    }
}

/// Why a line that assigns one of bash's lookup tables cannot be read.
pub(super) const REWRITES_LOOKUP: &str =
    "an assignment to BASH_CMDS or BASH_ALIASES, which changes what a command name runs";

/// An assignment (or `declare` argument) to the tables bash looks command names up in.
pub(super) fn rewrites_lookup(word: &str) -> bool {
    ["BASH_CMDS", "BASH_ALIASES"]
        .iter()
        .any(|table| word.starts_with(table))
}
