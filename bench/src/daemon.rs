//! The real daemon as the figures drive it: the release `toold serve` on a private socket with
//! its own config and state, a blocking NDJSON client, and the raw Unix-socket JSON echo that
//! is the floor of any JSON-RPC service on this machine.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

/// The config every figure's daemon runs with: live output is never cut short (the output
/// figure streams 100 MB), and a session may turn the sandbox off (the spawn figure compares
/// commands with and without it); everything else at its default.
const CONFIG_KEYS: &str = "max_stream_bytes = 1073741824\n";
const CONFIG_TABLES: &str = "[sandbox]\nallow_unsandboxed = true\n";

/// A private directory (0700) holding a daemon's socket, config and state, removed on drop.
pub struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    pub fn new() -> anyhow::Result<Self> {
        Self::with_config("")
    }

    /// A place whose config is the figures' own plus `extra`: its top-level keys first, then
    /// its tables (the figures' own `[sandbox]` comes after them).
    pub fn with_config(extra: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let config = dir.path().join("config/toold");
        std::fs::create_dir_all(&config)?;
        std::fs::write(
            config.join("config.toml"),
            format!("{CONFIG_KEYS}{extra}\n{CONFIG_TABLES}"),
        )?;
        Ok(Self { dir })
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/toold.sock")
    }

    /// The daemon's `XDG_STATE_HOME`.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `toold serve` on this place's socket, not started yet.
    pub fn command(&self) -> anyhow::Result<Command> {
        let mut command = Command::new(release_toold()?);
        command
            .args(["serve", "--allow-root", "--socket"])
            .arg(self.socket())
            .env("XDG_STATE_HOME", self.state_dir())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env("TOOLD_LOG", "warn")
            .stdin(Stdio::null());
        Ok(command)
    }
}

/// A running release daemon; stopped with SIGTERM (and checked to exit 0) or killed on drop.
pub struct Daemon {
    child: Child,
    socket: PathBuf,
    _place: Place,
}

impl Daemon {
    pub fn start() -> anyhow::Result<Self> {
        Self::start_with("")
    }

    /// A daemon whose config also has `extra` (see [`Place::with_config`]).
    pub fn start_with(extra: &str) -> anyhow::Result<Self> {
        Self::start_on(extra, None)
    }

    /// [`Self::start_with`], every thread of the daemon on `cpu` when given (by `taskset`).
    pub fn start_on(extra: &str, cpu: Option<usize>) -> anyhow::Result<Self> {
        let place = Place::with_config(extra)?;
        let command = place.command()?;
        let mut command = match cpu {
            Some(cpu) => {
                let mut pinned = Command::new("taskset");
                pinned
                    .args(["-c", &cpu.to_string()])
                    .arg(command.get_program())
                    .args(command.get_args())
                    .envs(
                        command
                            .get_envs()
                            .filter_map(|(name, value)| Some((name, value?))),
                    )
                    .stdin(Stdio::null());
                pinned
            }
            None => command,
        };
        let child = command.spawn().context("start the release toold")?;
        let socket = place.socket();
        let deadline = Instant::now() + Duration::from_secs(30);
        while UnixStream::connect(&socket).is_err() {
            ensure!(Instant::now() < deadline, "toold did not serve within 30 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Self {
            child,
            socket,
            _place: place,
        })
    }

    /// A new connection, initialized.
    pub fn client(&self) -> anyhow::Result<Client> {
        let mut client = Client::connect(&self.socket)?;
        client.call(
            "initialize",
            json!({"protocol_version": 1, "capabilities": {}}),
        )?;
        Ok(client)
    }

    /// The daemon's resident set size now, in bytes.
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        rss_bytes(self.child.id())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's `XDG_STATE_HOME`.
    pub fn state_dir(&self) -> PathBuf {
        self._place.state_dir()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn stop(mut self) -> anyhow::Result<()> {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id())?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
        let status = self.child.wait()?;
        ensure!(status.success(), "toold exited with {status}");
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `VmRSS` of a process, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .context("no VmRSS value")?
        .parse()?;
    Ok(kib * 1024)
}

/// A blocking NDJSON client: one request out, lines in until its response; notifications in
/// between (the session's events) are parsed and handed to the caller or skipped.
pub struct Client {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
    line: Vec<u8>,
}

impl Client {
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let stream = UnixStream::connect(socket)
            .with_context(|| format!("connect to {}", socket.display()))?;
        Ok(Self {
            reader: BufReader::with_capacity(64 * 1024, stream.try_clone()?),
            writer: stream,
            next_id: 1,
            line: Vec::new(),
        })
    }

    pub fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.call_seeing(method, params, |_| Ok(()))
    }

    /// Like [`call`](Self::call), giving every notification that arrives before the response
    /// to `on_event`, parsed.
    pub fn call_seeing(
        &mut self,
        method: &str,
        params: Value,
        mut on_event: impl FnMut(&Value) -> anyhow::Result<()>,
    ) -> anyhow::Result<Value> {
        let id = self.send(method, params)?;
        loop {
            let mut message = self.read_message()?;
            if message.get("method").is_some() {
                on_event(&message)?;
                continue;
            }
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    bail!("{method} failed: {error}");
                }
                return Ok(message["result"].take());
            }
        }
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )?;
        request.push(b'\n');
        self.writer.write_all(&request)?;
        Ok(id)
    }

    /// The next message, parsed.
    pub fn read_message(&mut self) -> anyhow::Result<Value> {
        self.line.clear();
        if self.reader.read_until(b'\n', &mut self.line)? == 0 {
            bail!("the daemon closed the connection");
        }
        Ok(serde_json::from_slice(&self.line)?)
    }

    /// A new session at `cwd` with these extra `session/create` fields; returns its id.
    pub fn create_session(&mut self, cwd: &Path, extra: Value) -> anyhow::Result<String> {
        let mut params = json!({"cwd": cwd});
        if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
            params.extend(extra);
        }
        let snapshot = self.call("session/create", params)?;
        Ok(snapshot["session_id"]
            .as_str()
            .context("a session id")?
            .to_owned())
    }

    /// `tools/execute` of `calls` in `session`: the per-call outcomes, each checked `ok`.
    pub fn execute_ok(&mut self, session: &str, calls: Value) -> anyhow::Result<Vec<Value>> {
        let answer = self.call(
            "tools/execute",
            json!({"session_id": session, "calls": calls}),
        )?;
        results_ok(answer)
    }
}

/// The `result` of every call in a `tools/execute` answer, each checked to be `ok`.
pub fn results_ok(mut answer: Value) -> anyhow::Result<Vec<Value>> {
    let Value::Array(results) = answer["results"].take() else {
        bail!("no results in {answer}");
    };
    results
        .into_iter()
        .map(|mut entry| {
            let result = entry["result"].take();
            ensure!(result["ok"] == json!(true), "a call failed: {result}");
            Ok(result)
        })
        .collect()
}

/// The floor: a thread per connection that parses each JSON line and answers it with the
/// params as the result. Serves until the process exits.
pub fn start_echo(path: &Path) -> anyhow::Result<()> {
    let listener = UnixListener::bind(path)?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                let mut counted = thread_cpu_ns();
                while reader.read_line(&mut line)? > 0 {
                    let request: Value = serde_json::from_str(&line)?;
                    let mut response = serde_json::to_vec(
                        &json!({"jsonrpc": "2.0", "id": request["id"], "result": request["params"]}),
                    )?;
                    response.push(b'\n');
                    writer.write_all(&response)?;
                    line.clear();
                    let now = thread_cpu_ns();
                    ECHO_CPU_NS.fetch_add(now - counted, Ordering::Relaxed);
                    counted = now;
                }
                Ok(())
            });
        }
    });
    Ok(())
}

/// The CPU time every echo thread has spent, in ns, counted after each answer.
static ECHO_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// The CPU time the echo has spent so far, in ns.
pub fn echo_cpu_ns() -> u64 {
    ECHO_CPU_NS.load(Ordering::Relaxed)
}

/// This thread's CPU time, in ns.
fn thread_cpu_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |time| {
        u64::try_from(time.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(time.tv_nsec()).unwrap_or(0)
    })
}

/// The CPU time process `pid` (all its threads, also those that exited) has spent, in ns, to
/// the clock tick (/proc/PID/stat's `utime` and `stime`).
pub fn process_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat has no command name"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields
        .get(11..13)
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat is too short"))?
        .iter()
        .map(|field| field.parse::<u64>())
        .sum::<Result<u64, _>>()?;
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)?
        .and_then(|ticks| u64::try_from(ticks).ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100);
    Ok(ticks * 1_000_000_000 / per_second)
}

/// `target/release/toold`, built first (a no-op when it is up to date).
pub fn release_toold() -> anyhow::Result<PathBuf> {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(path) = BUILT.get() {
        return Ok(path.clone());
    }
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
    Ok(BUILT.get_or_init(|| binary).clone())
}
