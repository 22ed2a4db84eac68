//! One client connection as the daemon's handlers see it: the client as sessions reach it
//! (`session::client`: its way out, what it declared), where it is in its handshake, and what
//! it owns (registered tools, submitted batches). The sessions it is attached to are the
//! sessions' to know (`session::live`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;
use toold_protocol::sync::LockUnpoisoned;

use crate::session::client::{Client, Outbound, PeerProcess};

/// Where a connection is in its `initialize` handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handshake {
    /// No `initialize` yet: other requests get `-32002`.
    Awaiting,
    /// An `initialize` arrived and is being handled: requests after it wait for it.
    Running,
    Done,
}

/// What the client owns; changed by its own requests.
#[derive(Default)]
struct ConnectionState {
    /// Client tools this connection registered.
    tools: BTreeSet<String>,
    /// `tools/execute` requests in flight: request id (as JSON text) → the batch's cancel token,
    /// for `$/cancelRequest`.
    executing: HashMap<String, CancellationToken>,
    /// `$/cancelRequest`s that named no running batch: the request may not have reached its
    /// handler yet (both arrive on the same connection, but handlers run in their own tasks).
    /// Bounded: only the last few are remembered.
    canceled_early: VecDeque<String>,
}

/// How many early `$/cancelRequest`s a connection remembers.
const CANCELED_EARLY_KEPT: usize = 64;

/// One connection.
pub(crate) struct Connection {
    client: Arc<Client>,
    state: Mutex<ConnectionState>,
    /// Moved on in the order requests arrive, so that a request written right behind
    /// `initialize` waits for it instead of being refused.
    handshake: tokio::sync::watch::Sender<Handshake>,
}

impl Connection {
    pub(crate) fn new(id: u64, outbound: Arc<dyn Outbound>, process: PeerProcess) -> Self {
        Self {
            client: Arc::new(Client::of_process(id, outbound, process)),
            state: Mutex::new(ConnectionState::default()),
            handshake: tokio::sync::watch::Sender::new(Handshake::Awaiting),
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.client.id()
    }

    /// The client as sessions reach it.
    pub(crate) fn client(&self) -> &Arc<Client> {
        &self.client
    }

    pub(crate) fn outbound(&self) -> &Arc<dyn Outbound> {
        self.client.outbound()
    }

    pub(crate) fn handshake(&self) -> Handshake {
        *self.handshake.borrow()
    }

    /// An `initialize` arrived (called in arrival order); false if one already did.
    pub(crate) fn begin_handshake(&self) -> bool {
        self.handshake.send_if_modified(|state| {
            let awaiting = *state == Handshake::Awaiting;
            if awaiting {
                *state = Handshake::Running;
            }
            awaiting
        })
    }

    /// The `initialize` begun by [`begin_handshake`](Self::begin_handshake) ended; a failed one
    /// (an unsupported version) may be sent again.
    pub(crate) fn end_handshake(&self, succeeded: bool) {
        self.handshake.send_replace(if succeeded {
            Handshake::Done
        } else {
            Handshake::Awaiting
        });
    }

    /// Waits for a running handshake; true if the connection is initialized.
    pub(crate) async fn wait_for_handshake(&self) -> bool {
        let mut watching = self.handshake.subscribe();
        match watching
            .wait_for(|state| *state != Handshake::Running)
            .await
        {
            Ok(state) => *state == Handshake::Done,
            Err(_) => false,
        }
    }

    pub(crate) fn is_initialized(&self) -> bool {
        self.handshake() == Handshake::Done
    }

    pub(crate) fn own_tool(&self, name: &str) {
        self.lock().tools.insert(name.to_owned());
    }

    pub(crate) fn disown_tool(&self, name: &str) -> bool {
        self.lock().tools.remove(name)
    }

    pub(crate) fn owns_tool(&self, name: &str) -> bool {
        self.lock().tools.contains(name)
    }

    pub(crate) fn tools(&self) -> Vec<String> {
        self.lock().tools.iter().cloned().collect()
    }

    pub(crate) fn start_execute(&self, request_id: String, cancel: CancellationToken) {
        let mut state = self.lock();
        if let Some(position) = state.canceled_early.iter().position(|id| *id == request_id) {
            state.canceled_early.remove(position);
            cancel.cancel();
        }
        state.executing.insert(request_id, cancel);
    }

    pub(crate) fn end_execute(&self, request_id: &str) {
        self.lock().executing.remove(request_id);
    }

    /// Cancels the batch a `tools/execute` request of this connection runs, or will run once its
    /// handler starts; false if no batch runs under that id yet.
    pub(crate) fn cancel_execute(&self, request_id: &str) -> bool {
        let mut state = self.lock();
        if let Some(cancel) = state.executing.get(request_id) {
            cancel.cancel();
            return true;
        }
        if state.canceled_early.len() == CANCELED_EARLY_KEPT {
            state.canceled_early.pop_front();
        }
        state.canceled_early.push_back(request_id.to_owned());
        false
    }

    fn lock(&self) -> MutexGuard<'_, ConnectionState> {
        // Every change is a single insert, remove or assignment: a poisoned lock is still sound.
        self.state.lock_unpoisoned()
    }
}
