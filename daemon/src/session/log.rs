//! A session's retained event log: the last events in `seq` order (for `session/attach`'s
//! `after_seq` replay), bounded in events and in bytes, the readers that follow it on behalf of
//! connections, and the backpressure that lets a slow reader throttle live output instead of
//! growing memory.
//!
//! The log is the session's [`EventListener`]: the sink calls [`EventLog::deliver`] with its own
//! lock held, so appending only takes a short `std` mutex and wakes readers; it never waits.
//! Readers and backpressure waiters are async and wait on [`Notify`]s, each created before the
//! condition is checked under the mutex, so a wakeup between the check and the wait is never lost.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use toold_protocol::Event;
use toold_protocol::sync::LockUnpoisoned;

use crate::events::EventListener;

mod retention;

/// How many events the protocol says a session retains at least (docs/protocol.md section 3).
pub const MIN_RETAINED_EVENTS: usize = 10_000;

/// How many bytes of events a session's log keeps whole (each event's
/// `retention::weight`). Past it, the oldest events that every reader has taken keep their
/// place and `seq` but lose their bulk (`elided_bytes` says how much): output data, a call's
/// arguments, a result's content. 10,000 results of a 1 MiB read must not hold 10 GiB, nor a
/// command that prints 100 MB leave 100 MB.
pub const RETAINED_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How many bytes of events the log holds at most while a reader has not taken them: past it,
/// events lose their bulk even before the slowest reader takes them (it gets them slim, as a
/// reader past the event count gets [`Lagged`]). Only a connection that stops reading comes
/// near it; nothing else holds results back.
pub const LAGGING_READER_BYTES: usize = 4 * RETAINED_EVENT_BYTES;

/// A reader fell behind what the log retains: `missed` events were dropped before it read them.
/// The reader has been moved to the oldest retained event and goes on from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the reader fell behind the retained event log and missed {missed} events")]
pub struct Lagged {
    pub missed: u64,
}

/// A session's event log. Shared as `Arc<EventLog>`: the sink delivers into it, and every
/// [`LogReader`] keeps it alive.
pub struct EventLog {
    /// Everything readers and appenders share. A `std` mutex, never held across an `.await`:
    /// `deliver` runs under the sink's lock, in sync code, and must not wait on a task.
    inner: Mutex<LogInner>,
    /// Woken on every append (and on close): readers waiting for a new event.
    appended: Notify,
    /// Woken whenever a reader advances or goes away (and on close): `wait_for_readers` callers.
    progressed: Notify,
}

struct LogInner {
    /// The retained events, oldest first, `seq` strictly increasing.
    /// Shared with the readers that take them: one event goes to every attached connection,
    /// and its result text is not copied for each.
    events: VecDeque<Arc<Event>>,
    capacity: usize,
    /// The `seq` of the newest event (or the starting `seq` before any).
    last_seq: u64,
    /// Every event with this `seq` or a lower one is gone: evicted, or from before the log
    /// started (a restored session). Replaying from below it is truncated.
    evicted_through: u64,
    /// Each registered reader's position: the `seq` of the last event it has taken.
    readers: HashMap<u64, u64>,
    next_reader_id: u64,
    /// Set by `close`: readers end once they have read everything, nobody is throttled.
    closed: bool,
    /// The [`retention::weight`] of every retained event.
    retained_bytes: usize,
    /// What `retained_bytes` may reach before the oldest taken events are made slim.
    byte_budget: usize,
    /// What `retained_bytes` may reach before events are made slim whoever has taken them.
    lagging_limit: usize,
    /// Every event with this `seq` or a lower one has been made slim or looked at.
    elided_through: u64,
    /// How many events a reader may trail by before live output waits for it.
    output_lag: u64,
}

impl LogInner {
    /// The retained events with a `seq` larger than `after_seq`.
    fn after(&self, after_seq: u64) -> impl Iterator<Item = &Arc<Event>> {
        self.events.range(self.index_after(after_seq)..)
    }

    /// The index of the first retained event with a `seq` larger than `after_seq`.
    fn index_after(&self, after_seq: u64) -> usize {
        // The sink numbers a session's events without gaps, so the index follows from the
        // oldest `seq`; the search is only the fallback should that ever not hold.
        match self.events.front() {
            Some(oldest) if after_seq < oldest.seq() => 0,
            Some(oldest) => {
                let guess = usize::try_from(after_seq - oldest.seq() + 1).unwrap_or(usize::MAX);
                let fits = |index: usize| {
                    self.events
                        .get(index.wrapping_sub(1))
                        .is_none_or(|before| before.seq() <= after_seq)
                        && self.events.get(index).is_none_or(|at| at.seq() > after_seq)
                };
                if guess <= self.events.len() && fits(guess) {
                    guess
                } else {
                    self.events
                        .partition_point(|event| event.seq() <= after_seq)
                }
            }
            None => 0,
        }
    }

    /// While the retained events are over the byte budget, makes the oldest ones that every
    /// reader has already taken slim (a reader must never get a slim event live). What the
    /// slowest reader has not taken stays whole, unless the log is past the lagging limit.
    /// Events without bulk cannot shrink: past the lagging limit with nothing left to slim
    /// (ids of pathological sizes), the oldest go, as past the event count.
    fn keep_within_budget(&mut self) {
        if self.retained_bytes <= self.byte_budget {
            return;
        }
        let taken_by_all = self
            .readers
            .values()
            .copied()
            .min()
            .unwrap_or(self.last_seq);
        let mut index = self.index_after(self.elided_through);
        while self.retained_bytes > self.byte_budget && index < self.events.len() {
            let seq = self.events[index].seq();
            if seq > taken_by_all && self.retained_bytes <= self.lagging_limit {
                return;
            }
            self.elided_through = seq;
            if let Some(slim) = retention::slim(&self.events[index]) {
                let whole = std::mem::replace(&mut self.events[index], Arc::new(slim));
                self.retained_bytes -= retention::weight(&whole);
                self.retained_bytes += retention::weight(&self.events[index]);
            }
            index += 1;
        }
        while self.retained_bytes > self.lagging_limit && self.events.len() > 1 {
            self.evict_oldest();
        }
    }

    fn evict_oldest(&mut self) {
        if let Some(evicted) = self.events.pop_front() {
            self.evicted_through = evicted.seq();
            self.retained_bytes -= retention::weight(&evicted);
        }
    }

    /// Whether every registered reader is within `max_lag` events of the head.
    fn readers_within(&self, max_lag: u64) -> bool {
        self.readers
            .values()
            .all(|&position| self.last_seq.saturating_sub(position) <= max_lag)
    }
}

impl EventLog {
    /// A log retaining [`MIN_RETAINED_EVENTS`], whose first event will follow `start_seq` (0 for a
    /// new session, the persisted `last_seq` for a restored one).
    pub fn new(start_seq: u64) -> Self {
        Self::with_capacity(MIN_RETAINED_EVENTS, start_seq)
    }

    /// A log retaining the last `capacity` events (at least one). The daemon must pass at least
    /// [`MIN_RETAINED_EVENTS`] to keep the protocol's promise; tests use small logs.
    pub fn with_capacity(capacity: usize, start_seq: u64) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Mutex::new(LogInner {
                // Grown as events come: most sessions never fill a whole log.
                events: VecDeque::new(),
                capacity,
                last_seq: start_seq,
                evicted_through: start_seq,
                readers: HashMap::new(),
                next_reader_id: 0,
                closed: false,
                retained_bytes: 0,
                byte_budget: RETAINED_EVENT_BYTES,
                lagging_limit: LAGGING_READER_BYTES,
                elided_through: start_seq,
                output_lag: MAX_OUTPUT_LAG,
            }),
            appended: Notify::new(),
            progressed: Notify::new(),
        }
    }

    /// The same log with other byte bounds than [`RETAINED_EVENT_BYTES`] and
    /// [`LAGGING_READER_BYTES`] (the second at least the first).
    pub fn with_byte_budget(self, retained: usize, lagging: usize) -> Self {
        {
            let mut inner = self.lock();
            inner.byte_budget = retained;
            inner.lagging_limit = lagging.max(retained);
        }
        self
    }

    /// The `retention::weight` of the retained events together: what the log holds.
    pub fn retained_bytes(&self) -> usize {
        self.lock().retained_bytes
    }

    /// The same log letting readers trail by `events` rather than [`MAX_OUTPUT_LAG`] before
    /// live output waits for them.
    pub fn with_output_lag(self, events: u64) -> Self {
        self.lock().output_lag = events;
        self
    }

    /// The `seq` of the newest event, or the starting `seq` when there is none yet.
    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// How many events the log holds now.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().events.is_empty()
    }

    /// Every retained event with a `seq` larger than `after_seq`, in order, and whether some
    /// events after `after_seq` are no longer retained (`replay_truncated`). An `after_seq` at or
    /// beyond the newest event gives nothing, untruncated.
    pub fn replay(&self, after_seq: u64) -> (Vec<Event>, bool) {
        let inner = self.lock();
        let truncated = after_seq < inner.evicted_through;
        let events = inner
            .after(after_seq)
            .map(|event| Event::clone(event))
            .collect();
        (events, truncated)
    }

    /// A reader that yields every event after `after_seq`: the retained ones, then new ones as
    /// they come. An `after_seq` beyond the newest event starts at the newest, so that nothing
    /// appended after this call is skipped. The reader counts for [`EventLog::wait_for_readers`]
    /// until it is dropped.
    pub fn reader(self: &Arc<Self>, after_seq: u64) -> LogReader {
        let mut inner = self.lock();
        let id = inner.next_reader_id;
        inner.next_reader_id += 1;
        let position = after_seq.min(inner.last_seq);
        inner.readers.insert(id, position);
        LogReader {
            log: Arc::clone(self),
            id,
        }
    }

    /// How many readers are registered.
    pub fn reader_count(&self) -> usize {
        self.lock().readers.len()
    }

    /// Resolves once every registered reader is within `max_lag` events of the newest one
    /// (at once when there is none, or when the log is closed). A reader that stops reading
    /// holds every caller here until it reads on or is dropped: a connection must drop its
    /// reader when it closes or gives up on a client that does not read. The daemon awaits it before each
    /// `tool/output` event, so that a slow connection slows the command down instead of the log
    /// and the connection's queue growing without bound.
    pub async fn wait_for_readers(&self, max_lag: u64) {
        loop {
            // Created (and enabled) before the check: a reader advancing between the check and
            // the `.await` still wakes this waiter.
            let mut progressed = pin!(self.progressed.notified());
            progressed.as_mut().enable();
            {
                let inner = self.lock();
                if inner.closed || inner.readers_within(max_lag) {
                    return;
                }
            }
            progressed.await;
        }
    }

    /// Ends the log (the session is closing): readers end after the events they have not read
    /// yet, and nobody waits in [`EventLog::wait_for_readers`] any more. Later events are
    /// still retained and replayable, but no reader waits for them.
    pub fn close(&self) {
        self.lock().closed = true;
        self.appended.notify_waiters();
        self.progressed.notify_waiters();
    }

    fn append(&self, event: Event) {
        {
            let mut inner = self.lock();
            let seq = event.seq();
            if seq <= inner.last_seq {
                // The sink hands out strictly increasing numbers under its lock; anything else is
                // a bug upstream. Keeping it would break every reader's ordering, so refuse it.
                tracing::error!(
                    seq,
                    last_seq = inner.last_seq,
                    "event log: dropped an event whose seq does not follow the last one"
                );
                return;
            }
            if inner.events.len() >= inner.capacity {
                inner.evict_oldest();
            }
            inner.retained_bytes += retention::weight(&event);
            inner.events.push_back(Arc::new(event));
            inner.last_seq = seq;
            inner.keep_within_budget();
        }
        self.appended.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // Every change under this lock is a few plain assignments and a push or pop that cannot
        // panic halfway (allocation failure aborts): a poisoned lock still holds a sound log.
        self.inner.lock_unpoisoned()
    }
}

impl EventListener for EventLog {
    fn deliver(&self, event: Event) {
        self.append(event);
    }

    /// Live output waits while an attached reader trails by more than [`MAX_OUTPUT_LAG`] (or the
    /// log's own lag)
    /// events: a client that reads slowly slows the command rather than growing memory.
    fn output_ready(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let lag = self.lock().output_lag;
        Box::pin(self.wait_for_readers(lag))
    }
}

/// How far a reader may trail the head of the log before live output waits for it.
pub const MAX_OUTPUT_LAG: u64 = 64;

/// A connection's cursor into the log. Dropping it unregisters it (and releases anyone
/// throttled by it).
pub struct LogReader {
    log: Arc<EventLog>,
    /// The key of this reader's position in the log's table.
    id: u64,
}

impl LogReader {
    /// The next event after this reader's position, waiting for one if there is none yet;
    /// `Err(Lagged)` once if events it had not read were dropped (it then goes on from the oldest
    /// retained event); `None` when the log is closed and everything was read.
    ///
    /// Cancel-safe: the position only moves when an item is returned, so dropping the future
    /// (in a `select!`) loses nothing.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        loop {
            // Created before the check, for the same reason as in `wait_for_readers`.
            let mut appended = pin!(self.log.appended.notified());
            appended.as_mut().enable();
            match self.step() {
                Ok(item) => return Some(item),
                Err(AtHead::Ended) => return None,
                Err(AtHead::Waiting) => appended.await,
            }
        }
    }

    /// The next event if one is there now, without waiting; `None` when the reader is at the head.
    pub fn try_next(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        self.step().ok()
    }

    /// Whether the log is closed and this reader has taken everything in it: nothing more will
    /// come.
    pub fn is_ended(&self) -> bool {
        let inner = self.log.lock();
        inner.closed && self.position_in(&inner) >= inner.last_seq
    }

    /// Takes the next item if there is one, deciding under one lock whether the reader has
    /// ended, so that an event appended just before a close is never skipped.
    fn step(&self) -> Result<Result<Arc<Event>, Lagged>, AtHead> {
        let item = {
            let mut inner = self.log.lock();
            if let Some(lagged) = self.skip_evicted(&mut inner) {
                Err(lagged)
            } else {
                let next = inner.after(self.position_in(&inner)).next().cloned();
                match next {
                    Some(event) => {
                        inner.readers.insert(self.id, event.seq());
                        inner.keep_within_budget();
                        Ok(event)
                    }
                    None if inner.closed => return Err(AtHead::Ended),
                    None => return Err(AtHead::Waiting),
                }
            }
        };
        self.log.progressed.notify_waiters();
        Ok(item)
    }

    /// If events this reader had not read were already dropped, moves it to the oldest retained
    /// event and says how many it missed. `session/attach` calls it right after creating the
    /// reader to set the snapshot's `replay_truncated`; the stream then has no `Lagged` item for
    /// that gap.
    pub fn take_lag(&mut self) -> Option<Lagged> {
        let lagged = self.skip_evicted(&mut self.log.lock())?;
        self.log.progressed.notify_waiters();
        Some(lagged)
    }

    /// Moves a reader whose next events were evicted to the oldest retained one.
    fn skip_evicted(&self, inner: &mut LogInner) -> Option<Lagged> {
        let position = self.position_in(inner);
        if position >= inner.evicted_through {
            return None;
        }
        let caught_up = inner.evicted_through;
        inner.readers.insert(self.id, caught_up);
        Some(Lagged {
            missed: caught_up - position,
        })
    }

    /// The `seq` of the last event this reader took (or where it started).
    pub fn position(&self) -> u64 {
        self.position_in(&self.log.lock())
    }

    /// How many events this reader is behind the newest.
    pub fn lag(&self) -> u64 {
        let inner = self.log.lock();
        inner.last_seq.saturating_sub(self.position_in(&inner))
    }

    fn position_in(&self, inner: &LogInner) -> u64 {
        // Registered in `EventLog::reader` and removed only by `Drop`, so it is always there;
        // the fallback (the head) would only make a broken reader skip ahead, never block.
        inner
            .readers
            .get(&self.id)
            .copied()
            .unwrap_or(inner.last_seq)
    }
}

/// Why a reader has nothing to take.
enum AtHead {
    /// The log is closed: nothing more will come.
    Ended,
    /// Wait for an append.
    Waiting,
}

impl Drop for LogReader {
    fn drop(&mut self) {
        self.log.lock().readers.remove(&self.id);
        self.log.progressed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
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
        let arguments = serde_json::to_string(
            &serde_json::json!({"path": "x", "content": "w".repeat(10 * 1024)}),
        )
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
}
