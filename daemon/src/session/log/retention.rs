//! What an event costs the session's log, and the slim form the log keeps of an old event once
//! it is over its byte budget: the same method, `seq` and ids, its bulk (output data; a call's
//! arguments; a result's content, error and metadata but `call_id`) dropped and counted in
//! `elided_bytes`.

use std::sync::Arc;

use serde_json::{Map, Value};
use toold_protocol::{
    ArgumentsReplaced, CallEnded, CallStart, Event, EventParams, ToolCall, ToolOutput, ToolResult,
};

/// What every retained event costs besides its strings: the `Event` itself and its `Arc`.
const EVENT_OVERHEAD: usize = std::mem::size_of::<Event>() + 16;

/// What one `String` or JSON node costs besides its bytes.
const NODE_OVERHEAD: usize = 24;

/// The memory `event` holds in the log: its own size and the heap it points to, from string
/// lengths and JSON nodes. An estimate of what it costs the daemon's RSS, not its wire size.
pub(super) fn weight(event: &Event) -> usize {
    let (session_id, _, batch_id) = header(event);
    let body = match event {
        Event::BatchStart(params) => {
            let ids: usize = params
                .body
                .call_ids
                .iter()
                .map(|id| id.len() + NODE_OVERHEAD)
                .sum();
            let plan: usize = params
                .body
                .plan
                .iter()
                .map(|run| run.len() * 8 + NODE_OVERHEAD)
                .sum();
            ids + plan
        }
        Event::CallStart(params) => call_weight(&params.body.call),
        Event::ArgumentsReplaced(params) => call_weight(&params.body.call),
        Event::Output(params) => params.body.call_id.len() + params.body.data.len(),
        Event::Progress(params) => {
            params.body.call_id.len() + params.body.message.as_ref().map_or(0, String::len) + 16
        }
        // A call's two events share one result, yet each counts it whole: the result stays
        // in memory until both have been slimmed, so each holds it for as long as it lives.
        Event::Result(params) | Event::CallDone(params) => {
            params.body.call_id.len() + result_weight(&params.body.result)
        }
        Event::ApprovalResolved(params) => {
            params.body.approval_id.len() + params.body.call_id.len()
        }
        Event::BatchDone(_) => 0,
    };
    EVENT_OVERHEAD + session_id.len() + batch_id.len() + body
}

/// The event with its bulk dropped; `None` when it has none to drop (a kind without bulk, or
/// one already slim).
pub(super) fn slim(event: &Event) -> Option<Event> {
    match event {
        Event::Output(params) if !params.body.data.is_empty() => Some(Event::Output(EventParams {
            session_id: params.session_id.clone(),
            seq: params.seq,
            batch_id: params.batch_id.clone(),
            body: ToolOutput {
                call_id: params.body.call_id.clone(),
                stream: params.body.stream,
                data: String::new(),
                truncated: params.body.truncated,
                elided_bytes: params.body.data.len() as u64,
            },
        })),
        Event::CallStart(params) if !is_empty_object(&params.body.call.arguments) => {
            let (call, elided_bytes) = slim_call(&params.body.call);
            Some(Event::CallStart(EventParams {
                session_id: params.session_id.clone(),
                seq: params.seq,
                batch_id: params.batch_id.clone(),
                body: CallStart {
                    iteration: params.body.iteration,
                    call: Arc::new(call),
                    elided_bytes,
                },
            }))
        }
        Event::ArgumentsReplaced(params) if !is_empty_object(&params.body.call.arguments) => {
            let (call, elided_bytes) = slim_call(&params.body.call);
            Some(Event::ArgumentsReplaced(EventParams {
                session_id: params.session_id.clone(),
                seq: params.seq,
                batch_id: params.batch_id.clone(),
                body: ArgumentsReplaced {
                    iteration: params.body.iteration,
                    call,
                    by: params.body.by,
                    elided_bytes,
                },
            }))
        }
        Event::Result(params) => slim_result(params).map(Event::Result),
        Event::CallDone(params) => slim_result(params).map(Event::CallDone),
        Event::Output(_)
        | Event::Progress(_)
        | Event::CallStart(_)
        | Event::ArgumentsReplaced(_)
        | Event::BatchStart(_)
        | Event::ApprovalResolved(_)
        | Event::BatchDone(_) => None,
    }
}

/// A call without its arguments (`{}`), and how many bytes of JSON they were.
fn slim_call(call: &ToolCall) -> (ToolCall, u64) {
    let slim = ToolCall::new(
        call.id.clone(),
        call.name.clone(),
        Value::Object(Map::new()),
    );
    (slim, json_text_len(&call.arguments))
}

fn slim_result(params: &EventParams<CallEnded>) -> Option<EventParams<CallEnded>> {
    let result = &params.body.result;
    let other_metadata = OtherMetadata(&result.metadata);
    let error_len = result.error.as_ref().map_or(0, String::len);
    if result.content.is_empty() && error_len == 0 && other_metadata.is_empty() {
        return None;
    }
    let metadata_len = if other_metadata.is_empty() {
        0
    } else {
        json_text_len(&other_metadata)
    };
    let mut metadata = Map::new();
    if let Some(call_id) = result.metadata.get("call_id") {
        metadata.insert("call_id".to_owned(), call_id.clone());
    }
    Some(EventParams {
        session_id: params.session_id.clone(),
        seq: params.seq,
        batch_id: params.batch_id.clone(),
        body: CallEnded {
            iteration: params.body.iteration,
            call_id: params.body.call_id.clone(),
            result: Arc::new(ToolResult {
                ok: result.ok,
                tool: result.tool.clone(),
                content: String::new(),
                error_type: result.error_type.clone(),
                error: result.error.as_ref().map(|_| String::new()),
                metadata,
            }),
            elapsed_ms: params.body.elapsed_ms,
            elided_bytes: result.content.len() as u64 + error_len as u64 + metadata_len,
        },
    })
}

/// A result's metadata but `call_id`, which a slim result keeps: serialized in place, for its
/// length, without copying the values.
struct OtherMetadata<'a>(&'a Map<String, Value>);

impl OtherMetadata<'_> {
    fn entries(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter().filter(|(key, _)| *key != "call_id")
    }

    fn is_empty(&self) -> bool {
        self.entries().next().is_none()
    }
}

impl serde::Serialize for OtherMetadata<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.entries())
    }
}

fn header(event: &Event) -> (&str, u64, &str) {
    (event.session_id(), event.seq(), event.batch_id())
}

fn call_weight(call: &ToolCall) -> usize {
    call.id.len() + call.name.len() + json_weight(&call.arguments)
}

fn result_weight(result: &ToolResult) -> usize {
    let metadata: usize = result
        .metadata
        .iter()
        .map(|(key, value)| key.len() + NODE_OVERHEAD + json_weight(value))
        .sum();
    result.tool.len()
        + result.content.len()
        + result.error.as_ref().map_or(0, String::len)
        + metadata
}

/// The estimated memory of a JSON value: its strings and a fixed cost per node.
fn json_weight(value: &Value) -> usize {
    NODE_OVERHEAD
        + match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
            Value::String(text) => text.len(),
            Value::Array(items) => items.iter().map(json_weight).sum(),
            Value::Object(members) => members
                .iter()
                .map(|(key, value)| key.len() + json_weight(value))
                .sum(),
        }
}

fn is_empty_object(value: &Value) -> bool {
    value.as_object().is_some_and(Map::is_empty)
}

/// The length of `value` as compact JSON text (what `elided_bytes` counts), counted as it is
/// written rather than kept.
fn json_text_len(value: &impl serde::Serialize) -> u64 {
    struct Counter(u64);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing JSON values to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}
