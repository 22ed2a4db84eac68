//! The daemon's wire end to end: the real `toold serve` process on a real socket, spoken to with
//! raw bytes and with the protocol crate's peer. Both framings, every client→server method, the
//! JSON-RPC errors of docs/protocol.md sections 1–3, the socket's modes and ownership, the
//! connection limit, and `toold check-config`.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_protocol::time::parse_rfc3339;
use toold_protocol::{ErrorObject, Framing, RequestError};
use toold_tests::daemon::{RawConnection, TestClient, TestDaemon, Wire, no_answers};

/// How long any single answer may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

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

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

/// Runs a `toold` command to its end (bounded by the patience); returns its status and stderr.
fn run_to_end(mut command: Command) -> (ExitStatus, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toold");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for toold") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("toold did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stdout, stderr)
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

/// initialize, session/create and a read_file batch on a raw connection, checked to the field.
async fn full_exchange(daemon: &TestDaemon, wire: Wire) -> RawConnection {
    let mut connection = RawConnection::connect(&daemon.socket(), wire).await;
    let init = connection.initialize().await;
    assert_eq!(init["protocol_version"], 1);
    assert_eq!(init["server_info"]["name"], "toold");
    assert!(init["instance_id"].is_string());
    let started_at = init["started_at"].as_str().expect("started_at");
    assert!(parse_rfc3339(started_at).is_some(), "{started_at}");
    let session_id = session_with_a_file(daemon, &mut connection).await;
    let executed = connection
        .call_ok(
            2,
            "tools/execute",
            json!({"session_id": session_id, "calls": [read_file_call("call_a", "hello.txt")]}),
        )
        .await;
    let results = executed["results"].as_array().expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["call_id"], "call_a");
    let result = &results[0]["result"];
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["tool"], "read_file");
    assert_eq!(result["content"], "first line\nsecond line\n");
    assert_eq!(result["metadata"]["call_id"], "call_a");
    assert_eq!(result["metadata"]["total_lines"], 2);
    connection
}

// ---------------------------------------------------------------------------------------------
// Both framings.

#[tokio::test]
async fn a_full_exchange_over_ndjson_in_raw_bytes() {
    let daemon = TestDaemon::start();
    full_exchange(&daemon, Wire::Ndjson).await;
}

#[tokio::test]
async fn a_full_exchange_over_lsp_framing_with_crlf_headers() {
    let daemon = TestDaemon::start();
    let connection = full_exchange(&daemon, Wire::Lsp { crlf: true }).await;
    let headers = connection.last_headers.to_ascii_lowercase();
    assert!(
        headers.starts_with("content-length: ") && headers.ends_with("\r\n\r\n"),
        "the reply is LSP-framed: {headers:?}"
    );
}

#[tokio::test]
async fn a_full_exchange_over_lsp_framing_with_lf_headers() {
    let daemon = TestDaemon::start();
    full_exchange(&daemon, Wire::Lsp { crlf: false }).await;
}

#[tokio::test]
async fn lsp_header_names_are_case_insensitive_and_blank_lines_between_messages_are_skipped() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}).to_string();
    connection
        .send_bytes(format!("CONTENT-LENGTH: {}\r\n\r\n{initialize}", initialize.len()).as_bytes())
        .await;
    assert_eq!(connection.response().await["result"]["protocol_version"], 1);

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "session/list"}).to_string();
    connection
        .send_bytes(
            format!(
                "\r\ncontent-type: application/json\r\ncontent-length:{}  \r\n\r\n{list}",
                list.len()
            )
            .as_bytes(),
        )
        .await;
    let response = connection.response().await;
    assert_eq!(response["id"], 2);
    assert_eq!(response["result"]["sessions"], json!([]));
}

#[tokio::test]
async fn the_client_library_speaks_lsp_framing_to_the_daemon() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("notes.md"), "# notes\n").expect("fixture");
    let client = TestClient::connect(&daemon.socket(), Framing::Lsp, json!({}), no_answers()).await;
    let session_id = client.create_session(&daemon.work(), json!({})).await;
    let executed = client
        .request(
            "tools/execute",
            json!({"session_id": session_id, "calls": [read_file_call("c1", "notes.md")]}),
        )
        .await
        .expect("tools/execute");
    assert_eq!(executed["results"][0]["result"]["content"], "# notes\n");
}

#[tokio::test]
async fn a_byte_order_mark_and_leading_whitespace_before_the_first_message_are_skipped() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.send_bytes(b"\xEF\xBB\xBF \n\t").await;
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

// ---------------------------------------------------------------------------------------------
// Every client→server method.

#[tokio::test]
async fn initialize_refuses_an_unsupported_version_and_a_second_handshake() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let refused = connection
        .call(1, "initialize", json!({"protocol_version": 2}))
        .await;
    assert_eq!(code_of(&refused), INVALID_PARAMS);
    assert_eq!(refused["error"]["data"]["supported"], json!([1]));

    // The refused handshake left the connection uninitialized: version 1 still works once.
    let init = connection
        .call_ok(
            2,
            "initialize",
            json!({"protocol_version": 1, "client_info": {"name": "raw"}, "capabilities": {"approvals": true}}),
        )
        .await;
    assert_eq!(init["capabilities"]["client_tools"], true);
    assert!(
        !init["capabilities"]["modes"]
            .as_array()
            .expect("modes")
            .contains(&json!("bypass")),
        "bypass is not offered without allow_bypass: {init}"
    );
    let again = connection
        .call(3, "initialize", json!({"protocol_version": 1}))
        .await;
    assert!(again.get("error").is_some(), "a second initialize: {again}");
    assert_eq!(
        connection.call_ok(4, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn every_session_method_answers() {
    let daemon = TestDaemon::start();
    let sub = daemon.work().join("sub");
    std::fs::create_dir(&sub).expect("sub directory");
    let mut owner = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    owner.initialize().await;
    let created = owner
        .call_ok(
            1,
            "session/create",
            json!({"cwd": daemon.work(), "title": "wire", "allowed_tools": ["read_file"],
                   "rules": {"deny": ["run_command(rm *)"]}, "timeout_ms": 5000,
                   "on_disconnect": "continue"}),
        )
        .await;
    let session_id = created["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    assert_eq!(created["title"], "wire");
    assert_eq!(created["cwd"], json!(daemon.work()));
    assert_eq!(created["roots"], json!([daemon.work()]));
    assert_eq!(created["mode"], "default");
    assert_eq!(created["allowed_tools"], json!(["read_file"]));
    assert_eq!(created["rules"]["deny"], json!(["run_command(rm *)"]));
    assert_eq!(created["env"]["timeout_ms"], 5000);
    assert_eq!(created["attached"], 1);
    assert_eq!(created["running_batches"], json!([]));
    assert_eq!(created["grants"], json!([]));
    assert!(created["created_at"].is_string());

    let got = owner
        .call_ok(2, "session/get", json!({"session_id": session_id}))
        .await;
    assert_eq!(got["session_id"], json!(session_id));

    let updated = owner
        .call_ok(
            3,
            "session/update",
            json!({"session_id": session_id, "mode": "plan", "title": null, "roots": [daemon.work(), sub]}),
        )
        .await;
    assert_eq!(updated["mode"], "plan");
    assert_eq!(updated["title"], Value::Null);
    assert_eq!(updated["roots"].as_array().expect("roots").len(), 2);

    let mut other = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    other.initialize().await;
    let attached = other
        .call_ok(1, "session/attach", json!({"session_id": session_id}))
        .await;
    assert_eq!(attached["attached"], 2);
    let listed = other.call_ok(2, "session/list", json!({})).await;
    let sessions = listed["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["session_id"], json!(session_id));

    assert_eq!(
        other
            .call_ok(3, "session/detach", json!({"session_id": session_id}))
            .await,
        json!({})
    );
    let after_detach = owner
        .call_ok(4, "session/get", json!({"session_id": session_id}))
        .await;
    assert_eq!(after_detach["attached"], 1);

    assert_eq!(
        owner
            .call_ok(5, "session/close", json!({"session_id": session_id}))
            .await,
        json!({})
    );
    let gone = owner
        .call(6, "session/get", json!({"session_id": session_id}))
        .await;
    assert_eq!(code_of(&gone), UNKNOWN_SESSION);
    assert_eq!(
        owner.call_ok(7, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

fn tool_names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[tokio::test]
async fn tools_list_filters_by_session_allowed_names_and_safety() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let everything = client
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    let names = tool_names(&everything);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");
    for builtin in [
        "edit_file",
        "find_files",
        "read_file",
        "run_command",
        "search_code",
        "write_file",
    ] {
        assert!(
            names.contains(&builtin.to_owned()),
            "{builtin} in {names:?}"
        );
    }
    assert!(everything["revision"].is_u64());
    let read_file = &everything["tools"][names.iter().position(|n| n == "read_file").unwrap()];
    assert_eq!(read_file["safety"], "read_only");
    assert_eq!(read_file["source"], "builtin");
    assert!(read_file["input_schema"].is_object());

    let read_only = client
        .request("tools/list", json!({"safety": "read_only"}))
        .await
        .expect("tools/list by safety");
    assert_eq!(
        tool_names(&read_only),
        ["find_files", "read_file", "search_code"]
    );

    let allowed = client
        .request(
            "tools/list",
            json!({"allowed": ["write_file", "read_file"]}),
        )
        .await
        .expect("tools/list by name");
    assert_eq!(tool_names(&allowed), ["read_file", "write_file"]);

    let narrow = client
        .create_session(
            &daemon.work(),
            json!({"allowed_tools": ["run_command", "read_file"]}),
        )
        .await;
    let seen = client
        .request("tools/list", json!({"session_id": narrow}))
        .await
        .expect("tools/list for a session");
    assert_eq!(tool_names(&seen), ["read_file", "run_command"]);
    let seen_read_only = client
        .request(
            "tools/list",
            json!({"session_id": narrow, "safety": "read_only"}),
        )
        .await
        .expect("tools/list for a session by safety");
    assert_eq!(tool_names(&seen_read_only), ["read_file"]);

    let planning = client
        .create_session(&daemon.work(), json!({"mode": "plan"}))
        .await;
    let planned = client
        .request("tools/list", json!({"session_id": planning}))
        .await
        .expect("tools/list in plan mode");
    assert_eq!(
        tool_names(&planned),
        ["find_files", "read_file", "search_code"]
    );

    let unknown = rpc_error(
        client
            .request("tools/list", json!({"session_id": "s_nope"}))
            .await,
    );
    assert_eq!(i64::from(unknown.code), UNKNOWN_SESSION);
}

fn echo_tool(name: &str) -> Value {
    json!({"name": name, "description": "echoes", "safety": "read_only",
           "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}})
}

#[tokio::test]
async fn tools_register_needs_the_client_tools_capability() {
    let daemon = TestDaemon::start();
    let plain = daemon.connect(json!({}), no_answers()).await;
    let refused = rpc_error(
        plain
            .request("tools/register", json!({"tools": [echo_tool("echo")]}))
            .await,
    );
    assert_eq!(i64::from(refused.code), INVALID_PARAMS);
    assert!(
        refused.message.contains("client_tools"),
        "{}",
        refused.message
    );

    let mut owner = daemon
        .connect(json!({"client_tools": true}), no_answers())
        .await;
    let before = plain
        .request("tools/list", json!({}))
        .await
        .expect("tools/list")["revision"]
        .as_u64()
        .expect("revision");
    let registered = owner
        .request("tools/register", json!({"tools": [echo_tool("echo")]}))
        .await
        .expect("tools/register");
    let revision = registered["revision"].as_u64().expect("revision");
    assert!(revision > before);
    let changed = owner.next_notification().await;
    assert_eq!(changed.method, "tools/list_changed");
    let listed = plain
        .request("tools/list", json!({"allowed": ["echo"]}))
        .await
        .expect("tools/list");
    assert_eq!(listed["tools"][0]["source"], "client");

    let duplicate = rpc_error(
        owner
            .request("tools/register", json!({"tools": [echo_tool("read_file")]}))
            .await,
    );
    assert_eq!(i64::from(duplicate.code), INVALID_PARAMS);
    assert!(
        duplicate.message.contains("read_file"),
        "{}",
        duplicate.message
    );

    let foreign = rpc_error(
        plain
            .request("tools/unregister", json!({"names": ["echo"]}))
            .await,
    );
    assert_eq!(i64::from(foreign.code), INVALID_PARAMS);
    let unregistered = owner
        .request("tools/unregister", json!({"names": ["echo"]}))
        .await
        .expect("tools/unregister");
    assert!(unregistered["revision"].as_u64().expect("revision") > revision);
    let gone = plain
        .request("tools/list", json!({"allowed": ["echo"]}))
        .await
        .expect("tools/list");
    assert_eq!(gone["tools"], json!([]));
}

/// A session whose `sleep` commands run without asking; the call runs until canceled.
fn sleeping_batch(session_id: &str) -> Value {
    json!({"session_id": session_id, "calls": [
        {"id": "nap", "name": "run_command", "arguments": {"command": "sleep 60"}},
        read_file_call("after", "hello.txt"),
    ]})
}

/// Reads notifications until the `tool/call_start` of `call_id`.
async fn wait_for_call_start(connection: &mut RawConnection, call_id: &str) {
    loop {
        let message = connection.receive().await;
        assert!(
            message.get("method").is_some(),
            "no response before the call started: {message}"
        );
        if message["method"] == "tool/call_start" && message["params"]["call"]["id"] == call_id {
            return;
        }
    }
}

fn assert_canceled_batch(response: &Value) {
    let results = response["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("results: {response}"));
    assert_eq!(results.len(), 2, "one result per call: {response}");
    assert_eq!(results[0]["call_id"], "nap");
    assert_eq!(results[0]["result"]["error_type"], "canceled");
    assert_eq!(results[1]["call_id"], "after");
    assert_eq!(results[1]["result"]["error_type"], "canceled");
}

async fn session_allowing_sleep(daemon: &TestDaemon, connection: &mut RawConnection) -> String {
    std::fs::write(daemon.work().join("hello.txt"), "hi\n").expect("fixture");
    let snapshot = connection
        .call_ok(
            1,
            "session/create",
            json!({"cwd": daemon.work(), "rules": {"allow": ["run_command(sleep *)"]}}),
        )
        .await;
    snapshot["session_id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn tools_cancel_ends_a_running_batch_with_every_result() {
    let daemon = TestDaemon::start();
    let mut submitter = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    submitter.initialize().await;
    let session_id = session_allowing_sleep(&daemon, &mut submitter).await;

    let mut canceler = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    canceler.initialize().await;
    let nothing = canceler
        .call_ok(1, "tools/cancel", json!({"session_id": session_id}))
        .await;
    assert_eq!(nothing["canceled"], json!([]));

    submitter
        .send(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/execute", "params": sleeping_batch(&session_id)}))
        .await;
    wait_for_call_start(&mut submitter, "nap").await;
    let canceled = canceler
        .call_ok(2, "tools/cancel", json!({"session_id": session_id}))
        .await;
    let mut ids: Vec<String> = serde_json::from_value(canceled["canceled"].clone()).expect("ids");
    ids.sort();
    assert_eq!(ids, ["after", "nap"]);
    let response = submitter.response().await;
    assert_eq!(response["id"], 7);
    assert_canceled_batch(&response);
}

#[tokio::test]
async fn cancel_request_naming_an_execute_cancels_its_batch_which_still_answers() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let session_id = session_allowing_sleep(&daemon, &mut connection).await;
    connection
        .send(&json!({"jsonrpc": "2.0", "id": "exec-1", "method": "tools/execute", "params": sleeping_batch(&session_id)}))
        .await;
    wait_for_call_start(&mut connection, "nap").await;
    // A notification: nothing answers it, the request it names does.
    connection
        .send(&json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": "exec-1"}}))
        .await;
    let response = connection.response().await;
    assert_eq!(response["id"], "exec-1");
    assert_canceled_batch(&response);
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test]
async fn garbage_and_invalid_utf8_get_parse_errors_and_the_connection_stays_usable() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;

    connection.send_bytes(b"{this is not json\n").await;
    let garbage = connection.receive().await;
    assert_eq!(code_of(&garbage), PARSE_ERROR);
    assert_eq!(garbage["id"], Value::Null);

    connection
        .send_bytes(
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"session/list\",\"x\":\"\xff\xfe\"}\n",
        )
        .await;
    let invalid_utf8 = connection.receive().await;
    assert_eq!(code_of(&invalid_utf8), PARSE_ERROR);
    assert_eq!(invalid_utf8["id"], Value::Null);

    assert_eq!(
        connection.call_ok(6, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn invalid_json_in_an_lsp_frame_is_a_parse_error_in_lsp_framing() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection.send_frame(b"[1, 2,").await;
    let garbage = connection.receive().await;
    assert_eq!(code_of(&garbage), PARSE_ERROR);
    assert_eq!(garbage["id"], Value::Null);
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

#[tokio::test]
async fn lsp_headers_without_content_length_are_an_invalid_request_then_a_close() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection
        .send_bytes(b"Content-Type: application/json\r\n\r\n{}")
        .await;
    let answer = connection.receive().await;
    assert_eq!(code_of(&answer), INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    assert!(
        answer["error"]["message"]
            .as_str()
            .expect("message")
            .contains("Content-Length"),
        "{answer}"
    );
    assert_eq!(connection.receive_or_closed().await, None, "then the close");
}

#[tokio::test]
async fn an_empty_lsp_body_is_a_parse_error_and_the_connection_goes_on() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection.send_bytes(b"Content-Length: 0\r\n\r\n").await;
    let answer = connection.receive().await;
    assert_eq!(code_of(&answer), PARSE_ERROR, "{answer}");
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

#[tokio::test]
async fn a_first_byte_that_chooses_no_framing_closes_the_connection_unanswered() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.send_bytes(b"\x00\x01garbage\n").await;
    assert_eq!(connection.receive_or_closed().await, None);
    let client = daemon.connect(json!({}), no_answers()).await;
    client
        .request("session/list", json!({}))
        .await
        .expect("the daemon still serves");
}

#[tokio::test]
async fn unknown_capabilities_in_initialize_are_invalid_params() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let unknown = connection
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {"approval": true}}),
        )
        .await;
    assert_invalid_params_naming(&unknown, "approval");
    let unknown_hook = connection
        .call(
            2,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {"hooks": ["on_everything"]}}),
        )
        .await;
    assert_eq!(code_of(&unknown_hook), INVALID_PARAMS, "{unknown_hook}");
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

#[tokio::test]
async fn well_formed_messages_that_are_not_requests_are_invalid_requests() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    for message in [
        json!({"jsonrpc": "2.0"}),
        json!([]),
        json!(42),
        json!({"jsonrpc": "1.0", "id": 3, "method": "session/list"}),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "session/list"}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": "text"}),
    ] {
        connection.send(&message).await;
        let answer = connection.receive().await;
        assert_eq!(code_of(&answer), INVALID_REQUEST, "for {message}: {answer}");
    }
    assert_eq!(
        connection.call_ok(9, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn a_20_mb_line_closes_its_connection_while_another_is_served_during_and_after() {
    let daemon = TestDaemon::start();
    let bystander = daemon.connect(json!({}), no_answers()).await;
    let mut flooder = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    flooder.initialize().await;

    // A string member 20 MB long: the first half, a request elsewhere, then the rest.
    let half = vec![b'a'; 10 * 1024 * 1024];
    flooder
        .send_bytes(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\",\"params\":{\"pad\":\"",
        )
        .await;
    flooder.send_bytes(&half).await;
    let during = bystander
        .request("session/list", json!({}))
        .await
        .expect("served while the other connection floods");
    assert_eq!(during["sessions"], json!([]));
    // The daemon may close the connection before it has read everything: a refused write is
    // part of the expected outcome.
    let mut rest = half;
    rest.extend_from_slice(b"\"}}\n");
    flooder.try_send_bytes(&rest).await;

    let answer = flooder
        .receive_or_closed()
        .await
        .expect("an answer before the close");
    assert_eq!(code_of(&answer), INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    assert!(
        answer["error"]["message"]
            .as_str()
            .expect("message")
            .contains("too large"),
        "{answer}"
    );
    assert_eq!(flooder.receive_or_closed().await, None, "then the close");

    let after = bystander
        .request("session/list", json!({}))
        .await
        .expect("served after the other connection was closed");
    assert_eq!(after["sessions"], json!([]));
    let fresh = daemon.connect(json!({}), no_answers()).await;
    fresh
        .request("session/list", json!({}))
        .await
        .expect("a new connection is served too");
}

#[tokio::test]
async fn a_request_before_initialize_is_refused_and_an_unknown_method_is_not_found() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let early = connection.call(1, "session/list", json!({})).await;
    assert_eq!(code_of(&early), NOT_INITIALIZED);
    let early_unknown = connection.call(2, "no/such", json!({})).await;
    assert_eq!(code_of(&early_unknown), NOT_INITIALIZED);
    connection.initialize().await;
    let unknown = connection.call(3, "no/such", json!({})).await;
    assert_eq!(code_of(&unknown), METHOD_NOT_FOUND);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .expect("message")
            .contains("no/such"),
        "{unknown}"
    );
}

/// Asserts a `-32602` whose message names `field`.
fn assert_invalid_params_naming(response: &Value, field: &str) {
    assert_eq!(code_of(response), INVALID_PARAMS, "{response}");
    let message = response["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(field),
        "the message names {field:?}: {message}"
    );
}

#[tokio::test]
async fn bad_params_are_invalid_params_naming_the_field() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let work = daemon.work();

    let unknown_field = connection
        .call(1, "session/create", json!({"cwd": work, "time_out_ms": 10}))
        .await;
    assert_invalid_params_naming(&unknown_field, "time_out_ms");

    let wrong_type = connection
        .call(
            2,
            "session/create",
            json!({"cwd": work, "timeout_ms": "soon"}),
        )
        .await;
    assert_invalid_params_naming(&wrong_type, "timeout_ms");

    let relative = connection
        .call(3, "session/create", json!({"cwd": "relative/dir"}))
        .await;
    assert_invalid_params_naming(&relative, "cwd");

    let missing = connection
        .call(
            4,
            "session/create",
            json!({"cwd": work.join("does-not-exist")}),
        )
        .await;
    assert_invalid_params_naming(&missing, "cwd");

    let no_cwd = connection.call(5, "session/create", json!({})).await;
    assert_invalid_params_naming(&no_cwd, "cwd");

    let bad_root = connection
        .call(
            6,
            "session/create",
            json!({"cwd": work, "roots": ["not/absolute"]}),
        )
        .await;
    assert_invalid_params_naming(&bad_root, "roots");

    let bad_mode = connection
        .call(7, "session/create", json!({"cwd": work, "mode": "yolo"}))
        .await;
    assert_invalid_params_naming(&bad_mode, "mode");

    let bad_safety = connection
        .call(8, "tools/list", json!({"safety": "dangerous"}))
        .await;
    assert_invalid_params_naming(&bad_safety, "safety");

    let nested = connection
        .call(
            10,
            "session/create",
            json!({"cwd": work, "rules": {"allow": "read_file"}}),
        )
        .await;
    assert_invalid_params_naming(&nested, "rules");

    // Nothing was created by the refused requests.
    assert_eq!(
        connection.call_ok(9, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn an_unknown_session_is_reported_by_every_method_that_names_one() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let nobody = json!({"session_id": "s_missing"});
    for (id, method, params) in [
        (1, "session/attach", nobody.clone()),
        (2, "session/detach", nobody.clone()),
        (
            3,
            "session/update",
            json!({"session_id": "s_missing", "mode": "plan"}),
        ),
        (4, "session/get", nobody.clone()),
        (5, "session/close", nobody.clone()),
        (6, "tools/cancel", nobody.clone()),
        (
            7,
            "tools/execute",
            json!({"session_id": "s_missing", "calls": [read_file_call("a", "x")]}),
        ),
    ] {
        let response = connection.call(id, method, params).await;
        assert_eq!(code_of(&response), UNKNOWN_SESSION, "{method}: {response}");
    }
}

#[tokio::test]
async fn duplicate_call_ids_in_a_batch_are_invalid_params() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let session_id = session_with_a_file(&daemon, &mut connection).await;
    let response = connection
        .call(
            2,
            "tools/execute",
            json!({"session_id": session_id, "calls": [
                read_file_call("same", "hello.txt"),
                read_file_call("same", "hello.txt"),
            ]}),
        )
        .await;
    assert_invalid_params_naming(&response, "same");
    let snapshot = connection
        .call_ok(3, "session/get", json!({"session_id": session_id}))
        .await;
    assert_eq!(snapshot["last_seq"], 0, "no batch ran: {snapshot}");
}

#[tokio::test]
async fn a_batch_of_requests_is_answered_with_an_array_in_order() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let session_id = session_with_a_file(&daemon, &mut connection).await;
    connection
        .send(&json!([
            {"jsonrpc": "2.0", "id": "x", "method": "tools/execute", "params":
                {"session_id": session_id, "calls": [read_file_call("r", "hello.txt")]}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/get", "params": {"session_id": session_id}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 999}},
            {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
            {"jsonrpc": "2.0", "id": 4, "method": "session/list"},
        ]))
        .await;
    let answer = connection.response().await;
    let entries = answer
        .as_array()
        .unwrap_or_else(|| panic!("an array: {answer}"));
    let ids: Vec<&Value> = entries.iter().map(|entry| &entry["id"]).collect();
    assert_eq!(ids, [&json!("x"), &json!(2), &json!(3), &json!(4)]);
    assert_eq!(
        entries[0]["result"]["results"][0]["result"]["content"],
        "first line\nsecond line\n"
    );
    assert_eq!(entries[1]["result"]["session_id"], json!(session_id));
    assert_eq!(code_of(&entries[2]), METHOD_NOT_FOUND);
    assert_eq!(
        entries[3]["result"]["sessions"].as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn bypass_mode_is_refused_unless_the_config_allows_it() {
    let strict = TestDaemon::start();
    let mut connection = RawConnection::connect(&strict.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let refused = connection
        .call(
            1,
            "session/create",
            json!({"cwd": strict.work(), "mode": "bypass"}),
        )
        .await;
    assert_invalid_params_naming(&refused, "allow_bypass");
    let created = connection
        .call_ok(2, "session/create", json!({"cwd": strict.work()}))
        .await;
    let refused_update = connection
        .call(
            3,
            "session/update",
            json!({"session_id": created["session_id"], "mode": "bypass"}),
        )
        .await;
    assert_invalid_params_naming(&refused_update, "allow_bypass");

    let lenient = TestDaemon::start_with_config(Some("allow_bypass = true\n"));
    let mut connection = RawConnection::connect(&lenient.socket(), Wire::Ndjson).await;
    let init = connection.initialize().await;
    assert!(
        init["capabilities"]["modes"]
            .as_array()
            .expect("modes")
            .contains(&json!("bypass")),
        "{init}"
    );
    let accepted = connection
        .call_ok(
            1,
            "session/create",
            json!({"cwd": lenient.work(), "mode": "bypass"}),
        )
        .await;
    assert_eq!(accepted["mode"], "bypass");
}

// ---------------------------------------------------------------------------------------------
// The socket.

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    let daemon = TestDaemon::start();
    let socket = daemon.socket();
    assert_eq!(mode_of(&socket), 0o600);
    assert_eq!(mode_of(socket.parent().expect("its directory")), 0o700);
}

#[tokio::test]
async fn a_second_daemon_on_a_live_socket_exits_with_a_clear_error() {
    let daemon = TestDaemon::start();
    let mut command = daemon.command();
    command.arg("serve").arg("--allow-root");
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "the second daemon exited with {status}");
    assert!(stderr.contains("already serving"), "{stderr}");
    // The first one is unharmed.
    let client = daemon.connect(json!({}), no_answers()).await;
    client
        .request("session/list", json!({}))
        .await
        .expect("the first daemon still serves");
}

#[tokio::test]
async fn a_stale_socket_left_by_a_killed_daemon_is_replaced() {
    let mut daemon = TestDaemon::start();
    let first_instance = {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        connection.initialize().await["instance_id"].clone()
    };
    daemon.kill();
    assert!(
        daemon.socket().exists(),
        "SIGKILL leaves the socket file behind"
    );
    daemon.start_again();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let init = connection.initialize().await;
    assert_ne!(init["instance_id"], first_instance, "a new daemon answers");
    assert_eq!(mode_of(&daemon.socket()), 0o600);
}

// ---------------------------------------------------------------------------------------------
// The connection limit.

/// A raw connection that the daemon serves, retried while the daemon still counts connections
/// that are closing (such as the harness's readiness probe, which connects and leaves at once).
async fn served_connection(daemon: &TestDaemon) -> RawConnection {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        let response = connection
            .call(0, "initialize", json!({"protocol_version": 1}))
            .await;
        if response.get("error").is_none() {
            return connection;
        }
        assert_eq!(code_of(&response), OVERLOADED, "{response}");
        assert!(Instant::now() < deadline, "never served: {response}");
        drop(connection);
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn connections_over_max_connections_are_refused_as_overloaded() {
    let daemon = TestDaemon::start_with_config(Some("max_connections = 2\n"));
    let mut first = served_connection(&daemon).await;
    let mut second = served_connection(&daemon).await;
    let mut third = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let refused = third
        .call(1, "initialize", json!({"protocol_version": 1}))
        .await;
    assert_eq!(code_of(&refused), OVERLOADED, "{refused}");
    let refused_again = third.call(2, "session/list", json!({})).await;
    assert_eq!(code_of(&refused_again), OVERLOADED);
    assert_eq!(
        first.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );
    assert_eq!(
        second.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );

    // Once the refused one and a served one leave, their slots are free again.
    drop(third);
    drop(first);
    let mut later = served_connection(&daemon).await;
    assert_eq!(
        later.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn a_burst_of_connections_cannot_exceed_max_connections() {
    let daemon = TestDaemon::start_with_config(Some("max_connections = 2\n"));
    let mut served = served_connection(&daemon).await;
    // Three connections at once: only the first of them fits.
    let mut burst = Vec::new();
    for _ in 0..3 {
        burst.push(RawConnection::connect(&daemon.socket(), Wire::Ndjson).await);
    }
    let mut codes = Vec::new();
    for connection in &mut burst {
        let response = connection
            .call(1, "initialize", json!({"protocol_version": 1}))
            .await;
        codes.push(response.get("error").map(|_| code_of(&response)));
    }
    // At most the one free slot is used: the others are refused. (The slot of a connection
    // that just left, such as the start-up probe, may still be held: then none is served.)
    let served_in_burst = codes.iter().filter(|code| code.is_none()).count();
    assert!(served_in_burst <= 1, "{codes:?}");
    assert!(
        codes
            .iter()
            .all(|code| code.is_none() || *code == Some(OVERLOADED)),
        "{codes:?}"
    );
    served.call_ok(1, "session/list", json!({})).await;
}

// ---------------------------------------------------------------------------------------------
// toold check-config.

#[tokio::test]
async fn check_config_accepts_a_good_file_and_names_the_key_of_a_bad_one() {
    let daemon = TestDaemon::start();
    let good = daemon.root().join("good.toml");
    std::fs::write(&good, "max_connections = 8\nallow_bypass = true\n").expect("good file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&good);
    let (status, stdout, stderr) = run_to_end(command);
    assert!(status.success(), "{status}: {stderr}");
    assert!(stdout.contains("valid"), "{stdout}");

    let wrong_type = daemon.root().join("wrong-type.toml");
    std::fs::write(&wrong_type, "max_connections = \"many\"\n").expect("bad file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&wrong_type);
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "a bad file is refused");
    assert!(stderr.contains("max_connections"), "{stderr}");

    let unknown_key = daemon.root().join("unknown-key.toml");
    std::fs::write(&unknown_key, "max_conections = 2\n").expect("bad file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&unknown_key);
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "an unknown key is refused");
    assert!(stderr.contains("max_conections"), "{stderr}");
}

/// Requests written right behind `initialize`, in the same write, wait for it: none is refused
/// as "not initialized", whatever order their handlers run in.
#[tokio::test]
async fn requests_written_right_behind_initialize_are_served() {
    let daemon = TestDaemon::start();
    for _ in 0..20 {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        let mut burst = String::new();
        burst.push_str(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}).to_string());
        burst.push('\n');
        for id in 2..6 {
            burst.push_str(
                &json!({"jsonrpc": "2.0", "id": id, "method": "session/list"}).to_string(),
            );
            burst.push('\n');
        }
        connection.send_bytes(burst.as_bytes()).await;
        for _ in 1..6 {
            let response = connection.receive().await;
            assert!(response.get("result").is_some(), "{response}");
        }
    }
}

/// `initialize` says when the daemon process started (RFC 3339, to the second): between just
/// before it was started and now, and later for a daemon started again.
#[tokio::test]
async fn initialize_says_when_the_daemon_started() {
    let started_at = |init: &Value| {
        let text = init["started_at"].as_str().expect("started_at").to_owned();
        parse_rfc3339(&text).unwrap_or_else(|| panic!("not RFC 3339: {text}"))
    };
    // The daemon writes whole seconds: the earliest it can say is this second's start.
    let before = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let first = started_at(&connection.initialize().await);
    assert!(
        before <= first && first <= std::time::SystemTime::now(),
        "{first:?} is not between {before:?} and now"
    );
    drop(connection);

    // A second apart at least, so that the whole seconds differ.
    std::thread::sleep(Duration::from_millis(1100));
    daemon.restart();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let again = started_at(&connection.initialize().await);
    assert!(again > first, "{again:?} is not after {first:?}");
}
