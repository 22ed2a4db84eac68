//! The command-line analysis against real bash: lines the permission engine allows under
//! `run_command(echo *)` and `run_command(git status)` (a hand-written table, the committed
//! seeds of the `command_line` fuzz target, and lines from a small seeded grammar) run under
//! strace with a `PATH` of stubs (`toold_tests::bash_trace`); bash must run no program and
//! write no file that the analysis did not list.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use toold_tests::bash_trace::{self, Finding, Stubs};
use toold_tests::{XorShift, require};

/// What the table expects of a line.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Expect {
    /// The engine allows it (anything else is a mistake in the table), and bash does nothing
    /// the analysis missed.
    Allowed,
    /// The engine does not allow it.
    NotAllowed,
    /// Hostile: not allowed, or allowed and bash does nothing the analysis missed.
    Either,
}

use Expect::{Allowed, Either, NotAllowed};

/// Lines the engine allows, one construct of bash at a time.
const ALLOWED: &[&str] = &[
    "echo hi",
    "git status",
    "echo 'single quoted; rm -rf / > /etc/x'",
    "echo \"double $HOME and $x\"",
    "echo $'ansi\\tC\\n\\x41\\u00e9'",
    "echo $'it\\'s'",
    "echo $\"locale string\"",
    "echo *",
    "echo *.txt sub/* ?.txt [ab].txt",
    "echo hi > out.txt",
    "echo hi >> out.txt",
    "echo hi >| out.txt",
    "echo hi &> out.txt",
    "echo hi &>> out.txt",
    "echo hi 2>&1",
    "echo hi >&2",
    "echo hi 1>&2 2>&1",
    "echo hi > /dev/null",
    "echo hi 2>/dev/null",
    "echo hi >out.txt 2>err.txt",
    "echo hi 1>out.txt",
    "echo hi 2>>err.txt",
    "echo hi>out.txt",
    "echo hi > \"out file.txt\"",
    "echo hi > 'quoted.txt'",
    "echo hi > sub/new.txt",
    "echo hi > ./sub/../d.txt",
    "echo hi > a.txt",
    "echo hi < a.txt",
    "echo <<EOF\nbody $HOME\nEOF",
    "echo <<-EOF\n\tindented\n\tEOF",
    "echo <<< \"here string\"",
    "echo <<< 'id > /tmp/x'",
    "echo $((1 + 2))",
    "echo \"$(( 2 * 3 ))\"",
    "echo hi # comment > /etc/passwd",
    "echo hi #; id",
    "echo a \\\n  b",
    "echo a; echo b",
    "echo a && git status",
    "echo a || echo b",
    "echo a | echo b",
    "echo a & echo b",
    "echo a\necho b",
    "echo a;\n\ngit status",
    "git status 2>&1 | echo",
    "git status > status.txt",
    "env echo hi",
    "command echo hi",
    "nice echo hi",
    "timeout 5 echo hi",
    "nice -n 5 git status",
    "echo ~",
    "echo ~/x",
    "echo \"a b\" 'c d' e\\ f",
    "echo -e 'a\\nb'",
    "echo -n x",
    "{ echo a; echo b; } > out.txt",
    "( echo a; echo b )",
    "for i in 1 2 3; do echo $i; done",
    "case x in x) echo x;; esac",
    "echo \\$HOME \\`id\\`",
    "echo \"it's\" '\"q\"'",
    "echo $RANDOM $$ $? $#",
    "echo ${x:-default} ${#x} ${x%y}",
    "echo hi > {out}.txt",
    "echo '$(id)' '`id`'",
];

/// Lines the engine must not allow: their commands are not `echo` or `git status`, or they
/// write outside the root.
const NOT_ALLOWED: &[&str] = &[
    "echo hi > /tmp/x",
    "echo hi > ../x",
    "echo hi > link",
    "echo hi > dirlink/x",
    "echo hi > ~/x",
    "echo hi; id",
    "git status; git push",
    "echo $(id)",
    "echo `id`",
    "echo <(id)",
    "env FOO=1 echo hi",
    "git status --porcelain > status.txt",
    // Brace expansions, `~+`, `~-`, and a here-document body that the substitution count
    // cannot tell from code: the analysis makes these opaque, and the engine asks.
    "echo {a,b,c}",
    "echo {1..5} x{a,b}y",
    "echo ~+ ~-",
    "echo <<'EOF'\n$(id) `id` > /tmp/x\nEOF",
];

/// Hostile lines: not allowed, or allowed and harmless. Each aims at a place where the
/// analysis and bash could read a line differently.
const HOSTILE: &[&str] = &[
    // Found by fuzzing: bash takes 0x7f and 0x01 in its input for its own quoting marks, and
    // a word of 0x7f alone is the empty string to it.
    "echo hi >>.tot \u{7f}>& \u{7f}>&1",
    "echo hi > \u{7f}",
    "echo hi > a\u{1}b",
    // Found by this test: bash expands a redirection's glob to the one file it matches (a
    // link out of the root, git's config), which the analysis listed by its pattern.
    "echo hi > a*",
    "echo hi > l*",
    "echo hi > .git/conf*",
    "echo hi >> l*",
    "echo hi &> .git/con?ig",
    "echo hi > [l]ink",
    "echo hi 2> ./l*",
    "echo hi >| d*/x",
    "echo hi > \"l\"*",
    // Found by the fuzz target: a command name with blanks (bash runs a program named
    // `echo b 9"c $HOME" $ox42`), whose form read as `echo`'s.
    "echo' b'' 9\"c $HOME\" $'\\ox'42' $\"m\"",
    "'echo x' y",
    // Found by the fuzz target: `( (` is arithmetic to the parser, two subshells to bash.
    "echo hi;( (1>~/9))",
    "echo $'\\' ; id > P #'",
    "echo hi; [[ a > /tmp/x ]]",
    "echo hi; ((1>~/9))",
    "env -S 'touch P' echo hi",
    "env -S'touch P' echo hi",
    "echo x > ~root/f",
    "echo {a,b} > {x,}",
    "echo hi > dirl*/x",
    "echo hi > *.txt",
    "echo hi > $HOME/x",
    "echo hi > ${HOME}/x",
    "echo hi > \"$x\"",
    "x=/tmp/y; echo hi > $x",
    "echo hi > ~+/x",
    "echo hi > ~-/x",
    "cd /tmp; echo hi > x",
    "cd sub && echo hi > x",
    "echo hi > $'/tmp/x'",
    "echo hi > \"/tmp\"/x",
    "echo hi\\#> /tmp/x",
    "echo hi;#\nid",
    "echo a\\\n> /tmp/x",
    "echo hi > $0",
    "echo hi > $PWD/../x",
    "echo hi >& /tmp/x",
    "echo hi >&/tmp/x",
    // Found by the fuzz target: bash expands the file name of `>&WORD` a second time
    // (`1'ech/w` judged, `1ech/w` written), and a substitution quoted the first time runs then.
    "echo>&1\\'ech/w  od#",
    "echo hi >&'$(id)'",
    "echo hi >& '$(id)'",
    "echo hi 1>&\"\\$(id)\"",
    "echo hi >&'`id`'",
    "echo hi >&1'$(id)'",
    "echo hi >&'$HOME'/x",
    "echo hi >&'~'/x",
    "echo hi >&\\~/x",
    "echo hi >&'l'*",
    "{ echo hi; } >&'$(id)'",
    "x='$(id)'; echo hi >&$x",
    "echo hi > /proc/self/fd/1",
    "HOME=/tmp; echo hi > ~/x",
    "HOME=/tmp echo hi > ~/x",
    "PATH=/usr/bin:/bin; echo hi",
    "function echo { id; }; echo hi",
    "echo() { id; }; echo hi",
    "alias echo=id\necho hi",
    "enable -n echo; echo hi",
    "trap id EXIT; echo hi",
    "echo ${x:=$(id)}",
    "echo ${x/y/$(id)}",
    "echo $[1+1]",
    "echo \"\\\"\" > /tmp/x \"\\\"\"",
    "echo $'\\'' > /tmp/x '",
    "exec git status",
    "exec > /tmp/x; echo hi",
    "exec 3> /tmp/x; echo hi",
    "echo hi | id",
    "git status; id",
    "echo $(</etc/passwd)",
    "echo ((id))",
    "((echo) )",
    "echo $(( $(id) ))",
    "echo hi 2> >(id)",
    "coproc id; echo hi",
    "echo hi >> ~/../x",
    "echo hi > /dev/tcp/127.0.0.1/9",
    "echo {x,y} > sub/{a,b}",
    "mapfile x < a.txt; echo $x",
    "declare -x PATH=/usr/bin; echo hi",
    "BASH_ENV=/tmp/x echo hi",
    "IFS=/; echo hi",
    "set -o noclobber; echo hi >| /tmp/x",
    "echo <<EOF > /tmp/x\nbody\nEOF",
    "echo <<EOF\n$(id)\nEOF",
    "timeout -s KILL 5 env -S 'touch P' echo",
    "nice -n 5 env -S 'id' echo",
    "command -p id",
    "builtin echo hi > /tmp/x",
    "time echo hi",
    "time -p echo hi",
    "nohup echo hi",
    "setsid echo hi",
    "stdbuf -o0 echo hi",
];

/// Stubs shared by every line of a test.
fn stubs() -> Stubs {
    Stubs::new().expect("the stub directory")
}

/// One line's outcome.
struct Outcome {
    line: String,
    allowed: bool,
    findings: Vec<Finding>,
    timed_out: bool,
}

/// Judges and traces `lines` on a few threads; panics when strace cannot trace.
fn run_all(lines: &[String], stubs: &Stubs) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(line) = lines.get(index) else {
                        break;
                    };
                    let outcome = match bash_trace::check(line, stubs) {
                        Ok(None) => Outcome {
                            line: line.clone(),
                            allowed: false,
                            findings: Vec::new(),
                            timed_out: false,
                        },
                        Ok(Some((trace, findings))) => Outcome {
                            line: line.clone(),
                            allowed: true,
                            findings,
                            timed_out: trace.timed_out,
                        },
                        Err(error) => panic!("strace could not trace {line:?}: {error}"),
                    };
                    outcomes.lock().unwrap().push((index, outcome));
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|(index, _)| *index);
    outcomes.into_iter().map(|(_, outcome)| outcome).collect()
}

/// Says something on stderr even when the harness captures the test's output.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The findings of allowed lines, one line of text for each line of bash.
fn failures(outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|outcome| outcome.allowed && !outcome.findings.is_empty())
        .map(|outcome| {
            let text: Vec<String> = outcome.findings.iter().map(ToString::to_string).collect();
            format!("{:?}: {}", outcome.line, text.join("; "))
        })
        .collect()
}

/// Fails on any finding.
fn assert_no_findings(outcomes: &[Outcome]) {
    let found = failures(outcomes);
    assert!(
        found.is_empty(),
        "bash and the analysis disagree:\n{}",
        found.join("\n")
    );
}

fn summary(kind: &str, outcomes: &[Outcome], started: Instant) {
    let allowed = outcomes.iter().filter(|outcome| outcome.allowed).count();
    let timed_out = outcomes.iter().filter(|outcome| outcome.timed_out).count();
    say(&format!(
        "bash_differential, {kind}: {} lines, {allowed} allowed and traced, {timed_out} past the \
         deadline, {:.1} s",
        outcomes.len(),
        started.elapsed().as_secs_f64()
    ));
}

#[test]
fn hand_written_lines_do_nothing_the_analysis_missed() {
    const TEST: &str = "hand_written_lines_do_nothing_the_analysis_missed";
    if require::program(TEST, "strace", &[], "apt-get install strace").is_none() {
        return;
    }
    let started = Instant::now();
    let stubs = stubs();
    let table: Vec<(&str, Expect)> = ALLOWED
        .iter()
        .map(|line| (*line, Allowed))
        .chain(NOT_ALLOWED.iter().map(|line| (*line, NotAllowed)))
        .chain(HOSTILE.iter().map(|line| (*line, Either)))
        .collect();
    let lines: Vec<String> = table.iter().map(|(line, _)| (*line).to_owned()).collect();
    let outcomes = run_all(&lines, &stubs);
    let mut wrong = Vec::new();
    for ((_, expect), outcome) in table.iter().zip(&outcomes) {
        match expect {
            Allowed if !outcome.allowed => wrong.push(format!(
                "{:?} is in the table of allowed lines, and the engine does not allow it",
                outcome.line
            )),
            NotAllowed if outcome.allowed => wrong.push(format!(
                "{:?} is in the table of lines not allowed, and the engine allows it",
                outcome.line
            )),
            _ => {}
        }
    }
    wrong.extend(failures(&outcomes));
    let hostile_allowed = outcomes[ALLOWED.len() + NOT_ALLOWED.len()..]
        .iter()
        .filter(|outcome| outcome.allowed)
        .count();
    summary("hand-written table", &outcomes, started);
    say(&format!(
        "  ({} allowed lines, {} not allowed, {} hostile of which {hostile_allowed} allowed)",
        ALLOWED.len(),
        NOT_ALLOWED.len(),
        HOSTILE.len()
    ));
    assert!(
        wrong.is_empty(),
        "bash and the analysis disagree:\n{}",
        wrong.join("\n")
    );
}

/// The committed seeds of the `command_line` fuzz target.
fn fuzz_corpus() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/command_line");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|file| String::from_utf8(std::fs::read(file).ok()?).ok())
        .collect()
}

#[test]
fn fuzz_corpus_lines_do_nothing_the_analysis_missed() {
    const TEST: &str = "fuzz_corpus_lines_do_nothing_the_analysis_missed";
    if require::program(TEST, "strace", &[], "apt-get install strace").is_none() {
        return;
    }
    let started = Instant::now();
    let lines = fuzz_corpus();
    assert!(!lines.is_empty(), "the command_line corpus is empty");
    let outcomes = run_all(&lines, &stubs());
    summary("command_line fuzz corpus", &outcomes, started);
    assert_no_findings(&outcomes);
}

/// How a generated command starts.
const STARTS: &[&str] = &[
    "echo",
    "echo",
    "echo",
    "git status",
    "env echo",
    "command echo",
    "nice git status",
    "timeout 5 echo",
    "x=1; echo",
    "echo -n",
    "echo -e",
];

/// Words of a generated command: quoting, expansions, braces, globs, tildes, escapes.
const WORDS: &[&str] = &[
    "hi",
    "'a b'",
    "\"a $x b\"",
    "$'\\x41\\t'",
    "$'\\''",
    "$\"msg\"",
    "{a,b}",
    "{1..3}",
    "x{,y}",
    "*",
    "*.txt",
    "sub/*",
    "~",
    "~/a",
    "~+",
    "$HOME",
    "${x:-d}",
    "$x",
    "$((1+2))",
    "\\#",
    "a\\ b",
    "\\;",
    "'#'",
    "\"\\\"\"",
    "\\$x",
    "'$(id)'",
    "\\`id\\`",
    "--",
    "-n",
    "=",
    "a=b",
    "\\\n",
    "#c",
];

/// Where a generated redirection goes: inside the root, outside it, through links and globs.
const TARGETS: &[&str] = &[
    "out.txt",
    "sub/x",
    "\"q t\"",
    "./d",
    "a.txt",
    "/dev/null",
    "/tmp/toold-diff-x",
    "../x",
    "~/x",
    "link",
    "dirlink/x",
    "$HOME/x",
    "l*",
    "a*",
    "*.txt",
    "{x,y}",
    "{x,}",
    "~root/x",
    "$'/tmp/toold-diff-z'",
    "$'o\\x2ftxt'",
    "sub/../e",
    "\"$x\"",
];

const REDIRECTIONS: &[&str] = &[">", ">>", ">|", "&>", "&>>", "2>", "1>", ">&"];
const FIXED_REDIRECTIONS: &[&str] = &["2>&1", ">&2", "< a.txt", "<<< word", "<<< \"$x\""];
const OPERATORS: &[&str] = &["; ", " && ", " || ", " | ", " & ", "\n", ";\n"];

fn generated_command(rng: &mut XorShift) -> String {
    let mut command = rng.pick(STARTS).to_owned();
    for _ in 0..rng.below(4) {
        command.push(' ');
        command.push_str(rng.pick(WORDS));
    }
    for _ in 0..rng.below(3) {
        command.push(' ');
        if rng.below(3) == 0 {
            command.push_str(rng.pick(FIXED_REDIRECTIONS));
        } else {
            command.push_str(rng.pick(REDIRECTIONS));
            if rng.below(2) == 0 {
                command.push(' ');
            }
            command.push_str(rng.pick(TARGETS));
        }
    }
    match rng.below(10) {
        0 => format!("{{ {command}; }}"),
        1 => format!("( {command} )"),
        2 => format!("[[ -n $x ]] && {command}"),
        3 => format!("(( x + 1 )) || {command}"),
        4 => format!("{command} <<EOF\nbody $x\nEOF"),
        _ => command,
    }
}

/// About 500 lines of one to three commands, from a fixed seed.
fn generated_lines() -> Vec<String> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    (0..500)
        .map(|_| {
            let mut line = generated_command(&mut rng);
            for _ in 0..rng.below(3) {
                line.push_str(rng.pick(OPERATORS));
                line.push_str(&generated_command(&mut rng));
            }
            line
        })
        .collect()
}

#[test]
fn generated_lines_do_nothing_the_analysis_missed() {
    const TEST: &str = "generated_lines_do_nothing_the_analysis_missed";
    if require::program(TEST, "strace", &[], "apt-get install strace").is_none() {
        return;
    }
    let started = Instant::now();
    let outcomes = run_all(&generated_lines(), &stubs());
    summary("generated lines", &outcomes, started);
    assert_no_findings(&outcomes);
}

/// The tracer itself, on a line no engine judges: it must see each kind of thing a finding is
/// made of, else every other test here would pass on an empty trace.
#[test]
fn the_tracer_sees_programs_lookups_and_writes() {
    const TEST: &str = "the_tracer_sees_programs_lookups_and_writes";
    if require::program(TEST, "strace", &[], "apt-get install strace").is_none() {
        return;
    }
    let stubs = stubs();
    let scratch = bash_trace::Scratch::new(&stubs).expect("a scratch tree");
    let line = "echo hi > out.txt; (cd sub && echo > y); env -S 'touch P' echo; id; git status";
    let trace = bash_trace::trace(line, &scratch).expect("strace traces bash");
    let written: Vec<PathBuf> = trace
        .writes
        .iter()
        .map(|write| write.path.clone())
        .collect();
    for path in [scratch.root.join("out.txt"), scratch.root.join("sub/y")] {
        assert!(written.contains(&path), "{path:?} not in {written:?}");
    }
    let ran: Vec<String> = trace
        .execs
        .iter()
        .map(|exec| {
            exec.path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for program in ["env", "touch", "git"] {
        assert!(
            ran.iter().any(|ran| ran == program),
            "{program} not in {ran:?}"
        );
    }
    assert!(
        trace.lookups.contains("id"),
        "id not in {:?}",
        trace.lookups
    );

    // Each of those is a finding against an analysis that saw only `echo hi`.
    let judged = bash_trace::judge("echo hi", &scratch);
    let findings: Vec<String> = bash_trace::findings(&judged, &trace, &scratch)
        .iter()
        .map(ToString::to_string)
        .collect();
    for expected in ["out.txt", "sub/y", "touch", "looked up id", "git"] {
        assert!(
            findings.iter().any(|finding| finding.contains(expected)),
            "no finding about {expected} in {findings:?}"
        );
    }

    // A large here-document is no finding: bash 5.2 feeds it through a pipe when it fits one,
    // older bash (and a larger document) through a file of its own in TMPDIR.
    let big = format!("echo <<EOF\n{}\nEOF", "x".repeat(30_000));
    let scratch = bash_trace::Scratch::new(&stubs).expect("a scratch tree");
    let judged = bash_trace::judge(&big, &scratch);
    assert!(judged.allowed(), "{:?}", judged.decision);
    let trace = bash_trace::trace(&big, &scratch).expect("strace traces bash");
    let findings = bash_trace::findings(&judged, &trace, &scratch);
    assert!(findings.is_empty(), "{findings:?}");
}
