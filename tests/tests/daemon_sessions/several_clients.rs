//! Several clients on one session: one submits and another approves, a pending approval goes
//! to an approver that attaches later, the first of two answers wins, and a detached
//! connection gets no more events.

use serde_json::json;
use toold_tests::daemon::{TestDaemon, always, command_call, never_answers_telling, no_answers};

use super::{approvals, methods, outcomes, requests, resolved_events, result, seen, seq};
use toold_tests::PATIENCE;

#[tokio::test]
async fn one_client_submits_and_another_approves() {
    let daemon = TestDaemon::start_asking();
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
    let daemon = TestDaemon::start_asking();
    let mut submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter.create_session(&daemon.work(), json!({})).await;

    // The first approver tells the test it was asked, and never answers.
    let (silent, mut asked_rx) = never_answers_telling();
    let silent_approver = daemon.connect(approvals(), silent).await;
    silent_approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .expect("session/attach");

    let late_asked = seen();
    let execute_batch = submitter.execute(&session, json!([command_call("call_a", "echo late")]));
    let attach_late = async {
        let first = tokio::time::timeout(PATIENCE, asked_rx.recv())
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
    let daemon = TestDaemon::start_asking();
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
