//! The daemon's MCP servers as clients see them (docs/protocol.md section 11.9): `mcp/status` and
//! `mcp/restart`.

use serde::{Deserialize, Serialize};

/// `mcp/status` params: none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpStatusParams {}

/// `mcp/restart` params: the server to stop and start again (its result: the server's new
/// [`McpServerStatus`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpRestartParams {
    pub name: String,
}

/// `mcp/status` result: every configured server, in the config's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpStatusResult {
    pub servers: Vec<McpServerStatus>,
}

/// One server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    pub name: String,
    /// `starting`, `ready`, `failed` or `stopped`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `stdio` or `http`.
    pub transport: String,
    /// What the server agreed in its handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The registered names of its tools (`mcp__S__T`).
    pub tools: Vec<String>,
    pub quarantined: Vec<QuarantinedTool>,
    /// How many times it was started again after it ended.
    pub restarts: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A tool of a server left out of the registry, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantinedTool {
    pub tool: String,
    pub reason: String,
}
