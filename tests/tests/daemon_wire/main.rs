//! The daemon's wire end to end: the real `toold serve` process on a real socket, spoken to with
//! raw bytes and with the protocol crate's peer. Both framings, every client→server method, the
//! JSON-RPC errors of docs/protocol.md sections 1–3, the socket's modes and ownership, the
//! connection limit, and `toold check-config`.
//!
//! This file holds the error codes and the helpers the tests share; the tests are in modules by
//! topic: framing and bad input, the handshake, the methods, invalid params, and the socket,
//! the connection limit and `toold check-config`.

use serde_json::{Value, json};
use toold_protocol::{ErrorObject, RequestError};
use toold_tests::daemon::{RawConnection, TestDaemon};

mod framing;
mod handshake;
mod invalid_params;
mod methods;
mod socket_and_process;

const NOT_INITIALIZED: i64 = -32002;
const OVERLOADED: i64 = -32001;
const UNKNOWN_SESSION: i64 = -32004;
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// The error code of a response object.
fn code_of(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error response: {response}"))
}

/// The error of a peer request that must have failed with a JSON-RPC error.
fn rpc_error(outcome: Result<Value, RequestError>) -> ErrorObject {
    match outcome {
        Err(RequestError::Rpc(error)) => error,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

fn read_file_call(id: &str, path: &str) -> Value {
    json!({"id": id, "name": "read_file", "arguments": {"path": path}})
}

/// A session at the daemon's work directory with `hello.txt` in it; returns the session id.
async fn session_with_a_file(daemon: &TestDaemon, connection: &mut RawConnection) -> String {
    std::fs::write(daemon.work().join("hello.txt"), "first line\nsecond line\n").expect("fixture");
    let snapshot = connection
        .call_ok(1, "session/create", json!({"cwd": daemon.work()}))
        .await;
    snapshot["session_id"]
        .as_str()
        .expect("a session id")
        .to_owned()
}
