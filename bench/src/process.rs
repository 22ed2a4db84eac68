//! `run_command` against the processes it wraps: a flood of output delivered as `tool/output`
//! events against `cat` through a pipe, and `true` against spawning `bash -c true` directly.

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, ensure};
use serde_json::{Value, json};

use crate::Settings;
use crate::daemon::{Client, Daemon};
use crate::report::{Figure, Section, num, ratio};
use crate::stats;

/// Writes `bytes` of text lines (99 characters and a newline each) to `path`.
pub fn write_text_file(path: &Path, bytes: usize) -> anyhow::Result<()> {
    let line: Vec<u8> = (0..99u8)
        .map(|index| b'a' + index % 26)
        .chain([b'\n'])
        .collect();
    let mut text = Vec::with_capacity(bytes);
    while text.len() < bytes {
        let take = line.len().min(bytes - text.len());
        text.extend_from_slice(&line[..take]);
    }
    std::fs::write(path, text)?;
    Ok(())
}

/// Runs `cat FILE` in `session` and reads every event until the answer, parsing each; returns
/// how many bytes of `tool/output` data arrived. `after_output` is given the bytes received so
/// far after each output event (a slow reader sleeps there).
pub fn cat_through_toold(
    client: &mut Client,
    session: &str,
    file: &Path,
    mut after_output: impl FnMut(u64),
) -> anyhow::Result<u64> {
    let mut streamed = 0u64;
    let answer = client.call_seeing(
        "tools/execute",
        json!({
            "session_id": session,
            "calls": [{"id": "cat", "name": "run_command",
                       "arguments": {"command": format!("cat {}", file.display())}}]
        }),
        |event| {
            if event["method"] == "tool/output" {
                let data = event["params"]["data"].as_str().unwrap_or_default();
                streamed += data.len() as u64;
                after_output(streamed);
            }
            Ok(())
        },
    )?;
    crate::daemon::results_ok(answer)?;
    Ok(streamed)
}

pub fn process_section(settings: &Settings) -> anyhow::Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    let bytes = if settings.quick { 10 << 20 } else { 100 << 20 };
    let file = root.join("output.txt");
    write_text_file(&file, bytes)?;

    let daemon = Daemon::start()?;
    let mut client = daemon.client()?;
    let session = client.create_session(
        &root,
        json!({"rules": {"allow": ["run_command(cat *)", "run_command(true)"]}}),
    )?;

    // The flood: every byte must arrive as events, and `cat` must deliver every byte too.
    let streamed = cat_through_toold(&mut client, &session, &file, |_| {})?;
    ensure!(
        streamed == bytes as u64,
        "toold streamed {streamed} of {bytes} bytes"
    );
    ensure!(cat_to_pipe(&file)? == bytes as u64, "cat lost bytes");
    let output_rounds = settings.rounds;
    let samples = {
        let mut through_toold =
            || cat_through_toold(&mut client, &session, &file, |_| {}).map(drop);
        let mut through_pipe = || cat_to_pipe(&file).map(drop);
        stats::interleaved(output_rounds, &mut [&mut through_toold, &mut through_pipe])?
    };
    let (toold_output, pipe_output) = (samples[0].summary(), samples[1].summary());
    let output_ratio = toold_output.median / pipe_output.median;

    // `true`, many times a round: a spawn is short and noisy. In the default sandbox
    // (workspace_write) and in a session that turned it off.
    let unsandboxed = client.create_session(
        &root,
        json!({"rules": {"allow": ["run_command(true)"]}, "sandbox": {"mode": "off"}}),
    )?;
    let true_in = |session: &str| {
        json!({
            "session_id": session,
            "calls": [{"id": "t", "name": "run_command", "arguments": {"command": "true"}}]
        })
    };
    let spawn_request = true_in(&session);
    let unsandboxed_request = true_in(&unsandboxed);
    let sandbox = crate::daemon::results_ok(client.call("tools/execute", spawn_request.clone())?)?;
    ensure!(
        sandbox[0]["metadata"]["sandbox"]["mode"] == "workspace_write",
        "the spawn figure's command did not run sandboxed: {}",
        sandbox[0]
    );
    crate::daemon::results_ok(client.call("tools/execute", unsandboxed_request.clone())?)?;
    let spawns = if settings.quick { 10 } else { 40 };
    let samples = {
        let client = std::cell::RefCell::new(&mut client);
        let calls_of = |request: &Value| {
            let client = &client;
            let request = request.clone();
            move || -> anyhow::Result<()> {
                for _ in 0..spawns {
                    let answer = client.borrow_mut().call("tools/execute", request.clone())?;
                    crate::daemon::results_ok(answer)?;
                }
                Ok(())
            }
        };
        let mut toold_true = calls_of(&spawn_request);
        let mut toold_unsandboxed_true = calls_of(&unsandboxed_request);
        let mut bash_true = || -> anyhow::Result<()> {
            for _ in 0..spawns {
                // What `run_command` itself spawns, so that the ratio is toold's overhead.
                let status = Command::new("/bin/bash")
                    .args(["--noprofile", "--norc", "-c", "true"])
                    .status()?;
                ensure!(status.success(), "bash -c true failed");
            }
            Ok(())
        };
        stats::interleaved(
            settings.rounds,
            &mut [&mut toold_true, &mut toold_unsandboxed_true, &mut bash_true],
        )?
    };
    let per_spawn = |summary: stats::Summary| stats::Summary {
        median: summary.median / spawns as f64,
        q1: summary.q1 / spawns as f64,
        q3: summary.q3 / spawns as f64,
    };
    let (toold_spawn, unsandboxed_spawn, bash_spawn) = (
        per_spawn(samples[0].summary()),
        per_spawn(samples[1].summary()),
        per_spawn(samples[2].summary()),
    );
    let spawn_ratio = toold_spawn.median / bash_spawn.median;
    let unsandboxed_ratio = unsandboxed_spawn.median / bash_spawn.median;
    let sandbox_cost = toold_spawn.median - unsandboxed_spawn.median;
    daemon.stop()?;

    let megabytes = bytes >> 20;
    let mut markdown = String::from("## Commands\n\n");
    let _ = write!(
        markdown,
        "Output: `run_command` of `cat` on a {megabytes} MB text file, every byte delivered as \
         `tool/output` events to an attached client that parses each one (the bytes counted and \
         checked), against `cat` of the same file into a pipe the harness reads; {} rounds, \
         interleaved, ms, median (IQR).\n\n",
        settings.rounds
    );
    markdown.push_str("| | ms | MB/s |\n|---|---:|---:|\n");
    for (name, summary) in [
        ("toold events", toold_output),
        ("`cat` into a pipe", pipe_output),
    ] {
        let _ = writeln!(
            markdown,
            "| {name} | {} | {} |",
            summary.cell(),
            num(megabytes as f64 / (summary.median / 1e3))
        );
    }
    let _ = writeln!(markdown, "| toold / cat | {} | |\n", ratio(output_ratio));
    let _ = writeln!(
        markdown,
        "Spawn: `tools/execute` of `run_command` `true` (permission allowed by a session rule, \
         so the round trip includes the shell parse and the process-tree cleanup), in the \
         default sandbox (`workspace_write`: Landlock, seccomp, a user, mount, IPC and PID namespace) \
         and in a session with the sandbox off, against spawning `bash -c true` directly and \
         waiting for it; ms per call, median (IQR) over {} rounds of {spawns}, interleaved.\n",
        settings.rounds
    );
    markdown.push_str("| | ms per call | / bash |\n|---|---:|---:|\n");
    let _ = writeln!(
        markdown,
        "| toold `run_command true`, sandboxed | {} | {} |",
        spawn_cell(toold_spawn),
        ratio(spawn_ratio)
    );
    let _ = writeln!(
        markdown,
        "| toold `run_command true`, sandbox off | {} | {} |",
        spawn_cell(unsandboxed_spawn),
        ratio(unsandboxed_ratio)
    );
    let _ = writeln!(
        markdown,
        "| `bash -c true` | {} | |",
        spawn_cell(bash_spawn)
    );
    let _ = writeln!(markdown, "| what the sandbox adds | {sandbox_cost:.2} | |");

    Ok(Section {
        figures: vec![
            Figure {
                id: "output",
                what: format!("{megabytes} MB of command output as `tool/output` events, parsed"),
                compared_with: "`cat` of the same bytes through a pipe".into(),
                result: format!(
                    "{} ms vs {} ms ({})",
                    num(toold_output.median),
                    num(pipe_output.median),
                    ratio(output_ratio)
                ),
                target: "≤ 2×",
                met: output_ratio <= 2.0,
            },
            Figure {
                id: "spawn",
                what: "`run_command` of `true`".into(),
                compared_with: "spawning `bash -c true` directly".into(),
                result: format!(
                    "{} ms vs {} ms ({})",
                    spawn_cell(toold_spawn),
                    spawn_cell(bash_spawn),
                    ratio(spawn_ratio)
                ),
                target: "≤ 1.3×",
                met: spawn_ratio <= 1.3,
            },
            Figure {
                id: "sandbox",
                what: "the sandbox's cost on `run_command` of `true`".into(),
                compared_with: "the same call with the sandbox off".into(),
                result: format!(
                    "{} ms vs {} ms (+{sandbox_cost:.2} ms)",
                    spawn_cell(toold_spawn),
                    spawn_cell(unsandboxed_spawn),
                ),
                target: "≤ +0.5 ms",
                met: sandbox_cost <= 0.5,
            },
        ],
        markdown,
    })
}

fn spawn_cell(summary: stats::Summary) -> String {
    format!("{:.2} ({:.2})", summary.median, summary.iqr())
}

/// `cat FILE` into a pipe, read to the end; the bytes read.
fn cat_to_pipe(file: &Path) -> anyhow::Result<u64> {
    let mut child = Command::new("cat")
        .arg(file)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().context("cat's stdout")?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let read = stdout.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        total += read as u64;
    }
    ensure!(child.wait()?.success(), "cat failed");
    Ok(total)
}
