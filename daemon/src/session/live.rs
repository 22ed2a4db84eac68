//! One session as the daemon manages it: the session itself, its event log and approval
//! board, the connections attached to it (each with its forwarder of the session's events), its
//! running batches, and its saves, which land in order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{CallOutcome, OnDisconnect, SessionEnv, SessionSnapshot};

use super::approvals::{ApprovalBoard, BoardApprover};
use super::client::Client;
use super::forward::{Forwarder, SessionEvents};
use super::log::EventLog;
use super::store::{SessionRecord, SessionStore};
use crate::hooks::ClientHooks;
use crate::pipeline::Pipeline;
use crate::pipeline::batch::{Batch, BatchControl};
use crate::pipeline::session::{SessionPeers, SessionView};

/// A batch running in a session.
pub(super) struct RunningBatch {
    pub(super) control: BatchControl,
    pub(super) call_ids: Vec<String>,
    /// The connection that submitted it, for `on_disconnect`.
    pub(super) submitter: u64,
}

/// A client attached to a session, and its place in the session's events.
pub(super) struct Attachment {
    client: Arc<Client>,
    forwarder: Arc<Forwarder>,
}

pub(super) struct Meta {
    pub(super) title: Option<String>,
    pub(super) on_disconnect: OnDisconnect,
    pub(super) created_at: String,
    pub(super) attached: BTreeMap<u64, Attachment>,
    pub(super) running: BTreeMap<String, RunningBatch>,
    /// Since when nobody is attached and nothing runs (for `session_idle_ttl`).
    pub(super) idle_since: Option<Instant>,
}

/// One session, as the daemon manages it.
pub(crate) struct LiveSession {
    pub session: Arc<SessionView>,
    pub log: Arc<EventLog>,
    /// The log and the attached clients' forwarders: the session's event listener.
    pub(super) events: Arc<SessionEvents>,
    pub approvals: Arc<ApprovalBoard>,
    pub(super) meta: Mutex<Meta>,
    /// Numbers each save request, so that a slow older save never overwrites a newer one.
    pub(super) requested_saves: AtomicU64,
    /// Held while a save writes: the generation on disk, and whether the session was closed
    /// (then nothing may write its file again).
    pub(super) saved: Mutex<SaveState>,
}

#[derive(Default)]
pub(super) struct SaveState {
    written: u64,
    closed: bool,
}

impl LiveSession {
    /// Saves the session in `store` in the background; saves land in the order asked.
    pub(crate) fn save(self: &Arc<Self>, store: &SessionStore) {
        let (record, generation) = self.next_save();
        let managed = Arc::clone(self);
        let store = store.clone();
        tokio::task::spawn_blocking(move || managed.write_record(&store, &record, generation));
    }

    /// Saves the session in `store` now, on this thread (shutdown).
    pub(super) fn save_blocking(&self, store: &SessionStore) {
        let (record, generation) = self.next_save();
        self.write_record(store, &record, generation);
    }

    /// The record to save as it is now, and the number of this save.
    fn next_save(&self) -> (SessionRecord, u64) {
        let record = self.record();
        let generation = self.requested_saves.fetch_add(1, Ordering::AcqRel) + 1;
        (record, generation)
    }

    /// Runs a batch `submitter` sent, as one of the session's running batches (which
    /// `tools/cancel` and the submitter's departure reach); its outcomes once every event of
    /// it has been sent to the submitter (a response follows its events).
    pub(crate) async fn run_batch(
        &self,
        pipeline: &Arc<Pipeline>,
        batch: Batch,
        control: &BatchControl,
        submitter: &Client,
    ) -> Vec<CallOutcome> {
        let batch_id = batch.id.clone();
        let call_ids = batch.calls.iter().map(|call| call.id.clone()).collect();
        self.start_batch(&batch_id, control.clone(), call_ids, submitter.id());
        // A submitter that left before its batch was registered was not seen by the
        // disconnect handling: apply `on_disconnect` here.
        if submitter.outbound().is_closed() && self.on_disconnect() == OnDisconnect::Cancel {
            control.batch.cancel();
        }
        let outcomes = pipeline
            .run_batch(&self.session, batch, control, &submitter.parser_owner())
            .await;
        self.end_batch(&batch_id);
        self.flushed(submitter.id(), self.log.last_seq()).await;
        outcomes
    }

    pub(super) fn write_record(
        &self,
        store: &SessionStore,
        record: &SessionRecord,
        generation: u64,
    ) {
        let mut saved = self.saved.lock_unpoisoned();
        if saved.closed || saved.written > generation {
            return;
        }
        if let Err(err) = store.save(record) {
            tracing::error!(session = self.id(), %err, "cannot persist the session");
        }
        saved.written = generation;
    }

    pub(super) fn remove_record(&self, store: &SessionStore) {
        let mut saved = self.saved.lock_unpoisoned();
        saved.closed = true;
        if let Err(err) = store.remove(self.id()) {
            tracing::warn!(session = self.id(), %err, "cannot remove the session's state file");
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Meta> {
        // Changes are single inserts, removes and assignments: a poisoned lock stays consistent.
        self.meta.lock_unpoisoned()
    }

    pub(crate) fn id(&self) -> &str {
        self.session.id()
    }

    pub(crate) fn on_disconnect(&self) -> OnDisconnect {
        self.lock().on_disconnect
    }

    /// The session as `session/*` methods return it.
    pub(crate) fn snapshot(&self) -> SessionSnapshot {
        let state = self.session.state();
        let meta = self.lock();
        SessionSnapshot {
            session_id: self.id().to_owned(),
            title: meta.title.clone(),
            cwd: state.env.cwd.clone(),
            roots: state.env.roots.clone(),
            mode: state.mode,
            allowed_tools: state.allowed_tools.clone(),
            rules: state.rules.clone(),
            env: SessionEnv {
                timeout_ms: state.env.timeout_ms,
                max_output_bytes: state.env.max_output_bytes as u64,
                max_read_bytes: state.env.max_read_bytes as u64,
            },
            command_env: state.env.command_env.clone(),
            grants: state.grants.clone(),
            attached: meta.attached.len() as u64,
            running_batches: meta.running.keys().cloned().collect(),
            last_seq: self.log.last_seq(),
            created_at: meta.created_at.clone(),
            on_disconnect: meta.on_disconnect,
            sandbox: state.env.sandbox.settings,
            replay_truncated: false,
        }
    }

    pub(super) fn record(&self) -> SessionRecord {
        let snapshot = self.snapshot();
        SessionRecord::from_snapshot(&snapshot)
    }

    /// Attaches a connection: a task forwards it every event after `after_seq` (the retained
    /// ones first), and it joins the approvers and hooks if it declared them. Returns whether
    /// events it asked for were already dropped.
    pub(crate) fn attach(self: &Arc<Self>, client: &Arc<Client>, after_seq: Option<u64>) -> bool {
        let from = after_seq.unwrap_or_else(|| self.log.last_seq());
        let mut reader = self.log.reader(from);
        // Events already dropped are skipped here, so that the watermark `flushed` waits on
        // starts past them (a restored session retains none of its old events).
        let truncated = reader.take_lag().is_some();
        let forwarder = self.events.attach(client, self.id(), reader);
        let previous = self.lock().attached.insert(
            client.id(),
            Attachment {
                client: Arc::clone(client),
                forwarder,
            },
        );
        if let Some(previous) = previous {
            self.events.detach(&previous.forwarder);
        }
        self.lock().idle_since = None;
        if client.approves() {
            self.approvals.add_approver(Arc::clone(client));
        }
        self.refresh_peers();
        truncated
    }

    /// Detaches a connection; false if it was not attached.
    pub(crate) fn detach(&self, connection_id: u64) -> bool {
        let removed = self.lock().attached.remove(&connection_id);
        let Some(attachment) = removed else {
            return false;
        };
        self.events.detach(&attachment.forwarder);
        self.approvals.remove_approver(connection_id);
        self.refresh_peers();
        self.mark_idle_if_unused();
        true
    }

    /// Waits until the connection has been sent every event up to `seq` (or is no longer
    /// attached): responses that must follow their events wait on this.
    pub(crate) async fn flushed(&self, connection_id: u64, seq: u64) {
        let forwarder = self
            .lock()
            .attached
            .get(&connection_id)
            .map(|attachment| Arc::clone(&attachment.forwarder));
        if let Some(forwarder) = forwarder {
            forwarder.flushed(seq).await;
        }
    }

    /// The hooks and approver of the session are its attached connections that declared them.
    fn refresh_peers(&self) {
        let clients: Vec<Arc<Client>> = self
            .lock()
            .attached
            .values()
            .map(|attachment| Arc::clone(&attachment.client))
            .collect();
        let hooks: Vec<Arc<dyn ClientHooks>> = clients
            .into_iter()
            .filter(|client| {
                client.hooks(toold_protocol::HookEvent::PreToolUse)
                    || client.hooks(toold_protocol::HookEvent::PostToolUse)
            })
            .map(|client| client as Arc<dyn ClientHooks>)
            .collect();
        let approver = self.approvals.has_approvers().then(|| {
            Arc::new(BoardApprover(Arc::clone(&self.approvals)))
                as Arc<dyn crate::approval::Approver>
        });
        self.session.set_peers(SessionPeers { approver, hooks });
    }

    fn start_batch(
        &self,
        batch_id: &str,
        control: BatchControl,
        call_ids: Vec<String>,
        submitter: u64,
    ) {
        let mut meta = self.lock();
        meta.running.insert(
            batch_id.to_owned(),
            RunningBatch {
                control,
                call_ids,
                submitter,
            },
        );
        meta.idle_since = None;
    }

    fn end_batch(&self, batch_id: &str) {
        self.lock().running.remove(batch_id);
        self.mark_idle_if_unused();
    }

    /// `tools/cancel`: the batch (or every running batch), or only the named calls; returns the
    /// ids of the calls it reached.
    pub(crate) fn cancel(
        &self,
        batch_id: Option<&str>,
        call_ids: Option<&[String]>,
    ) -> Vec<String> {
        let meta = self.lock();
        let mut canceled = Vec::new();
        for (id, batch) in &meta.running {
            if batch_id.is_some_and(|wanted| wanted != id) {
                continue;
            }
            for (index, call_id) in batch.call_ids.iter().enumerate() {
                let wanted = call_ids.is_none_or(|wanted| wanted.contains(call_id));
                if wanted && !batch.control.is_finished(index) {
                    batch.control.calls[index].cancel();
                    canceled.push(call_id.clone());
                }
            }
            if call_ids.is_none() {
                batch.control.batch.cancel();
            }
        }
        canceled
    }

    /// Cancels the batches a departed connection submitted, unless the session says continue.
    pub(super) fn connection_gone(&self, connection_id: u64) {
        if self.on_disconnect() == OnDisconnect::Cancel {
            for batch in self
                .lock()
                .running
                .values()
                .filter(|batch| batch.submitter == connection_id)
            {
                batch.control.batch.cancel();
            }
        }
        self.detach(connection_id);
    }

    fn mark_idle_if_unused(&self) {
        let mut meta = self.lock();
        if meta.attached.is_empty() && meta.running.is_empty() && meta.idle_since.is_none() {
            meta.idle_since = Some(Instant::now());
        }
    }

    pub(super) fn idle_for(&self) -> Option<Duration> {
        self.lock().idle_since.map(|since| since.elapsed())
    }

    pub(super) fn has_running(&self) -> bool {
        !self.lock().running.is_empty()
    }

    pub(super) fn close(&self) {
        let mut meta = self.lock();
        for batch in meta.running.values() {
            batch.control.batch.cancel();
        }
        let attached = std::mem::take(&mut meta.attached);
        drop(meta);
        for attachment in attached.values() {
            self.events.detach(&attachment.forwarder);
        }
        self.log.close();
    }
}
