//! A session's events on their way to its attached clients. Each event goes into the session's
//! log, then, for every attached client that has been sent everything before it, straight into
//! that client's outgoing queue from the task that emitted it. A client whose queue is full (or
//! whose replay is still being sent) is served by its own forwarding task, which waits for room
//! and catches up from the log. While clients keep up, an event costs no task hand-off: on a
//! call's path each one would wake a thread, often on another CPU.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use tokio::sync::{Mutex as AsyncMutex, Notify, watch};
use tokio_util::sync::CancellationToken;
use toold_protocol::sync::RwLockUnpoisoned;
use toold_protocol::{Event, JsonText};

use super::client::{Client, TrySend};
use super::log::{EventLog, LogReader};
use crate::events::EventListener;

/// The session's event listener: its log, and the forwarders of the clients attached to it.
pub(crate) struct SessionEvents {
    log: Arc<EventLog>,
    /// Held for reading while an event is delivered (under the sink's lock, so in `seq` order).
    forwarders: RwLock<Vec<Arc<Forwarder>>>,
}

impl SessionEvents {
    pub(crate) fn new(log: Arc<EventLog>) -> Self {
        Self {
            log,
            forwarders: RwLock::new(Vec::new()),
        }
    }

    /// Starts sending `client` every event after where `reader` stands: the retained ones (by
    /// its task), then each new one as it is emitted.
    pub(super) fn attach(
        &self,
        client: &Arc<Client>,
        session_id: &str,
        reader: LogReader,
    ) -> Arc<Forwarder> {
        let forwarder = Arc::new(Forwarder {
            client: Arc::clone(client),
            session_id: session_id.to_owned(),
            sent: watch::Sender::new(reader.position()),
            cursor: AsyncMutex::new(Cursor { reader, held: None }),
            more: Notify::new(),
            stop: CancellationToken::new(),
        });
        self.forwarders
            .write_unpoisoned()
            .push(Arc::clone(&forwarder));
        tokio::spawn(Arc::clone(&forwarder).run());
        forwarder
    }

    /// Stops and forgets a forwarder.
    pub(super) fn detach(&self, forwarder: &Arc<Forwarder>) {
        forwarder.stop.cancel();
        self.forwarders
            .write_unpoisoned()
            .retain(|kept| !Arc::ptr_eq(kept, forwarder));
    }
}

impl EventListener for SessionEvents {
    fn deliver(&self, event: Event) {
        self.log.deliver(event);
        for forwarder in self.forwarders.read_unpoisoned().iter() {
            forwarder.send_ready();
        }
    }

    fn output_ready(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.log.output_ready()
    }
}

/// One attached client's place in the session's events.
pub(super) struct Forwarder {
    client: Arc<Client>,
    session_id: String,
    /// Whoever holds it sends the next events, so they go out in order: the emitting task (which
    /// only tries to take it) or the forwarding task (which holds it while it waits for room).
    cursor: AsyncMutex<Cursor>,
    /// Rung when events are ready that the emitting task could not send.
    more: Notify,
    /// The `seq` of the last event queued for the client: responses that must follow their
    /// events wait on it.
    sent: watch::Sender<u64>,
    /// Cancelled on detach, and when the forwarding task ends for any reason.
    stop: CancellationToken,
}

struct Cursor {
    reader: LogReader,
    /// An event taken from the log but not yet queued (the queue was full): the next to go.
    held: Option<(u64, JsonText)>,
}

impl Forwarder {
    /// Waits until the client has been sent every event up to `seq`, or is no longer sent any.
    pub(super) async fn flushed(&self, seq: u64) {
        let mut sent = self.sent.subscribe();
        tokio::select! {
            // The sender lives as long as `self`: the wait cannot fail.
            _ = sent.wait_for(|sent| *sent >= seq) => {}
            () = self.stop.cancelled() => {}
        }
    }

    /// Called by the emitting task after each event: sends what is ready now if nobody else is
    /// sending, else leaves it to whoever is (the task, rung to look again).
    fn send_ready(&self) {
        if self.stop.is_cancelled() {
            return;
        }
        match self.cursor.try_lock() {
            Ok(mut cursor) => {
                if !self.send_without_waiting(&mut cursor) {
                    self.more.notify_one();
                }
            }
            Err(_) => self.more.notify_one(),
        }
    }

    /// Queues every ready event while the queue has room; false when one is left held.
    fn send_without_waiting(&self, cursor: &mut Cursor) -> bool {
        while let Some((seq, text)) = self.next_ready(cursor) {
            match self.client.outbound().try_send_rendered(text) {
                Ok(()) => self.mark_sent(seq),
                Err(TrySend::Full(text)) => {
                    cursor.held = Some((seq, text));
                    return false;
                }
                Err(TrySend::Closed) => {
                    self.stop.cancel();
                    return true;
                }
            }
        }
        true
    }

    /// The held event, else the next one in the log, rendered; `None` at the log's head.
    fn next_ready(&self, cursor: &mut Cursor) -> Option<(u64, JsonText)> {
        if let Some(held) = cursor.held.take() {
            return Some(held);
        }
        loop {
            let event = match cursor.reader.try_next()? {
                Ok(event) => event,
                Err(lagged) => {
                    tracing::warn!(session = %self.session_id, connection = self.client.id(), ?lagged, "a connection fell behind the event log; it continues from the oldest retained event");
                    continue;
                }
            };
            match event.render() {
                Ok(text) => return Some((event.seq(), text)),
                Err(err) => {
                    tracing::error!(session = %self.session_id, %err, "cannot encode an event");
                    // Past it all the same: a response waiting for this seq must not hang.
                    self.mark_sent(event.seq());
                }
            }
        }
    }

    fn mark_sent(&self, seq: u64) {
        self.sent.send_replace(seq);
    }

    /// The forwarding task: sends what the emitting task could not (the replay first), waiting
    /// for room, until detached, the log ends or the connection does.
    async fn run(self: Arc<Self>) {
        let _ends = self.stop.clone().drop_guard();
        loop {
            {
                let mut cursor = tokio::select! {
                    cursor = self.cursor.lock() => cursor,
                    () = self.stop.cancelled() => return,
                };
                while let Some((seq, text)) = self.next_ready(&mut cursor) {
                    let delivered = tokio::select! {
                        delivered = self.client.outbound().send_rendered(text) => delivered,
                        () = self.stop.cancelled() => return,
                    };
                    if delivered.is_err() {
                        return;
                    }
                    self.mark_sent(seq);
                }
                if cursor.reader.is_ended() {
                    return;
                }
            }
            tokio::select! {
                () = self.more.notified() => {}
                () = self.stop.cancelled() => return,
            }
        }
    }
}
