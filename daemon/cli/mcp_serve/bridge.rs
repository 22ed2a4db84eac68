//! The bridge between an MCP host and the daemon: `tools/list` and `tools/call` as the
//! daemon's `tools/list` and one-call batches (a batch on a task of its own, so that a call
//! asking its host by round trip outlives the request), results in the shapes of docs/protocol.md section 11.10, the
//! daemon's events to the host (output and progress, `tools/list_changed`), cancel.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
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
use tokio::sync::{mpsc, oneshot, watch};
use toold_client::protocol::{
    ErrorType, Event, ExecuteParams, ExecuteResult, Safety, ToolCall, ToolDefinition, ToolResult,
    ToolSource, ToolsListParams,
};
use toold_client::{Approval, Canceller, Client, ClientError, ClientEvent, Events};

use super::super::connect::{ConnectArgs, connect_or_start};
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
    async fn send(&mut self, message: String) {
        self.sent += 1;
        let mut params = ProgressNotificationParam::new(self.token.clone(), self.sent as f64);
        params.message = Some(message);
        // A host gone ends the whole session soon; one lost notice matters to no one.
        let _ = self.peer.notify_progress(params).await;
    }
}

/// Calls waiting for their host's answer, by `requestState`: a random nonce per question,
/// used once.
pub type WaitingCalls = Arc<tokio::sync::Mutex<HashMap<String, Waiting>>>;

pub type ProgressSinks = Arc<tokio::sync::Mutex<HashMap<String, ProgressSink>>>;

/// Where [`bridge_events`] sends what the daemon tells: each call's progress sink, the host's
/// approvals, and the way back to the daemon (its client, how to reach it, whether it is
/// reached) when the connection is lost.
pub struct EventRoutes {
    pub progress: ProgressSinks,
    pub approvals: Arc<Approvals>,
    pub client: Client,
    pub daemon: ConnectArgs,
    pub connected: Arc<watch::Sender<bool>>,
}

/// Reads the daemon's events for as long as the process lives: a call's output and progress
/// to its host's progress token, registry changes to `tools/list_changed`; a daemon gone
/// (restarted) is reached again, started if need be, and the session attached again.
pub fn bridge_events(mut events: Events, routes: EventRoutes) {
    let EventRoutes {
        progress,
        approvals,
        client,
        daemon,
        connected,
    } = routes;
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                ClientEvent::Session(Event::Output(output)) => {
                    if let Some(sink) = progress.lock().await.get_mut(&output.body.call_id) {
                        sink.send(output.body.data).await;
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
                        sink.send(message).await;
                    }
                }
                ClientEvent::ToolsListChanged { .. } => {
                    if let Some(host) = approvals.host.get() {
                        let _ = host.notify_tool_list_changed().await;
                    }
                }
                ClientEvent::Session(_) => {}
                ClientEvent::Disconnected { reason } => {
                    eprintln!(
                        "toold mcp serve: the daemon closed the connection ({reason:?}); \
                         connecting again"
                    );
                    if !connected.send_replace(false) {
                        // Already being connected again.
                        continue;
                    }
                    // On a task of its own: the events it replays come through this loop.
                    let client = client.clone();
                    let daemon = daemon.clone();
                    let connected = connected.clone();
                    tokio::spawn(async move {
                        if let Err(error) = reconnect(&client, &daemon).await {
                            // The host sees its server end.
                            eprintln!("toold mcp serve: cannot reach the daemon again: {error}");
                            std::process::exit(1);
                        }
                        connected.send_replace(true);
                    });
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
    /// Calls whose approval the host was asked by round trip.
    pub waiting: WaitingCalls,
    /// The names of the tools the host may call, as listed (see [`Bridge::callable`]).
    pub callable: tokio::sync::Mutex<HashSet<String>>,
    /// Whether the daemon is reached (false while a lost connection is made again).
    pub connected: watch::Receiver<bool>,
}

/// How long a bridge tries to reach its daemon again after losing it.
const RECONNECT_WITHIN: Duration = Duration::from_secs(30);

/// Connects `client` again (the calls in flight have failed), starting the daemon when none
/// answers, until [`RECONNECT_WITHIN`] has passed.
async fn reconnect(client: &Client, daemon: &ConnectArgs) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + RECONNECT_WITHIN;
    // A daemon restarting by hand gets a moment to come back before this starts one.
    tokio::time::sleep(Duration::from_millis(250)).await;
    loop {
        let args = daemon.clone();
        let answered = tokio::task::spawn_blocking(move || connect_or_start(&args).map(drop))
            .await
            .map_err(anyhow::Error::from)
            .and_then(|answered| answered);
        let error = match answered {
            Ok(()) => match client.reconnect().await {
                Ok(_) => return Ok(()),
                Err(error) => anyhow::Error::from(error),
            },
            Err(error) => error,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(error);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A call of the host's: its batch, running on a task of its own.
pub struct Flight {
    call_id: String,
    /// The tool and arguments the host called: a retry must name the same.
    name: String,
    arguments: Value,
    done: oneshot::Receiver<Result<ExecuteResult, ClientError>>,
    canceller: Canceller,
    /// Its approvals, when the host is asked by the input-required round trip.
    asked: Option<mpsc::Receiver<Asked>>,
}

/// A call parked until its host answers the question it was asked, with where the answer goes.
pub struct Waiting {
    flight: Flight,
    answer: oneshot::Sender<Approval>,
}

/// How long a call asked by round trip stays parked after its batch ended (another approver
/// decided, or the approval timed out): the host's retry still gets the call's result.
const PARKED_AFTER_END: Duration = Duration::from_secs(600);

impl Bridge {
    /// Waits while a lost connection to the daemon is being made again: a call the host makes
    /// meanwhile goes to the daemon once it is back, not to the connection that is gone.
    async fn until_connected(&self) -> Result<(), ErrorData> {
        let mut connected = self.connected.clone();
        match tokio::time::timeout(RECONNECT_WITHIN, connected.wait_for(|up| *up)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ErrorData::internal_error(
                "the daemon is out of reach",
                None,
            )),
        }
    }

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

    /// Whether the host may call `name` here: a tool of the session's listing that is not
    /// another connection's (those run in their own clients' processes).
    async fn callable(&self, name: &str) -> Result<bool, ErrorData> {
        if self.callable.lock().await.contains(name) {
            return Ok(true);
        }
        let listed = self.listed().await?;
        Ok(listed.iter().any(|tool| tool.name == name))
    }

    /// The session's tools the host may call (refreshing [`Bridge::callable`]'s memory).
    async fn listed(&self) -> Result<Vec<ToolDefinition>, ErrorData> {
        self.until_connected().await?;
        let listed = self
            .client
            .tools_list(ToolsListParams {
                session_id: Some(self.session_id.clone()),
                ..ToolsListParams::default()
            })
            .await
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let tools: Vec<ToolDefinition> = listed
            .tools
            .into_iter()
            .filter(|tool| tool.source != ToolSource::Client)
            .collect();
        let mut callable = self.callable.lock().await;
        callable.extend(tools.iter().map(|tool| tool.name.clone()));
        Ok(tools)
    }

    /// A call retried with the host's answer to its approval (`requestState` names it).
    async fn answered(
        &self,
        state: &str,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut waiting = self.waiting.lock().await;
        let Some(parked) = waiting.remove(state) else {
            drop(waiting);
            return Ok(failure(
                &request.name,
                ErrorType::Canceled,
                "no call of this host waits for this answer (it was given already, or the \
                 call ended long ago); call the tool again",
            )
            .into());
        };
        let arguments = request
            .arguments
            .clone()
            .map_or_else(|| json!({}), Value::Object);
        if parked.flight.name != request.name || parked.flight.arguments != arguments {
            // Not the call that asked: it stays parked for its own retry.
            waiting.insert(state.to_owned(), parked);
            return Err(ErrorData::invalid_params(
                "the retry names another tool or other arguments than the call that asked",
                None,
            ));
        }
        drop(waiting);
        let Waiting { flight, answer } = parked;
        let _ = answer.send(approvals::decided_from_input(request.input_responses.as_ref()).into());
        self.follow_progress(&flight.call_id, context).await;
        self.follow(flight, context).await
    }

    /// Waits for the call's result; or for its approval, which it puts to the host by
    /// answering with the question (the host retries with the answer); or for the host's
    /// cancel, which goes first.
    async fn follow(
        &self,
        mut flight: Flight,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        loop {
            let asked = &mut flight.asked;
            let question = async {
                match asked.as_mut() {
                    Some(asked) => asked.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = context.ct.cancelled() => {
                    // MCP: a cancelled request gets no response; rmcp drops this one.
                    self.progress.lock().await.remove(&flight.call_id);
                    let _ = flight.canceller.cancel().await;
                    let _ = tokio::time::timeout(CANCEL_GRACE, &mut flight.done).await;
                    return Err(ErrorData::internal_error("the host cancelled the call", None));
                }
                outcome = &mut flight.done => {
                    self.progress.lock().await.remove(&flight.call_id);
                    return finished(outcome);
                }
                Some(question) = question => {
                    // Settled meanwhile by another approver: nothing to ask.
                    if question.answer.is_closed() {
                        continue;
                    }
                    let form = match approvals::form(&question.request, true) {
                        Ok(form) => form,
                        Err(why) => {
                            let _ = question.answer.send(Approval::Decline(why));
                            continue;
                        }
                    };
                    let state = match approvals::random_hex(16) {
                        Ok(state) => state,
                        Err(error) => {
                            let why = format!("cannot make the question's state: {error}");
                            let _ = question.answer.send(Approval::Decline(why));
                            continue;
                        }
                    };
                    let input_requests = InputRequests::from([(
                        approvals::ANSWER_KEY.to_owned(),
                        InputRequest::Elicitation(ElicitRequest::new(form)),
                    )]);
                    // The request is answered now: its progress token dies with it.
                    self.progress.lock().await.remove(&flight.call_id);
                    let parked = Waiting { flight, answer: question.answer };
                    self.waiting.lock().await.insert(state.clone(), parked);
                    return Ok(InputRequiredResult::new(Some(input_requests), Some(state)).into());
                }
            }
        }
    }
}

/// A failed result of this bridge's own making, in the shape of docs/protocol.md section 11.10.
fn failure(tool: &str, error_type: ErrorType, error: &str) -> CallToolResult {
    to_mcp_result(ToolResult {
        ok: false,
        tool: tool.to_owned(),
        content: String::new(),
        error_type: Some(error_type),
        error: Some(error.to_owned()),
        metadata: Map::new(),
    })
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
    Ok(CallToolResponse::from(to_mcp_result(Arc::unwrap_or_clone(
        outcome.result,
    ))))
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
        let tools = self
            .listed()
            .await?
            .into_iter()
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
        if !self.callable(&request.name).await? {
            return Ok(failure(
                &request.name,
                ErrorType::InvalidArguments,
                &format!("no tool `{}` is served here", request.name),
            )
            .into());
        }
        self.until_connected().await?;
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
                arguments.clone(),
            )],
        });
        let canceller = execution.canceller();
        // The batch runs on a task of its own: asked by round trip, it outlives this request.
        let (finished, done) = oneshot::channel();
        let approvals = Arc::clone(&self.approvals);
        let waiting = Arc::clone(&self.waiting);
        let progress = Arc::clone(&self.progress);
        let id = call_id.clone();
        tokio::spawn(async move {
            let _ = finished.send(execution.await);
            approvals.forget(&id);
            progress.lock().await.remove(&id);
            if round_trip {
                // A host that never retries leaves nothing behind for long.
                tokio::time::sleep(PARKED_AFTER_END).await;
                waiting
                    .lock()
                    .await
                    .retain(|_, parked| parked.flight.call_id != id);
            }
        });
        let flight = Flight {
            call_id,
            name: request.name.to_string(),
            arguments,
            done,
            canceller,
            asked,
        };
        self.follow(flight, &context).await
    }
}

/// A toold result as MCP says (docs/protocol.md section 11.10): the content as MCP content (an
/// MCP source's parts whole, images and audio included, as `metadata.mcp_content` keeps them;
/// else one text part) and `metadata.structured` as `structuredContent`. A failure is `isError`
/// with the same content first (a command's output, a sandbox's hint: what the model needs to
/// see why) and then the line `error_type: error`, and `structuredContent: {error_type,
/// metadata}`.
fn to_mcp_result(result: ToolResult) -> CallToolResult {
    let mut metadata = result.metadata;
    let passed_through = metadata.remove("mcp_content");
    let mut parts = content_parts(&result.content, passed_through);
    if result.ok {
        let mut answer = CallToolResult::success(parts);
        answer.structured_content = metadata.remove("structured");
        return answer;
    }
    let error_type = result
        .error_type
        .map(|kind| kind.to_string())
        .unwrap_or_else(|| "internal_error".to_owned());
    let error = match result.error {
        Some(error) => error,
        // The content is the message: said once, on the error line.
        None => {
            parts.clear();
            result.content
        }
    };
    // An empty text says nothing; a message that is the whole content (an MCP source's
    // `isError` text) is said once.
    parts.retain(|part| {
        part.as_text()
            .is_none_or(|text| !text.text.is_empty() && text.text != error)
    });
    parts.push(ContentBlock::text(format!("{error_type}: {error}")));
    let mut answer = CallToolResult::error(parts);
    answer.structured_content = Some(json!({
        "error_type": error_type,
        "metadata": metadata,
    }));
    answer
}

/// A result's content as MCP content parts: an MCP source's own parts when the result kept
/// them (`metadata.mcp_content`, whose parts that are not text the content only describes),
/// else the text as one part.
fn content_parts(content: &str, passed_through: Option<Value>) -> Vec<ContentBlock> {
    if let Some(parts) =
        passed_through.and_then(|parts| serde_json::from_value::<Vec<ContentBlock>>(parts).ok())
    {
        return parts;
    }
    vec![ContentBlock::text(content)]
}
