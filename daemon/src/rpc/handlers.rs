//! One function per client→server method of docs/protocol.md, on typed params. Errors are
//! JSON-RPC errors: malformed or impossible requests only; tool failures are results.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use toold_protocol::index::IndexRootStatus;
use toold_protocol::{
    CancelParams, CancelResult, Empty, ErrorObject, ExecuteParams, ExecuteResult, ExplainParams,
    Explanation, HookEvent, InitializeParams, InitializeResult, McpRestartParams, McpServerStatus,
    McpStatusResult, PROTOCOL_VERSION, PeerInfo, Revision, ServerCapabilities, SessionAttachParams,
    SessionCreateParams, SessionIdParams, SessionListResult, SessionMode, SessionSnapshot,
    SessionUpdateParams, ToolDefinition, ToolSource, ToolsListParams, ToolsListResult,
    ToolsRegisterParams, ToolsUnregisterParams, UnsupportedVersionData,
};

use super::Daemon;
use super::client_tools::ClientTool;
use super::connection::Connection;
use crate::pipeline::batch::{Batch, BatchControl};
use crate::pipeline::explain::{ExplainedIn, explain};
use crate::tools::registry::ListFilter;
use crate::tools::{RegisterError, is_valid_tool_name};

pub(super) type Reply<T> = Result<T, ErrorObject>;

pub(crate) fn initialize(
    daemon: &Daemon,
    connection: &Connection,
    params: InitializeParams,
) -> Reply<InitializeResult> {
    if params.protocol_version != PROTOCOL_VERSION {
        return Err(ErrorObject::invalid_params(format!(
            "protocol_version {} is not supported; this daemon speaks {PROTOCOL_VERSION}",
            params.protocol_version
        ))
        .with_data(json!(UnsupportedVersionData {
            supported: vec![PROTOCOL_VERSION]
        })));
    }
    if !connection.client().declare(params.capabilities) {
        return Err(ErrorObject::invalid_request(
            "initialize was already called on this connection",
        ));
    }
    if let Some(client) = &params.client_info {
        connection.client().name_itself(&client.name);
        tracing::info!(
            connection = connection.id(),
            client = %client.name,
            version = client.version.as_deref().unwrap_or(""),
            "client initialized"
        );
    }
    let mut modes = vec![
        SessionMode::Default,
        SessionMode::AcceptEdits,
        SessionMode::Plan,
        SessionMode::DontAsk,
    ];
    if daemon.settings.allow_bypass {
        modes.push(SessionMode::Bypass);
    }
    Ok(InitializeResult {
        protocol_version: PROTOCOL_VERSION,
        server_info: PeerInfo {
            name: "toold".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        },
        instance_id: daemon.instance_id.clone(),
        started_at: Some(daemon.started_at.clone()),
        capabilities: ServerCapabilities {
            modes,
            hooks: vec![HookEvent::PreToolUse, HookEvent::PostToolUse],
            client_tools: true,
            max_message_bytes: daemon.settings.max_message_bytes as u64,
        },
        sandbox: Some(crate::sandbox::kernel::probe().report()),
        audit: Some(daemon.pipeline.audit.status()),
        pid: Some(std::process::id()),
        log_file: crate::logging::log_file().map(|path| path.display().to_string()),
    })
}

pub(crate) fn session_create(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: SessionCreateParams,
) -> Reply<SessionSnapshot> {
    let managed = daemon
        .sessions
        .create(params, connection.client(), &known_tools(daemon))?;
    tracing::info!(
        session = managed.id(),
        connection = connection.id(),
        "session created"
    );
    let snapshot = managed.snapshot();
    audit_session(
        daemon,
        "session_create",
        managed.id(),
        json!({"by": connection.client().identity(), "title": snapshot.title, "cwd": snapshot.cwd,
            "roots": snapshot.roots, "mode": snapshot.mode, "rules": snapshot.rules,
            "allowed_tools": snapshot.allowed_tools, "sandbox": snapshot.sandbox}),
    );
    Ok(snapshot)
}

/// Records a session change in the audit log, written before the answer is sent.
fn audit_session(daemon: &Daemon, kind: &'static str, session_id: &str, details: Value) {
    let audit = &daemon.pipeline.audit;
    if audit.is_on() {
        audit.session(&crate::audit::SessionChange::new(kind, session_id, details));
        audit.flush();
    }
}

/// Attaches, replaying retained events after `after_seq` first; the snapshot comes after them.
pub(crate) async fn session_attach(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: SessionAttachParams,
) -> Reply<SessionSnapshot> {
    let managed = daemon.sessions.get(&params.session_id)?;
    let head = managed.log.last_seq();
    let truncated = managed.attach(connection.client(), params.after_seq);
    if params.after_seq.is_some() {
        managed.flushed(connection.id(), head).await;
    }
    let mut snapshot = managed.snapshot();
    snapshot.replay_truncated = truncated;
    Ok(snapshot)
}

pub(crate) fn session_detach(
    daemon: &Daemon,
    connection: &Connection,
    params: SessionIdParams,
) -> Reply<Empty> {
    let managed = daemon.sessions.get(&params.session_id)?;
    managed.detach(connection.id());
    Ok(Empty {})
}

pub(crate) fn session_update(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: SessionUpdateParams,
) -> Reply<SessionSnapshot> {
    let changes = serde_json::to_value(&params).unwrap_or(Value::Null);
    let snapshot = daemon
        .sessions
        .update(params, &known_tools(daemon))?
        .snapshot();
    let mut details = json!({"by": connection.client().identity()});
    if let (Some(details), Value::Object(changes)) = (details.as_object_mut(), changes) {
        details.extend(changes.into_iter().filter(|(name, _)| name != "session_id"));
    }
    audit_session(daemon, "session_update", &snapshot.session_id, details);
    Ok(snapshot)
}

/// The tools a session's rules are checked on: every tool registered now.
fn known_tools(daemon: &Daemon) -> Vec<toold_protocol::ToolDefinition> {
    daemon.registry.definitions()
}

pub(crate) fn session_get(daemon: &Daemon, params: SessionIdParams) -> Reply<SessionSnapshot> {
    Ok(daemon.sessions.get(&params.session_id)?.snapshot())
}

pub(crate) fn session_list(daemon: &Daemon) -> Reply<SessionListResult> {
    Ok(SessionListResult {
        sessions: daemon
            .sessions
            .all()
            .iter()
            .map(|managed| managed.snapshot())
            .collect(),
    })
}

pub(crate) fn session_close(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: SessionIdParams,
) -> Reply<Empty> {
    daemon.sessions.close(&params.session_id)?;
    tracing::info!(session = %params.session_id, "session closed");
    audit_session(
        daemon,
        "session_close",
        &params.session_id,
        json!({"by": connection.client().identity()}),
    );
    Ok(Empty {})
}

/// `permissions/explain`: the call judged in a live session (`session_id`) or in one described
/// as `session/create` would take it (`session`), which is checked and not created.
pub(crate) async fn permissions_explain(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: ExplainParams,
) -> Reply<Explanation> {
    let (state, client_hooks) = match (&params.session_id, &params.session) {
        (Some(session_id), None) => {
            let managed = daemon.sessions.get(session_id)?;
            let hooks = managed.session.peers().hooks;
            (managed.session.state(), hooks)
        }
        (None, Some(described)) => {
            let state = daemon.sessions.draft(described, &known_tools(daemon))?;
            (Arc::new(state), Vec::new())
        }
        _ => {
            return Err(ErrorObject::invalid_params(
                "give exactly one of session_id (a live session) and session (one described as \
                 session/create takes it)",
            ));
        }
    };
    let arguments = params
        .call
        .arguments
        .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
    let call = toold_protocol::ToolCall::new("explain", params.call.name, arguments);
    // A lazy server's tool is judged as `tools/execute` would judge it once the server started,
    // without starting it.
    let unstarted = match daemon.mcp.get() {
        Some(servers) if daemon.pipeline.registry.get(&call.name).is_none() => {
            servers.unstarted_tool(&call.name)
        }
        _ => None,
    };
    let parser_owner = connection.client().parser_owner();
    let session = ExplainedIn {
        state: &state,
        client_hooks: &client_hooks,
        parser_owner: &parser_owner,
    };
    Ok(explain(&daemon.pipeline, session, &call, unstarted).await)
}

pub(crate) async fn tools_list(daemon: &Daemon, params: ToolsListParams) -> Reply<ToolsListResult> {
    // The first listing is a lazy MCP server's first use: its tools are in this one; and an
    // eager server still on its first start is waited for, so that its tools are too.
    if let Some(servers) = daemon.mcp.get() {
        futures_util::join!(
            servers.start_lazy(|_| true),
            servers.eager_settled(|_| true)
        );
    }
    let session = match &params.session_id {
        Some(session_id) => Some(daemon.sessions.get(session_id)?.session.state()),
        None => None,
    };
    let visible = |definition: &ToolDefinition| {
        session
            .as_ref()
            .is_none_or(|state| state.visible(definition))
    };
    let revision = daemon.registry.revision();
    let tools = daemon.registry.list(&ListFilter {
        visible: Some(&visible),
        allowed: params.allowed.as_deref(),
        safety: params.safety,
    });
    Ok(ToolsListResult { revision, tools })
}

pub(crate) fn tools_register(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    params: ToolsRegisterParams,
) -> Reply<Revision> {
    if !connection.client().has_client_tools() {
        return Err(ErrorObject::invalid_params(
            "tools/register needs the client_tools capability, declared in initialize",
        ));
    }
    let mut seen = HashSet::new();
    for definition in &params.tools {
        if !is_valid_tool_name(&definition.name) {
            return Err(ErrorObject::invalid_params(
                RegisterError::InvalidName(definition.name.clone()).to_string(),
            ));
        }
        if definition.name.starts_with(crate::mcp::names::PREFIX) {
            return Err(ErrorObject::invalid_params(format!(
                "the tool {:?} starts with {:?}, which names the tools of the daemon's MCP \
                 servers (rules such as `allow mcp__fs__*` trust that prefix); choose another name",
                definition.name,
                crate::mcp::names::PREFIX
            )));
        }
        if definition.system {
            return Err(ErrorObject::invalid_params(format!(
                "the tool {:?} declares system: true; only the daemon's own tools are system tools \
                 (they skip rules and modes), so register it without system",
                definition.name
            )));
        }
        if !seen.insert(definition.name.as_str()) {
            return Err(ErrorObject::invalid_params(format!(
                "the tool {:?} is listed twice",
                definition.name
            )));
        }
        let existing = daemon.registry.get(&definition.name);
        if existing.is_some() && !(params.replace && connection.owns_tool(&definition.name)) {
            return Err(ErrorObject::invalid_params(format!(
                "a tool named {:?} is already registered{}",
                definition.name,
                if params.replace {
                    " by someone else; replace only replaces this connection's own tools"
                } else {
                    ""
                }
            ))
            .with_data(json!({ "already_registered": definition.name })));
        }
    }
    for mut definition in params.tools {
        definition.source = ToolSource::Client;
        let name = definition.name.clone();
        let tool = Arc::new(ClientTool::new(definition, Arc::clone(connection.client())));
        let registered = if connection.owns_tool(&name) {
            daemon.registry.register_or_replace(tool)
        } else {
            daemon.registry.register(tool)
        };
        registered.map_err(|err| match err {
            RegisterError::InvalidName(_)
            | RegisterError::Duplicate(_)
            | RegisterError::InvalidSchema { .. } => ErrorObject::invalid_params(err.to_string()),
        })?;
        connection.own_tool(&name);
    }
    daemon.tools_changed();
    Ok(Revision {
        revision: daemon.registry.revision(),
    })
}

pub(crate) fn tools_unregister(
    daemon: &Daemon,
    connection: &Connection,
    params: ToolsUnregisterParams,
) -> Reply<Revision> {
    if let Some(foreign) = params.names.iter().find(|name| !connection.owns_tool(name)) {
        return Err(ErrorObject::invalid_params(format!(
            "the tool {foreign:?} was not registered by this connection; only a connection's own tools can be removed"
        )));
    }
    for name in &params.names {
        daemon.registry.unregister(name);
        connection.disown_tool(name);
    }
    daemon.tools_changed();
    Ok(Revision {
        revision: daemon.registry.revision(),
    })
}

/// Runs a batch; answers after every call has ended and after the submitting connection, if
/// attached, has been sent the batch's events.
pub(crate) async fn tools_execute(
    daemon: &Daemon,
    connection: &Arc<Connection>,
    request_id: String,
    params: ExecuteParams,
) -> Reply<ExecuteResult> {
    let managed = daemon.sessions.get(&params.session_id)?;
    let mut ids = HashSet::new();
    if let Some(duplicate) = params
        .calls
        .iter()
        .find(|call| !ids.insert(call.id.as_str()))
    {
        return Err(ErrorObject::invalid_params(format!(
            "the call id {:?} appears twice in the batch",
            duplicate.id
        )));
    }
    if daemon.shutdown.is_cancelled() {
        return Err(ErrorObject::overloaded(
            "the daemon is shutting down; no new batches start",
        ));
    }
    // A call naming a tool of a lazy MCP server not started yet starts it, and waits for it;
    // one naming an eager server's still on its first start waits for it too.
    if let Some(servers) = daemon.mcp.get() {
        let named: Vec<&str> = params
            .calls
            .iter()
            .filter_map(|call| crate::mcp::names::server_of(&call.name))
            .collect();
        if !named.is_empty() {
            futures_util::join!(
                servers.start_lazy(|server| named.contains(&server)),
                servers.eager_settled(|server| named.contains(&server)),
            );
        }
    }
    let batch_id = format!("b_{}", daemon.next_batch.fetch_add(1, Ordering::Relaxed));
    let control = BatchControl::new(params.calls.len());
    // `$/cancelRequest` of this request reaches the batch.
    connection.start_execute(request_id.clone(), control.batch.clone());
    let batch = Batch {
        id: batch_id.clone(),
        iteration: params.iteration,
        calls: params.calls.into_iter().map(Arc::new).collect(),
    };
    let results = managed
        .run_batch(&daemon.pipeline, batch, &control, connection.client())
        .await;
    connection.end_execute(&request_id);
    // A result the client is answered with is in the audit log first.
    daemon.pipeline.audit.flush();
    Ok(ExecuteResult { batch_id, results })
}

pub(crate) fn index_status(daemon: &Daemon) -> Reply<Vec<IndexRootStatus>> {
    Ok(daemon
        .indexes
        .status()
        .into_iter()
        .map(|root| IndexRootStatus {
            root: root.root.display().to_string(),
            state: root.state.to_owned(),
            reason: root.reason.map(|reason| reason.as_str().to_owned()),
            files: root.files as u64,
            memory_bytes: root.memory_bytes as u64,
            last_rebuild: root.last_rebuild.map(toold_protocol::time::rfc3339),
            fallbacks: root
                .fallbacks
                .into_iter()
                .map(|(reason, count)| (reason.as_str().to_owned(), count))
                .collect(),
        })
        .collect())
}

pub(crate) fn mcp_status(daemon: &Daemon) -> Reply<McpStatusResult> {
    let servers = daemon
        .mcp
        .get()
        .map(|servers| servers.status())
        .unwrap_or_default();
    Ok(McpStatusResult { servers })
}

pub(crate) async fn mcp_restart(
    daemon: &Daemon,
    params: McpRestartParams,
) -> Reply<McpServerStatus> {
    let restarted = match daemon.mcp.get() {
        Some(servers) => servers.restart(&params.name).await,
        None => None,
    };
    restarted.ok_or_else(|| {
        ErrorObject::invalid_params(format!(
            "no MCP server is named {:?} (mcp/status lists them)",
            params.name
        ))
    })
}

pub(crate) fn tools_cancel(daemon: &Daemon, params: CancelParams) -> Reply<CancelResult> {
    let managed = daemon.sessions.get(&params.session_id)?;
    let canceled = managed.cancel(params.batch_id.as_deref(), params.call_ids.as_deref());
    Ok(CancelResult { canceled })
}

/// `$/cancelRequest` naming a `tools/execute` request cancels its batch; anything else is
/// ignored, as JSON-RPC allows.
pub(crate) fn cancel_request(connection: &Connection, params: Option<Value>) {
    if let Some(id) = params.as_ref().and_then(|params| params.get("id")) {
        connection.cancel_execute(&id.to_string());
    }
}
