//! The one sink a session's events go through: it stamps each with the session id, the batch id
//! and the next `seq`, and hands it to whoever listens (the daemon's event log and the attached
//! connections; a collector in tests).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{
    ApprovalResolved, ArgumentsReplaced, BatchDone, BatchStart, CallEnded, CallStart, Event,
    EventParams, ToolOutput, ToolProgress,
};

/// The body of an event, before the sink stamps it.
#[derive(Debug, Clone, PartialEq)]
pub enum EventBody {
    BatchStart(BatchStart),
    CallStart(CallStart),
    ArgumentsReplaced(ArgumentsReplaced),
    Output(ToolOutput),
    Progress(ToolProgress),
    Result(CallEnded),
    CallDone(CallEnded),
    ApprovalResolved(ApprovalResolved),
    BatchDone,
}

/// Receives stamped events, in `seq` order. Called with the sink's lock held, so it must not
/// block: queue the event and return.
pub trait EventListener: Send + Sync {
    fn deliver(&self, event: Event);

    /// Resolves when the listener can take more live output: a listener whose readers lag
    /// holds back `tool/output` events, and so the command that produces them, rather than
    /// buffering without bound.
    fn output_ready(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(std::future::ready(()))
    }
}

/// A session's event sink.
pub struct EventSink {
    session_id: Arc<str>,
    /// The last `seq` handed out. Held while delivering, so that listeners see events in `seq`
    /// order even when several calls emit at once.
    last_seq: Mutex<u64>,
    listener: Arc<dyn EventListener>,
}

impl EventSink {
    pub fn new(
        session_id: impl Into<Arc<str>>,
        last_seq: u64,
        listener: Arc<dyn EventListener>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            last_seq: Mutex::new(last_seq),
            listener,
        }
    }

    /// The `seq` of the last event emitted.
    pub fn last_seq(&self) -> u64 {
        *self.lock()
    }

    /// Waits until the listener can take more live output (see [`EventListener::output_ready`]).
    pub(crate) async fn output_ready(&self) {
        self.listener.output_ready().await;
    }

    /// Stamps and delivers one event; returns its `seq`. The event shares the sink's session
    /// id and the caller's batch id instead of copying them.
    pub fn emit(&self, batch_id: &Arc<str>, body: EventBody) -> u64 {
        let mut last_seq = self.lock();
        *last_seq += 1;
        let seq = *last_seq;
        let header = (Arc::clone(&self.session_id), seq, Arc::clone(batch_id));
        let event = match body {
            EventBody::BatchStart(body) => Event::BatchStart(stamp(header, body)),
            EventBody::CallStart(body) => Event::CallStart(stamp(header, body)),
            EventBody::ArgumentsReplaced(body) => Event::ArgumentsReplaced(stamp(header, body)),
            EventBody::Output(body) => Event::Output(stamp(header, body)),
            EventBody::Progress(body) => Event::Progress(stamp(header, body)),
            EventBody::Result(body) => Event::Result(stamp(header, body)),
            EventBody::CallDone(body) => Event::CallDone(stamp(header, body)),
            EventBody::ApprovalResolved(body) => Event::ApprovalResolved(stamp(header, body)),
            EventBody::BatchDone => Event::BatchDone(stamp(header, BatchDone {})),
        };
        self.listener.deliver(event);
        seq
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // The counter is a plain integer: a panic elsewhere cannot leave it half-written.
        self.last_seq.lock_unpoisoned()
    }
}

fn stamp<B>((session_id, seq, batch_id): (Arc<str>, u64, Arc<str>), body: B) -> EventParams<B> {
    EventParams {
        session_id,
        seq,
        batch_id,
        body,
    }
}

/// A listener that keeps every event, for tests and for callers that read events afterwards.
#[derive(Default)]
pub struct CollectingListener {
    events: Mutex<Vec<Event>>,
}

impl CollectingListener {
    pub fn events(&self) -> Vec<Event> {
        self.events.lock_unpoisoned().clone()
    }
}

impl EventListener for CollectingListener {
    fn deliver(&self, event: Event) {
        self.events.lock_unpoisoned().push(event);
    }
}
