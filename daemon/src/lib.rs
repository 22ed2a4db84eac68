//! toold: the per-user daemon that executes AI agents' tool calls.
//!
//! This library holds the tool runtime (registry, execution boundary, builtin tools) and the
//! path handling that the permission engine judges on; the `toold` binary is thin glue over it.

pub mod env;
pub mod paths;
pub mod process_tree;
pub mod tools;

pub use env::Env;
pub use tools::{Registry, Tool, ToolContext, ToolFailure, ToolOutcome, ToolOutput};
