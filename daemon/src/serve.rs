//! The daemon's life (`toold serve`): assembled from its configuration, served on its socket
//! until SIGTERM or SIGINT, then drained. The one entry point of the library.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::audit::AuditLog;
use crate::config::{Config, ConfigError};
use crate::index::roots::Indexes;
use crate::mcp::servers::McpServers;
use crate::pipeline::Pipeline;
use crate::rpc::reload::session_defaults;
use crate::rpc::{Daemon, DaemonParts, Settings};
use crate::server::run::{ServerOptions, run};
use crate::server::socket::SocketError;
use crate::server::{socket, systemd};
use crate::session::sessions::Sessions;
use crate::session::store::SessionStore;
use crate::shell::isolated::ShellParser;
use crate::tools::write_journal;
use crate::{Registry, paths, process_tree};
use tokio_util::sync::CancellationToken;

/// How long running batches may finish after SIGTERM before they are canceled.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// How the daemon was asked to run.
#[derive(Debug, Default)]
pub struct ServeArgs {
    /// The socket to listen on, over `$TOOLD_SOCKET`, the config's and the default.
    pub socket: Option<PathBuf>,
    /// The configuration file, over the default.
    pub config: Option<PathBuf>,
    /// Run even as root.
    pub allow_root: bool,
    /// Write the log (and anything else for stderr) to this file, rotated past
    /// [`crate::logging::LOG_FILE_MAX_BYTES`]; `None`: stderr as it is.
    pub log_file: Option<PathBuf>,
}

/// Why the daemon did not start; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: io::Error,
    },
    #[error("no directory for session state: set XDG_STATE_HOME or HOME")]
    NoStateDirectory,
}

/// `what` went wrong with `error`.
fn failed(what: &'static str) -> impl FnOnce(io::Error) -> ServeError {
    move |error| ServeError::Io { what, error }
}

/// Runs the daemon; returns once it has drained after a signal.
pub fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let ServeArgs {
        socket: socket_flag,
        config: config_path,
        allow_root,
        log_file,
    } = args;
    // Before anything can fail: every reason the daemon gives for stopping goes there.
    if let Some(path) = &log_file {
        crate::logging::log_to_file(path).map_err(failed("cannot open the log file"))?;
    }
    // First of all, before the config or anything else is in memory: the commands the daemon
    // runs have its uid, and must not read its environment or memory or trace it.
    process_tree::keep_out_of_reach();
    socket::refuse_root(allow_root)?;
    let config = Config::load(config_path.as_deref())?;
    // Held to the end: dropping it writes out the lines still queued.
    let _log = crate::logging::init();
    // Before any process is started: none may inherit what started the daemon left open.
    process_tree::inherit_no_descriptors();
    for warning in &config.warnings {
        tracing::warn!(%warning, "config");
    }
    // Before the runtime's threads exist: only then can the LISTEN_* variables be removed.
    let inherited = systemd::take_inherited_listener()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(failed("cannot start the runtime"))?;
    let served = runtime.block_on(async move {
        // Before the socket exists: a SIGTERM that comes as soon as a client could see the
        // daemon (systemd's stop right after start, a script's kill after its first answer)
        // must drain, not kill.
        let stop_signals = StopSignals::install();
        // Likewise SIGHUP, whose default would kill the daemon: it reloads the config.
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        // A child subreaper adopts every orphan of its commands: the dead must be reaped.
        tokio::spawn(process_tree::reap_orphans_as_they_die());
        recover_interrupted_writes();
        // A socket systemd passed is systemd's to remove; one bound here is removed at the end.
        let (listener, place, bound) = match inherited {
            Some(listener) => (
                tokio::net::UnixListener::from_std(listener).map_err(failed("cannot use the socket systemd passed"))?,
                "the socket systemd passed".to_owned(),
                None,
            ),
            None => {
                let env = toold_protocol::SocketEnv::from_process();
                let path = toold_protocol::resolve_socket_path(socket_flag.as_deref(), config.socket.as_deref(), &env);
                let listener = socket::bind_listener(&path)?;
                let bound = socket::BoundSocket::of(&path).map_err(failed("cannot find the socket just bound"))?;
                (listener, path.display().to_string(), Some(bound))
            }
        };
        // Writes into toold's own files would change what it trusts: its config (rules and
        // hooks), its saved sessions, its socket.
        let socket_path = listener
            .local_addr()
            .ok()
            .and_then(|address| address.as_pathname().map(PathBuf::from));
        if let Some(socket) = &socket_path {
            let own_dir = toold_dir_of(socket.clone()) != *socket;
            crate::sandbox::kept_out::keep_commands_from(socket, own_dir);
        }
        // Once, before any command: what `initialize` reports is what commands get.
        let kernel = tokio::task::spawn_blocking(crate::sandbox::kernel::probe).await.map_err(|join| failed("the sandbox probe failed")(io::Error::other(join)))?;
        if !kernel.report().degraded.is_empty() {
            tracing::warn!(degraded = ?kernel.report().degraded, "this kernel cannot enforce every part of the command sandbox");
        }
        let config_file = config_path.clone().or_else(crate::config::default_path);
        paths::protect_daemon_dirs(
            [config_file.clone(), SessionStore::default_dir(), socket_path]
                .into_iter()
                .flatten()
                .map(toold_dir_of),
            config_file,
        );
        let store = SessionStore::new(SessionStore::default_dir().ok_or(ServeError::NoStateDirectory)?);
        // Beside the sessions: `$XDG_STATE_HOME/toold/tmp`, each session's `/tmp`, and
        // `hooks`, where hook programs run.
        if let Some(toold) = store.dir().parent() {
            crate::sandbox::private_tmp::set_base(toold.join("tmp"));
            crate::hooks::run_hooks_in(toold.join("hooks")).map_err(failed("cannot make the directory hooks run in"))?;
        }
        let audit_path = crate::audit::default_path().ok_or(ServeError::NoStateDirectory)?;
        let audit = Arc::new(AuditLog::open(&audit_path, &config.audit));
        tokio::spawn(crate::audit::flush_in_background(Arc::downgrade(&audit)));
        let indexes = Arc::new(Indexes::new(config.index.clone()));
        tokio::spawn(evict_idle_indexes(Arc::downgrade(&indexes)));
        let pipeline = Pipeline::with_settings(
            Arc::new(Registry::with_builtins_indexed(&indexes)),
            Arc::new(ShellParser::of_this_binary()),
            config.batch_settings(),
        )
        .with_audit(Arc::clone(&audit));
        // Beside the sessions: `$XDG_STATE_HOME/toold/mcp`, each server's stderr log.
        let mcp_log_dir = store.dir().parent().map_or_else(|| store.dir().join("mcp"), |toold| toold.join("mcp"));

        let sessions = Sessions::new(session_defaults(&config), Some(store));
        let restored = sessions.restore();
        let settings = Settings { allow_bypass: config.allow_bypass, max_message_bytes: config.max_message_bytes };
        let daemon = Arc::new(Daemon::new(DaemonParts {
            pipeline: Arc::new(pipeline),
            sessions,
            settings,
            config: config.clone(),
            config_path: config_path.clone(),
            indexes,
        }));
        let rule_book: std::sync::Weak<dyn crate::pipeline::RuleBook> = Arc::downgrade(&daemon) as _;
        daemon.pipeline.set_rule_book(rule_book);
        // Each server once, for every session; their tools' coming and going told to clients.
        let told = Arc::downgrade(&daemon);
        let mcp = Arc::new(McpServers::start(&config.mcp_servers, mcp_log_dir, &daemon.registry, Arc::new(move || {
            if let Some(daemon) = told.upgrade() {
                daemon.tools_changed();
            }
        })));
        let _ = daemon.mcp.set(Arc::clone(&mcp));
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_signals.drain_on_signal(shutdown.clone()));
        match hangups {
            Ok(hangups) => {
                tokio::spawn(reload_on_hangup(hangups, Arc::downgrade(&daemon)));
            }
            Err(err) => tracing::error!(%err, "cannot listen for SIGHUP; reload with `toold reload`"),
        }
        let options = ServerOptions {
            max_connections: config.max_connections,
            max_message_bytes: config.max_message_bytes,
            frame_timeout: Duration::from_millis(config.frame_timeout_ms),
            drain_grace: DRAIN_GRACE,
            idle_ttl: config.session_idle_ttl,
        };
        systemd::spawn_watchdog();
        tracing::info!(socket = %place, restored, version = env!("CARGO_PKG_VERSION"), "toold is serving");
        // Not under systemd these are no-ops; failing to notify must not stop the daemon.
        let _ = systemd::notify_status(&format!("serving on {place}"));
        let _ = systemd::notify_ready();
        run(listener, daemon, options, shutdown).await;
        audit.seal_at_stop();
        mcp.stop_all().await;
        if let Some(bound) = bound {
            bound.remove();
        }
        tracing::info!("toold stopped");
        Ok(())
    });
    // Blocking work that a stopped call left behind (a tool past its grace, which no one
    // awaits) must not hold the exit: dropping the runtime would wait for it.
    runtime.shutdown_timeout(ABANDONED_WORK_GRACE);
    served
}

/// How long the daemon's exit waits for blocking work no call awaits any more.
const ABANDONED_WORK_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// toold's own directory holding `path` (`…/toold/config.toml`, `…/toold/sessions`,
/// `…/toold-1000/toold.sock`), or `path` alone when it lies elsewhere (`--socket /tmp/x.sock`
/// must not protect all of `/tmp`).
fn toold_dir_of(path: PathBuf) -> PathBuf {
    match path.parent() {
        Some(parent)
            if parent
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("toold")) =>
        {
            parent.to_path_buf()
        }
        _ => path,
    }
}

/// Before the socket is reachable: the temporary files of writes a killed daemon left behind
/// are removed, and this daemon's writes are journaled from now on.
fn recover_interrupted_writes() {
    let Some(state_dir) =
        SessionStore::default_dir().and_then(|dir| dir.parent().map(PathBuf::from))
    else {
        return;
    };
    match write_journal::recover_and_open(&state_dir.join("writes-in-flight")) {
        Ok(Some(0)) => {}
        Ok(Some(removed)) => tracing::info!(
            removed,
            "removed the temporary files of writes interrupted by the last stop"
        ),
        // Most likely a daemon already serves: binding the socket says so next.
        Ok(None) => {
            tracing::warn!("another daemon holds the journal of writes; this one journals none")
        }
        Err(err) => {
            tracing::warn!(%err, "no journal of writes: temporary files of a crash will not be cleaned up")
        }
    }
}

/// How often indexes unused for `[index] idle_evict` are looked for.
const INDEX_EVICT_EVERY: Duration = Duration::from_secs(60);

/// Drops the warm indexes left unused, every [`INDEX_EVICT_EVERY`], for as long as they live.
async fn evict_idle_indexes(indexes: std::sync::Weak<Indexes>) {
    let mut every = tokio::time::interval(INDEX_EVICT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(indexes) = indexes.upgrade() else {
            return;
        };
        indexes.evict_idle(&indexes.config());
    }
}

/// SIGTERM and SIGINT, listened for from the moment they are installed.
/// Reloads the config at each SIGHUP, for as long as the daemon runs.
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    daemon: std::sync::Weak<Daemon>,
) {
    while hangups.recv().await.is_some() {
        let Some(daemon) = daemon.upgrade() else {
            return;
        };
        tracing::info!("SIGHUP: reloading the config");
        // The outcome is logged by the reload itself.
        let _ = daemon.reload().await;
    }
}

struct StopSignals {
    /// `None` when they cannot be listened for (logged); the daemon then stops only by SIGKILL.
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl StopSignals {
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(interrupt)) => Some((term, interrupt)),
            _ => {
                tracing::error!(
                    "cannot listen for SIGTERM and SIGINT; stop the daemon with SIGKILL"
                );
                None
            }
        };
        Self { streams }
    }

    /// Waits for either signal, then starts the drain.
    async fn drain_on_signal(self, shutdown: CancellationToken) {
        let Some((mut term, mut interrupt)) = self.streams else {
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: draining"),
            _ = interrupt.recv() => tracing::info!("SIGINT: draining"),
        }
        let _ = systemd::notify_stopping();
        shutdown.cancel();
    }
}
