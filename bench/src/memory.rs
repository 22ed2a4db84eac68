//! The daemon's footprint and start: its RSS idle, with 100 sessions and while a slow client
//! reads a flood of events, and the time from exec to the first answered `initialize`.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use serde_json::json;

use crate::Settings;
use crate::daemon::{Daemon, Place, rss_bytes};
use crate::process::{cat_through_toold, write_text_file};
use crate::report::{Figure, Section, num};
use crate::stats::Samples;

const MIB: f64 = 1024.0 * 1024.0;
/// How fast the slow client reads: far below what `cat` produces.
const SLOW_READ_BYTES_PER_SECOND: f64 = 40.0 * 1024.0 * 1024.0;

pub fn memory_section(settings: &Settings) -> anyhow::Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    let daemon = Daemon::start()?;
    let mut client = daemon.client()?;
    // Settled: the runtime's threads are up and the first connection is served.
    std::thread::sleep(Duration::from_millis(300));
    let idle = daemon.rss_bytes()?;

    for _ in 0..100 {
        client.create_session(&root, json!({}))?;
    }
    std::thread::sleep(Duration::from_millis(300));
    let with_sessions = daemon.rss_bytes()?;

    // The first call builds what a daemon nobody called does not hold: the builtins' schema
    // validators (and the meta-schema's, which compiling one builds).
    write_text_file(&root.join("first.txt"), 1024)?;
    let first = client.create_session(&root, json!({}))?;
    client.execute_ok(
        &first,
        json!([{"id": "c1", "name": "read_file", "arguments": {"path": "first.txt"}}]),
    )?;
    let after_first_call = daemon.rss_bytes()?;

    let bytes = if settings.quick { 10 << 20 } else { 100 << 20 };
    let file = root.join("flood.txt");
    write_text_file(&file, bytes)?;
    let session =
        client.create_session(&root, json!({"rules": {"allow": ["run_command(cat *)"]}}))?;
    let before_flood = daemon.rss_bytes()?;
    let (peak, streamed, elapsed) = slow_flood(&daemon, &mut client, &session, &file)?;
    ensure!(
        streamed == bytes as u64,
        "the slow client got {streamed} of {bytes} bytes"
    );
    let growth = peak.saturating_sub(before_flood);
    daemon.stop()?;

    let startup = startup_times(settings.rounds)?;
    let startup_ms = startup.summary();

    let mib = |value: u64| value as f64 / MIB;
    let megabytes = bytes >> 20;
    let mut markdown = String::from("## Footprint and start\n\n");
    let _ = write!(
        markdown,
        "RSS (`VmRSS` of the daemon): idle after one client initialized; after that client \
         created 100 sessions; after its first tool call (a `read_file`); and the peak, sampled every 5 ms, while an attached client that \
         reads at {} MB/s (parsing every event) receives {megabytes} MB of `run_command` \
         output as events, over the RSS just before (it took {:.1} s).\n\n",
        SLOW_READ_BYTES_PER_SECOND / MIB,
        elapsed.as_secs_f64()
    );
    markdown.push_str("| | MiB |\n|---|---:|\n");
    let _ = writeln!(markdown, "| idle | {:.1} |", mib(idle));
    let _ = writeln!(
        markdown,
        "| with 100 sessions | {:.1} |",
        mib(with_sessions)
    );
    let _ = writeln!(
        markdown,
        "| after the first tool call | {:.1} |",
        mib(after_first_call)
    );
    let _ = writeln!(
        markdown,
        "| slow client reading {megabytes} MB of events: growth (peak {:.1}) | +{:.1} |\n",
        mib(peak),
        mib(growth)
    );
    let _ = writeln!(
        markdown,
        "Start: from `exec` of `toold serve` (a fresh socket, config and state directory each \
         time) to the answer of the first `initialize` on a connection that retries until the \
         socket exists; {} starts, ms, median (IQR): {}.",
        settings.rounds,
        startup_ms.cell()
    );

    Ok(Section {
        figures: vec![
            Figure {
                id: "rss-idle",
                what: "RSS idle".into(),
                compared_with: "—".into(),
                result: format!("{:.1} MiB", mib(idle)),
                target: "≤ 10 MiB",
                met: mib(idle) <= 10.0,
            },
            Figure {
                id: "rss-sessions",
                what: "RSS with 100 sessions".into(),
                compared_with: "—".into(),
                result: format!("{:.1} MiB", mib(with_sessions)),
                target: "≤ 20 MiB",
                met: mib(with_sessions) <= 20.0,
            },
            Figure {
                id: "rss-slow-client",
                what: format!("RSS while a slow client reads {megabytes} MB of events"),
                compared_with: "RSS before".into(),
                result: format!("+{:.1} MiB (peak {:.1} MiB)", mib(growth), mib(peak)),
                target: "≤ +16 MiB",
                met: mib(growth) <= 16.0,
            },
            Figure {
                id: "startup",
                what: "exec to the first answered `initialize`".into(),
                compared_with: "—".into(),
                result: format!("{} ms", num(startup_ms.median)),
                target: "≤ 20 ms",
                met: startup_ms.median <= 20.0,
            },
        ],
        markdown,
    })
}

/// Runs `cat FILE` with a client that reads at [`SLOW_READ_BYTES_PER_SECOND`], sampling the
/// daemon's RSS meanwhile: the peak RSS, the output bytes received, and how long it took.
fn slow_flood(
    daemon: &Daemon,
    client: &mut crate::daemon::Client,
    session: &str,
    file: &std::path::Path,
) -> anyhow::Result<(u64, u64, Duration)> {
    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, pid) = (Arc::clone(&peak), Arc::clone(&done), daemon.pid());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Ok(rss) = rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    // Hold the reading back to the slow rate: the daemon must not buffer the rest.
    let streamed = cat_through_toold(client, session, file, |received| {
        let due = Duration::from_secs_f64(received as f64 / SLOW_READ_BYTES_PER_SECOND);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    });
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("the RSS sampler panicked");
    Ok((peak.load(Ordering::Relaxed), streamed?, started.elapsed()))
}

/// Exec to the first answered `initialize`, `rounds` times, each daemon stopped after.
fn startup_times(rounds: usize) -> anyhow::Result<Samples> {
    let mut samples = Samples::default();
    let initialize = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","#,
        r#""params":{"protocol_version":1,"capabilities":{}}}"#,
        "\n"
    );
    for _ in 0..rounds {
        let place = Place::new()?;
        let mut command = place.command()?;
        let socket = place.socket();
        let started = Instant::now();
        let mut child = command.spawn().context("start the release toold")?;
        let deadline = started + Duration::from_secs(10);
        let stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(err) => return Err(err).context("toold did not serve within 10 s"),
            }
        };
        (&stream).write_all(initialize.as_bytes())?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        samples.push(started.elapsed());
        ensure!(
            line.contains("\"result\""),
            "initialize was not answered: {line}"
        );
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let status = child.wait()?;
        ensure!(status.success(), "toold did not exit cleanly: {status}");
    }
    Ok(samples)
}
