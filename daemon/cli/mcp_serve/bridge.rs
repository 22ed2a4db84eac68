//! The bridge between an MCP host and the daemon: `tools/list` and `tools/call` as the
//! daemon's `tools/list` and one-call batches (a batch on a task of its own, so that a call
//! asking its host by round trip outlives the request), results in section B's shapes, the
//! daemon's events to the host (output and progress, `tools/list_changed`), cancel.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ErrorData, Implementation, InputRequest, InputRequests, InputRequiredResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use toold_client::protocol::{
    Event, ExecuteParams, ExecuteResult, Safety, ToolCall, ToolResult, ToolSource, ToolsListParams,
};
use toold_client::{Approval, Canceller, Client, ClientError, ClientEvent, Events};

use super::approvals::{self, Approvals, Asked};

/// How long a cancelled call's batch is given to end before the bridge stops waiting for it.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// Where one call's live output and progress go: the host's progress token for it.
pub struct ProgressSink {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    /// Notifications sent so far: MCP wants `progress` to increase with each.
    sent: u64,
}

impl ProgressSink {
    async fn send(&mut self, message: String, total: Option<f64>) {
        self.sent += 1;
        let mut params = ProgressNotificationParam::new(self.token.clone(), self.sent as f64);
        params.total = total;
        params.message = Some(message);
        // A host gone ends the whole session soon; one lost notice matters to no one.
        let _ = self.peer.notify_progress(params).await;
    }
}

/// Calls waiting for their host's answer, with where it goes, by `requestState`.
pub type WaitingCalls =
    Arc<tokio::sync::Mutex<HashMap<String, (Flight, oneshot::Sender<Approval>)>>>;

pub type ProgressSinks = Arc<tokio::sync::Mutex<HashMap<String, ProgressSink>>>;

/// Reads the daemon's events for as long as the connection lasts: a call's output and
/// progress to its host's progress token, registry changes to `tools/list_changed`.
pub fn bridge_events(mut events: Events, progress: ProgressSinks, approvals: Arc<Approvals>) {
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                ClientEvent::Session(Event::Output(output)) => {
                    if let Some(sink) = progress.lock().await.get_mut(&output.body.call_id) {
                        sink.send(output.body.data, None).await;
                    }
                }
                ClientEvent::Session(Event::Progress(report)) => {
                    if let Some(sink) = progress.lock().await.get_mut(&report.body.call_id) {
                        let message =
                            report
                                .body
                                .message
                                .unwrap_or_else(|| match report.body.total {
                                    Some(total) => format!("{} of {total}", report.body.progress),
                                    None => report.body.progress.to_string(),
                                });
                        sink.send(message, None).await;
                    }
                }
                ClientEvent::ToolsListChanged { .. } => {
                    if let Some(host) = approvals.host.get() {
                        let _ = host.notify_tool_list_changed().await;
                    }
                }
                ClientEvent::Session(_) => {}
                ClientEvent::Disconnected { reason } => {
                    eprintln!("toold mcp serve: the daemon closed the connection ({reason:?})");
                    // The host sees its server end, and starts it again as it would any.
                    std::process::exit(1);
                }
            }
        }
    });
}

/// The daemon's side of the bridge: its client, the session, this host's calls.
pub struct Bridge {
    pub client: Client,
    pub session_id: String,
    pub approvals: Arc<Approvals>,
    pub next_call: AtomicU64,
    pub progress: ProgressSinks,
    /// Calls whose approval the host was asked by round trip, by `requestState` (their call
    /// id), with where the answer goes.
    pub waiting: WaitingCalls,
}

/// A call of the host's: its batch, running on a task of its own.
pub struct Flight {
    call_id: String,
    done: oneshot::Receiver<Result<ExecuteResult, ClientError>>,
    canceller: Canceller,
    /// Its approvals, when the host is asked by the input-required round trip.
    asked: Option<mpsc::Receiver<Asked>>,
}

impl Bridge {
    /// Sends `call_id`'s output and progress to the request's progress token, if it has one.
    async fn follow_progress(&self, call_id: &str, context: &RequestContext<RoleServer>) {
        let mut sinks = self.progress.lock().await;
        match context.meta.get_progress_token() {
            Some(token) => {
                let sent = sinks.get(call_id).map_or(0, |sink| sink.sent);
                sinks.insert(
                    call_id.to_owned(),
                    ProgressSink {
                        token,
                        peer: context.peer.clone(),
                        sent,
                    },
                );
            }
            None => {
                sinks.remove(call_id);
            }
        }
    }

    /// A call retried with the host's answer to its approval (`requestState` names it).
    async fn answered(
        &self,
        state: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((flight, answer)) = self.waiting.lock().await.remove(state) else {
            return Ok(CallToolResult::error(vec![ContentBlock::text(
                "canceled: no call of this host waits for this answer (it was given already, \
                 or the approval timed out); call the tool again",
            )])
            .into());
        };
        let _ = answer.send(approvals::decided_from_input(request.input_responses.as_ref()).into());
        self.follow_progress(&flight.call_id, context).await;
        self.follow(flight, context).await
    }

    /// Waits for the call's result; or for its approval, which it puts to the host by
    /// answering with the question (the host retries with the answer); or for the host's
    /// cancel.
    async fn follow(
        &self,
        flight: Flight,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Flight {
            call_id,
            mut done,
            canceller,
            mut asked,
        } = flight;
        loop {
            let question = async {
                match asked.as_mut() {
                    Some(asked) => asked.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                outcome = &mut done => {
                    self.progress.lock().await.remove(&call_id);
                    return finished(outcome);
                }
                Some(question) = question => {
                    let form = match approvals::form(&question.request) {
                        Ok(form) => form,
                        Err(why) => {
                            let _ = question.answer.send(Approval::Decline(why));
                            continue;
                        }
                    };
                    let input_requests = InputRequests::from([(
                        approvals::ANSWER_KEY.to_owned(),
                        InputRequest::Elicitation(ElicitRequest::new(form)),
                    )]);
                    let flight = Flight { call_id: call_id.clone(), done, canceller, asked };
                    self.waiting.lock().await.insert(call_id.clone(), (flight, question.answer));
                    return Ok(InputRequiredResult::new(Some(input_requests), Some(call_id)).into());
                }
                () = context.ct.cancelled() => {
                    // MCP: a cancelled request gets no response; rmcp drops this one.
                    let _ = canceller.cancel().await;
                    let _ = tokio::time::timeout(CANCEL_GRACE, &mut done).await;
                    self.progress.lock().await.remove(&call_id);
                    return Err(ErrorData::internal_error("the host cancelled the call", None));
                }
            }
        }
    }
}

/// The batch's answer as the host's result.
fn finished(
    outcome: Result<Result<ExecuteResult, ClientError>, oneshot::error::RecvError>,
) -> Result<CallToolResponse, ErrorData> {
    let executed = match outcome {
        Ok(executed) => executed,
        Err(_) => return Err(ErrorData::internal_error("the call's batch was lost", None)),
    };
    let mut executed =
        executed.map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    let Some(outcome) = executed.results.pop() else {
        return Err(ErrorData::internal_error(
            "the daemon answered without the call's result",
            None,
        ));
    };
    Ok(CallToolResponse::from(to_mcp_result(outcome.result)))
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toold", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "toold runs these tools under the session's rules, hooks, approvals and \
                 sandbox; a denied call's error says which rule would allow it.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let listed = self
            .client
            .tools_list(ToolsListParams {
                session_id: Some(self.session_id.clone()),
                ..ToolsListParams::default()
            })
            .await
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let tools = listed
            .tools
            .into_iter()
            // Other connections' tools run in their clients, not for this host.
            .filter(|tool| tool.source != ToolSource::Client)
            .map(|tool| {
                let schema = match tool.input_schema {
                    Value::Object(schema) => schema,
                    _ => Map::from_iter([("type".to_owned(), json!("object"))]),
                };
                let mut annotations = ToolAnnotations::new();
                annotations.read_only_hint = Some(tool.safety == Safety::ReadOnly);
                annotations.destructive_hint = Some(tool.safety == Safety::SideEffect);
                annotations.open_world_hint =
                    Some(tool.name == "run_command" || matches!(tool.source, ToolSource::Mcp(_)));
                Tool::new_with_raw(tool.name, Some(Cow::Owned(tool.description)), schema)
                    .with_annotations(annotations)
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(state) = &request.request_state {
            return self.answered(state, &request, &context).await;
        }
        let number = self.next_call.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("{}{number}", self.approvals.call_prefix);
        self.follow_progress(&call_id, &context).await;
        // Protocol versions without server-to-client requests (2026-07-28 on) ask the host
        // by answering this request with the question; a host that can show it says so in
        // each request.
        let round_trip = context
            .meta
            .protocol_version()
            .is_some_and(|version| !version.has_initialize())
            && context
                .meta
                .client_capabilities()
                .is_some_and(|capabilities| capabilities.elicitation.is_some());
        let asked = round_trip.then(|| self.approvals.route(&call_id));
        let arguments = request.arguments.map_or_else(|| json!({}), Value::Object);
        let execution = self.client.tools_execute(ExecuteParams {
            session_id: self.session_id.clone(),
            iteration: 0,
            calls: vec![ToolCall::new(
                call_id.clone(),
                request.name.to_string(),
                arguments,
            )],
        });
        let canceller = execution.canceller();
        // The batch runs on a task of its own: asked by round trip, it outlives this request.
        let (finished, done) = oneshot::channel();
        let approvals = Arc::clone(&self.approvals);
        let waiting = Arc::clone(&self.waiting);
        let id = call_id.clone();
        tokio::spawn(async move {
            let _ = finished.send(execution.await);
            approvals.forget(&id);
            // A host that never answered leaves nothing behind once the approval ended.
            waiting.lock().await.remove(&id);
        });
        let flight = Flight {
            call_id,
            done,
            canceller,
            asked,
        };
        self.follow(flight, &context).await
    }
}

/// A toold result as MCP says (EXTENSIONS.md section B): the content as one text part (and
/// `metadata.structured` as `structuredContent`); a failure `isError` with the text
/// `error_type: error` and `structuredContent: {error_type, metadata}`.
fn to_mcp_result(result: ToolResult) -> CallToolResult {
    if result.ok {
        let mut metadata = result.metadata;
        let mut answer = CallToolResult::success(vec![ContentBlock::text(result.content)]);
        answer.structured_content = metadata.remove("structured");
        return answer;
    }
    let error_type = result
        .error_type
        .map(|kind| kind.to_string())
        .unwrap_or_else(|| "internal_error".to_owned());
    let error = result.error.unwrap_or(result.content);
    let mut answer =
        CallToolResult::error(vec![ContentBlock::text(format!("{error_type}: {error}"))]);
    answer.structured_content = Some(json!({
        "error_type": error_type,
        "metadata": result.metadata,
    }));
    answer
}
