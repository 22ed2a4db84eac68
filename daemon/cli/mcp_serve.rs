//! `toold mcp serve`: an MCP server on stdio for any MCP host, backed by the shared daemon. It
//! starts the daemon when none answers, creates a session (or joins `--session`), and turns
//! the host's `tools/list` and `tools/call` into the daemon's `tools/list` and one-call
//! batches; live output and `tool/progress` into `notifications/progress`; the host's
//! `notifications/cancelled` into a cancel (and no response); the daemon's approvals of its
//! calls into elicitations, when the host offers them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use toold_client::protocol::{
    ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, Event, ExecuteParams, Safety,
    SessionCreateParams, SessionMode, ToolCall, ToolResult, ToolSource, ToolsListParams,
};
use toold_client::{Approval, Client, ClientEvent, ClientOptions, Events};

use super::Outcome;
use super::batch_run::parse_mode;
use super::connect::{ConnectArgs, connect_or_start};

/// How long a cancelled call's batch is given to end before the bridge stops waiting for it.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub struct McpServeArgs {
    #[command(flatten)]
    pub daemon: ConnectArgs,
    /// Join this existing session (left as it was when the host goes) instead of creating one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The new session's working directory [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    pub cwd: Option<PathBuf>,
    /// The new session's permission mode: default, accept_edits, plan, dont_ask or bypass.
    #[arg(long, value_name = "MODE", value_parser = parse_mode, conflicts_with = "session")]
    pub mode: Option<SessionMode>,
    /// A rule the new session allows, such as 'run_command(cargo test:*)' (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub allow: Vec<String>,
    /// A rule the new session denies, such as 'run_command(git push:*)' (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub deny: Vec<String>,
}

/// Serves MCP on stdio until the host closes it; then closes the session it created (a joined
/// one is left as it was).
pub async fn serve(args: McpServeArgs) -> anyhow::Result<Outcome> {
    let daemon = args.daemon.clone();
    tokio::task::spawn_blocking(move || connect_or_start(&daemon).map(drop))
        .await
        .context("the daemon's start was interrupted")??;
    let host = Arc::new(OnceLock::<Peer<RoleServer>>::new());
    let call_prefix = format!("mcp{}_", std::process::id());
    let options = ClientOptions::new("toold mcp serve")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(args.daemon.address.socket_path()?)
        .on_approval_or_decline({
            let host = Arc::clone(&host);
            let call_prefix = call_prefix.clone();
            move |request| approve(Arc::clone(&host), call_prefix.clone(), request)
        });
    let (client, events) = Client::connect(options).await?;
    let (session_id, created) = open_session(&client, &args).await?;

    let bridge = Bridge {
        client: client.clone(),
        session_id: session_id.clone(),
        call_prefix,
        next_call: AtomicU64::new(1),
        progress: Arc::default(),
    };
    bridge_events(events, Arc::clone(&bridge.progress), Arc::clone(&host));
    let transport = AsyncRwTransport::new_server(tokio::io::stdin(), tokio::io::stdout());
    let served = bridge.serve(transport).await;
    let outcome = match served {
        Ok(running) => {
            let _ = host.set(running.peer().clone());
            running
                .waiting()
                .await
                .map(drop)
                .context("the MCP session with the host failed")
        }
        Err(error) => Err(anyhow::anyhow!("the MCP host's handshake failed: {error}")),
    };
    let ended = if created {
        client.session_close(&session_id).await
    } else {
        client.session_detach(&session_id).await
    };
    if let Err(error) = ended {
        // The host is gone; a session left behind expires after its idle TTL.
        eprintln!("toold mcp serve: warning: cannot close or leave session {session_id}: {error}");
    }
    client.close();
    outcome.map(|()| Outcome::Success)
}

/// The session to serve: `--session`'s (attached) or a new one; and whether it is new.
async fn open_session(client: &Client, args: &McpServeArgs) -> anyhow::Result<(String, bool)> {
    if let Some(session_id) = &args.session {
        client
            .session_attach(session_id, None)
            .await
            .with_context(|| {
                format!("cannot join session {session_id}; `toold sessions` lists them")
            })?;
        return Ok((session_id.clone(), false));
    }
    let cwd = match &args.cwd {
        Some(cwd) => std::path::absolute(cwd)
            .with_context(|| format!("cannot make {} absolute", cwd.display()))?,
        None => std::env::current_dir()
            .context("cannot read the current directory; choose the session's with --cwd")?,
    };
    let mut params = SessionCreateParams::new(cwd);
    params.mode = args.mode;
    params.title = Some(format!("toold mcp serve (pid {})", std::process::id()));
    if !args.allow.is_empty() || !args.deny.is_empty() {
        params.rules = Some(serde_json::from_value(
            json!({"allow": args.allow, "deny": args.deny}),
        )?);
    }
    let snapshot = client.session_create(params).await?;
    Ok((snapshot.session_id, true))
}

/// Where one call's live output and progress go: the host's progress token for it.
struct ProgressSink {
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

type ProgressSinks = Arc<tokio::sync::Mutex<HashMap<String, ProgressSink>>>;

/// Reads the daemon's events for as long as the connection lasts: a call's output and
/// progress to its host's progress token, registry changes to `tools/list_changed`.
fn bridge_events(
    mut events: Events,
    progress: ProgressSinks,
    host: Arc<OnceLock<Peer<RoleServer>>>,
) {
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
                    if let Some(host) = host.get() {
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

/// The daemon's side of the bridge: its client, the session, this bridge's calls.
struct Bridge {
    client: Client,
    session_id: String,
    /// This process's call ids begin so (`mcp<pid>_`): its own approvals are told apart from
    /// those of a joined session's other clients.
    call_prefix: String,
    next_call: AtomicU64,
    progress: ProgressSinks,
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
        let number = self.next_call.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("{}{number}", self.call_prefix);
        if let Some(token) = context.meta.get_progress_token() {
            self.progress.lock().await.insert(
                call_id.clone(),
                ProgressSink {
                    token,
                    peer: context.peer.clone(),
                    sent: 0,
                },
            );
        }
        let arguments = request.arguments.map_or_else(|| json!({}), Value::Object);
        let mut execution = self.client.tools_execute(ExecuteParams {
            session_id: self.session_id.clone(),
            iteration: 0,
            calls: vec![ToolCall::new(
                call_id.clone(),
                request.name.to_string(),
                arguments,
            )],
        });
        let outcome = tokio::select! {
            outcome = &mut execution => Some(outcome),
            () = context.ct.cancelled() => None,
        };
        let outcome = match outcome {
            Some(outcome) => outcome,
            None => {
                // MCP: a cancelled request gets no response; rmcp drops this one.
                let _ = execution.cancel().await;
                let _ = tokio::time::timeout(CANCEL_GRACE, execution).await;
                self.progress.lock().await.remove(&call_id);
                return Err(ErrorData::internal_error(
                    "the host cancelled the call",
                    None,
                ));
            }
        };
        self.progress.lock().await.remove(&call_id);
        let mut executed =
            outcome.map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let Some(outcome) = executed.results.pop() else {
            return Err(ErrorData::internal_error(
                "the daemon answered without the call's result",
                None,
            ));
        };
        Ok(CallToolResponse::from(to_mcp_result(outcome.result)))
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

/// The bridge's answer to an approval of the session: its own calls are put to the host's
/// person by elicitation, when the host offers it; the rest, and every call when the host
/// cannot be asked, are left to the session's other approvers, saying what would allow it.
async fn approve(
    host: Arc<OnceLock<Peer<RoleServer>>>,
    call_prefix: String,
    request: ApprovalRequestParams,
) -> Approval {
    if !request.call.id.starts_with(&call_prefix) {
        return Approval::Decline(
            "`toold mcp serve` approves only its own host's calls".to_owned(),
        );
    }
    let rule = request.suggestions.first().cloned();
    let cannot_ask = |why: &str| {
        let allow = match &rule {
            Some(rule) => format!(
                "; to allow it, add the rule '{rule}' (`toold mcp serve --allow '{rule}'`, or \
                 `allow` in the config), or approve it with `toold watch`"
            ),
            None => "; approve it with `toold watch`".to_owned(),
        };
        Approval::Decline(format!("{why}{allow}"))
    };
    let Some(peer) = host.get() else {
        return cannot_ask("the MCP host is not ready to be asked");
    };
    let offers_elicitation = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some());
    if !offers_elicitation {
        return cannot_ask("the MCP host cannot be asked (it offers no elicitation)");
    }
    let arguments = serde_json::to_string(&request.call.arguments).unwrap_or_default();
    let message = format!(
        "toold asks before running {} {arguments}: {}",
        request.call.name, request.reason
    );
    let schema: ElicitationSchema = match serde_json::from_value(decision_schema(rule.as_deref())) {
        Ok(schema) => schema,
        Err(error) => return cannot_ask(&format!("the approval form is invalid: {error}")),
    };
    let asked = peer
        .create_elicitation(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        })
        .await;
    let answered = match asked {
        Ok(answered) => answered,
        Err(error) => return cannot_ask(&format!("the MCP host could not be asked ({error})")),
    };
    let decision = match answered.action {
        ElicitationAction::Accept => answered
            .content
            .as_ref()
            .and_then(|content| content.get("decision"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        // Declined, cancelled, or an action newer than this build knows: no.
        _ => None,
    };
    let answer = match decision.as_deref() {
        Some("allow_once") => ApprovalAnswer::new(ApprovalDecision::AllowOnce),
        Some("allow_session") => ApprovalAnswer::new(ApprovalDecision::AllowSession),
        _ => ApprovalAnswer {
            message: Some("denied by the person in the MCP host".to_owned()),
            ..ApprovalAnswer::new(ApprovalDecision::Deny)
        },
    };
    answer.into()
}

/// The approval form: one choice, allow once / allow for this session / deny.
fn decision_schema(rule: Option<&str>) -> Value {
    let for_session = match rule {
        Some(rule) => format!("Allow for this session ({rule})"),
        None => "Allow for this session".to_owned(),
    };
    json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "oneOf": [
                    {"const": "allow_once", "title": "Allow once"},
                    {"const": "allow_session", "title": for_session},
                    {"const": "deny", "title": "Deny"},
                ],
            },
        },
        "required": ["decision"],
    })
}
