//! Batches: the runner, which runs the plan (which calls run together) and writes each call's
//! outcome into its slot, so that results come back in call order whatever order the calls
//! finish in, and every call gets exactly one.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures_util::FutureExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use toold_protocol::{BatchStart, CallOutcome, ErrorType, Safety, ToolCall};

use super::Pipeline;
use super::call::{self, CallScope, failure};
use super::plan;
use super::session::{SessionState, SessionView};
use crate::events::EventBody;
use crate::permission::{Decision, HookVerdict};
use crate::tools::registry::panic_message;

/// One `tools/execute` request.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: String,
    pub iteration: u64,
    /// Each shared with its `tool/call_start` event.
    pub calls: Vec<Arc<ToolCall>>,
}

/// The cancel tokens of a running batch: one for the batch, one per call (a child of the
/// batch's), so that `tools/cancel` can stop the whole batch or single calls.
#[derive(Debug, Clone)]
pub struct BatchControl {
    pub batch: CancellationToken,
    pub calls: Vec<CancellationToken>,
    /// Which calls have ended, so that `tools/cancel` reports only calls it could still reach.
    finished: Arc<[AtomicBool]>,
}

impl BatchControl {
    pub fn new(calls: usize) -> Self {
        let batch = CancellationToken::new();
        let tokens = (0..calls).map(|_| batch.child_token()).collect();
        let finished = (0..calls).map(|_| AtomicBool::new(false)).collect();
        Self {
            batch,
            calls: tokens,
            finished,
        }
    }

    /// Whether call `index` has its result.
    pub(crate) fn is_finished(&self, index: usize) -> bool {
        self.finished
            .get(index)
            .is_some_and(|done| done.load(Ordering::Acquire))
    }

    fn mark_finished(&self, index: usize) {
        if let Some(done) = self.finished.get(index) {
            done.store(true, Ordering::Release);
        }
    }
}

impl Pipeline {
    /// Runs a batch to its end: `batch/start`, every call in plan order, `batch/done`; one
    /// outcome per call, in call order. `parser_owner` names who sent it to the parser
    /// workers, whose share it draws on ([`crate::shell::isolated`]).
    pub async fn run_batch(
        self: &Arc<Self>,
        session: &Arc<SessionView>,
        batch: Batch,
        control: &BatchControl,
        parser_owner: &str,
    ) -> Vec<CallOutcome> {
        let Batch {
            id,
            iteration,
            calls,
        } = batch;
        let state = session.state();
        // A lone call is a run of its own whatever its flag: skip judging it twice.
        let flags: Vec<bool> = if calls.len() > 1 {
            calls
                .iter()
                .map(|call| self.runs_concurrently(&state, call))
                .collect()
        } else {
            vec![false; calls.len()]
        };
        let runs = plan::plan(&flags);
        let scope = CallScope {
            pipeline: Arc::clone(self),
            settings: self.settings(),
            session: Arc::clone(session),
            batch_id: Arc::from(id.as_str()),
            iteration,
            abort: control.batch.clone(),
            parser_owner: Arc::from(parser_owner),
        };
        scope.emit(EventBody::BatchStart(BatchStart {
            iteration,
            call_ids: calls.iter().map(|call| call.id.clone()).collect(),
            plan: runs.clone(),
        }));
        // Bounds a concurrent run; serial runs take one permit at a time anyway.
        let permits = Arc::new(Semaphore::new(scope.settings.limits.max_parallel.max(1)));
        let mut outcomes: Vec<Option<CallOutcome>> = vec![None; calls.len()];
        for run in runs {
            if let [index] = run[..] {
                // A call that runs alone runs here: a task of its own would only add a hop.
                let permit = Arc::clone(&permits);
                outcomes[index] =
                    Some(guarded_call(scope.clone(), &calls[index], control, index, permit).await);
                continue;
            }
            let mut tasks = Vec::with_capacity(run.len());
            for index in run {
                let (scope, call, control) = (scope.clone(), calls[index].clone(), control.clone());
                let permit = Arc::clone(&permits);
                let started = Instant::now();
                let task = tokio::spawn(async move {
                    guarded_call(scope, &call, &control, index, permit).await
                });
                tasks.push((index, started, task));
            }
            for (index, started, task) in tasks {
                let outcome = match task.await {
                    Ok(outcome) => outcome,
                    // Only a runtime shutting down cancels the task: the call still gets its
                    // result and its events.
                    Err(err) => {
                        let call = &calls[index];
                        let result = failure(
                            call,
                            ErrorType::Canceled,
                            format!("the call was stopped: {err}"),
                        );
                        control.mark_finished(index);
                        call::finish(
                            &scope,
                            call,
                            result,
                            call::elapsed_ms(started),
                            &call::Trail::default(),
                        )
                    }
                };
                outcomes[index] = Some(outcome);
            }
        }
        scope.emit(EventBody::BatchDone);
        outcomes
            .into_iter()
            .zip(&calls)
            .map(|(outcome, call)| outcome.unwrap_or_else(|| missing(call)))
            .collect()
    }

    /// Whether a call may join a concurrent run: registered, read-only, visible, and certain
    /// to need no approval from the rules and the mode as they stand (a hook may still ask).
    /// A prediction for the plan only: each call is judged again at its permission step, since
    /// a pre hook may replace its arguments and the session may change before its turn. A
    /// batch of one call makes no plan and pays for no prediction.
    fn runs_concurrently(&self, state: &SessionState, call: &ToolCall) -> bool {
        let Ok(resolved) = self.registry.resolve(call) else {
            return false;
        };
        let definition = resolved.definition();
        if definition.safety != Safety::ReadOnly || !state.visible(definition) {
            return false;
        }
        // Read-only tools have no command line to analyse.
        state.decide(&resolved, None, HookVerdict::Silent) == Decision::Allow
    }
}

/// Runs one call, bounded by the run's permits; a panic in the pipeline itself still ends the
/// call with `internal_error` and its events, never the batch.
async fn guarded_call(
    scope: CallScope,
    call: &Arc<ToolCall>,
    control: &BatchControl,
    index: usize,
    permits: Arc<Semaphore>,
) -> CallOutcome {
    // The semaphore is never closed, so acquiring cannot fail; were it closed, running
    // unbounded is the safe side of that impossibility.
    let _permit = permits.acquire_owned().await.ok();
    let started = Instant::now();
    let cancel = control.calls[index].clone();
    let outcome = match AssertUnwindSafe(call::run_call(&scope, call, cancel))
        .catch_unwind()
        .await
    {
        Ok(outcome) => outcome,
        Err(payload) => {
            let why = panic_message(payload);
            tracing::error!(call = %call.id, panic = %why, "the call pipeline failed");
            let result = failure(
                call,
                ErrorType::InternalError,
                format!("the call failed inside toold: {why}"),
            );
            call::finish(
                &scope,
                call,
                result,
                call::elapsed_ms(started),
                &call::Trail::default(),
            )
        }
    };
    control.mark_finished(index);
    outcome
}

/// Every slot is filled by the loop above; this result exists so that no code path, however
/// unexpected, can return fewer results than calls.
fn missing(call: &ToolCall) -> CallOutcome {
    CallOutcome {
        call_id: call.id.clone(),
        result: Arc::new(failure(
            call,
            ErrorType::InternalError,
            "the call produced no result",
        )),
        elapsed_ms: 0,
    }
}
