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
pub(crate) const MIN_RETAINED_EVENTS: usize = 10_000;

/// How many bytes of events a session's log keeps whole (each event's
/// `retention::weight`). Past it, the oldest events that every reader has taken keep their
/// place and `seq` but lose their bulk (`elided_bytes` says how much): output data, a call's
/// arguments, a result's content. 10,000 results of a 1 MiB read must not hold 10 GiB, nor a
/// command that prints 100 MB leave 100 MB.
pub(crate) const RETAINED_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How many bytes of events the log holds at most while a reader has not taken them: past it,
/// events lose their bulk even before the slowest reader takes them (it gets them slim, as a
/// reader past the event count gets [`Lagged`]). Only a connection that stops reading comes
/// near it; nothing else holds results back.
pub(crate) const LAGGING_READER_BYTES: usize = 4 * RETAINED_EVENT_BYTES;

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
    pub(crate) fn with_capacity(capacity: usize, start_seq: u64) -> Self {
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

    #[cfg(test)]
    /// The same log with other byte bounds than [`RETAINED_EVENT_BYTES`] and
    /// [`LAGGING_READER_BYTES`] (the second at least the first).
    pub(crate) fn with_byte_budget(self, retained: usize, lagging: usize) -> Self {
        {
            let mut inner = self.lock();
            inner.byte_budget = retained;
            inner.lagging_limit = lagging.max(retained);
        }
        self
    }

    #[cfg(test)]
    /// The `retention::weight` of the retained events together: what the log holds.
    pub(crate) fn retained_bytes(&self) -> usize {
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

    #[cfg(test)]
    /// How many events the log holds now.
    pub(crate) fn len(&self) -> usize {
        self.lock().events.len()
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

    #[cfg(test)]
    /// How many readers are registered.
    pub(crate) fn reader_count(&self) -> usize {
        self.lock().readers.len()
    }

    /// Resolves once every registered reader is within `max_lag` events of the newest one
    /// (at once when there is none, or when the log is closed). A reader that stops reading
    /// holds every caller here until it reads on or is dropped: a connection must drop its
    /// reader when it closes or gives up on a client that does not read. The daemon awaits it before each
    /// `tool/output` event, so that a slow connection slows the command down instead of the log
    /// and the connection's queue growing without bound.
    pub(crate) async fn wait_for_readers(&self, max_lag: u64) {
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
    pub(crate) fn close(&self) {
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
pub(crate) const MAX_OUTPUT_LAG: u64 = 64;

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
    pub(crate) fn try_next(&mut self) -> Option<Result<Arc<Event>, Lagged>> {
        self.step().ok()
    }

    /// Whether the log is closed and this reader has taken everything in it: nothing more will
    /// come.
    pub(crate) fn is_ended(&self) -> bool {
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
    pub(crate) fn take_lag(&mut self) -> Option<Lagged> {
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
    pub(crate) fn position(&self) -> u64 {
        self.position_in(&self.log.lock())
    }

    #[cfg(test)]
    /// How many events this reader is behind the newest.
    pub(crate) fn lag(&self) -> u64 {
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
mod tests;
