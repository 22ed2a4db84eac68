//! The real daemon for end-to-end tests: `toold serve` started as a process on a socket in a
//! temporary directory (with its own state and config directories), and clients that speak to
//! it through the protocol crate's peer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::PATIENCE;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use toold_protocol::peer::{BoxFuture, Handler, Peer, PeerHandle, PeerOptions, Reply};
use toold_protocol::{Framing, Notification, Request, RequestError};

/// The `toold` binary under test, built from the daemon's own `main.rs` (see Cargo.toml) next
/// to the test executables: `target/<profile>/toold-e2e` for `target/<profile>/deps/<test>`.
pub fn toold_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile_dir = test
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps");
    let binary = profile_dir.join("toold-e2e");
    assert!(
        binary.exists(),
        "{} is missing: build the workspace's binaries (cargo test --workspace does)",
        binary.display()
    );
    binary
}

/// The daemon's shell parser, its workers started from the `toold` binary under test.
pub fn shell_parser() -> std::sync::Arc<toold::shell::isolated::ShellParser> {
    std::sync::Arc::new(toold::shell::isolated::ShellParser::new(
        toold_binary(),
        toold::shell::isolated::DEFAULT_DEADLINE,
    ))
}

/// The `toold` command with its runtime, state, config and home directories under `root`
/// (`root/run`, `root/state`, `root/config`, `root/home`), whether or not a daemon runs there.
/// It runs in a session of its own, without a controlling terminal, so that tests run from a
/// terminal see the CLI as CI does (`terminal::Terminal` gives it one).
#[allow(unsafe_code)]
pub fn toold_command_in(root: &Path) -> Command {
    let mut command = Command::new(toold_binary());
    with_directories_in(&mut command, root);
    // SAFETY: setsid is async-signal-safe and the closure allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    command
}

/// A temporary directory holding the directories [`toold_command_in`] points a daemon's at
/// (`run`, `state`, `config`, `home`) and `work`, for a daemon's files and the test's own.
pub fn daemon_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    for sub in ["run", "state", "config", "home", "work"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("daemon directories");
    }
    dir
}

/// Points `command`'s runtime, state, config and home directories under `root`.
fn with_directories_in(command: &mut Command, root: &Path) {
    command
        .env("XDG_RUNTIME_DIR", root.join("run"))
        .env("XDG_STATE_HOME", root.join("state"))
        .env("XDG_CONFIG_HOME", root.join("config"))
        .env("HOME", root.join("home"))
        .env("TOOLD_LOG", "info,toold=debug,rmcp=warn")
        .env_remove("TOOLD_SOCKET")
        // A developer's own build directory (set for `cargo test` itself) would send the
        // builds the tests' commands run outside their session's root, where the sandbox
        // forbids writing.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES");
}

/// A wrapper for [`TestDaemon::start_under`] that appends the daemon's stderr, its log, to
/// `log`.
pub fn log_into(log: &Path) -> Vec<String> {
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("exec \"$@\" 2>>'{}'", log.display()),
        "sh".to_owned(),
    ]
}

/// A daemon process and the directories it owns.
pub struct TestDaemon {
    dir: tempfile::TempDir,
    root: PathBuf,
    child: Option<Child>,
    config: Option<String>,
    /// Variables set in the daemon's environment, at every start.
    env: Vec<(String, String)>,
    /// A program and its arguments that run the daemon (`setpriv …`), if any.
    wrapper: Vec<String>,
}

/// A config under which a command no rule decides asks even where the sandbox confines it
/// (`[permissions] sandboxed_commands = "ask"`): for the tests of asking and approving, and of
/// what the rules alone decide.
pub const COMMANDS_ASK: &str = "[permissions]\nsandboxed_commands = \"ask\"\n";

impl TestDaemon {
    /// Starts a daemon with every default.
    pub fn start() -> Self {
        Self::start_with_config(None)
    }

    /// Starts a daemon whose commands ask unless a rule decides them ([`COMMANDS_ASK`]).
    pub fn start_asking() -> Self {
        Self::start_with_config(Some(COMMANDS_ASK))
    }

    /// Starts a daemon with `config` as its configuration file.
    pub fn start_with_config(config: Option<&str>) -> Self {
        Self::start_with(config, &[])
    }

    /// Starts a daemon with `config` as its configuration file and these variables in its
    /// environment.
    pub fn start_with_config_and_env(config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with(Some(config), env)
    }

    /// Starts a daemon with every default and these variables in its environment.
    pub fn start_with_env(env: &[(&str, &str)]) -> Self {
        Self::start_with(None, env)
    }

    /// Starts a daemon with every default and these variables, run by `wrapper` (a program and
    /// its arguments, to which the daemon's command line is appended).
    pub fn start_under(wrapper: &[String], env: &[(&str, &str)]) -> Self {
        Self::start_with_wrapper(None, env, wrapper.to_vec())
    }

    /// Starts a daemon with `config`, run by `wrapper` (see [`Self::start_under`]).
    pub fn start_under_with_config(wrapper: &[String], config: &str) -> Self {
        Self::start_with_wrapper(Some(config), &[], wrapper.to_vec())
    }

    /// Starts a daemon with `config` and these variables, run by `wrapper`.
    pub fn start_under_with_config_and_env(
        wrapper: &[String],
        config: &str,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_with_wrapper(Some(config), env, wrapper.to_vec())
    }

    fn start_with(config: Option<&str>, env: &[(&str, &str)]) -> Self {
        Self::start_with_wrapper(config, env, Vec::new())
    }

    fn start_with_wrapper(
        config: Option<&str>,
        env: &[(&str, &str)],
        wrapper: Vec<String>,
    ) -> Self {
        let dir = daemon_root();
        let root = dir
            .path()
            .canonicalize()
            .expect("canonical temporary directory");
        let mut daemon = Self {
            dir,
            root,
            child: None,
            config: config.map(str::to_owned),
            env: env
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
            wrapper,
        };
        daemon.spawn();
        daemon
    }

    /// The socket the daemon listens on.
    pub fn socket(&self) -> PathBuf {
        self.root.join("run/toold/toold.sock")
    }

    /// A directory for the test's own files (session cwds), inside the daemon's tree.
    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state/toold")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The `toold` command with this daemon's environment.
    pub fn command(&self) -> Command {
        toold_command_in(&self.root)
    }

    fn spawn(&mut self) {
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(toold_binary());
                with_directories_in(&mut command, &self.root);
                command
            }
            None => self.command(),
        };
        command
            .arg("serve")
            .arg("--allow-root")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .envs(self.env.iter().map(|(name, value)| (name, value)));
        // A runtime directory of the test's choosing: the socket stays where `socket()` says.
        let given = |wanted: &str| self.env.iter().any(|(name, _)| name == wanted);
        if given("XDG_RUNTIME_DIR") && !given("TOOLD_SOCKET") {
            command.env("TOOLD_SOCKET", self.socket());
        }
        if let Some(config) = &self.config {
            let path = self.root.join("config/toold/config.toml");
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("config directory");
            std::fs::write(&path, config).expect("config file");
        }
        self.child = Some(command.spawn().expect("start toold serve"));
        wait_for_socket(&self.socket(), self.child.as_mut().expect("just spawned"));
    }

    /// Stops the daemon with SIGTERM and waits for it; returns how it exited.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the daemon");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("wait for the daemon") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop within 30 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// From now on a restart keeps the config file as the daemon (or the test) left it, rather
    /// than writing the one the daemon started with again.
    pub fn keep_config_file(&mut self) {
        self.config = None;
    }

    /// The config file the daemon reads (`$XDG_CONFIG_HOME/toold/config.toml`).
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config/toold/config.toml")
    }

    /// Stops and starts the daemon again on the same directories.
    pub fn restart(&mut self) {
        let status = self.stop();
        assert!(
            status.success(),
            "the daemon exited with {status} on SIGTERM"
        );
        self.spawn();
    }

    /// Runs `toold SUBCOMMAND ARGS` against this daemon: its exit code and its stdout.
    pub fn run_toold(&self, subcommand: &str, args: &[&str]) -> (Option<i32>, String) {
        let output = self
            .command()
            .arg(subcommand)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("toold {subcommand}: {error}"));
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon is running").id()
    }

    /// The daemon's resident set size now, in bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// The most the daemon's resident set has been since it started, in bytes (`VmHWM`).
    pub fn peak_rss_bytes(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    /// A size from the daemon's `/proc/PID/status`, in bytes.
    fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the daemon's /proc status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {field} line in the daemon's status"));
        kib * 1024
    }

    /// Kills the daemon with SIGKILL (no drain, the socket file stays behind) and waits for it.
    pub fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        child.kill().expect("SIGKILL the daemon");
        child.wait().expect("wait for the killed daemon")
    }

    /// Sends SIGTERM without waiting: the daemon starts draining.
    pub fn send_sigterm(&self) {
        let child = self.child.as_ref().expect("the daemon is running");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the daemon");
    }

    /// Waits up to 30 s for the daemon to exit (after [`send_sigterm`](Self::send_sigterm)),
    /// without blocking the runtime's thread; returns how it exited.
    pub async fn wait_for_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("wait for the daemon") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the daemon again on the same directories after [`TestDaemon::kill`],
    /// [`TestDaemon::stop`] or [`TestDaemon::wait_for_exit`].
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the daemon is still running");
        self.spawn();
    }

    /// Connects and initializes with `capabilities`; `answer` answers the daemon's requests.
    pub async fn connect(&self, capabilities: Value, answer: Answerer) -> TestClient {
        TestClient::connect(&self.socket(), Framing::Ndjson, capabilities, answer).await
    }

    /// Keeps the temporary directory alive.
    pub fn temp_dir(&self) -> &tempfile::TempDir {
        &self.dir
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_for_socket(socket: &Path, child: &mut Child) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        // Served by this child: the socket of a daemon killed before may still accept for a
        // moment (a process it had just started holds its descriptors until it closes them).
        if let Ok(stream) = std::os::unix::net::UnixStream::connect(socket)
            && nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                .is_ok_and(|credentials| credentials.pid() as u32 == child.id())
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("toold serve exited with {status} before it served");
        }
        assert!(
            Instant::now() < deadline,
            "toold serve did not serve on {} within 30 s",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Answers the daemon's requests to a test client (approvals, hooks, client tools).
pub type Answerer = Arc<dyn Fn(Request) -> BoxFuture<'static, Reply> + Send + Sync>;

/// An answerer for clients that expect no requests: each gets an error.
pub fn no_answers() -> Answerer {
    Arc::new(|request: Request| {
        Box::pin(async move {
            Reply::error(toold_protocol::ErrorObject::method_not_found(
                &request.method,
            ))
        })
    })
}

/// An answerer that gives the same JSON result to every request, recording them.
pub fn always(result: Value, seen: Arc<Mutex<Vec<Request>>>) -> Answerer {
    Arc::new(move |request: Request| {
        seen.lock().expect("requests").push(request);
        let result = result.clone();
        Box::pin(async move { Reply::result(result) })
    })
}

/// An answerer that records each request and never answers it: the request stays pending
/// until the daemon withdraws it or the connection closes.
pub fn never_answers(seen: Arc<Mutex<Vec<Request>>>) -> Answerer {
    Arc::new(move |request: Request| {
        seen.lock().expect("requests").push(request);
        Box::pin(std::future::pending())
    })
}

/// An answerer that never answers (as [`never_answers`]) and tells the test of each request
/// as it arrives, through the receiver returned with it.
pub fn never_answers_telling() -> (Answerer, mpsc::UnboundedReceiver<Request>) {
    let (asked_tx, asked_rx) = mpsc::unbounded_channel();
    let answerer: Answerer = Arc::new(move |request: Request| {
        let _ = asked_tx.send(request);
        Box::pin(std::future::pending())
    });
    (answerer, asked_rx)
}

/// An answerer that records each request and replies with what `reply` makes of it.
pub fn answer_with(
    seen: Arc<Mutex<Vec<Request>>>,
    reply: impl Fn(&Request) -> Reply + Send + Sync + 'static,
) -> Answerer {
    Arc::new(move |request: Request| {
        let answer = reply(&request);
        seen.lock().expect("requests").push(request);
        Box::pin(async move { answer })
    })
}

/// The results of a `tools/execute` response, in call order.
pub fn results(response: &Value) -> Vec<&Value> {
    response["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|entry| &entry["result"])
        .collect()
}

/// Each result's [`wire_error_type_or_ok`] of a `tools/execute` response, in call order.
pub fn outcomes(response: &Value) -> Vec<&str> {
    results(response)
        .into_iter()
        .map(wire_error_type_or_ok)
        .collect()
}

/// A `run_command` call of `line` with the id `id`, as `tools/execute` takes it.
pub fn command_call(id: &str, line: &str) -> Value {
    json!({"id": id, "name": "run_command", "arguments": {"command": line}})
}

/// The names of the tools in a `tools/list` result (the daemon's, `toold tools --json`'s or an
/// MCP server's), in its order.
pub fn tool_names(listed: &Value) -> Vec<&str> {
    listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name"))
        .collect()
}

/// Whether a wire result is the denial of a call that would have asked with no approver
/// attached to ask.
pub fn asked_nobody(result: &Value) -> bool {
    result["error_type"] == "permission_denied"
        && result["error"]
            .as_str()
            .is_some_and(|error| error.contains("no approver is attached"))
}

/// A wire result's (JSON) `error_type`, or "ok" (for an in-process `ToolResult`,
/// [`crate::error_type_or_ok`]).
pub fn wire_error_type_or_ok(result: &Value) -> &str {
    if result["ok"] == true {
        "ok"
    } else {
        result["error_type"]
            .as_str()
            .expect("a failure has an error_type")
    }
}

/// Whether a notification is a session event (it carries a `seq`).
pub fn is_session_event(notification: &Notification) -> bool {
    notification
        .params
        .as_ref()
        .is_some_and(|params| params.get("seq").is_some())
}

struct ClientHandler {
    answer: Answerer,
    notifications: mpsc::UnboundedSender<Notification>,
}

impl Handler for ClientHandler {
    fn request(&self, _peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
        (self.answer)(request)
    }

    fn notification(&self, _peer: PeerHandle, notification: Notification) {
        // The test may have stopped listening: then the notification is not needed.
        let _ = self.notifications.send(notification);
    }
}

/// A connection to the daemon, initialized.
pub struct TestClient {
    pub peer: PeerHandle,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

impl TestClient {
    pub async fn connect(
        socket: &Path,
        framing: Framing,
        capabilities: Value,
        answer: Answerer,
    ) -> Self {
        let mut client = Self::connect_raw(socket, framing, answer).await;
        let result = client
            .request("initialize", json!({"protocol_version": 1, "client_info": {"name": "e2e"}, "capabilities": capabilities}))
            .await
            .expect("initialize");
        assert_eq!(result["protocol_version"], 1);
        client.drain_notifications();
        client
    }

    /// Connected, not initialized.
    pub async fn connect_raw(socket: &Path, framing: Framing, answer: Answerer) -> Self {
        let stream = UnixStream::connect(socket)
            .await
            .expect("connect to the daemon");
        let (reader, writer) = stream.into_split();
        let (sender, notifications) = mpsc::unbounded_channel();
        let handler = Arc::new(ClientHandler {
            answer,
            notifications: sender,
        });
        let (peer, _task) = Peer::spawn(reader, writer, PeerOptions::client(framing), handler);
        Self {
            peer,
            notifications,
        }
    }

    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RequestError> {
        tokio::time::timeout(
            Duration::from_secs(60),
            self.peer.request(method.to_owned(), Some(params)),
        )
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} within 60 s"))
    }

    /// `tools/list` with `params`: the whole result.
    pub async fn list_tools(&self, params: Value) -> Value {
        self.request("tools/list", params)
            .await
            .expect("tools/list")
    }

    /// The names of the tools `tools/list` with `params` lists, in its order.
    pub async fn tool_names(&self, params: Value) -> Vec<String> {
        tool_names(&self.list_tools(params).await)
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// `permissions/explain` of a call of `tool` with `arguments` in `session_id`: the whole
    /// result.
    pub async fn explain(&self, session_id: &str, tool: &str, arguments: &Value) -> Value {
        self.request(
            "permissions/explain",
            json!({"session_id": session_id, "call": {"name": tool, "arguments": arguments}}),
        )
        .await
        .expect("permissions/explain")
    }

    /// Creates a session at `cwd`; returns its id.
    pub async fn create_session(&self, cwd: &Path, extra: Value) -> String {
        let mut params = json!({"cwd": cwd});
        if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            params.extend(extra.clone());
        }
        let snapshot = self
            .request("session/create", params)
            .await
            .expect("session/create");
        snapshot["session_id"]
            .as_str()
            .expect("a session id")
            .to_owned()
    }

    /// `session/update` of `session_id` with `changes` (an object: `mode`, `allowed_tools`,
    /// …), which must succeed; the session as it is after.
    pub async fn update_session(&self, session_id: &str, changes: Value) -> Value {
        let mut params = json!({"session_id": session_id});
        if let (Some(params), Some(changes)) = (params.as_object_mut(), changes.as_object()) {
            params.extend(changes.clone());
        }
        self.request("session/update", params)
            .await
            .expect("session/update")
    }

    /// `tools/execute` of `calls` (a JSON array) in `session_id`: the whole response.
    pub async fn execute(&self, session_id: &str, calls: Value) -> Value {
        self.request(
            "tools/execute",
            json!({"session_id": session_id, "calls": calls}),
        )
        .await
        .expect("tools/execute")
    }

    /// The next notification, waiting up to 30 s.
    pub async fn next_notification(&mut self) -> Notification {
        tokio::time::timeout(PATIENCE, self.notifications.recv())
            .await
            .expect("a notification within 30 s")
            .expect("the connection is open")
    }

    /// The next notification that `wanted` accepts, skipping the others; waits up to 30 s.
    pub async fn next_notification_matching(
        &mut self,
        wanted: impl Fn(&Notification) -> bool,
    ) -> Notification {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let next = tokio::time::timeout_at(deadline, self.notifications.recv())
                .await
                .expect("the wanted notification within 30 s")
                .expect("the connection is open");
            if wanted(&next) {
                return next;
            }
        }
    }

    /// Every notification received so far.
    pub fn drain_notifications(&mut self) -> Vec<Notification> {
        let mut drained = Vec::new();
        while let Ok(notification) = self.notifications.try_recv() {
            drained.push(notification);
        }
        drained
    }
}

impl TestClient {
    /// The session events received so far (other notifications are dropped).
    pub fn session_events(&mut self) -> Vec<Notification> {
        self.drain_notifications()
            .into_iter()
            .filter(is_session_event)
            .collect()
    }

    /// Session events as they arrive, up to and including the first that `last` accepts
    /// (waiting up to 30 s for each); other notifications are dropped.
    pub async fn session_events_until(
        &mut self,
        last: impl Fn(&Notification) -> bool,
    ) -> Vec<Notification> {
        let mut events = Vec::new();
        loop {
            let notification = self.next_notification().await;
            if !is_session_event(&notification) {
                continue;
            }
            let done = last(&notification);
            events.push(notification);
            if done {
                return events;
            }
        }
    }

    /// Closes the connection, as a client that goes away does.
    pub fn disconnect(&self) {
        self.peer.close();
    }
}

impl TestDaemon {
    /// The `instance_id` the daemon gives in `initialize`, from a connection of its own.
    pub async fn instance_id(&self) -> String {
        let client = TestClient::connect_raw(&self.socket(), Framing::Ndjson, no_answers()).await;
        let result = client
            .request("initialize", json!({"protocol_version": 1}))
            .await
            .expect("initialize");
        client.disconnect();
        result["instance_id"]
            .as_str()
            .expect("an instance id")
            .to_owned()
    }
}

/// How a [`RawConnection`] frames what it sends and expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Ndjson,
    /// LSP framing; the flag says whether header lines end in CRLF (else LF).
    Lsp {
        crlf: bool,
    },
}

/// A bare client on its own connection: exactly the bytes a test gives it, the daemon's replies
/// read frame by frame in either framing, nothing between it and the wire (for tests of the
/// framing itself, and tests that pipeline, stall or count every message).
pub struct RawConnection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    wire: Wire,
    /// The header section of the last LSP frame received, as sent.
    pub last_headers: String,
}

impl RawConnection {
    pub async fn connect(socket: &Path, wire: Wire) -> Self {
        let stream = UnixStream::connect(socket).await.expect("connect");
        let (reader, writer) = stream.into_split();
        Self {
            reader: BufReader::new(reader),
            writer,
            wire,
            last_headers: String::new(),
        }
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
    }

    /// Writes `bytes`, whether or not the daemon still reads them.
    pub async fn try_send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.writer.write_all(bytes).await;
    }

    /// One message (or anything else) in this connection's framing.
    pub async fn send_frame(&mut self, body: &[u8]) {
        let framed = match self.wire {
            Wire::Ndjson => [body, b"\n"].concat(),
            Wire::Lsp { crlf } => {
                let eol = if crlf { "\r\n" } else { "\n" };
                let headers = format!(
                    "Content-Length: {}{eol}Content-Type: application/vscode-jsonrpc; charset=utf-8{eol}{eol}",
                    body.len()
                );
                [headers.as_bytes(), body].concat()
            }
        };
        self.send_bytes(&framed).await;
    }

    pub async fn send(&mut self, message: &Value) {
        self.send_frame(message.to_string().as_bytes()).await;
    }

    /// The next frame from the daemon, or `None` once the connection is closed.
    pub async fn receive_or_closed(&mut self) -> Option<Value> {
        tokio::time::timeout(PATIENCE, self.read_frame())
            .await
            .expect("a frame from the daemon within the patience")
    }

    pub async fn receive(&mut self) -> Value {
        self.receive_or_closed()
            .await
            .expect("the daemon closed the connection")
    }

    async fn read_frame(&mut self) -> Option<Value> {
        match self.wire {
            Wire::Ndjson => {
                let mut line = String::new();
                match self.reader.read_line(&mut line).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
                assert!(
                    line.ends_with('\n'),
                    "an NDJSON reply ends in \\n: {line:?}"
                );
                let text = line.trim_end_matches('\n');
                assert!(
                    !text.contains('\n') && !text.ends_with('\r'),
                    "one compact message a line"
                );
                Some(serde_json::from_str(text).expect("the daemon writes JSON"))
            }
            Wire::Lsp { .. } => {
                let mut headers = String::new();
                let mut length = None;
                loop {
                    let mut line = String::new();
                    match self.reader.read_line(&mut line).await {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => {}
                    }
                    headers.push_str(&line);
                    let content = line.trim_end_matches(['\r', '\n']);
                    if content.is_empty() {
                        break;
                    }
                    let (name, value) = content.split_once(':').expect("a header line");
                    if name.eq_ignore_ascii_case("content-length") {
                        length = Some(value.trim().parse::<usize>().expect("a length"));
                    }
                }
                self.last_headers = headers;
                let length = length.expect("the daemon's reply has Content-Length");
                let mut body = vec![0; length];
                self.reader
                    .read_exact(&mut body)
                    .await
                    .expect("the announced body");
                Some(serde_json::from_slice(&body).expect("the daemon writes JSON"))
            }
        }
    }

    /// The next response, skipping the notifications (events) before it.
    pub async fn response(&mut self) -> Value {
        loop {
            let message = self.receive().await;
            if message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends a request and returns the whole response object.
    pub async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let response = self.response().await;
        assert_eq!(
            response["id"],
            json!(id),
            "the answer to {method}: {response}"
        );
        assert_eq!(response["jsonrpc"], "2.0");
        response
    }

    /// Sends a request that must succeed; returns its result.
    pub async fn call_ok(&mut self, id: i64, method: &str, params: Value) -> Value {
        let response = self.call(id, method, params).await;
        assert!(
            response.get("error").is_none(),
            "{method} failed: {response}"
        );
        response["result"].clone()
    }

    /// Sends a request without waiting for its answer.
    pub async fn send_request(&mut self, id: impl Into<Value>, method: &str, params: Value) {
        let id = id.into();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
    }

    /// NDJSON only: the next message as the line the daemon wrote, unparsed.
    pub async fn next_line(&mut self) -> String {
        assert_eq!(self.wire, Wire::Ndjson, "lines are NDJSON's");
        let mut line = String::new();
        let read = tokio::time::timeout(PATIENCE, self.reader.read_line(&mut line))
            .await
            .expect("a line from the daemon within the patience")
            .expect("read a line");
        assert!(read > 0, "the daemon closed the connection");
        line.truncate(line.trim_end_matches('\n').len());
        line
    }

    pub async fn initialize(&mut self) -> Value {
        self.call_ok(0, "initialize", json!({"protocol_version": 1}))
            .await
    }
}

/// Sends SIGTERM to `child`, a daemon the test started itself, and waits up to `within` for it
/// to exit successfully; `condition` names what the daemon stops under, for the failure.
pub fn sigterm_and_exits_cleanly(child: &mut Child, within: Duration, condition: &str) {
    crate::procs::send_signal(child.id(), nix::sys::signal::Signal::SIGTERM);
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the daemon") {
            assert!(status.success(), "{status}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the daemon did not stop on SIGTERM {condition}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process at the other end of a connection to `socket` (SO_PEERCRED).
pub fn daemon_pid(socket: &Path) -> nix::unistd::Pid {
    let stream = std::os::unix::net::UnixStream::connect(socket).expect("the daemon answers");
    let credentials =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            .expect("peer credentials");
    nix::unistd::Pid::from_raw(credentials.pid())
}

/// A daemon that `toold connect` started (not our child): stopped with SIGTERM by
/// [`ForeignDaemon::stop`], killed if the test fails before that.
pub struct ForeignDaemon {
    pub pid: Option<nix::unistd::Pid>,
}

impl ForeignDaemon {
    /// Stops it and waits until it is gone (or a zombie nobody reaps).
    pub fn stop(mut self) {
        let pid = self.pid.take().expect("running");
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the daemon");
        let deadline = Instant::now() + PATIENCE;
        let pid = u32::try_from(pid.as_raw()).expect("a pid");
        while crate::procs::stat_fields(pid).is_some_and(|fields| fields[0] != "Z") {
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ForeignDaemon {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}
