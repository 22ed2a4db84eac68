//! toold: the per-user daemon that executes AI agents' tool calls.
//!
//! This library is the whole daemon; its one entry point is [`serve::serve`], which the
//! `toold` binary (the command line, in `daemon/cli/`) calls for `toold serve`. In the order a
//! request walks through it: the socket server ([`server`]), the JSON-RPC method table and
//! handlers over `toold_protocol`'s peer (`rpc`), sessions ([`session`]), the call pipeline
//! ([`pipeline`]: batches, each call's steps, a session as they see it) with the sink events
//! go through ([`events`]), the audit log ([`audit`]), its hooks ([`hooks`]), permission engine ([`permission`]),
//! command-line analysis ([`shell`]) and approvals ([`approval`]), then the tool runtime
//! ([`tools`]: the registry, its execution boundary and the six builtin tools) with what it
//! runs on: the [`Env`] ([`env`](mod@env)), path arguments ([`paths`], `judged_files`), process trees
//! ([`process_tree`]), the command sandbox (`sandbox`, `spawn`). Around it: the
//! configuration ([`config`]) and the daemon's life ([`serve`]).

// An item the library does not publish is `pub(crate)`, not `pub`: what is `pub` is the
// library's surface, which the binary, the tests, the benchmarks and the fuzz targets use; the
// rest is the crate's own, so that the dead-code lint sees what nothing calls.
#![warn(unreachable_pub)]

pub mod approval;
pub mod audit;
pub mod config;
pub mod env;
pub mod events;
pub(crate) mod git_config;
pub mod hooks;
pub mod index;
pub(crate) mod judged_files;
pub mod logging;
pub mod mcp;
pub mod paths;
pub mod permission;
pub mod pipeline;
pub mod process_tree;
pub(crate) mod rpc;
pub(crate) mod sandbox;
pub(crate) mod secrets;
pub mod serve;
pub mod server;
pub mod session;
pub mod shell;
pub(crate) mod spawn;
pub mod tools;

pub use env::Env;
pub use tools::{Registry, Tool, ToolContext, ToolFailure, ToolOutcome, ToolSuccess};
