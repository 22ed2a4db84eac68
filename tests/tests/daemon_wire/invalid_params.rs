//! Params the daemon refuses as invalid, naming the field: unknown capabilities, bad params of
//! each method, an unknown session, duplicate call ids, and bypass mode the config does not
//! allow.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_tests::daemon::{RawConnection, TestDaemon, Wire};

use super::{INVALID_PARAMS, UNKNOWN_SESSION, code_of, read_file_call, session_with_a_file};

#[tokio::test]
async fn unknown_capabilities_in_initialize_are_invalid_params() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let unknown = connection
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {"approval": true}}),
        )
        .await;
    assert_invalid_params_naming(&unknown, "approval");
    let unknown_hook = connection
        .call(
            2,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {"hooks": ["on_everything"]}}),
        )
        .await;
    assert_eq!(code_of(&unknown_hook), INVALID_PARAMS, "{unknown_hook}");
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

/// Asserts a `-32602` whose message names `field`.
fn assert_invalid_params_naming(response: &Value, field: &str) {
    assert_eq!(code_of(response), INVALID_PARAMS, "{response}");
    let message = response["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(field),
        "the message names {field:?}: {message}"
    );
}

#[tokio::test]
async fn bad_params_are_invalid_params_naming_the_field() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let work = daemon.work();

    let unknown_field = connection
        .call(1, "session/create", json!({"cwd": work, "time_out_ms": 10}))
        .await;
    assert_invalid_params_naming(&unknown_field, "time_out_ms");

    let wrong_type = connection
        .call(
            2,
            "session/create",
            json!({"cwd": work, "timeout_ms": "soon"}),
        )
        .await;
    assert_invalid_params_naming(&wrong_type, "timeout_ms");

    let relative = connection
        .call(3, "session/create", json!({"cwd": "relative/dir"}))
        .await;
    assert_invalid_params_naming(&relative, "cwd");

    let missing = connection
        .call(
            4,
            "session/create",
            json!({"cwd": work.join("does-not-exist")}),
        )
        .await;
    assert_invalid_params_naming(&missing, "cwd");

    let no_cwd = connection.call(5, "session/create", json!({})).await;
    assert_invalid_params_naming(&no_cwd, "cwd");

    let bad_root = connection
        .call(
            6,
            "session/create",
            json!({"cwd": work, "roots": ["not/absolute"]}),
        )
        .await;
    assert_invalid_params_naming(&bad_root, "roots");

    let bad_mode = connection
        .call(7, "session/create", json!({"cwd": work, "mode": "yolo"}))
        .await;
    assert_invalid_params_naming(&bad_mode, "mode");

    let bad_safety = connection
        .call(8, "tools/list", json!({"safety": "dangerous"}))
        .await;
    assert_invalid_params_naming(&bad_safety, "safety");

    let nested = connection
        .call(
            10,
            "session/create",
            json!({"cwd": work, "rules": {"allow": "read_file"}}),
        )
        .await;
    assert_invalid_params_naming(&nested, "rules");

    // Nothing was created by the refused requests.
    assert_eq!(
        connection.call_ok(9, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn an_unknown_session_is_reported_by_every_method_that_names_one() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let nobody = json!({"session_id": "s_missing"});
    for (id, method, params) in [
        (1, "session/attach", nobody.clone()),
        (2, "session/detach", nobody.clone()),
        (
            3,
            "session/update",
            json!({"session_id": "s_missing", "mode": "plan"}),
        ),
        (4, "session/get", nobody.clone()),
        (5, "session/close", nobody.clone()),
        (6, "tools/cancel", nobody.clone()),
        (
            7,
            "tools/execute",
            json!({"session_id": "s_missing", "calls": [read_file_call("a", "x")]}),
        ),
    ] {
        let response = connection.call(id, method, params).await;
        assert_eq!(code_of(&response), UNKNOWN_SESSION, "{method}: {response}");
    }
}

#[tokio::test]
async fn duplicate_call_ids_in_a_batch_are_invalid_params() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let session_id = session_with_a_file(&daemon, &mut connection).await;
    let response = connection
        .call(
            2,
            "tools/execute",
            json!({"session_id": session_id, "calls": [
                read_file_call("same", "hello.txt"),
                read_file_call("same", "hello.txt"),
            ]}),
        )
        .await;
    assert_invalid_params_naming(&response, "same");
    let snapshot = connection
        .call_ok(3, "session/get", json!({"session_id": session_id}))
        .await;
    assert_eq!(snapshot["last_seq"], 0, "no batch ran: {snapshot}");
}

#[tokio::test]
async fn bypass_mode_is_refused_unless_the_config_allows_it() {
    let strict = TestDaemon::start();
    let mut connection = RawConnection::connect(&strict.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let refused = connection
        .call(
            1,
            "session/create",
            json!({"cwd": strict.work(), "mode": "bypass"}),
        )
        .await;
    assert_invalid_params_naming(&refused, "allow_bypass");
    let created = connection
        .call_ok(2, "session/create", json!({"cwd": strict.work()}))
        .await;
    let refused_update = connection
        .call(
            3,
            "session/update",
            json!({"session_id": created["session_id"], "mode": "bypass"}),
        )
        .await;
    assert_invalid_params_naming(&refused_update, "allow_bypass");

    let lenient = TestDaemon::start_with_config(Some("allow_bypass = true\n"));
    let mut connection = RawConnection::connect(&lenient.socket(), Wire::Ndjson).await;
    let init = connection.initialize().await;
    assert!(
        init["capabilities"]["modes"]
            .as_array()
            .expect("modes")
            .contains(&json!("bypass")),
        "{init}"
    );
    let accepted = connection
        .call_ok(
            1,
            "session/create",
            json!({"cwd": lenient.work(), "mode": "bypass"}),
        )
        .await;
    assert_eq!(accepted["mode"], "bypass");
}
