//! One configured MCP server at run time, under its supervisor: it starts the server's process
//! and session, registers the tools its listing gives (and lists them again when the server
//! says they changed), and when the server exits removes them, ends the calls in flight and
//! starts it again after a backoff, until it has failed too often.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{McpServerStatus, QuarantinedTool};

use super::client::{Connect, McpSession, Reachable, ServerNotices};
use super::listing::{self, Quarantined};
use super::process::{Launch, ServerProcess, StderrLog};
use super::shown_url;
use super::tool::{McpTool, ToolServer};
use super::{McpServerConfig, McpTransport};
use crate::tools::registry::RegisterError;
use crate::tools::{Registry, Tool};

/// The first wait before a crashed server starts again; doubled after each crash.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that fails this often within [`FAILURE_WINDOW`] is left `failed`.
const MAX_FAILURES: usize = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(600);

/// How long a server process whose output closed is given to exit before it is taken for one
/// that hung up and lives on.
const EXIT_AFTER_CLOSE: Duration = Duration::from_millis(500);

/// How long an error quoting a server's stderr waits for the last of it to be read.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// Where a server is in its life (`mcp/status`'s `state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerState {
    Starting,
    Ready,
    /// Failed too often, or cannot start at all: why.
    Failed(String),
    Stopped,
}

impl ServerState {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Failed(_) => "failed",
            ServerState::Stopped => "stopped",
        }
    }
}

/// Why one life of a server ended.
enum Ended {
    Exited(std::io::Result<std::process::ExitStatus>),
    /// Its output closed (or its HTTP transport failed) while it lived on.
    Closed,
    Stopped,
}

/// Called whenever the registry gained or lost a server's tools.
pub(crate) type ToolsChanged = Arc<dyn Fn() + Send + Sync>;

/// One server, shared by its supervisor and its tools.
pub(crate) struct ServerSupervisor {
    pub config: McpServerConfig,
    log_dir: PathBuf,
    registry: Arc<Registry>,
    tools_changed: ToolsChanged,
    live: Mutex<Live>,
    /// Rung whenever `state` changes or a start fails (what a first use of a lazy server
    /// waits on).
    state_changed: tokio::sync::Notify,
    /// Fired when the daemon stops the server.
    stop: CancellationToken,
}

#[derive(Default)]
struct Live {
    state: Option<ServerState>,
    session: Option<Arc<McpSession>>,
    /// Fired when the current session's process exits: calls in flight end at once.
    ended: CancellationToken,
    pid: Option<u32>,
    stderr: Option<Arc<StderrLog>>,
    /// The tools it registered, by name, as registered.
    registered: Vec<(String, Arc<dyn Tool>)>,
    quarantined: Vec<Quarantined>,
    restarts: u64,
    last_error: Option<String>,
}

impl ServerSupervisor {
    pub(crate) fn new(
        config: McpServerConfig,
        log_dir: PathBuf,
        registry: Arc<Registry>,
        tools_changed: ToolsChanged,
    ) -> Arc<Self> {
        Arc::new(Self {
            config,
            log_dir,
            registry,
            tools_changed,
            live: Mutex::new(Live::default()),
            state_changed: tokio::sync::Notify::new(),
            stop: CancellationToken::new(),
        })
    }

    pub(crate) fn state(&self) -> ServerState {
        self.live().state.clone().unwrap_or(ServerState::Stopped)
    }

    /// The server as `mcp/status` shows it.
    pub(crate) fn status(&self) -> McpServerStatus {
        let live = self.live();
        let mut state = live.state.clone().unwrap_or(ServerState::Stopped);
        let running = matches!(state, ServerState::Starting | ServerState::Ready);
        let mut pid = live.pid.filter(|_| running);
        // Between its process's end (a crash during a call: its transport closed, its exit
        // told the calls in flight, or its death seen in /proc) and the supervisor's noticing,
        // the server is not ready, whatever was last recorded: it is being started again.
        let gone = live.ended.is_cancelled()
            || live
                .session
                .as_ref()
                .is_some_and(|session| session.is_closed());
        // A server this daemon started: its pid is not reused before the daemon reaps it.
        if let Some(dead) = pid.filter(|pid| gone || !crate::process_tree::is_alive(*pid)) {
            tracing::debug!(server = %self.config.name, pid = dead, "status of a server whose process has ended");
            pid = None;
            state = ServerState::Starting;
        }
        McpServerStatus {
            name: self.config.name.clone(),
            state: state.name().to_owned(),
            pid,
            transport: self.config.transport.kind().to_owned(),
            protocol_version: live
                .session
                .as_ref()
                .and_then(|session| session.protocol_version()),
            tools: live
                .registered
                .iter()
                .map(|(name, _)| name.clone())
                .collect(),
            quarantined: live
                .quarantined
                .iter()
                .map(|quarantined| QuarantinedTool {
                    tool: quarantined.tool.clone(),
                    reason: quarantined.reason.clone(),
                })
                .collect(),
            restarts: live.restarts,
            last_error: match &state {
                ServerState::Failed(reason) => Some(reason.clone()),
                _ => live.last_error.clone(),
            },
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        // Plain assignments only: a poisoned lock still holds sound state.
        self.live.lock_unpoisoned()
    }

    pub(super) fn set_state(&self, state: ServerState) {
        self.live().state = Some(state);
        self.state_changed.notify_waiters();
    }

    /// Waits, up to `limit`, until the server is no longer `starting` or its first start has
    /// failed (the next waits for a backoff: a first use is not held through it).
    pub(super) async fn settled(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let changed = self.state_changed.notified();
            tokio::pin!(changed);
            // Registered before the look, so that a change in between is not missed.
            changed.as_mut().enable();
            let (state, ended) = {
                let live = self.live();
                (live.state.clone(), live.restarts)
            };
            // No state yet: its supervisor, just launched, has not begun its first start.
            if !matches!(state, None | Some(ServerState::Starting)) || ended > 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return;
            }
        }
    }

    /// Runs the server until the daemon stops it: starts, serves, and starts again after a
    /// crash, with backoff, until it fails [`MAX_FAILURES`] times within [`FAILURE_WINDOW`].
    pub(crate) async fn supervise(self: Arc<Self>) {
        let mut failures: VecDeque<Instant> = VecDeque::new();
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.set_state(ServerState::Starting);
            // What a server said of itself may quote a configured secret (its stderr, an
            // error naming its URL): it goes to the log, `mcp/status` and calls' errors.
            let ended_by = crate::secrets::redact(&self.run_once().await);
            self.withdraw_tools();
            if self.stop.is_cancelled() {
                self.set_state(ServerState::Stopped);
                return;
            }
            let now = Instant::now();
            failures.push_back(now);
            while failures
                .front()
                .is_some_and(|at| now.duration_since(*at) > FAILURE_WINDOW)
            {
                failures.pop_front();
            }
            tracing::warn!(server = %self.config.name, reason = %ended_by, "an MCP server ended");
            {
                let mut live = self.live();
                live.last_error = Some(ended_by.clone());
                live.restarts += 1;
            }
            self.state_changed.notify_waiters();
            if failures.len() >= MAX_FAILURES {
                let reason = format!(
                    "failed {MAX_FAILURES} times within {} minutes; the last time: {ended_by}",
                    FAILURE_WINDOW.as_secs() / 60
                );
                tracing::error!(server = %self.config.name, %reason, "an MCP server is left failed");
                self.set_state(ServerState::Failed(reason));
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.stop.cancelled() => {
                    self.set_state(ServerState::Stopped);
                    return;
                }
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One life of the server; returns why it ended.
    async fn run_once(self: &Arc<Self>) -> String {
        let notices = Arc::new(ServerNotices::default());
        let ended = CancellationToken::new();
        self.live().ended = ended.clone();
        let (connect, mut process) = match self.connect() {
            Ok(connected) => connected,
            Err(reason) => return reason,
        };
        let started = tokio::select! {
            started = McpSession::start(connect, Arc::clone(&notices), self.config.startup_timeout) => started,
            status = exited(&mut process) => Err(format!("it exited during the handshake ({})", show_exit(status))),
            () = self.stop.cancelled() => Err("stopped".to_owned()),
        };
        let session = match started {
            Ok(session) => Arc::new(session),
            Err(reason) => {
                ended.cancel();
                let reason = format!("{reason}; {}", self.stderr_tail().await);
                stop_process(process).await;
                return reason;
            }
        };
        self.live().session = Some(Arc::clone(&session));
        // A listing that never answers must not hold the server `starting` forever.
        let limit = self.config.startup_timeout;
        let listed = tokio::select! {
            listed = self.register_tools_within(&session, limit) => listed,
            status = exited(&mut process) => Err(format!("it exited while listing its tools ({})", show_exit(status))),
            () = self.stop.cancelled() => Err("stopped".to_owned()),
        };
        if let Err(reason) = listed {
            self.withdraw_tools();
            ended.cancel();
            self.live().session = None;
            let reason = format!("{reason}; {}", self.stderr_tail().await);
            stop_process(process).await;
            return reason;
        }
        self.set_state(ServerState::Ready);
        tracing::info!(server = %self.config.name, tools = self.live().registered.len(), "an MCP server is ready");
        let ended_by = loop {
            tokio::select! {
                status = exited(&mut process) => break Ended::Exited(status),
                // A server that closes its output (or whose HTTP stream breaks) but lives on
                // answers nothing more: it is stopped and started again like one that exited.
                () = session.closed() => break Ended::Closed,
                () = self.stop.cancelled() => break Ended::Stopped,
                () = notices.tools_changed.notified() => {
                    let relisted = tokio::select! {
                        relisted = self.register_tools_within(&session, limit) => relisted,
                        status = exited(&mut process) => break Ended::Exited(status),
                        () = self.stop.cancelled() => break Ended::Stopped,
                    };
                    if let Err(reason) = relisted {
                        let reason = crate::secrets::redact(&reason);
                        tracing::warn!(server = %self.config.name, %reason, "cannot list an MCP server's tools again");
                    }
                }
            }
        };
        // Its tools go first, and its calls in flight end, before anything is waited for.
        self.withdraw_tools();
        ended.cancel();
        self.live().session = None;
        let reason = match ended_by {
            Ended::Exited(status) => {
                format!(
                    "it exited ({}); {}",
                    show_exit(status),
                    self.stderr_tail().await
                )
            }
            Ended::Closed => {
                // A process's output ends as it exits: its exit, when it follows at once, says
                // more than the closed stream.
                let exit = match &mut process {
                    Some(running) => tokio::time::timeout(EXIT_AFTER_CLOSE, running.exited())
                        .await
                        .ok(),
                    None => None,
                };
                match exit {
                    Some(status) => {
                        format!(
                            "it exited ({}); {}",
                            show_exit(status),
                            self.stderr_tail().await
                        )
                    }
                    None => format!("its connection closed; {}", self.stderr_tail().await),
                }
            }
            Ended::Stopped => "stopped".to_owned(),
        };
        if let Ok(session) = Arc::try_unwrap(session) {
            session.close().await;
        }
        stop_process(process).await;
        reason
    }

    /// Makes the server reachable: its process started (a stdio server), or the HTTP
    /// connection's settings read (its bearer token from the daemon's environment, now).
    fn connect(&self) -> Result<(Connect, Option<ServerProcess>), String> {
        match &self.config.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let launch = Launch {
                    name: &self.config.name,
                    command,
                    args,
                    env,
                    cwd: cwd.as_deref(),
                };
                let mut process = ServerProcess::spawn(&launch, &self.log_dir)
                    .map_err(|err| format!("cannot start {command}: {err}"))?;
                {
                    let mut live = self.live();
                    live.pid = process.pid();
                    live.stderr = Some(process.stderr_log());
                }
                match (process.stdout.take(), process.stdin.take()) {
                    (Some(stdout), Some(stdin)) => {
                        Ok((Connect::Stdio(stdout, stdin), Some(process)))
                    }
                    _ => Err("its standard streams were not piped".to_owned()),
                }
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                if !url.starts_with("http://") {
                    return Err(format!(
                        "{} needs TLS, which this build of toold does not include: only \
                         http:// servers are reached (for now)",
                        shown_url(url)
                    ));
                }
                let bearer = match bearer_token_env {
                    Some(variable) => Some(std::env::var(variable).map_err(|_| {
                        format!(
                            "the variable {variable} (bearer_token_env) is not set in the \
                             daemon's environment"
                        )
                    })?),
                    None => None,
                };
                let headers = headers
                    .iter()
                    .map(|(name, value)| {
                        let name = http::HeaderName::try_from(name.as_str())
                            .map_err(|err| format!("the header name {name:?}: {err}"))?;
                        let value = http::HeaderValue::try_from(value.as_str())
                            .map_err(|err| format!("the value of the header {name}: {err}"))?;
                        Ok((name, value))
                    })
                    .collect::<Result<_, String>>()?;
                Ok((
                    Connect::Http {
                        url: url.clone(),
                        bearer,
                        headers,
                    },
                    None,
                ))
            }
        }
    }

    /// [`Self::register_tools`], given up after `limit`.
    async fn register_tools_within(
        self: &Arc<Self>,
        session: &McpSession,
        limit: Duration,
    ) -> Result<(), String> {
        tokio::time::timeout(limit, self.register_tools(session))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no answer to tools/list within {} ms",
                    limit.as_millis()
                ))
            })
    }

    /// Lists the server's tools and makes the registry hold exactly them.
    async fn register_tools(self: &Arc<Self>, session: &McpSession) -> Result<(), String> {
        let (tools, cut_short) = session.list_tools().await?;
        let listed = listing::list(&self.config, &tools, cut_short);
        let mut quarantined = listed.quarantined;
        let mut registered = Vec::new();
        for tool in listed.tools {
            let name = tool.definition.name.clone();
            let server: Arc<dyn ToolServer> = Arc::clone(self) as Arc<dyn ToolServer>;
            let mcp_tool: Arc<dyn Tool> = Arc::new(McpTool::new(Arc::downgrade(&server), tool));
            match self.registry.register_or_replace(Arc::clone(&mcp_tool)) {
                Ok(_) => registered.push((name, mcp_tool)),
                Err(RegisterError::InvalidSchema { reason, .. }) => quarantined.push(Quarantined {
                    tool: name,
                    reason: format!("its inputSchema does not compile: {reason}"),
                }),
                Err(err) => quarantined.push(Quarantined {
                    tool: name,
                    reason: err.to_string(),
                }),
            }
        }
        for quarantine in &quarantined {
            tracing::warn!(server = %self.config.name, tool = %quarantine.tool, reason = %quarantine.reason, "an MCP tool is quarantined");
        }
        let gone: Vec<(String, Arc<dyn Tool>)> = {
            let mut live = self.live();
            let gone = std::mem::take(&mut live.registered)
                .into_iter()
                .filter(|(name, _)| !registered.iter().any(|(kept, _)| kept == name))
                .collect();
            live.registered = registered;
            live.quarantined = quarantined;
            gone
        };
        for (name, tool) in gone {
            self.registry.unregister_exact(&name, &tool);
        }
        (self.tools_changed)();
        Ok(())
    }

    /// Removes the server's tools from the registry: those it registered and still holds
    /// (a tool registered since under the same name, by the server that replaced this one,
    /// stays).
    pub(super) fn withdraw_tools(&self) {
        let registered = std::mem::take(&mut self.live().registered);
        let mut changed = false;
        for (name, tool) in registered {
            changed |= self.registry.unregister_exact(&name, &tool);
        }
        if changed {
            (self.tools_changed)();
        }
    }

    /// Stops the server (its supervisor ends it and removes its tools).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

impl ToolServer for ServerSupervisor {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn reachable(&self) -> Result<Reachable, String> {
        let live = self.live();
        match (&live.session, &live.state) {
            (Some(session), Some(ServerState::Ready)) => Ok(Reachable {
                session: Arc::clone(session),
                ended: live.ended.clone(),
            }),
            _ => Err(format!(
                "the MCP server {:?} is not running ({})",
                self.config.name,
                live.last_error.as_deref().unwrap_or("it is starting")
            )),
        }
    }

    fn stderr_tail(&self) -> BoxFuture<'_, String> {
        let log = self.live().stderr.clone();
        Box::pin(async move {
            let Some(log) = log else {
                return match &self.config.transport {
                    McpTransport::Http { url, .. } => {
                        format!("it is reached at {}", shown_url(url))
                    }
                    McpTransport::Stdio { .. } => "it wrote nothing to stderr".to_owned(),
                };
            };
            // Bounded: a child of the server may hold its stderr open after it exited.
            let _ = tokio::time::timeout(STDERR_DRAIN, log.read_to_end.cancelled()).await;
            let lines = log.tail();
            if lines.is_empty() {
                "it wrote nothing to stderr".to_owned()
            } else {
                format!("its stderr ended with: {}", lines.join(" | "))
            }
        })
    }
}

/// Resolves when the server's process exits; never for a server without one (HTTP).
async fn exited(process: &mut Option<ServerProcess>) -> std::io::Result<std::process::ExitStatus> {
    match process {
        Some(process) => process.exited().await,
        None => std::future::pending().await,
    }
}

async fn stop_process(process: Option<ServerProcess>) {
    if let Some(process) = process {
        process.stop().await;
    }
}

fn show_exit(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(err) => format!("cannot wait for it: {err}"),
    }
}
