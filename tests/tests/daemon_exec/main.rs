//! `toold serve` end to end, executing: hooks from a client and from the config, client tools,
//! cancellation three ways (with the command's processes gone afterwards), and the drain on
//! SIGTERM. Real daemon process, real socket, real commands.

use std::future::pending;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_protocol::{ErrorObject, Notification, Request, RequestError};
use toold_tests::daemon::{
    Answerer, TestClient, TestDaemon, no_answers, process_alive, send_signal, shell_parser_workers,
};

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

#[tokio::test]
async fn a_client_hook_blocks_allows_rewrites_and_adds_context() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "original\n").expect("a.txt");
    std::fs::write(daemon.work().join("b.txt"), "rewritten\n").expect("b.txt");
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session_id = submitter.create_session(&daemon.work(), json!({})).await;

    let seen = Arc::new(Mutex::new(Vec::new()));
    let hooks = answering(Arc::clone(&seen), |method, params| {
        let call_id = params["call"]["id"].as_str().unwrap_or_default();
        Some(match (method, call_id) {
            ("hook/pre_tool_use", "blocked") => {
                Reply::result(json!({"decision": "block", "reason": "no commands on Fridays"}))
            }
            ("hook/pre_tool_use", "allowed") => Reply::result(json!({"decision": "allow"})),
            ("hook/pre_tool_use", "rewritten") => {
                Reply::result(json!({"decision": "continue", "arguments": {"path": "b.txt"}}))
            }
            ("hook/pre_tool_use", "errored") => {
                Reply::error(ErrorObject::internal_error("the hook crashed"))
            }
            ("hook/pre_tool_use", _) => Reply::result(json!({"decision": "continue"})),
            ("hook/post_tool_use", "context") => {
                Reply::result(json!({"additional_context": "remember the tests"}))
            }
            ("hook/post_tool_use", _) => Reply::result(json!({})),
            (other, _) => Reply::error(ErrorObject::method_not_found(other)),
        })
    });
    let hooker = daemon
        .connect(json!({"hooks": ["pre_tool_use", "post_tool_use"]}), hooks)
        .await;
    hooker
        .request("session/attach", json!({"session_id": session_id}))
        .await
        .expect("attach the hook connection");

    let response = submitter.execute(&session_id,
        json!([
            {"id": "blocked", "name": "run_command", "arguments": {"command": "echo should-not-run"}},
            {"id": "allowed", "name": "run_command", "arguments": {"command": "echo allowed-ran"}},
            {"id": "unhooked", "name": "run_command", "arguments": {"command": "echo needs-approval"}},
            {"id": "rewritten", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "errored", "name": "read_file", "arguments": {"path": "a.txt"}},
            {"id": "context", "name": "read_file", "arguments": {"path": "a.txt"}},
        ]),
    )
    .await;

    let blocked = result_of(&response, "blocked");
    assert_eq!(blocked["error_type"], "hook_blocked", "{blocked}");
    let reason = blocked["error"].as_str().expect("an error");
    assert!(reason.contains("no commands on Fridays"), "{reason}");

    let allowed = result_of(&response, "allowed");
    assert_eq!(allowed["ok"], true, "{allowed}");
    assert_eq!(allowed["content"], "allowed-ran\n");
    // The same kind of call without the hook's allow asks, and nobody approves here.
    let unhooked = result_of(&response, "unhooked");
    assert_eq!(unhooked["error_type"], "permission_denied", "{unhooked}");

    let rewritten = result_of(&response, "rewritten");
    assert_eq!(rewritten["ok"], true, "{rewritten}");
    assert_eq!(rewritten["content"], "rewritten\n");

    let errored = result_of(&response, "errored");
    assert_eq!(errored["error_type"], "hook_blocked", "{errored}");
    let why = errored["error"].as_str().expect("an error");
    assert!(why.contains("the hook crashed"), "{why}");

    let context = result_of(&response, "context");
    assert_eq!(context["ok"], true, "{context}");
    assert_eq!(
        context["metadata"]["additional_context"],
        "remember the tests"
    );
    assert_eq!(context["metadata"]["call_id"], "context");
    assert!(
        result_of(&response, "rewritten")["metadata"]
            .get("additional_context")
            .is_none()
    );

    // The blocked call still has its result events, in order, before the response.
    let events = submitter.drain_notifications();
    let position = |method: &str| {
        events
            .iter()
            .position(|event| is_call_event(event, method, "blocked"))
            .unwrap_or_else(|| panic!("no {method} for the blocked call"))
    };
    assert!(position("tool/result") < position("tool/call_done"));
    let event_result = &params_of(&events[position("tool/result")].params)["result"];
    assert_eq!(event_result["error_type"], "hook_blocked");

    // The hook saw what the protocol promises.
    let requests = seen.lock().expect("requests");
    let pre = requests
        .iter()
        .find(|request| {
            request.method == "hook/pre_tool_use"
                && params_of(&request.params)["call"]["id"] == "rewritten"
        })
        .expect("a PreToolUse request for the rewritten call");
    let pre = params_of(&pre.params);
    assert_eq!(pre["session_id"], session_id.as_str());
    assert_eq!(pre["batch_id"], response["batch_id"]);
    assert_eq!(pre["call"]["arguments"], json!({"path": "a.txt"}));
    assert_eq!(pre["safety"], "read_only");
    assert_eq!(pre["mode"], "default");
    let post = requests
        .iter()
        .find(|request| {
            request.method == "hook/post_tool_use"
                && params_of(&request.params)["call"]["id"] == "blocked"
        })
        .expect("a PostToolUse request even for the blocked call");
    assert_eq!(
        params_of(&post.params)["result"]["error_type"],
        "hook_blocked"
    );
}

/// A PreToolUse hook program: exit 2 with a reason when the call mentions BLOCK_ME, else allow.
const HOOK_SCRIPT: &str = r#"#!/bin/sh
input=$(cat)
case "$input" in
  *BLOCK_ME*) echo "the policy script refuses BLOCK_ME" >&2; exit 2 ;;
esac
echo '{"decision":"allow"}'
"#;

#[tokio::test]
async fn a_configured_hook_program_blocks_and_allows() {
    let scripts = tempfile::tempdir().expect("a directory for the hook");
    let script = scripts.path().join("pre-hook.sh");
    std::fs::write(&script, HOOK_SCRIPT).expect("write the hook");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let config = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"run_command\"\ncommand = [{:?}]\n",
        script.display().to_string()
    );
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let session_id = client.create_session(&daemon.work(), json!({})).await;

    let response = client
        .execute(
            &session_id,
            json!([
                {"id": "refused", "name": "run_command", "arguments": {"command": "echo BLOCK_ME"}},
                {"id": "let_through", "name": "run_command", "arguments": {"command": "echo fine"}},
            ]),
        )
        .await;
    let refused = result_of(&response, "refused");
    assert_eq!(refused["error_type"], "hook_blocked", "{refused}");
    let reason = refused["error"].as_str().expect("an error");
    assert!(
        reason.contains("the policy script refuses BLOCK_ME"),
        "{reason}"
    );
    // Without the hook's allow the command would ask, and nobody could approve it.
    let let_through = result_of(&response, "let_through");
    assert_eq!(let_through["ok"], true, "{let_through}");
    assert_eq!(let_through["content"], "fine\n");
}

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

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name").to_owned())
        .collect()
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
    let before = caller
        .request("tools/list", json!({}))
        .await
        .expect("tools/list")["revision"]
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
    let list = caller
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
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
    let list = second
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
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
    let list = other
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    assert!(
        !tool_names(&list).contains(&"e2e_echo".to_owned()),
        "{list}"
    );
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
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

/// A command that leaves processes behind three ways (a background job, one in a new session,
/// the shell itself) and says `started` once they exist.
const LINGERING_COMMAND: &str = "sleep 300 & setsid sleep 300 & echo started; sleep 300";

/// The variable that tags a test's command processes, found in `/proc/*/environ`.
const MARK_VAR: &str = "E2E_CANCEL_MARK";

fn unique_mark(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Live processes (zombies count as dead) whose environment holds `MARK_VAR=mark`.
fn marked_processes(mark: &str) -> Vec<(u32, String)> {
    let wanted = format!("{MARK_VAR}={mark}");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // The state follows the command name, which is in parentheses and may hold anything.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, Some('Z' | 'X') | None) {
            continue;
        }
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        if environ
            .split(|byte| *byte == 0)
            .any(|variable| variable == wanted.as_bytes())
        {
            let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Waits (at most 5 s) until no process carries the mark.
async fn assert_processes_gone(mark: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let alive = marked_processes(mark);
        if alive.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "processes of the canceled command outlived it: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lingering_call(mark: &str) -> Value {
    json!([{
        "id": "lingering",
        "name": "run_command",
        "arguments": {"command": LINGERING_COMMAND, "env": {MARK_VAR: mark}},
    }])
}

/// Waits on `watcher`'s events until the command said `started`, then until its processes are
/// there to be found (at most 5 s): a background process may still be inside its `execve`,
/// when its `/proc/PID/environ` reads empty, and a loaded machine widens that moment.
async fn wait_until_started(watcher: &mut TestClient, mark: &str) {
    watcher
        .next_notification_matching(|n| {
            is_call_event(n, "tool/output", "lingering")
                && params_of(&n.params)["data"]
                    .as_str()
                    .is_some_and(|data| data.contains("started"))
        })
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let found = marked_processes(mark);
        if found.len() >= 3 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command's processes are not visible: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A daemon, a client and a session in which `run_command` runs without asking.
async fn command_session(daemon: &TestDaemon) -> (TestClient, String) {
    let client = daemon.connect(json!({}), no_answers()).await;
    let session_id = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["run_command"]}}))
        .await;
    (client, session_id)
}

#[tokio::test]
async fn tools_cancel_stops_a_command_and_its_processes() {
    let daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("tools-cancel");
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut client, &mark).await;

    let canceled = client
        .request("tools/cancel", json!({"session_id": session_id}))
        .await
        .expect("tools/cancel");
    assert_eq!(canceled["canceled"], json!(["lingering"]));
    let response = running
        .await
        .expect("the request task")
        .expect("tools/execute");
    let result = result_of(&response, "lingering");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn cancel_request_stops_a_command_and_still_gets_its_response() {
    let daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("cancel-request");
    let request = client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    );
    let request_id = request.id();
    let running = tokio::spawn(request);
    wait_until_started(&mut client, &mark).await;

    client
        .peer
        .notify("$/cancelRequest", Some(json!({"id": request_id})))
        .await
        .expect("send $/cancelRequest");
    let response = running
        .await
        .expect("the request task")
        .expect("tools/execute still answers");
    let result = result_of(&response, "lingering");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn the_submitter_disconnecting_stops_its_command() {
    let daemon = TestDaemon::start();
    let (submitter, session_id) = command_session(&daemon).await;
    let mut watcher = daemon.connect(json!({}), no_answers()).await;
    watcher
        .request("session/attach", json!({"session_id": session_id}))
        .await
        .expect("attach the watcher");
    let mark = unique_mark("disconnect");
    let running = tokio::spawn(submitter.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut watcher, &mark).await;

    submitter.peer.close();
    assert!(
        running.await.expect("the request task").is_err(),
        "a closed connection gets no response"
    );
    let done = watcher
        .next_notification_matching(|n| is_call_event(n, "tool/result", "lingering"))
        .await;
    let result = &params_of(&done.params)["result"];
    assert_eq!(result["error_type"], "canceled", "{result}");
    watcher
        .next_notification_matching(|n| n.method == "batch/done")
        .await;
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn sigterm_lets_a_running_batch_finish_and_keeps_the_session() {
    let mut daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    // The command waits for a file the test creates once the daemon is draining: the batch is
    // then certainly running across the SIGTERM, however slow the machine.
    let gate = daemon.work().join("go");
    let command = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo done",
        gate.display()
    );
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": [
            {"id": "draining", "name": "run_command", "arguments": {"command": command}},
        ]})),
    ));
    client
        .next_notification_matching(|n| {
            n.method == "tool/call_start" && params_of(&n.params)["call"]["id"] == "draining"
        })
        .await;

    daemon.send_sigterm();
    wait_until_refusing(&daemon.socket()).await;
    std::fs::write(&gate, "").expect("open the gate");
    let response = running
        .await
        .expect("the request task")
        .expect("the batch's response arrives during the drain");
    let result = result_of(&response, "draining");
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["content"], "done\n");
    let status = daemon.wait_for_exit().await;
    assert!(status.success(), "the daemon exited with {status}");

    daemon.start_again();
    let client = daemon.connect(json!({}), no_answers()).await;
    let snapshot = client
        .request("session/get", json!({"session_id": session_id}))
        .await
        .expect("the session survived the restart");
    assert_eq!(snapshot["rules"]["allow"], json!(["run_command"]));
    assert_eq!(snapshot["running_batches"], json!([]));
}

/// Waits until the socket refuses connections: the daemon has stopped accepting.
async fn wait_until_refusing(socket: &Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::UnixStream::connect(socket).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon still accepts 30 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stop signals are listened for before the socket exists: a SIGTERM sent the moment the
/// first answer arrives (a script, or systemd stopping a unit it just started) drains and
/// exits 0 instead of killing the daemon. Repeated, because the window was a race.
#[test]
fn a_sigterm_right_after_the_first_answer_drains_and_exits_0() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    for attempt in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = root.join("run/toold/toold.sock");
        let mut child = toold_tests::daemon::toold_command_in(root)
            .args(["serve", "--allow-root"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(err) => panic!("attempt {attempt}: the daemon never served: {err}"),
            }
        };
        (&stream)
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"capabilities\":{}}}\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        assert!(line.contains("\"result\""), "attempt {attempt}: {line}");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "attempt {attempt}: the daemon exited with {status}"
        );
    }
}

/// The hook connection leaves while the daemon waits for its PreToolUse answer: the call is
/// `hook_blocked` at once (not after the hook timeout), and the daemon serves on.
#[tokio::test]
async fn a_hook_that_disconnects_mid_hook_blocks_the_call_at_once() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "a\n").expect("a.txt");
    let submitter = daemon.connect(json!({}), no_answers()).await;
    let session_id = submitter.create_session(&daemon.work(), json!({})).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hooker = daemon
        .connect(
            json!({"hooks": ["pre_tool_use"]}),
            toold_tests::daemon::never_answers(Arc::clone(&seen)),
        )
        .await;
    hooker
        .request("session/attach", json!({"session_id": session_id}))
        .await
        .expect("attach the hook connection");

    let started = std::time::Instant::now();
    let call = {
        let session_id = session_id.clone();
        let submitter = submitter.peer.clone();
        tokio::spawn(async move {
            submitter
                .request(
                    "tools/execute",
                    Some(json!({"session_id": session_id,
                           "calls": [{"id": "r", "name": "read_file", "arguments": {"path": "a.txt"}}]})),
                )
                .await
        })
    };
    let asked = tokio::time::timeout(Duration::from_secs(20), async {
        while seen.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(asked.is_ok(), "the hook was never asked");
    hooker.peer.close();
    let response = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call waited on a departed hook")
        .unwrap()
        .expect("tools/execute answered");
    let result = result_of(&response, "r");
    assert_eq!(result["error_type"], "hook_blocked", "{result}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "blocked only at the hook timeout"
    );

    // Served on, now without a hook.
    let again = submitter
        .execute(
            &session_id,
            json!([{"id": "r2", "name": "read_file", "arguments": {"path": "a.txt"}}]),
        )
        .await;
    assert_eq!(result_of(&again, "r2")["ok"], true, "{again}");
}

/// Stopping the daemon while a command (and processes it left in the background and in a new
/// session) runs past the drain's grace: every call still gets its answer (`canceled`), the
/// daemon exits 0, and no process it started is left.
#[tokio::test]
async fn stopping_the_daemon_leaves_no_process_it_started() {
    let mut daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("daemon-stop");
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut client, &mark).await;
    let parsers = shell_parser_workers(daemon.pid());
    assert!(
        !parsers.is_empty(),
        "the command's line was parsed in a worker"
    );
    daemon.send_sigterm();
    let response = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("an answer within the grace")
        .expect("the request task")
        .expect("the batch's response arrives during the drain");
    assert_eq!(result_of(&response, "lingering")["error_type"], "canceled");
    let status = daemon.wait_for_exit().await;
    assert!(status.success(), "the daemon exited with {status}");
    assert_processes_gone(&mark).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while parsers.iter().any(|pid| process_alive(*pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "shell parser workers outlived the daemon: {parsers:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A shell parser worker that stops answering (stopped here with SIGSTOP; a line the parser
/// loops on does the same) delays only the call whose line it holds: that call is answered
/// after the 1 s deadline, its line unreadable (it asks; with no approver, denied, and the line
/// is remembered so), another client is served all the while, the stuck worker is killed, and
/// the next line parses.
#[tokio::test]
async fn a_stuck_shell_parser_delays_only_the_call_it_holds() {
    let daemon = TestDaemon::start();
    let (client, session_id) = command_session(&daemon).await;
    let command = |id: &str, line: &str| json!([{"id": id, "name": "run_command", "arguments": {"command": line}}]);
    let warm = client.execute(&session_id, command("warm", "true")).await;
    assert_eq!(result_of(&warm, "warm")["ok"], true, "{warm}");
    let stuck = shell_parser_workers(daemon.pid());
    assert_eq!(stuck.len(), 1, "one worker after one line: {stuck:?}");
    send_signal(stuck[0], nix::sys::signal::Signal::SIGSTOP);

    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let response = client
            .execute(&session_id, command("held", "echo parsed"))
            .await;
        (response, started.elapsed(), client, session_id)
    });
    std::fs::write(daemon.work().join("note.txt"), "served\n").unwrap();
    let (other, other_session) = command_session(&daemon).await;
    let (mut rounds, mut slowest) = (0, Duration::ZERO);
    while !waiting.is_finished() {
        let started = std::time::Instant::now();
        let read = other
            .execute(
                &other_session,
                json!([{"id": "r", "name": "read_file", "arguments": {"path": "note.txt"}}]),
            )
            .await;
        assert_eq!(result_of(&read, "r")["ok"], true, "{read}");
        slowest = slowest.max(started.elapsed());
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (response, waited, client, session_id) = waiting.await.unwrap();
    eprintln!(
        "the held call answered after {waited:?}; the other client served {rounds} times \
         meanwhile, the slowest in {slowest:?}"
    );
    let held = result_of(&response, "held");
    assert_eq!(held["error_type"], "permission_denied", "{held}");
    let error = held["error"].as_str().unwrap();
    assert!(
        error.contains("the shell parser did not finish within 1000 ms")
            && error.ends_with("no approver is attached"),
        "{error}"
    );
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "the held call was answered after {waited:?}"
    );
    assert!(
        rounds >= 10 && slowest < Duration::from_millis(500),
        "the other client was served {rounds} times meanwhile, the slowest in {slowest:?}"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while shell_parser_workers(daemon.pid()).contains(&stuck[0]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stuck worker is still alive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The line that missed its deadline is remembered as unreadable; another one parses.
    let again = client
        .execute(&session_id, command("again", "echo parsed"))
        .await;
    assert_eq!(
        result_of(&again, "again")["error_type"],
        "permission_denied",
        "{again}"
    );
    let other_line = client
        .execute(&session_id, command("other", "echo parsed too"))
        .await;
    assert_eq!(result_of(&other_line, "other")["ok"], true, "{other_line}");

    // Canceled while its line waits on a stuck worker: the call ends at once, not at the
    // deadline.
    let stuck = shell_parser_workers(daemon.pid());
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    send_signal(stuck[0], nix::sys::signal::Signal::SIGSTOP);
    let client = std::sync::Arc::new(client);
    let running = tokio::spawn({
        let (client, session_id) = (client.clone(), session_id.clone());
        async move {
            client
                .execute(&session_id, command("canceled", "echo never"))
                .await
        }
    });
    // Until the batch is registered there is nothing to cancel.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let started = loop {
        let started = std::time::Instant::now();
        let canceled = client
            .request("tools/cancel", json!({"session_id": session_id}))
            .await
            .expect("tools/cancel");
        if canceled["canceled"] == json!(["canceled"]) {
            break started;
        }
        assert!(std::time::Instant::now() < deadline, "{canceled}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let response = running.await.unwrap();
    let result = result_of(&response, "canceled");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "the cancel took {:?}",
        started.elapsed()
    );
}
