//! Sessions end to end on the real `toold serve` process and socket: every event of a batch in
//! order, approvals over the socket with each decision, two clients on one session, replay with
//! `after_seq`, a restart that keeps sessions, `session/update` and `session/close`,
//! `on_disconnect`, the idle TTL, and `tools/list` as a session sees it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use toold_protocol::peer::Reply;
use toold_protocol::{Notification, Request, RequestError, error_code};
use toold_tests::daemon::{
    Answerer, TestClient, TestDaemon, always, answer_with, never_answers, no_answers, outcome,
    results,
};

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

fn outcomes(response: &Value) -> Vec<&str> {
    results(response).into_iter().map(outcome).collect()
}

fn rpc_code(error: RequestError) -> i32 {
    match error {
        RequestError::Rpc(error) => error.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

fn command_call(id: &str, command: &str) -> Value {
    json!({"id": id, "name": "run_command", "arguments": {"command": command}})
}

// ---------------------------------------------------------------------------------------------
// Events

#[tokio::test]
async fn a_batch_sends_every_event_in_order_before_its_response() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["run_command(echo *)"]}}),
        )
        .await;

    let response = client
        .execute(
            &session,
            json!([
                {"id": "call_read", "name": "read_file", "arguments": {"path": "a.txt"}},
                command_call("call_echo", "echo hello"),
                {"id": "call_unknown", "name": "no_such_tool", "arguments": {}},
            ]),
        )
        .await;
    assert_eq!(outcomes(&response), ["ok", "ok", "unknown_tool"]);
    let batch_id = response["batch_id"].as_str().expect("a batch id");

    // Everything was delivered before the response: nothing more is waited for here.
    let events = client.session_events();
    let mut previous = 0;
    for event in &events {
        let fields = params(event);
        assert_eq!(fields["session_id"], session.as_str(), "{event:?}");
        assert_eq!(fields["batch_id"], batch_id, "{event:?}");
        assert!(seq(event) > previous, "seq goes up: {:?}", methods(&events));
        previous = seq(event);
    }

    let first = events.first().expect("events");
    assert_eq!(first.method, "batch/start");
    assert_eq!(
        params(first)["call_ids"],
        json!(["call_read", "call_echo", "call_unknown"])
    );
    assert_eq!(params(first)["plan"], json!([[0], [1], [2]]));
    assert_eq!(events.last().expect("events").method, "batch/done");

    // Per call: call_start, output…, result, call_done; each call alone, in order.
    let mut position = 1;
    for (index, call_id) in ["call_read", "call_echo", "call_unknown"]
        .into_iter()
        .enumerate()
    {
        let own: Vec<&Notification> = events
            .iter()
            .filter(|event| event_call_id(event) == Some(call_id))
            .collect();
        let kinds: Vec<&str> = own.iter().map(|event| event.method.as_str()).collect();
        assert!(kinds.len() >= 3, "{call_id}: {kinds:?}");
        assert_eq!(kinds[0], "tool/call_start", "{call_id}: {kinds:?}");
        assert_eq!(
            kinds[kinds.len() - 2..],
            ["tool/result", "tool/call_done"],
            "{call_id}: {kinds:?}"
        );
        assert!(
            kinds[1..kinds.len() - 2]
                .iter()
                .all(|kind| *kind == "tool/output"),
            "{call_id}: {kinds:?}"
        );
        // The run is serial: this call's events are the next ones in the stream.
        for event in &own {
            assert_eq!(
                event_call_id(&events[position]),
                Some(call_id),
                "{:?}",
                methods(&events)
            );
            assert_eq!(events[position].method, event.method);
            position += 1;
        }
        assert_eq!(
            params(own[0])["call"]["name"],
            response["results"][index]["result"]["tool"]
        );
        for ended in &own[own.len() - 2..] {
            assert_eq!(&params(ended)["result"], result(&response, index));
            assert!(params(ended)["elapsed_ms"].is_u64());
        }
    }
    assert_eq!(
        position,
        events.len() - 1,
        "only batch/done follows the calls"
    );

    let output: String = events
        .iter()
        .filter(|event| event.method == "tool/output")
        .map(|event| params(event)["data"].as_str().expect("data").to_owned())
        .collect();
    assert_eq!(output, "hello\n");
    assert!(
        events
            .iter()
            .filter(|event| event.method == "tool/output")
            .all(|event| params(event)["call_id"] == "call_echo"
                && params(event)["stream"] == "stdout")
    );

    let snapshot = client
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    assert_eq!(snapshot["last_seq"], previous);
}

// ---------------------------------------------------------------------------------------------
// Approvals

/// A session whose own connection approves with `answerer`, after running `calls` in it.
struct ApprovalRun {
    daemon: TestDaemon,
    client: TestClient,
    session: String,
    response: Value,
    events: Vec<Notification>,
}

async fn run_with_approver(answerer: Answerer, calls: Value) -> ApprovalRun {
    run_with_approver_on(TestDaemon::start(), answerer, calls).await
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
    let daemon = TestDaemon::start();
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
    let daemon = TestDaemon::start();
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
    let daemon = TestDaemon::start_with_config(Some("approval_timeout_ms = 300"));
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
    let daemon = TestDaemon::start();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;
    let (asked_tx, mut asked_rx) = mpsc::unbounded_channel();
    let silent: Answerer = Arc::new(move |request: Request| {
        let _ = asked_tx.send(request);
        Box::pin(std::future::pending())
    });
    let approver = daemon.connect(approvals(), silent).await;
    approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");
    let batch = submitter.execute(&session, json!([command_call("call_a", "echo x")]));
    let act = async {
        tokio::time::timeout(Duration::from_secs(30), asked_rx.recv())
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

// ---------------------------------------------------------------------------------------------
// Several clients

#[tokio::test]
async fn one_client_submits_and_another_approves() {
    let daemon = TestDaemon::start();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;
    let asked = seen();
    let mut approver = daemon
        .connect(
            approvals(),
            always(json!({"decision": "allow_once"}), asked.clone()),
        )
        .await;
    approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");

    let response = submitter
        .execute(&session, json!([command_call("call_a", "echo two")]))
        .await;
    assert_eq!(outcomes(&response), ["ok"]);
    assert_eq!(requests(&asked).len(), 1);

    let submitted = submitter.session_events();
    let watched = approver
        .session_events_until(|event| event.method == "batch/done")
        .await;
    // Both saw the same events, in the same order.
    assert_eq!(methods(&submitted), methods(&watched));
    assert_eq!(
        submitted.iter().map(seq).collect::<Vec<_>>(),
        watched.iter().map(seq).collect::<Vec<_>>()
    );
    for events in [&submitted, &watched] {
        let resolved = resolved_events(events);
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0]["decision"], "allow_once");
        assert_eq!(resolved[0]["by"], "client");
    }
    let snapshot = submitter
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    assert_eq!(snapshot["attached"], 2);
}

#[tokio::test]
async fn a_pending_approval_is_sent_again_to_an_approver_that_attaches() {
    let daemon = TestDaemon::start();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;

    // The first approver tells the test it was asked, and never answers.
    let (asked_tx, mut asked_rx) = mpsc::unbounded_channel();
    let silent: Answerer = Arc::new(move |request: Request| {
        let _ = asked_tx.send(request);
        Box::pin(std::future::pending())
    });
    let silent_approver = daemon.connect(approvals(), silent).await;
    silent_approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");

    let late_asked = seen();
    let execute_batch = submitter.execute(&session, json!([command_call("call_a", "echo late")]));
    let attach_late = async {
        let first = tokio::time::timeout(Duration::from_secs(30), asked_rx.recv())
            .await
            .expect("the first approver is asked")
            .expect("a request");
        let late = daemon
            .connect(
                approvals(),
                always(json!({"decision": "allow_once"}), late_asked.clone()),
            )
            .await;
        late.request("session/attach", json!({"session_id": session}))
            .await
            .expect("session/attach");
        (first, late)
    };
    let (response, (first, mut late)) = tokio::join!(execute_batch, attach_late);
    assert_eq!(outcomes(&response), ["ok"]);
    assert_eq!(result(&response, 0)["content"], "late\n");

    let late_asked = requests(&late_asked);
    assert_eq!(late_asked.len(), 1, "the pending approval is sent again");
    assert_eq!(late_asked[0].params, first.params);

    let watched = late
        .session_events_until(|event| event.method == "batch/done")
        .await;
    let resolved = resolved_events(&watched);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["decision"], "allow_once");
    assert_eq!(resolved[0]["by"], "client");
    assert_eq!(resolved_events(&submitter.session_events()).len(), 1);
}

#[tokio::test]
async fn the_first_answer_of_two_approvers_wins() {
    let daemon = TestDaemon::start();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;
    let mut approvers = Vec::new();
    for answer in [
        json!({"decision": "deny", "message": "the denier won"}),
        json!({"decision": "allow_once"}),
    ] {
        let approver = daemon.connect(approvals(), always(answer, seen())).await;
        approver
            .request("session/attach", json!({"session_id": session}))
            .await
            .expect("session/attach");
        approvers.push(approver);
    }
    let response = submitter
        .execute(&session, json!([command_call("call_a", "echo x")]))
        .await;
    let events = submitter.session_events();
    let resolved = resolved_events(&events);
    assert_eq!(resolved.len(), 1, "one approval, one resolution");
    let expected = match resolved[0]["decision"].as_str() {
        Some("deny") => "permission_denied",
        Some("allow_once") => "ok",
        other => panic!("unexpected decision {other:?}"),
    };
    assert_eq!(outcomes(&response), [expected]);
    for approver in &mut approvers {
        let watched = approver
            .session_events_until(|event| event.method == "batch/done")
            .await;
        assert_eq!(resolved_events(&watched), resolved);
    }
}

#[tokio::test]
async fn a_detached_connection_gets_no_more_events() {
    let daemon = TestDaemon::start();
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let mut other = daemon.connect(json!({}), no_answers()).await;
    other
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");
    client
        .request("session/detach", json!({"session_id": session}))
        .await
        .expect("session/detach");
    let snapshot = other
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    assert_eq!(snapshot["attached"], 1);

    // A detached connection may still submit; only the attached one hears about it.
    let read = json!([{"id": "call_a", "name": "find_files", "arguments": {"pattern": "*"}}]);
    assert_eq!(outcomes(&client.execute(&session, read).await), ["ok"]);
    other
        .session_events_until(|event| event.method == "batch/done")
        .await;
    client
        .request("session/list", json!({}))
        .await
        .expect("a round trip after the batch");
    assert!(client.session_events().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Replay

#[tokio::test]
async fn attaching_after_a_seq_replays_exactly_the_later_events() {
    let daemon = TestDaemon::start();
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["run_command(echo *)"]}}),
        )
        .await;
    client
        .execute(
            &session,
            json!([
                command_call("call_a", "echo one"),
                command_call("call_b", "echo two")
            ]),
        )
        .await;
    let all = client.session_events();
    assert!(all.len() >= 8, "{:?}", methods(&all));

    for after in [
        seq(&all[0]) - 1,
        seq(&all[3]),
        seq(all.last().expect("events")),
    ] {
        let mut replaying = daemon.connect(json!({}), no_answers()).await;
        let snapshot = replaying
            .request(
                "session/attach",
                json!({"session_id": session, "after_seq": after}),
            )
            .await
            .expect("session/attach");
        assert!(snapshot.get("replay_truncated").is_none(), "{snapshot}");
        // The replayed events came before the response.
        let replayed = replaying.session_events();
        let expected: Vec<&Notification> = all.iter().filter(|event| seq(event) > after).collect();
        assert_eq!(
            replayed.iter().collect::<Vec<_>>(),
            expected,
            "after_seq {after}"
        );
    }

    // Without after_seq, nothing old is sent; new events are.
    let mut live = daemon.connect(json!({}), no_answers()).await;
    live.request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");
    assert!(live.session_events().is_empty());
    client
        .execute(&session, json!([command_call("call_c", "echo three")]))
        .await;
    let new = live
        .session_events_until(|event| event.method == "batch/done")
        .await;
    assert!(seq(&new[0]) > seq(all.last().expect("events")));
}

#[tokio::test]
async fn replay_from_before_a_restart_is_truncated() {
    let mut daemon = TestDaemon::start();
    let session = {
        let client = daemon.connect(json!({}), no_answers()).await;
        let session = client.create_session(&daemon.work(), json!({})).await;
        client
            .execute(
                &session,
                json!([{"id": "call_a", "name": "find_files", "arguments": {"pattern": "*"}}]),
            )
            .await;
        session
    };
    daemon.restart();

    let mut client = daemon.connect(json!({}), no_answers()).await;
    let snapshot = client
        .request(
            "session/attach",
            json!({"session_id": session, "after_seq": 0}),
        )
        .await
        .expect("session/attach");
    assert_eq!(snapshot["replay_truncated"], true, "{snapshot}");
    assert!(client.session_events().is_empty());

    let last_seq = snapshot["last_seq"].as_u64().expect("last_seq");
    let mut current = daemon.connect(json!({}), no_answers()).await;
    let snapshot = current
        .request(
            "session/attach",
            json!({"session_id": session, "after_seq": last_seq}),
        )
        .await
        .expect("session/attach");
    assert!(snapshot.get("replay_truncated").is_none(), "{snapshot}");
    assert!(current.session_events().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Restart

/// An `allow_session` grant is saved when it is recorded, not when its batch ends: a daemon
/// killed while the batch still runs comes back with the grant.
#[tokio::test]
async fn a_grant_is_saved_before_its_batch_ends() {
    let mut daemon = TestDaemon::start();
    let client = daemon
        .connect(
            approvals(),
            always(json!({"decision": "allow_session"}), seen()),
        )
        .await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let file = daemon
        .state_dir()
        .join("sessions")
        .join(format!("{session}.json"));
    let grant = "run_command(printf granted)";
    let batch = client.execute(
        &session,
        json!([
            command_call("call_a", "printf granted"),
            command_call("call_b", "sleep 30")
        ]),
    );
    let saved = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&file).is_ok_and(|text| text.contains(grant)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the grant was not saved while its batch ran"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        response = batch => panic!("the batch ended first: {response}"),
        () = saved => {}
    }

    daemon.kill();
    daemon.start_again();
    let client = daemon.connect(json!({}), no_answers()).await;
    let kept = client
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    assert!(
        kept["grants"]
            .as_array()
            .expect("grants")
            .contains(&json!(grant)),
        "{kept}"
    );
}

#[tokio::test]
async fn a_restart_keeps_sessions_and_their_grants() {
    let mut daemon = TestDaemon::start();
    let first_instance = daemon.instance_id().await;
    let rules = json!({
        "allow": ["run_command(echo *)"],
        "ask": ["run_command(git push *)"],
        "deny": ["run_command(rm *)"],
    });
    let (session, before) = {
        let mut client = daemon
            .connect(
                approvals(),
                always(json!({"decision": "allow_session"}), seen()),
            )
            .await;
        let session = client
            .create_session(
                &daemon.work(),
                json!({
                    "rules": rules,
                    "mode": "accept_edits",
                    "title": "kept across restarts",
                    "command_env": {"GREETING": "hello from the env"},
                    "allowed_tools": ["run_command", "read_file"],
                    "on_disconnect": "continue",
                    "timeout_ms": 45000,
                }),
            )
            .await;
        let response = client
            .execute(&session, json!([command_call("call_a", "printf granted")]))
            .await;
        assert_eq!(outcomes(&response), ["ok"]);
        client.session_events();
        let before = client
            .request("session/get", json!({"session_id": session}))
            .await
            .expect("session/get");
        assert_eq!(before["grants"], json!(["run_command(printf granted)"]));
        (session, before)
    };

    daemon.restart();
    assert_ne!(daemon.instance_id().await, first_instance);

    // No approver now: the grant and the rules alone let the calls run.
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let list = client
        .request("session/list", json!({}))
        .await
        .expect("session/list");
    let sessions = list["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{list}");
    let after = &sessions[0];
    for field in [
        "session_id",
        "title",
        "cwd",
        "roots",
        "mode",
        "allowed_tools",
        "rules",
        "env",
        "command_env",
        "grants",
        "last_seq",
        "created_at",
        "on_disconnect",
    ] {
        assert_eq!(after[field], before[field], "{field}");
    }
    assert_eq!(after["attached"], 0);
    assert_eq!(after["running_batches"], json!([]));
    assert_eq!(after["env"]["timeout_ms"], 45000);

    client
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");
    let response = client
        .execute(
            &session,
            json!([
                command_call("call_b", "printf granted"),
                command_call("call_c", "echo $GREETING"),
                command_call("call_d", "rm -f nothing"),
            ]),
        )
        .await;
    assert_eq!(outcomes(&response), ["ok", "ok", "permission_denied"]);
    assert_eq!(result(&response, 0)["content"], "granted");
    assert_eq!(result(&response, 1)["content"], "hello from the env\n");

    let events = client.session_events();
    let last_seq = before["last_seq"].as_u64().expect("last_seq");
    assert!(
        seq(&events[0]) > last_seq,
        "{} after {last_seq}",
        seq(&events[0])
    );
}

// ---------------------------------------------------------------------------------------------
// Update and close

#[tokio::test]
async fn session_update_is_reflected_in_get_and_list() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"title": "first", "allowed_tools": ["read_file"]}),
        )
        .await;

    let updated = client
        .request(
            "session/update",
            json!({
                "session_id": session,
                "mode": "plan",
                "rules": {"deny": ["read_file(secret/**)"]},
                "title": "second",
            }),
        )
        .await
        .expect("session/update");
    let get = client
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    let list = client
        .request("session/list", json!({}))
        .await
        .expect("session/list");
    for snapshot in [&updated, &get, &list["sessions"][0]] {
        assert_eq!(snapshot["mode"], "plan");
        assert_eq!(snapshot["title"], "second");
        assert_eq!(snapshot["rules"]["deny"], json!(["read_file(secret/**)"]));
        assert_eq!(
            snapshot["allowed_tools"],
            json!(["read_file"]),
            "absent: unchanged"
        );
    }

    client
        .request(
            "session/update",
            json!({"session_id": session, "allowed_tools": null, "title": null, "mode": "default"}),
        )
        .await
        .expect("session/update");
    let bypass = client
        .request(
            "session/update",
            json!({"session_id": session, "mode": "bypass"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        rpc_code(bypass),
        error_code::INVALID_PARAMS,
        "bypass needs allow_bypass"
    );
    let get = client
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("session/get");
    assert_eq!(get["allowed_tools"], Value::Null);
    assert_eq!(get["title"], Value::Null);
    assert_eq!(get["mode"], "default");
    assert_eq!(
        get["rules"]["deny"],
        json!(["read_file(secret/**)"]),
        "rules absent: unchanged"
    );

    // The rules apply to calls.
    std::fs::create_dir_all(daemon.work().join("secret")).expect("fixture");
    std::fs::write(daemon.work().join("secret/key"), "k\n").expect("fixture");
    let response = client
        .execute(
            &session,
            json!([{"id": "call_a", "name": "read_file", "arguments": {"path": "secret/key"}}]),
        )
        .await;
    assert_eq!(outcomes(&response), ["permission_denied"]);
}

#[tokio::test]
async fn a_closed_session_is_unknown() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    client
        .request("session/close", json!({"session_id": session}))
        .await
        .expect("session/close");
    for (method, params) in [
        ("session/get", json!({"session_id": session})),
        ("session/attach", json!({"session_id": session})),
        (
            "session/update",
            json!({"session_id": session, "title": "x"}),
        ),
        ("session/close", json!({"session_id": session})),
        ("tools/execute", json!({"session_id": session, "calls": []})),
        ("tools/list", json!({"session_id": session})),
    ] {
        let error = client.request(method, params).await.unwrap_err();
        assert_eq!(rpc_code(error), error_code::UNKNOWN_SESSION, "{method}");
    }
    let list = client
        .request("session/list", json!({}))
        .await
        .expect("session/list");
    assert_eq!(list["sessions"], json!([]));
}

#[tokio::test]
async fn closing_a_session_cancels_its_batch_and_it_stays_closed_after_a_restart() {
    let mut daemon = TestDaemon::start();
    let submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["run_command(sleep *)"]}}),
        )
        .await;
    let mut watcher = daemon.connect(json!({}), no_answers()).await;
    watcher
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");

    let batch = submitter.execute(&session, json!([command_call("call_a", "sleep 5")]));
    let close = async {
        watcher
            .session_events_until(|event| event.method == "tool/call_start")
            .await;
        watcher
            .request("session/close", json!({"session_id": session}))
            .await
            .expect("session/close");
    };
    let (response, ()) = tokio::join!(batch, close);
    assert_eq!(outcomes(&response), ["canceled"], "the batch still answers");

    daemon.restart();
    let client = daemon.connect(json!({}), no_answers()).await;
    let list = client
        .request("session/list", json!({}))
        .await
        .expect("session/list");
    assert_eq!(
        list["sessions"],
        json!([]),
        "a closed session is not restored"
    );
}

// ---------------------------------------------------------------------------------------------
// on_disconnect

/// Submits a `sleep 2` from one connection, closes that connection once the call has started,
/// and returns the call's result as a second attached connection sees it.
async fn result_after_submitter_leaves(extra: Value) -> Value {
    let daemon = TestDaemon::start();
    let submitter = daemon.connect(json!({}), no_answers()).await;
    let mut extra = extra;
    extra["rules"] = json!({"allow": ["run_command(sleep *)"]});
    let session = submitter.create_session(&daemon.work(), extra).await;
    let mut watcher = daemon.connect(json!({}), no_answers()).await;
    watcher
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");

    let batch = submitter.peer.request(
        "tools/execute",
        Some(json!({"session_id": session, "calls": [command_call("call_a", "sleep 2")]})),
    );
    let leave = async {
        watcher
            .session_events_until(|event| event.method == "tool/call_start")
            .await;
        submitter.disconnect();
        watcher
            .session_events_until(|event| event.method == "batch/done")
            .await
    };
    let (answer, events) = tokio::join!(batch, leave);
    assert!(answer.is_err(), "the submitter is gone: {answer:?}");
    let ended = events
        .iter()
        .find(|event| event.method == "tool/result")
        .expect("a tool/result event");
    params(ended)["result"].clone()
}

#[tokio::test]
async fn a_batch_is_canceled_when_its_submitter_disconnects() {
    let result = result_after_submitter_leaves(json!({})).await;
    assert_eq!(outcome(&result), "canceled", "{result}");
}

#[tokio::test]
async fn with_on_disconnect_continue_the_batch_completes() {
    let result = result_after_submitter_leaves(json!({"on_disconnect": "continue"})).await;
    assert_eq!(outcome(&result), "ok", "{result}");
}

// ---------------------------------------------------------------------------------------------
// Idle TTL

#[tokio::test]
async fn an_unattached_session_expires_and_an_attached_one_stays() {
    let daemon = TestDaemon::start_with_config(Some("session_idle_ttl = 1"));
    let client = daemon.connect(json!({}), no_answers()).await;
    let left = client.create_session(&daemon.work(), json!({})).await;
    let kept = client.create_session(&daemon.work(), json!({})).await;
    client
        .request("session/detach", json!({"session_id": left}))
        .await
        .expect("session/detach");

    let listed = || async {
        let list = client
            .request("session/list", json!({}))
            .await
            .expect("session/list");
        list["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .map(|snapshot| snapshot["session_id"].as_str().expect("id").to_owned())
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ids = listed().await;
        assert!(ids.contains(&kept), "the attached session stays: {ids:?}");
        if !ids.contains(&left) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle session is still listed 15 s later"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let error = client
        .request("session/get", json!({"session_id": left}))
        .await
        .unwrap_err();
    assert_eq!(rpc_code(error), error_code::UNKNOWN_SESSION);
    // Another TTL later, the attached one is still there.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(listed().await, [kept]);
}

// ---------------------------------------------------------------------------------------------
// tools/list for a session

async fn tool_names(client: &TestClient, params: Value) -> Vec<String> {
    let listed = client
        .request("tools/list", params)
        .await
        .expect("tools/list");
    listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[tokio::test]
async fn tools_list_shows_what_the_session_may_see() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;

    let everything = tool_names(&client, json!({})).await;
    assert_eq!(
        tool_names(&client, json!({"session_id": session})).await,
        everything
    );

    let read_only = tool_names(&client, json!({"safety": "read_only"})).await;
    assert_eq!(read_only, ["find_files", "read_file", "search_code"]);
    client
        .request(
            "session/update",
            json!({"session_id": session, "mode": "plan"}),
        )
        .await
        .expect("session/update");
    assert_eq!(
        tool_names(&client, json!({"session_id": session})).await,
        read_only
    );

    client
        .request(
            "session/update",
            json!({"session_id": session, "allowed_tools": ["read_file", "run_command"]}),
        )
        .await
        .expect("session/update");
    assert_eq!(
        tool_names(&client, json!({"session_id": session})).await,
        ["read_file"],
        "plan mode still hides run_command"
    );

    client
        .request(
            "session/update",
            json!({"session_id": session, "mode": "default"}),
        )
        .await
        .expect("session/update");
    assert_eq!(
        tool_names(&client, json!({"session_id": session})).await,
        ["read_file", "run_command"]
    );
    assert_eq!(
        tool_names(
            &client,
            json!({"session_id": session, "allowed": ["run_command", "write_file"]})
        )
        .await,
        ["run_command"],
        "allowed narrows the session's list"
    );
    assert_eq!(
        tool_names(
            &client,
            json!({"session_id": session, "safety": "side_effect"})
        )
        .await,
        ["run_command"]
    );
}
