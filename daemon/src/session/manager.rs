//! The daemon's sessions: creation and restoration, attachment of connections (each with a
//! task that forwards the session's events to it in `seq` order), running batches, snapshots,
//! persistence and expiry.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toold_protocol::{
    ErrorObject, OnDisconnect, Rules, SessionCreateParams, SessionEnv, SessionMode,
    SessionSnapshot, SessionUpdateParams,
};

use super::approvals::{ApprovalBoard, BoardApprover};
use super::log::EventLog;
use super::store::{SessionRecord, SessionStore};
use super::{Session, SessionPeers, SessionState};
use crate::batch::BatchControl;
use crate::env::Env;
use crate::hooks::ClientHooks;
use crate::rpc::connection::Connection;
use crate::rpc::peers::ConnectionHooks;

/// What new sessions get unless their creator says otherwise, and what bounds them.
#[derive(Debug, Clone)]
pub struct SessionDefaults {
    /// The config's limits (cwd and roots are replaced per session).
    pub env: Env,
    pub config_rules: Rules,
    pub allow_bypass: bool,
    pub home: PathBuf,
    /// Events each session retains for replay.
    pub log_capacity: usize,
}

/// A batch running in a session.
struct RunningBatch {
    control: BatchControl,
    call_ids: Vec<String>,
    /// The connection that submitted it, for `on_disconnect`.
    submitter: u64,
}

/// A connection attached to a session, and the task forwarding it the session's events.
struct Attachment {
    connection: Arc<Connection>,
    stop: CancellationToken,
    /// The `seq` of the last event sent to the connection.
    sent: watch::Receiver<u64>,
}

struct Meta {
    title: Option<String>,
    on_disconnect: OnDisconnect,
    created_at: String,
    attached: BTreeMap<u64, Attachment>,
    running: BTreeMap<String, RunningBatch>,
    /// Since when nobody is attached and nothing runs (for `session_idle_ttl`).
    idle_since: Option<Instant>,
}

/// One session, as the daemon manages it.
pub struct ManagedSession {
    pub session: Arc<Session>,
    pub log: Arc<EventLog>,
    pub approvals: Arc<ApprovalBoard>,
    meta: Mutex<Meta>,
    /// Numbers each save request, so that a slow older save never overwrites a newer one.
    requested_saves: AtomicU64,
    /// Held while a save writes: the generation on disk, and whether the session was closed
    /// (then nothing may write its file again).
    saved: Mutex<SaveState>,
}

#[derive(Default)]
struct SaveState {
    written: u64,
    closed: bool,
}

impl ManagedSession {
    fn write_record(&self, store: &SessionStore, record: &SessionRecord, generation: u64) {
        let mut saved = self
            .saved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if saved.closed || saved.written > generation {
            return;
        }
        if let Err(err) = store.save(record) {
            tracing::error!(session = self.id(), %err, "cannot persist the session");
        }
        saved.written = generation;
    }

    fn remove_record(&self, store: &SessionStore) {
        let mut saved = self
            .saved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        saved.closed = true;
        if let Err(err) = store.remove(self.id()) {
            tracing::warn!(session = self.id(), %err, "cannot remove the session's state file");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Meta> {
        // Changes are single inserts, removes and assignments: a poisoned lock stays consistent.
        self.meta
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn id(&self) -> &str {
        self.session.id()
    }

    pub fn on_disconnect(&self) -> OnDisconnect {
        self.lock().on_disconnect
    }

    /// The session as `session/*` methods return it.
    pub fn snapshot(&self) -> SessionSnapshot {
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
            replay_truncated: false,
        }
    }

    fn record(&self) -> SessionRecord {
        let snapshot = self.snapshot();
        SessionRecord::from_snapshot(&snapshot)
    }

    /// Attaches a connection: a task forwards it every event after `after_seq` (the retained
    /// ones first), and it joins the approvers and hooks if it declared them. Returns whether
    /// events it asked for were already dropped.
    pub fn attach(self: &Arc<Self>, connection: &Arc<Connection>, after_seq: Option<u64>) -> bool {
        let from = after_seq.unwrap_or_else(|| self.log.last_seq());
        let mut reader = self.log.reader(from);
        // Events already dropped are skipped here, so that the watermark `flushed` waits on
        // starts past them (a restored session retains none of its old events).
        let truncated = reader.take_lag().is_some();
        let stop = CancellationToken::new();
        let (sent_tx, sent) = watch::channel(reader.position());
        let target = Arc::clone(connection);
        let session_id = self.id().to_owned();
        let until = stop.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    next = reader.next() => next,
                    () = until.cancelled() => return,
                };
                let event = match next {
                    Some(Ok(event)) => event,
                    Some(Err(lagged)) => {
                        tracing::warn!(session = %session_id, connection = target.id(), ?lagged, "a connection fell behind the event log; it continues from the oldest retained event");
                        continue;
                    }
                    None => return,
                };
                let seq = event.seq();
                let params = match event.params() {
                    Ok(params) => params,
                    Err(err) => {
                        tracing::error!(session = %session_id, %err, "cannot encode an event");
                        continue;
                    }
                };
                let delivered = tokio::select! {
                    delivered = target.outbound().notify(event.method(), params) => delivered,
                    () = until.cancelled() => return,
                };
                if delivered.is_err() {
                    return;
                }
                // Nobody listening is fine: the attachment may be gone already.
                let _ = sent_tx.send(seq);
            }
        });
        let previous = self.lock().attached.insert(
            connection.id(),
            Attachment {
                connection: Arc::clone(connection),
                stop,
                sent,
            },
        );
        if let Some(previous) = previous {
            previous.stop.cancel();
        }
        self.lock().idle_since = None;
        if connection.approves() {
            self.approvals.add_approver(Arc::clone(connection));
        }
        self.refresh_peers();
        truncated
    }

    /// Detaches a connection; false if it was not attached.
    pub fn detach(&self, connection_id: u64) -> bool {
        let removed = self.lock().attached.remove(&connection_id);
        let Some(attachment) = removed else {
            return false;
        };
        attachment.stop.cancel();
        self.approvals.remove_approver(connection_id);
        self.refresh_peers();
        self.mark_idle_if_unused();
        true
    }

    /// Waits until the connection has been sent every event up to `seq` (or is no longer
    /// attached): responses that must follow their events wait on this.
    pub async fn flushed(&self, connection_id: u64, seq: u64) {
        let sent = self
            .lock()
            .attached
            .get(&connection_id)
            .map(|attachment| attachment.sent.clone());
        if let Some(mut sent) = sent {
            // An error means the forwarder ended (detached, connection gone): nothing to wait for.
            let _ = sent.wait_for(|sent| *sent >= seq).await;
        }
    }

    /// The hooks and approver of the session are its attached connections that declared them.
    fn refresh_peers(&self) {
        let connections: Vec<Arc<Connection>> = self
            .lock()
            .attached
            .values()
            .map(|attachment| Arc::clone(&attachment.connection))
            .collect();
        let hooks: Vec<Arc<dyn ClientHooks>> = connections
            .into_iter()
            .filter(|connection| {
                connection.hooks(toold_protocol::HookEvent::PreToolUse)
                    || connection.hooks(toold_protocol::HookEvent::PostToolUse)
            })
            .map(|connection| Arc::new(ConnectionHooks(connection)) as Arc<dyn ClientHooks>)
            .collect();
        let approver = self.approvals.has_approvers().then(|| {
            Arc::new(BoardApprover(Arc::clone(&self.approvals)))
                as Arc<dyn crate::approval::Approver>
        });
        self.session.set_peers(SessionPeers { approver, hooks });
    }

    pub fn start_batch(
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

    pub fn end_batch(&self, batch_id: &str) {
        self.lock().running.remove(batch_id);
        self.mark_idle_if_unused();
    }

    /// `tools/cancel`: the batch (or every running batch), or only the named calls; returns the
    /// ids of the calls it reached.
    pub fn cancel(&self, batch_id: Option<&str>, call_ids: Option<&[String]>) -> Vec<String> {
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
    fn connection_gone(&self, connection_id: u64) {
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

    fn idle_for(&self) -> Option<Duration> {
        self.lock().idle_since.map(|since| since.elapsed())
    }

    fn has_running(&self) -> bool {
        !self.lock().running.is_empty()
    }

    fn close(&self) {
        let mut meta = self.lock();
        for batch in meta.running.values() {
            batch.control.batch.cancel();
        }
        for attachment in meta.attached.values() {
            attachment.stop.cancel();
            attachment.connection.detach(self.session.id());
        }
        meta.attached.clear();
        drop(meta);
        self.log.close();
    }
}

/// Every session of the daemon.
pub struct SessionManager {
    defaults: SessionDefaults,
    store: Option<SessionStore>,
    sessions: Mutex<HashMap<String, Arc<ManagedSession>>>,
    next_id: AtomicU64,
}

impl SessionManager {
    /// A manager that persists sessions in `store` (none: sessions live only in memory).
    pub fn new(defaults: SessionDefaults, store: Option<SessionStore>) -> Self {
        Self {
            defaults,
            store,
            sessions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<ManagedSession>>> {
        // Inserts and removes only: a poisoned lock stays consistent.
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn get(&self, session_id: &str) -> Result<Arc<ManagedSession>, ErrorObject> {
        self.lock()
            .get(session_id)
            .cloned()
            .ok_or_else(|| ErrorObject::unknown_session(session_id))
    }

    pub fn all(&self) -> Vec<Arc<ManagedSession>> {
        let mut sessions: Vec<Arc<ManagedSession>> = self.lock().values().cloned().collect();
        sessions.sort_by(|a, b| a.id().cmp(b.id()));
        sessions
    }

    /// `session/create`: validates everything, then creates, persists and attaches.
    pub fn create(
        &self,
        params: SessionCreateParams,
        creator: &Arc<Connection>,
    ) -> Result<Arc<ManagedSession>, ErrorObject> {
        let cwd = existing_dir("cwd", &params.cwd)?;
        let roots = match &params.roots {
            Some(roots) => roots
                .iter()
                .map(|root| existing_dir("roots", root))
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![cwd.clone()],
        };
        let mode = params.mode.unwrap_or_default();
        self.check_mode(mode)?;
        let mut env = self.defaults.env.clone();
        env.cwd = cwd;
        env.roots = roots;
        apply_limits(
            &mut env,
            params.timeout_ms,
            params.max_output_bytes,
            params.max_read_bytes,
        )?;
        if let Some(command_env) = params.command_env {
            env.command_env = command_env;
        }
        let rules = params.rules.unwrap_or_default();
        let mut state = SessionState::new(
            env,
            mode,
            rules,
            &self.defaults.config_rules,
            &self.defaults.home,
        )
        .map_err(|err| ErrorObject::invalid_params(format!("rules: {err}")))?;
        state.allowed_tools = params.allowed_tools;
        let session_id = self.new_session_id();
        let managed = self.insert(
            session_id,
            state,
            Meta {
                title: params.title,
                on_disconnect: params.on_disconnect.unwrap_or_default(),
                created_at: super::store::now_rfc3339(),
                attached: BTreeMap::new(),
                running: BTreeMap::new(),
                idle_since: None,
            },
            0,
        );
        creator.attach(managed.id());
        managed.attach(creator, None);
        self.persist(&managed);
        Ok(managed)
    }

    /// `session/update`: every field given replaces the old value; the session is persisted.
    pub fn update(&self, params: SessionUpdateParams) -> Result<Arc<ManagedSession>, ErrorObject> {
        let managed = self.get(&params.session_id)?;
        if let Some(mode) = params.mode {
            self.check_mode(mode)?;
        }
        let roots = match &params.roots {
            Some(roots) => Some(
                roots
                    .iter()
                    .map(|root| existing_dir("roots", root))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let current = managed.session.state();
        let mut env = (*current.env).clone();
        if let Some(roots) = roots {
            env.roots = roots;
        }
        apply_limits(
            &mut env,
            params.timeout_ms,
            params.max_output_bytes,
            params.max_read_bytes,
        )?;
        if let Some(command_env) = params.command_env {
            env.command_env = command_env;
        }
        let rules = params.rules.unwrap_or(current.rules.clone());
        let mut next = SessionState::new(
            env,
            params.mode.unwrap_or(current.mode),
            rules,
            &self.defaults.config_rules,
            &self.defaults.home,
        )
        .map_err(|err| ErrorObject::invalid_params(format!("rules: {err}")))?;
        next.grants = current.grants.clone();
        next.allowed_tools = match params.allowed_tools {
            Some(allowed) => allowed,
            None => current.allowed_tools.clone(),
        };
        // Grants recorded while this update was prepared are kept.
        managed.session.update(|state| {
            next.grants = state.grants.clone();
            *state = next;
        });
        {
            let mut meta = managed.lock();
            if let Some(title) = params.title {
                meta.title = title;
            }
            if let Some(on_disconnect) = params.on_disconnect {
                meta.on_disconnect = on_disconnect;
            }
        }
        self.persist(&managed);
        Ok(managed)
    }

    /// `session/close`: cancels its batches, detaches everyone, forgets it.
    pub fn close(&self, session_id: &str) -> Result<(), ErrorObject> {
        let managed = self
            .lock()
            .remove(session_id)
            .ok_or_else(|| ErrorObject::unknown_session(session_id))?;
        managed.close();
        if let Some(store) = &self.store {
            managed.remove_record(store);
        }
        Ok(())
    }

    /// A connection closed: it leaves every session, and its batches are canceled where the
    /// session says so.
    pub fn connection_gone(&self, connection: &Connection) {
        for session_id in connection.sessions() {
            if let Ok(managed) = self.get(&session_id) {
                managed.connection_gone(connection.id());
            }
        }
        for managed in self.all() {
            if managed
                .lock()
                .running
                .values()
                .any(|batch| batch.submitter == connection.id())
            {
                managed.connection_gone(connection.id());
            }
        }
    }

    /// Saves the session's state file on a blocking thread (it fsyncs). Saves of one session
    /// land in order: a save never overwrites a newer one, nor recreates a closed session's file.
    pub fn persist(&self, managed: &Arc<ManagedSession>) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let record = managed.record();
        let generation = managed.requested_saves.fetch_add(1, Ordering::AcqRel) + 1;
        let managed = Arc::clone(managed);
        tokio::task::spawn_blocking(move || managed.write_record(&store, &record, generation));
    }

    /// Saves every session now, waiting for the writes (shutdown).
    pub fn persist_all(&self) {
        let Some(store) = &self.store else { return };
        for managed in self.all() {
            let generation = managed.requested_saves.fetch_add(1, Ordering::AcqRel) + 1;
            managed.write_record(store, &managed.record(), generation);
        }
    }

    /// Restores the sessions persisted by an earlier daemon; unreadable files are logged and
    /// skipped. Returns how many were restored.
    pub fn restore(&self) -> usize {
        let Some(store) = &self.store else { return 0 };
        let (records, failures) = store.load_all();
        for (path, why) in failures {
            tracing::error!(path = %path.display(), %why, "cannot restore a session");
        }
        let mut restored = 0;
        for record in records {
            let session_id = record.session_id.clone();
            match self.restore_one(record) {
                Ok(()) => restored += 1,
                Err(why) => {
                    tracing::error!(session = %session_id, %why, "cannot restore a session")
                }
            }
        }
        restored
    }

    fn restore_one(&self, record: SessionRecord) -> Result<(), String> {
        let mut env = self.defaults.env.clone();
        env.cwd = record.cwd.clone();
        env.roots = record.roots.clone();
        env.timeout_ms = record.timeout_ms;
        env.max_output_bytes =
            usize::try_from(record.max_output_bytes).map_err(|err| err.to_string())?;
        env.max_read_bytes =
            usize::try_from(record.max_read_bytes).map_err(|err| err.to_string())?;
        env.command_env = record.command_env.clone();
        let mode = if record.mode == SessionMode::Bypass && !self.defaults.allow_bypass {
            tracing::warn!(
                session = %record.session_id,
                "the session was in bypass mode, which the config no longer allows: restored in default mode"
            );
            SessionMode::Default
        } else {
            record.mode
        };
        let mut state = SessionState::new(
            env,
            mode,
            record.rules.clone(),
            &self.defaults.config_rules,
            &self.defaults.home,
        )
        .map_err(|err| err.to_string())?;
        state.grants = record.grants.clone();
        state.allowed_tools = record.allowed_tools.clone();
        self.insert(
            record.session_id.clone(),
            state,
            Meta {
                title: record.title.clone(),
                on_disconnect: record.on_disconnect,
                created_at: record.created_at.clone(),
                attached: BTreeMap::new(),
                running: BTreeMap::new(),
                idle_since: Some(Instant::now()),
            },
            record.last_seq,
        );
        // Keep numbering new sessions after the restored ones.
        if let Some(number) = record
            .session_id
            .strip_prefix("s_")
            .and_then(|n| n.split('_').next())
            .and_then(|n| n.parse::<u64>().ok())
        {
            self.next_id.fetch_max(number + 1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Closes every session idle for longer than `ttl`; returns their ids.
    pub fn expire_idle(&self, ttl: Duration) -> Vec<String> {
        let expired: Vec<String> = self
            .all()
            .into_iter()
            .filter(|managed| {
                !managed.has_running() && managed.idle_for().is_some_and(|idle| idle >= ttl)
            })
            .map(|managed| managed.id().to_owned())
            .collect();
        for session_id in &expired {
            // It may have been closed meanwhile: nothing to do then.
            let _ = self.close(session_id);
        }
        expired
    }

    /// Cancels every running batch (shutdown).
    pub fn cancel_all(&self) {
        for managed in self.all() {
            managed.cancel(None, None);
        }
    }

    pub fn running_batches(&self) -> usize {
        self.all()
            .iter()
            .map(|managed| managed.lock().running.len())
            .sum()
    }

    fn insert(
        &self,
        session_id: String,
        state: SessionState,
        meta: Meta,
        last_seq: u64,
    ) -> Arc<ManagedSession> {
        let log = Arc::new(EventLog::with_capacity(
            self.defaults.log_capacity,
            last_seq,
        ));
        let session = Arc::new(Session::new(
            session_id.clone(),
            state,
            log.clone(),
            last_seq,
        ));
        let managed = Arc::new(ManagedSession {
            session,
            log,
            approvals: Arc::new(ApprovalBoard::default()),
            meta: Mutex::new(meta),
            requested_saves: AtomicU64::new(0),
            saved: Mutex::new(SaveState::default()),
        });
        self.lock().insert(session_id, Arc::clone(&managed));
        managed
    }

    fn new_session_id(&self) -> String {
        let number = self.next_id.fetch_add(1, Ordering::Relaxed);
        // The time part keeps ids unique across daemons sharing a state directory.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("s_{number}_{nanos:08x}")
    }

    fn check_mode(&self, mode: SessionMode) -> Result<(), ErrorObject> {
        if mode == SessionMode::Bypass && !self.defaults.allow_bypass {
            return Err(ErrorObject::invalid_params(
                "mode bypass is refused: the daemon's config does not set allow_bypass = true",
            ));
        }
        Ok(())
    }
}

/// A path parameter that must be an absolute, existing directory; canonical afterwards.
fn existing_dir(field: &str, path: &Path) -> Result<PathBuf, ErrorObject> {
    if !path.is_absolute() {
        return Err(ErrorObject::invalid_params(format!(
            "{field}: {} is not an absolute path",
            path.display()
        )));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(path.to_path_buf()),
        Ok(_) => Err(ErrorObject::invalid_params(format!(
            "{field}: {} is not a directory",
            path.display()
        ))),
        Err(err) => Err(ErrorObject::invalid_params(format!(
            "{field}: {} cannot be used: {err}",
            path.display()
        ))),
    }
}

fn apply_limits(
    env: &mut Env,
    timeout_ms: Option<u64>,
    max_output_bytes: Option<u64>,
    max_read_bytes: Option<u64>,
) -> Result<(), ErrorObject> {
    let positive = |field: &str, value: u64| {
        if value == 0 {
            Err(ErrorObject::invalid_params(format!(
                "{field} must be greater than 0"
            )))
        } else {
            Ok(value)
        }
    };
    let size = |field: &str, value: u64| {
        usize::try_from(positive(field, value)?)
            .map_err(|_| ErrorObject::invalid_params(format!("{field} is too large")))
    };
    if let Some(value) = timeout_ms {
        env.timeout_ms = positive("timeout_ms", value)?;
    }
    if let Some(value) = max_output_bytes {
        env.max_output_bytes = size("max_output_bytes", value)?;
    }
    if let Some(value) = max_read_bytes {
        env.max_read_bytes = size("max_read_bytes", value)?;
    }
    Ok(())
}
