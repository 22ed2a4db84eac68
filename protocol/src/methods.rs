//! Every method name of the protocol, in one place, and the typed pairing of each
//! method with its params and result.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::approval::{ApprovalAnswer, ApprovalRequestParams};
use crate::events::{
    ApprovalResolved as ApprovalResolvedBody, ArgumentsReplaced, BatchDone as BatchDoneBody,
    BatchStart as BatchStartBody, CallEnded, CallStart, Event, EventParams, ToolOutput,
    ToolProgress,
};
use crate::execute::{
    CancelParams, CancelRequestParams, CancelResult, ExecuteParams, ExecuteResult,
};
use crate::explain::{ExplainParams, Explanation};
use crate::framing::JsonText;
use crate::framing::render_notification_as;
use crate::hooks::{PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer, PreToolUseParams};
use crate::index::{IndexRootStatus, IndexStatusParams};
use crate::initialize::{InitializeParams, InitializeResult};
use crate::invoke::InvokeParams;
use crate::mcp::{McpRestartParams, McpServerStatus, McpStatusParams, McpStatusResult};
use crate::reload::{ReloadParams, ReloadResult};
use crate::rpc::Empty;
use crate::session::{
    SessionAttachParams, SessionCreateParams, SessionIdParams, SessionListParams,
    SessionListResult, SessionSnapshot, SessionUpdateParams,
};
use crate::tool::ToolResult;
use crate::tools_api::{
    Revision, ToolsListParams, ToolsListResult, ToolsRegisterParams, ToolsUnregisterParams,
};

// Client → daemon requests.
pub const INITIALIZE: &str = "initialize";
pub const SESSION_CREATE: &str = "session/create";
pub const SESSION_ATTACH: &str = "session/attach";
pub const SESSION_DETACH: &str = "session/detach";
pub const SESSION_UPDATE: &str = "session/update";
pub const SESSION_GET: &str = "session/get";
pub const SESSION_LIST: &str = "session/list";
pub const SESSION_CLOSE: &str = "session/close";
pub const TOOLS_LIST: &str = "tools/list";
pub const TOOLS_REGISTER: &str = "tools/register";
pub const TOOLS_UNREGISTER: &str = "tools/unregister";
pub const TOOLS_EXECUTE: &str = "tools/execute";
pub const TOOLS_CANCEL: &str = "tools/cancel";
pub const MCP_STATUS: &str = "mcp/status";
pub const INDEX_STATUS: &str = "index/status";
pub const PERMISSIONS_EXPLAIN: &str = "permissions/explain";
pub const MCP_RESTART: &str = "mcp/restart";
pub const CONFIG_RELOAD: &str = "config/reload";

// Sent by either peer.
pub const CANCEL_REQUEST: &str = "$/cancelRequest";

// Daemon → client requests.
pub const APPROVAL_REQUEST: &str = "approval/request";
pub const HOOK_PRE_TOOL_USE: &str = "hook/pre_tool_use";
pub const HOOK_POST_TOOL_USE: &str = "hook/post_tool_use";
pub const TOOL_INVOKE: &str = "tool/invoke";

// Daemon → client notifications.
pub const BATCH_START: &str = "batch/start";
pub const TOOL_CALL_START: &str = "tool/call_start";
pub const TOOL_ARGUMENTS_REPLACED: &str = "tool/arguments_replaced";
pub const TOOL_OUTPUT: &str = "tool/output";
pub const TOOL_PROGRESS: &str = "tool/progress";
pub const TOOL_RESULT: &str = "tool/result";
pub const TOOL_CALL_DONE: &str = "tool/call_done";
pub const APPROVAL_RESOLVED: &str = "approval/resolved";
pub const BATCH_DONE: &str = "batch/done";
pub const TOOLS_LIST_CHANGED: &str = "tools/list_changed";

/// A request method with the types of its params and result, so a peer can offer
/// `request::<SessionCreate>(params) -> SessionSnapshot`.
pub trait RequestMethod {
    const METHOD: &'static str;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

/// A notification method with the type of its params.
pub trait NotificationMethod {
    const METHOD: &'static str;
    type Params: Serialize + DeserializeOwned;
}

macro_rules! request_methods {
    ($($(#[$doc:meta])* $name:ident = $method:ident: $params:ty => $result:ty;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}
        impl RequestMethod for $name {
            const METHOD: &'static str = $method;
            type Params = $params;
            type Result = $result;
        }
    )*};
}

macro_rules! notification_methods {
    ($($(#[$doc:meta])* $name:ident = $method:ident: $params:ty;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub enum $name {}
        impl NotificationMethod for $name {
            const METHOD: &'static str = $method;
            type Params = $params;
        }
    )*};
}

request_methods! {
    Initialize = INITIALIZE: InitializeParams => InitializeResult;
    SessionCreate = SESSION_CREATE: SessionCreateParams => SessionSnapshot;
    SessionAttach = SESSION_ATTACH: SessionAttachParams => SessionSnapshot;
    SessionDetach = SESSION_DETACH: SessionIdParams => Empty;
    SessionUpdate = SESSION_UPDATE: SessionUpdateParams => SessionSnapshot;
    SessionGet = SESSION_GET: SessionIdParams => SessionSnapshot;
    SessionList = SESSION_LIST: SessionListParams => SessionListResult;
    SessionClose = SESSION_CLOSE: SessionIdParams => Empty;
    ToolsList = TOOLS_LIST: ToolsListParams => ToolsListResult;
    ToolsRegister = TOOLS_REGISTER: ToolsRegisterParams => Revision;
    ToolsUnregister = TOOLS_UNREGISTER: ToolsUnregisterParams => Revision;
    ToolsExecute = TOOLS_EXECUTE: ExecuteParams => ExecuteResult;
    ToolsCancel = TOOLS_CANCEL: CancelParams => CancelResult;
    McpStatus = MCP_STATUS: McpStatusParams => McpStatusResult;
    IndexStatus = INDEX_STATUS: IndexStatusParams => Vec<IndexRootStatus>;
    PermissionsExplain = PERMISSIONS_EXPLAIN: ExplainParams => Explanation;
    McpRestart = MCP_RESTART: McpRestartParams => McpServerStatus;
    ConfigReload = CONFIG_RELOAD: ReloadParams => ReloadResult;
    /// Daemon → client.
    ApprovalRequest = APPROVAL_REQUEST: ApprovalRequestParams => ApprovalAnswer;
    /// Daemon → client.
    HookPreToolUse = HOOK_PRE_TOOL_USE: PreToolUseParams => PreToolUseAnswer;
    /// Daemon → client.
    HookPostToolUse = HOOK_POST_TOOL_USE: PostToolUseParams => PostToolUseAnswer;
    /// Daemon → the client that registered the tool.
    ToolInvoke = TOOL_INVOKE: InvokeParams => ToolResult;
}

notification_methods! {
    CancelRequest = CANCEL_REQUEST: CancelRequestParams;
    BatchStart = BATCH_START: EventParams<BatchStartBody>;
    ToolCallStart = TOOL_CALL_START: EventParams<CallStart>;
    ToolArgumentsReplaced = TOOL_ARGUMENTS_REPLACED: EventParams<ArgumentsReplaced>;
    ToolOutputEvent = TOOL_OUTPUT: EventParams<ToolOutput>;
    ToolProgressEvent = TOOL_PROGRESS: EventParams<ToolProgress>;
    ToolResultEvent = TOOL_RESULT: EventParams<CallEnded>;
    ToolCallDone = TOOL_CALL_DONE: EventParams<CallEnded>;
    ApprovalResolved = APPROVAL_RESOLVED: EventParams<ApprovalResolvedBody>;
    BatchDone = BATCH_DONE: EventParams<BatchDoneBody>;
    ToolsListChanged = TOOLS_LIST_CHANGED: Revision;
}

/// The wire side of a session [`Event`]: the notification that carries each kind, with the
/// rest of the method table.
impl Event {
    /// The notification method this event is sent as.
    pub fn method(&self) -> &'static str {
        match self {
            Event::BatchStart(_) => BATCH_START,
            Event::CallStart(_) => TOOL_CALL_START,
            Event::ArgumentsReplaced(_) => TOOL_ARGUMENTS_REPLACED,
            Event::Output(_) => TOOL_OUTPUT,
            Event::Progress(_) => TOOL_PROGRESS,
            Event::Result(_) => TOOL_RESULT,
            Event::CallDone(_) => TOOL_CALL_DONE,
            Event::ApprovalResolved(_) => APPROVAL_RESOLVED,
            Event::BatchDone(_) => BATCH_DONE,
        }
    }

    /// The whole notification as compact JSON, rendered straight from the event (no `Value`
    /// in between): what a connection is sent.
    pub fn render(&self) -> Result<JsonText, serde_json::Error> {
        let method = self.method();
        match self {
            Event::BatchStart(params) => render_notification_as(method, params),
            Event::CallStart(params) => render_notification_as(method, params),
            Event::ArgumentsReplaced(params) => render_notification_as(method, params),
            Event::Output(params) => render_notification_as(method, params),
            Event::Progress(params) => render_notification_as(method, params),
            Event::Result(params) => render_notification_as(method, params),
            Event::CallDone(params) => render_notification_as(method, params),
            Event::ApprovalResolved(params) => render_notification_as(method, params),
            Event::BatchDone(params) => render_notification_as(method, params),
        }
    }

    /// Reads a notification as a session event: `None` when `method` is not one,
    /// `Some(Err)` when it is but the params do not fit.
    pub fn from_notification(
        method: &str,
        params: Value,
    ) -> Option<Result<Event, serde_json::Error>> {
        fn parse<B: DeserializeOwned>(
            params: Value,
            wrap: fn(EventParams<B>) -> Event,
        ) -> Option<Result<Event, serde_json::Error>> {
            Some(serde_json::from_value(params).map(wrap))
        }
        match method {
            BATCH_START => parse(params, Event::BatchStart),
            TOOL_CALL_START => parse(params, Event::CallStart),
            TOOL_ARGUMENTS_REPLACED => parse(params, Event::ArgumentsReplaced),
            TOOL_OUTPUT => parse(params, Event::Output),
            TOOL_PROGRESS => parse(params, Event::Progress),
            TOOL_RESULT => parse(params, Event::Result),
            TOOL_CALL_DONE => parse(params, Event::CallDone),
            APPROVAL_RESOLVED => parse(params, Event::ApprovalResolved),
            BATCH_DONE => parse(params, Event::BatchDone),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn request<M: RequestMethod>() -> &'static str {
        M::METHOD
    }

    fn notification<M: NotificationMethod>() -> &'static str {
        M::METHOD
    }

    #[test]
    fn method_names_are_unique_and_shaped_area_verb() {
        let names = [
            request::<Initialize>(),
            request::<SessionCreate>(),
            request::<SessionAttach>(),
            request::<SessionDetach>(),
            request::<SessionUpdate>(),
            request::<SessionGet>(),
            request::<SessionList>(),
            request::<SessionClose>(),
            request::<ToolsList>(),
            request::<ToolsRegister>(),
            request::<ToolsUnregister>(),
            request::<ToolsExecute>(),
            request::<ToolsCancel>(),
            request::<McpStatus>(),
            request::<PermissionsExplain>(),
            request::<McpRestart>(),
            request::<ConfigReload>(),
            request::<ApprovalRequest>(),
            request::<HookPreToolUse>(),
            request::<HookPostToolUse>(),
            request::<ToolInvoke>(),
            notification::<CancelRequest>(),
            notification::<BatchStart>(),
            notification::<ToolCallStart>(),
            notification::<ToolOutputEvent>(),
            notification::<ToolProgressEvent>(),
            notification::<ToolResultEvent>(),
            notification::<ToolCallDone>(),
            notification::<ApprovalResolved>(),
            notification::<BatchDone>(),
            notification::<ToolsListChanged>(),
        ];
        let unique: HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        for name in names {
            let shaped = name == INITIALIZE
                || name.split_once('/').is_some_and(|(area, verb)| {
                    !area.is_empty()
                        && !verb.is_empty()
                        && verb.bytes().all(|byte| {
                            byte.is_ascii_lowercase()
                                || byte == b'_'
                                || (area == "$" && byte.is_ascii_uppercase())
                        })
                });
            assert!(shaped, "{name}");
        }
    }
}
