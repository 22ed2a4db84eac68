//! What one decision is made from: the facts of a call, of its command line and of its
//! session, and what a PreToolUse hook said. Plain values, gathered beforehand (`facts`), so
//! that the engine stays pure.

use std::sync::Arc;

use serde_json::{Map, Value};
use toold_protocol::{Safety, SessionMode as Mode};

use crate::paths::ResolvedPath;
use crate::shell::CommandLine;

use super::escalation::Loosening;
use super::policy::Policy;
use super::rules::Rule;

/// What a PreToolUse hook said about permission, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookVerdict {
    /// The hooks said nothing about permission (or none ran): the rules decide.
    #[default]
    Silent,
    /// A hook allowed the call: no approval is asked, deny rules still apply.
    Allow,
    /// A hook asked for an approval whatever the rules say.
    Ask,
}

/// A command line with its analysis, its environment, and the files it writes and reads
/// judged.
#[derive(Debug, Clone)]
pub struct CommandFacts {
    pub line: String,
    /// The call's `env` argument as leading `NAME=value` words, sorted by name: they count as
    /// if written before every command of the line (docs/protocol.md section 7).
    pub env: Vec<String>,
    /// The call's `cwd` argument, judged against the roots (`None`: the session's cwd).
    pub cwd: Option<ResolvedPath>,
    pub analysis: Arc<CommandLine>,
    /// What redirections (and options such as `time -o`) write, judged against the roots.
    pub written: Vec<ResolvedPath>,
    /// What redirections (and options such as `xargs -a`) read, judged against `read_file`
    /// deny rules.
    pub read: Vec<ResolvedPath>,
    /// What the call's `escalate` loosens beyond the session's sandbox (`None`: nothing).
    pub escalation: Option<Loosening>,
    /// Set when every command of the line is a known-safe read ([`facts`](super::facts)'
    /// `known_safe_reads`, whose files are in `read`): whether it reads a tree (a directory's
    /// files, a repository).
    pub known_safe: Option<bool>,
    /// Why the call's escalation cannot be granted at all
    /// ([`Step::EscalationRefused`](super::Step::EscalationRefused)).
    pub escalation_refused: Option<String>,
}

impl CommandFacts {
    /// `form` with the call's environment in front, as rules see it.
    pub(super) fn with_env<'a>(&self, form: &'a str) -> std::borrow::Cow<'a, str> {
        if self.env.is_empty() {
            form.into()
        } else if form.is_empty() {
            self.env.join(" ").into()
        } else {
            format!("{} {form}", self.env.join(" ")).into()
        }
    }

    /// Whether `path` lies under a directory the call's escalation makes writable (both its
    /// forms): such a write is the escalation's, which the allow rule must cover.
    pub(super) fn escalation_writes(&self, path: &ResolvedPath) -> bool {
        self.escalation.as_ref().is_some_and(|loosening| {
            loosening
                .writable
                .iter()
                .any(|dir| path.lexical.starts_with(dir) && path.resolved.starts_with(dir))
        })
    }

    /// Whether `rule`'s ` with …` part lets it cover this call's escalation: a rule without
    /// one covers only calls that stay in their sandbox.
    pub(super) fn escalation_allowed_by(&self, rule: &Rule) -> bool {
        match (&rule.escalation, &self.escalation) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(rule), Some(call)) => rule.covers(call),
        }
    }

    /// Whether a deny or ask `rule` applies to this call's escalation: one without ` with …`
    /// applies to every call, one with it to calls that loosen what it names.
    pub(super) fn escalation_restricted_by(&self, rule: &Rule) -> bool {
        match (&rule.escalation, &self.escalation) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(rule), Some(call)) => rule.overlaps(call),
        }
    }

    /// Whether the line writes a path that makes code run later (docs/protocol.md section 7).
    pub(super) fn writes_code_that_runs(&self) -> bool {
        self.written.iter().any(|path| path.makes_code_run)
    }
}

/// Everything the engine needs about one call, gathered beforehand.
#[derive(Debug, Clone)]
pub struct CallFacts<'a> {
    pub tool: &'a str,
    pub safety: Safety,
    pub system: bool,
    pub arguments: &'a Map<String, Value>,
    /// The call's path arguments, judged (for file tools: `path`, defaulting to the cwd).
    pub paths: &'a [ResolvedPath],
    /// For `run_command`: the analysed command line.
    pub command: Option<&'a CommandFacts>,
    pub hook: HookVerdict,
}

/// The session state a decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts<'a> {
    pub mode: Mode,
    pub policy: &'a Policy,
    pub grants: &'a [String],
    /// Whether the session's commands run in a sandbox that confines them: writes only where
    /// it allows, the network closed, no Unix socket of a service outside, every layer of that
    /// enforced by this kernel.
    pub confined: bool,
}
