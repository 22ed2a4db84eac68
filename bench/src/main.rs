//! toold's benchmark harness: measures toold against the tools it is compared with, on the
//! same machine in the same run, as ratios (DESIGN.md, "Performance").
//!
//! `cargo run --release -p toold-bench -- search [--rounds N] [--corpus DIR] [--rg PROGRAM]
//! [--only CASE] [--out FILE]` compares `search_code` with `rg -n` and `find_files` with `rg --files -g` and `fd`, on the
//! corpus of `../shared/bench/make-corpus.sh`. The daemon's socket does not exist yet, so toold is
//! measured through its library call path (`Registry::execute`, as the daemon will call it),
//! while rg and fd are whole processes writing to a pipe: the comparison slightly favours toold
//! by the cost of a process start (about a millisecond), which the table says.

mod permission;
mod roundtrip;
mod stats;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toold::{Env, Registry};
use toold_protocol::ToolCall;

use stats::Summary;

/// Rounds per comparison when `--rounds` is not given: enough for a stable median and IQR.
const DEFAULT_ROUNDS: usize = 21;
/// The least rounds accepted: fewer make the IQR meaningless.
const MIN_ROUNDS: usize = 11;
/// Large enough that no comparison is ever cut: the corpus has far fewer matching lines.
const UNLIMITED_RESULTS: u64 = 100_000_000;
/// The ratio toold should stay within.
const TARGET_RATIO: f64 = 1.1;

struct Options {
    rounds: usize,
    corpus: Option<PathBuf>,
    /// The ripgrep to compare with (`--rg PATH`; default `rg` on the PATH).
    rg: String,
    /// Only the cases with this name (`--only NAME`), e.g. to profile one.
    only: Option<String>,
    /// Also write the table here (`--out FILE`), e.g. `docs/benchmarks.md`.
    out: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let suite = args.next().unwrap_or_default();
    let mut options = Options {
        rounds: DEFAULT_ROUNDS,
        corpus: None,
        rg: "rg".to_owned(),
        only: None,
        out: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                let value = args.next().context("--rounds needs a number")?;
                options.rounds = value.parse().context("--rounds needs a number")?;
                ensure!(
                    options.rounds >= MIN_ROUNDS,
                    "--rounds must be at least {MIN_ROUNDS}"
                );
            }
            "--corpus" => {
                options.corpus = Some(args.next().context("--corpus needs a directory")?.into())
            }
            "--rg" => options.rg = args.next().context("--rg needs a program")?,
            "--only" => options.only = Some(args.next().context("--only needs a case name")?),
            "--out" => options.out = Some(args.next().context("--out needs a file")?.into()),
            other => bail!("unknown option {other:?}"),
        }
    }
    match suite.as_str() {
        "search" => search_suite(&options),
        "permission" => permission::permission_suite(options.rounds),
        "roundtrip" => roundtrip::roundtrip_suite(options.rounds),
        _ => bail!(
            "usage: toold-bench search [--rounds N] [--corpus DIR] [--rg PROGRAM] [--only CASE] [--out FILE]\n       toold-bench permission [--rounds N]\n       toold-bench roundtrip [--rounds N]"
        ),
    }
}

/// What is compared, and how the answers are checked to be the same.
enum Case {
    /// `search_code` against `rg -n`: the same set of `path:line` matches.
    Search { pattern: &'static str },
    /// `find_files` against `rg --files -g` (and `fd -g`): the same set of paths.
    Find { glob: &'static str },
}

struct Row {
    name: &'static str,
    shown: String,
    results: usize,
    toold: Summary,
    rg: Summary,
    fd: Option<Summary>,
}

fn search_suite(options: &Options) -> anyhow::Result<()> {
    let corpus = match &options.corpus {
        Some(dir) => dir
            .canonicalize()
            .with_context(|| format!("corpus {}", dir.display()))?,
        None => build_corpus()?,
    };
    let rg_program = options.rg.as_str();
    let rg =
        tool_version(rg_program)?.context("ripgrep (rg) is required: apt-get install ripgrep")?;
    let fd = find_fd();
    let file_count = command_lines(
        Command::new(rg_program)
            .args(["--no-config", "--files"])
            .current_dir(&corpus),
    )?
    .len();
    eprintln!(
        "corpus {} ({file_count} files rg would search)",
        corpus.display()
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let registry = Registry::with_builtins();
    let env = Arc::new(Env::new(corpus.clone()));
    let toold = |tool: &str, arguments: Value| -> anyhow::Result<String> {
        let call = ToolCall::new("bench", tool, arguments);
        let result =
            runtime.block_on(registry.execute(&call, env.clone(), CancellationToken::new(), None));
        ensure!(result.ok, "toold {tool} failed: {result:?}");
        ensure!(
            result.metadata["truncated"] == json!(false),
            "toold {tool} cut its answer"
        );
        Ok(result.content)
    };

    // Warm the page cache (every file rg would search is read once) and toold's first-use costs.
    command_lines(
        Command::new(rg_program)
            .args(["--no-config", "-c", "warm-the-page-cache-zq"])
            .current_dir(&corpus),
    )?;
    toold("search_code", json!({"pattern": "warm-the-page-cache-zq"}))?;

    let cases = [
        (
            "literal",
            Case::Search {
                pattern: "JS_PUBLIC_API",
            },
        ),
        (
            "regex",
            Case::Search {
                pattern: r"\bstatic\s+bool\s+\w+\(",
            },
        ),
        ("many matches", Case::Search { pattern: "return" }),
        ("find", Case::Find { glob: "**/*.cpp" }),
    ];
    let mut rows = Vec::new();
    let selected = cases
        .iter()
        .filter(|(name, _)| options.only.as_deref().is_none_or(|only| only == *name));
    for (name, case) in selected {
        eprintln!("measuring {name} ({} rounds)", options.rounds);
        rows.push(measure(
            name,
            case,
            options.rounds,
            &corpus,
            rg_program,
            fd.as_ref(),
            &toold,
        )?);
    }

    let table = render(
        &rows,
        options.rounds,
        file_count,
        &rg,
        fd.as_ref().map(|(_, v)| v.as_str()),
    );
    println!("{table}");
    if let Some(out) = &options.out {
        std::fs::write(out, &table).with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

/// Checks that both sides give the same answer, then times them interleaved.
fn measure(
    name: &'static str,
    case: &Case,
    rounds: usize,
    corpus: &Path,
    rg_program: &str,
    fd: Option<&(String, String)>,
    toold: &dyn Fn(&str, Value) -> anyhow::Result<String>,
) -> anyhow::Result<Row> {
    let (tool, arguments, rg_args, shown): (&str, Value, Vec<&str>, String) = match case {
        Case::Search { pattern } => (
            "search_code",
            json!({"pattern": pattern, "max_results": UNLIMITED_RESULTS}),
            vec!["--no-config", "-n", pattern],
            format!("`{pattern}`"),
        ),
        Case::Find { glob } => (
            "find_files",
            json!({"pattern": glob, "max_results": UNLIMITED_RESULTS}),
            vec!["--no-config", "--files", "-g", glob],
            format!("`{glob}`"),
        ),
    };
    let fd_args: Option<Vec<&str>> = match case {
        Case::Find { glob } => Some(vec!["--type", "f", "--color", "never", "-g", glob]),
        Case::Search { .. } => None,
    };
    let rg_command = || {
        let mut command = Command::new(rg_program);
        command.args(&rg_args).current_dir(corpus);
        command
    };
    let fd_command = |program: &str, args: &[&str]| {
        let mut command = Command::new(program);
        command.args(args).current_dir(corpus);
        command
    };

    // The same answer, parsed: toold's output is sorted, rg's and fd's are in walk order.
    let parse = |lines: &[String]| -> anyhow::Result<BTreeSet<String>> {
        match case {
            Case::Search { .. } => lines.iter().map(|line| match_key(line)).collect(),
            Case::Find { .. } => Ok(lines
                .iter()
                .map(|line| line.trim_start_matches("./").to_owned())
                .collect()),
        }
    };
    let toold_lines: Vec<String> = toold(tool, arguments.clone())?
        .lines()
        .map(str::to_owned)
        .collect();
    let toold_set = parse(&toold_lines)?;
    ensure!(
        toold_set.len() == toold_lines.len(),
        "{name}: toold printed a match twice"
    );
    let rg_set = parse(&command_lines(&mut rg_command())?)?;
    same_answer(name, "rg", &toold_set, &rg_set)?;
    let fd_program = match (&fd_args, fd) {
        (Some(args), Some((program, _))) => {
            let fd_set = parse(&command_lines(&mut fd_command(program, args))?)?;
            same_answer(name, "fd", &toold_set, &fd_set)?;
            Some(program.as_str())
        }
        _ => None,
    };

    let mut run_toold = || toold(tool, arguments.clone()).map(drop);
    let mut run_rg = || command_lines(&mut rg_command()).map(drop);
    let summaries = match (fd_program, &fd_args) {
        (Some(program), Some(args)) => {
            let mut run_fd = || command_lines(&mut fd_command(program, args)).map(drop);
            stats::interleaved(rounds, &mut [&mut run_toold, &mut run_rg, &mut run_fd])?
        }
        _ => stats::interleaved(rounds, &mut [&mut run_toold, &mut run_rg])?,
    };
    let summaries: Vec<Summary> = summaries.iter().map(stats::Samples::summary).collect();
    Ok(Row {
        name,
        shown,
        results: toold_set.len(),
        toold: summaries[0],
        rg: summaries[1],
        fd: summaries.get(2).copied(),
    })
}

/// `path:line` of one `path:line:text` output line; the path has no `:` in this corpus, and
/// a line that does not parse fails the comparison rather than being skipped.
fn match_key(line: &str) -> anyhow::Result<String> {
    let mut parts = line.splitn(3, ':');
    let (Some(path), Some(number), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        bail!("not a path:line:text line: {line:?}");
    };
    ensure!(
        number.parse::<u64>().is_ok(),
        "not a line number in {line:?}"
    );
    Ok(format!("{}:{number}", path.trim_start_matches("./")))
}

fn same_answer(
    name: &str,
    other: &str,
    toold: &BTreeSet<String>,
    theirs: &BTreeSet<String>,
) -> anyhow::Result<()> {
    if toold == theirs {
        return Ok(());
    }
    let only_toold: Vec<&String> = toold.difference(theirs).take(5).collect();
    let only_theirs: Vec<&String> = theirs.difference(toold).take(5).collect();
    bail!(
        "{name}: toold and {other} disagree ({} vs {} results); only toold: {only_toold:?}; only {other}: {only_theirs:?}",
        toold.len(),
        theirs.len()
    )
}

/// Runs a command to completion with stdout captured, and returns its lines. Exit status 1
/// is rg's "nothing matched", not a failure.
fn command_lines(command: &mut Command) -> anyhow::Result<Vec<String>> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(
        output.status.success() || output.status.code() == Some(1),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The first line of `program --version`, or `None` when it is not installed.
fn tool_version(program: &str) -> anyhow::Result<Option<String>> {
    match Command::new(program).arg("--version").output() {
        Ok(output) => Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .next()
            .map(str::to_owned)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).context(format!("running {program} --version")),
    }
}

/// fd's program name (Debian calls it `fdfind`) and version, if it is installed.
fn find_fd() -> Option<(String, String)> {
    ["fd", "fdfind"].iter().find_map(|program| {
        let version = tool_version(program).ok().flatten()?;
        Some(((*program).to_owned(), version))
    })
}

/// Builds the corpus (once; later runs find it) with the shared script, and returns its path.
fn build_corpus() -> anyhow::Result<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the bench crate lives inside the workspace")?;
    let script = std::env::var_os("TOOLD_BENCH_CORPUS_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("../shared/bench/make-corpus.sh"));
    eprintln!("building the corpus with {}", script.display());
    let lines = command_lines(
        Command::new("sh")
            .arg(&script)
            .arg("target/bench-corpus")
            .current_dir(workspace),
    )?;
    let dir = lines.last().context("make-corpus.sh printed no path")?;
    workspace
        .join(dir)
        .canonicalize()
        .with_context(|| format!("corpus directory {dir}"))
}

fn render(rows: &[Row], rounds: usize, files: usize, rg: &str, fd: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "### search_code and find_files on the corpus ({files} files)\n\n\
         toold is measured through its library call path (`Registry::execute` in a tokio \
         runtime; the daemon socket does not exist yet); rg and fd are processes writing to a \
         pipe, so their times include a process start. {rounds} interleaved rounds, page cache \
         warm; times are median (IQR) in ms. Every row was first checked to give the same set \
         of results. {rg}; {}. Target: toold / rg ≤ {TARGET_RATIO}.\n\n",
        fd.unwrap_or("fd not installed")
    ));
    out.push_str("| case | pattern | results | toold | rg | toold / rg | fd | toold / fd |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for row in rows {
        let (fd_cell, fd_ratio) = match row.fd {
            Some(fd) => (
                fd.cell(),
                format!("{:.2}×", row.toold.median_ms / fd.median_ms),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.2}× | {} | {} |\n",
            row.name,
            row.shown,
            row.results,
            row.toold.cell(),
            row.rg.cell(),
            row.toold.median_ms / row.rg.median_ms,
            fd_cell,
            fd_ratio,
        ));
    }
    out
}
