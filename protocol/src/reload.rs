//! `config/reload`: the daemon rereads its config file (as SIGHUP and `toold reload` make it):
//! rules, hooks, limits and MCP servers take effect; what only a restart can change is named.

use serde::{Deserialize, Serialize};

/// `config/reload` params: none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadParams {}

/// What a reload changed. A file that does not check is refused with an error (`-32602`
/// naming the file, line and column) and the running config is kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReloadResult {
    /// The file read; `None`: there is none, and every default applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Which of `rules`, `hooks` and `limits` changed (in effect for batches that start from
    /// now on; rules for every live session too).
    pub changed: Vec<String>,
    /// MCP servers started (new in the file), stopped (gone from it, or `enabled = false`),
    /// and restarted (their table changed).
    pub mcp_started: Vec<String>,
    pub mcp_stopped: Vec<String>,
    pub mcp_restarted: Vec<String>,
    /// Settings that differ from the running daemon's but take effect only when it restarts
    /// (`socket`, `max_connections`, `[sandbox]`, …).
    pub needs_restart: Vec<String>,
    /// The new file's warnings (a rule that can never match, …), as `check-config` shows them.
    pub warnings: Vec<String>,
}
