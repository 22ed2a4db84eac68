//! The MCP session with one server, over its process's stdin and stdout (rmcp's client): the
//! handshake (rmcp's automatic lifecycle, which settles the protocol version with servers old
//! and new), the tool listing read as raw JSON so that one malformed tool never fails the rest,
//! and calls that a stop ends at once, telling the server (`notifications/cancelled`).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, Request, RequestOptionalParam, ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, MaybeSendFuture, NotificationContext, PeerRequestOptions, RunningService,
    serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Map, Value};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How many pages of `tools/list` are read at most: a server that never ends its cursor
/// chain must not hold the daemon.
const MAX_LIST_PAGES: usize = 100;

/// What the server tells the daemon unasked.
#[derive(Default)]
pub struct ServerNotices {
    /// Rung on `notifications/tools/list_changed`.
    pub tools_changed: Notify,
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

    fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toold", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A live MCP session.
pub struct McpSession {
    service: RunningService<RoleClient, Notices>,
}

/// What a call needs of a server: its live session, and the token the session's end fires
/// (its process exited), which ends the calls in flight at once.
pub struct Reachable {
    pub session: Arc<McpSession>,
    pub ended: CancellationToken,
}

/// Why a call did not give the server's result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The caller stopped it (cancel or deadline); the server was told.
    Stopped,
    /// The server answered with a JSON-RPC error: its message.
    Server(String),
    /// The session ended (the server exited, its output broke).
    Closed(String),
}

impl McpSession {
    /// Speaks MCP over the server's stdout and stdin; fails if the handshake does not complete
    /// within `timeout`.
    pub async fn start(
        stdout: ChildStdout,
        stdin: ChildStdin,
        notices: Arc<ServerNotices>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: None,
        };
        let started = tokio::time::timeout(
            timeout,
            serve_client_with_lifecycle(Notices(notices), (stdout, stdin), lifecycle),
        )
        .await
        .map_err(|_| {
            format!(
                "no answer to the handshake within {} ms",
                timeout.as_millis()
            )
        })?;
        let service = started.map_err(|err| format!("the handshake failed: {err}"))?;
        Ok(Self { service })
    }

    /// The protocol version the server agreed, when it said.
    pub fn protocol_version(&self) -> Option<String> {
        self.service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string())
    }

    /// Every tool the server lists, as raw JSON objects, every page in order.
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        let peer = self.service.peer();
        let mut tools = Vec::new();
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
            match page.get("tools") {
                Some(Value::Array(page_tools)) => tools.extend(page_tools.iter().cloned()),
                _ => return Err("tools/list gave no `tools` array".to_owned()),
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|next| !next.is_empty())
                .map(str::to_owned);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(format!(
            "tools/list gave more than {MAX_LIST_PAGES} pages; the server's cursor never ends"
        ))
    }

    /// Calls tool `name` (the server's own name for it) and returns the server's result as
    /// JSON. `stop` ends the call at once, whether or not the server stops its work.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        stop: &CancellationToken,
    ) -> Result<Value, CallError> {
        let peer = self.service.peer();
        let mut params = CallToolRequestParams::new(name.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|err| CallError::Closed(err.to_string()))?;
        let request_id = handle.id.clone();
        tokio::select! {
            answer = handle.await_response() => match answer {
                Ok(ServerResult::CallToolResult(result)) => serde_json::to_value(result)
                    .map_err(|err| CallError::Server(format!("an unreadable result: {err}"))),
                Ok(ServerResult::CustomResult(custom)) => Ok(custom.0),
                Ok(other) => serde_json::to_value(other)
                    .map_err(|err| CallError::Server(format!("an unreadable result: {err}"))),
                Err(rmcp::ServiceError::McpError(error)) => Err(CallError::Server(error.message.to_string())),
                Err(err) => Err(CallError::Closed(err.to_string())),
            },
            () = stop.cancelled() => {
                let notice = CancelledNotificationParam::new(
                    Some(request_id),
                    Some("the call was stopped".to_owned()),
                );
                // The call ends now whatever happens to the notice; a server gone needs none.
                let _ = peer.notify_cancelled(notice).await;
                Err(CallError::Stopped)
            }
        }
    }

    /// Ends the session (the process is the caller's to stop).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}
