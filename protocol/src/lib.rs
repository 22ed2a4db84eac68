//! toold's wire protocol (PROTOCOL.md): the serde types of every message and the framing codec.
//!
//! Everything the daemon and its clients put on the socket is a type from this crate;
//! internal types convert at the daemon's dispatch layer.

pub mod rpc;
pub mod tool;

pub use rpc::{
    Empty, ErrorObject, Id, InvalidMessage, Message, Notification, Request, Response, error_code,
};
pub use tool::{ErrorType, Safety, ToolCall, ToolDefinition, ToolResult, ToolSource};
