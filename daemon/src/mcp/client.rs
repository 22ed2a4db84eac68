//! The MCP session with one server, over its process's stdin and stdout (the daemon's own
//! framing, `stdio`) or over streamable HTTP (rmcp's transport), with rmcp's client, watched so
//! that its end is known: the handshake (rmcp's automatic lifecycle, which settles the protocol
//! version with servers old and new), the tool listing read as raw JSON so that one malformed
//! tool never fails the rest, and calls that report the server's progress and that a stop ends
//! at once, telling the server (`notifications/cancelled`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use rmcp::handler::client::progress::{ProgressDispatcher, ProgressSubscriber};
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, JsonRpcMessage, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, Request, RequestId, RequestMetaObject,
    RequestOptionalParam, ServerNotification, ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, MaybeSendFuture, NotificationContext, PeerRequestOptions, RunningService,
    serve_client_with_lifecycle,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{ClientHandler, RoleClient};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::listing;
use super::stdio::{CallNews, StdioCalls, StdioTransport};
use crate::tools::{Progress, ToolContext};

/// The longest progress message kept (bytes): a message is one line for people, and every
/// event is kept in the session's log.
const MAX_PROGRESS_MESSAGE: usize = 1024;

/// How long a call's answer waits at most for the progress the server sent before it to be
/// handed over (see [`McpSession::call`]): rmcp may route a notification elsewhere (one that
/// names a subscription), and an answer must not wait long on that.
const LATE_PROGRESS_WAIT: Duration = Duration::from_millis(20);

/// How many pages of `tools/list` are read at most: a server that never ends its cursor
/// chain must not hold the daemon.
const MAX_LIST_PAGES: usize = 100;

/// What the server tells the daemon unasked.
#[derive(Default)]
pub(crate) struct ServerNotices {
    /// Rung on `notifications/tools/list_changed`.
    pub tools_changed: Notify,
    /// `notifications/progress`, to the call whose token it names.
    progress: ProgressDispatcher,
    /// Progress notifications read from the server, in the order it sent them...
    progress_read: AtomicU64,
    /// ...and those handed to their call (rmcp hands each over in a task of its own, so a
    /// call's answer, read after its progress, may be in before the progress is handed over).
    progress_handed: AtomicU64,
    /// Rung whenever `progress_handed` grows.
    handed: Notify,
}

/// The handler rmcp calls, sharing the notices with the server's supervisor.
struct Notices(Arc<ServerNotices>);

impl ClientHandler for Notices {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.0.tools_changed.notify_one();
        std::future::ready(())
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.progress.handle_notification(params).await;
        self.0.progress_handed.fetch_add(1, Ordering::AcqRel);
        self.0.handed.notify_waiters();
    }

    fn get_info(&self) -> ClientConfig {
        client_config()
    }
}

/// Who the daemon says it is to servers, and what it can do for them.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("toold", env!("CARGO_PKG_VERSION")),
    )
}

/// What every request's `_meta` carries under the agreed protocol version: nothing under one
/// with a handshake; the client's context (its protocol version, identity and capabilities)
/// under one without, as rmcp adds to the requests it sends.
fn request_envelope(agreed: Option<&ProtocolVersion>) -> Map<String, Value> {
    let Some(version) = agreed.filter(|version| !version.has_initialize()) else {
        return Map::new();
    };
    let client = client_config();
    let meta = RequestMetaObject::with_client_context(
        version.clone(),
        client.client_info,
        client.capabilities,
    );
    match serde_json::to_value(meta) {
        Ok(Value::Object(envelope)) => envelope,
        _ => Map::new(),
    }
}

/// Reports the server's progress `update` as the call's, its message cut and any configured
/// secret in it redacted.
async fn report_progress(ctx: &ToolContext, update: ProgressNotificationParam) {
    ctx.report_progress(Progress {
        progress: update.progress,
        total: update.total,
        message: update
            .message
            .map(|message| cut_message(crate::secrets::redact(&message))),
    })
    .await;
}

/// `message` cut to [`MAX_PROGRESS_MESSAGE`] bytes, on a character boundary.
fn cut_message(mut message: String) -> String {
    if message.len() > MAX_PROGRESS_MESSAGE {
        let mut cut = MAX_PROGRESS_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

/// A live MCP session.
pub(crate) struct McpSession {
    service: RunningService<RoleClient, Notices>,
    notices: Arc<ServerNotices>,
    /// Fired when the transport closed (the server's output ended, the HTTP stream broke).
    closed: CancellationToken,
    /// A stdio server's calls, which go around rmcp's service loop (see [`stdio`]).
    stdio: Option<Arc<StdioCalls>>,
    /// What each of those calls' `_meta` carries besides its progress token.
    envelope: Map<String, Value>,
}

/// A transport that says when it closed (when its receiving side gives nothing more), and
/// counts the progress notifications it reads.
struct Watched<T> {
    inner: T,
    closed: CancellationToken,
    notices: Arc<ServerNotices>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let closed = self.closed.clone();
        let notices = Arc::clone(&self.notices);
        let next = self.inner.receive();
        async move {
            let item = next.await;
            match &item {
                None => closed.cancel(),
                Some(JsonRpcMessage::Notification(notice))
                    if matches!(
                        notice.notification,
                        ServerNotification::ProgressNotification(_)
                    ) =>
                {
                    notices.progress_read.fetch_add(1, Ordering::AcqRel);
                }
                Some(_) => {}
            }
            item
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// How the daemon reaches a server, made ready to speak MCP over.
pub(crate) enum Connect {
    Stdio(ChildStdout, ChildStdin),
    Http {
        url: String,
        /// The bearer token, without `Bearer `.
        bearer: Option<String>,
        headers: std::collections::HashMap<http::HeaderName, http::HeaderValue>,
    },
}

/// What a call needs of a server: its live session, and the token the session's end fires
/// (its process exited), which ends the calls in flight at once.
pub(crate) struct Reachable {
    pub session: Arc<McpSession>,
    pub ended: CancellationToken,
}

/// Why a call did not give the server's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallError {
    /// The caller stopped it (cancel or deadline); the server was told.
    Stopped,
    /// The server answered with a JSON-RPC error: its message.
    Server(String),
    /// The session ended (the server exited, its output broke).
    Closed(String),
}

impl McpSession {
    /// Speaks MCP over `connect`; fails if the handshake does not complete within `timeout`.
    pub(crate) async fn start(
        connect: Connect,
        notices: Arc<ServerNotices>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let closed = CancellationToken::new();
        let mut stdio = None;
        let service = match connect {
            Connect::Stdio(stdout, stdin) => {
                let (transport, calls) = StdioTransport::new(stdout, stdin);
                stdio = Some(calls);
                Self::handshake(transport, &closed, &notices, timeout).await?
            }
            Connect::Http {
                url,
                bearer,
                headers,
            } => {
                let mut config =
                    StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
                if let Some(bearer) = bearer {
                    config = config.auth_header(bearer);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                Self::handshake(transport, &closed, &notices, timeout).await?
            }
        };
        let agreed = service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.clone());
        let envelope = request_envelope(agreed.as_ref());
        Ok(Self {
            service,
            notices,
            closed,
            stdio,
            envelope,
        })
    }

    async fn handshake<T: Transport<RoleClient> + 'static>(
        transport: T,
        closed: &CancellationToken,
        notices: &Arc<ServerNotices>,
        timeout: Duration,
    ) -> Result<RunningService<RoleClient, Notices>, String> {
        let transport = Watched {
            inner: transport,
            closed: closed.clone(),
            notices: Arc::clone(notices),
        };
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: None,
        };
        let started = tokio::time::timeout(
            timeout,
            serve_client_with_lifecycle(Notices(Arc::clone(notices)), transport, lifecycle),
        )
        .await
        .map_err(|_| {
            format!(
                "no answer to the handshake within {} ms",
                timeout.as_millis()
            )
        })?;
        started.map_err(|err| format!("the handshake failed: {err}"))
    }

    /// A request that failed in the transport: the server is out of reach (an HTTP server
    /// gone, a stream broken), so the session counts as closed and its supervisor starts it
    /// again. The error says why without the transport's type names.
    fn broken(&self, err: &rmcp::ServiceError) -> CallError {
        let why = match err {
            rmcp::ServiceError::TransportSend(sent) => {
                let mut why = sent.error.to_string();
                let mut source = sent.error.source();
                while let Some(cause) = source {
                    why.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                why
            }
            other => other.to_string(),
        };
        self.closed_because(why)
    }

    /// The session counts as closed (its supervisor starts the server again), because `why`.
    fn closed_because(&self, why: String) -> CallError {
        self.closed.cancel();
        CallError::Closed(why)
    }

    /// Resolves once the transport has closed.
    pub(crate) async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// Whether the transport has closed (its supervisor may not have noticed yet).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The protocol version the server agreed, when it said.
    pub(crate) fn protocol_version(&self) -> Option<String> {
        self.service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// Every tool the server lists, as raw JSON objects, every page in order; and whether its
    /// later pages were left unread, once those read took twice [`listing::MAX_LISTING_BYTES`]
    /// (the registry keeps at most that much of them; what was read beyond it is quarantined
    /// by name, saying so).
    pub(crate) async fn list_tools(&self) -> Result<(Vec<Value>, bool), String> {
        let peer = self.service.peer();
        let mut tools = Vec::new();
        let mut listed_bytes = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let request = ClientRequest::ListToolsRequest(RequestOptionalParam::with_param(params));
            let answer = peer
                .send_request(request)
                .await
                .map_err(|err| format!("tools/list failed: {err}"))?;
            // A listing whose every tool rmcp can read comes typed; one with a malformed tool
            // comes as it was sent. Either way it is read here as JSON, tool by tool.
            let page = match answer {
                ServerResult::ListToolsResult(result) => serde_json::to_value(result),
                ServerResult::CustomResult(custom) => Ok(custom.0),
                other => serde_json::to_value(other),
            }
            .map_err(|err| format!("tools/list gave an unreadable answer: {err}"))?;
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|next| !next.is_empty())
                .map(str::to_owned);
            match page {
                Value::Object(mut page) => match page.remove("tools") {
                    Some(Value::Array(page_tools)) => {
                        listed_bytes += page_tools.iter().map(listing::json_bytes).sum::<usize>();
                        tools.extend(page_tools);
                    }
                    _ => return Err("tools/list gave no `tools` array".to_owned()),
                },
                _ => return Err("tools/list gave no `tools` array".to_owned()),
            }
            if cursor.is_none() {
                return Ok((tools, false));
            }
            if listed_bytes > 2 * listing::MAX_LISTING_BYTES {
                return Ok((tools, true));
            }
        }
        Err(format!(
            "tools/list gave more than {MAX_LIST_PAGES} pages; the server's cursor never ends"
        ))
    }

    /// Calls tool `name` (the server's own name for it) and returns the server's result as
    /// JSON; the server's progress for the call goes to `ctx` as it comes. `ctx.cancel` ends the
    /// call at once, whether or not the server stops its work.
    pub(crate) async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<Box<RawValue>, CallError> {
        match &self.stdio {
            Some(calls) => self.call_over_stdio(calls, name, &arguments, ctx).await,
            // rmcp's request futures are large (kilobytes): boxed, so that a stdio call's
            // future, allocated and moved for every call, stays small.
            None => Box::pin(self.call_through_rmcp(name, arguments, ctx)).await,
        }
    }

    /// A call to a stdio server, written and answered through the daemon's own framing
    /// (`stdio.rs`). The rare steps (a progress report, telling the server of a stop) are
    /// boxed for the same reason as rmcp's path.
    async fn call_over_stdio(
        &self,
        calls: &Arc<StdioCalls>,
        name: &str,
        arguments: &Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<Box<RawValue>, CallError> {
        let mut sent = calls
            .send(name, arguments, &self.envelope)
            .await
            .map_err(|err| self.closed_because(err.to_string()))?;
        loop {
            tokio::select! {
                biased;
                news = sent.next() => match news {
                    Some(CallNews::Progress(update)) => Box::pin(report_progress(ctx, update)).await,
                    Some(CallNews::Answer(answer)) => return answer.map_err(CallError::Server),
                    None => return Err(self.closed_because("its output ended".to_owned())),
                },
                () = ctx.cancel.cancelled() => return Err(Box::pin(self.stopped(sent.request_id())).await),
            }
        }
    }

    /// A call through rmcp's client (a streamable HTTP server): its own ids and progress
    /// tokens, its progress followed by subscription.
    async fn call_through_rmcp(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ctx: &ToolContext,
    ) -> Result<Box<RawValue>, CallError> {
        let peer = self.service.peer();
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|err| self.broken(&err))?;
        let request_id = handle.id.clone();
        // rmcp gives every request a progress token of its own, known once the request
        // is queued; it is subscribed to at once, with no await in between, while the
        // server (a network away) has yet to read the request.
        let progress = self
            .notices
            .progress
            .subscribe(handle.progress_token.clone())
            .await;
        let answer = async {
            let rendered = match handle.await_response().await {
                Ok(ServerResult::CallToolResult(result)) => to_raw_value(&result),
                Ok(ServerResult::CustomResult(custom)) => to_raw_value(&custom.0),
                Ok(other) => to_raw_value(&other),
                Err(rmcp::ServiceError::McpError(error)) => {
                    return Err(CallError::Server(error.message.to_string()));
                }
                Err(err) => return Err(self.broken(&err)),
            };
            rendered.map_err(|err| CallError::Server(format!("an unreadable result: {err}")))
        };
        self.follow(answer, progress, request_id, ctx).await
    }

    /// Waits for a call's `answer`, reporting its `progress` to `ctx` meanwhile (and the
    /// progress the server sent before its answer, before the answer); when `ctx.cancel`
    /// fires first, tells the server and ends the call.
    async fn follow(
        &self,
        answer: impl Future<Output = Result<Box<RawValue>, CallError>>,
        mut progress: ProgressSubscriber,
        request_id: RequestId,
        ctx: &ToolContext,
    ) -> Result<Box<RawValue>, CallError> {
        tokio::pin!(answer);
        loop {
            tokio::select! {
                // Progress first: the server sent it before its answer.
                biased;
                Some(update) = progress.next() => report_progress(ctx, update).await,
                answer = &mut answer => {
                    let late = self.late_progress();
                    tokio::pin!(late);
                    loop {
                        tokio::select! {
                            biased;
                            Some(update) = progress.next() => report_progress(ctx, update).await,
                            () = &mut late => break,
                        }
                    }
                    while let Some(Some(update)) = progress.next().now_or_never() {
                        report_progress(ctx, update).await;
                    }
                    return answer;
                }
                () = ctx.cancel.cancelled() => return Err(self.stopped(request_id).await),
            }
        }
    }

    /// Tells the server that call `request_id` was stopped; the call ends now whatever happens
    /// to the notice (a server gone needs none).
    async fn stopped(&self, request_id: RequestId) -> CallError {
        let notice = CancelledNotificationParam::new(
            Some(request_id),
            Some("the call was stopped".to_owned()),
        );
        let _ = self.service.peer().notify_cancelled(notice).await;
        CallError::Stopped
    }

    /// Resolves once every progress notification read so far has been handed to its call, or
    /// after [`LATE_PROGRESS_WAIT`]. At once when none is on its way, as for most calls.
    async fn late_progress(&self) {
        let notices = &self.notices;
        let read = notices.progress_read.load(Ordering::Acquire);
        let handed_all = || notices.progress_handed.load(Ordering::Acquire) >= read;
        if handed_all() {
            return;
        }
        let wait = async {
            loop {
                let rung = notices.handed.notified();
                tokio::pin!(rung);
                rung.as_mut().enable();
                if handed_all() {
                    return;
                }
                rung.await;
            }
        };
        if tokio::time::timeout(LATE_PROGRESS_WAIT, wait)
            .await
            .is_err()
        {
            // A notification rmcp routed elsewhere is never handed over: it must not hold
            // every later answer too.
            notices.progress_handed.fetch_max(read, Ordering::AcqRel);
        }
    }

    /// Ends the session (the process is the caller's to stop).
    pub(crate) async fn close(self) {
        let _ = self.service.cancel().await;
    }
}
