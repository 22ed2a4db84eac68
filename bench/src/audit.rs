//! The audit log's cost: the one-call round trip through a daemon writing its audit log (the
//! default) against one with `audit = "off"`, both pinned to one CPU, alternating call by
//! call from the same client; and the CPU each spends per call.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::json;

use crate::Settings;
use crate::daemon::Daemon;
use crate::report::{Figure, Section, num, ratio};
use crate::roundtrip::{check_read, micros, percentile};
use crate::stats::Summary;

pub fn audit_section(settings: &Settings) -> anyhow::Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    std::fs::write(root.join("one_kb.txt"), "x".repeat(1023) + "\n")?;
    let per_round = if settings.quick { 100 } else { 300 };
    // Both daemons on the second CPU, this client on the first: neither daemon's latency
    // depends on where the scheduler happened to put it (which varies from start to start
    // by more than the audit log costs).
    let pinned = std::thread::available_parallelism().is_ok_and(|cpus| cpus.get() >= 2)
        && std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_ok_and(|output| output.status.success());
    let daemon_cpu = pinned.then_some(1);
    let on = Daemon::start_on("", daemon_cpu)?;
    let off = Daemon::start_on("audit = \"off\"\n", daemon_cpu)?;
    let restore = if pinned {
        Some(pin_this_thread(0)?)
    } else {
        None
    };
    let measured = interleaved(&on, &off, &root, settings.rounds, per_round);
    if let Some(previous) = restore {
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &previous)?;
    }
    let (p50s, cpu) = measured?;
    let records = count_lines(&on.state_dir().join("toold/audit.jsonl"))?;
    on.stop()?;
    off.stop()?;
    let (on_p50, off_p50) = (Summary::of(&p50s[0]), Summary::of(&p50s[1]));
    let (on_cpu, off_cpu) = (Summary::of(&cpu[0]), Summary::of(&cpu[1]));
    let audit_ratio = on_p50.median / off_p50.median;

    let mut markdown = String::from("## The audit log's cost\n\n");
    let _ = writeln!(
        markdown,
        "The one-call round trip (`tools/execute` of one `read_file` of a 1 KB file; the \
         response alone, on a connection not attached to the session) through a release \
         daemon writing its audit log (the default, `audit = \"digest\"`: the call's record \
         queued where the call ends, then appended in one `write(2)` before the response is \
         sent) and through one with `audit = \"off\"`, both running, both pinned to the \
         second CPU and the client to the first (where the scheduler puts a daemon's threads \
         otherwise moves its latency by more than the audit log costs); {} rounds of \
         {per_round} round trips to each, alternating call by call (which goes first \
         alternating too); the median (IQR) of each round's p50, µs. The log held {records} \
         records at the end.\n",
        settings.rounds
    );
    markdown.push_str("| | p50 |\n|---|---:|\n");
    let _ = writeln!(markdown, "| audit log on | {} |", on_p50.cell());
    let _ = writeln!(markdown, "| audit log off | {} |", off_p50.cell());
    let _ = writeln!(markdown, "| on / off | {} |\n", ratio(audit_ratio));
    let _ = writeln!(
        markdown,
        "The daemon's CPU per call over the same round trips (the run time of every thread, \
         /proc/PID/task/*/schedstat), the median (IQR) over rounds, µs: what the log adds to \
         each call, without the latency's noise.\n"
    );
    markdown.push_str("| | CPU µs per call |\n|---|---:|\n");
    let _ = writeln!(markdown, "| audit log on | {} |", on_cpu.cell());
    let _ = writeln!(markdown, "| audit log off | {} |", off_cpu.cell());
    let _ = writeln!(
        markdown,
        "| on − off | {} |",
        num(on_cpu.median - off_cpu.median)
    );
    Ok(Section {
        figures: vec![Figure {
            id: "audit-roundtrip",
            what: "one-call round trip with the audit log on".into(),
            compared_with: "the same with `audit = \"off\"`".into(),
            result: format!(
                "p50 {} µs vs {} µs ({})",
                num(on_p50.median),
                num(off_p50.median),
                ratio(audit_ratio)
            ),
            target: "≤ 1.10×",
            met: audit_ratio <= 1.10,
        }],
        markdown,
    })
}

/// One value per round for each daemon: the audit log on, then off.
type PerDaemon = [Vec<f64>; 2];

/// Pins the calling thread to `cpu`; the set it had before.
fn pin_this_thread(cpu: usize) -> anyhow::Result<nix::sched::CpuSet> {
    let this = nix::unistd::Pid::from_raw(0);
    let previous = nix::sched::sched_getaffinity(this)?;
    let mut only = nix::sched::CpuSet::new();
    only.set(cpu)?;
    nix::sched::sched_setaffinity(this, &only)?;
    Ok(previous)
}

/// Each round: `per_round` round trips to each daemon, alternating call by call (which goes
/// first alternating too); each round's p50 (µs) and the daemon's CPU per call (µs, from
/// its threads' run time in /proc/PID/task/*/schedstat).
fn interleaved(
    on: &Daemon,
    off: &Daemon,
    root: &Path,
    rounds: usize,
    per_round: usize,
) -> anyhow::Result<(PerDaemon, PerDaemon)> {
    let mut sides = Vec::new();
    for daemon in [on, off] {
        // The creator stays connected (the session lives); a second connection submits, so
        // that it is answered with the response alone.
        let mut creator = daemon.client()?;
        let session = creator.create_session(root, json!({}))?;
        let request = json!({
            "session_id": session,
            "calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "one_kb.txt"}}]
        });
        let mut client = daemon.client()?;
        for _ in 0..200 {
            check_read(client.call("tools/execute", request.clone())?)?;
        }
        sides.push((creator, client, request, daemon.pid()));
    }
    let mut p50s = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        let mut times = [Vec::with_capacity(per_round), Vec::with_capacity(per_round)];
        let before = [run_time_ns(sides[0].3)?, run_time_ns(sides[1].3)?];
        for call in 0..per_round {
            for offset in 0..2 {
                let which = (call + offset) % 2;
                let (_, client, request, _) = &mut sides[which];
                let started = Instant::now();
                let answer = client.call("tools/execute", request.clone())?;
                times[which].push(started.elapsed());
                check_read(answer)?;
            }
        }
        for which in 0..2 {
            let spent = run_time_ns(sides[which].3)?.saturating_sub(before[which]);
            cpu[which].push(spent as f64 / per_round as f64 / 1e3);
            p50s[which].push(micros(percentile(&mut times[which], 0.5)));
        }
    }
    Ok((p50s, cpu))
}

/// The run time of every thread of `pid` so far, in ns (/proc/PID/task/*/schedstat).
fn run_time_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let stat = std::fs::read_to_string(task?.path().join("schedstat"))?;
        total += stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

fn count_lines(path: &Path) -> anyhow::Result<usize> {
    Ok(std::fs::read(path)?
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count())
}
