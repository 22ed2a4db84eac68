//! Config reload (SIGHUP, `config/reload`, `toold reload`, systemd's `ExecReload`): the config
//! file read again and checked whole; refused, the running config stays as it was. Accepted,
//! its rules (for every live session too), hooks and limits apply to batches that start from
//! then on, new sessions get its defaults, and its MCP servers are started, stopped and
//! restarted to match. What only a restart can change is named, never half-applied.

use std::path::PathBuf;

use toold_protocol::ReloadResult;

use super::Daemon;
use crate::config::Config;
use crate::permission;
use crate::session::sessions::SessionDefaults;

/// Events each session retains for replay.
const EVENT_LOG_CAPACITY: usize = 10_000;

/// What new sessions get from `config`.
pub(crate) fn session_defaults(config: &Config) -> SessionDefaults {
    SessionDefaults {
        env: config.env_for(PathBuf::from("/")),
        config_rules: config.rules.clone(),
        allow_bypass: config.allow_bypass,
        allow_unsandboxed: config.sandbox.allow_unsandboxed,
        home: permission::home_dir(),
        mcp_servers: config
            .mcp_servers
            .iter()
            .map(|server| server.name.clone())
            .collect(),
        log_capacity: EVENT_LOG_CAPACITY,
    }
}

impl crate::pipeline::RuleBook for Daemon {
    /// Writes the rule into the config file the daemon reads (`--config`, else the default
    /// one, made when missing), then reloads it: the rule holds at once for every session of
    /// the project, and after restarts. A file that does not reload (changed by hand meanwhile
    /// into one with an error) keeps the rule written but says so.
    fn persist<'a>(
        &'a self,
        project: &'a std::path::Path,
        list: crate::permission::RuleList,
        rule: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<PathBuf, String>> {
        Box::pin(async move {
            let file = self
                .config_path
                .clone()
                .or_else(crate::config::default_path)
                .ok_or("no config file to write (neither XDG_CONFIG_HOME nor HOME is set)")?;
            {
                // One writer at a time, and never beside a reload reading the file.
                let _reloading = self.reloading.lock().await;
                crate::config::write::add_project_rule(&file, project, list, rule)?;
            }
            self.reload().await.map_err(|why| {
                format!("{} was written but did not reload: {why}", file.display())
            })?;
            Ok(file)
        })
    }
}

impl Daemon {
    /// Reads the config file again and applies it; the error (the file, line and column) when
    /// it does not check, the running config kept.
    pub(crate) async fn reload(&self) -> Result<ReloadResult, String> {
        let _reloading = self.reloading.lock().await;
        let config = match Config::load(self.config_path.as_deref()) {
            Ok(config) => config,
            Err(err) => {
                let reason = err.to_string();
                tracing::warn!(%reason, "config reload refused; the running config is kept");
                return Err(reason);
            }
        };
        for warning in &config.warnings {
            tracing::warn!(%warning, "config");
        }
        let mut config = config;
        let running = self.running_config.lock().await.clone();
        let needs_restart = keep_restart_only(&running, &mut config);
        let mut result = ReloadResult {
            source: config
                .source
                .as_ref()
                .map(|path| path.display().to_string()),
            changed: Vec::new(),
            needs_restart,
            warnings: config.warnings.iter().map(ToString::to_string).collect(),
            ..ReloadResult::default()
        };
        if running.rules.rules != config.rules.rules
            || running.rules.projects != config.rules.projects
        {
            result.changed.push("rules".to_owned());
        }
        if !same_hooks(&running, &config) {
            result.changed.push("hooks".to_owned());
        }
        if running.limits() != config.limits()
            || session_limits(&running) != session_limits(&config)
        {
            result.changed.push("limits".to_owned());
        }
        self.pipeline.set_settings(config.batch_settings());
        for (session, why) in self.sessions.reload(session_defaults(&config)) {
            tracing::warn!(%session, %why, "a session keeps its rules: the new config rules do not compile with them");
            result.warnings.push(format!(
                "session {session} keeps its former rules: the new config rules do not compile \
                 with its own ({why})"
            ));
        }
        if running.index != config.index {
            result.changed.push("index".to_owned());
            self.indexes.reconfigure(config.index.clone());
        }
        if let Some(servers) = self.mcp.get() {
            let changes = servers.reload(&config.mcp_servers).await;
            result.mcp_started = changes.started;
            result.mcp_stopped = changes.stopped;
            result.mcp_restarted = changes.restarted;
        }
        tracing::info!(
            changed = ?result.changed,
            mcp_started = ?result.mcp_started,
            mcp_stopped = ?result.mcp_stopped,
            mcp_restarted = ?result.mcp_restarted,
            needs_restart = ?result.needs_restart,
            "config reloaded"
        );
        *self.running_config.lock().await = config;
        Ok(result)
    }
}

fn same_hooks(running: &Config, next: &Config) -> bool {
    running.hooks.len() == next.hooks.len()
        && running
            .hooks
            .iter()
            .zip(&next.hooks)
            .all(|(a, b)| a.same_as(b))
}

/// The limits new sessions get.
fn session_limits(config: &Config) -> (u64, u64, usize, usize) {
    (
        config.timeout_ms,
        config.max_command_timeout_ms,
        config.max_output_bytes,
        config.max_read_bytes,
    )
}

/// The settings of `next` that differ from `running`'s but take effect only at a restart: set
/// back to the running ones (so that nothing applies half of them, and the next reload still
/// names them), and returned by name.
fn keep_restart_only(running: &Config, next: &mut Config) -> Vec<String> {
    let mut kept = Vec::new();
    macro_rules! keep {
        ($($field:ident),*) => {$(
            if running.$field != next.$field {
                kept.push(stringify!($field).to_owned());
                next.$field = running.$field.clone();
            }
        )*};
    }
    keep!(
        socket,
        max_message_bytes,
        max_connections,
        frame_timeout_ms,
        session_idle_ttl,
        allow_bypass,
        sandbox,
        audit
    );
    kept
}
