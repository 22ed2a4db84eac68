//! What a run reports: one summary row per figure (value, what it is compared with, the target
//! and whether it was met), each figure's own section, and the machine and tool versions they
//! were measured on, written as `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::process::Command;

/// One row of the summary table.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Stable and unique: `.ci/run` checks that every expected one was produced.
    pub id: &'static str,
    pub what: String,
    pub compared_with: String,
    /// The measured value(s), e.g. `p50 101 µs (IQR 3) vs 13 µs: 7.8×`.
    pub result: String,
    pub target: &'static str,
    pub met: bool,
}

/// A figure's rows and its own section (method, table, remarks), in markdown.
#[derive(Debug, Default)]
pub struct Section {
    pub figures: Vec<Figure>,
    pub markdown: String,
}

/// The ids a complete run produces, in the order of the summary table.
pub const EXPECTED_FIGURES: &[&str] = &[
    "roundtrip",
    "cpu-per-call",
    "throughput",
    "audit-roundtrip",
    "search-literal",
    "search-regex",
    "search-many",
    "find",
    "index-find",
    "index-search-literal",
    "index-search-rare",
    "index-search-regex",
    "index-search-many",
    "index-build",
    "index-barrier",
    "parallel-batch",
    "output",
    "spawn",
    "sandbox",
    "rss-idle",
    "rss-sessions",
    "rss-slow-client",
    "startup",
    "mcp-call",
    "mcp-shared-memory",
    "mcp-serve-read",
];

/// The whole report: a header naming the machine, the summary table, then every section.
pub fn render(sections: &[Section], quick: bool, rounds: usize, versions: &[String]) -> String {
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str(
        "Written by `cargo run --release -p toold-bench` (its targets are the project's performance goals, listed in each table's \"target\" column): the release \
         daemon on a private socket, every pair measured on the same machine in the same run, \
         interleaved, as ratios. Set up first with `bash bench/setup.sh` (ripgrep and fd from \
         Debian). `--quick` runs every figure on small inputs (what CI checks: that each figure \
         is produced, not its target). This file is generated whole by each run; why the \
         figures are what they are, the floors of this machine and what would move them are \
         written by hand in `docs/benchmark-notes.md`.\n\n",
    );
    let _ = writeln!(out, "- Date: {}", today());
    let _ = writeln!(out, "- Machine: {}", machine());
    for version in versions {
        let _ = writeln!(out, "- {version}");
    }
    let _ = writeln!(
        out,
        "- Run: {}{rounds} rounds per pair; times are medians with the interquartile range \
         (IQR) over rounds.\n",
        if quick {
            "`--quick` (small inputs), "
        } else {
            ""
        }
    );
    out.push_str("## Summary\n\n");
    out.push_str("| figure | result | compared with | target | met |\n|---|---|---|---|---|\n");
    for figure in sections.iter().flat_map(|section| &section.figures) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            figure.what,
            figure.result,
            figure.compared_with,
            figure.target,
            if figure.met { "yes" } else { "**no**" }
        );
    }
    out.push('\n');
    for section in sections {
        out.push_str(&section.markdown);
        if !section.markdown.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// The ids in `sections` that are not in [`EXPECTED_FIGURES`], and the expected ones missing.
pub fn completeness(sections: &[Section]) -> (Vec<&'static str>, Vec<&'static str>) {
    let produced: Vec<&'static str> = sections
        .iter()
        .flat_map(|section| section.figures.iter().map(|figure| figure.id))
        .collect();
    let unexpected = produced
        .iter()
        .copied()
        .filter(|id| !EXPECTED_FIGURES.contains(id))
        .collect();
    let missing = EXPECTED_FIGURES
        .iter()
        .copied()
        .filter(|id| !produced.contains(id))
        .collect();
    (unexpected, missing)
}

fn today() -> String {
    output_line(Command::new("date").arg("+%Y-%m-%d")).unwrap_or_else(|| "unknown".into())
}

/// Cores, CPU model, memory and kernel, from /proc and uname.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_gib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
    let kernel =
        output_line(Command::new("uname").arg("-r")).unwrap_or_else(|| "unknown kernel".into());
    format!("{cores} cores ({model}), {memory_gib:.0} GiB, Linux {kernel}")
}

/// The first line a command prints, if it runs.
pub fn output_line(command: &mut Command) -> Option<String> {
    let output = command.output().ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .map(|line| line.trim().to_owned())
}

/// `value` rounded for the table: whole numbers from 100 up, one decimal below.
pub fn num(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// A ratio as the tables show it.
pub fn ratio(value: f64) -> String {
    format!("{value:.2}×")
}
