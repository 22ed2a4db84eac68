//! One-call batch round trips through the real daemon against a raw Unix-socket JSON echo,
//! measured in the same run by the same blocking client, interleaved.
//!
//! toold: `tools/execute` of one `read_file` of a 1 KB file, on a connection attached to the
//! session, so that each round trip also carries the batch's six events (what an agent pays).
//! Echo: a thread that parses each JSON line and writes it back, the floor of any JSON-RPC
//! service on this machine.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

/// Round trips per contender per round.
const PER_ROUND: usize = 200;

pub fn roundtrip_suite(rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
    std::fs::write(root.join("one_kb.txt"), "x".repeat(1023) + "\n")?;
    let mut daemon = Daemon::start(&root)?;
    let echo_path = root.join("echo.sock");
    start_echo(&echo_path)?;

    let mut toold = Client::connect(&daemon.socket)?;
    toold.call(
        "initialize",
        json!({"protocol_version": 1, "capabilities": {}}),
    )?;
    let session = toold.call("session/create", json!({"cwd": root}))?;
    let session_id = session["session_id"]
        .as_str()
        .context("a session id")?
        .to_owned();
    let execute = json!({
        "session_id": session_id,
        "calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "one_kb.txt"}}]
    });
    let mut echo = Client::connect(&echo_path)?;

    // Warm both paths (first-use costs, page cache) before timing.
    for _ in 0..50 {
        check_read(&toold.call("tools/execute", execute.clone())?)?;
        echo.call("tools/execute", execute.clone())?;
    }
    let (mut toold_times, mut echo_times) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            let result = toold.call("tools/execute", execute.clone())?;
            toold_times.push(started.elapsed());
            check_read(&result)?;
        }
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            echo.call("tools/execute", execute.clone())?;
            echo_times.push(started.elapsed());
        }
    }
    daemon.stop()?;
    let (toold_p50, toold_p99) = (
        percentile(&mut toold_times, 0.50),
        percentile(&mut toold_times, 0.99),
    );
    let (echo_p50, echo_p99) = (
        percentile(&mut echo_times, 0.50),
        percentile(&mut echo_times, 0.99),
    );
    println!("### One-call batch round trip (read_file of 1 KB, attached connection)\n");
    println!("{rounds} interleaved rounds of {PER_ROUND} round trips each; times in µs.\n");
    println!("| | p50 | p99 |");
    println!("|---|---:|---:|");
    println!(
        "| toold `tools/execute` | {:.0} | {:.0} |",
        micros(toold_p50),
        micros(toold_p99)
    );
    println!(
        "| raw UDS JSON echo | {:.0} | {:.0} |",
        micros(echo_p50),
        micros(echo_p99)
    );
    println!(
        "| toold / echo | {:.2}× | {:.2}× |",
        micros(toold_p50) / micros(echo_p50),
        micros(toold_p99) / micros(echo_p99)
    );
    println!("\nTarget: p50 ≤ 3× the echo.");
    Ok(())
}

fn check_read(result: &Value) -> anyhow::Result<()> {
    let outcome = &result["results"][0]["result"];
    ensure!(outcome["ok"] == json!(true), "read_file failed: {outcome}");
    ensure!(
        outcome["content"].as_str().map(str::len) == Some(1024),
        "read_file returned the wrong text"
    );
    Ok(())
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn percentile(samples: &mut [Duration], quantile: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * quantile).round() as usize;
    samples[index.min(samples.len() - 1)]
}

/// A blocking NDJSON client: one request out, lines in until its response (events skipped).
struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    line: String,
}

impl Client {
    fn connect(socket: &Path) -> anyhow::Result<Self> {
        let stream = UnixStream::connect(socket)
            .with_context(|| format!("connect to {}", socket.display()))?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
            line: String::new(),
        })
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )?;
        request.push(b'\n');
        self.writer.write_all(&request)?;
        loop {
            self.line.clear();
            if self.reader.read_line(&mut self.line)? == 0 {
                bail!("the connection closed during {method}");
            }
            let mut message: Value = serde_json::from_str(&self.line)?;
            if message.get("method").is_none() && message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    bail!("{method} failed: {error}");
                }
                return Ok(message["result"].take());
            }
        }
    }
}

/// The floor: parse each JSON line, answer it as the result, on a thread per connection.
fn start_echo(path: &Path) -> anyhow::Result<()> {
    let listener = UnixListener::bind(path)?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line)? > 0 {
                    let request: Value = serde_json::from_str(&line)?;
                    let mut response = serde_json::to_vec(
                        &json!({"jsonrpc": "2.0", "id": request["id"], "result": request["params"]}),
                    )?;
                    response.push(b'\n');
                    writer.write_all(&response)?;
                    line.clear();
                }
                Ok(())
            });
        }
    });
    Ok(())
}

/// The release `toold` binary serving on a socket in `root`.
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(root: &Path) -> anyhow::Result<Self> {
        let binary = release_toold()?;
        let socket = root.join("run/toold.sock");
        let child = Command::new(&binary)
            .args(["serve", "--allow-root", "--socket"])
            .arg(&socket)
            .env("XDG_STATE_HOME", root.join("state"))
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env("TOOLD_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while UnixStream::connect(&socket).is_err() {
            ensure!(Instant::now() < deadline, "toold did not serve within 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Self { child, socket })
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let status = self.child.wait()?;
        ensure!(status.success(), "toold exited with {status}");
        Ok(())
    }
}

/// `target/release/toold`, built first (a no-op when it is up to date).
fn release_toold() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "toold",
            "--bin",
            "toold",
        ])
        .status()?;
    ensure!(status.success(), "building the release toold failed");
    let harness = std::env::current_exe()?;
    let binary = harness
        .parent()
        .context("the harness lives in target/release")?
        .join("toold");
    ensure!(binary.exists(), "{} is missing", binary.display());
    Ok(binary)
}
