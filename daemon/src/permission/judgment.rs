//! What the engine answers: the decision, the step of docs/protocol.md section 7 that made it,
//! and the rule (or grant) it rests on, as one value the pipeline, `permissions/explain` and
//! the audit log all read.

use super::rules::{Rule, RuleOrigin};

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// `permission_denied`, with the reason for the model.
    Deny(String),
    /// `tool_not_allowed`: the mode forbids the tool.
    NotAllowed(String),
    /// Ask an approver; `suggestion` is the rule an `allow_session` answer records.
    Ask {
        reason: String,
        suggestion: String,
    },
}

/// The step of docs/protocol.md section 7 that decided a call, by the names of section 11.11
/// (`permissions/explain`'s `step`), with the few asks section 7 states apart from
/// its numbered steps named on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    SystemTool,
    DenyRule,
    /// The call's `escalate` cannot be granted: `unsandboxed` where the config forbids it
    /// (`allow_unsandboxed`), a `writable` directory that does not exist or whose path holds a
    /// quote, parenthesis, comma or newline.
    EscalationRefused,
    PlanMode,
    AskRule,
    /// A PreToolUse hook answered `ask`.
    HookAsk,
    /// The command line cannot be checked against the rules: it asks in every mode.
    UnreadableCommand,
    BypassMode,
    /// The call writes a path that makes code run later (`.git/config`, `.git/hooks`).
    ProtectedPath,
    AllowRule,
    Grant,
    /// A PreToolUse hook answered `allow`.
    HookAllow,
    /// A command line of read-only commands from the built-in list, reading inside the roots.
    KnownSafe,
    /// A command line no rule, grant or hook decided, run in a sandbox that confines it.
    Sandboxed,
    AcceptEdits,
    ReadOnlyInsideRoots,
    DefaultAsk,
    DontAsk,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::SystemTool => "system_tool",
            Step::DenyRule => "deny_rule",
            Step::EscalationRefused => "escalation_refused",
            Step::PlanMode => "plan_mode",
            Step::AskRule => "ask_rule",
            Step::HookAsk => "hook_ask",
            Step::UnreadableCommand => "unreadable_command",
            Step::BypassMode => "bypass_mode",
            Step::ProtectedPath => "protected_path",
            Step::AllowRule => "allow_rule",
            Step::Grant => "grant",
            Step::HookAllow => "hook_allow",
            Step::KnownSafe => "known_safe",
            Step::Sandboxed => "sandboxed",
            Step::AcceptEdits => "accept_edits",
            Step::ReadOnlyInsideRoots => "read_only_inside_roots",
            Step::DefaultAsk => "default_ask",
            Step::DontAsk => "dont_ask",
        }
    }
}

/// The rule (or grant) that decided a call, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidingRule {
    pub text: String,
    /// How toold reads it, when that differs from `text` (`Bash(npm:*)`: `run_command(npm *)`).
    pub read_as: Option<String>,
    pub origin: RuleOrigin,
}

/// A decision and why: the step that made it and the rule it rests on. What the pipeline acts
/// on, `permissions/explain` shows and the audit log records is this one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgment {
    pub decision: Decision,
    pub step: Step,
    pub rule: Option<DecidingRule>,
}

impl Judgment {
    pub(super) fn new(decision: Decision, step: Step) -> Self {
        Self {
            decision,
            step,
            rule: None,
        }
    }

    pub(super) fn by_rule(decision: Decision, step: Step, rule: &Rule) -> Self {
        Self {
            decision,
            step,
            rule: rule.deciding(),
        }
    }

    pub(super) fn by_grant(grant: &str) -> Self {
        Self {
            decision: Decision::Allow,
            step: Step::Grant,
            rule: Some(DecidingRule {
                text: grant.to_owned(),
                read_as: None,
                origin: RuleOrigin::Grant,
            }),
        }
    }
}

impl Rule {
    /// The rule as a decision names it: its text and where it is written.
    fn deciding(&self) -> Option<DecidingRule> {
        Some(DecidingRule {
            text: self.text.clone(),
            read_as: self.read_as().map(str::to_owned),
            origin: self.origin.clone(),
        })
    }
}
