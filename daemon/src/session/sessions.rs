//! The daemon's sessions: creation and restoration, attachment of connections (each with a
//! task that forwards the session's events to it in `seq` order), running batches, snapshots,
//! persistence and expiry.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};
use toold_protocol::{
    ErrorObject, Rules, SandboxRequest, SandboxSettings, SessionCreateParams, SessionMode,
    SessionUpdateParams, ToolDefinition,
};

use super::approvals::ApprovalBoard;
use super::client::Client;
use super::forward::SessionEvents;
use super::live::{LiveSession, Meta, SaveState};
use super::log::EventLog;
use super::store::{MAX_REQUESTED_RECORD_BYTES, MAX_TITLE_BYTES, SessionRecord, SessionStore};
use crate::env::Env;
use crate::permission::{ConfigRules, lint};
use crate::pipeline::session::{SessionState, SessionView};

/// What new sessions get unless their creator says otherwise, and what bounds them.
#[derive(Debug, Clone)]
pub(crate) struct SessionDefaults {
    /// The config's limits (cwd and roots are replaced per session).
    pub env: Env,
    pub config_rules: ConfigRules,
    pub allow_bypass: bool,
    /// `[sandbox] allow_unsandboxed`: may a session loosen the config's sandbox?
    pub allow_unsandboxed: bool,
    pub home: PathBuf,
    /// The MCP servers the config runs, by name: those whose tools a rule may name.
    pub mcp_servers: Vec<String>,
    /// Events each session retains for replay.
    pub log_capacity: usize,
}

/// Every session of the daemon.
pub(crate) struct Sessions {
    /// Replaced whole by a config reload.
    defaults: RwLock<Arc<SessionDefaults>>,
    /// Held for writing by a reload from its swap of the defaults to the last live session
    /// recompiled, and for reading by `create` and `update` from their read of the defaults to
    /// their write of the session: no session is left with the config rules a reload replaced.
    config_epoch: RwLock<()>,
    store: Option<SessionStore>,
    sessions: Mutex<HashMap<String, Arc<LiveSession>>>,
    next_id: AtomicU64,
}

impl Sessions {
    /// A manager that persists sessions in `store` (none: sessions live only in memory).
    pub(crate) fn new(defaults: SessionDefaults, store: Option<SessionStore>) -> Self {
        Self {
            defaults: RwLock::new(Arc::new(defaults)),
            config_epoch: RwLock::new(()),
            store,
            sessions: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }

    fn defaults(&self) -> Arc<SessionDefaults> {
        Arc::clone(&self.defaults.read_unpoisoned())
    }

    /// A config reload: new sessions get `defaults`, and every live session's rules are
    /// compiled again with the new config rules (its own rules, grants and mode kept). Returns
    /// the sessions whose rules did not compile with the new ones (they keep their policy),
    /// with why.
    pub(crate) fn reload(&self, defaults: SessionDefaults) -> Vec<(String, String)> {
        let _reloading = self.config_epoch.write_unpoisoned();
        let defaults = Arc::new(defaults);
        *self.defaults.write_unpoisoned() = Arc::clone(&defaults);
        let mut refused = Vec::new();
        for managed in self.all() {
            let recompiled = managed
                .session
                .update(|state| state.recompile(&defaults.config_rules, &defaults.home));
            if let Err(err) = recompiled {
                refused.push((managed.session.id().to_owned(), err.to_string()));
            }
        }
        refused
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<LiveSession>>> {
        // Inserts and removes only: a poisoned lock stays consistent.
        self.sessions.lock_unpoisoned()
    }

    pub(crate) fn get(&self, session_id: &str) -> Result<Arc<LiveSession>, ErrorObject> {
        self.lock()
            .get(session_id)
            .cloned()
            .ok_or_else(|| ErrorObject::unknown_session(session_id))
    }

    pub(crate) fn all(&self) -> Vec<Arc<LiveSession>> {
        let mut sessions: Vec<Arc<LiveSession>> = self.lock().values().cloned().collect();
        sessions.sort_by(|a, b| a.id().cmp(b.id()));
        sessions
    }

    /// `session/create`: validates everything, then creates, persists and attaches.
    /// `known_tools` are the tools registered now, which the session's rules are checked on.
    pub(crate) fn create(
        &self,
        params: SessionCreateParams,
        creator: &Arc<Client>,
        known_tools: &[ToolDefinition],
    ) -> Result<Arc<LiveSession>, ErrorObject> {
        // A session compiled with the config rules a reload is replacing would miss them.
        let _config = self.config_epoch.read_unpoisoned();
        let state = self.draft(&params, known_tools)?;
        check_record(&state, params.title.as_deref())?;
        let session_id = self.new_session_id();
        let managed = self.insert(
            session_id,
            state,
            Meta {
                title: params.title,
                on_disconnect: params.on_disconnect.unwrap_or_default(),
                created_at: toold_protocol::time::now_rfc3339(),
                attached: BTreeMap::new(),
                running: BTreeMap::new(),
                idle_since: None,
            },
            0,
        );
        managed.attach(creator, None);
        self.persist(&managed);
        Ok(managed)
    }

    /// The state `session/create` would give a session, every field checked, and nothing
    /// created: what `create` starts from, and what `permissions/explain` judges a described
    /// session by.
    pub(crate) fn draft(
        &self,
        params: &SessionCreateParams,
        known_tools: &[ToolDefinition],
    ) -> Result<SessionState, ErrorObject> {
        let cwd = existing_dir("cwd", &params.cwd)?;
        let roots = match &params.roots {
            Some(roots) => roots
                .iter()
                .map(|root| existing_dir("roots", root))
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![cwd.clone()],
        };
        check_roots_keep_out_the_socket(&roots)?;
        let mode = params.mode.unwrap_or_default();
        self.check_mode(mode)?;
        if let Some(rules) = &params.rules {
            self.check_rules_can_match(rules, known_tools, &cwd)?;
        }
        let mut env = self.defaults().env.clone();
        env.cwd = cwd;
        env.roots = roots;
        env.sandbox.settings = self.sandbox_for(params.sandbox.unwrap_or_default())?;
        apply_env_fields(
            &mut env,
            params.timeout_ms,
            params.max_output_bytes,
            params.max_read_bytes,
            params.command_env.clone(),
        )?;
        let mut state = SessionState::new(
            env,
            mode,
            params.rules.clone().unwrap_or_default(),
            &self.defaults().config_rules,
            &self.defaults().home,
        )
        .map_err(|err| ErrorObject::invalid_params(format!("rules: {err}")))?;
        state.allowed_tools = params.allowed_tools.clone();
        Ok(state)
    }

    /// `session/update`: every field given replaces the old value; the session is persisted.
    pub(crate) fn update(
        &self,
        params: SessionUpdateParams,
        known_tools: &[ToolDefinition],
    ) -> Result<Arc<LiveSession>, ErrorObject> {
        // As for `create`: the state written back must hold the config rules of now.
        let _config = self.config_epoch.read_unpoisoned();
        let managed = self.get(&params.session_id)?;
        if let Some(mode) = params.mode {
            self.check_mode(mode)?;
        }
        if let Some(rules) = &params.rules {
            let cwd = managed.session.state().env.cwd.clone();
            self.check_rules_can_match(rules, known_tools, &cwd)?;
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
        if let Some(roots) = &roots {
            check_roots_keep_out_the_socket(roots)?;
        }
        let current = managed.session.state();
        let mut env = (*current.env).clone();
        if let Some(roots) = roots {
            env.roots = roots;
        }
        if let Some(request) = params.sandbox {
            env.sandbox.settings = self.sandbox_for(request)?;
        }
        apply_env_fields(
            &mut env,
            params.timeout_ms,
            params.max_output_bytes,
            params.max_read_bytes,
            params.command_env,
        )?;
        let rules = params.rules.unwrap_or(current.rules.clone());
        let mut next = SessionState::new(
            env,
            params.mode.unwrap_or(current.mode),
            rules,
            &self.defaults().config_rules,
            &self.defaults().home,
        )
        .map_err(|err| ErrorObject::invalid_params(format!("rules: {err}")))?;
        next.grants = current.grants.clone();
        next.allowed_tools = match params.allowed_tools {
            Some(allowed) => allowed,
            None => current.allowed_tools.clone(),
        };
        let title = match &params.title {
            Some(title) => title.clone(),
            None => managed.lock().title.clone(),
        };
        check_record(&next, title.as_deref())?;
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
    pub(crate) fn close(&self, session_id: &str) -> Result<(), ErrorObject> {
        let managed = self
            .lock()
            .remove(session_id)
            .ok_or_else(|| ErrorObject::unknown_session(session_id))?;
        managed.close();
        if let Some(store) = &self.store {
            managed.remove_record(store);
        }
        if let Some(dir) = managed.session.state().env.sandbox.private_dir.clone() {
            // A large `/tmp` takes a while to remove: not on the caller's thread.
            let remove = move || crate::sandbox::private_tmp::remove_session_dir(&dir);
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(remove)),
                Err(_) => remove(),
            }
        }
        Ok(())
    }

    /// A client's connection closed: it leaves every session, and its batches are canceled
    /// where the session says so.
    pub(crate) fn connection_gone(&self, client_id: u64) {
        // Every session: the client may have submitted a batch where it was not attached.
        for managed in self.all() {
            managed.connection_gone(client_id);
        }
    }

    /// Saves the session's state file on a blocking thread (it fsyncs). Saves of one session
    /// land in order: a save never overwrites a newer one, nor recreates a closed session's file.
    pub(crate) fn persist(&self, managed: &Arc<LiveSession>) {
        if let Some(store) = &self.store {
            managed.save(store);
        }
    }

    /// Saves every session now, waiting for the writes (shutdown).
    pub(crate) fn persist_all(&self) {
        let Some(store) = &self.store else { return };
        for managed in self.all() {
            managed.save_blocking(store);
        }
    }

    /// Restores the sessions persisted by an earlier daemon; unreadable files are logged and
    /// skipped. Returns how many were restored.
    pub(crate) fn restore(&self) -> usize {
        let Some(store) = &self.store else { return 0 };
        let (records, failures) = store.load_all();
        for (path, why) in failures {
            tracing::error!(path = %path.display(), %why, "cannot restore a session");
        }
        let mut restored = 0;
        let kept: Vec<String> = records
            .iter()
            .map(|record| record.session_id.clone())
            .collect();
        crate::sandbox::private_tmp::remove_orphans(&kept);
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
        let mut env = record.env(self.defaults().env.max_command_timeout_ms);
        env.sandbox = self.defaults().env.sandbox.clone();
        if let Some(saved) = record.sandbox {
            if saved.is_looser_than(env.sandbox.settings) && !self.defaults().allow_unsandboxed {
                tracing::warn!(
                    session = %record.session_id,
                    "the session's sandbox is looser than the config now allows: restored with the config's"
                );
            } else {
                env.sandbox.settings = saved;
            }
        }
        let mode = if record.mode == SessionMode::Bypass && !self.defaults().allow_bypass {
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
            &self.defaults().config_rules,
            &self.defaults().home,
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
    pub(crate) fn expire_idle(&self, ttl: Duration) -> Vec<String> {
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
    pub(crate) fn cancel_all(&self) {
        for managed in self.all() {
            managed.cancel(None, None);
        }
    }

    pub(crate) fn running_batches(&self) -> usize {
        self.all()
            .iter()
            .map(|managed| managed.lock().running.len())
            .sum()
    }

    fn insert(
        &self,
        session_id: String,
        mut state: SessionState,
        meta: Meta,
        last_seq: u64,
    ) -> Arc<LiveSession> {
        // Its commands' `/tmp`, kept across its calls (and restarts) and removed with it.
        let mut env = (*state.env).clone();
        env.sandbox.private_dir =
            Some(crate::sandbox::private_tmp::session_dir(&session_id).into());
        state.env = Arc::new(env);
        let log = Arc::new(EventLog::with_capacity(
            self.defaults().log_capacity,
            last_seq,
        ));
        let events = Arc::new(SessionEvents::new(Arc::clone(&log)));
        let session = Arc::new(SessionView::new(
            session_id.clone(),
            state,
            Arc::clone(&events) as _,
            last_seq,
        ));
        let managed = Arc::new(LiveSession {
            session,
            log,
            events,
            approvals: Arc::new(ApprovalBoard::default()),
            meta: Mutex::new(meta),
            requested_saves: AtomicU64::new(0),
            saved: Mutex::new(SaveState::default()),
        });
        // A grant must survive a restart: saved as soon as it is recorded.
        if let Some(store) = self.store.clone() {
            let saved = Arc::downgrade(&managed);
            managed.session.on_grant(move || {
                if let Some(managed) = saved.upgrade() {
                    managed.save(&store);
                }
            });
        }
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

    /// The sandbox a session asking for `request` gets: the config's with the request's
    /// members; looser than the config only when the config allows it.
    fn sandbox_for(&self, request: SandboxRequest) -> Result<SandboxSettings, ErrorObject> {
        let config = self.defaults().env.sandbox.settings;
        let asked = config.overlaid(request);
        if asked.is_looser_than(config) && !self.defaults().allow_unsandboxed {
            return Err(ErrorObject::invalid_params(format!(
                "sandbox: mode {} with network {} is looser than the config's (mode {}, network \
                 {}); a session may only tighten it unless the config sets [sandbox] \
                 allow_unsandboxed = true",
                asked.mode.as_str(),
                if asked.network { "on" } else { "off" },
                config.mode.as_str(),
                if config.network { "on" } else { "off" },
            )));
        }
        Ok(asked)
    }

    fn check_mode(&self, mode: SessionMode) -> Result<(), ErrorObject> {
        if mode == SessionMode::Bypass && !self.defaults().allow_bypass {
            return Err(ErrorObject::invalid_params(
                "mode bypass is refused: the daemon's config does not set allow_bypass = true",
            ));
        }
        Ok(())
    }
}

impl Sessions {
    /// A session rule that can never match what it names (`permission::lint`) is refused: a
    /// deny rule that protects nothing must not look as if it did.
    fn check_rules_can_match(
        &self,
        rules: &Rules,
        known_tools: &[ToolDefinition],
        cwd: &Path,
    ) -> Result<(), ErrorObject> {
        for (kind, list) in [
            ("allow", &rules.allow),
            ("ask", &rules.ask),
            ("deny", &rules.deny),
        ] {
            let defaults = self.defaults();
            let servers: Vec<&str> = defaults.mcp_servers.iter().map(String::as_str).collect();
            for text in list {
                if let Some(reason) =
                    lint::never_matches(text, known_tools, Some(cwd), &defaults.home)
                        .or_else(|| lint::names_an_unknown_server(text, &servers, &defaults.home))
                {
                    return Err(ErrorObject::invalid_params(format!(
                        "rules.{kind}: {text:?} can never match: {reason}"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What a session keeps is checked when it is asked for, so that everything accepted can be
/// saved and loaded again: the title's length, and the record's size without its grants.
fn check_record(state: &SessionState, title: Option<&str>) -> Result<(), ErrorObject> {
    if let Some(title) = title
        && title.len() > MAX_TITLE_BYTES
    {
        return Err(ErrorObject::invalid_params(format!(
            "title is {} bytes long; a title is at most {MAX_TITLE_BYTES} bytes",
            title.len()
        )));
    }
    let bytes = SessionRecord::requested_bytes(state, title).map_err(|error| {
        ErrorObject::invalid_params(format!("the session could not be saved: {error}"))
    })?;
    if bytes > MAX_REQUESTED_RECORD_BYTES {
        return Err(ErrorObject::invalid_params(format!(
            "the session would take {bytes} bytes to save (its rules, roots, allowed_tools, \
             command_env and title); a session takes at most {MAX_REQUESTED_RECORD_BYTES}"
        )));
    }
    Ok(())
}

/// A root that holds the daemon's socket would let the session's file tools write next to
/// it and its commands reach what the sandbox hides: refused.
fn check_roots_keep_out_the_socket(roots: &[PathBuf]) -> Result<(), ErrorObject> {
    let Some(socket) = crate::sandbox::kept_out::daemon_socket() else {
        return Ok(());
    };
    let socket_dir = socket.path.parent().unwrap_or(Path::new("/"));
    match roots.iter().find(|root| socket_dir.starts_with(root)) {
        Some(root) => Err(ErrorObject::invalid_params(format!(
            "roots: {} holds the daemon's socket directory {}; give a root that does not",
            root.display(),
            socket_dir.display()
        ))),
        None => Ok(()),
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
    // Canonical once, here: every later call judges paths against this directory, whatever
    // its name comes to point to.
    match std::fs::metadata(path).and_then(|meta| Ok((meta, std::fs::canonicalize(path)?))) {
        Ok((meta, canonical)) if meta.is_dir() => Ok(canonical),
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

/// The Env fields of `session/create` and `session/update`: each one given replaces the old.
fn apply_env_fields(
    env: &mut Env,
    timeout_ms: Option<u64>,
    max_output_bytes: Option<u64>,
    max_read_bytes: Option<u64>,
    command_env: Option<BTreeMap<String, String>>,
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
        let ceiling = crate::env::defaults::SIZE_LIMIT_CEILING;
        if value > ceiling {
            return Err(ErrorObject::invalid_params(format!(
                "{field} is at most {ceiling} (1 GiB)"
            )));
        }
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
    if let Some(command_env) = command_env {
        env.command_env = command_env;
    }
    Ok(())
}
