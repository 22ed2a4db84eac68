//! A session's life after its creation: `session/update` and `session/close` (which stays
//! closed after a restart), what `on_disconnect` does to a batch whose submitter leaves, and
//! the idle TTL of a session no client is attached to.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_protocol::error_code;
use toold_tests::daemon::{TestDaemon, command_call, no_answers, wire_error_type_or_ok};

use super::{outcomes, params, rpc_code};

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
        .update_session(
            &session,
            json!({"allowed_tools": null, "title": null, "mode": "default"}),
        )
        .await;
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
    assert_eq!(wire_error_type_or_ok(&result), "canceled", "{result}");
}

#[tokio::test]
async fn with_on_disconnect_continue_the_batch_completes() {
    let result = result_after_submitter_leaves(json!({"on_disconnect": "continue"})).await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
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
