//! A session's approval board: every pending approval, sent to every attached connection that
//! declared `approvals`, again to an approver that attaches later, and settled by the first
//! valid answer. The pipeline sees it as one [`Approver`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{ApprovalAnswer, ApprovalRequestParams, error_code, methods};

use super::client::{Client, OutboundError};
use crate::approval::{ApprovalFuture, ApprovalReply, Approver};

/// One approval waiting for an answer.
struct Pending {
    params: ApprovalRequestParams,
    reply: oneshot::Sender<ApprovalReply>,
    /// The request in flight to each approver, by connection id.
    asking: HashMap<u64, AbortHandle>,
    /// Why the last unusable answer was unusable: the reply if no approver answers validly.
    last_error: Option<String>,
    /// Why the last approver that declined (`-32005`) did: the reply if every approver
    /// declines or goes away.
    last_decline: Option<String>,
}

#[derive(Default)]
struct BoardState {
    approvers: BTreeMap<u64, Arc<Client>>,
    pending: HashMap<String, Pending>,
}

/// The approvals of one session.
#[derive(Default)]
pub(crate) struct ApprovalBoard {
    /// One lock for approvers and pending approvals: an approver attaching must see every
    /// approval pending at that moment, and an approval must reach every approver attached.
    state: Mutex<BoardState>,
}

impl ApprovalBoard {
    pub(crate) fn has_approvers(&self) -> bool {
        !self.lock().approvers.is_empty()
    }

    /// An approver attached: it is sent every approval still pending.
    pub(crate) fn add_approver(self: &Arc<Self>, connection: Arc<Client>) {
        let mut state = self.lock();
        let id = connection.id();
        // Attached again: it already has every pending approval.
        if state.approvers.contains_key(&id) {
            return;
        }
        let pending: Vec<(String, ApprovalRequestParams)> = state
            .pending
            .iter()
            .map(|(approval_id, pending)| (approval_id.clone(), pending.params.clone()))
            .collect();
        for (approval_id, params) in pending {
            let task = self.ask(&connection, approval_id.clone(), params);
            if let Some(pending) = state.pending.get_mut(&approval_id) {
                pending.asking.insert(id, task);
            }
        }
        state.approvers.insert(id, connection);
    }

    /// An approver detached or disconnected: its requests are withdrawn, and approvals it was
    /// the last to be asked end as [`ApprovalReply::Disconnected`].
    pub(crate) fn remove_approver(&self, connection_id: u64) {
        let mut state = self.lock();
        state.approvers.remove(&connection_id);
        let affected: Vec<String> = state
            .pending
            .iter()
            .filter(|(_, pending)| pending.asking.contains_key(&connection_id))
            .map(|(approval_id, _)| approval_id.clone())
            .collect();
        for approval_id in affected {
            if let Some(pending) = state.pending.get_mut(&approval_id)
                && let Some(task) = pending.asking.remove(&connection_id)
            {
                task.abort();
            }
            settle_if_unanswerable(&mut state, &approval_id);
        }
    }

    /// Sends one approval to one approver; the answer comes back through `answered`.
    fn ask(
        self: &Arc<Self>,
        connection: &Arc<Client>,
        approval_id: String,
        params: ApprovalRequestParams,
    ) -> AbortHandle {
        let board = Arc::downgrade(self);
        let connection_id = connection.id();
        let request = match serde_json::to_value(&params) {
            Ok(value) => connection
                .outbound()
                .request(methods::APPROVAL_REQUEST, value),
            Err(err) => {
                let why = format!("cannot encode the approval request: {err}");
                Box::pin(async move {
                    Err(OutboundError::Error(
                        toold_protocol::ErrorObject::internal_error(why),
                    ))
                })
            }
        };
        tokio::spawn(async move {
            let answer = request.await;
            if let Some(board) = board.upgrade() {
                board.answered(&approval_id, connection_id, answer);
            }
        })
        .abort_handle()
    }

    fn answered(
        &self,
        approval_id: &str,
        connection_id: u64,
        answer: Result<serde_json::Value, OutboundError>,
    ) {
        let mut state = self.lock();
        let Some(pending) = state.pending.get_mut(approval_id) else {
            return;
        };
        pending.asking.remove(&connection_id);
        let unusable = match answer {
            Ok(value) => match serde_json::from_value::<ApprovalAnswer>(value) {
                Ok(answer) => {
                    let by = state
                        .approvers
                        .get(&connection_id)
                        .map(|client| client.identity());
                    settle(&mut state, approval_id, ApprovalReply::Answer(answer, by));
                    return;
                }
                Err(err) => Some(format!("the answer is not an approval decision: {err}")),
            },
            Err(OutboundError::Error(error)) if error.code == error_code::DECLINED => {
                pending.last_decline = Some(error.message);
                None
            }
            Err(OutboundError::Error(error)) => Some(format!(
                "the approver answered with an error: {}",
                error.message
            )),
            Err(OutboundError::Closed) => None,
        };
        if let Some(why) = unusable {
            pending.last_error = Some(why);
        }
        settle_if_unanswerable(&mut state, approval_id);
    }

    fn withdraw(&self, approval_id: &str) {
        if let Some(pending) = self.lock().pending.remove(approval_id) {
            for task in pending.asking.into_values() {
                task.abort();
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, BoardState> {
        // Each change completes under the lock: a poisoned lock is still consistent.
        self.state.lock_unpoisoned()
    }
}

/// Ends an approval with `reply`, withdrawing the requests still out.
fn settle(state: &mut BoardState, approval_id: &str, reply: ApprovalReply) {
    if let Some(pending) = state.pending.remove(approval_id) {
        for task in pending.asking.into_values() {
            task.abort();
        }
        // The waiter may have gone (canceled, timed out): then nobody needs the reply.
        let _ = pending.reply.send(reply);
    }
}

/// Once nobody is left to ask, the approval ends: with the last unusable answer, else the
/// last decline, else as disconnected.
fn settle_if_unanswerable(state: &mut BoardState, approval_id: &str) {
    let Some(pending) = state.pending.get(approval_id) else {
        return;
    };
    if !pending.asking.is_empty() {
        return;
    }
    let reply = match (&pending.last_error, &pending.last_decline) {
        (Some(why), _) => ApprovalReply::Failed(why.clone()),
        (None, Some(why)) => ApprovalReply::Declined(why.clone()),
        (None, None) => ApprovalReply::Disconnected,
    };
    settle(state, approval_id, reply);
}

/// The board as the pipeline's approver.
pub(crate) struct BoardApprover(pub Arc<ApprovalBoard>);

impl Approver for BoardApprover {
    fn request(&self, params: ApprovalRequestParams) -> ApprovalFuture {
        let board = Arc::clone(&self.0);
        let approval_id = params.approval_id.clone();
        let (reply, answer) = oneshot::channel();
        {
            let mut state = board.lock();
            let approvers: Vec<Arc<Client>> = state.approvers.values().cloned().collect();
            let asking = approvers
                .iter()
                .map(|connection| {
                    (
                        connection.id(),
                        board.ask(connection, approval_id.clone(), params.clone()),
                    )
                })
                .collect();
            state.pending.insert(
                approval_id.clone(),
                Pending {
                    params,
                    reply,
                    asking,
                    last_error: None,
                    last_decline: None,
                },
            );
            settle_if_unanswerable(&mut state, &approval_id);
        }
        // Dropping the future (cancel, timeout) withdraws the approval from every approver.
        let withdraw_on_drop = Withdraw { board, approval_id };
        Box::pin(async move {
            let reply = answer.await.unwrap_or(ApprovalReply::Disconnected);
            drop(withdraw_on_drop);
            reply
        })
    }
}

struct Withdraw {
    board: Arc<ApprovalBoard>,
    approval_id: String,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.board.withdraw(&self.approval_id);
    }
}
