//! The approval half of a call's permission step: the request (its preview, its escalation,
//! the rule "always" would keep), the wait for an answer (bounded, cancellable), and the answer
//! applied: arguments replaced and judged again by the deny rules, a session grant recorded, a
//! rule kept for good in the user's config.

use serde_json::Value;
use toold_protocol::{
    AlwaysRule, ApprovalDecision, ApprovalRequestParams, ApprovalResolved, ErrorType, Escalation,
    ReplacedBy, ResolvedBy, ToolCall, ToolResult,
};

use super::{
    CallScope, InFlight, Trail, analyse_command, arguments_replaced, current_call, env_for, failure,
};
use crate::approval::ApprovalReply;
use crate::audit::SessionChange;
use crate::env::Env;
use crate::events::EventBody;
use crate::paths::ResolvedPath;
use crate::permission::facts::{AnalysedLine, call_escalation, with_facts, with_facts_and_paths};
use crate::permission::{self, HookVerdict, RuleList};
use crate::pipeline::preview::{self, AsItWouldRun};
use crate::pipeline::session::SessionState;
use crate::tools::ResolvedCall;

/// What the permission step hands the approval: why it asks, the grant `allow_session`
/// records, and the paths as judged (what the tool acts on, and its preview shows).
pub(super) struct Asking<'a> {
    pub(super) reason: String,
    pub(super) suggestion: String,
    pub(super) judged: &'a [ResolvedPath],
}

/// The approval half of step 4: ask, wait (not counted in the call's timeout), apply the answer.
/// Returns the judged paths of arguments the approver replaced (`None`: it kept them).
pub(super) async fn step_approval(
    in_flight: InFlight<'_>,
    resolved: &mut ResolvedCall,
    analysed: &mut Option<AnalysedLine>,
    asking: Asking<'_>,
    trail: &mut Trail,
) -> Result<Option<Vec<ResolvedPath>>, ToolResult> {
    let InFlight {
        scope,
        call,
        cancel,
    } = in_flight;
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
        preview = preview::preview(&state, AsItWouldRun {
            resolved,
            analysed: analysed.as_ref(),
            judged,
            env: &env,
            escalation: escalation.as_ref(),
        }) => preview,
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
                    scope.pipeline.audit.session(&SessionChange::new(
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
    scope.pipeline.rule_book()?;
    let state = scope.session.state();
    let project = state.env.roots.first()?;
    let rule = with_facts(
        &state.env,
        resolved,
        analysed,
        HookVerdict::Silent,
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
    let book = scope.pipeline.rule_book()?;
    let project = std::path::Path::new(&always.project);
    match book.persist(project, list, &always.rule).await {
        Ok(file) => {
            scope.pipeline.audit.session(&SessionChange::new(
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
    with_facts_and_paths(
        &state.env,
        resolved,
        analysed,
        HookVerdict::Silent,
        |facts| permission::denied(facts, &state.policy),
    )
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
        HookVerdict::Silent,
        permission::session_grant,
    )
}
