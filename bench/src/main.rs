//! toold's benchmark harness: every performance goal of the project, measured against the
//! floor or the best tool for the job on the same machine in the same run, as ratios, and
//! written to `docs/benchmarks.md`.
//!
//! ```text
//! bash bench/setup.sh                                  # ripgrep and fd (Debian packages)
//! cargo run --release -p toold-bench                   # every figure, writes docs/benchmarks.md
//! cargo run --release -p toold-bench -- --quick        # every figure on small inputs (CI)
//! cargo run --release -p toold-bench -- --only search  # one section: roundtrip, audit, search,
//!                                                      #   index, process, memory, permission,
//!                                                      #   preview, mcp
//! bash tests/mcp_servers/install.sh                    # the MCP servers the mcp section runs
//! ```
//!
//! Options: `--rounds N` (at least 11; default 21, 11 with `--quick`), `--corpus DIR` (instead
//! of building `bench/make-corpus.sh`'s), `--rg PROGRAM` (another ripgrep),
//! `--out FILE` (default `docs/benchmarks.md`; `target/benchmarks-quick.md` with `--quick`).
//! A run that could not produce every figure exits non-zero.

mod audit;
mod daemon;
mod index;
mod mcp;
mod memory;
mod permission;
mod preview;
mod process;
mod relay_floor;
mod report;
mod roundtrip;
mod search;
mod stats;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

use report::Section;

/// Rounds per pair when `--rounds` is not given: enough for a stable median and IQR.
const DEFAULT_ROUNDS: usize = 21;
/// The least rounds accepted: fewer make the IQR meaningless.
const MIN_ROUNDS: usize = 11;
/// The harness's sections, in the order they run and are written.
const SECTIONS: [&str; 9] = [
    "roundtrip",
    "audit",
    "search",
    "index",
    "process",
    "memory",
    "permission",
    "preview",
    "mcp",
];

const USAGE: &str = "usage: toold-bench [--quick] [--rounds N] [--only SECTION] [--corpus DIR] [--rg PROGRAM] [--out FILE]
sections: roundtrip, audit, search, index, process, memory, permission, preview, mcp";

/// What every section is given.
pub struct Settings {
    pub rounds: usize,
    /// Small inputs, for a run that only checks that every figure is produced.
    pub quick: bool,
}

struct Options {
    settings: Settings,
    only: Option<String>,
    corpus: Option<PathBuf>,
    rg: String,
    out: Option<PathBuf>,
}

fn main() {
    match parse_options().and_then(|options| run(&options)) {
        Ok(()) => {}
        Err(err) => {
            eprintln!("toold-bench: {err:#}");
            std::process::exit(1);
        }
    }
}

fn parse_options() -> anyhow::Result<Options> {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        settings: Settings {
            rounds: 0,
            quick: false,
        },
        only: None,
        corpus: None,
        rg: "rg".to_owned(),
        out: None,
    };
    let mut rounds = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.settings.quick = true,
            "--rounds" => {
                let value = args.next().context("--rounds needs a number")?;
                let value: usize = value.parse().context("--rounds needs a number")?;
                ensure!(
                    value >= MIN_ROUNDS,
                    "--rounds must be at least {MIN_ROUNDS}"
                );
                rounds = Some(value);
            }
            "--only" => {
                let section = args.next().context("--only needs a section")?;
                ensure!(
                    SECTIONS.contains(&section.as_str()),
                    "no section {section:?}\n{USAGE}"
                );
                options.only = Some(section);
            }
            "--corpus" => {
                options.corpus = Some(args.next().context("--corpus needs a directory")?.into())
            }
            "--rg" => options.rg = args.next().context("--rg needs a program")?,
            "--out" => options.out = Some(args.next().context("--out needs a file")?.into()),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown option {other:?}\n{USAGE}"),
        }
    }
    options.settings.rounds = rounds.unwrap_or(if options.settings.quick {
        MIN_ROUNDS
    } else {
        DEFAULT_ROUNDS
    });
    Ok(options)
}

fn run(options: &Options) -> anyhow::Result<()> {
    let settings = &options.settings;
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the bench crate lives inside the workspace")?;
    let selected = |name: &str| options.only.as_deref().is_none_or(|only| only == name);
    let tools = search::Tools::find(&options.rg)?;
    let scratch = tempfile::tempdir()?;
    let corpus = match (&options.corpus, settings.quick) {
        (Some(dir), _) => dir
            .canonicalize()
            .with_context(|| format!("corpus {}", dir.display()))?,
        (None, true) => search::quick_corpus(scratch.path())?,
        (None, false) if selected("search") || selected("index") => search::full_corpus()?,
        (None, false) => PathBuf::new(),
    };
    // Built before anything is timed.
    daemon::release_toold()?;

    let mut sections: Vec<Section> = Vec::new();
    for name in SECTIONS.iter().filter(|name| selected(name)) {
        eprintln!("measuring {name} ({} rounds)", settings.rounds);
        let section = match *name {
            "roundtrip" => roundtrip::roundtrip_section(settings),
            "search" => search::search_section(settings, &tools, &corpus),
            "index" => index::index_section(settings, &tools, &corpus),
            "process" => process::process_section(settings),
            "memory" => memory::memory_section(settings),
            "permission" => permission::permission_section(settings.rounds),
            "preview" => preview::preview_section(settings),
            "mcp" => mcp::mcp_section(settings, workspace),
            "audit" => audit::audit_section(settings),
            _ => unreachable!("SECTIONS names every section"),
        }
        .with_context(|| format!("the {name} figures"))?;
        sections.push(section);
    }

    let mut versions = vec![
        format!("toold {} (release build)", env!("CARGO_PKG_VERSION")),
        report::output_line(Command::new("rustc").arg("--version"))
            .unwrap_or_else(|| "rustc unknown".into()),
    ];
    versions.extend(tools.versions());
    let text = report::render(&sections, settings.quick, settings.rounds, &versions);
    println!("{text}");
    let out = options.out.clone().unwrap_or_else(|| {
        if settings.quick {
            workspace.join("target/benchmarks-quick.md")
        } else {
            workspace.join("docs/benchmarks.md")
        }
    });
    if options.only.is_none() || options.out.is_some() {
        std::fs::write(&out, &text).with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }

    if options.only.is_none() {
        let (unexpected, missing) = report::completeness(&sections);
        ensure!(
            unexpected.is_empty() && missing.is_empty(),
            "figures missing: {missing:?}; unexpected: {unexpected:?}"
        );
        eprintln!(
            "every figure produced ({} of them)",
            report::EXPECTED_FIGURES.len()
        );
    }
    Ok(())
}
