//! The call pipeline: a batch's calls from the plan (which run together) through each call's
//! steps (resolve, hooks, judging, approval, execution) to their outcomes, in call order, under
//! a session as the pipeline sees it. Below the sessions that own batches and the server that
//! receives them: it imports neither.
//!
//! - [`batch`]: a batch's run, from `batch/start` to `batch/done`.
//! - [`plan`]: which calls run concurrently.
//! - [`call`]: one call's steps.
//! - [`explain`]: `permissions/explain`, a call judged as [`call`] judges it, nothing run.
//! - [`session`]: what a call runs under: the session's state, its peers, its event sink.

pub mod batch;
pub mod call;
pub mod explain;
pub(crate) mod plan;
mod preview;
pub mod session;

use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use toold_protocol::sync::RwLockUnpoisoned;

use crate::audit::AuditLog;
use crate::hooks::{ClientHooks, ConfiguredHook, HookSet};
use crate::shell::isolated::ShellParser;
use crate::tools::Registry;

/// The limits of docs/protocol.md section 10 that the pipeline applies.
#[derive(Debug, Clone, PartialEq)]
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

/// What the config file sets for running batches: replaced whole by a reload, and read once
/// per batch, so that a batch runs under one config from its start to its end.
#[derive(Clone, Default)]
pub struct BatchSettings {
    pub hooks: Vec<ConfiguredHook>,
    pub limits: Limits,
}

impl BatchSettings {
    /// The hooks that apply to a session's calls.
    pub(crate) fn hook_set<'a>(
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

/// What runs batches: the registry, the shell parser, the settings of the config file.
pub struct Pipeline {
    pub registry: Arc<Registry>,
    /// Where `run_command` lines are analysed before they are judged.
    pub shell: Arc<ShellParser>,
    settings: RwLock<Arc<BatchSettings>>,
    /// Where every call's record goes (off unless the daemon opened a log).
    pub audit: Arc<AuditLog>,
    /// Where `allow_always` and `deny_always` answers persist their rule (set once by the
    /// daemon; without one, those answers are not offered).
    rule_book: std::sync::OnceLock<std::sync::Weak<dyn RuleBook>>,
}

/// Where a rule an approver chose to keep for good is written: the user's config file, read
/// again at once so that every session of the project has it.
pub(crate) trait RuleBook: Send + Sync {
    /// Adds `rule` to `list` of `project`'s rules; the file written, or why not.
    fn persist<'a>(
        &'a self,
        project: &'a std::path::Path,
        list: crate::permission::RuleList,
        rule: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<std::path::PathBuf, String>>;
}

impl Pipeline {
    pub fn new(registry: Arc<Registry>, shell: Arc<ShellParser>) -> Self {
        Self::with_settings(registry, shell, BatchSettings::default())
    }

    pub fn with_settings(
        registry: Arc<Registry>,
        shell: Arc<ShellParser>,
        settings: BatchSettings,
    ) -> Self {
        Self {
            registry,
            shell,
            settings: RwLock::new(Arc::new(settings)),
            audit: Arc::new(AuditLog::off()),
            rule_book: std::sync::OnceLock::new(),
        }
    }

    /// Has `allow_always` and `deny_always` answers persist through `book` (once, for good).
    pub(crate) fn set_rule_book(&self, book: std::sync::Weak<dyn RuleBook>) {
        let _ = self.rule_book.set(book);
    }

    /// The rule book, while the daemon that set it lives.
    pub(crate) fn rule_book(&self) -> Option<Arc<dyn RuleBook>> {
        self.rule_book.get().and_then(std::sync::Weak::upgrade)
    }

    /// Records every call in `audit`.
    pub(crate) fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    /// The settings batches starting now run under.
    pub(crate) fn settings(&self) -> Arc<BatchSettings> {
        Arc::clone(&self.settings.read_unpoisoned())
    }

    /// Replaces the settings (a config reload): batches already running keep theirs.
    pub(crate) fn set_settings(&self, settings: BatchSettings) {
        *self.settings.write_unpoisoned() = Arc::new(settings);
    }
}
