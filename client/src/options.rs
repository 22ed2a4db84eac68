//! `ClientOptions`: where to connect, how to frame, who we are, and the answerers for the
//! daemon's requests (whose presence sets the capabilities declared in `initialize`).

use std::future::Future;
use std::path::PathBuf;

use toold_protocol::{
    ApprovalAnswer, ApprovalRequestParams, ClientCapabilities, Framing, InvokeParams, PeerInfo,
    PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer, PreToolUseParams, SocketEnv,
    ToolResult, resolve_socket_path,
};

use crate::handlers::{Approval, Handlers};

/// How to connect. Built with [`ClientOptions::new`] and the `with_*`/`on_*` methods.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    socket: Option<PathBuf>,
    framing: Framing,
    client_info: PeerInfo,
    event_capacity: usize,
    handlers: Handlers,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self::new("toold-client")
    }
}

impl ClientOptions {
    /// Events the stream holds before the connection stops reading (see [`crate::Events`]).
    pub const DEFAULT_EVENT_CAPACITY: usize = 1024;

    /// Options for a client called `name` (sent as `client_info`), NDJSON framing, the
    /// socket resolved as the daemon resolves it, no answerers.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            socket: None,
            framing: Framing::Ndjson,
            client_info: PeerInfo {
                name: name.into(),
                version: None,
            },
            event_capacity: Self::DEFAULT_EVENT_CAPACITY,
            handlers: Handlers::default(),
        }
    }

    /// Connect to this socket instead of resolving one.
    pub fn with_socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.socket = Some(path.into());
        self
    }

    pub fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// The client's version, sent in `client_info`.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.client_info.version = Some(version.into());
        self
    }

    /// How many events the stream holds before the connection stops reading (at least 1).
    pub fn with_event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity.max(1);
        self
    }

    /// Answers `approval/request`; declares the `approvals` capability.
    pub fn on_approval<F, Fut>(self, answer: F) -> Self
    where
        F: Fn(ApprovalRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ApprovalAnswer> + Send + 'static,
    {
        self.on_approval_or_decline(move |request| {
            let answer = answer(request);
            async move { Approval::Answer(answer.await) }
        })
    }

    /// Answers `approval/request`, or declines one ([`Approval::Decline`]) to leave it to the
    /// session's other approvers: an editor attached to the same session, say, when this
    /// client has no person to ask. Declares the `approvals` capability.
    pub fn on_approval_or_decline<F, Fut>(mut self, answer: F) -> Self
    where
        F: Fn(ApprovalRequestParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Approval> + Send + 'static,
    {
        self.handlers.set_approval(answer);
        self
    }

    /// Answers `hook/pre_tool_use`; declares the `pre_tool_use` hook.
    pub fn on_pre_tool_use<F, Fut>(mut self, answer: F) -> Self
    where
        F: Fn(PreToolUseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PreToolUseAnswer> + Send + 'static,
    {
        self.handlers.set_pre_tool_use(answer);
        self
    }

    /// Answers `hook/post_tool_use`; declares the `post_tool_use` hook.
    pub fn on_post_tool_use<F, Fut>(mut self, answer: F) -> Self
    where
        F: Fn(PostToolUseParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = PostToolUseAnswer> + Send + 'static,
    {
        self.handlers.set_post_tool_use(answer);
        self
    }

    /// Runs this client's tools (`tool/invoke`); declares `client_tools`, which
    /// `tools/register` needs. A failure is a result ([`ToolResult::failure`]), not a panic.
    pub fn on_tool_invoke<F, Fut>(mut self, answer: F) -> Self
    where
        F: Fn(InvokeParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult> + Send + 'static,
    {
        self.handlers.set_tool_invoke(answer);
        self
    }

    /// The socket to connect to: the one given, else `TOOLD_SOCKET`,
    /// `$XDG_RUNTIME_DIR/toold/toold.sock`, `/tmp/toold-$UID/toold.sock`, exactly as the
    /// daemon resolves it (without a config file).
    pub fn socket_path(&self) -> PathBuf {
        resolve_socket_path(self.socket.as_deref(), None, &SocketEnv::from_process())
    }

    pub fn framing(&self) -> Framing {
        self.framing
    }

    pub fn client_info(&self) -> &PeerInfo {
        &self.client_info
    }

    pub fn event_capacity(&self) -> usize {
        self.event_capacity
    }

    /// The capabilities `initialize` declares: one per installed answerer.
    pub fn capabilities(&self) -> ClientCapabilities {
        self.handlers.capabilities()
    }

    pub(crate) fn handlers(&self) -> &Handlers {
        &self.handlers
    }
}
