//! `toold serve` end to end, executing: hooks from a client and from the config, client tools,
//! cancellation three ways (with the command's processes gone afterwards), and the drain on
//! SIGTERM. Real daemon process, real socket, real commands.
//!
//! This file holds the helpers the tests share (params, results, answerers, a session that runs
//! commands); the tests are in modules by topic: hooks, client tools, stopping a call or the
//! daemon, and a stuck shell parser.

use std::future::pending;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_protocol::{Notification, Request};
use toold_tests::daemon::{Answerer, TestClient, TestDaemon, no_answers};

mod client_tools;
mod hooks;
mod shell_parser;
mod stopping;

/// The params of a request or notification, `null` when absent.
fn params_of(params: &Option<Value>) -> &Value {
    params.as_ref().unwrap_or(&Value::Null)
}

/// Whether `notification` is the event `method` about `call_id`.
fn is_call_event(notification: &Notification, method: &str, call_id: &str) -> bool {
    notification.method == method && params_of(&notification.params)["call_id"] == call_id
}

/// The result of the call `call_id` in a `tools/execute` response.
fn result_of<'a>(response: &'a Value, call_id: &str) -> &'a Value {
    response["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|entry| entry["call_id"] == call_id)
        .map(|entry| &entry["result"])
        .unwrap_or_else(|| panic!("no result for {call_id}: {response}"))
}

/// An answerer from a function of the request's method and params, recording every request.
fn answering(
    seen: Arc<Mutex<Vec<Request>>>,
    answer: impl Fn(&str, &Value) -> Option<Reply> + Send + Sync + 'static,
) -> Answerer {
    Arc::new(move |request: Request| {
        let reply = answer(&request.method, params_of(&request.params));
        seen.lock().expect("requests").push(request);
        Box::pin(async move {
            match reply {
                Some(reply) => reply,
                // No answer, ever: the daemon's deadline has to end the wait.
                None => pending().await,
            }
        })
    })
}

/// A daemon, a client and a session in which `run_command` runs without asking.
async fn command_session(daemon: &TestDaemon) -> (TestClient, String) {
    let client = daemon.connect(json!({}), no_answers()).await;
    let session_id = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["run_command"]}}))
        .await;
    (client, session_id)
}
