//! A restart of the daemon: a grant is saved before its batch ends, and sessions come back
//! with their grants.

use std::time::Duration;

use serde_json::json;
use toold_tests::daemon::{TestDaemon, always, command_call, no_answers};

use super::{approvals, outcomes, result, seen, seq};

/// An `allow_session` grant is saved when it is recorded, not when its batch ends: a daemon
/// killed while the batch still runs comes back with the grant.
#[tokio::test]
async fn a_grant_is_saved_before_its_batch_ends() {
    let mut daemon = TestDaemon::start_asking();
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
    let mut daemon = TestDaemon::start_asking();
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
