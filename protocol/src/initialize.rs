//! The `initialize` handshake: protocol version, peer info and capabilities (docs/protocol.md
//! section 2).

use serde::{Deserialize, Serialize};

use crate::hooks::HookEvent;
use crate::sandbox::SandboxReport;
use crate::session::SessionMode;

/// The only protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Who is on the other end: a client's `client_info` or the daemon's `server_info`.
///
/// Unknown members are ignored: the type is read by both peers, and a client must not
/// fail on a newer daemon's `server_info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// What a client can do; the daemon only ever sends it the server→client requests
/// it declared here.
///
/// Unknown members are refused: a misspelt capability would otherwise silently mean
/// "no approvals" or "no hooks".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientCapabilities {
    /// Answers `approval/request`.
    #[serde(default)]
    pub approvals: bool,
    /// The hook events it answers (`hook/pre_tool_use`, `hook/post_tool_use`).
    #[serde(default)]
    pub hooks: Vec<HookEvent>,
    /// May register tools and answer `tool/invoke`.
    #[serde(default)]
    pub client_tools: bool,
}

/// `initialize` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitializeParams {
    pub protocol_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<PeerInfo>,
    #[serde(default)]
    pub capabilities: ClientCapabilities,
}

/// What the daemon offers this connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCapabilities {
    /// The session modes `session/create` and `session/update` accept here
    /// (`bypass` only when the config allows it).
    pub modes: Vec<SessionMode>,
    /// The hook events the daemon will send to a connection that declared them.
    pub hooks: Vec<HookEvent>,
    /// Whether `tools/register` is available.
    pub client_tools: bool,
    /// Messages larger than this are refused and the connection closed.
    pub max_message_bytes: u64,
}

/// `initialize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitializeResult {
    pub protocol_version: u32,
    pub server_info: PeerInfo,
    /// Identifies this daemon process; changes when the daemon restarts.
    pub instance_id: String,
    /// When this daemon process started, RFC 3339 in UTC ([`crate::time`]). Optional when
    /// read, so that a newer client still understands a daemon that did not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub capabilities: ServerCapabilities,
    /// What the daemon can enforce on commands (probed at its start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxReport>,
    /// The audit log's state (an extension: `toold status` shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditStatus>,
    /// The daemon's own process id (a client over a forwarded socket sees the forwarder's in
    /// the socket's peer credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The file the daemon logs to (`toold serve --log-file`, which a daemon started by
    /// `toold connect` or `toold mcp serve` gets); absent: its stderr, the journal under
    /// systemd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
}

/// The audit log as the daemon reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditStatus {
    /// `full`, `digest` or `off`.
    pub mode: String,
    pub path: Option<String>,
    /// Records written since the daemon started.
    pub written: u64,
    /// Records that could not be written (the disk failed, or the queue was full).
    pub lost: u64,
    /// The last failure, while the log is failing or once it has.
    pub last_error: Option<String>,
    /// The last record the daemon wrote (or, before its first, the one its log ended with at
    /// start): what `toold audit verify` checks the file's end against, since a line removed
    /// from the end of the file breaks no link. Absent while the log holds no record, and
    /// from a daemon older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<AuditHead>,
    /// The last time the daemon found that the path no longer named the file it was
    /// appending to (replaced, removed or moved) and reopened it; absent when it never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<AuditReplaced>,
}

/// A record of the audit log, as its chain names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditHead {
    /// Its `seq`.
    pub seq: u64,
    /// The SHA-256 of its line (without the newline), 64 lowercase hex digits: the `prev` of
    /// the record after it.
    pub hash: String,
}

/// The daemon's log file replaced under it, as `log_replaced` records say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReplaced {
    /// How many times since the daemon started.
    pub count: u64,
    /// When it was last found, RFC 3339 in UTC.
    pub ts: String,
    /// `another_file` (the path named a file other than the one being appended to) or
    /// `no_file` (nothing at the path: removed or moved away; a new file was started).
    pub found: String,
    /// Whether the file found ended with the daemon's last record (so that nothing written
    /// before was lost with the old file).
    pub ends_with_last_record: bool,
    /// The `seq` of the `log_replaced` record that says so.
    pub seq: u64,
}

/// The `data` of the `-32602` error for an unsupported `protocol_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsupportedVersionData {
    pub supported: Vec<u32>,
}

impl UnsupportedVersionData {
    pub fn current() -> Self {
        Self {
            supported: vec![PROTOCOL_VERSION],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    #[test]
    fn params_round_trip_the_protocol_example() {
        let params: InitializeParams = assert_round_trip(json!({
            "protocol_version":1,
            "client_info":{"name":"my-editor","version":"0.3.0"},
            "capabilities":{"approvals":true,"hooks":["pre_tool_use","post_tool_use"],"client_tools":true}}));
        assert_eq!(
            params.capabilities.hooks,
            [HookEvent::PreToolUse, HookEvent::PostToolUse]
        );
    }

    #[test]
    fn capabilities_default_to_none() {
        let params: InitializeParams =
            serde_json::from_value(json!({"protocol_version":1})).unwrap();
        assert_eq!(params.capabilities, ClientCapabilities::default());
        assert_eq!(params.client_info, None);
    }

    #[test]
    fn bad_params_are_refused() {
        assert_refused::<InitializeParams>(json!({"client_info":{"name":"x"}}), "protocol_version");
        assert_refused::<InitializeParams>(
            json!({"protocol_version":1,"capabilities":{"approval":true}}),
            "unknown field `approval`",
        );
        assert_refused::<InitializeParams>(
            json!({"protocol_version":1,"capabilities":{"hooks":["on_start"]}}),
            "unknown variant `on_start`",
        );
    }

    #[test]
    fn result_round_trips() {
        let result: InitializeResult = assert_round_trip(json!({
            "protocol_version":1,
            "server_info":{"name":"toold","version":"0.1.0"},
            "instance_id":"i_01",
            "capabilities":{"modes":["default","accept_edits","plan","dont_ask"],
                            "hooks":["pre_tool_use","post_tool_use"],
                            "client_tools":true,"max_message_bytes":16777216}}));
        assert_eq!(result.capabilities.modes.len(), 4);
    }

    #[test]
    fn unsupported_version_data_lists_version_one() {
        assert_eq!(
            serde_json::to_value(UnsupportedVersionData::current()).unwrap(),
            json!({"supported":[1]})
        );
    }
}
