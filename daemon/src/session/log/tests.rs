//! Tests of a session's event log: the byte budget that slims the oldest events, replay from
//! `after_seq`, readers that lag, close or are dropped, and the backpressure that bounds a slow
//! reader's lag without a lost wakeup.

use std::time::Duration;

use pretty_assertions::assert_eq;
use tokio::time::timeout;
use toold_protocol::{BatchDone, EventParams, ToolOutput};

use super::*;
use crate::events::{EventBody, EventSink};

/// Long enough for anything that should happen to happen on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long something that must not happen is given to happen anyway.
const GRACE: Duration = Duration::from_millis(30);

fn event(seq: u64) -> Event {
    Event::BatchDone(EventParams {
        session_id: "s_1".into(),
        seq,
        batch_id: "b_1".into(),
        body: BatchDone {},
    })
}

fn log_with(capacity: usize, seqs: impl IntoIterator<Item = u64>) -> Arc<EventLog> {
    let log = Arc::new(EventLog::with_capacity(capacity, 0));
    for seq in seqs {
        log.deliver(event(seq));
    }
    log
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(Event::seq).collect()
}

async fn next_seq(reader: &mut LogReader) -> u64 {
    match timeout(PATIENCE, reader.next()).await {
        Ok(Some(Ok(event))) => event.seq(),
        other => panic!("expected an event, got {other:?}"),
    }
}

fn output(seq: u64, bytes: usize) -> Event {
    Event::Output(EventParams {
        session_id: "s_1".into(),
        seq,
        batch_id: "b_1".into(),
        body: ToolOutput {
            call_id: "c_1".into(),
            stream: toold_protocol::OutputStream::Stdout,
            data: "x".repeat(bytes),
            truncated: false,
            elided_bytes: 0,
        },
    })
}

fn result(seq: u64, bytes: usize) -> Event {
    let mut result = toold_protocol::ToolResult::failure(
        "read_file",
        toold_protocol::ErrorType::IoError,
        "e".repeat(10),
    )
    .with_meta("call_id", "c_1")
    .with_meta("path", "/a/b");
    result.content = "r".repeat(bytes);
    Event::Result(EventParams {
        session_id: "s_1".into(),
        seq,
        batch_id: "b_1".into(),
        body: toold_protocol::CallEnded {
            iteration: 0,
            call_id: "c_1".into(),
            result: result.into(),
            elapsed_ms: 3,
            elided_bytes: 0,
        },
    })
}

fn call_start(seq: u64, bytes: usize) -> Event {
    Event::CallStart(EventParams {
        session_id: "s_1".into(),
        seq,
        batch_id: "b_1".into(),
        body: toold_protocol::CallStart {
            iteration: 0,
            call: toold_protocol::ToolCall::new(
                "c_1",
                "write_file",
                serde_json::json!({"path": "x", "content": "w".repeat(bytes)}),
            )
            .into(),
            elided_bytes: 0,
        },
    })
}

/// What a slim `event` weighs.
fn slim_weight(event: &Event) -> usize {
    retention::weight(&retention::slim(event).expect("an event with bulk"))
}

/// (bulk length, elided bytes) of every retained event: output data, a call's arguments
/// (as JSON text), a result's content.
fn shapes(log: &EventLog) -> Vec<(usize, u64)> {
    log.replay(0)
        .0
        .iter()
        .map(|event| match event {
            Event::Output(params) => (params.body.data.len(), params.body.elided_bytes),
            Event::CallStart(params) => (
                serde_json::to_string(&params.body.call.arguments)
                    .unwrap()
                    .len(),
                params.body.elided_bytes,
            ),
            Event::Result(params) | Event::CallDone(params) => {
                (params.body.result.content.len(), params.body.elided_bytes)
            }
            _ => (0, 0),
        })
        .collect()
}

#[test]
fn events_over_the_budget_lose_their_bulk_oldest_first_keeping_their_place() {
    // Room for two whole outputs and eight slim ones.
    let budget = 2 * retention::weight(&output(1, 100)) + 8 * slim_weight(&output(1, 100));
    let log = EventLog::with_capacity(100, 0).with_byte_budget(budget, budget);
    for seq in 1..=10 {
        log.deliver(output(seq, 100));
    }
    let mut expected = vec![(0, 100); 8];
    expected.extend([(100, 0), (100, 0)]);
    assert_eq!(shapes(&log), expected);
    assert_eq!(log.len(), 10, "every event keeps its place and seq");
    assert!(log.retained_bytes() <= budget);
    // An event without bulk is never changed.
    log.deliver(event(11));
    assert_eq!(log.replay(10).0, vec![event(11)]);
}

#[test]
fn results_and_arguments_count_and_lose_their_bulk_too() {
    let budget = 1024 * 1024;
    let log = EventLog::with_capacity(10_000, 0).with_byte_budget(budget, budget);
    // 1,000 results of 10 KiB and calls with 10 KiB of arguments: 20 MB whole.
    for seq in (1..=2000).step_by(2) {
        log.deliver(call_start(seq, 10 * 1024));
        log.deliver(result(seq + 1, 10 * 1024));
    }
    assert_eq!(log.len(), 2000, "the events are all kept");
    assert!(
        log.retained_bytes() <= budget,
        "{} bytes retained",
        log.retained_bytes()
    );
    let shapes = shapes(&log);
    // The newest are whole; the oldest say what they lost.
    assert_eq!(shapes[1999], (10 * 1024, 0));
    let arguments =
        serde_json::to_string(&serde_json::json!({"path": "x", "content": "w".repeat(10 * 1024)}))
            .unwrap()
            .len();
    assert_eq!(shapes[0], (2, arguments as u64), "arguments become {{}}");
    // A slim result keeps what it was and whose: content, error and metadata but call_id go.
    let (replayed, _) = log.replay(1);
    let Event::Result(slim) = &replayed[0] else {
        panic!("{:?}", replayed[0]);
    };
    let kept = &slim.body.result;
    assert_eq!(
        (
            kept.ok,
            kept.tool.as_str(),
            kept.error_type.as_ref().map(|t| t.as_str())
        ),
        (false, "read_file", Some("io_error"))
    );
    assert_eq!(kept.content, "");
    assert_eq!(kept.error.as_deref(), Some(""));
    assert_eq!(
        serde_json::Value::Object(kept.metadata.clone()),
        serde_json::json!({"call_id": "c_1"})
    );
    let dropped = 10 * 1024 + 10 + r#"{"path":"/a/b"}"#.len();
    assert_eq!(slim.body.elided_bytes, dropped as u64);
}

#[tokio::test]
async fn bulk_a_reader_has_not_taken_is_kept_up_to_the_lagging_limit() {
    let whole = retention::weight(&output(1, 2000));
    let log = Arc::new(EventLog::with_capacity(100, 0).with_byte_budget(4 * whole, 12 * whole));
    let mut reader = log.reader(0);
    for seq in 1..=6 {
        log.deliver(output(seq, 2000));
    }
    assert_eq!(shapes(&log), vec![(2000, 0); 6], "nothing taken yet");
    for seq in 1..=3 {
        let taken = timeout(PATIENCE, reader.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(taken.seq(), seq);
        assert_eq!(shapes_of(&taken), (2000, 0), "a live reader gets the bulk");
    }
    let mut expected = vec![(0, 2000); 3];
    expected.extend(vec![(2000, 0); 3]);
    assert_eq!(
        shapes(&log),
        expected,
        "what was taken is slim, the rest whole"
    );

    // The reader stops reading: past the lagging limit, what it has not taken goes slim
    // too, oldest first, and it gets it slim.
    for seq in 7..=20 {
        log.deliver(output(seq, 2000));
        assert!(
            log.retained_bytes() <= 12 * whole,
            "{}",
            log.retained_bytes()
        );
    }
    let next = timeout(PATIENCE, reader.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((next.seq(), shapes_of(&next)), (4, (0, 2000)));
    assert_eq!(shapes(&log)[19], (2000, 0), "the newest stay whole");

    drop(reader);
    log.deliver(event(21));
    assert!(
        log.retained_bytes() <= 4 * whole,
        "no reader left: back within budget"
    );
    assert_eq!(log.len(), 21);
}

/// An event's (bulk length, elided bytes), as [`shapes`] gives for a log.
fn shapes_of(event: &Event) -> (usize, u64) {
    let log = EventLog::with_capacity(1, 0);
    log.deliver(event.clone());
    shapes(&log)[0]
}

#[test]
fn events_without_bulk_past_the_lagging_limit_are_dropped_oldest_first() {
    let one = retention::weight(&event(1));
    let log = EventLog::with_capacity(100, 0).with_byte_budget(5 * one, 5 * one);
    for seq in 1..=10 {
        log.deliver(event(seq));
    }
    assert_eq!(seqs(&log.replay(0).0), vec![6, 7, 8, 9, 10]);
    assert!(log.replay(0).1, "the replay says it is truncated");
}

#[test]
fn replay_finds_its_start_with_gaps_in_seq_too() {
    let log = log_with(10, [1, 2, 5, 6, 9]);
    assert_eq!(seqs(&log.replay(0).0), vec![1, 2, 5, 6, 9]);
    assert_eq!(seqs(&log.replay(2).0), vec![5, 6, 9]);
    assert_eq!(seqs(&log.replay(3).0), vec![5, 6, 9]);
    assert_eq!(seqs(&log.replay(5).0), vec![6, 9]);
    assert_eq!(seqs(&log.replay(8).0), vec![9]);
    assert_eq!(seqs(&log.replay(9).0), Vec::<u64>::new());
}

/// The daemon spawns the tasks that await these, and boxes `wait_for_readers` as a
/// listener's `Send` future.
#[test]
fn the_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let log = log_with(10, []);
    let mut reader = log.reader(0);
    send(&log.wait_for_readers(1));
    send(&reader.next());
}

#[test]
fn keeps_only_the_last_capacity_events() {
    let log = log_with(5, 1..=8);
    assert_eq!(log.len(), 5);
    assert_eq!(log.last_seq(), 8);
    let (events, truncated) = log.replay(0);
    assert_eq!((seqs(&events), truncated), (vec![4, 5, 6, 7, 8], true));
    // Events 1..=3 are gone: asking from 3 misses nothing, from 2 misses event 3.
    assert_eq!(log.replay(3).1, false);
    assert_eq!(seqs(&log.replay(3).0), vec![4, 5, 6, 7, 8]);
    assert_eq!(log.replay(2).1, true);
    assert_eq!(log.replay(8), (vec![], false));
}

#[test]
fn the_default_log_retains_what_the_protocol_promises() {
    let log = Arc::new(EventLog::new(0));
    for seq in 1..=(MIN_RETAINED_EVENTS as u64 + 5) {
        log.deliver(event(seq));
    }
    assert_eq!(log.len(), MIN_RETAINED_EVENTS);
    let (events, truncated) = log.replay(5);
    assert_eq!((events.len(), truncated), (MIN_RETAINED_EVENTS, false));
    assert_eq!(log.replay(4).1, true);
}

#[test]
fn replay_boundaries() {
    let log = log_with(100, 1..=10);
    let cases: [(u64, Vec<u64>); 5] = [
        (0, (1..=10).collect()),
        (4, (5..=10).collect()),
        (9, vec![10]),
        (10, vec![]),
        (15, vec![]),
    ];
    for (after_seq, expected) in cases {
        let (events, truncated) = log.replay(after_seq);
        assert_eq!(seqs(&events), expected, "after_seq {after_seq}");
        assert!(!truncated, "after_seq {after_seq}");
    }
    let empty = EventLog::with_capacity(10, 0);
    assert_eq!(empty.replay(0), (vec![], false));
}

#[test]
fn a_restored_log_continues_numbering_and_knows_what_it_lost() {
    let log = Arc::new(EventLog::with_capacity(10, 100));
    assert_eq!(log.last_seq(), 100);
    assert_eq!(log.replay(100), (vec![], false));
    // Events up to 100 belonged to the daemon's previous life: they are gone.
    assert_eq!(log.replay(40), (vec![], true));
    log.deliver(event(101));
    assert_eq!(seqs(&log.replay(100).0), vec![101]);
    // A number that does not follow the last one is refused, not stored out of order.
    log.deliver(event(101));
    log.deliver(event(50));
    assert_eq!(seqs(&log.replay(0).0), vec![101]);
    assert_eq!(log.last_seq(), 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_retained_then_later_events_in_order() {
    let log = log_with(1000, 1..=3);
    let mut reader = log.reader(1);
    assert_eq!(next_seq(&mut reader).await, 2);
    assert_eq!(next_seq(&mut reader).await, 3);
    assert!(reader.try_next().is_none());
    let appender = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            for seq in 4..=500 {
                log.deliver(event(seq));
                if seq % 50 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    for expected in 4..=500 {
        assert_eq!(next_seq(&mut reader).await, expected);
    }
    appender.join().unwrap();
    assert_eq!(reader.position(), 500);
    assert_eq!(reader.lag(), 0);
}

#[tokio::test]
async fn a_reader_asking_beyond_the_head_gets_everything_appended_afterwards() {
    let log = log_with(10, 1..=3);
    let mut reader = log.reader(40);
    assert_eq!(reader.position(), 3);
    log.deliver(event(4));
    assert_eq!(next_seq(&mut reader).await, 4);
}

#[tokio::test]
async fn a_reader_that_fell_behind_is_told_once_and_goes_on() {
    let log = log_with(4, []);
    let mut reader = log.reader(0);
    for seq in 1..=10 {
        log.deliver(event(seq));
    }
    assert_eq!(reader.next().await, Some(Err(Lagged { missed: 6 })));
    for expected in 7..=10 {
        assert_eq!(next_seq(&mut reader).await, expected);
    }
    assert!(reader.try_next().is_none());
}

#[tokio::test]
async fn take_lag_reports_a_gap_at_attach_so_the_stream_has_none() {
    let log = log_with(4, 1..=10);
    let mut behind = log.reader(2);
    assert_eq!(behind.take_lag(), Some(Lagged { missed: 4 }));
    assert_eq!(behind.take_lag(), None);
    assert_eq!(next_seq(&mut behind).await, 7);
    let mut current = log.reader(6);
    assert_eq!(current.take_lag(), None);
    assert_eq!(next_seq(&mut current).await, 7);
}

#[tokio::test]
async fn next_is_cancel_safe() {
    let log = log_with(10, []);
    let mut reader = log.reader(0);
    assert!(timeout(GRACE, reader.next()).await.is_err());
    log.deliver(event(1));
    assert_eq!(next_seq(&mut reader).await, 1);
}

#[tokio::test]
async fn close_ends_readers_after_what_they_have_not_read() {
    let log = log_with(10, 1..=2);
    let mut reader = log.reader(0);
    let waiting = {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut idle = log.reader(2);
            idle.next().await
        })
    };
    log.close();
    assert_eq!(next_seq(&mut reader).await, 1);
    assert_eq!(next_seq(&mut reader).await, 2);
    assert_eq!(timeout(PATIENCE, reader.next()).await.unwrap(), None);
    assert_eq!(timeout(PATIENCE, waiting).await.unwrap().unwrap(), None);
}

#[tokio::test]
async fn wait_for_readers_is_immediate_without_readers() {
    let log = log_with(10, 1..=9);
    timeout(PATIENCE, log.wait_for_readers(0)).await.unwrap();
    let reader = log.reader(9);
    timeout(PATIENCE, log.wait_for_readers(0)).await.unwrap();
    drop(reader);
    assert_eq!(log.reader_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_readers_blocks_until_the_slowest_reader_catches_up() {
    let log = log_with(100, 1..=10);
    let mut slow = log.reader(0);
    let _current = log.reader(10);
    let waiter = {
        let log = Arc::clone(&log);
        tokio::spawn(async move { log.wait_for_readers(3).await })
    };
    // 10 behind, then 4 behind: still more than 3.
    assert!(timeout(GRACE, log.wait_for_readers(3)).await.is_err());
    for expected in 1..=6 {
        assert_eq!(next_seq(&mut slow).await, expected);
    }
    assert_eq!(slow.lag(), 4);
    assert!(timeout(GRACE, log.wait_for_readers(3)).await.is_err());
    assert!(!waiter.is_finished());
    assert_eq!(next_seq(&mut slow).await, 7);
    timeout(PATIENCE, waiter).await.unwrap().unwrap();
    timeout(PATIENCE, log.wait_for_readers(3)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_reader_releases_those_it_throttled() {
    let log = log_with(100, 1..=10);
    let stalled = log.reader(0);
    let waiter = {
        let log = Arc::clone(&log);
        tokio::spawn(async move { log.wait_for_readers(0).await })
    };
    assert!(timeout(GRACE, log.wait_for_readers(0)).await.is_err());
    assert_eq!(log.reader_count(), 1);
    drop(stalled);
    assert_eq!(log.reader_count(), 0);
    timeout(PATIENCE, waiter).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_releases_those_throttled() {
    let log = log_with(100, 1..=10);
    let _stalled = log.reader(0);
    let waiter = {
        let log = Arc::clone(&log);
        tokio::spawn(async move { log.wait_for_readers(0).await })
    };
    assert!(timeout(GRACE, log.wait_for_readers(0)).await.is_err());
    log.close();
    timeout(PATIENCE, waiter).await.unwrap().unwrap();
}

/// A producer that waits before every append never gets more than `max_lag` + 1 ahead of a
/// slow reader, and neither side ever misses a wakeup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backpressure_bounds_the_lag_of_a_slow_reader() {
    const MAX_LAG: u64 = 8;
    const TOTAL: u64 = 3000;
    let log = Arc::new(EventLog::with_capacity(100, 0));
    let mut reader = log.reader(0);
    let producer = {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            for seq in 1..=TOTAL {
                log.wait_for_readers(MAX_LAG).await;
                log.deliver(event(seq));
            }
        })
    };
    let mut worst_lag = 0;
    for expected in 1..=TOTAL {
        worst_lag = worst_lag.max(reader.lag());
        assert_eq!(next_seq(&mut reader).await, expected);
        if expected % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    timeout(PATIENCE, producer).await.unwrap().unwrap();
    assert!(worst_lag <= MAX_LAG + 1, "lag reached {worst_lag}");
}

/// The sink numbers events under its lock and delivers under it too: appends from several
/// threads reach the log, and a reader following it, in strictly increasing order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_keep_seq_order() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 1000;
    let log = Arc::new(EventLog::new(0));
    let sink = Arc::new(EventSink::new("s_1", 0, Arc::clone(&log) as _));
    let mut reader = log.reader(0);
    let appenders: Vec<_> = (0..THREADS)
        .map(|thread| {
            let sink = Arc::clone(&sink);
            std::thread::spawn(move || {
                for _ in 0..PER_THREAD {
                    sink.emit(&format!("b_{thread}").into(), EventBody::BatchDone);
                }
            })
        })
        .collect();
    for expected in 1..=THREADS * PER_THREAD {
        assert_eq!(next_seq(&mut reader).await, expected);
    }
    for appender in appenders {
        appender.join().unwrap();
    }
    let (events, truncated) = log.replay(0);
    assert!(!truncated);
    assert_eq!(
        seqs(&events),
        (1..=THREADS * PER_THREAD).collect::<Vec<_>>()
    );
    for thread in 0..THREADS {
        let batch = format!("b_{thread}");
        let count = events.iter().filter(|e| e.batch_id() == batch).count();
        assert_eq!(count as u64, PER_THREAD);
    }
}
