//! The warm index on the corpus: its build (time to ready, the memory it takes), the sync
//! barrier's cost on an idle tree, repeated `find_files` from the index against `fd -g` and
//! against the same call on a daemon that walks cold, and `search_code` from the index
//! against `rg -n` and the cold walk, interleaved, the answers checked to be the same first.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::{Value, json};
use toold::index::roots::{IndexConfig, Indexes};

use crate::Settings;
use crate::daemon::{Client, Daemon};
use crate::report::{Figure, Section, num, ratio};
use crate::search::{Tools, command_lines};
use crate::stats::{self, Samples};

/// How much faster a warm answer should be than `fd` and than a cold walk.
const WARM_TARGET: f64 = 5.0;
/// The barrier's cost on an idle tree, in ms.
const BARRIER_TARGET_MS: f64 = 0.1;
/// Large enough that no answer is ever cut.
const UNLIMITED_RESULTS: u64 = 1_000_000;
const MAX_OUTPUT_BYTES: u64 = 1 << 30;
/// The glob of the find figure.
const FIND_GLOB: &str = "**/*.cpp";
/// How much faster a broad regex should be from the index than from a cold walk.
const BROAD_TARGET: f64 = 1.5;

/// The searches: (figure id, what, pattern, compared with rg or the cold walk, target).
const SEARCHES: [(&str, &str, &str, Against); 4] = [
    (
        "index-search-literal",
        "a selective literal",
        "JS_PUBLIC_API",
        Against::Rg(WARM_TARGET),
    ),
    (
        "index-search-rare",
        "a rare identifier",
        "JS_NewObjectWithGivenProto",
        Against::Rg(WARM_TARGET),
    ),
    (
        "index-search-regex",
        "a broad regex",
        r"\bstatic\s+bool\s+\w+\(",
        Against::Cold(BROAD_TARGET),
    ),
    (
        "index-search-many",
        "many matches",
        "return",
        Against::Cold(1.0),
    ),
];

/// What a search figure is held to: being this many times faster than rg, or than the cold
/// walk (1.0: no slower).
#[derive(Clone, Copy)]
enum Against {
    Rg(f64),
    Cold(f64),
}

/// A daemon and a detached session on the corpus.
struct Searcher {
    daemon: Daemon,
    client: Client,
    session: String,
}

impl Searcher {
    fn start(config: &str, corpus: &Path) -> anyhow::Result<Self> {
        let daemon = Daemon::start_with(config)?;
        let mut client = daemon.client()?;
        let session = client.create_session(
            corpus,
            json!({"max_output_bytes": MAX_OUTPUT_BYTES, "max_read_bytes": MAX_OUTPUT_BYTES}),
        )?;
        client.call("session/detach", json!({"session_id": session}))?;
        Ok(Self {
            daemon,
            client,
            session,
        })
    }

    /// A call's whole result.
    fn call(&mut self, tool: &str, arguments: Value) -> anyhow::Result<Value> {
        let mut results = self.client.execute_ok(
            &self.session,
            json!([{"id": "bench", "name": tool, "arguments": arguments}]),
        )?;
        let result = results.pop().context("no result")?;
        ensure!(
            result["metadata"]["truncated"] == json!(false),
            "{tool}: the answer was cut"
        );
        Ok(result)
    }

    fn search(&mut self, pattern: &str) -> anyhow::Result<Value> {
        self.call(
            "search_code",
            json!({"pattern": pattern, "max_results": UNLIMITED_RESULTS}),
        )
    }

    fn find(&mut self) -> anyhow::Result<Value> {
        self.call(
            "find_files",
            json!({"pattern": FIND_GLOB, "max_results": UNLIMITED_RESULTS}),
        )
    }

    /// `index/status` of the corpus.
    fn status(&mut self, corpus: &Path) -> anyhow::Result<Value> {
        let status = self.client.call("index/status", json!({}))?;
        status
            .as_array()
            .and_then(|roots| {
                roots
                    .iter()
                    .find(|root| root["root"] == corpus.display().to_string())
            })
            .cloned()
            .context("the corpus is not in index/status")
    }
}

pub fn index_section(settings: &Settings, tools: &Tools, corpus: &Path) -> anyhow::Result<Section> {
    let mut cold = Searcher::start("[index]\nenabled = false\n", corpus)?;
    let mut warm = Searcher::start("", corpus)?;
    // The page cache warm, as for every search figure.
    cold.find()?;

    // The build: from the first query (which starts it) to ready.
    let rss_before = warm.daemon.rss_bytes()?;
    let started = Instant::now();
    let first = warm.find()?;
    ensure!(
        first["metadata"]["index"] == "cold",
        "the first answer is cold"
    );
    let status = loop {
        let status = warm.status(corpus)?;
        if status["state"] == "ready" {
            break status;
        }
        ensure!(
            status["state"] == "building",
            "the index did not build: {status}"
        );
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the index was not ready within 120 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let build = started.elapsed();
    let rss_after = warm.daemon.rss_bytes()?;
    let files = status["files"].as_u64().unwrap_or(0);
    let memory = status["memory_bytes"].as_u64().unwrap_or(0);

    // The same answer from the index, the cold walk and fd.
    let warm_answer = warm.find()?;
    ensure!(
        warm_answer["metadata"]["index"] == "warm",
        "the second answer is warm: {}",
        warm_answer["metadata"]
    );
    let cold_answer = cold.find()?;
    ensure!(
        warm_answer["content"] == cold_answer["content"],
        "the warm and cold answers differ"
    );
    let paths: BTreeSet<String> = warm_answer["content"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let fd = tools.fd.as_ref().map(|(program, _)| program.clone());
    let fd_args = ["--type", "f", "--color", "never", "-g", FIND_GLOB];
    if let Some(program) = &fd {
        let theirs: BTreeSet<String> =
            command_lines(Command::new(program).args(fd_args).current_dir(corpus))?
                .into_iter()
                .map(|line| line.trim_start_matches("./").to_owned())
                .collect();
        ensure!(paths == theirs, "toold and fd list different files");
    }

    let mut run_warm = || warm.find().map(drop);
    let mut run_cold = || cold.find().map(drop);
    let samples: Vec<Samples> = match &fd {
        Some(program) => {
            let mut run_fd =
                || command_lines(Command::new(program).args(fd_args).current_dir(corpus)).map(drop);
            stats::interleaved(
                settings.rounds,
                &mut [&mut run_warm, &mut run_cold, &mut run_fd],
            )?
        }
        None => stats::interleaved(settings.rounds, &mut [&mut run_warm, &mut run_cold])?,
    };
    let warm_find = samples[0].summary();
    let cold_find = samples[1].summary();
    let fd_find = samples.get(2).map(Samples::summary);
    let over_cold = cold_find.median / warm_find.median;
    let over_fd = fd_find.map(|fd| fd.median / warm_find.median);

    // The contents: read on the first search; ready once a search for text no file holds
    // reads few files.
    let reading = Instant::now();
    loop {
        let answer = warm.search("no-file-holds-this-zq")?;
        let read = answer["metadata"]["index_files_read"]
            .as_u64()
            .unwrap_or(u64::MAX);
        if read * 4 < files {
            break;
        }
        ensure!(
            reading.elapsed() < Duration::from_secs(120),
            "the contents were not read within 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let read_time = reading.elapsed();
    let contents_memory = warm.status(corpus)?["memory_bytes"].as_u64().unwrap_or(0) - memory;
    let rss_read = warm.daemon.rss_bytes()?;

    let mut table = String::from(
        "| search | pattern | matches | files read | toold warm | toold cold | rg -n | warm vs rg | warm vs cold |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut figures = Vec::new();
    for (id, what, pattern, against) in SEARCHES {
        eprintln!("  {what}");
        let warm_answer = warm.search(pattern)?;
        let cold_answer = cold.search(pattern)?;
        ensure!(
            warm_answer["content"] == cold_answer["content"],
            "{pattern}: the warm and cold answers differ"
        );
        let keys = |text: &str| -> anyhow::Result<BTreeSet<String>> {
            text.lines().map(crate::search::match_key).collect()
        };
        let ours = keys(warm_answer["content"].as_str().unwrap_or_default())?;
        let rg_args = ["--no-config", "-n", pattern];
        let theirs = keys(
            &command_lines(Command::new(&tools.rg).args(rg_args).current_dir(corpus))?.join("\n"),
        )?;
        ensure!(
            ours == theirs,
            "{pattern}: toold and rg give different matches"
        );
        let read = warm_answer["metadata"]["index_files_read"]
            .as_u64()
            .unwrap_or(0);
        let mut run_warm = || warm.search(pattern).map(drop);
        let mut run_cold = || cold.search(pattern).map(drop);
        let mut run_rg =
            || command_lines(Command::new(&tools.rg).args(rg_args).current_dir(corpus)).map(drop);
        let samples = stats::interleaved(
            settings.rounds,
            &mut [&mut run_warm, &mut run_cold, &mut run_rg],
        )?;
        let (warm_time, cold_time, rg_time) = (
            samples[0].summary(),
            samples[1].summary(),
            samples[2].summary(),
        );
        let over_rg = rg_time.median / warm_time.median;
        let over_cold = cold_time.median / warm_time.median;
        let _ = writeln!(
            table,
            "| {what} | `{pattern}` | {} | {read} | {} | {} | {} | {} faster | {} faster |",
            ours.len(),
            warm_time.cell(),
            cold_time.cell(),
            rg_time.cell(),
            ratio(over_rg),
            ratio(over_cold),
        );
        let (compared_with, target, met) = match against {
            Against::Rg(times) => (
                format!("`rg -n` (same matches, {})", ours.len()),
                "≥ 5× faster than rg",
                over_rg >= times,
            ),
            Against::Cold(times) if times > 1.0 => (
                format!("toold's cold walk (same matches, {})", ours.len()),
                "≥ 1.5× faster than cold",
                over_cold >= times,
            ),
            Against::Cold(times) => (
                format!("toold's cold walk (same matches, {})", ours.len()),
                "no slower than cold",
                over_cold >= times,
            ),
        };
        figures.push(Figure {
            id,
            what: format!("`search_code` from the warm index, {what}: `{pattern}`"),
            compared_with,
            result: format!(
                "{} ms vs rg {} ms ({} faster), cold {} ms ({} faster); {read} files read",
                num(warm_time.median),
                num(rg_time.median),
                ratio(over_rg),
                num(cold_time.median),
                ratio(over_cold)
            ),
            target,
            met,
        });
    }

    let barrier = barrier_cost(corpus, settings)?;
    cold.daemon.stop()?;
    warm.daemon.stop()?;

    let mut markdown = String::from("## The warm index\n\n");
    let _ = write!(
        markdown,
        "On the search corpus (above). Two release daemons on the same corpus, one with the \
         index (the default) and one with `[index] enabled = false` (the cold walk of the \
         figures above); `{FIND_GLOB}` through each (a detached connection) and `fd -g`, \
         {} interleaved rounds, the page cache warm, the three answers checked to be the same \
         ({} files). Times in ms, median (IQR).\n\n\
         | | `find_files {FIND_GLOB}` |\n|---|---:|\n\
         | toold, warm index | {} |\n| toold, cold walk | {} |\n| fd -g | {} |\n\n",
        settings.rounds,
        paths.len(),
        warm_find.cell(),
        cold_find.cell(),
        fd_find.map_or("—".to_owned(), |fd| fd.cell()),
    );
    let _ = writeln!(
        markdown,
        "The build: {} ms from the first `find_files` (answered cold, starting it) to `ready` \
         in `index/status`, for {files} files; the index reckons it takes {:.1} MiB, and the \
         daemon's RSS grew by {:.1} MiB. The sync barrier on the idle corpus (drain inotify, \
         look at the ignore files the watch cannot see, run a query that reads nothing), \
         measured in the bench's own process on the daemon's code: {} µs, median of {} rounds \
         of 1,000.",
        build.as_millis(),
        memory as f64 / (1024.0 * 1024.0),
        rss_after.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0),
        num(barrier * 1e3),
        settings.rounds,
    );
    let _ = write!(
        markdown,
        "\nSearches: the first `search_code` starts reading the files' contents into the \
         trigram index (in the background; searches read every listed file meanwhile): {} ms \
         until a selective search read fewer than a quarter of the files. The trigram index \
         takes {:.1} MiB by its own count (the daemon's RSS: +{:.1} MiB over the file list). \
         Then each search through both daemons and `rg -n`, {} interleaved rounds, the same \
         matches checked first; times in ms, median (IQR). \"files read\": the files the warm \
         search opened (the trigram index's candidates, and files it cannot stand for).\n\n{table}",
        read_time.as_millis(),
        contents_memory as f64 / (1024.0 * 1024.0),
        rss_read.saturating_sub(rss_after) as f64 / (1024.0 * 1024.0),
        settings.rounds,
    );
    figures.extend([
        Figure {
            id: "index-find",
            what: format!("repeated `find_files` `{FIND_GLOB}` from the warm index"),
            compared_with: "`fd -g` and toold's cold walk (same files)".to_owned(),
            result: format!(
                "{} ms vs fd {} ms ({} faster), cold {} ms ({} faster)",
                num(warm_find.median),
                fd_find.map_or("—".to_owned(), |fd| num(fd.median)),
                over_fd.map_or("—".to_owned(), ratio),
                num(cold_find.median),
                ratio(over_cold)
            ),
            target: "≥ 5× faster than both",
            met: over_cold >= WARM_TARGET && over_fd.is_some_and(|fd| fd >= WARM_TARGET),
        },
        Figure {
            id: "index-build",
            what: "building the index of the corpus".to_owned(),
            compared_with: "—".to_owned(),
            result: format!(
                "file list {} ms, {files} files, {:.1} MiB; contents {} ms, {:.1} MiB (RSS +{:.1} \
                 MiB in all)",
                build.as_millis(),
                memory as f64 / (1024.0 * 1024.0),
                read_time.as_millis(),
                contents_memory as f64 / (1024.0 * 1024.0),
                rss_read.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0)
            ),
            target: "within `max_memory_mib` (256)",
            met: memory + contents_memory <= 256 * 1024 * 1024,
        },
        Figure {
            id: "index-barrier",
            what: "the sync barrier on an idle tree".to_owned(),
            compared_with: "—".to_owned(),
            result: format!("{} µs", num(barrier * 1e3)),
            target: "< 0.1 ms",
            met: barrier < BARRIER_TARGET_MS,
        },
    ]);
    Ok(Section { figures, markdown })
}

/// The barrier's cost on the idle corpus in ms (median over rounds of 1,000 queries that
/// read nothing), on the daemon's own index code in this process.
fn barrier_cost(corpus: &Path, settings: &Settings) -> anyhow::Result<f64> {
    let indexes = Arc::new(Indexes::new(IndexConfig::default()));
    let started = Instant::now();
    while indexes.with_files(corpus, false, |_| ()).is_err() {
        ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the index was not ready within 120 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let per_round = if settings.quick { 100 } else { 1000 };
    let mut rounds = Samples::default();
    for _ in 0..settings.rounds {
        let started = Instant::now();
        for _ in 0..per_round {
            indexes
                .with_files(corpus, false, |_| ())
                .map_err(|reason| anyhow::anyhow!("cold: {}", reason.as_str()))?;
        }
        rounds.push(started.elapsed() / per_round);
    }
    Ok(rounds.summary().median)
}
