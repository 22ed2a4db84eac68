//! A call's trail: how it was decided (by whom, at which step, on which rule, with which
//! answer) and the arguments it went on with, filled in as the call goes, and the audit records
//! made of it: `call_decided` before a call that may change something runs, `call` at its end.

use serde_json::{Map, Value};
use toold_protocol::{ToolCall, ToolResult};

use super::CallScope;
use crate::approval::ApproverIdentity;
use crate::audit::record::{Arguments, RecordedArguments};
use crate::audit::{self, CallDecided, CallRecord, DecisionRecord};
use crate::permission::{Judgment, Step};
use crate::tools::ResolvedCall;

/// What a call's audit record says of how it was decided, filled in as the call goes.
#[derive(Debug, Default)]
pub(crate) struct Trail {
    pub(super) decision: Option<DecisionRecord>,
    /// The arguments the call went on with, once a hook or an approver replaced them.
    pub(super) replaced: Option<Map<String, Value>>,
}

impl Trail {
    pub(super) fn decided(&mut self, by: &'static str, step: &'static str) {
        self.decision = Some(DecisionRecord {
            by,
            step,
            rule: None,
            source: None,
            approver: None,
            answer: None,
        });
    }

    /// Who made the final decision of an approval: the approver that answered, or, when no
    /// answer came, the daemon (with why).
    pub(super) fn answered(&mut self, answer: &'static str, approver: Option<ApproverIdentity>) {
        if let Some(decision) = &mut self.decision {
            decision.by = if approver.is_some() {
                "approver"
            } else {
                "system"
            };
            decision.approver = approver;
            decision.answer = Some(answer);
        }
    }
}

/// The audit record's decision for the engine's judgment: who decided by its step (an ask is
/// decided by whoever answers it, filled in later), and the rule it rests on.
pub(super) fn decision_record(judgment: &Judgment) -> DecisionRecord {
    let by = match judgment.step {
        Step::DenyRule | Step::AskRule | Step::AllowRule => "rule",
        Step::Grant => "grant",
        Step::PlanMode
        | Step::BypassMode
        | Step::AcceptEdits
        | Step::ReadOnlyInsideRoots
        | Step::DontAsk => "mode",
        Step::Sandboxed => "sandbox",
        Step::HookAsk | Step::HookAllow => "hook",
        Step::SystemTool
        | Step::KnownSafe
        | Step::EscalationRefused
        | Step::UnreadableCommand
        | Step::ProtectedPath
        | Step::DefaultAsk => "system",
    };
    DecisionRecord {
        by,
        step: judgment.step.as_str(),
        rule: judgment.rule.as_ref().map(|rule| rule.text.clone()),
        source: judgment.rule.as_ref().map(|rule| rule.origin.source()),
        approver: None,
        answer: None,
    }
}

/// The call's audit record, queued (written before the batch's response is sent).
pub(super) fn record(
    scope: &CallScope,
    call: &ToolCall,
    result: &ToolResult,
    elapsed_ms: u64,
    trail: &Trail,
) {
    let audit = &scope.pipeline.audit;
    if !audit.is_on() {
        return;
    }
    let arguments = match &trail.replaced {
        Some(replaced) => Arguments::Replaced(replaced),
        None => Arguments::Sent(&call.arguments),
    };
    audit.call(&CallRecord {
        call: call_decided(scope, call, arguments, trail, CallRecord::KIND),
        outcome: result
            .error_type
            .as_ref()
            .map_or("ok", |error_type| error_type.as_str()),
        elapsed_ms,
        exit_code: result.metadata.get("exit_code").and_then(Value::as_i64),
    });
}

/// The call's `call_decided` record, written before it runs.
pub(super) fn record_decided(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &ResolvedCall,
    trail: &Trail,
) {
    let audit = &scope.pipeline.audit;
    if audit.is_on() {
        let arguments = Arguments::Replaced(&resolved.arguments);
        audit.decided(&call_decided(
            scope,
            call,
            arguments,
            trail,
            CallDecided::KIND,
        ));
    }
}

/// The call as decided, for its audit records (`kind`: which of them).
fn call_decided<'a>(
    scope: &'a CallScope,
    call: &'a ToolCall,
    arguments: Arguments<'a>,
    trail: &'a Trail,
    kind: &'static str,
) -> CallDecided<'a> {
    let audit = &scope.pipeline.audit;
    CallDecided {
        kind,
        ts: audit::record::now(),
        session: scope.session.id(),
        batch: &scope.batch_id,
        call_id: &call.id,
        tool: &call.name,
        arguments: RecordedArguments::new(arguments, audit.mode()),
        decision: trail.decision.as_ref(),
    }
}
