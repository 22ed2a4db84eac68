//! MCP servers through toold: one call of server-everything's `echo` through the daemon (a
//! client's `tools/execute`, the pipeline, the daemon's rmcp client, the server) against the
//! same call from a bare rmcp client of its own copy of the server, and beside them what any
//! relay pays ([`relay_floor`]), interleaved; the memory that one shared copy for 10 sessions
//! saves against the 10 copies that 10 hosts would run; and toold as an MCP server: `read_file`
//! through `toold mcp serve` against the reference filesystem server's `read_text_file`, from
//! the same Python MCP client.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use rmcp::RoleClient;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RunningService, ServiceExt};
use serde_json::json;

use crate::Settings;
use crate::daemon::{Daemon, rss_bytes};
use crate::relay_floor;
use crate::report::{Figure, Section, ratio};
use crate::roundtrip::percentile;
use crate::stats::{Samples, Summary};

/// Sessions (and, for the comparison, copies of the server) of the memory figure.
const SESSIONS: usize = 10;

/// Calls each copy of server-everything answers before the figure is measured: a fresh copy's
/// `echo` takes 175 µs for its first 500 calls and settles near 100 µs after 4,000 (node's JIT
/// warming; a Python client talking to it directly, 2026-12-05).
const WARM_UP_CALLS: usize = 4_000;

/// server-everything as `tests/mcp_servers/install.sh` installs it.
fn everything_program(workspace: &Path) -> anyhow::Result<PathBuf> {
    let program =
        workspace.join("tests/mcp_servers/installed/node/node_modules/.bin/mcp-server-everything");
    ensure!(
        program.exists(),
        "{} is not there: run `bash tests/mcp_servers/install.sh` first",
        program.display()
    );
    Ok(program)
}

pub fn mcp_section(settings: &Settings, workspace: &Path) -> anyhow::Result<Section> {
    let program = everything_program(workspace)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let config = format!(
        "[mcp.servers.everything]\ncommand = {:?}\n",
        program.display().to_string()
    );
    let daemon = Daemon::start_with(&config)?;
    let mut toold = daemon.client()?;
    let server_pid = wait_ready(&mut toold)?;
    let work = tempfile::tempdir()?;
    let session = toold.create_session(
        &work.path().canonicalize()?,
        json!({"rules": {"allow": ["mcp__everything__echo"]}}),
    )?;
    let echo =
        json!([{"id": "e", "name": "mcp__everything__echo", "arguments": {"message": "hi"}}]);
    // A session nobody is attached to (its creator detached): its calls send the response
    // alone, as the bare client gets; the attached one's also send the call's five events.
    let mut detached = daemon.client()?;
    let alone = detached.create_session(
        &work.path().canonicalize()?,
        json!({"rules": {"allow": ["mcp__everything__echo"]}}),
    )?;
    detached.call("session/detach", json!({"session_id": alone}))?;
    let bare = runtime.block_on(bare_client(&program))?;
    let mut direct = relay_floor::Direct::start(&program)?;
    let mut relayed = relay_floor::Relayed::start(&program)?;

    let per_round = if settings.quick { 50 } else { 200 };
    // Every copy of the server answers as many calls before the first round (toold's through
    // its two sessions), so that none is measured while its JIT is still warming.
    for _ in 0..WARM_UP_CALLS / 2 {
        toold.execute_ok(&session, echo.clone())?;
        detached.execute_ok(&alone, echo.clone())?;
        for _ in 0..2 {
            runtime.block_on(bare_echo(&bare))?;
            direct.client.echo()?;
            relayed.client.echo()?;
        }
    }
    let p50_of = |call: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<Duration> {
        let mut times = Vec::with_capacity(per_round);
        for _ in 0..per_round {
            let started = Instant::now();
            call()?;
            times.push(started.elapsed());
        }
        Ok(percentile(&mut times, 0.5))
    };
    let mut attached_p50s = Samples::default();
    let mut detached_p50s = Samples::default();
    let mut bare_p50s = Samples::default();
    let mut direct_p50s = Samples::default();
    let mut relayed_p50s = Samples::default();
    for _ in 0..settings.rounds {
        attached_p50s.push(p50_of(&mut || {
            toold.execute_ok(&session, echo.clone()).map(drop)
        })?);
        detached_p50s.push(p50_of(&mut || {
            detached.execute_ok(&alone, echo.clone()).map(drop)
        })?);
        bare_p50s.push(p50_of(&mut || runtime.block_on(bare_echo(&bare)))?);
        direct_p50s.push(p50_of(&mut || direct.client.echo())?);
        relayed_p50s.push(p50_of(&mut || relayed.client.echo())?);
    }
    drop((direct, relayed));
    let attached_p50 = attached_p50s.summary();
    let toold_p50 = detached_p50s.summary();
    let bare_p50 = bare_p50s.summary();
    let call_ratio = toold_p50.median / bare_p50.median;
    let direct_p50 = direct_p50s.summary();
    let relayed_p50 = relayed_p50s.summary();
    let hop_ratio = relayed_p50.median / direct_p50.median;

    // Memory: 10 sessions on 10 connections, each having called the server once, against 10
    // copies of the server, each having answered one call (the bare client's, plus 9 more).
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        let mut client = daemon.client()?;
        let session = client.create_session(
            &work.path().canonicalize()?,
            json!({"rules": {"allow": ["mcp__everything__echo"]}}),
        )?;
        client.execute_ok(&session, echo.clone())?;
        clients.push(client);
    }
    let shared = tree_rss(server_pid)? + daemon.rss_bytes()?;
    let mut copies = vec![bare];
    for _ in 1..SESSIONS {
        let copy = runtime.block_on(bare_client(&program))?;
        runtime.block_on(bare_echo(&copy))?;
        copies.push(copy);
    }
    let mut separate = 0;
    for copy in &copies {
        separate += tree_rss(copy.pid)?;
    }
    for copy in copies {
        runtime.block_on(copy.close());
    }
    drop(clients);
    let serve = serve_read(settings, workspace, &daemon)?;
    daemon.stop()?;
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let saving = mib(separate) - mib(shared);

    let mut markdown = String::from("## MCP servers\n\n");
    let _ = writeln!(
        markdown,
        "One call of `@modelcontextprotocol/server-everything`'s `echo` (as \
         `tests/mcp_servers/install.sh` installs it): through toold (`tools/execute` of \
         `mcp__everything__echo` by the blocking client, in a session whose rule allows it: the \
         pipeline, the daemon's MCP client, the server's stdio; in a session nobody is \
         attached to, whose calls send the response alone as the bare client gets it, and in \
         one whose attached client reads the call's five events too) against the same \
         `tools/call` \
         from a bare rmcp client (the same version, in this process) of its own copy of the \
         server; and what any relay pays here: a raw client (JSON lines, blocking, as toold's) \
         calling a copy straight through its stdio, and another copy through a relay that does \
         no work (a tokio runtime of two workers, as the daemon's, copying bytes between a Unix \
         socket and the server). Each copy answers {WARM_UP_CALLS} calls first (a fresh copy is \
         still warming: 175 µs a call at first, about 100 after 4,000, from a Python client); \
         then {} rounds of {per_round} calls each, interleaved. Medians (IQR) of each round's \
         p50, in µs.\n",
        settings.rounds
    );
    markdown.push_str("| | p50 |\n|---|---:|\n");
    p50_row(
        &mut markdown,
        "through toold, the response alone",
        &toold_p50,
    );
    p50_row(
        &mut markdown,
        "through toold, attached: five events and the response",
        &attached_p50,
    );
    p50_row(&mut markdown, "bare rmcp client", &bare_p50);
    p50_row(
        &mut markdown,
        "raw client, straight to the server",
        &direct_p50,
    );
    p50_row(
        &mut markdown,
        "raw client, through the zero-work relay",
        &relayed_p50,
    );
    let _ = writeln!(
        markdown,
        "| toold / bare (the response alone) | {} |",
        ratio(call_ratio)
    );
    let _ = writeln!(
        markdown,
        "| relay / raw client: the hop alone | {} |",
        ratio(hop_ratio)
    );
    let _ = writeln!(
        markdown,
        "| toold (the response alone) / relay | {} |\n",
        ratio(toold_p50.median / relayed_p50.median)
    );
    let _ = writeln!(
        markdown,
        "Memory: {SESSIONS} sessions on {SESSIONS} connections, each having called the server \
         once, share one copy of it: the daemon and that copy (with what it started) take \
         {:.1} MiB of RSS. {SESSIONS} hosts that each start their own copy (each copy having \
         answered a call) take {:.1} MiB. Saved: {saving:.1} MiB.\n",
        mib(shared),
        mib(separate)
    );
    let serve_ratio = serve.toold.median / serve.filesystem.median;
    let _ = writeln!(
        markdown,
        "`toold mcp serve` as an MCP server: `read_file` of a 1 KB file through it (to the \
         daemon over its socket, a one-call batch in a session whose rule allows it) against \
         `read_text_file` of the reference `@modelcontextprotocol/server-filesystem` (as \
         `tests/mcp_servers/install.sh` installs it) of the same file, by the same Python `mcp` \
         client (`bench/mcp_serve_read.py`), {} interleaved rounds of {} calls each. Medians \
         (IQR) of each round's p50, in µs.\n",
        settings.rounds, serve.per_round
    );
    markdown.push_str("| | p50 |\n|---|---:|\n");
    p50_row(&mut markdown, "`toold mcp serve` `read_file`", &serve.toold);
    p50_row(
        &mut markdown,
        "server-filesystem `read_text_file`",
        &serve.filesystem,
    );
    let _ = writeln!(
        markdown,
        "| toold / server-filesystem | {} |\n",
        ratio(serve_ratio)
    );
    Ok(Section {
        figures: vec![
            Figure {
                id: "mcp-call",
                what: "one MCP call (server-everything `echo`)".into(),
                compared_with: "a bare rmcp client of the same server".into(),
                result: format!(
                    "p50 {} µs vs {} µs ({}); a relay that does no work: {} µs against {} µs \
                     straight ({})",
                    crate::report::num(toold_p50.median * 1e3),
                    crate::report::num(bare_p50.median * 1e3),
                    ratio(call_ratio),
                    crate::report::num(relayed_p50.median * 1e3),
                    crate::report::num(direct_p50.median * 1e3),
                    ratio(hop_ratio)
                ),
                target: "≤ 1.5×",
                met: call_ratio <= 1.5,
            },
            Figure {
                id: "mcp-shared-memory",
                what: format!("RSS of one shared server for {SESSIONS} sessions"),
                compared_with: format!("{SESSIONS} copies of the server"),
                result: format!(
                    "{:.1} MiB (daemon included) vs {:.1} MiB: {saving:.1} MiB saved",
                    mib(shared),
                    mib(separate)
                ),
                target: "a saving",
                met: saving > 0.0,
            },
            Figure {
                id: "mcp-serve-read",
                what: "`read_file` of 1 KB through `toold mcp serve` (Python `mcp` client)".into(),
                compared_with: "server-filesystem's `read_text_file`, the same client".into(),
                result: format!(
                    "p50 {} µs vs {} µs ({})",
                    crate::report::num(serve.toold.median * 1e3),
                    crate::report::num(serve.filesystem.median * 1e3),
                    ratio(serve_ratio)
                ),
                target: "≤ 1.0×",
                met: serve_ratio <= 1.0,
            },
        ],
        markdown,
    })
}

/// A row of a p50 table: the median (IQR) of each round's p50, in µs.
fn p50_row(markdown: &mut String, what: &str, p50: &Summary) {
    let _ = writeln!(
        markdown,
        "| {what} | {} ({}) |",
        crate::report::num(p50.median * 1e3),
        crate::report::num(p50.iqr() * 1e3)
    );
}

/// The `toold mcp serve` figure's medians, in milliseconds.
struct ServeRead {
    toold: Summary,
    filesystem: Summary,
    per_round: usize,
}

/// `bench/mcp_serve_read.py` run by the Python of `install.sh`, against `toold mcp serve` on
/// `daemon` and server-filesystem, reading the same 1 KB file.
fn serve_read(settings: &Settings, workspace: &Path, daemon: &Daemon) -> anyhow::Result<ServeRead> {
    let installed = workspace.join("tests/mcp_servers/installed");
    let python = installed.join("python/bin/python");
    let filesystem = installed.join("node/node_modules/.bin/mcp-server-filesystem");
    for needed in [&python, &filesystem] {
        ensure!(
            needed.exists(),
            "{} is not there: run `bash tests/mcp_servers/install.sh` first",
            needed.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let dir_path = dir.path().canonicalize()?;
    let file = dir_path.join("one-kilobyte.txt");
    let line = "toold reads this file through an MCP host, as server-filesystem does.\n";
    let mut text = line.repeat(1024 / line.len() + 1);
    text.truncate(1024);
    std::fs::write(&file, text)?;
    let toold = json!([
        crate::daemon::release_toold()?,
        "mcp",
        "serve",
        "--socket",
        daemon.socket(),
        "--allow",
        "read_file"
    ]);
    let server_filesystem = json!([filesystem, dir_path]);
    let per_round = if settings.quick { 50 } else { 200 };
    let output = std::process::Command::new(&python)
        .arg(workspace.join("bench/mcp_serve_read.py"))
        .arg(&file)
        .arg(settings.rounds.to_string())
        .arg(per_round.to_string())
        .env("TOOLD_MCP_SERVER", toold.to_string())
        .env("FS_MCP_SERVER", server_filesystem.to_string())
        .output()
        .context("run bench/mcp_serve_read.py")?;
    ensure!(
        output.status.success(),
        "bench/mcp_serve_read.py failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let p50s: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("bench/mcp_serve_read.py's JSON")?;
    let millis = |key: &str| -> anyhow::Result<Summary> {
        let seconds = p50s[key].as_array().context("each round's p50")?;
        let values: Vec<f64> = seconds
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .map(|seconds| seconds * 1e3)
            .collect();
        ensure!(
            values.len() == settings.rounds,
            "a p50 for every round: {p50s}"
        );
        Ok(Summary::of(&values))
    };
    Ok(ServeRead {
        toold: millis("toold")?,
        filesystem: millis("filesystem")?,
        per_round,
    })
}

/// Waits until the daemon's server is ready; its pid.
fn wait_ready(client: &mut crate::daemon::Client) -> anyhow::Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = client.call("mcp/status", json!({}))?;
        let server = &status["servers"][0];
        if server["state"] == "ready" {
            return u32::try_from(server["pid"].as_u64().context("a pid")?).context("a pid");
        }
        ensure!(
            Instant::now() < deadline,
            "the MCP server never became ready: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A bare rmcp client of a copy of the server of its own.
struct Bare {
    service: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
    pid: u32,
}

impl Bare {
    async fn close(mut self) {
        let _ = self.service.cancel().await;
        let _ = self.child.kill().await;
    }
}

async fn bare_client(program: &Path) -> anyhow::Result<Bare> {
    let mut child = tokio::process::Command::new(program)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", program.display()))?;
    let pid = child.id().context("the server's pid")?;
    let stdout = child.stdout.take().context("stdout")?;
    let stdin = child.stdin.take().context("stdin")?;
    let service = ().serve((stdout, stdin)).await?;
    Ok(Bare {
        service,
        child,
        pid,
    })
}

async fn bare_echo(bare: &Bare) -> anyhow::Result<()> {
    let mut params = CallToolRequestParams::new("echo");
    params.arguments = json!({"message": "hi"}).as_object().cloned();
    let result = bare.service.peer().call_tool(params).await?;
    ensure!(result.is_error != Some(true), "echo failed: {result:?}");
    Ok(())
}

/// The RSS of a process and of everything descending from it.
fn tree_rss(pid: u32) -> anyhow::Result<u64> {
    let mut total = rss_bytes(pid)?;
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for entry in std::fs::read_dir("/proc")? {
            let Some(child) = entry?
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if ppid == Some(parent) {
                total += rss_bytes(child).unwrap_or(0);
                parents.push(child);
            }
        }
    }
    Ok(total)
}
