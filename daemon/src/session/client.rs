//! A client as the sessions reach it: its connection's id, what it declared in `initialize`,
//! and its way out ([`Outbound`]: requests and notifications towards it, implemented by the
//! server over the connection's peer). The one handle below the server through which anything
//! reaches a client: a session's events (`forward_events`), its approval requests
//! (`approvals`) and hooks (`ClientHooks` here); client tools (`rpc`) use it too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toold_protocol::{
    ClientCapabilities, ErrorObject, HookEvent, JsonText, PostToolUseAnswer, PostToolUseParams,
    PreToolUseAnswer, PreToolUseParams, methods,
};

use super::log::LogReader;
use crate::hooks::{ClientHooks, HookFuture};

/// Why a request towards the client did not get a result.
#[derive(Debug, Clone, PartialEq)]
pub enum OutboundError {
    /// The client answered with an error.
    Error(ErrorObject),
    /// The connection closed before an answer came.
    Closed,
}

/// A boxed future towards the client.
pub type OutboundFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The way to the client: the daemon's side of the bidirectional peer. Dropping a request's
/// future withdraws it (`$/cancelRequest`).
pub trait Outbound: Send + Sync + 'static {
    fn request(
        &self,
        method: &'static str,
        params: Value,
    ) -> OutboundFuture<Result<Value, OutboundError>>;
    /// Waits for room in the connection's outgoing queue; fails once the connection is gone.
    fn notify(
        &self,
        method: &'static str,
        params: Value,
    ) -> OutboundFuture<Result<(), OutboundError>>;
    /// Sends a message rendered elsewhere (an event), waiting for room in the queue; fails
    /// once the connection is gone.
    fn send_rendered(&self, text: JsonText) -> OutboundFuture<Result<(), OutboundError>>;
    /// Resolves when the connection has closed.
    fn closed(&self) -> OutboundFuture<()>;
    /// Whether the connection has started closing.
    fn is_closed(&self) -> bool;
}

/// One client connection, as sessions see it.
pub struct Client {
    id: u64,
    outbound: Arc<dyn Outbound>,
    /// What it declared in `initialize`, once.
    declared: OnceLock<ClientCapabilities>,
}

impl Client {
    pub fn new(id: u64, outbound: Arc<dyn Outbound>) -> Self {
        Self {
            id,
            outbound,
            declared: OnceLock::new(),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn outbound(&self) -> &Arc<dyn Outbound> {
        &self.outbound
    }

    /// Records what the client declared in `initialize`; false if it already declared.
    pub fn declare(&self, capabilities: ClientCapabilities) -> bool {
        self.declared.set(capabilities).is_ok()
    }

    pub fn approves(&self) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.approvals)
    }

    pub fn hooks(&self, event: HookEvent) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.hooks.contains(&event))
    }

    pub fn has_client_tools(&self) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.client_tools)
    }
}

/// A client that declared hooks is one of its sessions' [`ClientHooks`].
impl ClientHooks for Client {
    fn handles(&self, event: HookEvent) -> bool {
        self.hooks(event)
    }

    fn pre_tool_use(&self, params: PreToolUseParams) -> HookFuture<PreToolUseAnswer> {
        ask(self, methods::HOOK_PRE_TOOL_USE, &params)
    }

    fn post_tool_use(&self, params: PostToolUseParams) -> HookFuture<PostToolUseAnswer> {
        ask(self, methods::HOOK_POST_TOOL_USE, &params)
    }
}

/// Sends a request and reads its answer as `T`; every failure is a reason for the hook layer.
fn ask<P: serde::Serialize, T: DeserializeOwned + 'static>(
    client: &Client,
    method: &'static str,
    params: &P,
) -> HookFuture<T> {
    let request = match serde_json::to_value(params) {
        Ok(value) => client.outbound().request(method, value),
        Err(err) => {
            return Box::pin(async move { Err(format!("cannot encode the request: {err}")) });
        }
    };
    Box::pin(async move {
        match request.await {
            Ok(value) => {
                serde_json::from_value(value).map_err(|err| format!("its answer is invalid: {err}"))
            }
            Err(OutboundError::Error(error)) => {
                Err(format!("it answered with an error: {}", error.message))
            }
            Err(OutboundError::Closed) => {
                Err("its connection closed before it answered".to_owned())
            }
        }
    })
}

/// Sends `client` a session's events as `reader` yields them, each rendered once, until
/// `stop`, the log's end or the connection's; `sent` follows the `seq` of the last one sent
/// (responses that must follow their events wait on it).
pub(super) async fn forward_events(
    client: Arc<Client>,
    session_id: String,
    mut reader: LogReader,
    sent: watch::Sender<u64>,
    stop: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            next = reader.next() => next,
            () = stop.cancelled() => return,
        };
        let event = match next {
            Some(Ok(event)) => event,
            Some(Err(lagged)) => {
                tracing::warn!(session = %session_id, connection = client.id(), ?lagged, "a connection fell behind the event log; it continues from the oldest retained event");
                continue;
            }
            None => return,
        };
        let seq = event.seq();
        let text = match event.render() {
            Ok(text) => text,
            Err(err) => {
                tracing::error!(session = %session_id, %err, "cannot encode an event");
                // Past it all the same: a response waiting for this seq must not hang.
                let _ = sent.send(seq);
                continue;
            }
        };
        let delivered = tokio::select! {
            delivered = client.outbound().send_rendered(text) => delivered,
            () = stop.cancelled() => return,
        };
        if delivered.is_err() {
            return;
        }
        // Nobody listening is fine: the attachment may be gone already.
        let _ = sent.send(seq);
    }
}
