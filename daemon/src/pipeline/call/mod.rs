//! The per-call pipeline, docs/protocol.md section 5 steps 1–8, one function per step:
//! `call_start` → resolve → pre hooks → permission (and approval) → recheck → execute →
//! post hooks → `tool/result`, `tool/call_done`. The first step that fails ends the call with
//! its result; every call ends with exactly one.
//!
//! The approval half of step 4 is `approval_step`'s; the record of how the call was decided,
//! and its audit records, are its `trail`'s.

mod approval_step;
mod trail;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toold_protocol::{
    ArgumentsReplaced, CallEnded, CallOutcome, CallStart, ErrorType, PostToolUseParams,
    PreToolUseDecision, PreToolUseParams, ReplacedBy, Safety, ToolCall, ToolOutput as OutputEvent,
    ToolProgress, ToolResult,
};

use self::approval_step::{Asking, step_approval};
pub(crate) use self::trail::Trail;
use self::trail::{decision_record, record, record_decided};
use super::session::{SessionState, SessionView};
use crate::env::Env;
use crate::events::EventBody;
use crate::paths::ResolvedPath;
use crate::permission::facts::{AnalysedLine, call_escalation, command_line};
use crate::permission::{Decision, HookVerdict, Step};
use crate::pipeline::{BatchSettings, Pipeline};
use crate::tools::registry::{RunOptions, run_resolved};
use crate::tools::{CallOrigin, Judged, LiveUpdate, ResolvedCall};

/// How many live output chunks may wait for the event sink before the tool waits.
const OUTPUT_QUEUE: usize = 64;

/// Everything one call of a batch runs in. Cheap to clone: one per call task.
#[derive(Clone)]
pub(crate) struct CallScope {
    pub pipeline: Arc<Pipeline>,
    /// The config's hooks and limits, as they were when the batch started.
    pub settings: Arc<BatchSettings>,
    pub session: Arc<SessionView>,
    pub batch_id: Arc<str>,
    pub iteration: u64,
    /// Cancels the whole batch: an approver's `abort`.
    pub abort: CancellationToken,
    /// Who sent the batch, as the parser workers share themselves out: the client's process.
    pub parser_owner: Arc<str>,
}

/// Runs one call to its end: the events, the pipeline, the outcome.
pub(crate) async fn run_call(
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

/// One call on its way through the steps: what it runs in, the call as sent, and what
/// cancels it.
#[derive(Clone, Copy)]
struct InFlight<'a> {
    scope: &'a CallScope,
    call: &'a ToolCall,
    cancel: &'a CancellationToken,
}

/// Step 8: `tool/result`, then `tool/call_done`, and the call's outcome.
pub(crate) fn finish(
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

impl CallScope {
    pub(crate) fn emit(&self, body: EventBody) {
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
    let in_flight = InFlight {
        scope,
        call,
        cancel,
    };
    let permitted = step_permission(in_flight, &mut resolved, hook, trail).await;
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

/// Step 2: registered, visible to the session, arguments valid for the schema.
fn step_resolve(
    scope: &CallScope,
    call: &ToolCall,
    trail: &mut Trail,
) -> Result<ResolvedCall, ToolResult> {
    let resolved = scope.pipeline.registry.resolve(call)?;
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
        return Ok(HookVerdict::Silent);
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
        PreToolUseDecision::Continue | PreToolUseDecision::Block => HookVerdict::Silent,
    })
}

/// Step 4: the permission engine on the session's current state, and an approval when it asks.
/// Returns the Env the call runs in (updates made after this step do not reach the call) and
/// what was judged (the path arguments, what walks must not show), for the tool to act on.
async fn step_permission(
    in_flight: InFlight<'_>,
    resolved: &mut ResolvedCall,
    hook: HookVerdict,
    trail: &mut Trail,
) -> Result<(Arc<Env>, Judged), ToolResult> {
    let InFlight {
        scope,
        call,
        cancel,
    } = in_flight;
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
            let rejudged = step_approval(in_flight, resolved, &mut analysed, asking, trail).await?;
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
        &scope.pipeline,
        &scope.parser_owner,
        &resolved.arguments,
        tool,
    )
    .await
}

/// The command line of a call whose tool takes one, analysed by the parser workers (what
/// judging and `permissions/explain` read); `None` for other tools.
pub(super) async fn analyse(
    pipeline: &Pipeline,
    parser_owner: &str,
    arguments: &Map<String, Value>,
    tool: &str,
) -> Option<AnalysedLine> {
    let line = command_line(tool, arguments)?;
    let analysis = pipeline.shell.analyze(parser_owner, line).await;
    Some(AnalysedLine {
        line: line.to_owned(),
        analysis: Arc::new(analysis),
    })
}

/// Step 5: on the final arguments and the session's current mode, the tool is still registered,
/// still visible, and its safety still allowed.
fn step_recheck(
    scope: &CallScope,
    call: &ToolCall,
    resolved: &ResolvedCall,
) -> Result<(), ToolResult> {
    let name = &resolved.definition().name;
    let Some(definition) = scope.pipeline.registry.get(name) else {
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
    let options = RunOptions {
        env,
        judged,
        cancel: cancel.clone(),
        live: Some(sender),
        origin: Some(origin),
    };
    let run = run_resolved(resolved, options);
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
pub(crate) fn failure(
    call: &ToolCall,
    error_type: ErrorType,
    error: impl Into<String>,
) -> ToolResult {
    ToolResult::failure(&call.name, error_type, error).with_meta("call_id", call.id.clone())
}

pub(crate) fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
