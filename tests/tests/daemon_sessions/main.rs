//! Sessions end to end on the real `toold serve` process and socket: every event of a batch in
//! order, approvals over the socket with each decision, two clients on one session, replay with
//! `after_seq`, a restart that keeps sessions, `session/update` and `session/close`,
//! `on_disconnect`, the idle TTL, `tools/list` as a session sees it, and the previews approvals
//! carry (the change a file tool makes, checked against the disk).
//!
//! This file holds what the tests share (reading events, results and errors); the tests are in
//! modules by topic: events and replay, approvals, several clients, restarts, a session's
//! update, close, disconnect and expiry, `tools/list`, and previews.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::{Notification, Request, RequestError};
use toold_tests::daemon::outcomes;

mod approvals;
mod events;
mod known_safe_and_grants;
mod lifecycle;
mod previews;
mod restart;
mod several_clients;
mod tools_list;

type Seen = Arc<Mutex<Vec<Request>>>;

fn seen() -> Seen {
    Arc::new(Mutex::new(Vec::new()))
}

fn requests(seen: &Seen) -> Vec<Request> {
    seen.lock().expect("requests").clone()
}

fn approvals() -> Value {
    json!({"approvals": true})
}

fn params(notification: &Notification) -> &Value {
    notification.params.as_ref().expect("an event has params")
}

/// The call an event is about: `call.id` for `tool/call_start`, `call_id` for the others.
fn event_call_id(event: &Notification) -> Option<&str> {
    let params = params(event);
    params["call"]["id"]
        .as_str()
        .or_else(|| params["call_id"].as_str())
}

fn seq(event: &Notification) -> u64 {
    params(event)["seq"].as_u64().expect("a seq")
}

fn methods(events: &[Notification]) -> Vec<&str> {
    events.iter().map(|event| event.method.as_str()).collect()
}

fn resolved_events(events: &[Notification]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| event.method == "approval/resolved")
        .map(params)
        .collect()
}

/// The result of the call at `index` in a `tools/execute` response.
fn result(response: &Value, index: usize) -> &Value {
    &response["results"][index]["result"]
}

fn rpc_code(error: RequestError) -> i32 {
    match error {
        RequestError::Rpc(error) => error.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}
