//! Every client→server method after the handshake: the session methods, `tools/list` and
//! `tools/register`, and canceling a running batch by `tools/cancel` or `$/cancelRequest`.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_tests::daemon::{RawConnection, TestDaemon, Wire, no_answers, tool_names};

use super::{INVALID_PARAMS, UNKNOWN_SESSION, code_of, read_file_call, rpc_error};

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

#[tokio::test]
async fn tools_list_filters_by_session_allowed_names_and_safety() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let everything = client.list_tools(json!({})).await;
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
        assert!(names.contains(&builtin), "{builtin} in {names:?}");
    }
    assert!(everything["revision"].is_u64());
    let read_file = &everything["tools"][names.iter().position(|n| *n == "read_file").unwrap()];
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
    let before = plain.list_tools(json!({})).await["revision"]
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
    let listed = plain.list_tools(json!({"allowed": ["echo"]})).await;
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
    let gone = plain.list_tools(json!({"allowed": ["echo"]})).await;
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
