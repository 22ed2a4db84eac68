//! The stream of what the daemon tells a client unasked: session events, `tools/list_changed`,
//! and the end of the connection. Bounded, so that a lagging consumer holds the daemon back.

use tokio::sync::mpsc;
use toold_protocol::{CloseReason, Event};

/// One item of [`Events`].
// Nearly every item is a session event: boxing it would cost an allocation per event to
// shrink the rare others.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum ClientEvent {
    /// An event of an attached session (`batch/start`, `tool/output`, …), in `seq` order.
    Session(Event),
    /// The daemon's tool registry changed (`tools/list_changed`).
    ToolsListChanged { revision: u64 },
    /// The connection ended other than by [`Client::close`](crate::Client::close) (the
    /// daemon stopped or restarted); [`Client::reconnect`](crate::Client::reconnect) connects
    /// again, and events then continue on this same stream.
    Disconnected { reason: CloseReason },
}

/// The receiving end of a client's events, returned by
/// [`Client::connect`](crate::Client::connect).
///
/// **Bounded.** It holds at most [`ClientOptions::event_capacity`](crate::ClientOptions)
/// events. When it is full, the connection stops reading from the socket until the consumer
/// takes one: the daemon then holds the session's live output back (a slow reader slows the
/// command, as a full pipe would) and nothing is lost or buffered without limit. While the
/// connection waits, answers to this client's requests wait too, and the daemon answers
/// `tools/execute` only after it has sent the batch's `batch/done`; so read events from a
/// task of their own (or `select!` over them and the call), never only after a
/// `tools_execute` returns. Dropping `Events` discards every later event instead.
///
/// The stream outlives reconnections and ends (`None`) once every clone of the
/// [`Client`](crate::Client) is gone.
#[derive(Debug)]
pub struct Events {
    receiver: mpsc::Receiver<ClientEvent>,
}

impl Events {
    pub(crate) fn new(receiver: mpsc::Receiver<ClientEvent>) -> Self {
        Self { receiver }
    }

    /// The next event, waiting for it.
    pub async fn recv(&mut self) -> Option<ClientEvent> {
        self.receiver.recv().await
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<ClientEvent> {
        self.receiver.try_recv().ok()
    }
}
