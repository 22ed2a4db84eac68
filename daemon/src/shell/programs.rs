//! Where a shell or an interpreter takes its program from: its arguments (`sh -c`, `python3
//! -c`), a script file, or its standard input — which, fed by a pipe, a redirection or a
//! here-document, holds code the analysis may not see (`echo rm x | bash`, `bash <<< "rm x"`,
//! `sh -s < f`, `python3 - <<EOF`).

/// Shells whose `-c` argument is itself a command line.
pub(super) const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"];

/// Interpreters that run a program read from their standard input when given none (or `-`),
/// with the options of each that take an argument (`python3 -W arg`) and those that give the
/// program inline (`python3 -c code`: not read from the input).
const INTERPRETERS: &[(&str, &[&str], &[&str])] = &[
    (
        "python",
        &["-W", "-X", "--check-hash-based-pycs"],
        &["-c", "-m"],
    ),
    ("pypy", &["-W", "-X"], &["-c", "-m"]),
    (
        "perl",
        &["-I", "-M", "-m", "-x", "-C", "-0", "-l", "-i", "-d", "-D"],
        &["-e", "-E"],
    ),
    (
        "ruby",
        &["-I", "-r", "-C", "-E", "-F", "-x", "-0", "-K", "-T", "-W"],
        &["-e"],
    ),
    (
        "node",
        &[
            "-r",
            "--require",
            "--import",
            "--loader",
            "--experimental-loader",
            "--input-type",
            "-C",
            "--conditions",
            "--env-file",
        ],
        &["-e", "--eval", "-p", "--print"],
    ),
    (
        "nodejs",
        &["-r", "--require", "--import", "--loader", "--input-type"],
        &["-e", "--eval", "-p", "--print"],
    ),
    ("deno", &[], &["eval"]),
    ("php", &["-c", "-d", "-z"], &["-r", "-f", "-S", "-a"]),
    ("lua", &["-l"], &["-e"]),
    ("luajit", &["-l", "-j", "-O"], &["-e"]),
    ("tclsh", &["-encoding"], &[]),
    ("wish", &["-encoding"], &[]),
    ("expect", &["-c"], &["-c"]),
    ("Rscript", &["--default-packages"], &["-e"]),
    ("osascript", &["-l", "-s"], &["-e"]),
];

/// The names a file given as a script can have and still be the standard input.
const STDIN_NAMES: [&str; 4] = ["-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];

/// A program read from the standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FromInput {
    /// Why, for a person: "`bash` reading its commands from its input".
    pub why: String,
    /// Shell code (a shell's, `source`'s): a text known in advance can be walked as a line.
    pub shell_code: bool,
}

/// What `name` (a basename) runs when given `args`: `Some` when it reads its program from its
/// standard input.
pub(super) fn reads_program_from_input(name: &str, args: &[String]) -> Option<FromInput> {
    let shell = |why: String| FromInput {
        why,
        shell_code: true,
    };
    let other = |why: String| FromInput {
        why,
        shell_code: false,
    };
    if SHELLS.contains(&name) {
        let args = if name == "busybox" {
            // `busybox sh …`: only its shells.
            match args.split_first() {
                Some((applet, rest)) if SHELLS.contains(&applet.as_str()) => rest,
                _ => return None,
            }
        } else {
            args
        };
        return shell_reads_input(args)
            .then(|| shell(format!("`{name}` reading its commands from its input")));
    }
    if matches!(name, "source" | ".") {
        return args
            .first()
            .is_some_and(|file| STDIN_NAMES[1..].contains(&file.as_str()))
            .then(|| shell(format!("`{name}` reading commands from its input")));
    }
    if let Some(file) = awk_program_file(name, args) {
        return STDIN_NAMES
            .contains(&file)
            .then(|| other(format!("`{name}` reading its program from its input")));
    }
    let (_, with_argument, inline) = INTERPRETERS
        .iter()
        .find(|(interpreter, _, _)| is_version_of(name, interpreter))?;
    interpreter_reads_input(args, with_argument, inline)
        .then(|| other(format!("`{name}` reading its program from its input")))
}

/// `python3`, `python3.12`, `python` for `python`; `perl5.36` for `perl`.
fn is_version_of(name: &str, interpreter: &str) -> bool {
    name.strip_prefix(interpreter).is_some_and(|version| {
        version.is_empty() || version.chars().all(|c| c.is_ascii_digit() || c == '.')
    })
}

/// A shell without `-c` runs a script file named by its first operand; with none, or with
/// `-s`, or with the input's own name, it reads commands from its input.
fn shell_reads_input(args: &[String]) -> bool {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return rest
                .next()
                .is_none_or(|file| STDIN_NAMES.contains(&file.as_str()));
        }
        if arg.starts_with("--") {
            // `--rcfile FILE`, `--init-file FILE` take one.
            if matches!(arg.as_str(), "--rcfile" | "--init-file") {
                rest.next();
            }
            continue;
        }
        if let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) {
            if flags.is_empty() {
                // `bash -` is the input.
                return true;
            }
            if flags.contains('c') {
                return false;
            }
            if flags.contains('s') {
                return true;
            }
            // `-o option`, `-O shopt_option` take one.
            if flags.ends_with('o') || flags.ends_with('O') {
                rest.next();
            }
            continue;
        }
        return STDIN_NAMES.contains(&arg.as_str());
    }
    true
}

/// An interpreter runs the program its first operand names, or one given inline; with none,
/// it reads it from its input.
fn interpreter_reads_input(args: &[String], with_argument: &[&str], inline: &[&str]) -> bool {
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return rest
                .next()
                .is_none_or(|file| STDIN_NAMES.contains(&file.as_str()));
        }
        let option = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        if inline.iter().any(|given| {
            option == *given || arg.starts_with(given) && given.len() == 2 && !arg.starts_with("--")
        }) {
            return false;
        }
        if arg == "-" {
            return true;
        }
        if arg.starts_with('-') {
            if with_argument.contains(&option) && !arg.contains('=') && option.len() == arg.len() {
                rest.next();
            }
            continue;
        }
        return STDIN_NAMES.contains(&arg.as_str());
    }
    true
}

/// The program file of an awk given one with `-f` (`-f FILE`, `-fFILE`, `--file=FILE`).
fn awk_program_file<'a>(name: &str, args: &'a [String]) -> Option<&'a str> {
    if !matches!(name, "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk") {
        return None;
    }
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "-f" || arg == "--file" {
            return rest.next().map(String::as_str);
        }
        if let Some(file) = arg
            .strip_prefix("--file=")
            .or_else(|| arg.strip_prefix("-f"))
        {
            return Some(file);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(line: &str) -> bool {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        reads_program_from_input(&words[0], &words[1..]).is_some()
    }

    #[test]
    fn programs_that_read_their_code_from_their_input_are_known() {
        for line in [
            "bash",
            "sh -s",
            "bash -",
            "bash /dev/stdin",
            "sh -s -- a b",
            "bash -x",
            "zsh -o errexit",
            "bash --norc",
            "busybox sh",
            "python3",
            "python3 -",
            "python3.12 -u",
            "python -W ignore",
            "perl",
            "perl -w -",
            "ruby",
            "node",
            "node -",
            "php",
            "lua -",
            "source /dev/stdin",
            ". /dev/fd/0",
            "awk -f -",
            "gawk --file=/dev/stdin",
            "bash -- /dev/stdin",
        ] {
            assert!(reads(line), "{line}");
        }
        for line in [
            "bash -c x",
            "bash script.sh",
            "sh -e script.sh",
            "bash -o errexit script.sh",
            "python3 -c x",
            "python3 -m pytest",
            "python3 test.py",
            "perl -e 1",
            "perl -E 1",
            "ruby -e 1",
            "node -e 1",
            "node --eval=1",
            "node app.js",
            "php -r 1",
            "lua x.lua",
            "source env.sh",
            "awk 1",
            "awk -f prog.awk",
            "bash --rcfile rc script.sh",
            "busybox ls",
            "cat",
        ] {
            assert!(!reads(line), "{line}");
        }
    }
}
