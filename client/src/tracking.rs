//! What a client remembers for a reconnect: the sessions it attached and the last `seq` it
//! put on its event stream for each, and the tools it registered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{SessionSnapshot, ToolDefinition};

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
    /// The client tools registered through the typed method, by name.
    tools: BTreeMap<String, ToolDefinition>,
}

/// Shared by the client and the handler of each of its connections, so it survives them.
#[derive(Debug, Default)]
pub(crate) struct Tracking {
    state: Mutex<State>,
}

impl Tracking {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few map operations that cannot panic halfway.
        self.state.lock_unpoisoned()
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

    /// These tools were registered (or replaced).
    pub(crate) fn registered(&self, tools: &[ToolDefinition]) {
        let mut state = self.state();
        for tool in tools {
            state.tools.insert(tool.name.clone(), tool.clone());
        }
    }

    /// These tools were unregistered.
    pub(crate) fn unregistered(&self, names: &[String]) {
        let mut state = self.state();
        for name in names {
            state.tools.remove(name);
        }
    }

    /// The tools to register again on a new connection, by name.
    pub(crate) fn tools(&self) -> Vec<ToolDefinition> {
        self.state().tools.values().cloned().collect()
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
