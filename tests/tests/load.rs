//! Load against the real daemon: many concurrent clients, each pipelining one-call batches, and
//! every answer accounted for: none lost, none answered twice, none matched to the wrong
//! request, every batch's events in order and before its answer.
//!
//! The default size suits CI (64 clients × 64 batches, 16 in flight per connection);
//! `TOOLD_LOAD_CLIENTS` and `TOOLD_LOAD_BATCHES` set the full size of the reliability checks
//! (1,000 × 100, see docs/reliability.md).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use toold_tests::daemon::{RawConnection, TestDaemon, Wire};
use toold_tests::{PATIENCE, XorShift};

/// Requests a client keeps in flight on its connection.
const PIPELINED: usize = 16;
/// Distinct files the calls read: each answer must carry the content of the file its own
/// request named.
const FILES: usize = 16;

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn content_of(file: usize) -> String {
    format!("file {file}: {}\n", "x".repeat(file * 7))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pipelined_clients_lose_and_mismatch_nothing() {
    let clients = size("TOOLD_LOAD_CLIENTS", 64);
    let batches = size("TOOLD_LOAD_BATCHES", 64);
    let daemon =
        TestDaemon::start_with_config(Some(&format!("max_connections = {}\n", clients + 16)));
    let work = daemon.work();
    for file in 0..FILES {
        std::fs::write(work.join(format!("f{file}.txt")), content_of(file)).unwrap();
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (socket, work) = (daemon.socket(), work.clone());
            tokio::spawn(async move { run_client(client, socket, work, batches).await })
        })
        .collect();
    let mut answered = 0;
    for task in tasks {
        answered += tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .expect("a client did not finish within 300 s")
            .expect("a client panicked");
    }
    assert_eq!(
        answered,
        clients * batches,
        "every batch answered exactly once"
    );
    eprintln!(
        "{clients} clients × {batches} batches ({PIPELINED} in flight each): {answered} answered \
         in {:.1} s, 0 lost, 0 mismatched, 0 misordered",
        started.elapsed().as_secs_f64()
    );
}

/// One client: initialize, a session, then `batches` one-call batches with up to [`PIPELINED`]
/// in flight, checking every message. Returns how many batches were answered.
async fn run_client(client: usize, socket: PathBuf, work: PathBuf, batches: usize) -> usize {
    let mut raw = RawConnection::connect(&socket, Wire::Ndjson).await;
    let init = raw
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {}}),
        )
        .await;
    assert!(init["result"].is_object(), "client {client}: initialize");
    raw.send_request(2, "session/create", json!({"cwd": work}))
        .await;
    let session = raw.receive().await["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Request id → the file it reads; events seen per batch (by batch id).
    let mut pending: HashMap<u64, usize> = HashMap::new();
    let mut batch_events: HashMap<String, Vec<String>> = HashMap::new();
    let mut batch_of_call: HashMap<String, u64> = HashMap::new();
    let mut last_seq = 0u64;
    let (mut sent, mut answered) = (0usize, 0usize);
    while answered < batches {
        while sent < batches && pending.len() < PIPELINED {
            let id = 100 + sent as u64;
            let file = (client + sent) % FILES;
            let call_id = format!("c{id}");
            batch_of_call.insert(call_id.clone(), id);
            raw.send_request(
                id,
                "tools/execute",
                json!({
                    "session_id": session,
                    "calls": [{"id": call_id, "name": "read_file",
                               "arguments": {"path": format!("f{file}.txt")}}]
                }),
            )
            .await;
            pending.insert(id, file);
            sent += 1;
        }
        let mut message = raw.receive().await;
        if let Some(method) = message["method"].as_str() {
            let params = &message["params"];
            let seq = params["seq"].as_u64().unwrap();
            assert!(
                seq > last_seq,
                "client {client}: seq {seq} after {last_seq}"
            );
            last_seq = seq;
            let batch = params["batch_id"].as_str().unwrap().to_owned();
            batch_events
                .entry(batch)
                .or_default()
                .push(method.to_owned());
            continue;
        }
        let id = message["id"]
            .as_u64()
            .expect("a response with a numeric id");
        let file = pending
            .remove(&id)
            .unwrap_or_else(|| panic!("client {client}: an answer to {id}, which is not pending"));
        let result = message["result"].take();
        let batch_id = result["batch_id"].as_str().unwrap().to_owned();
        let outcome = &result["results"][0];
        assert_eq!(
            outcome["call_id"],
            format!("c{id}"),
            "client {client}: mismatched call"
        );
        assert_eq!(
            outcome["result"]["content"].as_str(),
            Some(content_of(file).as_str()),
            "client {client}: request {id} got another file's content"
        );
        // The batch's events came, in order, before its answer.
        assert_eq!(
            batch_events.remove(&batch_id).unwrap_or_default(),
            [
                "batch/start",
                "tool/call_start",
                "tool/result",
                "tool/call_done",
                "batch/done"
            ],
            "client {client}: the events of request {id}"
        );
        answered += 1;
    }
    assert!(
        pending.is_empty(),
        "client {client}: unanswered {pending:?}"
    );
    answered
}

/// Connections that send a byte now and then never complete a message: each is answered
/// `-32600` and cut at the frame deadline, those beyond `max_connections` are refused without
/// harm, and clients doing real work meanwhile keep a low p99. `TOOLD_DRIP_CONNECTIONS`,
/// `TOOLD_DRIP_MAX_CONNECTIONS`, `TOOLD_DRIP_INTERVAL_MS` and `TOOLD_DRIP_DEADLINE_MS` set the
/// full size (500 drips of a byte a second against the default 256 connections, cut at 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_drip_connections_are_cut_while_other_clients_keep_working() {
    const NORMAL_CLIENTS: usize = 20;
    let drips = size("TOOLD_DRIP_CONNECTIONS", 100);
    let max_connections = size("TOOLD_DRIP_MAX_CONNECTIONS", 64);
    let interval = Duration::from_millis(size("TOOLD_DRIP_INTERVAL_MS", 100) as u64);
    let deadline_ms = size("TOOLD_DRIP_DEADLINE_MS", 500);
    let daemon = TestDaemon::start_with_config(Some(&format!(
        "max_connections = {max_connections}\nframe_timeout_ms = {deadline_ms}\n"
    )));
    let work = daemon.work();
    for file in 0..FILES {
        std::fs::write(work.join(format!("f{file}.txt")), content_of(file)).unwrap();
    }

    // The working clients connect first and call until the drips are done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..NORMAL_CLIENTS)
        .map(|client| {
            let (socket, work, done) = (daemon.socket(), work.clone(), done.clone());
            tokio::spawn(async move { timed_calls(client, socket, work, done).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let drippers: Vec<_> = (0..drips)
        .map(|_| {
            let socket = daemon.socket();
            tokio::spawn(async move { drip(socket, interval).await })
        })
        .collect();
    let mut cut = 0;
    for dripper in drippers {
        let (answer, elapsed) = tokio::time::timeout(PATIENCE, dripper)
            .await
            .expect("a drip connection was never cut")
            .unwrap();
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let allowed = Duration::from_millis(deadline_ms as u64) + interval + Duration::from_secs(5);
        assert!(elapsed < allowed, "a drip lasted {elapsed:?}");
        cut += 1;
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut latencies: Vec<Duration> = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.unwrap());
    }
    latencies.sort();
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    // Still serving: a new client gets its answers.
    let answered = run_client(0, daemon.socket(), work, 4).await;
    assert_eq!(answered, 4);
    eprintln!(
        "{drips} drip connections, a byte every {interval:?} (max_connections \
         {max_connections}, deadline {deadline_ms} ms): {cut} cut in {:.1} s; \
         {} calls from {NORMAL_CLIENTS} other clients meanwhile, p99 {p99:?}",
        started.elapsed().as_secs_f64(),
        latencies.len()
    );
    assert!(
        p99 < Duration::from_millis(500),
        "p99 {p99:?} while drips were connected"
    );
}

/// Opens a connection and sends a message a byte every `interval`, never finishing it; returns
/// the error it was answered with and how long until the daemon closed the connection.
async fn drip(socket: PathBuf, interval: Duration) -> (Value, Duration) {
    let stream = UnixStream::connect(&socket).await.unwrap();
    let (read_half, mut writer) = stream.into_split();
    let started = Instant::now();
    let reading = tokio::spawn(async move {
        let mut lines = BufReader::new(read_half).lines();
        let first = lines
            .next_line()
            .await
            .unwrap()
            .expect("an answer before the close");
        // Then nothing more, and the end.
        assert!(lines.next_line().await.unwrap_or(None).is_none());
        serde_json::from_str::<Value>(&first).unwrap()
    });
    for byte in b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}".iter() {
        if writer.write_all(&[*byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(interval).await;
        if reading.is_finished() {
            break;
        }
    }
    let answer = reading.await.unwrap();
    (answer, started.elapsed())
}

/// One working client: `read_file` batches back to back until `done`; the latency of each.
async fn timed_calls(
    client: usize,
    socket: PathBuf,
    work: PathBuf,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<Duration> {
    let mut raw = RawConnection::connect(&socket, Wire::Ndjson).await;
    raw.call(
        1,
        "initialize",
        json!({"protocol_version": 1, "capabilities": {}}),
    )
    .await;
    let session = raw.call(2, "session/create", json!({"cwd": work})).await["result"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("client {client}: no session"))
        .to_owned();
    let mut latencies = Vec::new();
    let mut id = 10;
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        let started = Instant::now();
        let answer = raw
            .call(
                id,
                "tools/execute",
                json!({"session_id": session,
                   "calls": [{"id": "r", "name": "read_file", "arguments": {"path": "f0.txt"}}]}),
            )
            .await;
        latencies.push(started.elapsed());
        assert_eq!(
            answer["result"]["results"][0]["result"]["content"].as_str(),
            Some(content_of(0).as_str()),
            "client {client}"
        );
        id += 1;
    }
    latencies
}

/// Garbage on the wire: 10,000 random, invalid UTF-8 and truncated frames on one connection,
/// and a 10 MiB frame without its newline on another. Each bad frame gets its error and the
/// connection goes on; a client working meanwhile is unaffected; the daemon stays under 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_get_their_errors_and_harm_nobody() {
    let frames = size("TOOLD_GARBAGE_FRAMES", 10_000);
    let daemon = TestDaemon::start();
    let work = daemon.work();
    for file in 0..FILES {
        std::fs::write(work.join(format!("f{file}.txt")), content_of(file)).unwrap();
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let (socket, work, done) = (daemon.socket(), work.clone(), done.clone());
        tokio::spawn(async move { timed_calls(0, socket, work, done).await })
    };

    // The big one: 10 MiB of a string that never ends its line, then the end of input.
    let big = {
        let socket = daemon.socket();
        tokio::spawn(async move {
            let stream = UnixStream::connect(&socket).await.unwrap();
            let (read_half, mut writer) = stream.into_split();
            let mut frame =
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":\"".to_vec();
            frame.resize(10 << 20, b'a');
            writer.write_all(&frame).await.unwrap();
            writer.shutdown().await.unwrap();
            let mut lines = BufReader::new(read_half).lines();
            let answer: Value =
                serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
            answer["error"]["code"].clone()
        })
    };

    let stream = UnixStream::connect(daemon.socket()).await.unwrap();
    let (read_half, mut writer) = stream.into_split();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(read_half).lines();
        let mut codes: HashMap<i64, usize> = HashMap::new();
        let mut answered = 0;
        while answered < frames + 1 {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the daemon hung up");
            let message: Value = serde_json::from_str(&line).unwrap();
            answered += 1;
            if let Some(code) = message["error"]["code"].as_i64() {
                *codes.entry(code).or_default() += 1;
            }
        }
        codes
    });
    // A valid first message chooses NDJSON; then the garbage, a line each.
    writer
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"capabilities\":{}}}\n")
        .await
        .unwrap();
    let valid = br#"{"jsonrpc":"2.0","id":7,"method":"session/list","params":{}}"#;
    let mut random = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut peak_rss = 0;
    for index in 0..frames {
        let mut frame: Vec<u8> = match index % 3 {
            // Random bytes (never a newline).
            0 => (0..1 + random.below(200))
                .map(|_| (random.next() % 255) as u8)
                .map(|byte| if byte == b'\n' { b' ' } else { byte })
                .collect(),
            // Invalid UTF-8 inside a string.
            1 => {
                let mut bytes = br#"{"jsonrpc":"2.0","id":9,"method":""#.to_vec();
                bytes.extend([0xff, 0xfe, 0xc3]);
                bytes.extend(br#""}"#);
                bytes
            }
            // A valid request cut short.
            _ => valid[..1 + random.below(valid.len() - 2)].to_vec(),
        };
        // A line of only whitespace is no message at all; keep every line a frame.
        if frame.iter().all(u8::is_ascii_whitespace) {
            frame.push(b'x');
        }
        frame.push(b'\n');
        writer.write_all(&frame).await.unwrap();
        if index % 1000 == 0 {
            peak_rss = peak_rss.max(daemon.rss_bytes());
        }
    }
    let codes = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("not every frame was answered")
        .unwrap();
    assert_eq!(
        big.await.unwrap(),
        json!(-32700),
        "the unterminated 10 MiB frame is read to the end of input and refused"
    );
    peak_rss = peak_rss.max(daemon.rss_bytes());
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = worker.await.unwrap();
    let errors: usize = codes.values().sum();
    assert_eq!(
        errors, frames,
        "every garbage frame got an error: {codes:?}"
    );
    assert!(
        codes.keys().all(|code| [-32700, -32600].contains(code)),
        "only parse errors and invalid requests: {codes:?}"
    );
    assert!(
        peak_rss < 64 << 20,
        "the daemon grew to {} MiB",
        peak_rss >> 20
    );
    eprintln!(
        "{frames} garbage frames: {codes:?}; a 10 MiB unterminated frame refused; {} calls of \
         another client unaffected; peak RSS {} MiB",
        calls.len(),
        peak_rss >> 20
    );
}

/// A client that stops reading while its command prints 100 MB: the command is held back
/// (its output waits for the reader), the daemon's memory stays bounded, another session keeps
/// working, and the stalled client's disconnect ends the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_back_its_command_not_the_daemon() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    for file in 0..FILES {
        std::fs::write(work.join(format!("f{file}.txt")), content_of(file)).unwrap();
    }
    let flood = work.join("flood.txt");
    std::fs::write(&flood, "y".repeat(99).to_owned() + "\n").unwrap();
    let line = std::fs::read(&flood).unwrap();
    std::fs::write(&flood, line.repeat(1_000_000)).unwrap(); // 100 MB

    let before = daemon.rss_bytes();
    let mut stalled = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    stalled
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {}}),
        )
        .await;
    let create = json!({"cwd": work, "rules": {"allow": ["run_command(cat *)"]}});
    let session = stalled.call(2, "session/create", create).await["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let execute = json!({"session_id": session, "calls": [{"id": "flood", "name": "run_command",
        "arguments": {"command": format!("cat {}", flood.display())}}]});
    stalled.send_request(4, "tools/execute", execute).await;
    // From here on this client reads nothing.

    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let (socket, work, done) = (daemon.socket(), work.clone(), done.clone());
        tokio::spawn(async move { timed_calls(1, socket, work, done).await })
    };
    let mut peak = before;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(daemon.rss_bytes());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = worker.await.unwrap();
    assert!(
        calls.len() > 10,
        "the other session was starved: {} calls",
        calls.len()
    );
    let growth = peak.saturating_sub(before);
    assert!(growth < 32 << 20, "the daemon grew by {} MiB", growth >> 20);

    // The stalled client leaves: its batch is canceled (on_disconnect defaults to cancel) and
    // the daemon serves on.
    drop(stalled);
    let answered = run_client(2, daemon.socket(), work, 4).await;
    assert_eq!(answered, 4);
    eprintln!(
        "a client stopped reading during 100 MB of output: daemon +{} MiB at most; {} calls of \
         another session meanwhile",
        growth >> 20,
        calls.len()
    );
}

/// The session's event log is bounded in bytes, not only in events: 256 reads of a 512 KiB
/// file leave 512 events of 512 KiB results (`tool/result` and `tool/call_done`) that, kept
/// whole, would hold 256 MiB (10,000 results of 1 MiB reads would hold 10 GiB). The daemon
/// grows by a bounded amount, and a replay from the start still has every event, the old
/// results slim (`elided_bytes`), the newest whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_events_are_bounded_in_bytes_not_only_in_number() {
    const MIB: usize = 1 << 20;
    const SIZE: usize = MIB / 2;
    const BATCHES: u64 = 32;
    const CALLS: usize = 8;
    let daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::write(work.join("big.txt"), "x".repeat(63).to_owned() + "\n")
        .and_then(|()| {
            let line = std::fs::read(work.join("big.txt"))?;
            std::fs::write(work.join("big.txt"), line.repeat(SIZE / 64))
        })
        .unwrap();

    let mut client = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    client
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {}}),
        )
        .await;
    let create = json!({"cwd": work, "max_read_bytes": 2 * MIB});
    let session = client.call(2, "session/create", create).await["result"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = daemon.rss_bytes();
    let mut peak = before;
    for batch in 0..BATCHES {
        let calls: Vec<Value> = (0..CALLS)
            .map(|call| {
                json!({"id": format!("r{batch}_{call}"), "name": "read_file",
                "arguments": {"path": "big.txt"}})
            })
            .collect();
        let id = 100 + batch;
        client
            .send_request(
                id,
                "tools/execute",
                json!({"session_id": session, "calls": calls}),
            )
            .await;
        // Events and the answer, read as lines: parsing megabytes of JSON would only slow
        // the test.
        let answer_starts = format!(r#"{{"jsonrpc":"2.0","id":{id},"#);
        loop {
            let line = client.next_line().await;
            if line.starts_with(&answer_starts) {
                assert!(line.len() > CALLS * SIZE, "{}", &line[..200]);
                break;
            }
        }
        peak = peak.max(daemon.rss_bytes());
    }
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 96 * MIB as u64,
        "the daemon grew by {} MiB for 256 MiB of results",
        growth >> 20
    );

    // Another connection replays the whole log: every event is there, in order.
    let mut replaying = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    replaying
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "capabilities": {}}),
        )
        .await;
    replaying
        .send_request(
            2,
            "session/attach",
            json!({"session_id": session, "after_seq": 0}),
        )
        .await;
    let mut results = Vec::new();
    let mut seqs = Vec::new();
    let snapshot = loop {
        let message = replaying.receive().await;
        if message.get("method").is_none() {
            break message;
        }
        seqs.push(message["params"]["seq"].as_u64().unwrap());
        if message["method"] == "tool/result" {
            let params = &message["params"];
            let content = params["result"]["content"].as_str().unwrap().len();
            results.push((content, params["elided_bytes"].as_u64().unwrap_or(0)));
        }
    };
    assert_eq!(
        snapshot["result"]["replay_truncated"],
        Value::Null,
        "{snapshot}"
    );
    let events_per_batch = 2 + 3 * CALLS as u64;
    assert_eq!(seqs, (1..=BATCHES * events_per_batch).collect::<Vec<_>>());
    assert_eq!(results.len(), BATCHES as usize * CALLS);
    let (content, elided) = results[0];
    assert!(
        content == 0 && elided > SIZE as u64,
        "the oldest result is slim: {:?}",
        results[0]
    );
    assert_eq!(*results.last().unwrap(), (SIZE, 0), "the newest is whole");
    eprintln!(
        "{} reads of 512 KiB: the daemon grew by {} MiB at most; {} results replayed slim",
        BATCHES as usize * CALLS,
        growth >> 20,
        results.iter().filter(|(_, elided)| *elided > 0).count()
    );
}
