//! `search_code` and `find_files` through the daemon against ripgrep and fd on the corpus (the
//! same answers, checked first), and one batch of 8 read-only searches against the same 8
//! calls one after another.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::Settings;
use crate::daemon::{Client, Daemon};
use crate::report::{Figure, Section, output_line, ratio};
use crate::stats::{self, Samples, Summary};

/// Large enough that no comparison is ever cut: the corpus has far fewer matching lines. The
/// most a call may ask for (`MAX_RESULTS` of the tools).
const UNLIMITED_RESULTS: u64 = 1_000_000;
/// The most a session's results may hold (the daemon's ceiling): no answer here is cut.
const MAX_OUTPUT_BYTES: u64 = 1 << 30;
/// The ratio toold should stay within against rg and fd.
const TARGET_RATIO: f64 = 1.1;
/// How much faster the batch of 8 should be than the same calls one by one.
const PARALLEL_TARGET: f64 = 1.8;

/// The 8 searches of the batch figure: literals and regexes with a few hundred to a few
/// thousand matches each on the corpus.
const BATCH_PATTERNS: [&str; 8] = [
    "JS_PUBLIC_API",
    r"\bstatic\s+bool\s+\w+\(",
    "MOZ_ASSERT_IF",
    "nullptr;",
    r"uint32_t\s+\w+\s*=",
    "JSContext\\* cx",
    "#include \"vm/",
    "ReportOutOfMemory",
];

/// The comparison tools, found on the PATH (or given with `--rg`).
pub struct Tools {
    pub rg: String,
    pub rg_version: String,
    /// fd's program name (Debian calls it `fdfind`) and version.
    pub fd: Option<(String, String)>,
}

impl Tools {
    pub fn find(rg: &str) -> anyhow::Result<Self> {
        let rg_version = output_line(Command::new(rg).arg("--version")).with_context(|| {
            format!("{rg} is required: run `bash bench/setup.sh` (Debian's ripgrep)")
        })?;
        let fd = ["fd", "fdfind"].iter().find_map(|program| {
            let version = output_line(Command::new(program).arg("--version"))?;
            Some(((*program).to_owned(), version))
        });
        Ok(Self {
            rg: rg.to_owned(),
            rg_version,
            fd,
        })
    }

    pub fn versions(&self) -> Vec<String> {
        let mut versions = vec![self.rg_version.clone()];
        versions.push(match &self.fd {
            Some((program, version)) => format!("{version} (as `{program}`)"),
            None => "fd not installed".to_owned(),
        });
        versions
    }
}

/// What is compared, and how the answers are checked to be the same.
enum Case {
    /// `search_code` against `rg -n`: the same set of `path:line` matches.
    Search { pattern: &'static str },
    /// `find_files` against `rg --files -g` (and `fd -g`): the same set of paths.
    Find { glob: &'static str },
}

pub fn search_section(
    settings: &Settings,
    tools: &Tools,
    corpus: &Path,
) -> anyhow::Result<Section> {
    let file_count = command_lines(
        Command::new(&tools.rg)
            .args(["--no-config", "--files"])
            .current_dir(corpus),
    )?
    .len();
    // The cold walk: the warm index has figures of its own (`index`).
    let daemon = Daemon::start_with("[index]\nenabled = false\n")?;
    let mut client = daemon.client()?;
    let session = client.create_session(
        corpus,
        json!({"max_output_bytes": MAX_OUTPUT_BYTES, "max_read_bytes": MAX_OUTPUT_BYTES}),
    )?;
    // The search figures time the search, not the events: the tool/result event would send
    // the whole answer a second time (the round-trip figure measures the events' cost).
    client.call("session/detach", json!({"session_id": session}))?;

    // Warm the page cache (every file rg would search is read once) and the daemon.
    command_lines(
        Command::new(&tools.rg)
            .args(["--no-config", "-c", "warm-the-page-cache-zq"])
            .current_dir(corpus),
    )?;
    toold_call(
        &mut client,
        &session,
        "search_code",
        json!({"pattern": "warm-the-page-cache-zq"}),
    )?;

    let cases = [
        (
            "search-literal",
            "literal",
            Case::Search {
                pattern: "JS_PUBLIC_API",
            },
        ),
        (
            "search-regex",
            "regex",
            Case::Search {
                pattern: r"\bstatic\s+bool\s+\w+\(",
            },
        ),
        (
            "search-many",
            "many matches",
            Case::Search { pattern: "return" },
        ),
        ("find", "find", Case::Find { glob: "**/*.cpp" }),
    ];
    let mut figures = Vec::new();
    let mut table = String::from(
        "| case | pattern | results | toold | rg | toold / rg | fd | toold / fd |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (id, name, case) in &cases {
        eprintln!("  {name}");
        let row = measure(case, settings.rounds, corpus, tools, &mut client, &session)?;
        let rg_ratio = row.toold.median / row.rg.median;
        let (fd_cell, fd_ratio) = match row.fd {
            Some(fd) => (fd.cell(), Some(row.toold.median / fd.median)),
            None => ("—".to_owned(), None),
        };
        let _ = writeln!(
            table,
            "| {name} | {} | {} | {} | {} | {} | {fd_cell} | {} |",
            row.shown,
            row.results,
            row.toold.cell(),
            row.rg.cell(),
            ratio(rg_ratio),
            fd_ratio.map_or("—".to_owned(), ratio)
        );
        let (compared_with, result, met) = match (case, fd_ratio) {
            (Case::Find { .. }, Some(fd_ratio)) => (
                "`rg --files -g` and `fd -g` (same files)".to_owned(),
                format!(
                    "{} ms vs rg {} ms ({}), fd {} ms ({})",
                    crate::report::num(row.toold.median),
                    crate::report::num(row.rg.median),
                    ratio(rg_ratio),
                    crate::report::num(row.fd.map_or(0.0, |fd| fd.median)),
                    ratio(fd_ratio)
                ),
                // Against the faster of the two, the stricter comparison.
                rg_ratio.max(fd_ratio) <= TARGET_RATIO,
            ),
            _ => (
                format!("`rg -n` (same matches, {} results)", row.results),
                format!(
                    "{} ms vs {} ms ({})",
                    crate::report::num(row.toold.median),
                    crate::report::num(row.rg.median),
                    ratio(rg_ratio)
                ),
                rg_ratio <= TARGET_RATIO,
            ),
        };
        figures.push(Figure {
            id,
            what: match case {
                Case::Search { pattern } => format!("`search_code` {name}: `{pattern}`"),
                Case::Find { glob } => format!("`find_files` `{glob}`"),
            },
            compared_with,
            result,
            target: "≤ 1.1×",
            met,
        });
    }

    eprintln!("  a batch of 8 searches");
    let batch = parallel_batch(settings.rounds, &mut client, &session)?;
    daemon.stop()?;

    let mut markdown = format!(
        "## Search\n\nOn the corpus {}",
        corpus_label(corpus, file_count)
    );
    let _ = write!(
        markdown,
        ". toold is the release daemon answering `tools/execute` over its socket (a \
         detached connection: the answer comes once, in the response), with `[index] enabled \
         = false`: these are its cold walks (the warm index has a section of its own); rg and \
         fd are processes \
         writing to a pipe, so their times include a process start (about a millisecond). \
         {} interleaved rounds, page cache warm; times are median (IQR) in ms. Every row was \
         first checked to give the same set of results.\n\n",
        settings.rounds
    );
    markdown.push_str(&table);
    let speedup = batch.sequential.median / batch.batch.median;
    let _ = write!(
        markdown,
        "\nOne batch of 8 read-only `search_code` calls (run concurrently, `max_parallel` 8) \
         against the same 8 calls as 8 one-call batches one after another, the same answers \
         checked: {} ms against {} ms, {} faster. Every search already walks the tree on \
         every core (the walker uses the machine's parallelism), so running 8 at once can only \
         gain what one search leaves idle: on {} cores that is little.\n",
        batch.batch.cell(),
        batch.sequential.cell(),
        ratio(speedup),
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    figures.push(Figure {
        id: "parallel-batch",
        what: "one batch of 8 read-only searches".into(),
        compared_with: "the same 8 calls one after another".into(),
        result: format!(
            "{} ms vs {} ms ({} faster)",
            crate::report::num(batch.batch.median),
            crate::report::num(batch.sequential.median),
            ratio(speedup)
        ),
        target: "≥ 1.8× faster",
        met: speedup >= PARALLEL_TARGET,
    });
    Ok(Section { figures, markdown })
}

struct Row {
    shown: String,
    results: usize,
    toold: Summary,
    rg: Summary,
    fd: Option<Summary>,
}

/// Checks that every side gives the same answer, then times them interleaved.
fn measure(
    case: &Case,
    rounds: usize,
    corpus: &Path,
    tools: &Tools,
    client: &mut Client,
    session: &str,
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
    let command = |program: &str, args: &[&str]| {
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
    let toold_lines: Vec<String> = toold_call(client, session, tool, arguments.clone())?
        .lines()
        .map(str::to_owned)
        .collect();
    let toold_set = parse(&toold_lines)?;
    ensure!(
        toold_set.len() == toold_lines.len(),
        "{shown}: toold printed a result twice"
    );
    let rg_set = parse(&command_lines(&mut command(&tools.rg, &rg_args))?)?;
    same_answer(&shown, "rg", &toold_set, &rg_set)?;
    let fd = match (&fd_args, &tools.fd) {
        (Some(args), Some((program, _))) => {
            let fd_set = parse(&command_lines(&mut command(program, args))?)?;
            same_answer(&shown, "fd", &toold_set, &fd_set)?;
            Some((program.as_str(), args))
        }
        _ => None,
    };

    let mut run_toold = || toold_call(client, session, tool, arguments.clone()).map(drop);
    let mut run_rg = || command_lines(&mut command(&tools.rg, &rg_args)).map(drop);
    let samples = match fd {
        Some((program, args)) => {
            let mut run_fd = || command_lines(&mut command(program, args)).map(drop);
            stats::interleaved(rounds, &mut [&mut run_toold, &mut run_rg, &mut run_fd])?
        }
        None => stats::interleaved(rounds, &mut [&mut run_toold, &mut run_rg])?,
    };
    let summaries: Vec<Summary> = samples.iter().map(stats::Samples::summary).collect();
    Ok(Row {
        shown,
        results: toold_set.len(),
        toold: summaries[0],
        rg: summaries[1],
        fd: summaries.get(2).copied(),
    })
}

struct BatchTimes {
    batch: Summary,
    sequential: Summary,
}

fn parallel_batch(rounds: usize, client: &mut Client, session: &str) -> anyhow::Result<BatchTimes> {
    let calls: Vec<Value> = BATCH_PATTERNS
        .iter()
        .enumerate()
        .map(|(index, pattern)| {
            json!({
                "id": format!("s{index}"),
                "name": "search_code",
                "arguments": {"pattern": pattern, "max_results": UNLIMITED_RESULTS},
            })
        })
        .collect();
    let contents = |results: Vec<Value>| -> Vec<String> {
        results
            .into_iter()
            .map(|result| result["content"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let together = contents(client.execute_ok(session, Value::Array(calls.clone()))?);
    let mut one_by_one = Vec::new();
    for call in &calls {
        one_by_one.extend(contents(client.execute_ok(session, json!([call]))?));
    }
    ensure!(
        together == one_by_one,
        "the batch and the single calls gave different answers"
    );
    ensure!(
        together.iter().all(|content| !content.is_empty()),
        "a batch search found nothing: the corpus is not the expected one"
    );

    let batch = Value::Array(calls.clone());
    let (mut batch_times, mut sequential_times) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        // Alternate which goes first, so neither always meets the warmer machine.
        for batch_first in [round % 2 == 0, round % 2 != 0] {
            let started = Instant::now();
            if batch_first {
                client.execute_ok(session, batch.clone())?;
                batch_times.push(started.elapsed());
            } else {
                for call in &calls {
                    client.execute_ok(session, json!([call]))?;
                }
                sequential_times.push(started.elapsed());
            }
        }
    }
    Ok(BatchTimes {
        batch: batch_times.summary(),
        sequential: sequential_times.summary(),
    })
}

/// One call through the daemon; its content, checked complete.
fn toold_call(
    client: &mut Client,
    session: &str,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<String> {
    let mut results = client.execute_ok(
        session,
        json!([{"id": "bench", "name": tool, "arguments": arguments}]),
    )?;
    let mut result = results.pop().context("no result")?;
    ensure!(
        result["metadata"]["truncated"] == json!(false),
        "toold {tool} cut its answer: {}",
        result["metadata"]
    );
    match result["content"].take() {
        Value::String(content) => Ok(content),
        other => bail!("toold {tool} gave no text: {other}"),
    }
}

/// `path:line` of one `path:line:text` output line; the path has no `:` in this corpus, and
/// a line that does not parse fails the comparison rather than being skipped.
pub fn match_key(line: &str) -> anyhow::Result<String> {
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
pub fn command_lines(command: &mut Command) -> anyhow::Result<Vec<String>> {
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

/// How the report names the corpus: by its directory's name and, when it lies inside the
/// repository (as [`full_corpus`] builds it, under `target/bench-corpus/`), by its path relative
/// to the repository; never by an absolute path of the machine the figures were measured on.
fn corpus_label(corpus: &Path, file_count: usize) -> String {
    let name = corpus.file_name().map_or_else(
        || corpus.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    );
    // The corpus path is canonical (every caller made it so); the workspace's must be too.
    let inside = workspace()
        .ok()
        .and_then(|workspace| workspace.canonicalize().ok())
        .and_then(|workspace| {
            corpus
                .strip_prefix(workspace)
                .ok()
                .map(|relative| relative.display().to_string())
        });
    match inside {
        Some(relative) if relative.is_empty() => {
            format!("`{name}` ({file_count} files: the repository itself)")
        }
        Some(relative) => {
            format!("`{name}` ({file_count} files, at `{relative}` in the repository)")
        }
        None => format!("`{name}` ({file_count} files)"),
    }
}

/// The repository's root: the workspace the bench crate belongs to.
fn workspace() -> anyhow::Result<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the bench crate lives inside the workspace")
}

/// The corpus of `bench/make-corpus.sh`, built once under `target/bench-corpus/`
/// (later runs find it).
pub fn full_corpus() -> anyhow::Result<PathBuf> {
    let workspace = workspace()?;
    let script = std::env::var_os("TOOLD_BENCH_CORPUS_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("bench/make-corpus.sh"));
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

/// The `--quick` corpus: a few hundred generated C++ files in a git repository, with ignored
/// files, holding every pattern the figures search for. Small enough to write in a moment.
pub fn quick_corpus(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("quick-corpus");
    for module in 0..12 {
        for file in 0..25 {
            let mut text = String::new();
            let _ = writeln!(text, "#include \"vm/Module{module}.h\"\n");
            for function in 0..20 {
                let _ = writeln!(
                    text,
                    "JS_PUBLIC_API static bool fn_{file}_{function}(JSContext* cx) {{\n  \
                     uint32_t count = {function};\n  MOZ_ASSERT_IF(count, cx);\n  \
                     if (!count) {{ ReportOutOfMemory(cx); }}\n  void* p = nullptr;\n  \
                     return count > 0;\n}}\n"
                );
            }
            let ext = if file % 3 == 0 { "h" } else { "cpp" };
            let path = root.join(format!("src/m{module}/file{file}.{ext}"));
            std::fs::create_dir_all(path.parent().context("a parent")?)?;
            std::fs::write(path, text)?;
        }
    }
    std::fs::create_dir_all(root.join("build"))?;
    std::fs::write(root.join("build/generated.cpp"), "return JS_PUBLIC_API;\n")?;
    std::fs::write(root.join(".gitignore"), "build/\n")?;
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&root)
        .status()
        .context("git init (the corpus's .gitignore takes effect in a repository)")?;
    ensure!(status.success(), "git init failed");
    Ok(root.canonicalize()?)
}
