//! Client tools: announced, invoked and answered; a taken name refused; a tool that never
//! answers timed out; tools that leave with their connection or their owner mid-call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_protocol::{ErrorObject, RequestError};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, tool_names};

use super::{answering, params_of, result_of};
use toold_tests::PATIENCE;

/// How the owner of the client tools answers `tool/invoke`, by tool name.
fn client_tool_answer(method: &str, params: &Value) -> Option<Reply> {
    if method != "tool/invoke" {
        return Some(Reply::error(ErrorObject::method_not_found(method)));
    }
    match params["call"]["name"].as_str() {
        Some("e2e_echo") => Some(Reply::result(json!({
            "ok": true,
            "tool": "e2e_echo",
            "content": format!("echo: {}", params["call"]["arguments"]["text"].as_str().unwrap_or("")),
            "metadata": {"answered_by": "owner"},
        }))),
        Some("e2e_fail") => Some(Reply::error(ErrorObject::internal_error(
            "the client tool broke",
        ))),
        Some("e2e_hang") => None,
        _ => Some(Reply::error(ErrorObject::invalid_params("unknown tool"))),
    }
}

fn client_tool(name: &str) -> Value {
    json!({
        "name": name,
        "description": "a tool the test's connection runs",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "safety": "read_only",
    })
}

async fn next_list_changed(client: &mut TestClient) -> u64 {
    let notification = client
        .next_notification_matching(|n| n.method == "tools/list_changed")
        .await;
    params_of(&notification.params)["revision"]
        .as_u64()
        .expect("a revision")
}

#[tokio::test]
async fn a_client_tool_is_announced_invoked_and_answers() {
    let daemon = TestDaemon::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut owner = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    let mut caller = daemon.connect(json!({}), no_answers()).await;
    let before = caller.list_tools(json!({})).await["revision"]
        .as_u64()
        .expect("a revision");

    let registered = owner
        .request(
            "tools/register",
            json!({"tools": [client_tool("e2e_echo"), client_tool("e2e_fail")]}),
        )
        .await
        .expect("tools/register");
    let revision = registered["revision"].as_u64().expect("a revision");
    assert!(revision > before, "{revision} after {before}");
    assert_eq!(next_list_changed(&mut caller).await, revision);
    assert_eq!(next_list_changed(&mut owner).await, revision);
    let list = caller.list_tools(json!({})).await;
    let listed = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["name"] == "e2e_echo")
        .expect("e2e_echo is listed");
    assert_eq!(listed["source"], "client");

    let session_id = caller.create_session(&daemon.work(), json!({})).await;
    let response = caller
        .execute(
            &session_id,
            json!([
                {"id": "echoed", "name": "e2e_echo", "arguments": {"text": "hello"}},
                {"id": "failed", "name": "e2e_fail", "arguments": {}},
            ]),
        )
        .await;
    let echoed = result_of(&response, "echoed");
    assert_eq!(echoed["ok"], true, "{echoed}");
    assert_eq!(echoed["content"], "echo: hello");
    assert_eq!(echoed["metadata"]["call_id"], "echoed");
    assert_eq!(echoed["metadata"]["answered_by"], "owner");
    let failed = result_of(&response, "failed");
    assert_eq!(failed["error_type"], "internal_error", "{failed}");
    let why = failed["error"].as_str().expect("an error");
    assert!(why.contains("the client tool broke"), "{why}");

    let requests = seen.lock().expect("requests");
    let invoke = requests
        .iter()
        .find(|request| params_of(&request.params)["call"]["id"] == "echoed")
        .expect("the owner was invoked");
    assert_eq!(invoke.method, "tool/invoke");
    let params = params_of(&invoke.params);
    assert_eq!(params["session_id"], session_id.as_str());
    assert_eq!(params["batch_id"], response["batch_id"]);
    assert_eq!(
        params["call"],
        json!({"id": "echoed", "name": "e2e_echo", "arguments": {"text": "hello"}})
    );
    let work = daemon.work();
    assert_eq!(params["env"]["cwd"], json!(work));
    assert_eq!(params["env"]["roots"], json!([work]));
    assert!(params["env"]["timeout_ms"].as_u64().is_some(), "{params}");
}

#[tokio::test]
async fn a_taken_tool_name_is_refused_and_replace_only_replaces_ones_own() {
    let daemon = TestDaemon::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let first = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    let second = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    let registered = first
        .request(
            "tools/register",
            json!({"tools": [client_tool("e2e_echo")]}),
        )
        .await
        .expect("tools/register")["revision"]
        .as_u64()
        .expect("a revision");

    let refusals = [
        (&first, json!({"tools": [client_tool("read_file")]})),
        (
            &first,
            json!({"tools": [client_tool("read_file")], "replace": true}),
        ),
        (&second, json!({"tools": [client_tool("e2e_echo")]})),
        (
            &second,
            json!({"tools": [client_tool("e2e_echo")], "replace": true}),
        ),
        // The prefix of the MCP servers' tools, which `allow mcp__fs__*` trusts.
        (
            &second,
            json!({"tools": [client_tool("mcp__fs__read_file")]}),
        ),
    ];
    for (client, params) in refusals {
        let name = params["tools"][0]["name"]
            .as_str()
            .expect("a name")
            .to_owned();
        match client.request("tools/register", params).await {
            Err(RequestError::Rpc(error)) => {
                assert_eq!(error.code, -32602, "{error:?}");
                assert!(error.message.contains(&name), "{}", error.message);
            }
            other => panic!("registering {name} again was not refused: {other:?}"),
        }
    }

    let mut replacement = client_tool("e2e_echo");
    replacement["description"] = json!("replaced by its owner");
    let replaced = first
        .request(
            "tools/register",
            json!({"tools": [replacement], "replace": true}),
        )
        .await
        .expect("replace one's own tool")["revision"]
        .as_u64()
        .expect("a revision");
    assert!(replaced > registered, "{replaced} after {registered}");
    let list = second.list_tools(json!({})).await;
    let echo = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["name"] == "e2e_echo")
        .expect("e2e_echo is listed");
    assert_eq!(echo["description"], "replaced by its owner");
    let read_file = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["name"] == "read_file")
        .expect("read_file is listed");
    assert_eq!(read_file["source"], "builtin");
}

#[tokio::test]
async fn a_client_tool_that_never_answers_times_out_and_its_invoke_is_canceled() {
    let daemon = TestDaemon::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut owner = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    let mut hang = client_tool("e2e_hang");
    hang["timeout_ms"] = json!(300);
    owner
        .request("tools/register", json!({"tools": [hang]}))
        .await
        .expect("tools/register");
    let caller = daemon.connect(json!({}), no_answers()).await;
    let session_id = caller.create_session(&daemon.work(), json!({})).await;

    let response = caller
        .execute(
            &session_id,
            json!([{"id": "stuck", "name": "e2e_hang", "arguments": {}}]),
        )
        .await;
    let stuck = result_of(&response, "stuck");
    assert_eq!(stuck["error_type"], "timeout", "{stuck}");
    assert_eq!(stuck["metadata"]["call_id"], "stuck");

    let invoke_id = {
        let requests = seen.lock().expect("requests");
        let invoke = requests
            .iter()
            .find(|request| request.method == "tool/invoke")
            .expect("the owner was invoked");
        serde_json::to_value(&invoke.id).expect("an id")
    };
    let cancel = owner
        .next_notification_matching(|n| n.method == "$/cancelRequest")
        .await;
    assert_eq!(params_of(&cancel.params)["id"], invoke_id);
}

#[tokio::test]
async fn client_tools_leave_with_their_connection() {
    let daemon = TestDaemon::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let owner = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    let mut other = daemon.connect(json!({}), no_answers()).await;
    let registered = owner
        .request(
            "tools/register",
            json!({"tools": [client_tool("e2e_echo")]}),
        )
        .await
        .expect("tools/register")["revision"]
        .as_u64()
        .expect("a revision");
    assert_eq!(next_list_changed(&mut other).await, registered);

    owner.peer.close();
    let after = next_list_changed(&mut other).await;
    assert!(after > registered, "{after} after {registered}");
    let list = other.list_tools(json!({})).await;
    assert!(!tool_names(&list).contains(&"e2e_echo"), "{list}");
    assert_eq!(list["revision"], after);
}

#[tokio::test]
async fn a_client_tool_whose_owner_leaves_mid_call_is_an_internal_error() {
    let daemon = TestDaemon::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let owner = daemon
        .connect(
            json!({"client_tools": true}),
            answering(Arc::clone(&seen), client_tool_answer),
        )
        .await;
    owner
        .request(
            "tools/register",
            json!({"tools": [client_tool("e2e_hang")]}),
        )
        .await
        .expect("tools/register");
    let caller = daemon.connect(json!({}), no_answers()).await;
    let session_id = caller.create_session(&daemon.work(), json!({})).await;
    let running = tokio::spawn(caller.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": [
            {"id": "orphaned", "name": "e2e_hang", "arguments": {}},
        ]})),
    ));
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !seen
        .lock()
        .expect("requests")
        .iter()
        .any(|request| request.method == "tool/invoke")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the owner was never invoked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    owner.peer.close();
    let response = running
        .await
        .expect("the request task")
        .expect("tools/execute");
    let orphaned = result_of(&response, "orphaned");
    assert_eq!(orphaned["error_type"], "internal_error", "{orphaned}");
    assert_eq!(orphaned["metadata"]["call_id"], "orphaned");
}
