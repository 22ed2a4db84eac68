//! Tests of the peer: two peers over in-memory pipes, and raw bytes against one peer.

use std::future::Future;
use std::time::Duration;

use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf,
};
use tokio::sync::mpsc;

use super::*;
use crate::framing::Framing;
use crate::methods::{CANCEL_REQUEST, SessionClose, ToolsListChanged};
use crate::rpc::{Empty, Notification, Request, error_code};
use crate::session::SessionIdParams;
use crate::tools_api::Revision;

/// Long enough for a loaded machine; every wait that should succeed is bounded by it.
const PATIENCE: Duration = Duration::from_secs(5);
/// How long to watch for something that must not happen.
const QUIET: Duration = Duration::from_millis(50);

async fn within<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future)
        .await
        .expect("timed out")
}

type RequestFn = dyn Fn(PeerHandle, Request) -> BoxFuture<'static, Reply> + Send + Sync;

/// A handler made of a closure for requests; notifications go to a channel the test reads.
struct TestHandler {
    on_request: Box<RequestFn>,
    notifications: mpsc::UnboundedSender<Notification>,
}

impl Handler for TestHandler {
    fn request(&self, peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
        (self.on_request)(peer, request)
    }

    fn notification(&self, _peer: PeerHandle, notification: Notification) {
        let _ = self.notifications.send(notification);
    }
}

fn handler<F, Fut>(on_request: F) -> (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>)
where
    F: Fn(PeerHandle, Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let (notifications, received) = mpsc::unbounded_channel();
    let handler = TestHandler {
        on_request: Box::new(move |peer, request| Box::pin(on_request(peer, request))),
        notifications,
    };
    (Arc::new(handler), received)
}

/// Answers with the method and params; `slow` after a pause, `hang` never, `boom` panics,
/// `rendered` with pre-rendered text.
fn echo() -> (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>) {
    handler(|_peer, request| async move {
        match request.method.as_str() {
            "slow" => tokio::time::sleep(QUIET).await,
            "hang" => std::future::pending::<()>().await,
            "boom" => panic!("boom"),
            "rendered" => {
                let id = serde_json::to_string(&request.id).unwrap();
                return Reply::Rendered(JsonText(format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":"pre-rendered"}}"#
                )));
            }
            _ => {}
        }
        Reply::result(json!({"method": request.method, "params": request.params}))
    })
}

struct Side {
    peer: PeerHandle,
    task: PeerTask,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

fn spawn_side(
    stream: DuplexStream,
    options: PeerOptions,
    (handler, notifications): (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>),
) -> Side {
    let (read, write) = tokio::io::split(stream);
    let (peer, task) = Peer::spawn(read, write, options, handler);
    Side {
        peer,
        task,
        notifications,
    }
}

/// A client peer in `framing` and a detecting server peer, connected.
fn connect(
    framing: Framing,
    client: (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>),
    server: (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>),
) -> (Side, Side) {
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    (
        spawn_side(client_end, PeerOptions::client(framing), client),
        spawn_side(server_end, PeerOptions::server(), server),
    )
}

/// The other end of a peer, spoken to in raw bytes.
struct Raw {
    reader: BufReader<ReadHalf<DuplexStream>>,
    writer: WriteHalf<DuplexStream>,
}

impl Raw {
    fn new(stream: DuplexStream) -> Self {
        let (read, write) = tokio::io::split(stream);
        Self {
            reader: BufReader::new(read),
            writer: write,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        within(self.writer.write_all(bytes)).await.unwrap();
    }

    async fn send_line(&mut self, value: Value) {
        self.send(format!("{value}\n").as_bytes()).await;
    }

    async fn send_lsp(&mut self, value: Value) {
        let body = value.to_string();
        self.send(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes())
            .await;
    }

    async fn line(&mut self) -> Value {
        let mut line = String::new();
        within(self.reader.read_line(&mut line)).await.unwrap();
        assert!(line.ends_with('\n'), "no complete line: {line:?}");
        serde_json::from_str(&line).unwrap()
    }

    async fn lsp(&mut self) -> Value {
        let mut length = None;
        loop {
            let mut header = String::new();
            within(self.reader.read_line(&mut header)).await.unwrap();
            if header == "\r\n" {
                break;
            }
            let (name, value) = header.trim_end().split_once(": ").unwrap();
            assert_eq!(name, "Content-Length");
            length = Some(value.parse::<usize>().unwrap());
        }
        let mut body = vec![0; length.unwrap()];
        within(self.reader.read_exact(&mut body)).await.unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    /// Asserts that the peer closed its end, having written nothing more.
    async fn assert_eof(&mut self) {
        let mut rest = Vec::new();
        within(self.reader.read_to_end(&mut rest)).await.unwrap();
        assert_eq!(String::from_utf8_lossy(&rest), "");
    }

    async fn assert_quiet(&mut self) {
        let mut byte = [0; 1];
        let read = tokio::time::timeout(QUIET, self.reader.read(&mut byte)).await;
        assert!(read.is_err(), "the peer wrote {read:?}");
    }
}

fn raw_pair(
    options: PeerOptions,
    handler: (Arc<dyn Handler>, mpsc::UnboundedReceiver<Notification>),
) -> (Raw, Side) {
    let (raw_end, peer_end) = tokio::io::duplex(64 * 1024);
    (Raw::new(raw_end), spawn_side(peer_end, options, handler))
}

fn request(id: i64, method: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method})
}

fn error_code_of(response: &Value) -> i64 {
    response["error"]["code"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cross_both_ways_with_colliding_ids() {
    let (client, server) = connect(Framing::Ndjson, echo(), echo());
    let mut calls = Vec::new();
    for n in 0..20 {
        for (side, peer) in [("client", &client.peer), ("server", &server.peer)] {
            let call = peer.request("ping", Some(json!({"from": side, "n": n})));
            calls.push((side, n, tokio::spawn(call)));
        }
    }
    for (side, n, call) in calls {
        let result = within(call).await.unwrap().unwrap();
        assert_eq!(
            result,
            json!({"method":"ping","params":{"from":side,"n":n}})
        );
    }
    assert_eq!(client.peer.pending_requests(), 0);
    assert_eq!(server.peer.pending_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_can_wait_for_a_request_it_sends_back() {
    let server_handler = handler(|peer, request| async move {
        let params = json!({"call": request.params});
        match peer.request("approval/request", Some(params)).await {
            Ok(answer) => Reply::result(json!({"approved": answer})),
            Err(err) => Reply::error(ErrorObject::internal_error(err)),
        }
    });
    let client_handler = handler(|_peer, request| async move {
        assert_eq!(request.method, "approval/request");
        Reply::result(json!({"decision": "allow_once", "for": request.params}))
    });
    let (client, _server) = connect(Framing::Ndjson, client_handler, server_handler);
    let calls: Vec<_> = (0..3)
        .map(|n| tokio::spawn(client.peer.request("tools/execute", Some(json!({"n": n})))))
        .collect();
    for (n, call) in calls.into_iter().enumerate() {
        let result = within(call).await.unwrap().unwrap();
        assert_eq!(
            result,
            json!({"approved": {"decision": "allow_once", "for": {"call": {"n": n}}}})
        );
    }
}

#[tokio::test]
async fn null_results_and_error_answers_reach_the_caller() {
    let (client, _server) = connect(
        Framing::Ndjson,
        echo(),
        handler(|_peer, request| async move {
            match request.method.as_str() {
                "null" => Reply::result(Value::Null),
                _ => Reply::error(ErrorObject::method_not_found(&request.method)),
            }
        }),
    );
    assert_eq!(
        within(client.peer.request("null", None)).await,
        Ok(Value::Null)
    );
    let failed = within(client.peer.request("nope", None)).await.unwrap_err();
    assert_eq!(
        failed,
        RequestError::Rpc(ErrorObject::method_not_found("nope"))
    );
}

#[tokio::test]
async fn typed_calls_decode_the_result() {
    let (client, _server) = connect(
        Framing::Ndjson,
        echo(),
        handler(|_peer, request| async move {
            match request.method.as_str() {
                "session/close" => Reply::result(json!({})),
                _ => Reply::result(json!(["not", "an", "object"])),
            }
        }),
    );
    let params = SessionIdParams {
        session_id: "s_1".to_owned(),
    };
    assert_eq!(
        within(client.peer.call::<SessionClose>(&params)).await,
        Ok(Empty {})
    );
    let (client, _server) = connect(
        Framing::Ndjson,
        echo(),
        handler(|_peer, _request| async move { Reply::result(json!([1])) }),
    );
    assert!(matches!(
        within(client.peer.call::<SessionClose>(&params)).await,
        Err(RequestError::InvalidResult(_))
    ));
}

#[tokio::test]
async fn a_batch_is_answered_once_with_every_request_in_order() {
    let (mut raw, mut server) = raw_pair(PeerOptions::server(), echo());
    raw.send_line(json!([
        request(1, "slow"),
        {"jsonrpc":"2.0","method":"note","params":{"k":1}},
        request(2, "fast"),
        {"foo": 1},
        request(3, "rendered"),
        {"jsonrpc":"2.0","id":99,"result":5},
    ]))
    .await;
    let answer = raw.line().await;
    assert_eq!(
        answer,
        json!([
            {"jsonrpc":"2.0","id":1,"result":{"method":"slow","params":null}},
            {"jsonrpc":"2.0","id":2,"result":{"method":"fast","params":null}},
            {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: missing \"jsonrpc\":\"2.0\""}},
            {"jsonrpc":"2.0","id":3,"result":"pre-rendered"},
        ])
    );
    let note = within(server.notifications.recv()).await.unwrap();
    assert_eq!(note.method, "note");

    // Only notifications: no answer at all, so the next line answers the empty batch.
    raw.send_line(json!([
        {"jsonrpc":"2.0","method":"a"},
        {"jsonrpc":"2.0","method":"b"}
    ]))
    .await;
    raw.send(b"[]\n").await;
    let empty = raw.line().await;
    assert_eq!(empty["id"], Value::Null);
    assert_eq!(
        error_code_of(&empty),
        i64::from(error_code::INVALID_REQUEST)
    );
    for method in ["a", "b"] {
        assert_eq!(
            within(server.notifications.recv()).await.unwrap().method,
            method
        );
    }
}

#[tokio::test]
async fn bad_input_is_answered_and_the_connection_stays_usable() {
    let (mut raw, _server) = raw_pair(PeerOptions::server(), echo());
    let cases: [(&[u8], Value, i32); 5] = [
        (b"{\"jsonrpc\":\n", Value::Null, error_code::PARSE_ERROR),
        (b"{\"a\":\"\xff\"}\n", Value::Null, error_code::PARSE_ERROR),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":3}\n",
            json!(3),
            error_code::INVALID_REQUEST,
        ),
        (b"7\n", Value::Null, error_code::INVALID_REQUEST),
        (
            b"{\"jsonrpc\":\"1.0\",\"id\":\"x\",\"method\":\"m\"}\n",
            json!("x"),
            error_code::INVALID_REQUEST,
        ),
    ];
    for (input, id, code) in cases {
        raw.send(input).await;
        let answer = raw.line().await;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(error_code_of(&answer), i64::from(code), "{answer}");
        raw.send_line(request(10, "after")).await;
        assert_eq!(raw.line().await["result"]["method"], "after");
    }
}

#[tokio::test]
async fn a_handler_panic_is_an_internal_error_for_that_request_only() {
    let (mut raw, _server) = raw_pair(PeerOptions::server(), echo());
    raw.send_line(request(1, "boom")).await;
    let answer = raw.line().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(
        error_code_of(&answer),
        i64::from(error_code::INTERNAL_ERROR)
    );
    raw.send_line(request(2, "fine")).await;
    assert_eq!(raw.line().await["id"], 2);
}

#[tokio::test]
async fn a_message_slower_than_the_frame_deadline_is_answered_and_cut() {
    let options = PeerOptions {
        frame_timeout: Some(Duration::from_millis(200)),
        ..PeerOptions::server()
    };
    // Idle between messages is not limited: a whole message after a long pause is served.
    let (mut raw, _server) = raw_pair(options.clone(), echo());
    tokio::time::sleep(Duration::from_millis(400)).await;
    raw.send_line(request(1, "fast")).await;
    assert_eq!(raw.line().await["id"], 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    raw.send_line(request(2, "fast")).await;
    assert_eq!(raw.line().await["id"], 2);

    // Started and never finished, in either framing: answered -32600, then cut.
    for start in [
        &b"{\"jsonrpc\":\"2.0\","[..],
        b"Content-Length: 40\r\n\r\n{\"js",
    ] {
        let (mut raw, _server) = raw_pair(options.clone(), echo());
        let started = std::time::Instant::now();
        raw.send(start).await;
        let answer = if start.starts_with(b"{") {
            raw.line().await
        } else {
            raw.lsp().await
        };
        assert_eq!(
            error_code_of(&answer),
            i64::from(error_code::INVALID_REQUEST)
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("did not arrive")
        );
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "cut before the deadline"
        );
        raw.assert_eof().await;
    }
}

#[tokio::test]
async fn the_frame_deadline_is_per_message_not_per_stream() {
    let options = PeerOptions {
        frame_timeout: Some(Duration::from_millis(200)),
        ..PeerOptions::server()
    };
    let (mut raw, _server) = raw_pair(options.clone(), echo());
    // A steady stream for 3× the deadline where every write ends inside the next message:
    // each message is quick, so none is cut.
    let messages: Vec<String> = (1..=15)
        .map(|id| format!("{}\n", request(id, "fast")))
        .collect();
    let stream = messages.concat();
    let chunk = stream.len() / 15 + 7;
    for piece in stream.as_bytes().chunks(chunk) {
        raw.send(piece).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    for id in 1..=15 {
        assert_eq!(raw.line().await["id"], id);
    }

    // Whitespace that never ends its line is the start of a message too: cut at the deadline.
    let (mut raw, _server) = raw_pair(options, echo());
    raw.send_line(request(1, "fast")).await;
    assert_eq!(raw.line().await["id"], 1);
    raw.send(b"      ").await;
    let answer = raw.line().await;
    assert_eq!(
        error_code_of(&answer),
        i64::from(error_code::INVALID_REQUEST)
    );
    raw.assert_eof().await;
}

#[tokio::test]
async fn requests_over_the_in_flight_limit_are_refused_not_queued() {
    let options = PeerOptions {
        max_in_flight_requests: 1,
        ..PeerOptions::server()
    };
    let (mut raw, _server) = raw_pair(options, echo());
    raw.send_line(request(1, "hang")).await;
    raw.send_line(request(2, "fast")).await;
    let refused = raw.line().await;
    assert_eq!(refused["id"], 2);
    assert_eq!(error_code_of(&refused), i64::from(error_code::OVERLOADED));
}

#[tokio::test]
async fn an_oversize_message_is_answered_then_the_connection_closes() {
    for lsp in [false, true] {
        let options = PeerOptions {
            max_message_bytes: 64,
            ..PeerOptions::server()
        };
        let (mut raw, server) = raw_pair(options, echo());
        let big = json!({"jsonrpc":"2.0","id":1,"method":"x","params":{"pad":"x".repeat(200)}});
        let answer = if lsp {
            raw.send_lsp(big).await;
            raw.lsp().await
        } else {
            raw.send_line(big).await;
            raw.line().await
        };
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(
            error_code_of(&answer),
            i64::from(error_code::INVALID_REQUEST)
        );
        raw.assert_eof().await;
        assert!(matches!(within(server.task).await, CloseReason::TooLarge));
        assert!(server.peer.notify("late", None).await.is_err());
    }
}

#[tokio::test]
async fn an_unreadable_header_is_answered_then_the_connection_closes() {
    let (mut raw, server) = raw_pair(PeerOptions::server(), echo());
    raw.send(b"Content-Length: lots\r\n\r\n").await;
    let answer = raw.lsp().await;
    assert_eq!(
        error_code_of(&answer),
        i64::from(error_code::INVALID_REQUEST)
    );
    raw.assert_eof().await;
    assert!(matches!(within(server.task).await, CloseReason::Framing(_)));
}

#[tokio::test]
async fn an_unknown_first_byte_closes_without_an_answer() {
    let (mut raw, server) = raw_pair(PeerOptions::server(), echo());
    raw.send(b"\x01hello\n").await;
    raw.assert_eof().await;
    assert!(matches!(within(server.task).await, CloseReason::Framing(_)));
}

#[tokio::test]
async fn the_server_waits_for_the_client_and_answers_in_its_framing() {
    let (mut raw, server) = raw_pair(PeerOptions::server(), echo());
    // Queued before the client spoke: held until the framing is known.
    server
        .peer
        .notify("tools/list_changed", Some(json!({"revision": 1})))
        .await
        .unwrap();
    raw.assert_quiet().await;
    assert_eq!(server.peer.framing(), None);
    raw.send_lsp(request(1, "initialize")).await;
    assert_eq!(raw.lsp().await["method"], "tools/list_changed");
    assert_eq!(raw.lsp().await["result"]["method"], "initialize");
    assert_eq!(server.peer.framing(), Some(Framing::Lsp));
}

#[tokio::test]
async fn two_peers_talk_in_lsp_framing() {
    let (client, server) = connect(Framing::Lsp, echo(), echo());
    let result = within(client.peer.request("ping", Some(json!({"x": "a\nb"}))))
        .await
        .unwrap();
    assert_eq!(result["params"]["x"], "a\nb");
    assert_eq!(server.peer.framing(), Some(Framing::Lsp));
    let back = within(server.peer.request("pong", None)).await.unwrap();
    assert_eq!(back["method"], "pong");
}

#[tokio::test]
async fn pending_requests_fail_at_once_when_the_peer_disconnects() {
    let (mut raw, client) = raw_pair(PeerOptions::client(Framing::Ndjson), echo());
    let first = tokio::spawn(client.peer.request("hang", None));
    let second = tokio::spawn(client.peer.request("hang", None));
    raw.line().await;
    raw.line().await;
    drop(raw);
    // The flush timeout is seconds; failing the pending requests must not wait for it.
    let quick = Duration::from_millis(500);
    for call in [first, second] {
        let failed = tokio::time::timeout(quick, call).await.unwrap().unwrap();
        assert_eq!(failed, Err(RequestError::Closed));
    }
    assert!(matches!(
        within(client.peer.closed()).await,
        CloseReason::Eof
    ));
    assert_eq!(
        within(client.peer.request("later", None)).await,
        Err(RequestError::Closed)
    );
    assert_eq!(client.peer.pending_requests(), 0);
}

#[tokio::test]
async fn dropping_a_request_future_sends_cancel_request() {
    let (mut raw, client) = raw_pair(PeerOptions::client(Framing::Ndjson), echo());
    let call = client.peer.request("hang", None);
    let id = call.id();
    let running = tokio::spawn(call);
    assert_eq!(raw.line().await["id"], id);
    running.abort();
    let cancel = raw.line().await;
    assert_eq!(
        cancel,
        json!({"jsonrpc":"2.0","method":CANCEL_REQUEST,"params":{"id":id}})
    );
    assert_eq!(client.peer.pending_requests(), 0);
    // The late answer to the withdrawn request is dropped, not misrouted.
    raw.send_line(json!({"jsonrpc":"2.0","id":id,"result":1}))
        .await;

    // An explicit cancel resolves the future as canceled and also tells the other side.
    let call = client.peer.request("hang", None);
    let id = call.id();
    let running = tokio::spawn(call);
    assert_eq!(raw.line().await["id"], id);
    assert!(client.peer.cancel_request(id));
    assert_eq!(within(running).await.unwrap(), Err(RequestError::Canceled));
    assert_eq!(raw.line().await["params"]["id"], id);
    assert!(!client.peer.cancel_request(id));

    // A request dropped before it was queued never reaches the other side: no cancel either.
    drop(client.peer.request("never", None));
    client.peer.notify("marker", None).await.unwrap();
    assert_eq!(raw.line().await["method"], "marker");
    assert_eq!(client.peer.pending_requests(), 0);
}

#[tokio::test]
async fn a_reader_that_does_not_read_fills_the_queue_and_nothing_more() {
    const CAPACITY: usize = 8;
    let options = PeerOptions {
        outgoing_capacity: CAPACITY,
        ..PeerOptions::client(Framing::Ndjson)
    };
    // A tiny pipe, so that the other side "not reading" is felt at once.
    let (raw_end, peer_end) = tokio::io::duplex(256);
    let mut raw = Raw::new(raw_end);
    let client = spawn_side(peer_end, options, echo());
    let pad = "x".repeat(100);
    let mut accepted = 0;
    let mut full = false;
    for i in 0..10_000 {
        match client
            .peer
            .try_notify("tools/output", Some(json!({"i": i, "pad": pad})))
        {
            Ok(()) => accepted += 1,
            Err(TrySendError::Full) => {
                full = true;
                break;
            }
            Err(TrySendError::Closed) => panic!("closed"),
        }
        // Let the writer take what it can.
        tokio::task::yield_now().await;
    }
    assert!(full, "never full after {accepted} notifications");
    // Held at most: the queue, one bounded write batch, and the pipe.
    let line_bytes = 140;
    let bound = CAPACITY + super::writer::MAX_WRITE_BATCH_BYTES / line_bytes + 256 / line_bytes + 2;
    assert!(accepted <= bound, "{accepted} accepted, bound {bound}");
    // A waiting sender waits.
    let waited = tokio::time::timeout(QUIET, client.peer.notify("blocked", None)).await;
    assert!(waited.is_err(), "notify did not wait for room");

    // Once the other side reads, everything arrives, in order.
    for i in 0..accepted {
        let line = raw.line().await;
        assert_eq!(line["params"]["i"], i, "{line}");
    }
    client.peer.try_notify("again", None).unwrap();
    assert_eq!(raw.line().await["method"], "again");
}

#[tokio::test]
async fn close_flushes_what_was_queued_then_ends() {
    let (mut raw, client) = raw_pair(PeerOptions::client(Framing::Ndjson), echo());
    client.peer.notify("last", None).await.unwrap();
    let pending = tokio::spawn(client.peer.request("hang", None));
    assert_eq!(raw.line().await["method"], "last");
    assert_eq!(raw.line().await["method"], "hang");
    client.peer.close();
    raw.assert_eof().await;
    assert_eq!(within(pending).await.unwrap(), Err(RequestError::Closed));
    assert!(matches!(
        within(client.task).await,
        CloseReason::ClosedLocally
    ));
    assert!(matches!(
        within(client.peer.closed()).await,
        CloseReason::ClosedLocally
    ));
    assert_eq!(client.peer.notify("after", None).await, Err(PeerClosed));
    assert_eq!(
        client.peer.try_notify("after", None),
        Err(TrySendError::Closed)
    );
}

#[tokio::test]
async fn large_messages_fill_the_byte_budget_before_the_message_bound() {
    const BUDGET: usize = 64 * 1024;
    let options = PeerOptions {
        outgoing_capacity: 256,
        outgoing_bytes: BUDGET,
        ..PeerOptions::client(Framing::Ndjson)
    };
    let (_raw_end_never_read, peer_end) = tokio::io::duplex(256);
    let client = spawn_side(peer_end, options, echo());
    let pad = "x".repeat(10_000);
    let mut accepted = 0;
    loop {
        match client
            .peer
            .try_notify("tools/output", Some(json!({"data": pad})))
        {
            Ok(()) => accepted += 1,
            Err(TrySendError::Full) => break,
            Err(TrySendError::Closed) => panic!("closed"),
        }
        tokio::task::yield_now().await;
        assert!(accepted < 256, "the byte budget never filled");
    }
    // Held at most: the budget, one write batch (and the message it ends in), and the pipe.
    let bound = BUDGET / 10_000 + super::writer::MAX_WRITE_BATCH_BYTES / 10_000 + 3;
    assert!(accepted <= bound, "{accepted} accepted, bound {bound}");
    // A sender that can wait waits for bytes too (even for a message larger than the whole
    // budget, which takes all of it rather than more).
    let waited = tokio::time::timeout(
        QUIET,
        client.peer.send_text(crate::framing::JsonText(format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"big\",\"params\":{{\"data\":\"{}\"}}}}",
            "y".repeat(2 * BUDGET)
        ))),
    )
    .await;
    assert!(waited.is_err(), "send_text did not wait for bytes");
}

#[tokio::test]
async fn closing_gives_up_on_a_peer_that_does_not_read() {
    let options = PeerOptions {
        outgoing_capacity: 2,
        flush_timeout: QUIET,
        ..PeerOptions::client(Framing::Ndjson)
    };
    let (_raw_end_never_read, peer_end) = tokio::io::duplex(64);
    let client = spawn_side(peer_end, options, echo());
    while client.peer.try_notify("fill", None).is_ok() {
        tokio::task::yield_now().await;
    }
    client.peer.close();
    assert!(matches!(
        within(client.task).await,
        CloseReason::ClosedLocally
    ));
}

#[tokio::test]
async fn a_write_error_closes_the_connection() {
    // Input that never ends (its other end stays open), output whose other end is gone:
    // only the failed write can end this connection.
    let (_input_kept_open, input) = tokio::io::duplex(64);
    let (output_gone, output) = tokio::io::duplex(64);
    drop(output_gone);
    let (handler, _notes) = echo();
    let (peer, task) = Peer::spawn(input, output, PeerOptions::client(Framing::Ndjson), handler);
    let pending = tokio::spawn(peer.request("hang", None));
    let reason = within(task).await;
    assert!(matches!(reason, CloseReason::WriteFailed(_)), "{reason}");
    assert_eq!(within(pending).await.unwrap(), Err(RequestError::Closed));
}

#[tokio::test]
async fn a_notification_rendered_once_goes_to_every_connection() {
    let text = render_notification::<ToolsListChanged>(&Revision { revision: 7 }).unwrap();
    for framing in [Framing::Ndjson, Framing::Lsp] {
        let (mut raw, client) = raw_pair(PeerOptions::client(framing), echo());
        client.peer.send_text(text.clone()).await.unwrap();
        let received = match framing {
            Framing::Ndjson => raw.line().await,
            Framing::Lsp => raw.lsp().await,
        };
        assert_eq!(
            received,
            json!({"jsonrpc":"2.0","method":"tools/list_changed","params":{"revision":7}})
        );
    }
}

#[tokio::test]
async fn connection_ids_differ() {
    let (client, server) = connect(Framing::Ndjson, echo(), echo());
    assert_ne!(client.peer.connection_id(), server.peer.connection_id());
    assert_eq!(
        client.peer.clone().connection_id(),
        client.peer.connection_id()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever bytes arrive, the server peer does not panic, and once the input ends its
    /// task ends too.
    #[test]
    fn garbage_never_panics_a_server_peer(
        prefix in prop_oneof![
            Just(&b""[..]),
            Just(&b"{"[..]),
            Just(&b"["[..]),
            Just(&b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}\n["[..]),
            Just(&b"Content-Length: 12\r\n\r\n"[..]),
        ],
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (raw_end, peer_end) = tokio::io::duplex(1024);
            let options = PeerOptions { max_message_bytes: 128, ..PeerOptions::server() };
            let server = spawn_side(peer_end, options, echo());
            let (mut raw_read, mut raw_write) = tokio::io::split(raw_end);
            let drain = tokio::spawn(async move {
                let mut sink = Vec::new();
                let _ = raw_read.read_to_end(&mut sink).await;
            });
            let _ = raw_write.write_all(prefix).await;
            let _ = raw_write.write_all(&bytes).await;
            let _ = raw_write.shutdown().await;
            let reason = within(server.task).await;
            assert!(!matches!(reason, CloseReason::Aborted), "{reason}");
            within(drain).await.unwrap();
        });
    }
}

/// Answers every request at once; a notification named `hold` makes the reader wait until
/// the test opens the gate (what a client's full event stream does).
struct HoldingHandler {
    gate: Arc<tokio::sync::Semaphore>,
}

impl Handler for HoldingHandler {
    fn request(&self, _peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
        Box::pin(async move { Reply::result(json!(request.method)) })
    }

    fn notification(&self, _peer: PeerHandle, _notification: Notification) {
        unreachable!("the reader calls notification_or_wait");
    }

    fn notification_or_wait(
        &self,
        _peer: PeerHandle,
        notification: Notification,
    ) -> Option<BoxFuture<'static, ()>> {
        (notification.method == "hold").then(|| {
            let gate = Arc::clone(&self.gate);
            let wait: BoxFuture<'static, ()> = Box::pin(async move {
                let _ = gate.acquire().await;
            });
            wait
        })
    }
}

#[tokio::test]
async fn a_notification_that_asks_to_wait_holds_the_reader() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (_unused, notifications) = mpsc::unbounded_channel();
    let holding: Arc<dyn Handler> = Arc::new(HoldingHandler {
        gate: Arc::clone(&gate),
    });
    let (mut raw, _side) = raw_pair(PeerOptions::server(), (holding, notifications));
    raw.send_line(json!({"jsonrpc":"2.0","method":"pass"}))
        .await;
    raw.send_line(request(1, "first")).await;
    assert_eq!(raw.line().await["result"], "first");

    raw.send_line(json!({"jsonrpc":"2.0","method":"hold"}))
        .await;
    raw.send_line(request(2, "second")).await;
    raw.assert_quiet().await;
    gate.add_permits(1);
    assert_eq!(raw.line().await["result"], "second");
}

#[tokio::test]
async fn answered_waits_until_every_answer_is_queued_and_close_sends_them() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let opened = Arc::clone(&gate);
    let slow = handler(move |_peer, request| {
        let gate = Arc::clone(&opened);
        async move {
            let _ = gate.acquire().await;
            Reply::result(json!(request.method))
        }
    });
    let (mut raw, side) = raw_pair(PeerOptions::server(), slow);
    raw.send_line(request(1, "first")).await;
    raw.send_line(request(2, "second")).await;
    let answered = tokio::spawn({
        let peer = side.peer.clone();
        async move { peer.answered().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !answered.is_finished(),
        "two requests are still being handled"
    );
    gate.add_permits(2);
    within(answered).await.unwrap();
    side.peer.close();
    let mut methods = vec![
        raw.line().await["result"].clone(),
        raw.line().await["result"].clone(),
    ];
    methods.sort_by_key(|method| method.to_string());
    assert_eq!(methods, [json!("first"), json!("second")]);
}

#[tokio::test]
async fn requests_read_just_before_the_end_of_input_are_still_answered() {
    let slow = handler(|_peer, request| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Reply::result(json!(request.method))
    });
    let (mut raw, _side) = raw_pair(PeerOptions::server(), slow);
    raw.send_line(request(1, "last")).await;
    // Done sending, still reading: as `printf request | toold connect` does.
    within(raw.writer.shutdown()).await.unwrap();
    assert_eq!(raw.line().await["result"], "last");
}
