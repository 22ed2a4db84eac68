//! What a client remembers for reattaching after a reconnect: the sessions it attached and
//! the last `seq` it put on its event stream for each.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use toold_protocol::SessionSnapshot;

/// A session the client is attached to, and how far its events have reached the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedSession {
    pub session_id: String,
    /// The `seq` of the last event delivered (or the snapshot's `last_seq` when attached, if
    /// later): a reattach asks for the events after it.
    pub last_seq: u64,
}

#[derive(Debug, Default)]
struct State {
    attached: BTreeSet<String>,
    /// Kept for every session events came from, attached or about to be: the events a
    /// `session/attach` replays arrive before its answer.
    last_seq: BTreeMap<String, u64>,
}

/// Shared by the client and the handler of each of its connections, so it survives them.
#[derive(Debug, Default)]
pub(crate) struct Tracking {
    state: Mutex<State>,
}

impl Tracking {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few map operations that cannot panic halfway.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An event of `session_id` numbered `seq` reached the stream.
    pub(crate) fn saw(&self, session_id: &str, seq: u64) {
        let mut state = self.state();
        match state.last_seq.get_mut(session_id) {
            Some(last) => *last = (*last).max(seq),
            None => {
                state.last_seq.insert(session_id.to_owned(), seq);
            }
        }
    }

    /// The connection is attached to the session of `snapshot` (created or attached): events
    /// up to its `last_seq` were replayed before it, or were not asked for.
    pub(crate) fn attached(&self, snapshot: &SessionSnapshot) {
        let mut state = self.state();
        state.attached.insert(snapshot.session_id.clone());
        let last = state
            .last_seq
            .entry(snapshot.session_id.clone())
            .or_insert(0);
        *last = (*last).max(snapshot.last_seq);
    }

    /// The session is no longer attached (detached, closed, or gone from the daemon).
    pub(crate) fn forget(&self, session_id: &str) {
        let mut state = self.state();
        state.attached.remove(session_id);
        state.last_seq.remove(session_id);
    }

    pub(crate) fn sessions(&self) -> Vec<AttachedSession> {
        let state = self.state();
        state
            .attached
            .iter()
            .map(|session_id| AttachedSession {
                session_id: session_id.clone(),
                last_seq: state.last_seq.get(session_id).copied().unwrap_or(0),
            })
            .collect()
    }
}
