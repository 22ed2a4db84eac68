//! The call pipeline: a batch's calls from the plan (which run together) through each call's
//! steps (resolve, hooks, judging, approval, execution) to their outcomes, in call order, under
//! a session as the pipeline sees it. Below the sessions that own batches and the server that
//! receives them: it imports neither.
//!
//! - [`batch`]: a batch's run, from `batch/start` to `batch/done`.
//! - [`plan`]: which calls run concurrently.
//! - [`call`]: one call's steps.
//! - [`session`]: what a call runs under: the session's state, its peers, its event sink.

pub mod batch;
pub mod call;
pub mod plan;
pub mod session;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::hooks::{ClientHooks, ConfiguredHook, HookSet};
use crate::shell::isolated::ShellParser;
use crate::tools::Registry;

/// The limits of docs/protocol.md section 10 that the pipeline applies.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How many calls of one concurrent run execute at once.
    pub max_parallel: usize,
    /// Live output per call delivered as `tool/output` events.
    pub max_stream_bytes: usize,
    pub approval_timeout: Duration,
    pub hook_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_parallel: 8,
            max_stream_bytes: 10 * 1024 * 1024,
            approval_timeout: Duration::from_secs(600),
            hook_timeout: Duration::from_secs(30),
        }
    }
}

/// What runs batches: the registry, the configured hooks, the limits.
pub struct Executor {
    pub registry: Arc<Registry>,
    /// Where `run_command` lines are analysed before they are judged.
    pub shell: Arc<ShellParser>,
    pub hooks: Vec<ConfiguredHook>,
    pub limits: Limits,
}

impl Executor {
    pub fn new(registry: Arc<Registry>, shell: Arc<ShellParser>) -> Self {
        Self {
            registry,
            shell,
            hooks: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// The hooks that apply to a session's calls.
    pub fn hook_set<'a>(
        &'a self,
        clients: &'a [Arc<dyn ClientHooks>],
        cwd: &'a Path,
    ) -> HookSet<'a> {
        HookSet {
            configured: &self.hooks,
            clients,
            timeout: self.limits.hook_timeout,
            cwd,
        }
    }
}
