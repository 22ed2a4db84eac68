//! The daemon's own cost: one-call batch round trips, alone and from 16 clients at once,
//! against a raw Unix-socket JSON echo measured in the same run by the same blocking client.
//!
//! toold: `tools/execute` of one `read_file` of a 1 KB file, on a connection attached to the
//! session, so that each round trip also carries the batch's five events (what an agent pays).
//! Echo: a thread per connection that parses each JSON line and writes it back.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::ensure;
use serde_json::{Value, json};

use crate::Settings;
use crate::daemon::{Client, Daemon, echo_cpu_ns, process_cpu_ns, start_echo};
use crate::report::{Figure, Section, num, ratio};
use crate::stats::{Samples, Summary};

/// Clients of the throughput figure.
const CLIENTS: usize = 16;

pub fn roundtrip_section(settings: &Settings) -> anyhow::Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    std::fs::write(root.join("one_kb.txt"), "x".repeat(1023) + "\n")?;
    let daemon = Daemon::start()?;
    let echo_path = root.join("echo.sock");
    start_echo(&echo_path)?;
    let execute = |session: &str| {
        json!({
            "session_id": session,
            "calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "one_kb.txt"}}]
        })
    };

    let mut toold = daemon.client()?;
    let session = toold.create_session(&root, json!({}))?;
    let request = execute(&session);
    let mut echo = Client::connect(&echo_path)?;
    // Warm both paths (first-use costs, page cache) before timing.
    for _ in 0..200 {
        check_read(toold.call("tools/execute", request.clone())?)?;
        echo.call("tools/execute", request.clone())?;
    }
    let per_round = if settings.quick { 100 } else { 300 };
    let (mut toold_all, mut echo_all) = (Vec::new(), Vec::new());
    let (mut toold_p50s, mut echo_p50s) = (Samples::default(), Samples::default());
    // The CPU each side spent answering, over every round: the daemon's process, the echo's
    // threads.
    let (mut toold_cpu_ns, mut echo_cpu) = (0u64, 0u64);
    for _ in 0..settings.rounds {
        let mut times = Vec::with_capacity(per_round);
        let cpu_before = process_cpu_ns(daemon.pid())?;
        for _ in 0..per_round {
            let started = Instant::now();
            let answer = toold.call("tools/execute", request.clone())?;
            times.push(started.elapsed());
            check_read(answer)?;
        }
        toold_cpu_ns += process_cpu_ns(daemon.pid())?.saturating_sub(cpu_before);
        toold_p50s.push(percentile(&mut times, 0.5));
        toold_all.extend(times);
        let mut times = Vec::with_capacity(per_round);
        let cpu_before = echo_cpu_ns();
        for _ in 0..per_round {
            let started = Instant::now();
            echo.call("tools/execute", request.clone())?;
            times.push(started.elapsed());
        }
        echo_cpu += echo_cpu_ns().saturating_sub(cpu_before);
        echo_p50s.push(percentile(&mut times, 0.5));
        echo_all.extend(times);
    }
    let calls = (settings.rounds * per_round) as f64;
    let toold_cpu_per_call = toold_cpu_ns as f64 / calls / 1e3;
    let echo_cpu_per_call = echo_cpu as f64 / calls / 1e3;
    let cpu_ratio = toold_cpu_per_call / echo_cpu_per_call;
    let toold_p50 = toold_p50s.summary();
    let echo_p50 = echo_p50s.summary();
    let toold_p99 = percentile(&mut toold_all, 0.99);
    let echo_p99 = percentile(&mut echo_all, 0.99);
    let p50_ratio = toold_p50.median / echo_p50.median;
    let p99_ratio = micros(toold_p99) / micros(echo_p99);

    let throughput = throughput(&daemon, &root, &echo_path, settings, &execute)?;
    daemon.stop()?;

    let mut markdown = String::from("## The daemon's own cost\n\n");
    let _ = writeln!(
        markdown,
        "One-call batch: `tools/execute` of one `read_file` of a 1 KB file through the release \
         daemon, on a connection attached to the session (so each round trip also carries the \
         batch's five events, parsed by the client), against a raw Unix-socket JSON echo (a \
         thread per connection that parses each line and answers it), by the same blocking \
         client, {} rounds of {per_round} round trips each, interleaved. p50 is the median (IQR) \
         of each round's p50; p99 is over every round trip. Times in µs.\n",
        settings.rounds
    );
    markdown.push_str("| | p50 | p99 |\n|---|---:|---:|\n");
    let _ = writeln!(
        markdown,
        "| toold `tools/execute` | {} ({}) | {} |",
        num(toold_p50.median * 1e3),
        num(toold_p50.iqr() * 1e3),
        num(micros(toold_p99))
    );
    let _ = writeln!(
        markdown,
        "| raw UDS JSON echo | {} ({}) | {} |",
        num(echo_p50.median * 1e3),
        num(echo_p50.iqr() * 1e3),
        num(micros(echo_p99))
    );
    let _ = writeln!(
        markdown,
        "| toold / echo | {} | {} |\n",
        ratio(p50_ratio),
        ratio(p99_ratio)
    );
    let _ = writeln!(
        markdown,
        "CPU per call over the same round trips: the daemon's process (`utime` + `stime` of \
         /proc/PID/stat, every thread, to the clock tick) against the echo's thread (its \
         `CLOCK_THREAD_CPUTIME_ID`); µs.\n"
    );
    markdown.push_str("| | CPU µs per call |\n|---|---:|\n");
    let _ = writeln!(markdown, "| toold | {} |", num(toold_cpu_per_call));
    let _ = writeln!(markdown, "| echo | {} |", num(echo_cpu_per_call));
    let _ = writeln!(markdown, "| toold / echo | {} |\n", ratio(cpu_ratio));
    let _ = writeln!(
        markdown,
        "Throughput: {CLIENTS} clients at once, each on its own connection and session, one-call \
         batches back to back for {} ms per round, against the same echo with {CLIENTS} \
         connections; calls per second, median (IQR) over {} rounds.\n",
        throughput.window.as_millis(),
        settings.rounds
    );
    markdown.push_str("| | calls/s |\n|---|---:|\n");
    let _ = writeln!(
        markdown,
        "| toold | {} ({}) |",
        num(throughput.toold.median),
        num(throughput.toold.iqr())
    );
    let _ = writeln!(
        markdown,
        "| echo | {} ({}) |",
        num(throughput.echo.median),
        num(throughput.echo.iqr())
    );
    let throughput_ratio = throughput.toold.median / throughput.echo.median;
    let _ = writeln!(markdown, "| toold / echo | {} |", ratio(throughput_ratio));

    Ok(Section {
        figures: vec![
            Figure {
                id: "roundtrip",
                what: "one-call batch round trip, 1 KB `read_file`".into(),
                compared_with: "raw Unix-socket JSON echo".into(),
                result: format!(
                    "p50 {} µs vs {} µs ({}); p99 {} µs vs {} µs ({})",
                    num(toold_p50.median * 1e3),
                    num(echo_p50.median * 1e3),
                    ratio(p50_ratio),
                    num(micros(toold_p99)),
                    num(micros(echo_p99)),
                    ratio(p99_ratio)
                ),
                target: "p50 ≤ 3×",
                met: p50_ratio <= 3.0,
            },
            Figure {
                id: "cpu-per-call",
                what: "daemon CPU per one-call batch, 1 KB `read_file`".into(),
                compared_with: "the echo's CPU per answer".into(),
                result: format!(
                    "{} µs vs {} µs ({})",
                    num(toold_cpu_per_call),
                    num(echo_cpu_per_call),
                    ratio(cpu_ratio)
                ),
                target: "≤ 4×",
                met: cpu_ratio <= 4.0,
            },
            Figure {
                id: "throughput",
                what: format!("calls/s, {CLIENTS} concurrent clients, one-call batches"),
                compared_with: "the same echo".into(),
                result: format!(
                    "{} vs {} calls/s ({})",
                    num(throughput.toold.median),
                    num(throughput.echo.median),
                    ratio(throughput_ratio)
                ),
                target: "≥ 0.5×",
                met: throughput_ratio >= 0.5,
            },
        ],
        markdown,
    })
}

/// Calls per second of each side, median and quartiles over rounds.
struct Throughput {
    window: Duration,
    toold: Summary,
    echo: Summary,
}

fn throughput(
    daemon: &Daemon,
    root: &Path,
    echo_path: &Path,
    settings: &Settings,
    execute: &dyn Fn(&str) -> Value,
) -> anyhow::Result<Throughput> {
    let window = Duration::from_millis(if settings.quick { 300 } else { 1000 });
    let mut toold_clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut client = daemon.client()?;
        let session = client.create_session(root, json!({}))?;
        toold_clients.push((client, execute(&session)));
    }
    let mut echo_clients = Vec::new();
    for _ in 0..CLIENTS {
        echo_clients.push((Client::connect(echo_path)?, execute("echo")));
    }
    let (mut toold, mut echo) = (Vec::new(), Vec::new());
    for round in 0..settings.rounds {
        // Alternate which side goes first, so neither always meets the warmer machine.
        if round % 2 == 0 {
            toold.push(calls_per_second(&mut toold_clients, window, true)?);
            echo.push(calls_per_second(&mut echo_clients, window, false)?);
        } else {
            echo.push(calls_per_second(&mut echo_clients, window, false)?);
            toold.push(calls_per_second(&mut toold_clients, window, true)?);
        }
    }
    Ok(Throughput {
        window,
        toold: Summary::of(&toold),
        echo: Summary::of(&echo),
    })
}

/// Every client calls back to back for `window`; the calls finished per second, in all.
fn calls_per_second(
    clients: &mut [(Client, Value)],
    window: Duration,
    check: bool,
) -> anyhow::Result<f64> {
    let start = Barrier::new(clients.len());
    let began = Instant::now();
    let counts: Vec<anyhow::Result<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|(client, request)| {
                let start = &start;
                scope.spawn(move || -> anyhow::Result<u64> {
                    start.wait();
                    let until = Instant::now() + window;
                    let mut calls = 0;
                    while Instant::now() < until {
                        let answer = client.call("tools/execute", request.clone())?;
                        if check {
                            check_read(answer)?;
                        }
                        calls += 1;
                    }
                    Ok(calls)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a client thread panicked"))
            .collect()
    });
    let elapsed = began.elapsed();
    let mut total = 0;
    for count in counts {
        total += count?;
    }
    Ok(total as f64 / elapsed.as_secs_f64())
}

pub fn check_read(mut answer: Value) -> anyhow::Result<()> {
    let outcome = answer["results"][0]["result"].take();
    ensure!(outcome["ok"] == json!(true), "read_file failed: {outcome}");
    ensure!(
        outcome["content"].as_str().map(str::len) == Some(1024),
        "read_file returned the wrong text"
    );
    Ok(())
}

pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// The `quantile` of `samples` (sorted in place), nearest rank; zero when there are none.
pub fn percentile(samples: &mut [Duration], quantile: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * quantile).round() as usize;
    samples
        .get(index.min(samples.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}
