//! The `initialize` handshake: an unsupported version and a second handshake refused, nothing
//! served before it, requests written right behind it served, and when the daemon started; and
//! every kind of id answered under itself.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_protocol::time::parse_rfc3339;
use toold_tests::daemon::{RawConnection, TestDaemon, Wire};

use super::{INVALID_PARAMS, METHOD_NOT_FOUND, NOT_INITIALIZED, code_of};

#[tokio::test]
async fn initialize_refuses_an_unsupported_version_and_a_second_handshake() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let refused = connection
        .call(1, "initialize", json!({"protocol_version": 2}))
        .await;
    assert_eq!(code_of(&refused), INVALID_PARAMS);
    assert_eq!(refused["error"]["data"]["supported"], json!([1]));

    // The refused handshake left the connection uninitialized: version 1 still works once.
    let init = connection
        .call_ok(
            2,
            "initialize",
            json!({"protocol_version": 1, "client_info": {"name": "raw"}, "capabilities": {"approvals": true}}),
        )
        .await;
    assert_eq!(init["capabilities"]["client_tools"], true);
    assert!(
        !init["capabilities"]["modes"]
            .as_array()
            .expect("modes")
            .contains(&json!("bypass")),
        "bypass is not offered without allow_bypass: {init}"
    );
    let again = connection
        .call(3, "initialize", json!({"protocol_version": 1}))
        .await;
    assert!(again.get("error").is_some(), "a second initialize: {again}");
    assert_eq!(
        connection.call_ok(4, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn a_request_before_initialize_is_refused_and_an_unknown_method_is_not_found() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let early = connection.call(1, "session/list", json!({})).await;
    assert_eq!(code_of(&early), NOT_INITIALIZED);
    let early_unknown = connection.call(2, "no/such", json!({})).await;
    assert_eq!(code_of(&early_unknown), NOT_INITIALIZED);
    connection.initialize().await;
    let unknown = connection.call(3, "no/such", json!({})).await;
    assert_eq!(code_of(&unknown), METHOD_NOT_FOUND);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .expect("message")
            .contains("no/such"),
        "{unknown}"
    );
}

/// Requests written right behind `initialize`, in the same write, wait for it: none is refused
/// as "not initialized", whatever order their handlers run in.
#[tokio::test]
async fn requests_written_right_behind_initialize_are_served() {
    let daemon = TestDaemon::start();
    for _ in 0..20 {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        let mut burst = String::new();
        burst.push_str(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}).to_string());
        burst.push('\n');
        for id in 2..6 {
            burst.push_str(
                &json!({"jsonrpc": "2.0", "id": id, "method": "session/list"}).to_string(),
            );
            burst.push('\n');
        }
        connection.send_bytes(burst.as_bytes()).await;
        for _ in 1..6 {
            let response = connection.receive().await;
            assert!(response.get("result").is_some(), "{response}");
        }
    }
}

/// `initialize` says when the daemon process started (RFC 3339, to the second): between just
/// before it was started and now, and later for a daemon started again.
#[tokio::test]
async fn initialize_says_when_the_daemon_started() {
    let started_at = |init: &Value| {
        let text = init["started_at"].as_str().expect("started_at").to_owned();
        parse_rfc3339(&text).unwrap_or_else(|| panic!("not RFC 3339: {text}"))
    };
    // The daemon writes whole seconds: the earliest it can say is this second's start.
    let before = std::time::SystemTime::now() - Duration::from_secs(1);
    let mut daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let first = started_at(&connection.initialize().await);
    assert!(
        before <= first && first <= std::time::SystemTime::now(),
        "{first:?} is not between {before:?} and now"
    );
    drop(connection);

    // A second apart at least, so that the whole seconds differ.
    std::thread::sleep(Duration::from_millis(1100));
    daemon.restart();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let again = started_at(&connection.initialize().await);
    assert!(again > first, "{again:?} is not after {first:?}");
}

#[tokio::test]
async fn every_kind_of_id_is_answered_under_itself_with_a_result_or_an_error() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let ids = [
        json!(-7),
        json!(i64::MAX),
        json!(0),
        json!("a \"quoted\" id\n"),
        json!(""),
    ];
    for id in ids {
        connection
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "session/list", "params": {}}))
            .await;
        let listed = connection.response().await;
        assert_eq!(
            listed,
            json!({"jsonrpc": "2.0", "id": id, "result": {"sessions": []}})
        );
        connection
            .send(&json!({"jsonrpc": "2.0", "id": id, "method": "session/get", "params": {}}))
            .await;
        let refused = connection.response().await;
        assert_eq!(refused["id"], id, "{refused}");
        assert_eq!(code_of(&refused), INVALID_PARAMS, "{refused}");
        assert!(refused.get("result").is_none(), "{refused}");
    }
}
