//! The events of a batch: every one in order before its response, and the replay of those
//! after a `seq` (also across a restart, truncated).

use serde_json::json;
use toold_protocol::Notification;
use toold_tests::daemon::{RawConnection, TestDaemon, Wire, command_call, no_answers};

use super::{event_call_id, methods, outcomes, params, result, seq};

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

/// A client that stops reading while a command floods it still gets every event, in `seq` order
/// with none missing, and then the response: the events its queue could not take wait in the
/// session's log (and the command's output waits for them) until it reads again.
#[tokio::test]
async fn a_client_that_stops_reading_gets_every_event_in_order_then_the_response() {
    let daemon = TestDaemon::start();
    let mut client = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    client.initialize().await;
    let created = client
        .call_ok(
            1,
            "session/create",
            json!({"cwd": daemon.work(), "rules": {"allow": ["run_command(seq *)"]}}),
        )
        .await;
    let session = created["session_id"].as_str().expect("a session id");
    client
        .call_ok(2, "session/attach", json!({"session_id": session}))
        .await;

    // About 1.3 MB of output: more than a connection's outgoing queue holds (1 MiB).
    let lines = 200_000;
    client
        .send_request(
            3,
            "tools/execute",
            json!({"session_id": session, "calls": [command_call("flood", &format!("seq 1 {lines}"))]}),
        )
        .await;
    // Not reading: the queue fills, the rest waits.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;

    let mut stdout = String::new();
    let mut previous_seq = None;
    let mut last_method = String::new();
    let response = loop {
        let message = client.receive().await;
        let Some(method) = message["method"].as_str() else {
            break message;
        };
        let seq = message["params"]["seq"].as_u64().expect("a seq");
        if let Some(previous) = previous_seq {
            assert_eq!(seq, previous + 1, "an event is missing or out of order");
        }
        previous_seq = Some(seq);
        if method == "tool/output" {
            stdout.push_str(message["params"]["data"].as_str().expect("output data"));
        }
        last_method = method.to_owned();
    };
    assert_eq!(response["id"], 3, "{response}");
    assert_eq!(
        last_method, "batch/done",
        "the response comes after every event"
    );
    assert_eq!(
        response["result"]["results"][0]["result"]["ok"], true,
        "{response}"
    );
    let expected: String = (1..=lines).map(|n| format!("{n}\n")).collect();
    assert_eq!(stdout.len(), expected.len(), "output bytes lost");
    assert!(stdout == expected, "the output arrived out of order");
}
