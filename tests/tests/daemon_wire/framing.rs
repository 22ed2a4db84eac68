//! How messages are framed and read: a full exchange in both framings (NDJSON, LSP headers with
//! CRLF or LF), a JSON-RPC batch, and bad input: garbage, invalid UTF-8 or JSON, broken LSP
//! headers, a first byte that picks no framing, messages that are not requests, a 20 MB line.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_protocol::Framing;
use toold_protocol::time::parse_rfc3339;
use toold_tests::daemon::{RawConnection, TestClient, TestDaemon, Wire, no_answers};

use super::{
    INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, code_of, read_file_call, session_with_a_file,
};

/// initialize, session/create and a read_file batch on a raw connection, checked to the field.
async fn full_exchange(daemon: &TestDaemon, wire: Wire) -> RawConnection {
    let mut connection = RawConnection::connect(&daemon.socket(), wire).await;
    let init = connection.initialize().await;
    assert_eq!(init["protocol_version"], 1);
    assert_eq!(init["server_info"]["name"], "toold");
    assert!(init["instance_id"].is_string());
    let started_at = init["started_at"].as_str().expect("started_at");
    assert!(parse_rfc3339(started_at).is_some(), "{started_at}");
    let session_id = session_with_a_file(daemon, &mut connection).await;
    let executed = connection
        .call_ok(
            2,
            "tools/execute",
            json!({"session_id": session_id, "calls": [read_file_call("call_a", "hello.txt")]}),
        )
        .await;
    let results = executed["results"].as_array().expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["call_id"], "call_a");
    let result = &results[0]["result"];
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["tool"], "read_file");
    assert_eq!(result["content"], "first line\nsecond line\n");
    assert_eq!(result["metadata"]["call_id"], "call_a");
    assert_eq!(result["metadata"]["total_lines"], 2);
    connection
}

// ---------------------------------------------------------------------------------------------
// Both framings.

#[tokio::test]
async fn a_full_exchange_over_ndjson_in_raw_bytes() {
    let daemon = TestDaemon::start();
    full_exchange(&daemon, Wire::Ndjson).await;
}

#[tokio::test]
async fn a_full_exchange_over_lsp_framing_with_crlf_headers() {
    let daemon = TestDaemon::start();
    let connection = full_exchange(&daemon, Wire::Lsp { crlf: true }).await;
    let headers = connection.last_headers.to_ascii_lowercase();
    assert!(
        headers.starts_with("content-length: ") && headers.ends_with("\r\n\r\n"),
        "the reply is LSP-framed: {headers:?}"
    );
}

#[tokio::test]
async fn a_full_exchange_over_lsp_framing_with_lf_headers() {
    let daemon = TestDaemon::start();
    full_exchange(&daemon, Wire::Lsp { crlf: false }).await;
}

#[tokio::test]
async fn lsp_header_names_are_case_insensitive_and_blank_lines_between_messages_are_skipped() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}).to_string();
    connection
        .send_bytes(format!("CONTENT-LENGTH: {}\r\n\r\n{initialize}", initialize.len()).as_bytes())
        .await;
    assert_eq!(connection.response().await["result"]["protocol_version"], 1);

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "session/list"}).to_string();
    connection
        .send_bytes(
            format!(
                "\r\ncontent-type: application/json\r\ncontent-length:{}  \r\n\r\n{list}",
                list.len()
            )
            .as_bytes(),
        )
        .await;
    let response = connection.response().await;
    assert_eq!(response["id"], 2);
    assert_eq!(response["result"]["sessions"], json!([]));
}

#[tokio::test]
async fn the_client_library_speaks_lsp_framing_to_the_daemon() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("notes.md"), "# notes\n").expect("fixture");
    let client = TestClient::connect(&daemon.socket(), Framing::Lsp, json!({}), no_answers()).await;
    let session_id = client.create_session(&daemon.work(), json!({})).await;
    let executed = client
        .request(
            "tools/execute",
            json!({"session_id": session_id, "calls": [read_file_call("c1", "notes.md")]}),
        )
        .await
        .expect("tools/execute");
    assert_eq!(executed["results"][0]["result"]["content"], "# notes\n");
}

#[tokio::test]
async fn a_byte_order_mark_and_leading_whitespace_before_the_first_message_are_skipped() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.send_bytes(b"\xEF\xBB\xBF \n\t").await;
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

// ---------------------------------------------------------------------------------------------
// Bad input.

#[tokio::test]
async fn garbage_and_invalid_utf8_get_parse_errors_and_the_connection_stays_usable() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;

    connection.send_bytes(b"{this is not json\n").await;
    let garbage = connection.receive().await;
    assert_eq!(code_of(&garbage), PARSE_ERROR);
    assert_eq!(garbage["id"], Value::Null);

    connection
        .send_bytes(
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"session/list\",\"x\":\"\xff\xfe\"}\n",
        )
        .await;
    let invalid_utf8 = connection.receive().await;
    assert_eq!(code_of(&invalid_utf8), PARSE_ERROR);
    assert_eq!(invalid_utf8["id"], Value::Null);

    assert_eq!(
        connection.call_ok(6, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn invalid_json_in_an_lsp_frame_is_a_parse_error_in_lsp_framing() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection.send_frame(b"[1, 2,").await;
    let garbage = connection.receive().await;
    assert_eq!(code_of(&garbage), PARSE_ERROR);
    assert_eq!(garbage["id"], Value::Null);
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

#[tokio::test]
async fn lsp_headers_without_content_length_are_an_invalid_request_then_a_close() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection
        .send_bytes(b"Content-Type: application/json\r\n\r\n{}")
        .await;
    let answer = connection.receive().await;
    assert_eq!(code_of(&answer), INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    assert!(
        answer["error"]["message"]
            .as_str()
            .expect("message")
            .contains("Content-Length"),
        "{answer}"
    );
    assert_eq!(connection.receive_or_closed().await, None, "then the close");
}

#[tokio::test]
async fn an_empty_lsp_body_is_a_parse_error_and_the_connection_goes_on() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Lsp { crlf: true }).await;
    connection.send_bytes(b"Content-Length: 0\r\n\r\n").await;
    let answer = connection.receive().await;
    assert_eq!(code_of(&answer), PARSE_ERROR, "{answer}");
    assert_eq!(connection.initialize().await["protocol_version"], 1);
}

#[tokio::test]
async fn a_first_byte_that_chooses_no_framing_closes_the_connection_unanswered() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.send_bytes(b"\x00\x01garbage\n").await;
    assert_eq!(connection.receive_or_closed().await, None);
    let client = daemon.connect(json!({}), no_answers()).await;
    client
        .request("session/list", json!({}))
        .await
        .expect("the daemon still serves");
}

#[tokio::test]
async fn well_formed_messages_that_are_not_requests_are_invalid_requests() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    for message in [
        json!({"jsonrpc": "2.0"}),
        json!([]),
        json!(42),
        json!({"jsonrpc": "1.0", "id": 3, "method": "session/list"}),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "session/list"}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/list", "params": "text"}),
    ] {
        connection.send(&message).await;
        let answer = connection.receive().await;
        assert_eq!(code_of(&answer), INVALID_REQUEST, "for {message}: {answer}");
    }
    assert_eq!(
        connection.call_ok(9, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn a_20_mb_line_closes_its_connection_while_another_is_served_during_and_after() {
    let daemon = TestDaemon::start();
    let bystander = daemon.connect(json!({}), no_answers()).await;
    let mut flooder = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    flooder.initialize().await;

    // A string member 20 MB long: the first half, a request elsewhere, then the rest.
    let half = vec![b'a'; 10 * 1024 * 1024];
    flooder
        .send_bytes(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"session/list\",\"params\":{\"pad\":\"",
        )
        .await;
    flooder.send_bytes(&half).await;
    let during = bystander
        .request("session/list", json!({}))
        .await
        .expect("served while the other connection floods");
    assert_eq!(during["sessions"], json!([]));
    // The daemon may close the connection before it has read everything: a refused write is
    // part of the expected outcome.
    let mut rest = half;
    rest.extend_from_slice(b"\"}}\n");
    flooder.try_send_bytes(&rest).await;

    let answer = flooder
        .receive_or_closed()
        .await
        .expect("an answer before the close");
    assert_eq!(code_of(&answer), INVALID_REQUEST, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    assert!(
        answer["error"]["message"]
            .as_str()
            .expect("message")
            .contains("too large"),
        "{answer}"
    );
    assert_eq!(flooder.receive_or_closed().await, None, "then the close");

    let after = bystander
        .request("session/list", json!({}))
        .await
        .expect("served after the other connection was closed");
    assert_eq!(after["sessions"], json!([]));
    let fresh = daemon.connect(json!({}), no_answers()).await;
    fresh
        .request("session/list", json!({}))
        .await
        .expect("a new connection is served too");
}

#[tokio::test]
async fn a_batch_of_requests_is_answered_with_an_array_in_order() {
    let daemon = TestDaemon::start();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    connection.initialize().await;
    let session_id = session_with_a_file(&daemon, &mut connection).await;
    connection
        .send(&json!([
            {"jsonrpc": "2.0", "id": "x", "method": "tools/execute", "params":
                {"session_id": session_id, "calls": [read_file_call("r", "hello.txt")]}},
            {"jsonrpc": "2.0", "id": 2, "method": "session/get", "params": {"session_id": session_id}},
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 999}},
            {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
            {"jsonrpc": "2.0", "id": 4, "method": "session/list"},
        ]))
        .await;
    let answer = connection.response().await;
    let entries = answer
        .as_array()
        .unwrap_or_else(|| panic!("an array: {answer}"));
    let ids: Vec<&Value> = entries.iter().map(|entry| &entry["id"]).collect();
    assert_eq!(ids, [&json!("x"), &json!(2), &json!(3), &json!(4)]);
    assert_eq!(
        entries[0]["result"]["results"][0]["result"]["content"],
        "first line\nsecond line\n"
    );
    assert_eq!(entries[1]["result"]["session_id"], json!(session_id));
    assert_eq!(code_of(&entries[2]), METHOD_NOT_FOUND);
    assert_eq!(
        entries[3]["result"]["sessions"].as_array().map(Vec::len),
        Some(1)
    );
}
