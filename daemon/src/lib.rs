//! toold: the per-user daemon that executes AI agents' tool calls.
//!
//! This library holds the tool runtime (registry, execution boundary, builtin tools, process
//! trees), the path handling and command-line analysis the permission engine judges on, and the
//! engine itself; the `toold` binary is thin glue over it.

pub mod approval;
pub mod batch;
pub mod call;
pub mod cli;
pub mod config;
pub mod confined;
pub mod env;
pub mod events;
pub mod hooks;
pub mod paths;
pub mod permission;
pub mod process_tree;
pub mod rpc;
pub mod server;
pub mod session;
pub mod shell;
pub mod tools;

pub use env::Env;
pub use tools::{Registry, Tool, ToolContext, ToolFailure, ToolOutcome, ToolOutput};
