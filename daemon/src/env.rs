//! The Env a call runs in: working directory, roots, timeouts, output limits and the sandbox.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::paths::{self, ResolvedPath};
use crate::sandbox::CommandSandbox;

/// Defaults for every limit, used until a session or the config sets its own.
pub mod defaults {
    /// How long a call may run when neither the tool nor the session says otherwise.
    pub const TIMEOUT_MS: u64 = 120_000;
    /// The most a `run_command` call may ask for with its own `timeout_ms`.
    pub(crate) const MAX_COMMAND_TIMEOUT_MS: u64 = 600_000;
    /// What a command's output is cut to (head and tail kept) in its result.
    pub const MAX_OUTPUT_BYTES: usize = 30_000;
    /// The most `read_file` returns of one file, and `find_files` and `search_code` of a listing.
    pub(crate) const MAX_READ_BYTES: usize = 256 * 1024;
    /// The largest `max_output_bytes` or `max_read_bytes` a session or the config may set.
    pub(crate) const SIZE_LIMIT_CEILING: u64 = 1 << 30;
}

/// Where and within which limits a call runs. A session owns one; every call gets a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Env {
    /// Absolute; relative paths in arguments are taken from here.
    pub cwd: PathBuf,
    /// Absolute directories that file tools may reach without asking.
    pub roots: Vec<PathBuf>,
    pub timeout_ms: u64,
    pub max_command_timeout_ms: u64,
    pub max_output_bytes: usize,
    pub max_read_bytes: usize,
    /// Extra environment variables for commands, set after the inherited ones.
    pub command_env: BTreeMap<String, String>,
    /// The sandbox commands run in.
    pub sandbox: CommandSandbox,
}

impl Env {
    /// An Env rooted at `cwd` (which must be absolute) with every limit at its default.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        let cwd = cwd.into();
        Self {
            roots: vec![cwd.clone()],
            cwd,
            timeout_ms: defaults::TIMEOUT_MS,
            max_command_timeout_ms: defaults::MAX_COMMAND_TIMEOUT_MS,
            max_output_bytes: defaults::MAX_OUTPUT_BYTES,
            max_read_bytes: defaults::MAX_READ_BYTES,
            command_env: BTreeMap::new(),
            sandbox: CommandSandbox::default(),
        }
    }

    /// A path argument in both its forms, each judged against the roots.
    pub fn resolve_path(&self, raw: &str) -> ResolvedPath {
        paths::resolve(raw, &self.cwd, &self.roots)
    }
}
