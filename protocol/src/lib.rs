//! toold's wire protocol (docs/protocol.md): the serde types of every message, the method
//! names, the JSON-RPC envelope and error codes, and the framing codec.
//!
//! Everything the daemon and its clients put on the socket is a type from this crate;
//! internal types convert at the daemon's dispatch layer. One module per area:
//! [`rpc`] (envelope, ids, error codes), [`methods`] (names and typed method markers),
//! [`initialize`], [`session`], [`explain`], [`tools_api`], [`execute`], [`events`], [`approval`],
//! [`hooks`], [`invoke`], [`sandbox`], [`tool`] (definitions, calls, results), [`framing`]
//! (NDJSON or LSP-style frames, detected per connection) and [`peer`] (the bidirectional
//! JSON-RPC connection both the daemon and the client run on), [`socket_path`] (where the
//! socket is, resolved the same way by the daemon and its clients) and [`time`] (RFC 3339
//! timestamps, written and read).

pub mod approval;
pub mod events;
pub mod execute;
pub mod explain;
pub mod framing;
pub mod hooks;
pub mod index;
pub mod initialize;
pub mod invoke;
pub mod mcp;
pub mod methods;
pub mod peer;
pub mod reload;
pub mod rpc;
pub mod sandbox;
pub mod session;
pub mod socket_path;
pub mod sync;
pub mod time;
pub mod tool;
pub mod tools_api;

#[cfg(test)]
mod test_support;

pub use approval::{
    AlwaysRule, ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, CommandSandboxPreview,
    PREVIEW_MAX_BYTES, Preview,
};
pub use events::{
    ApprovalResolved, ArgumentsReplaced, BatchDone, BatchStart, CallEnded, CallStart, Event,
    EventParams, OutputStream, ReplacedBy, ResolvedBy, ToolOutput, ToolProgress,
};
pub use execute::{
    CallOutcome, CancelParams, CancelRequestParams, CancelResult, ExecuteParams, ExecuteResult,
};
pub use explain::{
    ExplainCall, ExplainParams, ExplainedCommand, ExplainedPath, Explanation, RuleSource,
};
pub use framing::{
    DetectedFraming, Frame, FrameCodec, FrameDecoder, FrameEncoder, Framing, FramingError, JsonText,
};
pub use hooks::{
    HookEvent, HookProgramInput, PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer,
    PreToolUseDecision, PreToolUseParams,
};
pub use initialize::{
    AuditHead, AuditReplaced, AuditStatus, ClientCapabilities, InitializeParams, InitializeResult,
    PROTOCOL_VERSION, PeerInfo, ServerCapabilities, UnsupportedVersionData,
};
pub use invoke::{InvokeEnv, InvokeParams};
pub use mcp::{
    McpRestartParams, McpServerStatus, McpStatusParams, McpStatusResult, QuarantinedTool,
};
pub use methods::{NotificationMethod, RequestMethod};
pub use peer::{
    BoxFuture, CloseReason, Handler, OutgoingRequest, Peer, PeerClosed, PeerFraming, PeerHandle,
    PeerOptions, PeerTask, Reply, RequestError, TrySendError, Unsent, render_notification,
};
pub use reload::{ReloadParams, ReloadResult};
pub use rpc::{
    Empty, ErrorObject, Id, Incoming, InvalidMessage, Message, Notification, RawRequest, Request,
    Response, error_code,
};
pub use sandbox::{Escalation, SandboxMode, SandboxReport, SandboxRequest, SandboxSettings};
pub use session::{
    OnDisconnect, Rules, SessionAttachParams, SessionCreateParams, SessionEnv, SessionIdParams,
    SessionListParams, SessionListResult, SessionMode, SessionSnapshot, SessionUpdateParams,
};
pub use socket_path::{SocketEnv, resolve_socket_path};
pub use tool::{ErrorType, Safety, ToolCall, ToolDefinition, ToolResult, ToolSource};
pub use tools_api::{
    Revision, ToolsListParams, ToolsListResult, ToolsRegisterParams, ToolsUnregisterParams,
};
