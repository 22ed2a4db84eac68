//! The per-call pipeline, docs/protocol.md section 5 steps 1–8, one function per step:
//! `call_start` → resolve → pre hooks → permission (and approval) → recheck → execute →
//! post hooks → `tool/result`, `tool/call_done`. The first step that fails ends the call with
//! its result; every call ends with exactly one.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toold_protocol::{
    AlwaysRule, ApprovalDecision, ApprovalRequestParams, ApprovalResolved, ArgumentsReplaced,
    CallEnded, CallOutcome, CallStart, ErrorType, Escalation, PostToolUseParams,
    PreToolUseDecision, PreToolUseParams, ReplacedBy, ResolvedBy, Safety, ToolCall,
    ToolOutput as OutputEvent, ToolProgress, ToolResult,
};

use super::preview;
use super::session::{Session, SessionState};
use crate::approval::{ApprovalReply, ApproverIdentity};
use crate::audit::record::{Arguments, RecordedArguments};
use crate::audit::{self, CallDecided, CallRecord, DecisionRecord, SessionChange};
use crate::env::Env;
use crate::events::EventBody;
use crate::paths::ResolvedPath;
use crate::permission::RuleList;
use crate::permission::facts::{
    AnalysedLine, call_escalation, command_line, with_facts, with_facts_and_paths,
};
use crate::permission::{self, Decision, HookVerdict, Judgment, Step};
use crate::pipeline::{BatchSettings, Executor};
use crate::tools::registry::run_resolved;
use crate::tools::{CallOrigin, Judged, LiveUpdate, ResolvedCall};

/// How many live output chunks may wait for the event sink before the tool waits.
const OUTPUT_QUEUE: usize = 64;

/// Everything one call of a batch runs in. Cheap to clone: one per call task.
#[derive(Clone)]
pub struct CallScope {
    pub executor: Arc<Executor>,
    /// The config's hooks and limits, as they were when the batch started.
    pub settings: Arc<BatchSettings>,
    pub session: Arc<Session>,
    pub batch_id: Arc<str>,
    pub iteration: u64,
    /// Cancels the whole batch: an approver's `abort`.
    pub abort: CancellationToken,
    /// Who sent the batch, as the parser workers share themselves out: the client's process.
    pub parser_owner: Arc<str>,
}

/// Runs one call to its end: the events, the pipeline, the outcome.
pub async fn run_call(
    scope: &CallScope,
    call: &Arc<ToolCall>,
    cancel: CancellationToken,
) -> CallOutcome {
    let started = Instant::now();
    scope.emit(EventBody::CallStart(CallStart {
        iteration: scope.iteration,
        call: Arc::clone(call),
        elided_bytes: 0,
    }));
    let mut trail = Trail::default();
    let result = if cancel.is_cancelled() {
        failure(
            call,
            ErrorType::Canceled,
            "the call was canceled before it started",
        )
    } else {
        pipeline(scope, call, &cancel, &mut trail).await
    };
    let result = step_post_hooks(scope, call, result, elapsed_ms(started)).await;
    finish(scope, call, result, elapsed_ms(started), &trail)
}

/// What a call's audit record says of how it was decided, filled in as the call goes.
#[derive(Debug, Default)]
pub struct Trail {
    decision: Option<DecisionRecord>,
    /// The arguments the call went on with, once a hook or an approver replaced them.
    replaced: Option<Map<String, Value>>,
}

impl Trail {
    fn decided(&mut self, by: &'static str, step: &'static str) {
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
    fn answered(&mut self, answer: &'static str, approver: Option<ApproverIdentity>) {
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
fn decision_record(judgment: &Judgment) -> DecisionRecord {
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

/// Step 8: `tool/result`, then `tool/call_done`, and the call's outcome.
pub fn finish(
    scope: &CallScope,
    call: &ToolCall,
    mut result: ToolResult,
    elapsed_ms: u64,
    trail: &Trail,
) -> CallOutcome {
    // A call that ran because the sandbox confines it or the known-safe list holds it, with no
    // rule, grant, hook or person deciding, says so beside its result: the model and whoever reads the transcript see why
    // nobody was asked.
    if let Some(decision) = &trail.decision
        && (decision.step == Step::Sandboxed.as_str() || decision.step == Step::KnownSafe.as_str())
    {
        result.metadata.insert(
            "permission".into(),
            serde_json::json!({"step": decision.step, "by": decision.by}),
        );
    }
    record(scope, call, &result, elapsed_ms, trail);
    let ended = CallEnded {
        iteration: scope.iteration,
        call_id: call.id.clone(),
        result: Arc::new(result),
        elapsed_ms,
        elided_bytes: 0,
    };
    // The events and the outcome share the one result; only the small envelope is copied.
    scope.emit(EventBody::Result(ended.clone()));
    scope.emit(EventBody::CallDone(ended.clone()));
    tracing::info!(
        session = scope.session.id(),
        batch = &*scope.batch_id,
        call = %call.id,
        tool = %call.name,
        outcome = ended.result.error_type.as_ref().map_or("ok", |error_type| error_type.as_str()),
        elapsed_ms,
        "call"
    );
    CallOutcome {
        call_id: ended.call_id,
        result: ended.result,
        elapsed_ms,
    }
}

/// The call's audit record, queued (written before the batch's response is sent).
fn record(scope: &CallScope, call: &ToolCall, result: &ToolResult, elapsed_ms: u64, trail: &Trail) {
    let audit = &scope.executor.audit;
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

impl CallScope {
    pub fn emit(&self, body: EventBody) {
        self.session.events().emit(&self.batch_id, body);
    }
}

/// Steps 2–6; the first that fails gives the result.
async fn pipeline(
    scope: &CallScope,
    call: &ToolCall,
    cancel: &CancellationToken,
    trail: &mut Trail,
) -> ToolResult {
    let mut resolved = match step_resolve(scope, call, trail) {
        Ok(resolved) => resolved,
        Err(result) => return result,
    };
    let hook = match step_pre_hooks(scope, call, &mut resolved, cancel, trail).await {
        Ok(hook) => hook,
        Err(result) => return result,
    };
    let permitted = step_permission(scope, call, &mut resolved, hook, cancel, trail).await;
    let (env, judged) = match permitted {
        Ok(allowed) => allowed,
        Err(result) => return result,
    };
    if let Err(result) = step_recheck(scope, call, &resolved) {
        return result;
    }
    // A call that may change something is on disk, with who allowed it, before it runs.
    if resolved.definition().safety != Safety::ReadOnly {
        record_decided(scope, call, &resolved, trail);
    }
    step_execute(scope, resolved, env, judged, cancel).await
}

/// The call's `call_decided` record, written before it runs.
fn record_decided(scope: &CallScope, call: &ToolCall, resolved: &ResolvedCall, trail: &Trail) {
    let audit = &scope.executor.audit;
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
    let audit = &scope.executor.audit;
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

/// Step 2: registered, visible to the session, arguments valid for the schema.
fn step_resolve(
    scope: &CallScope,
    call: &ToolCall,
    trail: &mut Trail,
) -> Result<ResolvedCall, ToolResult> {
    let resolved = scope.executor.registry.resolve(call)?;
    let state = scope.session.state();
    if let Some(hidden) = state.hidden_by(resolved.definition()) {
        trail.decided(hidden.decided_by(), hidden.step());
        return Err(not_visible(call));
    }
    Ok(resolved)
}

/// Step 3: every PreToolUse hook; `block` ends the call, replaced arguments are validated again.
async fn step_pre_hooks(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &mut ResolvedCall,
    cancel: &CancellationToken,
    trail: &mut Trail,
) -> Result<HookVerdict, ToolResult> {
    let state = scope.session.state();
    let peers = scope.session.peers();
    let hooks = scope.settings.hook_set(&peers.hooks, &state.env.cwd);
    if !hooks.any_for(toold_protocol::HookEvent::PreToolUse, &call.name) {
        return Ok(HookVerdict::None);
    }
    let params = PreToolUseParams {
        session_id: scope.session.id().to_owned(),
        batch_id: scope.batch_id.to_string(),
        call: current_call(call, &resolved.arguments),
        safety: resolved.definition().safety,
        mode: state.mode,
    };
    let verdict = tokio::select! {
        verdict = hooks.pre_tool_use(&params) => verdict,
        () = cancel.cancelled() => return Err(failure(call, ErrorType::Canceled, "the call was canceled during its PreToolUse hooks")),
    };
    if verdict.decision == PreToolUseDecision::Block {
        trail.decided("hook", "hook_block");
        let reason = verdict
            .reason
            .unwrap_or_else(|| "a PreToolUse hook blocked the call".to_owned());
        return Err(failure(call, ErrorType::HookBlocked, reason));
    }
    if let Some(arguments) = verdict.arguments {
        resolved.replace_arguments(arguments)?;
        trail.replaced = Some(resolved.arguments.clone());
        arguments_replaced(scope, call, &resolved.arguments, ReplacedBy::Hook);
    }
    Ok(match verdict.decision {
        PreToolUseDecision::Allow => HookVerdict::Allow,
        PreToolUseDecision::Ask => HookVerdict::Ask,
        PreToolUseDecision::Continue | PreToolUseDecision::Block => HookVerdict::None,
    })
}

/// Step 4: the permission engine on the session's current state, and an approval when it asks.
/// Returns the Env the call runs in (updates made after this step do not reach the call) and
/// what was judged (the path arguments, what walks must not show), for the tool to act on.
async fn step_permission(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &mut ResolvedCall,
    hook: HookVerdict,
    cancel: &CancellationToken,
    trail: &mut Trail,
) -> Result<(Arc<Env>, Judged), ToolResult> {
    let mut analysed = tokio::select! {
        analysed = analyse_command(scope, resolved) => analysed,
        () = cancel.cancelled() => return Err(failure(call, ErrorType::Canceled, "the call was canceled while its command line was analysed")),
    };
    let state = scope.session.state();
    let (judgment, judged) = state.decide_judging(resolved, analysed.as_ref(), hook);
    trail.decision = Some(decision_record(&judgment));
    match judgment.decision {
        Decision::Allow => {
            let judged = judged_for(&state, resolved, judged);
            Ok((env_for(&state, resolved), judged))
        }
        Decision::Deny(reason) => Err(failure(call, ErrorType::PermissionDenied, reason)),
        Decision::NotAllowed(reason) => Err(failure(call, ErrorType::ToolNotAllowed, reason)),
        Decision::Ask { reason, suggestion } => {
            // The approver saw (and approved) the paths as judged above; the tool acts on
            // them, or on the judgment of the arguments the approver replaced.
            let asking = Asking {
                reason,
                suggestion,
                judged: &judged,
            };
            let rejudged =
                step_approval(scope, call, resolved, &mut analysed, asking, cancel, trail).await?;
            let state = scope.session.state();
            let judged = judged_for(&state, resolved, rejudged.unwrap_or(judged));
            Ok((env_for(&state, resolved), judged))
        }
    }
}

/// The Env an allowed call runs in: the session's, with its sandbox loosened by exactly what
/// the call's `escalate` asked and was judged (approved, or covered by a rule or grant).
fn env_for(state: &SessionState, resolved: &ResolvedCall) -> Arc<Env> {
    let tool = &resolved.definition().name;
    match call_escalation(tool, &resolved.arguments, &state.env) {
        Some(loosening) => Arc::new(Env {
            sandbox: state.env.sandbox.escalated(&loosening),
            ..Env::clone(&state.env)
        }),
        None => Arc::clone(&state.env),
    }
}

/// What the tool acts on: `paths` as judged, and what the session's deny rules hide from its
/// walks.
fn judged_for(state: &SessionState, resolved: &ResolvedCall, paths: Vec<ResolvedPath>) -> Judged {
    Judged {
        paths: paths.into(),
        hidden: state.policy.hidden_from_walks(&resolved.definition().name),
    }
}

/// A `run_command` line analysed by the daemon's parser workers, before it is judged.
async fn analyse_command(scope: &CallScope, resolved: &ResolvedCall) -> Option<AnalysedLine> {
    let tool = &resolved.definition().name;
    analyse(
        &scope.executor,
        &scope.parser_owner,
        &resolved.arguments,
        tool,
    )
    .await
}

/// The command line of a call whose tool takes one, analysed by the parser workers (what
/// judging and `permissions/explain` read); `None` for other tools.
pub(super) async fn analyse(
    executor: &Executor,
    parser_owner: &str,
    arguments: &Map<String, Value>,
    tool: &str,
) -> Option<AnalysedLine> {
    let line = command_line(tool, arguments)?;
    let analysis = executor.shell.analyze(parser_owner, line).await;
    Some(AnalysedLine {
        line: line.to_owned(),
        analysis: Arc::new(analysis),
    })
}

/// What the permission step hands the approval: why it asks, the grant `allow_session`
/// records, and the paths as judged (what the tool acts on, and its preview shows).
struct Asking<'a> {
    reason: String,
    suggestion: String,
    judged: &'a [ResolvedPath],
}

/// The approval half of step 4: ask, wait (not counted in the call's timeout), apply the answer.
/// Returns the judged paths of arguments the approver replaced (`None`: it kept them).
async fn step_approval(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &mut ResolvedCall,
    analysed: &mut Option<AnalysedLine>,
    asking: Asking<'_>,
    cancel: &CancellationToken,
    trail: &mut Trail,
) -> Result<Option<Vec<ResolvedPath>>, ToolResult> {
    let Asking {
        reason,
        suggestion,
        judged,
    } = asking;
    let Some(approver) = scope.session.peers().approver else {
        trail.answered("no_approver", None);
        return Err(failure(
            call,
            ErrorType::PermissionDenied,
            format!("{reason}, and no approver is attached"),
        ));
    };
    let approval_id = format!("{}/{}", scope.batch_id, call.id);
    let state = scope.session.state();
    let escalation = escalation_asked(&state.env, resolved);
    let env = env_for(&state, resolved);
    // Worked out before anyone is asked, as the call would run if approved as it is: with this
    // Env (its escalation applied) on the paths as judged.
    let preview = tokio::select! {
        preview = preview::preview(
            &state,
            resolved,
            analysed.as_ref(),
            judged,
            &env,
            escalation.as_ref(),
        ) => preview,
        () = cancel.cancelled() => {
            trail.answered("canceled", None);
            return Err(failure(call, ErrorType::Canceled, "the call was canceled while its approval was prepared"));
        }
    };
    drop(state);
    let params = ApprovalRequestParams {
        session_id: scope.session.id().to_owned(),
        batch_id: scope.batch_id.to_string(),
        approval_id: approval_id.clone(),
        call: current_call(call, &resolved.arguments),
        safety: resolved.definition().safety,
        reason: reason.clone(),
        suggestions: vec![suggestion],
        escalation,
        always: always_offered(scope, resolved, analysed.as_ref()),
        preview,
    };
    let always_rule = params.always.clone();
    let timeout = scope.settings.limits.approval_timeout;
    let reply = tokio::select! {
        reply = tokio::time::timeout(timeout, approver.request(params)) => reply.ok(),
        () = cancel.cancelled() => {
            trail.answered("canceled", None);
            resolved_event(scope, &approval_id, call, None, ResolvedBy::Cancel);
            return Err(failure(call, ErrorType::Canceled, "the call was canceled while it waited for approval"));
        }
    };
    let answer = match reply {
        Some(ApprovalReply::Answer(answer, by)) => {
            trail.answered(answer.decision.as_str(), by);
            answer
        }
        Some(ApprovalReply::Failed(why)) => {
            trail.answered("failed", None);
            resolved_event(scope, &approval_id, call, None, ResolvedBy::Client);
            return Err(failure(
                call,
                ErrorType::PermissionCanceled,
                format!("the approval failed: {why}"),
            ));
        }
        Some(ApprovalReply::Declined(why)) => {
            trail.answered("declined", None);
            resolved_event(scope, &approval_id, call, None, ResolvedBy::Client);
            return Err(failure(
                call,
                ErrorType::PermissionDenied,
                format!("{reason}, and every approver declined to decide (the last: {why})"),
            ));
        }
        Some(ApprovalReply::Disconnected) => {
            trail.answered("disconnected", None);
            resolved_event(scope, &approval_id, call, None, ResolvedBy::Disconnect);
            return Err(failure(
                call,
                ErrorType::PermissionCanceled,
                "the approver disconnected before answering",
            ));
        }
        None => {
            trail.answered("timeout", None);
            resolved_event(scope, &approval_id, call, None, ResolvedBy::Timeout);
            let waited = format!("no approval within {} ms", timeout.as_millis());
            return Err(failure(call, ErrorType::PermissionCanceled, waited));
        }
    };
    if let Err(why) = always_answer_offered(answer.decision, always_rule.as_ref()) {
        resolved_event(scope, &approval_id, call, None, ResolvedBy::Client);
        return Err(failure(call, ErrorType::PermissionCanceled, why));
    }
    resolved_event(
        scope,
        &approval_id,
        call,
        Some(answer.decision),
        ResolvedBy::Client,
    );
    match answer.decision {
        ApprovalDecision::AllowOnce
        | ApprovalDecision::AllowSession
        | ApprovalDecision::AllowAlways => {
            let replaced = answer.arguments.is_some();
            if let Some(arguments) = answer.arguments {
                resolved.replace_arguments(arguments)?;
                trail.replaced = Some(resolved.arguments.clone());
                arguments_replaced(scope, call, &resolved.arguments, ReplacedBy::Approver);
                *analysed = analyse_command(scope, resolved).await;
            }
            // The deny rules are judged again on the session as it is now, whatever the answer
            // carried: an approval never outlives a deny rule added while it was pending. The
            // tool acts on the paths the approver saw judged, unless it replaced the arguments:
            // a path resolved again now could lead elsewhere (a symlink swapped in meanwhile).
            let state = scope.session.state();
            let (denied, paths) = deny_reason(&state, resolved, analysed.as_ref());
            if let Some(reason) = denied {
                let reason = if replaced {
                    format!("the approved arguments are {reason}")
                } else {
                    format!("the call was approved, but is now {reason}")
                };
                return Err(failure(call, ErrorType::PermissionDenied, reason));
            }
            if answer.decision == ApprovalDecision::AllowSession {
                let grant = grant_for(&state, resolved, analysed.as_ref());
                if scope.session.add_grant(grant.clone()) {
                    let approver = trail
                        .decision
                        .as_ref()
                        .and_then(|decision| decision.approver.clone());
                    scope.executor.audit.session(&SessionChange::new(
                        "grant",
                        scope.session.id(),
                        serde_json::json!({"call_id": call.id, "grant": grant, "approver": approver}),
                    ));
                } else {
                    tracing::warn!(
                        session = scope.session.id(),
                        call = %call.id,
                        "the session's grants are full: the call runs once and no grant is recorded"
                    );
                }
            }
            if answer.decision == ApprovalDecision::AllowAlways
                && let Some(always) = &always_rule
            {
                keep_for_good(scope, call, always, RuleList::Allow).await;
            }
            Ok(replaced.then_some(paths))
        }
        ApprovalDecision::Deny => {
            let message = answer
                .message
                .unwrap_or_else(|| "the user denied this call".to_owned());
            Err(failure(call, ErrorType::PermissionDenied, message))
        }
        ApprovalDecision::DenyAlways => {
            let kept = match &always_rule {
                Some(always) => keep_for_good(scope, call, always, RuleList::Deny).await,
                None => None,
            };
            let message = answer.message.unwrap_or_else(|| match kept {
                Some(rule) => format!(
                    "the user denied this call, and every call {rule} covers in this project \
                     from now on"
                ),
                None => "the user denied this call".to_owned(),
            });
            Err(failure(call, ErrorType::PermissionDenied, message))
        }
        ApprovalDecision::Abort => {
            scope.abort.cancel();
            let message = answer
                .message
                .unwrap_or_else(|| "the user aborted the batch".to_owned());
            Err(failure(call, ErrorType::PermissionCanceled, message))
        }
    }
}

/// What approving the call would loosen of its sandbox, with the model's justification: the
/// escalation as judged, for the approval request.
fn escalation_asked(env: &Env, resolved: &ResolvedCall) -> Option<Escalation> {
    let tool = &resolved.definition().name;
    let loosening = call_escalation(tool, &resolved.arguments, env)?;
    Some(Escalation {
        network: loosening.network,
        writable: loosening
            .writable
            .iter()
            .map(|dir| dir.display().to_string())
            .collect(),
        unsandboxed: loosening.unsandboxed,
        justification: resolved
            .arguments
            .get("justification")
            .and_then(Value::as_str)
            .map(str::to_owned),
    })
}

/// The rule "always" would persist, when the daemon can persist one and the call has one.
fn always_offered(
    scope: &CallScope,
    resolved: &ResolvedCall,
    analysed: Option<&AnalysedLine>,
) -> Option<AlwaysRule> {
    scope.executor.rule_book()?;
    let state = scope.session.state();
    let project = state.env.roots.first()?;
    let rule = with_facts(
        &state.env,
        resolved,
        analysed,
        HookVerdict::None,
        permission::always_rule,
    )?;
    Some(AlwaysRule {
        rule,
        project: project.display().to_string(),
    })
}

/// An "always" answer to a request that did not offer it is refused, never read as once.
fn always_answer_offered(
    decision: ApprovalDecision,
    offered: Option<&AlwaysRule>,
) -> Result<(), String> {
    match decision {
        ApprovalDecision::AllowAlways | ApprovalDecision::DenyAlways if offered.is_none() => {
            Err(format!(
                "the approver answered {}, which this request did not offer (no rule covers the \
                 call as its text reads, or the daemon has no config file to write)",
                decision.as_str()
            ))
        }
        _ => Ok(()),
    }
}

/// Writes `always`'s rule into the user's config for its project (and reloads it); the rule,
/// or `None` when it could not be written (the call is decided as answered all the same, and
/// the daemon logs why).
async fn keep_for_good(
    scope: &CallScope,
    call: &ToolCall,
    always: &AlwaysRule,
    list: RuleList,
) -> Option<String> {
    let book = scope.executor.rule_book()?;
    let project = std::path::Path::new(&always.project);
    match book.persist(project, list, &always.rule).await {
        Ok(file) => {
            scope.executor.audit.session(&SessionChange::new(
                "rule_kept",
                scope.session.id(),
                serde_json::json!({"call_id": call.id, "list": list.key(), "rule": always.rule,
                                   "project": always.project, "file": file}),
            ));
            Some(always.rule.clone())
        }
        Err(why) => {
            tracing::warn!(
                session = scope.session.id(),
                call = %call.id,
                %why,
                "an approver's rule for good was not kept"
            );
            None
        }
    }
}

fn resolved_event(
    scope: &CallScope,
    approval_id: &str,
    call: &ToolCall,
    decision: Option<ApprovalDecision>,
    by: ResolvedBy,
) {
    scope.emit(EventBody::ApprovalResolved(ApprovalResolved {
        approval_id: approval_id.to_owned(),
        call_id: call.id.clone(),
        decision,
        by,
    }));
}

/// Deny rules alone, on arguments an approver supplied; with the paths as judged, which the
/// tool then acts on.
fn deny_reason(
    state: &SessionState,
    resolved: &ResolvedCall,
    analysed: Option<&AnalysedLine>,
) -> (Option<String>, Vec<ResolvedPath>) {
    with_facts_and_paths(&state.env, resolved, analysed, HookVerdict::None, |facts| {
        permission::denied(facts, &state.policy)
    })
}

/// What an `allow_session` answer records: a pattern grant or the call's exact form.
fn grant_for(
    state: &SessionState,
    resolved: &ResolvedCall,
    analysed: Option<&AnalysedLine>,
) -> String {
    with_facts(
        &state.env,
        resolved,
        analysed,
        HookVerdict::None,
        permission::session_grant,
    )
}

/// Step 5: on the final arguments and the session's current mode, the tool is still registered,
/// still visible, and its safety still allowed.
fn step_recheck(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &ResolvedCall,
) -> Result<(), ToolResult> {
    let name = &resolved.definition().name;
    let Some(definition) = scope.executor.registry.get(name) else {
        return Err(failure(
            call,
            ErrorType::ToolNotAllowed,
            format!("the tool {name} was unregistered before it could run"),
        ));
    };
    if !scope.session.state().visible(&definition) {
        return Err(not_visible(call));
    }
    Ok(())
}

/// Step 6: the tool runs within its deadline; its live output becomes `tool/output` events, up
/// to `max_stream_bytes`.
async fn step_execute(
    scope: &CallScope,
    resolved: ResolvedCall,
    env: Arc<Env>,
    judged: Judged,
    cancel: &CancellationToken,
) -> ToolResult {
    let call_id = resolved.call_id.clone();
    let (sender, mut receiver) = mpsc::channel::<LiveUpdate>(OUTPUT_QUEUE);
    let mut stream = OutputStreamer {
        scope,
        call_id: &call_id,
        sent: 0,
        truncated: false,
    };
    let origin = CallOrigin {
        session_id: Arc::from(scope.session.id()),
        batch_id: Arc::clone(&scope.batch_id),
    };
    let run = run_resolved(
        resolved,
        env,
        judged,
        cancel.clone(),
        Some(sender),
        Some(origin),
    );
    let result = {
        // Forwarding runs beside the call (never instead of it, so the deadline is always
        // watched); it waits for the listeners before each event, which holds the tool back
        // through the bounded channel when a client reads slowly. It waits *before* taking a
        // chunk: dropped when the call ends, it must not hold one (that chunk would be lost).
        let forward = async {
            loop {
                scope.session.events().output_ready().await;
                let Some(chunk) = receiver.recv().await else {
                    break;
                };
                stream.forward(chunk);
            }
            std::future::pending::<()>().await;
        };
        tokio::pin!(run, forward);
        tokio::select! {
            result = &mut run => result,
            () = &mut forward => unreachable!("forwarding never ends by itself"),
        }
    };
    // Output the tool sent just before it ended still comes before its result.
    while let Ok(chunk) = receiver.try_recv() {
        stream.forward(chunk);
    }
    result
}

/// Turns live output chunks into events, cutting the stream at `max_stream_bytes`.
struct OutputStreamer<'a> {
    scope: &'a CallScope,
    call_id: &'a str,
    sent: usize,
    truncated: bool,
}

impl OutputStreamer<'_> {
    fn forward(&mut self, update: LiveUpdate) {
        let chunk = match update {
            LiveUpdate::Output(chunk) => chunk,
            LiveUpdate::Progress(progress) => {
                self.scope.emit(EventBody::Progress(ToolProgress {
                    call_id: self.call_id.to_owned(),
                    progress: progress.progress,
                    total: progress.total,
                    message: progress.message,
                }));
                return;
            }
        };
        if self.truncated {
            return;
        }
        let limit = self.scope.settings.limits.max_stream_bytes;
        let room = limit.saturating_sub(self.sent);
        let mut data = chunk.text;
        if data.len() > room {
            let mut cut = room;
            while !data.is_char_boundary(cut) {
                cut -= 1;
            }
            data.truncate(cut);
            self.truncated = true;
        }
        self.sent += data.len();
        self.scope.emit(EventBody::Output(OutputEvent {
            call_id: self.call_id.to_owned(),
            stream: chunk.stream,
            data,
            truncated: self.truncated,
            elided_bytes: 0,
        }));
    }
}

/// Step 7: PostToolUse hooks see the result, whatever it is; their context is added to it.
async fn step_post_hooks(
    scope: &CallScope,
    call: &ToolCall,
    mut result: ToolResult,
    elapsed_ms: u64,
) -> ToolResult {
    let state = scope.session.state();
    let peers = scope.session.peers();
    let hooks = scope.settings.hook_set(&peers.hooks, &state.env.cwd);
    if !hooks.any_for(toold_protocol::HookEvent::PostToolUse, &call.name) {
        return result;
    }
    let params = PostToolUseParams {
        session_id: scope.session.id().to_owned(),
        batch_id: scope.batch_id.to_string(),
        call: call.clone(),
        result: result.clone(),
        elapsed_ms,
    };
    if let Some(context) = hooks.post_tool_use(&params).await {
        result
            .metadata
            .insert("additional_context".into(), Value::String(context));
    }
    result
}

/// `tool/arguments_replaced`: what the call goes on with, for everyone who saw its start.
fn arguments_replaced(
    scope: &CallScope,
    call: &ToolCall,
    arguments: &Map<String, Value>,
    by: ReplacedBy,
) {
    scope.emit(EventBody::ArgumentsReplaced(ArgumentsReplaced {
        iteration: scope.iteration,
        call: current_call(call, arguments),
        by,
        elided_bytes: 0,
    }));
}

fn current_call(call: &ToolCall, arguments: &Map<String, Value>) -> ToolCall {
    ToolCall::new(
        call.id.clone(),
        call.name.clone(),
        Value::Object(arguments.clone()),
    )
}

fn not_visible(call: &ToolCall) -> ToolResult {
    failure(
        call,
        ErrorType::ToolNotAllowed,
        format!(
            "the tool {} is not available in this session (its tool list or plan mode excludes it)",
            call.name
        ),
    )
}

/// A failed result for `call`, carrying its tool name and call id.
pub fn failure(call: &ToolCall, error_type: ErrorType, error: impl Into<String>) -> ToolResult {
    ToolResult::failure(&call.name, error_type, error).with_meta("call_id", call.id.clone())
}

pub fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
