//! The daemon's set of MCP servers, in the config's order: started with the daemon (eager ones
//! at once, lazy ones at their first use), restarted one by one, changed by a config reload,
//! and stopped together. Servers are replaced whole, never changed in place.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use toold_protocol::McpServerStatus;
use toold_protocol::sync::LockUnpoisoned;

use super::supervisor::{ServerState, ServerSupervisor, ToolsChanged};
use super::tool::NotStarted;
use super::{McpServerConfig, Start};
use crate::tools::{Registry, Tool};

/// What a first use of a lazy server waits beyond its startup timeout: the listing after the
/// handshake.
const STARTUP_SLACK: Duration = Duration::from_secs(5);
/// The daemon's MCP servers, in the config's order. Restarting one, or reloading the config,
/// replaces servers whole: the old one stopped (its tools withdrawn, its process gone), a new
/// one with a fresh count of failures started in its place.
pub(crate) struct McpServers {
    log_dir: PathBuf,
    registry: Arc<Registry>,
    tools_changed: ToolsChanged,
    running: Mutex<Vec<Running>>,
    /// Held by a restart or a reload from start to end, so that two never interleave.
    changing: tokio::sync::Mutex<()>,
    /// Set by [`Self::stop_all`]: no server starts again after it.
    closed: AtomicBool,
}

/// What a reload did to the set of servers, by name.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct McpChanges {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub restarted: Vec<String>,
}
/// A server and its supervisor task (none for a lazy server not yet used).
struct Running {
    server: Arc<ServerSupervisor>,
    supervisor: Option<tokio::task::JoinHandle<()>>,
}

impl McpServers {
    /// Every configured server, eager ones started in the background now.
    pub(crate) fn start(
        configs: &[McpServerConfig],
        log_dir: PathBuf,
        registry: &Arc<Registry>,
        tools_changed: ToolsChanged,
    ) -> Self {
        crate::secrets::configure(super::secrets_of(configs));
        let servers = Self {
            log_dir,
            registry: Arc::clone(registry),
            tools_changed,
            running: Mutex::new(Vec::new()),
            changing: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
        };
        let running = configs
            .iter()
            .map(|config| servers.launch(config.clone()))
            .collect();
        *servers.running.lock_unpoisoned() = running;
        servers
    }

    /// A new server for `config`, its supervisor started unless it starts lazily.
    fn launch(&self, config: McpServerConfig) -> Running {
        let eager = config.start == Start::Eager;
        let server = ServerSupervisor::new(
            config,
            self.log_dir.clone(),
            Arc::clone(&self.registry),
            Arc::clone(&self.tools_changed),
        );
        let supervisor = eager.then(|| supervise(&server));
        Running { server, supervisor }
    }

    /// Starts the lazy servers not started yet that `wanted` picks (by name), and waits for
    /// each to be ready or to fail, up to its `startup_timeout_ms`: their first use (the first
    /// `tools/list`, or a call that names one of their tools) then sees their tools.
    pub(crate) async fn start_lazy(&self, wanted: impl Fn(&str) -> bool) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Every wanted lazy server is waited for, the one this use started and one another use
        // started a moment before alike.
        let lazy: Vec<Arc<ServerSupervisor>> = {
            let mut running = self.running.lock_unpoisoned();
            running
                .iter_mut()
                .filter(|running| {
                    running.server.config.start == Start::Lazy
                        && wanted(&running.server.config.name)
                })
                .map(|running| {
                    if running.supervisor.is_none() {
                        tracing::info!(server = %running.server.config.name, "a lazy MCP server starts at its first use");
                        running.supervisor = Some(supervise(&running.server));
                    }
                    Arc::clone(&running.server)
                })
                .collect()
        };
        let waits = lazy
            .iter()
            .map(|server| server.settled(server.config.startup_timeout + STARTUP_SLACK));
        futures_util::future::join_all(waits).await;
    }

    /// Waits for each eager server `wanted` picks (by name) to end its first start, ready or
    /// failed, up to its `startup_timeout_ms`: a client that lists the tools once, or calls one,
    /// right after the daemon started (as several MCP hosts do), finds their tools. Once they
    /// have settled, this returns at once.
    pub(crate) async fn eager_settled(&self, wanted: impl Fn(&str) -> bool) {
        let eager: Vec<Arc<ServerSupervisor>> = self
            .running
            .lock_unpoisoned()
            .iter()
            .filter(|running| {
                running.server.config.start == Start::Eager && wanted(&running.server.config.name)
            })
            .map(|running| Arc::clone(&running.server))
            .collect();
        let waits = eager
            .iter()
            .map(|server| server.settled(server.config.startup_timeout + STARTUP_SLACK));
        futures_util::future::join_all(waits).await;
    }

    /// For `permissions/explain`: a stand-in for `tool` when it names a tool of a lazy server
    /// not started yet (which a call of it would start) that the server's `enabled_tools` and
    /// `disabled_tools` let through; with the server's name. Nothing is started.
    pub(crate) fn unstarted_tool(&self, tool: &str) -> Option<(String, Arc<dyn Tool>)> {
        let server = super::names::server_of(tool)?;
        let own_name = tool.strip_prefix(&format!("{}{server}__", super::names::PREFIX))?;
        let running = self.running.lock_unpoisoned();
        let config = &running
            .iter()
            .find(|running| {
                running.server.config.name == server
                    && running.server.config.start == Start::Lazy
                    && running.supervisor.is_none()
            })?
            .server
            .config;
        config.tools.admits(server, own_name).then(|| {
            let stand_in: Arc<dyn Tool> = Arc::new(NotStarted::new(config, tool));
            (server.to_owned(), stand_in)
        })
    }

    /// Every server as `mcp/status` shows it, in the config's order.
    pub(crate) fn status(&self) -> Vec<McpServerStatus> {
        self.running
            .lock_unpoisoned()
            .iter()
            .map(|running| running.server.status())
            .collect()
    }

    /// Stops server `name` (whatever its state) and starts it again with a fresh count of
    /// failures; returns its new status. `None`: no server has that name.
    pub(crate) async fn restart(&self, name: &str) -> Option<McpServerStatus> {
        let _changing = self.changing.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let index = self
            .running
            .lock_unpoisoned()
            .iter()
            .position(|running| running.server.config.name == name)?;
        let old = self.take(|server| server.config.name == name);
        let config = old.first()?.server.config.clone();
        // The old one is gone, its tools withdrawn, before the new one registers the same
        // names.
        stop(old).await;
        let mut fresh = self.launch(config);
        if fresh.supervisor.is_none() {
            // A restart asked for is a use: a lazy server starts now.
            fresh.supervisor = Some(supervise(&fresh.server));
        }
        let status = fresh.server.status();
        let mut running = self.running.lock_unpoisoned();
        let index = index.min(running.len());
        running.insert(index, fresh);
        Some(status)
    }

    /// A config reload: servers gone from `configs` stopped, new ones started, those whose
    /// table changed (and `failed` ones) stopped and started again; the others left running. Returns the names
    /// started, stopped and restarted.
    pub(crate) async fn reload(&self, configs: &[McpServerConfig]) -> McpChanges {
        let _changing = self.changing.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return McpChanges::default();
        }
        crate::secrets::configure(super::secrets_of(configs));
        // A `failed` server starts again too, its table changed or not.
        let retired = self.take(|server| {
            !configs.contains(&server.config) || matches!(server.state(), ServerState::Failed(_))
        });
        let mut changes = McpChanges::default();
        // A lazy server already in use stays in use: its replacement starts at once.
        let mut in_use = Vec::new();
        for old in &retired {
            let name = &old.server.config.name;
            if configs.iter().any(|config| &config.name == name) {
                changes.restarted.push(name.clone());
            } else {
                changes.stopped.push(name.clone());
            }
            if old.supervisor.is_some() {
                in_use.push(name.clone());
            }
        }
        stop(retired).await;
        let kept: Vec<String> = self
            .running
            .lock_unpoisoned()
            .iter()
            .map(|running| running.server.config.name.clone())
            .collect();
        let fresh: Vec<Running> = configs
            .iter()
            .filter(|config| !kept.contains(&config.name))
            .map(|config| {
                if !changes.restarted.contains(&config.name) {
                    changes.started.push(config.name.clone());
                }
                let mut fresh = self.launch(config.clone());
                if fresh.supervisor.is_none() && in_use.contains(&config.name) {
                    fresh.supervisor = Some(supervise(&fresh.server));
                }
                fresh
            })
            .collect();
        self.place(fresh);
        // In the new file's order.
        self.running.lock_unpoisoned().sort_by_key(|running| {
            configs
                .iter()
                .position(|config| config.name == running.server.config.name)
        });
        changes
    }

    /// Takes the servers whose config `which` picks out of the set.
    fn take(&self, which: impl Fn(&ServerSupervisor) -> bool) -> Vec<Running> {
        let mut running = self.running.lock_unpoisoned();
        let (taken, kept) = std::mem::take(&mut *running)
            .into_iter()
            .partition(|running| which(&running.server));
        *running = kept;
        taken
    }

    /// Adds servers to the set.
    fn place(&self, servers: Vec<Running>) {
        self.running.lock_unpoisoned().extend(servers);
    }

    /// Stops every server and waits until their processes are gone (each within its stop
    /// grace, bounded here as a whole).
    pub(crate) async fn stop_all(&self) {
        self.closed.store(true, Ordering::Release);
        let _changing = self.changing.lock().await;
        let all = std::mem::take(&mut *self.running.lock_unpoisoned());
        stop(all).await;
    }
}

/// Starts `server`'s supervisor; the server is `starting` from now on.
fn supervise(server: &Arc<ServerSupervisor>) -> tokio::task::JoinHandle<()> {
    server.set_state(ServerState::Starting);
    tokio::spawn(Arc::clone(server).supervise())
}

/// Stops `servers` and waits, bounded, for their supervisors to end (their tools withdrawn,
/// their processes gone).
async fn stop(servers: Vec<Running>) {
    let mut supervisors = Vec::new();
    for running in servers {
        running.server.stop();
        if let Some(supervisor) = running.supervisor {
            supervisors.push((running.server, supervisor));
        }
    }
    let aborts: Vec<_> = supervisors
        .iter()
        .map(|(_, supervisor)| supervisor.abort_handle())
        .collect();
    let all =
        futures_util::future::join_all(supervisors.iter_mut().map(|(_, supervisor)| supervisor));
    if tokio::time::timeout(super::process::STOP_GRACE * 2, all)
        .await
        .is_err()
    {
        // A supervisor stuck past every bound of its own: ended here. Its process is killed as
        // the supervisor drops it, and its tools are withdrawn now.
        tracing::warn!("MCP servers still stopping; their supervisors are ended");
        for abort in aborts {
            abort.abort();
        }
        for (server, _) in &supervisors {
            server.withdraw_tools();
            server.set_state(ServerState::Stopped);
        }
    }
}
