//! Wrappers a command line runs other commands through (`env`, `timeout`, `sudo`, `xargs`, …):
//! which words are the wrapper's own options, which command it runs, and what else an option
//! does that the permission engine must judge (a command line in `env -S`, a file `xargs -a`
//! reads, a file `time -o` writes).
//!
//! Options are read as the wrapper reads them (getopt: clustered short options, a value glued
//! to its option or in the next word, `--long=value`, `--`), from a table of the options each
//! wrapper has. An option missing from the table could change what runs (`env -S`, which was
//! once skipped as an unknown word): such a wrapper is [`Unwrapped::unknown_option`], and the
//! line opaque to allow rules.

/// Wrappers that elevate privileges: transparent to deny and ask, never to allow.
pub(super) const PRIVILEGE_WRAPPERS: &[&str] = &["sudo", "doas", "chroot"];

/// What a wrapper does with its arguments.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Unwrapped<'a> {
    /// `VAR=value` words the wrapper sets for the command (`env`).
    pub(super) assignments: Vec<String>,
    /// The command it runs, as words (empty: it runs nothing, as `env` alone prints).
    pub(super) command: &'a [String],
    /// A command line the wrapper splits and runs in front of `command` (`env -S`).
    pub(super) split_line: Option<String>,
    /// Files it reads (`xargs -a`).
    pub(super) reads: Vec<String>,
    /// Files it writes (`time -o`).
    pub(super) writes: Vec<String>,
    /// Why the analysis cannot tell what it runs: an option it does not know, or one that
    /// makes it run something else (`sudo -s`, `sudo -e`).
    pub(super) unknown_option: Option<String>,
    /// Its command's arguments come from its input, not from the line (`xargs`).
    pub(super) arguments_from_input: bool,
}

/// What an option of a wrapper is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A flag: no value.
    Flag,
    /// Takes a value (glued, after `=`, or the next word).
    Value,
    /// Takes a value only when glued or after `=` (`xargs -i[R]`, `env --ignore-signal[=SIG]`).
    OptionalValue,
    /// Changes what the wrapper runs beyond the analysis (a shell, an editor).
    Opaque,
    /// Its value is a command line the wrapper runs (`env -S`).
    Line,
    /// Its value is a file the wrapper reads.
    ReadsFile,
    /// Its value is a file the wrapper writes.
    WritesFile,
    /// Its value is the directory the command runs in (`env -C`, `sudo -D`): every path of
    /// the command, as the rules read it, would lead elsewhere than it does.
    ChangesDirectory,
}

/// One option: its short letter (or none) and long name (or none).
struct Opt(Option<char>, Option<&'static str>, Kind);

/// The options of one wrapper, and how many positional words come before its command.
struct Table {
    options: &'static [Opt],
    positional: usize,
    /// `nice -10`: a short option made of digits only.
    numeric_short: bool,
}

use Kind::{ChangesDirectory, Flag, Line, Opaque, OptionalValue, ReadsFile, Value, WritesFile};

const ENV: &[Opt] = &[
    Opt(Some('i'), Some("ignore-environment"), Flag),
    Opt(Some('0'), Some("null"), Flag),
    Opt(Some('v'), Some("debug"), Flag),
    Opt(Some('u'), Some("unset"), Value),
    Opt(Some('C'), Some("chdir"), ChangesDirectory),
    Opt(Some('S'), Some("split-string"), Line),
    Opt(None, Some("block-signal"), OptionalValue),
    Opt(None, Some("default-signal"), OptionalValue),
    Opt(None, Some("ignore-signal"), OptionalValue),
    Opt(None, Some("list-signal-handling"), Flag),
];
const COMMAND: &[Opt] = &[Opt(Some('p'), None, Flag)];
const EXEC: &[Opt] = &[
    Opt(Some('a'), None, Value),
    Opt(Some('c'), None, Flag),
    Opt(Some('l'), None, Flag),
];
const TIME: &[Opt] = &[
    Opt(Some('p'), Some("portability"), Flag),
    Opt(Some('v'), Some("verbose"), Flag),
    Opt(Some('q'), Some("quiet"), Flag),
    Opt(Some('a'), Some("append"), Flag),
    Opt(Some('f'), Some("format"), Value),
    Opt(Some('o'), Some("output"), WritesFile),
];
const SETSID: &[Opt] = &[
    Opt(Some('c'), Some("ctty"), Flag),
    Opt(Some('f'), Some("fork"), Flag),
    Opt(Some('w'), Some("wait"), Flag),
];
const NICE: &[Opt] = &[Opt(Some('n'), Some("adjustment"), Value)];
const IONICE: &[Opt] = &[
    Opt(Some('c'), Some("class"), Value),
    Opt(Some('n'), Some("classdata"), Value),
    Opt(Some('t'), Some("ignore"), Flag),
];
const TIMEOUT: &[Opt] = &[
    Opt(Some('s'), Some("signal"), Value),
    Opt(Some('k'), Some("kill-after"), Value),
    Opt(Some('f'), Some("foreground"), Flag),
    Opt(Some('p'), Some("preserve-status"), Flag),
    Opt(Some('v'), Some("verbose"), Flag),
];
const STDBUF: &[Opt] = &[
    Opt(Some('i'), Some("input"), Value),
    Opt(Some('o'), Some("output"), Value),
    Opt(Some('e'), Some("error"), Value),
];
const XARGS: &[Opt] = &[
    Opt(Some('0'), Some("null"), Flag),
    Opt(Some('a'), Some("arg-file"), ReadsFile),
    Opt(Some('d'), Some("delimiter"), Value),
    Opt(Some('E'), None, Value),
    Opt(Some('e'), Some("eof"), OptionalValue),
    Opt(Some('I'), None, Value),
    Opt(Some('i'), Some("replace"), OptionalValue),
    Opt(Some('L'), Some("max-lines"), Value),
    Opt(Some('l'), None, OptionalValue),
    Opt(Some('n'), Some("max-args"), Value),
    Opt(Some('P'), Some("max-procs"), Value),
    Opt(Some('p'), Some("interactive"), Flag),
    Opt(None, Some("process-slot-var"), Value),
    Opt(Some('r'), Some("no-run-if-empty"), Flag),
    Opt(Some('s'), Some("max-chars"), Value),
    Opt(Some('t'), Some("verbose"), Flag),
    Opt(Some('x'), Some("exit"), Flag),
    Opt(Some('o'), Some("open-tty"), Flag),
];
const SUDO: &[Opt] = &[
    Opt(Some('A'), Some("askpass"), Flag),
    Opt(Some('b'), Some("background"), Flag),
    Opt(Some('E'), Some("preserve-env"), OptionalValue),
    Opt(Some('H'), Some("set-home"), Flag),
    Opt(Some('k'), Some("reset-timestamp"), Flag),
    Opt(Some('n'), Some("non-interactive"), Flag),
    Opt(Some('P'), Some("preserve-groups"), Flag),
    Opt(Some('S'), Some("stdin"), Flag),
    Opt(Some('C'), Some("close-from"), Value),
    Opt(Some('D'), Some("chdir"), ChangesDirectory),
    Opt(Some('g'), Some("group"), Value),
    Opt(Some('h'), Some("host"), Value),
    Opt(Some('p'), Some("prompt"), Value),
    Opt(Some('R'), Some("chroot"), Value),
    Opt(Some('r'), Some("role"), Value),
    Opt(Some('T'), Some("command-timeout"), Value),
    Opt(Some('t'), Some("type"), Value),
    Opt(Some('U'), Some("other-user"), Value),
    Opt(Some('u'), Some("user"), Value),
    // A shell, a login shell, an editor: the command is not the words that follow.
    Opt(Some('s'), Some("shell"), Opaque),
    Opt(Some('i'), Some("login"), Opaque),
    Opt(Some('e'), Some("edit"), Opaque),
    Opt(Some('l'), Some("list"), Opaque),
    Opt(Some('v'), Some("validate"), Opaque),
    Opt(Some('K'), Some("remove-timestamp"), Opaque),
];
const DOAS: &[Opt] = &[
    Opt(Some('n'), None, Flag),
    Opt(Some('u'), None, Value),
    Opt(Some('C'), None, Opaque),
    Opt(Some('s'), None, Opaque),
    Opt(Some('L'), None, Opaque),
];
const CHROOT: &[Opt] = &[
    Opt(None, Some("userspec"), Value),
    Opt(None, Some("groups"), Value),
    Opt(None, Some("skip-chdir"), Flag),
];
const NONE: &[Opt] = &[];

/// The option table of a wrapper; `None` when `name` is no wrapper.
fn table(name: &str) -> Option<Table> {
    let (options, positional, numeric_short) = match name {
        "env" => (ENV, 0, false),
        "command" => (COMMAND, 0, false),
        "builtin" | "nohup" => (NONE, 0, false),
        "exec" => (EXEC, 0, false),
        "time" => (TIME, 0, false),
        "setsid" => (SETSID, 0, false),
        "nice" => (NICE, 0, true),
        "ionice" => (IONICE, 0, false),
        "timeout" => (TIMEOUT, 1, false),
        "stdbuf" => (STDBUF, 0, false),
        "xargs" => (XARGS, 0, false),
        "sudo" => (SUDO, 0, false),
        "doas" => (DOAS, 0, false),
        "chroot" => (CHROOT, 1, false),
        _ => return None,
    };
    Some(Table {
        options,
        positional,
        numeric_short,
    })
}

/// The command a wrapper runs, past the wrapper's own options, and what its options do;
/// `None` if `name` is no wrapper.
pub(super) fn unwrap<'a>(name: &str, args: &'a [String]) -> Option<Unwrapped<'a>> {
    let table = table(name)?;
    let mut unwrapped = Unwrapped {
        arguments_from_input: name == "xargs",
        ..Unwrapped::default()
    };
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        index += 1;
        if arg == "--" {
            break;
        }
        if name == "env" && !arg.starts_with('-') && arg.contains('=') {
            unwrapped.assignments.push(arg.clone());
            continue;
        }
        if name == "env" && arg == "-" {
            // `env -` is `env -i`.
            continue;
        }
        if !arg.starts_with('-') || arg.len() == 1 {
            index -= 1;
            break;
        }
        let taken = if let Some(long) = arg.strip_prefix("--") {
            long_option(&table, name, long, args.get(index), &mut unwrapped)
        } else {
            short_options(&table, name, &arg[1..], args.get(index), &mut unwrapped)
        };
        // After an unknown option the words go on being read as if it were a flag: the
        // command they reach is still searched by deny and ask rules.
        index += usize::from(taken);
    }
    // `timeout 5 cmd`, `chroot DIR cmd`: positional arguments before the command.
    index += table.positional;
    unwrapped.command = args.get(index..).unwrap_or_default();
    Some(unwrapped)
}

/// One `--name[=value]`; returns whether it took the next word as its value.
fn long_option(
    table: &Table,
    wrapper: &str,
    option: &str,
    next: Option<&String>,
    unwrapped: &mut Unwrapped<'_>,
) -> bool {
    let (name, glued) = match option.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (option, None),
    };
    // getopt accepts any unambiguous prefix of a long option.
    let mut matching = table
        .options
        .iter()
        .filter(|Opt(_, long, _)| long.is_some_and(|long| long.starts_with(name)));
    let exact = table
        .options
        .iter()
        .find(|Opt(_, long, _)| *long == Some(name));
    let found = exact.or_else(|| {
        let first = matching.next();
        if matching.next().is_some() {
            None
        } else {
            first
        }
    });
    let Some(Opt(_, _, kind)) = found.filter(|_| !name.is_empty()) else {
        unwrapped
            .unknown_option
            .get_or_insert_with(|| format!("an option `--{name}` of `{wrapper}`"));
        return false;
    };
    let (value, took_next) = match (kind, glued) {
        (Flag | Opaque, _) | (OptionalValue, None) => (None, false),
        (_, Some(value)) => (Some(value.to_owned()), false),
        (_, None) => (next.cloned(), true),
    };
    apply(*kind, wrapper, &format!("--{name}"), value, unwrapped);
    took_next
}

/// One word of clustered short options (`-iu`, `-nPATH`, `-10`); returns whether the next
/// word was taken as a value.
fn short_options(
    table: &Table,
    wrapper: &str,
    cluster: &str,
    next: Option<&String>,
    unwrapped: &mut Unwrapped<'_>,
) -> bool {
    if table.numeric_short && cluster.chars().all(|c| c.is_ascii_digit()) {
        return false;
    }
    for (at, letter) in cluster.char_indices() {
        let Some(Opt(_, _, kind)) = table
            .options
            .iter()
            .find(|Opt(short, _, _)| *short == Some(letter))
        else {
            unwrapped
                .unknown_option
                .get_or_insert_with(|| format!("an option `-{letter}` of `{wrapper}`"));
            return false;
        };
        let rest = &cluster[at + letter.len_utf8()..];
        match kind {
            Flag | Opaque => apply(*kind, wrapper, &format!("-{letter}"), None, unwrapped),
            OptionalValue => {
                let value = (!rest.is_empty()).then(|| rest.to_owned());
                apply(*kind, wrapper, &format!("-{letter}"), value, unwrapped);
                return false;
            }
            Value | Line | ReadsFile | WritesFile | ChangesDirectory => {
                let (value, took_next) = if rest.is_empty() {
                    (next.cloned(), true)
                } else {
                    (Some(rest.to_owned()), false)
                };
                apply(*kind, wrapper, &format!("-{letter}"), value, unwrapped);
                return took_next;
            }
        }
    }
    false
}

/// Records what an option does.
fn apply(
    kind: Kind,
    wrapper: &str,
    option: &str,
    value: Option<String>,
    unwrapped: &mut Unwrapped<'_>,
) {
    let missing = || format!("`{wrapper} {option}` without its value");
    match (kind, value) {
        (Flag | Value | OptionalValue, _) => {}
        (ChangesDirectory, _) => {
            unwrapped.unknown_option.get_or_insert_with(|| {
                format!(
                    "`{wrapper} {option}`, which runs the command in another directory than \
                     the one its paths are judged from"
                )
            });
        }
        (Opaque, _) => {
            unwrapped.unknown_option.get_or_insert_with(|| {
                format!(
                    "`{wrapper} {option}`, which runs something other than the words that follow"
                )
            });
        }
        (Line, Some(line)) => {
            // Several `-S` are concatenated, each split in turn.
            let joined = match unwrapped.split_line.take() {
                Some(before) => format!("{before} {line}"),
                None => line,
            };
            unwrapped.split_line = Some(joined);
        }
        (ReadsFile, Some(path)) => unwrapped.reads.push(path),
        (WritesFile, Some(path)) => unwrapped.writes.push(path),
        (Line | ReadsFile | WritesFile, None) => {
            unwrapped.unknown_option.get_or_insert_with(missing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    fn command(name: &str, line: &str) -> Vec<String> {
        let args = words(line);
        unwrap(name, &args).expect("a wrapper").command.to_vec()
    }

    #[test]
    fn options_are_read_as_getopt_reads_them() {
        assert_eq!(command("timeout", "-s KILL 5 rm x"), ["rm", "x"]);
        assert_eq!(command("timeout", "-sKILL -k1 5 rm x"), ["rm", "x"]);
        assert_eq!(command("timeout", "--signal=KILL 5 rm x"), ["rm", "x"]);
        assert_eq!(command("timeout", "--sig KILL 5 rm x"), ["rm", "x"]);
        assert_eq!(command("nice", "-n 3 rm x"), ["rm", "x"]);
        assert_eq!(command("nice", "-10 rm x"), ["rm", "x"]);
        assert_eq!(command("env", "-iu HOME A=1 rm x"), ["rm", "x"]);
        assert_eq!(command("env", "- A=1 -- rm x"), ["rm", "x"]);
        assert_eq!(command("xargs", "-0 -n1 -I{} rm {}"), ["rm", "{}"]);
        assert_eq!(command("sudo", "-u root -- rm x"), ["rm", "x"]);
        assert_eq!(command("chroot", "--userspec=a:b /srv rm x"), ["rm", "x"]);
    }

    #[test]
    fn env_split_string_is_a_command_line_in_every_spelling() {
        // Each inner list is the words the shell passes, the split string one word.
        for args in [
            &["-S", "touch P", "echo", "hi"][..],
            &["-Stouch P", "echo", "hi"],
            &["--split-string=touch P", "echo", "hi"],
            &["--split-string", "touch P", "echo", "hi"],
            &["--split", "touch P", "echo", "hi"],
            &["-iS", "touch P", "echo", "hi"],
            &["-i", "-S", "touch P", "echo", "hi"],
        ] {
            let line = args.join(" ");
            let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
            let unwrapped = unwrap("env", &args).expect("env");
            assert!(unwrapped.unknown_option.is_none(), "{line}");
            assert!(
                unwrapped
                    .split_line
                    .as_deref()
                    .is_some_and(|split| split.contains("touch")),
                "{line}: {unwrapped:?}"
            );
        }
    }

    #[test]
    fn an_unknown_option_or_one_that_runs_something_else_is_reported() {
        for (name, line) in [
            ("env", "--frobnicate echo hi"),
            ("env", "-X echo hi"),
            ("timeout", "--bogus 5 echo hi"),
            ("sudo", "-s echo hi"),
            ("sudo", "-e /etc/passwd"),
            ("nice", "-x echo"),
            ("xargs", "--what echo"),
            ("env", "-S"),
        ] {
            let args = words(line);
            let unwrapped = unwrap(name, &args).expect("a wrapper");
            assert!(unwrapped.unknown_option.is_some(), "{name} {line}");
        }
    }

    #[test]
    fn files_options_read_and_write_are_reported() {
        let args = words("-a /etc/hostname echo");
        let xargs = unwrap("xargs", &args).expect("xargs");
        assert_eq!(xargs.reads, ["/etc/hostname"]);
        assert!(xargs.arguments_from_input);
        let args = words("--arg-file=secret echo");
        assert_eq!(unwrap("xargs", &args).expect("xargs").reads, ["secret"]);
        let args = words("-o /outside/f true");
        assert_eq!(unwrap("time", &args).expect("time").writes, ["/outside/f"]);
    }
}
