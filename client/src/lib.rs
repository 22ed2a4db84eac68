//! toold-client: the Rust client library for the toold daemon.
//!
//! It shares the wire types and framing of `toold-protocol`; the connection and its typed methods
//! arrive with the daemon's socket server.

pub use toold_protocol as protocol;
