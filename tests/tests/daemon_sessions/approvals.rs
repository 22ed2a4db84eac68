//! Approvals over the socket: each decision (allow once or for the session, deny, abort,
//! replacement arguments), and the answers that cancel the permission (an error, an invalid
//! decision, a timeout, an approver that leaves, a canceled call) or none at all.

use serde_json::{Value, json};
use toold_protocol::Notification;
use toold_protocol::peer::Reply;
use toold_tests::daemon::{
    Answerer, TestClient, TestDaemon, always, answer_with, command_call, never_answers,
    never_answers_telling, no_answers,
};

use super::{
    approvals, event_call_id, methods, outcomes, params, requests, resolved_events, result, seen,
};
use toold_tests::PATIENCE;

/// A session whose own connection approves with `answerer`, after running `calls` in it.
struct ApprovalRun {
    daemon: TestDaemon,
    client: TestClient,
    session: String,
    response: Value,
    events: Vec<Notification>,
}

async fn run_with_approver(answerer: Answerer, calls: Value) -> ApprovalRun {
    run_with_approver_on(TestDaemon::start_asking(), answerer, calls).await
}

async fn run_with_approver_on(daemon: TestDaemon, answerer: Answerer, calls: Value) -> ApprovalRun {
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let mut client = daemon.connect(approvals(), answerer).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let response = client.execute(&session, calls).await;
    let events = client.session_events();
    ApprovalRun {
        daemon,
        client,
        session,
        response,
        events,
    }
}

fn approval_id(response: &Value, call_id: &str) -> String {
    format!(
        "{}/{call_id}",
        response["batch_id"].as_str().expect("a batch id")
    )
}

#[tokio::test]
async fn allow_once_runs_the_command() {
    let asked = seen();
    let run = run_with_approver(
        always(json!({"decision": "allow_once"}), asked.clone()),
        json!([command_call("call_a", "echo approved")]),
    )
    .await;
    assert_eq!(outcomes(&run.response), ["ok"]);
    assert_eq!(result(&run.response, 0)["content"], "approved\n");

    let asked = requests(&asked);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].method, "approval/request");
    let request = asked[0].params.as_ref().expect("params");
    assert_eq!(request["session_id"], run.session.as_str());
    assert_eq!(request["batch_id"], run.response["batch_id"]);
    assert_eq!(request["approval_id"], approval_id(&run.response, "call_a"));
    assert_eq!(request["call"]["name"], "run_command");
    assert_eq!(request["call"]["arguments"]["command"], "echo approved");
    assert_eq!(request["safety"], "side_effect");
    assert_eq!(
        request["suggestions"],
        json!(["run_command(echo approved)"])
    );

    let resolved = resolved_events(&run.events);
    assert_eq!(resolved.len(), 1, "{:?}", methods(&run.events));
    assert_eq!(
        resolved[0]["approval_id"],
        approval_id(&run.response, "call_a")
    );
    assert_eq!(resolved[0]["call_id"], "call_a");
    assert_eq!(resolved[0]["decision"], "allow_once");
    assert_eq!(resolved[0]["by"], "client");
    // The approval is settled between the call's start and its result.
    let kinds = methods(&run.events);
    let resolved_at = kinds.iter().position(|kind| *kind == "approval/resolved");
    let result_at = kinds.iter().position(|kind| *kind == "tool/result");
    assert!(resolved_at < result_at, "{kinds:?}");
}

#[tokio::test]
async fn allow_session_records_a_grant_that_later_calls_use() {
    let asked = seen();
    let mut run = run_with_approver(
        always(json!({"decision": "allow_session"}), asked.clone()),
        json!([command_call("call_a", "echo granted")]),
    )
    .await;
    assert_eq!(outcomes(&run.response), ["ok"]);
    assert_eq!(resolved_events(&run.events)[0]["decision"], "allow_session");

    let snapshot = run
        .client
        .request("session/get", json!({"session_id": run.session}))
        .await
        .expect("session/get");
    assert_eq!(snapshot["grants"], json!(["run_command(echo granted)"]));

    let again = run
        .client
        .execute(
            &run.session,
            json!([command_call("call_b", "echo granted")]),
        )
        .await;
    assert_eq!(outcomes(&again), ["ok"]);
    assert_eq!(
        requests(&asked).len(),
        1,
        "the grant answered the second call"
    );
    assert!(resolved_events(&run.client.session_events()).is_empty());

    // The grant is for that exact command line only.
    let other = run
        .client
        .execute(&run.session, json!([command_call("call_c", "echo other")]))
        .await;
    assert_eq!(outcomes(&other), ["ok"]);
    assert_eq!(requests(&asked).len(), 2);
}

#[tokio::test]
async fn deny_with_a_message_is_permission_denied_with_that_message() {
    let run = run_with_approver(
        always(
            json!({"decision": "deny", "message": "not on a Friday"}),
            seen(),
        ),
        json!([command_call("call_a", "echo denied")]),
    )
    .await;
    assert_eq!(outcomes(&run.response), ["permission_denied"]);
    assert_eq!(result(&run.response, 0)["error"], "not on a Friday");
    let resolved = resolved_events(&run.events);
    assert_eq!(resolved[0]["decision"], "deny");
    assert_eq!(resolved[0]["by"], "client");
}

#[tokio::test]
async fn abort_cancels_the_call_and_the_rest_of_the_batch() {
    let run = run_with_approver(
        always(json!({"decision": "abort"}), seen()),
        json!([
            command_call("call_a", "echo aborted"),
            {"id": "call_b", "name": "read_file", "arguments": {"path": "a.txt"}},
            command_call("call_c", "echo never"),
        ]),
    )
    .await;
    assert_eq!(
        outcomes(&run.response),
        ["permission_canceled", "canceled", "canceled"]
    );
    let resolved = resolved_events(&run.events);
    assert_eq!(resolved.len(), 1, "the later calls never asked");
    assert_eq!(resolved[0]["decision"], "abort");
    assert_eq!(resolved[0]["by"], "client");
    // Canceled calls still have their events.
    for call_id in ["call_b", "call_c"] {
        let kinds: Vec<&str> = run
            .events
            .iter()
            .filter(|event| event_call_id(event) == Some(call_id))
            .map(|event| event.method.as_str())
            .collect();
        assert_eq!(
            kinds,
            ["tool/call_start", "tool/result", "tool/call_done"],
            "{call_id}"
        );
    }
    assert_eq!(run.events.last().expect("events").method, "batch/done");
}

#[tokio::test]
async fn an_error_answer_is_permission_canceled() {
    let run = run_with_approver(no_answers(), json!([command_call("call_a", "echo x")])).await;
    assert_eq!(outcomes(&run.response), ["permission_canceled"]);
    let resolved = resolved_events(&run.events);
    assert_eq!(resolved[0]["decision"], Value::Null);
    assert_eq!(resolved[0]["by"], "client");
}

#[tokio::test]
async fn an_invalid_decision_is_permission_canceled() {
    for answer in [
        json!({"decision": "maybe"}),
        json!({"decision": "allow_once", "argumnets": {"command": "echo typo"}}),
        json!("allow_once"),
    ] {
        let run = run_with_approver(
            always(answer.clone(), seen()),
            json!([command_call("call_a", "echo x")]),
        )
        .await;
        assert_eq!(
            outcomes(&run.response),
            ["permission_canceled"],
            "{answer}: {}",
            result(&run.response, 0)
        );
        let resolved = resolved_events(&run.events);
        assert_eq!(resolved[0]["decision"], Value::Null, "{answer}");
        assert_eq!(resolved[0]["by"], "client", "{answer}");
    }
}

#[tokio::test]
async fn allow_once_with_arguments_runs_those_arguments() {
    let run = run_with_approver(
        always(
            json!({"decision": "allow_once", "arguments": {"command": "echo replaced"}}),
            seen(),
        ),
        json!([command_call("call_a", "echo original")]),
    )
    .await;
    assert_eq!(outcomes(&run.response), ["ok"]);
    assert_eq!(result(&run.response, 0)["content"], "replaced\n");
    let output: String = run
        .events
        .iter()
        .filter(|event| event.method == "tool/output")
        .map(|event| params(event)["data"].as_str().expect("data").to_owned())
        .collect();
    assert_eq!(output, "replaced\n");
}

#[tokio::test]
async fn replacement_arguments_are_validated_and_checked_against_deny_rules() {
    let daemon = TestDaemon::start_asking();
    let mut client = daemon
        .connect(
            approvals(),
            answer_with(seen(), |request| {
                let command =
                    &request.params.as_ref().expect("params")["call"]["arguments"]["command"];
                Reply::result(if command == "echo invalid" {
                    json!({"decision": "allow_once", "arguments": {"command": 42}})
                } else {
                    json!({"decision": "allow_once", "arguments": {"command": "rm -rf nothing"}})
                })
            }),
        )
        .await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"deny": ["run_command(rm *)"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([
                command_call("call_a", "echo invalid"),
                command_call("call_b", "echo denied")
            ]),
        )
        .await;
    assert_eq!(
        outcomes(&response),
        ["invalid_arguments", "permission_denied"]
    );
    client.session_events();
}

#[tokio::test]
async fn without_an_approver_an_ask_is_denied_at_once() {
    let daemon = TestDaemon::start_asking();
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let response = client
        .execute(&session, json!([command_call("call_a", "echo x")]))
        .await;
    assert_eq!(outcomes(&response), ["permission_denied"]);
    let error = result(&response, 0)["error"].as_str().expect("an error");
    assert!(error.ends_with("no approver is attached"), "{error}");
    assert!(resolved_events(&client.session_events()).is_empty());
}

#[tokio::test]
async fn an_approval_that_times_out_is_permission_canceled() {
    let daemon = TestDaemon::start_with_config(Some(&format!(
        "approval_timeout_ms = 300\n{}",
        toold_tests::daemon::COMMANDS_ASK
    )));
    let asked = seen();
    let run = run_with_approver_on(
        daemon,
        never_answers(asked.clone()),
        json!([command_call("call_a", "echo x")]),
    )
    .await;
    assert_eq!(outcomes(&run.response), ["permission_canceled"]);
    assert_eq!(requests(&asked).len(), 1);
    let resolved = resolved_events(&run.events);
    assert_eq!(resolved[0]["decision"], Value::Null);
    assert_eq!(resolved[0]["by"], "timeout");
    drop(run.daemon);
}

/// A session created by a connection without approvals, with an approver attached that tells
/// the test when it is asked and never answers; `while_asked` runs once it has been asked,
/// while `echo x` waits for approval. Returns the batch's response and the submitter's events.
async fn while_an_approval_waits(
    while_asked: impl AsyncFnOnce(&TestDaemon, &TestClient, &str),
) -> (Value, Vec<Notification>) {
    let daemon = TestDaemon::start_asking();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;
    let (silent, mut asked_rx) = never_answers_telling();
    let approver = daemon.connect(approvals(), silent).await;
    approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");
    let batch = submitter.execute(&session, json!([command_call("call_a", "echo x")]));
    let act = async {
        tokio::time::timeout(PATIENCE, asked_rx.recv())
            .await
            .expect("the approver is asked")
            .expect("a request");
        while_asked(&daemon, &approver, &session).await;
    };
    let (response, ()) = tokio::join!(batch, act);
    (response, submitter.session_events())
}

#[tokio::test]
async fn an_approver_that_disconnects_is_permission_canceled() {
    let (response, events) = while_an_approval_waits(async |_, approver, _| {
        approver.disconnect();
    })
    .await;
    assert_eq!(outcomes(&response), ["permission_canceled"]);
    let resolved = resolved_events(&events);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["decision"], Value::Null);
    assert_eq!(resolved[0]["by"], "disconnect");
}

#[tokio::test]
async fn canceling_a_call_that_waits_for_approval_withdraws_the_approval() {
    let (response, events) = while_an_approval_waits(async |daemon, _, session| {
        let other = daemon.connect(json!({}), no_answers()).await;
        let canceled = other
            .request("tools/cancel", json!({"session_id": session}))
            .await
            .expect("tools/cancel");
        assert_eq!(canceled["canceled"], json!(["call_a"]));
    })
    .await;
    assert_eq!(outcomes(&response), ["canceled"]);
    let resolved = resolved_events(&events);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["decision"], Value::Null);
    assert_eq!(resolved[0]["by"], "cancel");
}
