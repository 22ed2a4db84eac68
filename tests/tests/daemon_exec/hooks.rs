//! Hooks from a client and from the config: a client hook blocks, allows, rewrites and adds
//! context, a configured hook program blocks and allows, and a hook connection that leaves
//! mid-hook blocks the call at once.

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold_protocol::ErrorObject;
use toold_protocol::peer::Reply;
use toold_tests::daemon::{TestDaemon, no_answers};

use super::{answering, is_call_event, params_of, result_of};

#[tokio::test]
async fn a_client_hook_blocks_allows_rewrites_and_adds_context() {
    let daemon = TestDaemon::start_asking();
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
