//! Answers to the daemon's requests (`approval/request`, `hook/pre_tool_use`,
//! `hook/post_tool_use`, `tool/invoke`) and the delivery of its notifications: the
//! [`toold_protocol::Handler`] of each of the client's connections.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toold_protocol::methods::{self, RequestMethod};
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{
    ApprovalAnswer, ApprovalRequestParams, BoxFuture, CancelRequestParams, ClientCapabilities,
    ErrorObject, Event, HookEvent, Id, InvokeParams, Notification, PeerHandle, PostToolUseAnswer,
    PostToolUseParams, PreToolUseAnswer, PreToolUseParams, Reply, Request, Revision, ToolResult,
    error_code,
};

use crate::events::ClientEvent;
use crate::tracking::Tracking;

/// The code of the error answer to a request the daemon withdrew: LSP's `RequestCancelled`.
/// The daemon ignores answers to withdrawn requests; the code only makes logs readable.
const REQUEST_CANCELLED: i32 = -32800;

/// One installed answerer: params in, the answer (or an error answer) out.
type Answerer<M> = Arc<
    dyn Fn(
            <M as RequestMethod>::Params,
        ) -> BoxFuture<'static, Result<<M as RequestMethod>::Result, ErrorObject>>
        + Send
        + Sync,
>;

/// An answerer that always answers.
fn boxed<M, F, Fut>(answer: F) -> Answerer<M>
where
    M: RequestMethod,
    F: Fn(M::Params) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = M::Result> + Send + 'static,
{
    Arc::new(move |params| {
        let answer = answer(params);
        Box::pin(async move { Ok(answer.await) })
    })
}

/// What an approval answerer installed with
/// [`ClientOptions::on_approval_or_decline`](crate::ClientOptions::on_approval_or_decline)
/// gives back.
#[derive(Debug, Clone, PartialEq)]
pub enum Approval {
    /// The decision.
    Answer(ApprovalAnswer),
    /// This client will not decide (it has nobody to ask, or the batch is not its own): the
    /// session's other approvers still may. The reason reaches the call's result if every
    /// approver declines, which denies the call.
    Decline(String),
}

impl From<ApprovalAnswer> for Approval {
    fn from(answer: ApprovalAnswer) -> Self {
        Approval::Answer(answer)
    }
}

/// The answerers a client installed; each one declares its capability in `initialize`.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    approval: Option<Answerer<methods::ApprovalRequest>>,
    pre_tool_use: Option<Answerer<methods::HookPreToolUse>>,
    post_tool_use: Option<Answerer<methods::HookPostToolUse>>,
    tool_invoke: Option<Answerer<methods::ToolInvoke>>,
}

impl fmt::Debug for Handlers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handlers")
            .field("approval", &self.approval.is_some())
            .field("pre_tool_use", &self.pre_tool_use.is_some())
            .field("post_tool_use", &self.post_tool_use.is_some())
            .field("tool_invoke", &self.tool_invoke.is_some())
            .finish()
    }
}

impl Handlers {
    pub(crate) fn set_approval<F, Fut>(&mut self, answer: F)
    where
        F: Fn(ApprovalRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Approval> + Send + 'static,
    {
        self.approval = Some(Arc::new(move |params| {
            let approval = answer(params);
            Box::pin(async move {
                match approval.await {
                    Approval::Answer(answer) => Ok(answer),
                    Approval::Decline(reason) => {
                        Err(ErrorObject::new(error_code::DECLINED, reason))
                    }
                }
            })
        }));
    }

    pub(crate) fn set_pre_tool_use<F, Fut>(&mut self, answer: F)
    where
        F: Fn(PreToolUseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PreToolUseAnswer> + Send + 'static,
    {
        self.pre_tool_use = Some(boxed::<methods::HookPreToolUse, _, _>(answer));
    }

    pub(crate) fn set_post_tool_use<F, Fut>(&mut self, answer: F)
    where
        F: Fn(PostToolUseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PostToolUseAnswer> + Send + 'static,
    {
        self.post_tool_use = Some(boxed::<methods::HookPostToolUse, _, _>(answer));
    }

    pub(crate) fn set_tool_invoke<F, Fut>(&mut self, answer: F)
    where
        F: Fn(InvokeParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        self.tool_invoke = Some(boxed::<methods::ToolInvoke, _, _>(answer));
    }

    /// What the installed answerers let the daemon send: it sends nothing else.
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        let mut hooks = Vec::new();
        if self.pre_tool_use.is_some() {
            hooks.push(HookEvent::PreToolUse);
        }
        if self.post_tool_use.is_some() {
            hooks.push(HookEvent::PostToolUse);
        }
        ClientCapabilities {
            approvals: self.approval.is_some(),
            hooks,
            client_tools: self.tool_invoke.is_some(),
        }
    }
}

/// Incoming traffic of one connection.
pub(crate) struct ConnectionHandler {
    handlers: Handlers,
    events: tokio::sync::mpsc::Sender<ClientEvent>,
    tracking: Arc<Tracking>,
    /// The daemon's requests being answered, by id, so that its `$/cancelRequest` (an
    /// approval settled by another approver, a client tool past its deadline) stops the
    /// answerer instead of leaving it running for nothing.
    answering: Arc<Mutex<HashMap<Id, CancellationToken>>>,
}

impl ConnectionHandler {
    pub(crate) fn new(
        handlers: Handlers,
        events: tokio::sync::mpsc::Sender<ClientEvent>,
        tracking: Arc<Tracking>,
    ) -> Self {
        Self {
            handlers,
            events,
            tracking,
            answering: Arc::default(),
        }
    }

    /// Runs `answerer` on the request's params, unless the daemon withdraws the request first.
    fn answer<M>(
        &self,
        answerer: &Answerer<M>,
        id: Id,
        params: Option<Value>,
    ) -> BoxFuture<'static, Reply>
    where
        M: RequestMethod + 'static,
        M::Params: DeserializeOwned,
        M::Result: Serialize + Send + 'static,
    {
        let params = match serde_json::from_value::<M::Params>(params.unwrap_or(Value::Null)) {
            Ok(params) => params,
            Err(err) => {
                let error = ErrorObject::invalid_params(format!("{}: {err}", M::METHOD));
                return Box::pin(async move { Reply::error(error) });
            }
        };
        let withdrawn = CancellationToken::new();
        self.answering
            .lock_unpoisoned()
            .insert(id.clone(), withdrawn.clone());
        let answering = Arc::clone(&self.answering);
        let answer = answerer(params);
        Box::pin(async move {
            let reply = tokio::select! {
                answer = answer => match answer.map(serde_json::to_value) {
                    Ok(Ok(value)) => Reply::result(value),
                    Ok(Err(err)) => Reply::error(ErrorObject::internal_error(format!(
                        "the client could not serialize its answer to {}: {err}",
                        M::METHOD
                    ))),
                    Err(error) => Reply::error(error),
                },
                () = withdrawn.cancelled() => Reply::error(ErrorObject::new(
                    REQUEST_CANCELLED,
                    format!("{} was withdrawn by toold", M::METHOD),
                )),
            };
            answering.lock_unpoisoned().remove(&id);
            reply
        })
    }

    fn on_cancel_request(&self, params: Option<Value>) {
        match serde_json::from_value::<CancelRequestParams>(params.unwrap_or(Value::Null)) {
            Ok(CancelRequestParams { id }) => {
                if let Some(withdrawn) = self.answering.lock_unpoisoned().get(&id) {
                    withdrawn.cancel();
                }
            }
            Err(err) => tracing::debug!(%err, "ignoring an unreadable $/cancelRequest"),
        }
    }

    /// Reads a notification as something for the event stream.
    fn client_event(notification: Notification) -> Option<ClientEvent> {
        let params = notification.params.unwrap_or(Value::Null);
        if notification.method == methods::TOOLS_LIST_CHANGED {
            return match serde_json::from_value::<Revision>(params) {
                Ok(Revision { revision }) => Some(ClientEvent::ToolsListChanged { revision }),
                Err(err) => {
                    tracing::warn!(%err, "ignoring an unreadable tools/list_changed");
                    None
                }
            };
        }
        match Event::from_notification(&notification.method, params) {
            Some(Ok(event)) => Some(ClientEvent::Session(event)),
            Some(Err(err)) => {
                tracing::warn!(method = notification.method, %err, "ignoring an unreadable event");
                None
            }
            None => {
                tracing::debug!(
                    method = notification.method,
                    "ignoring an unknown notification"
                );
                None
            }
        }
    }
}

impl toold_protocol::Handler for ConnectionHandler {
    fn request(&self, _peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
        let Request {
            id, method, params, ..
        } = request;
        let handlers = &self.handlers;
        match (method.as_str(), handlers) {
            (
                methods::APPROVAL_REQUEST,
                Handlers {
                    approval: Some(answerer),
                    ..
                },
            ) => self.answer::<methods::ApprovalRequest>(answerer, id, params),
            (
                methods::HOOK_PRE_TOOL_USE,
                Handlers {
                    pre_tool_use: Some(answerer),
                    ..
                },
            ) => self.answer::<methods::HookPreToolUse>(answerer, id, params),
            (
                methods::HOOK_POST_TOOL_USE,
                Handlers {
                    post_tool_use: Some(answerer),
                    ..
                },
            ) => self.answer::<methods::HookPostToolUse>(answerer, id, params),
            (
                methods::TOOL_INVOKE,
                Handlers {
                    tool_invoke: Some(answerer),
                    ..
                },
            ) => self.answer::<methods::ToolInvoke>(answerer, id, params),
            // Nothing installed for it: the daemon should not have sent it (it sends only
            // what `initialize` declared), and any other method is unknown here.
            _ => {
                let error = ErrorObject::method_not_found(&method);
                Box::pin(async move { Reply::error(error) })
            }
        }
    }

    fn notification(&self, peer: PeerHandle, notification: Notification) {
        // The reader calls `notification_or_wait`; a direct caller gets the same delivery,
        // waiting on a task of its own.
        if let Some(wait) = self.notification_or_wait(peer, notification) {
            tokio::spawn(wait);
        }
    }

    fn notification_or_wait(
        &self,
        _peer: PeerHandle,
        notification: Notification,
    ) -> Option<BoxFuture<'static, ()>> {
        if notification.method == methods::CANCEL_REQUEST {
            self.on_cancel_request(notification.params);
            return None;
        }
        let event = Self::client_event(notification)?;
        deliver(&self.events, &self.tracking, event)
    }
}

/// Puts an event on the stream: at once when there is room (or nobody listens), else a
/// future that waits for room, which the connection's reader awaits (the backpressure).
/// A session event counts as seen for reattaching only once it is on the stream: one lost
/// with the connection while waiting is replayed after a reconnect.
pub(crate) fn deliver(
    events: &tokio::sync::mpsc::Sender<ClientEvent>,
    tracking: &Arc<Tracking>,
    event: ClientEvent,
) -> Option<BoxFuture<'static, ()>> {
    use tokio::sync::mpsc::error::TrySendError;
    let seen = match &event {
        ClientEvent::Session(event) => Some((event.session_id().to_owned(), event.seq())),
        ClientEvent::ToolsListChanged { .. } | ClientEvent::Disconnected { .. } => None,
    };
    match events.try_send(event) {
        Ok(()) | Err(TrySendError::Closed(_)) => {
            if let Some((session_id, seq)) = seen {
                tracking.saw(&session_id, seq);
            }
            None
        }
        Err(TrySendError::Full(event)) => {
            let events = events.clone();
            let tracking = Arc::clone(tracking);
            Some(Box::pin(async move {
                // A closed stream means nobody listens any more: the event is not needed.
                let _ = events.send(event).await;
                if let Some((session_id, seq)) = seen {
                    tracking.saw(&session_id, seq);
                }
            }))
        }
    }
}
