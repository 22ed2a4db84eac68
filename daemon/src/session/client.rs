//! A client as the sessions reach it: its connection's id, what it declared in `initialize`,
//! and its way out ([`Outbound`]: requests and notifications towards it, implemented by the
//! server over the connection's peer). The one handle below the server through which anything
//! reaches a client: a session's events (`forward`), its approval requests
//! (`approvals`) and hooks (`ClientHooks` here); client tools (`rpc`) use it too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;
use serde_json::Value;
use toold_protocol::{
    ClientCapabilities, ErrorObject, HookEvent, JsonText, PostToolUseAnswer, PostToolUseParams,
    PreToolUseAnswer, PreToolUseParams, methods,
};

use crate::approval::ApproverIdentity;
use crate::hooks::{ClientHooks, HookFuture};

/// Why a request towards the client did not get a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OutboundError {
    /// The client answered with an error.
    Error(ErrorObject),
    /// The connection closed before an answer came.
    Closed,
}

/// Why [`Outbound::try_send_rendered`] did not queue a message.
#[derive(Debug)]
pub(crate) enum TrySend {
    /// The client is not reading fast enough: here is the message, for later.
    Full(JsonText),
    /// The connection is gone.
    Closed,
}

/// A boxed future towards the client.
pub(crate) type OutboundFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The way to the client: the daemon's side of the bidirectional peer. Dropping a request's
/// future withdraws it (`$/cancelRequest`).
pub(crate) trait Outbound: Send + Sync + 'static {
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
    /// Queues a message rendered elsewhere if there is room now; a full queue hands it back.
    fn try_send_rendered(&self, text: JsonText) -> Result<(), TrySend>;
    /// Whether the connection has started closing.
    fn is_closed(&self) -> bool;
}

/// The process at the other end of a connection, as the socket's peer credentials gave it
/// when it connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerProcess {
    pub pid: Option<u32>,
    pub uid: Option<u32>,
}

/// One client connection, as sessions see it.
pub(crate) struct Client {
    id: u64,
    process: PeerProcess,
    outbound: Arc<dyn Outbound>,
    /// What it declared in `initialize`, once.
    declared: OnceLock<ClientCapabilities>,
    /// The name it gave in `initialize`'s `client_info`.
    name: OnceLock<String>,
}

impl Client {
    /// A client whose process the socket's peer credentials named.
    pub(crate) fn of_process(id: u64, outbound: Arc<dyn Outbound>, process: PeerProcess) -> Self {
        Self {
            id,
            process,
            outbound,
            declared: OnceLock::new(),
            name: OnceLock::new(),
        }
    }

    /// Whose command lines share the parser workers ([`crate::shell::isolated`]): the
    /// client's process, whatever its connections and sessions, so that a client cannot take
    /// more of them by opening more; its connection when the kernel named no process.
    pub(crate) fn parser_owner(&self) -> String {
        match self.process.pid {
            Some(pid) => format!("process {pid}"),
            None => format!("connection {}", self.id),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn outbound(&self) -> &Arc<dyn Outbound> {
        &self.outbound
    }

    /// Records what the client declared in `initialize`; false if it already declared.
    pub(crate) fn declare(&self, capabilities: ClientCapabilities) -> bool {
        self.declared.set(capabilities).is_ok()
    }

    /// Records the name the client gave in `initialize`.
    pub(crate) fn name_itself(&self, name: &str) {
        let _ = self.name.set(name.to_owned());
    }

    /// Who the client is, as an approval's answer is recorded.
    pub(crate) fn identity(&self) -> ApproverIdentity {
        ApproverIdentity {
            client_name: self.name.get().cloned(),
            pid: self.process.pid,
            uid: self.process.uid,
        }
    }

    pub(crate) fn approves(&self) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.approvals)
    }

    pub(crate) fn hooks(&self, event: HookEvent) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.hooks.contains(&event))
    }

    pub(crate) fn has_client_tools(&self) -> bool {
        self.declared
            .get()
            .is_some_and(|declared| declared.client_tools)
    }
}

/// A client that declared hooks is one of its sessions' [`ClientHooks`].
impl ClientHooks for Client {
    fn handles(&self, event: HookEvent) -> bool {
        // A connection already closing is not asked (its session may not have seen it leave).
        self.hooks(event) && !self.outbound.is_closed()
    }

    fn describe(&self) -> String {
        match self.name.get() {
            Some(name) => format!("client {name} (connection {})", self.id),
            None => format!("connection {}", self.id),
        }
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
