//! Session events, the notifications sent to every attached connection while a batch runs
//! (docs/protocol.md section 5), and the session-less `tools/list_changed`. Their wire side
//! (which notification carries each, rendering, reading) is the method table's (`methods`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::ApprovalDecision;
use crate::tool::{ToolCall, ToolResult};

/// The fields every session event carries, followed by its own. The ids are shared: the
/// daemon stamps every event of a session and batch with the same two strings, which its
/// event log retains thousands of times over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventParams<B> {
    pub session_id: Arc<str>,
    /// Per session, strictly increasing; `session/attach`'s `after_seq` refers to it.
    pub seq: u64,
    pub batch_id: Arc<str>,
    #[serde(flatten)]
    pub body: B,
}

/// `batch/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchStart {
    pub iteration: u64,
    pub call_ids: Vec<String>,
    /// The runs, in order, as lists of indexes into `calls`; a run of several runs
    /// concurrently.
    pub plan: Vec<Vec<usize>>,
}

/// `tool/call_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallStart {
    pub iteration: u64,
    /// Shared with the batch that runs the call.
    pub call: Arc<ToolCall>,
    /// Set only on a replayed event whose arguments (this many bytes of JSON text) the
    /// session's log no longer keeps: `call.arguments` is then `{}`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elided_bytes: u64,
}

/// `tool/arguments_replaced`: a PreToolUse hook or an approver replaced a call's arguments
/// after its `tool/call_start`; `call.arguments` are the ones the call goes on with (judged,
/// and run if it runs), so that observers see what runs, not only what the model asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentsReplaced {
    pub iteration: u64,
    pub call: ToolCall,
    pub by: ReplacedBy,
    /// As in [`CallStart`]: set only on a replayed event whose arguments the log no longer
    /// keeps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elided_bytes: u64,
}

/// Who replaced a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplacedBy {
    /// A PreToolUse hook's `arguments`.
    Hook,
    /// An approver's answer with `arguments`.
    Approver,
}

/// Which stream of a command an output chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

/// `tool/output`: live output of `run_command`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub call_id: String,
    pub stream: OutputStream,
    /// UTF-8, invalid bytes replaced.
    pub data: String,
    /// Set on the last event of a call once `max_stream_bytes` was reached.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// Set only on a replayed event whose `data` (this many bytes) the session's log no longer
    /// keeps: the log bounds what it retains in bytes, and `data` is then empty.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elided_bytes: u64,
}

/// `tool/progress`: a tool's progress as it reports it (an MCP server's
/// `notifications/progress` for the call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    pub call_id: String,
    /// Increases with each report; its unit is the tool's.
    pub progress: f64,
    /// What `progress` reaches at the end, when the tool knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The body of `tool/result` and of `tool/call_done`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallEnded {
    pub iteration: u64,
    pub call_id: String,
    /// Shared: a call's two events and its outcome in the batch's response hold one result.
    pub result: Arc<ToolResult>,
    pub elapsed_ms: u64,
    /// Set only on a replayed event whose result the session's log no longer keeps whole:
    /// `content` and `error` are then `""` and `metadata` holds only `call_id`; this many
    /// bytes were dropped (`content`, `error`, and the other metadata as JSON text).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub elided_bytes: u64,
}

/// Who or what settled an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolvedBy {
    /// An approver answered (validly or not).
    Client,
    /// `approval_timeout_ms` passed.
    Timeout,
    /// The call was canceled while waiting.
    Cancel,
    /// The last approver disconnected.
    Disconnect,
}

/// `approval/resolved`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalResolved {
    pub approval_id: String,
    pub call_id: String,
    /// The winning decision; `null` when none was given (a timeout, a cancel, a
    /// disconnect, or an error or invalid answer), which ends the call
    /// `permission_canceled` or `canceled`.
    pub decision: Option<ApprovalDecision>,
    pub by: ResolvedBy,
}

/// `batch/done`: no fields beyond the common ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchDone {}

/// Any session event, told apart by its method name.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    BatchStart(EventParams<BatchStart>),
    CallStart(EventParams<CallStart>),
    ArgumentsReplaced(EventParams<ArgumentsReplaced>),
    Output(EventParams<ToolOutput>),
    Progress(EventParams<ToolProgress>),
    Result(EventParams<CallEnded>),
    CallDone(EventParams<CallEnded>),
    ApprovalResolved(EventParams<ApprovalResolved>),
    BatchDone(EventParams<BatchDone>),
}

impl Event {
    /// The notification params.
    pub fn params(&self) -> Result<Value, serde_json::Error> {
        match self {
            Event::BatchStart(params) => serde_json::to_value(params),
            Event::CallStart(params) => serde_json::to_value(params),
            Event::ArgumentsReplaced(params) => serde_json::to_value(params),
            Event::Output(params) => serde_json::to_value(params),
            Event::Progress(params) => serde_json::to_value(params),
            Event::Result(params) => serde_json::to_value(params),
            Event::CallDone(params) => serde_json::to_value(params),
            Event::ApprovalResolved(params) => serde_json::to_value(params),
            Event::BatchDone(params) => serde_json::to_value(params),
        }
    }

    pub fn session_id(&self) -> &str {
        self.header().0
    }

    /// The call the event is about; `None` for the batch's own events.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            Event::CallStart(params) => Some(&params.body.call.id),
            Event::ArgumentsReplaced(params) => Some(&params.body.call.id),
            Event::Output(params) => Some(&params.body.call_id),
            Event::Progress(params) => Some(&params.body.call_id),
            Event::Result(params) | Event::CallDone(params) => Some(&params.body.call_id),
            Event::ApprovalResolved(params) => Some(&params.body.call_id),
            Event::BatchStart(_) | Event::BatchDone(_) => None,
        }
    }

    pub fn seq(&self) -> u64 {
        self.header().1
    }

    pub fn batch_id(&self) -> &str {
        self.header().2
    }

    fn header(&self) -> (&str, u64, &str) {
        fn of<B>(params: &EventParams<B>) -> (&str, u64, &str) {
            (&params.session_id, params.seq, &params.batch_id)
        }
        match self {
            Event::BatchStart(params) => of(params),
            Event::CallStart(params) => of(params),
            Event::ArgumentsReplaced(params) => of(params),
            Event::Output(params) => of(params),
            Event::Progress(params) => of(params),
            Event::Result(params) => of(params),
            Event::CallDone(params) => of(params),
            Event::ApprovalResolved(params) => of(params),
            Event::BatchDone(params) => of(params),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods;
    use crate::test_support::assert_round_trip;
    use crate::tools_api::ToolsListChangedParams;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn header(mut body: Value) -> Value {
        body["session_id"] = json!("s_1");
        body["seq"] = json!(12);
        body["batch_id"] = json!("b_1");
        body
    }

    fn result() -> Value {
        json!({"ok":true,"tool":"read_file","content":"x","metadata":{"call_id":"call_a"}})
    }

    /// Each event's params round-trip, and through [`Event`] keep their method.
    #[test]
    fn every_event_round_trips() {
        let cases = [
            (
                methods::BATCH_START,
                header(json!({"iteration":3,"call_ids":["call_a","call_b"],"plan":[[0,1]]})),
            ),
            (
                methods::TOOL_CALL_START,
                header(json!({"iteration":3,
                    "call":{"id":"call_a","name":"read_file","arguments":{"path":"A"}}})),
            ),
            (
                methods::TOOL_ARGUMENTS_REPLACED,
                header(json!({"iteration":3,"by":"hook",
                    "call":{"id":"call_a","name":"read_file","arguments":{"path":"B"}}})),
            ),
            (
                methods::TOOL_OUTPUT,
                header(json!({"call_id":"call_a","stream":"stdout","data":"hello\n"})),
            ),
            (
                methods::TOOL_OUTPUT,
                header(json!({"call_id":"call_a","stream":"stderr","data":"","truncated":true})),
            ),
            (
                methods::TOOL_PROGRESS,
                header(json!({"call_id":"call_a","progress":2.0,"total":5.0,"message":"step 2"})),
            ),
            (
                methods::TOOL_PROGRESS,
                header(json!({"call_id":"call_a","progress":0.5})),
            ),
            (
                methods::TOOL_RESULT,
                header(json!({"iteration":3,"call_id":"call_a","result":result(),"elapsed_ms":3})),
            ),
            (
                methods::TOOL_CALL_DONE,
                header(json!({"iteration":3,"call_id":"call_a","result":result(),"elapsed_ms":3})),
            ),
            (
                methods::APPROVAL_RESOLVED,
                header(json!({"approval_id":"a_1","call_id":"call_a",
                              "decision":"allow_session","by":"client"})),
            ),
            (
                methods::APPROVAL_RESOLVED,
                header(json!({"approval_id":"a_1","call_id":"call_a",
                              "decision":null,"by":"timeout"})),
            ),
            (methods::BATCH_DONE, header(json!({}))),
        ];
        for (method, params) in cases {
            let event = Event::from_notification(method, params.clone())
                .unwrap()
                .unwrap_or_else(|err| panic!("{method} {params}: {err}"));
            assert_eq!(event.method(), method);
            assert_eq!(event.session_id(), "s_1");
            assert_eq!(event.seq(), 12);
            assert_eq!(event.batch_id(), "b_1");
            assert_eq!(event.params().unwrap(), params, "{method}");
        }
    }

    #[test]
    fn bodies_round_trip_on_their_own_types() {
        let output: EventParams<ToolOutput> =
            assert_round_trip(header(json!({"call_id":"c","stream":"stdout","data":"a"})));
        assert_eq!(output.body.stream, OutputStream::Stdout);
        let resolved: EventParams<ApprovalResolved> = assert_round_trip(header(
            json!({"approval_id":"a","call_id":"c","decision":"deny","by":"client"}),
        ));
        assert_eq!(resolved.body.decision, Some(ApprovalDecision::Deny));
        for by in ["client", "timeout", "cancel", "disconnect"] {
            assert_round_trip::<ResolvedBy>(json!(by));
        }
        assert_round_trip::<ToolsListChangedParams>(json!({"revision":9}));
    }

    #[test]
    fn bad_events_are_refused() {
        assert!(Event::from_notification("tools/list_changed", json!({"revision":1})).is_none());
        let bad_stream = Event::from_notification(
            methods::TOOL_OUTPUT,
            header(json!({"call_id":"c","stream":"stdin","data":""})),
        );
        assert!(bad_stream.unwrap().is_err());
        let missing_seq = Event::from_notification(
            methods::BATCH_DONE,
            json!({"session_id":"s","batch_id":"b"}),
        );
        assert!(
            missing_seq
                .unwrap()
                .unwrap_err()
                .to_string()
                .contains("seq")
        );
    }
}
