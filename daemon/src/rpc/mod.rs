//! The daemon's JSON-RPC side: the shared daemon state, connections, the method table and its
//! handlers, and the peers (hooks, client tools) reached over connections.

pub(crate) mod client_tools;
pub(crate) mod connection;
pub(crate) mod dispatch;
pub(crate) mod handlers;
pub(crate) mod reload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;
use tokio_util::sync::CancellationToken;
use toold_protocol::methods;

use crate::config::Config;
use crate::mcp::servers::McpServers;
use crate::pipeline::Pipeline;
use crate::session::sessions::Sessions;
use crate::tools::Registry;
use connection::Connection;
use toold_protocol::sync::LockUnpoisoned;

/// Daemon-wide settings the handlers need.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub allow_bypass: bool,
    pub max_message_bytes: usize,
}

/// Everything the daemon shares between connections.
pub(crate) struct Daemon {
    pub registry: Arc<Registry>,
    pub pipeline: Arc<Pipeline>,
    pub sessions: Sessions,
    pub settings: Settings,
    /// Changes with every daemon process: clients tell a restart by it.
    pub instance_id: String,
    /// When the daemon started, RFC 3339 (`initialize`'s `started_at`).
    pub started_at: String,
    /// Fired when the daemon starts shutting down: no new batches.
    pub shutdown: CancellationToken,
    pub next_batch: AtomicU64,
    /// Every open connection, for `tools/list_changed`.
    connections: Mutex<HashMap<u64, Arc<Connection>>>,
    /// The configured MCP servers, set once they are started (they need the daemon to tell
    /// clients of their tools).
    pub mcp: std::sync::OnceLock<Arc<McpServers>>,
    /// The warm indexes of the roots `find_files` and `search_code` search.
    pub indexes: Arc<crate::index::roots::Indexes>,
    /// `--config`, read again by a reload (`None`: the default file).
    config_path: Option<PathBuf>,
    /// The config in effect, which a reload compares the file with.
    running_config: tokio::sync::Mutex<Config>,
    /// Held by a reload from its start to its end: two never interleave.
    reloading: tokio::sync::Mutex<()>,
}

/// What [`Daemon::new`] puts together: the parts `serve` built.
pub(crate) struct DaemonParts {
    pub pipeline: Arc<Pipeline>,
    pub sessions: Sessions,
    pub settings: Settings,
    /// The config read at start, and where from (`None`: the default file).
    pub config: Config,
    pub config_path: Option<PathBuf>,
    pub indexes: Arc<crate::index::roots::Indexes>,
}

impl Daemon {
    pub(crate) fn new(parts: DaemonParts) -> Self {
        let DaemonParts {
            pipeline,
            sessions,
            settings,
            config,
            config_path,
            indexes,
        } = parts;
        let started = std::time::SystemTime::now();
        let started_nanos = started
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or(0);
        Self {
            registry: Arc::clone(&pipeline.registry),
            pipeline,
            sessions,
            settings,
            instance_id: format!("{:x}-{}", started_nanos, std::process::id()),
            started_at: toold_protocol::time::rfc3339(started),
            shutdown: CancellationToken::new(),
            next_batch: AtomicU64::new(1),
            connections: Mutex::new(HashMap::new()),
            mcp: std::sync::OnceLock::new(),
            indexes,
            config_path,
            running_config: tokio::sync::Mutex::new(config),
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    fn connections(&self) -> MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        // Inserts and removes only: a poisoned lock stays consistent.
        self.connections.lock_unpoisoned()
    }

    pub(crate) fn connection_opened(&self, connection: Arc<Connection>) {
        self.connections().insert(connection.id(), connection);
    }

    /// A connection closed: its sessions lose it (its batches are canceled where the session
    /// says so), its tools are unregistered.
    pub(crate) fn connection_closed(&self, connection: &Connection) {
        self.connections().remove(&connection.id());
        self.sessions.connection_gone(connection.id());
        let tools = connection.tools();
        let mut changed = false;
        for name in tools {
            changed |= self.registry.unregister(&name);
            connection.disown_tool(&name);
        }
        if changed {
            self.tools_changed();
        }
    }

    /// Tells every initialized connection the registry changed.
    pub(crate) fn tools_changed(&self) {
        let revision = self.registry.revision();
        let connections: Vec<Arc<Connection>> = self.connections().values().cloned().collect();
        for connection in connections
            .into_iter()
            .filter(|connection| connection.is_initialized())
        {
            let notify = connection
                .outbound()
                .notify(methods::TOOLS_LIST_CHANGED, json!({ "revision": revision }));
            tokio::spawn(async move {
                // A connection that is gone needs no notification.
                let _ = notify.await;
            });
        }
    }
}
