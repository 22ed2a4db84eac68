//! Sessions on disk, so that they survive a daemon restart: the `SessionRecord` file format
//! (one `<session_id>.json` per session under `$XDG_STATE_HOME/toold/sessions`), saved
//! atomically and privately, and loaded back with every unreadable file reported and skipped.
//!
//! The format is read by older and newer daemons alike: every field but `session_id` and `cwd`
//! has a default, unknown top-level fields are kept and written back, unknown kinds of rules are
//! ignored, and nothing is refused for being new. What is refused is what could loosen a session if guessed: an unknown `mode` makes the
//! file unreadable (reported, left in place for a daemon that knows it).

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use toold_protocol::time::{now_rfc3339, rfc3339};
use toold_protocol::{OnDisconnect, Rules, SandboxSettings, SessionMode, SessionSnapshot};

use crate::env::{Env, defaults};
use crate::pipeline::session::SessionState;
use crate::tools::write_file::write_atomically;

/// The format version this daemon writes. Readers accept any version: fields they do not know
/// are kept, fields they miss take defaults.
pub(crate) const RECORD_VERSION: u32 = 1;

/// The longest session id that can name a file (well under any file system's name limit).
pub(crate) const MAX_SESSION_ID_LEN: usize = 128;

/// A record is a few kilobytes; anything this large is not one, and is not read into memory.
const MAX_RECORD_BYTES: u64 = 4 * 1024 * 1024;

/// The most a record may take without its grants: `session/create` and `session/update` are
/// refused past it, so that whatever they accept can be saved and loaded again.
pub(crate) const MAX_REQUESTED_RECORD_BYTES: usize = 3 * 1024 * 1024;

/// The longest session title, in bytes: a title is a label for lists, not storage.
pub(crate) const MAX_TITLE_BYTES: usize = 1024;

/// Session files hold rules and grants: only the user may read them.
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// What a session keeps across a daemon restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The format version of the daemon that wrote the file (0: unversioned).
    #[serde(default)]
    pub version: u32,
    pub session_id: String,
    #[serde(default)]
    pub title: Option<String>,
    /// Absolute.
    pub cwd: PathBuf,
    /// Empty in a file means `[cwd]`; loading fills it in.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    #[serde(default)]
    pub mode: SessionMode,
    /// `None`: every tool is visible.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Read leniently (see `lenient_rules`): the protocol's `Rules` refuses unknown fields.
    #[serde(default, deserialize_with = "lenient_rules")]
    pub rules: Rules,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    #[serde(default = "default_max_read_bytes")]
    pub max_read_bytes: u64,
    #[serde(default)]
    pub command_env: BTreeMap<String, String>,
    /// Rule strings recorded by `allow_session` answers.
    #[serde(default)]
    pub grants: Vec<String>,
    #[serde(default)]
    pub on_disconnect: OnDisconnect,
    /// RFC 3339; a file without it gets the file's modification time when loaded.
    #[serde(default)]
    pub created_at: String,
    /// The `seq` of the last event emitted when the record was saved; a restored session's
    /// event log continues after it.
    #[serde(default)]
    pub last_seq: u64,
    /// The session's sandbox; `None` (a record from before sandboxes): the config's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSettings>,
    /// Fields written by a newer daemon, kept so that saving here does not erase them.
    #[serde(flatten)]
    pub unknown_fields: Map<String, Value>,
}

fn default_timeout_ms() -> u64 {
    defaults::TIMEOUT_MS
}

fn default_max_output_bytes() -> u64 {
    to_u64(defaults::MAX_OUTPUT_BYTES)
}

fn default_max_read_bytes() -> u64 {
    to_u64(defaults::MAX_READ_BYTES)
}

/// Reads `rules` without the wire type's `deny_unknown_fields`: a newer daemon may add a kind
/// of rule, and an older one then keeps the kinds it knows (and drops the new kind on its next
/// save) instead of losing the whole session.
fn lenient_rules<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Rules, D::Error> {
    #[derive(Deserialize)]
    struct AnyRules {
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        ask: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
    }
    let AnyRules { allow, ask, deny } = AnyRules::deserialize(deserializer)?;
    Ok(Rules { allow, ask, deny })
}

impl SessionRecord {
    /// A record for a new session in `cwd`, created now, with every other field at its default.
    pub fn new(session_id: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        let cwd = cwd.into();
        Self {
            version: RECORD_VERSION,
            session_id: session_id.into(),
            title: None,
            roots: vec![cwd.clone()],
            cwd,
            mode: SessionMode::default(),
            allowed_tools: None,
            rules: Rules::default(),
            timeout_ms: default_timeout_ms(),
            max_output_bytes: default_max_output_bytes(),
            max_read_bytes: default_max_read_bytes(),
            command_env: BTreeMap::new(),
            grants: Vec::new(),
            on_disconnect: OnDisconnect::default(),
            created_at: now_rfc3339(),
            last_seq: 0,
            sandbox: None,
            unknown_fields: Map::new(),
        }
    }

    /// Copies what the session's state holds (Env, mode, rules, grants, tool list) into the
    /// record; the title, `on_disconnect`, `created_at` and `last_seq` live elsewhere and are
    /// set by the caller.
    pub fn capture(&mut self, state: &SessionState) {
        let env = &state.env;
        self.cwd.clone_from(&env.cwd);
        self.roots.clone_from(&env.roots);
        self.timeout_ms = env.timeout_ms;
        self.max_output_bytes = to_u64(env.max_output_bytes);
        self.max_read_bytes = to_u64(env.max_read_bytes);
        self.command_env.clone_from(&env.command_env);
        self.mode = state.mode;
        self.rules.clone_from(&state.rules);
        self.grants.clone_from(&state.grants);
        self.allowed_tools.clone_from(&state.allowed_tools);
        self.sandbox = Some(env.sandbox.settings);
    }

    /// How many bytes of JSON a record of `state` (without its grants) and `title` takes, or
    /// why it cannot be written at all.
    pub(crate) fn requested_bytes(
        state: &SessionState,
        title: Option<&str>,
    ) -> Result<usize, String> {
        let mut record = Self::new("s".repeat(MAX_SESSION_ID_LEN), state.env.cwd.clone());
        record.capture(state);
        record.grants.clear();
        record.title = title.map(str::to_owned);
        // As the store writes it.
        serde_json::to_vec_pretty(&record)
            .map(|json| json.len())
            .map_err(|error| error.to_string())
    }

    /// The Env the record describes; `max_command_timeout_ms` is the config's, not the session's.
    pub fn env(&self, max_command_timeout_ms: u64) -> Env {
        let mut env = Env::new(self.cwd.clone());
        if !self.roots.is_empty() {
            env.roots.clone_from(&self.roots);
        }
        env.timeout_ms = self.timeout_ms;
        env.max_command_timeout_ms = max_command_timeout_ms;
        env.max_output_bytes = to_usize(self.max_output_bytes);
        env.max_read_bytes = to_usize(self.max_read_bytes);
        env.command_env.clone_from(&self.command_env);
        env
    }

    /// A record of what a snapshot shows (a snapshot has everything a record keeps).
    pub(crate) fn from_snapshot(snapshot: &SessionSnapshot) -> Self {
        Self {
            version: RECORD_VERSION,
            session_id: snapshot.session_id.clone(),
            title: snapshot.title.clone(),
            cwd: snapshot.cwd.clone(),
            roots: snapshot.roots.clone(),
            mode: snapshot.mode,
            allowed_tools: snapshot.allowed_tools.clone(),
            rules: snapshot.rules.clone(),
            timeout_ms: snapshot.env.timeout_ms,
            max_output_bytes: snapshot.env.max_output_bytes,
            max_read_bytes: snapshot.env.max_read_bytes,
            command_env: snapshot.command_env.clone(),
            grants: snapshot.grants.clone(),
            on_disconnect: snapshot.on_disconnect,
            created_at: snapshot.created_at.clone(),
            last_seq: snapshot.last_seq,
            sandbox: Some(snapshot.sandbox),
            unknown_fields: Map::new(),
        }
    }
}

fn to_u64(value: usize) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// Why a session could not be saved or removed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "session id {id:?} cannot name a session file: {why} (use 1 to {MAX_SESSION_ID_LEN} \
         letters, digits, `_` or `-`)"
    )]
    InvalidId { id: String, why: &'static str },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error("cannot save session {id}: {message}")]
    Write { id: String, message: String },
    #[error("cannot encode session {id}: {source}")]
    Encode {
        id: String,
        source: serde_json::Error,
    },
}

impl StoreError {
    fn io(path: &Path, action: &'static str, source: io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            action,
            source,
        }
    }
}

/// Refuses an id that could not safely name a file in the store's directory: only ASCII letters,
/// digits, `_` and `-`, 1 to [`MAX_SESSION_ID_LEN`] of them (so no `/`, `.`, `..` or NUL).
pub(crate) fn validate_session_id(id: &str) -> Result<(), StoreError> {
    let refuse = |why| {
        Err(StoreError::InvalidId {
            id: id.chars().take(MAX_SESSION_ID_LEN + 8).collect(),
            why,
        })
    };
    if id.is_empty() {
        return refuse("it is empty");
    }
    if id.len() > MAX_SESSION_ID_LEN {
        return refuse("it is too long");
    }
    if !id
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
    {
        return refuse("it has a character other than a letter, digit, `_` or `-`");
    }
    Ok(())
}

/// The directory of session files. Its methods do blocking IO (a save fsyncs twice): call them
/// from `spawn_blocking` or a dedicated task. Two saves of one session racing each other end
/// with either one's record, so callers save a session from one place at a time.
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
}

impl SessionStore {
    /// A store in `dir`, created (mode 0700) on the first save.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// `$XDG_STATE_HOME/toold/sessions`, or `$HOME/.local/state/toold/sessions`; `None` when
    /// neither variable holds an absolute path.
    /// `$XDG_STATE_HOME/toold/sessions`, else `$HOME/.local/state/toold/sessions`.
    pub(crate) fn default_dir() -> Option<PathBuf> {
        crate::paths::toold_state_dir().map(|dir| dir.join("sessions"))
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a session's record lives.
    pub(crate) fn path_of(&self, session_id: &str) -> Result<PathBuf, StoreError> {
        validate_session_id(session_id)?;
        Ok(self.dir.join(format!("{session_id}.json")))
    }

    /// Writes the record atomically (a crash leaves the old file or the new one), mode 0600 in
    /// a directory of mode 0700, stamped with this daemon's [`RECORD_VERSION`].
    pub fn save(&self, record: &SessionRecord) -> Result<(), StoreError> {
        let id = &record.session_id;
        let path = self.path_of(id)?;
        self.ensure_dir()?;
        let stamped = SessionRecord {
            version: RECORD_VERSION,
            ..record.clone()
        };
        let mut bytes =
            serde_json::to_vec_pretty(&stamped).map_err(|source| StoreError::Encode {
                id: id.clone(),
                source,
            })?;
        bytes.push(b'\n');
        write_atomically(&path, &bytes, None).map_err(|failure| StoreError::Write {
            id: id.clone(),
            message: failure.message,
        })?;
        // A new file gets the umask's mode from the atomic write; it sits in our 0700
        // directory until this narrows it, so nobody else can open it meanwhile.
        restrict_mode(&path, FILE_MODE)
    }

    /// Deletes a session's record; a record that is not there is not an error.
    pub fn remove(&self, session_id: &str) -> Result<(), StoreError> {
        let path = self.path_of(session_id)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(StoreError::io(&path, "remove", err)),
        }
        // The removal is durable only once the directory entry is; a record that came back
        // after a crash would resurrect a closed session.
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|err| StoreError::io(&self.dir, "sync", err))
    }

    /// Every readable record, sorted by file name, and every file that is not one with why.
    /// A missing directory is an empty store. Nothing is deleted: a file this daemon cannot read
    /// may belong to a newer one. Hidden files (the temporary files of a save cut short) are
    /// skipped silently.
    pub fn load_all(&self) -> (Vec<SessionRecord>, Vec<(PathBuf, String)>) {
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return (records, unreadable),
            Err(err) => {
                unreadable.push((
                    self.dir.clone(),
                    format!("cannot list the directory: {err}"),
                ));
                return (records, unreadable);
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => paths.push(entry.path()),
                Err(err) => {
                    unreadable.push((self.dir.clone(), format!("cannot list an entry: {err}")))
                }
            }
        }
        paths.sort();
        for path in paths {
            let Some(name) = path.file_name().map(|name| name.to_string_lossy()) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            match load_one(&path, &name) {
                Ok(record) => records.push(record),
                Err(why) => unreadable.push((path, why)),
            }
        }
        (records, unreadable)
    }

    fn ensure_dir(&self) -> Result<(), StoreError> {
        // Directories created here (`toold` too) start private; an existing `sessions`
        // directory is narrowed below. Parents that already exist are the user's to keep.
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
            .map_err(|err| StoreError::io(&self.dir, "create directory", err))?;
        restrict_mode(&self.dir, DIR_MODE)
    }
}

/// Sets `path`'s permission bits to `mode` unless they already are.
fn restrict_mode(path: &Path, mode: u32) -> Result<(), StoreError> {
    let current = fs::metadata(path)
        .map_err(|err| StoreError::io(path, "inspect", err))?
        .permissions()
        .mode();
    if current & 0o7777 == mode {
        return Ok(());
    }
    fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(|err| StoreError::io(path, "set the permissions of", err))
}

/// Reads one `<id>.json` file; the error says what is wrong with it, for the daemon's log.
fn load_one(path: &Path, name: &str) -> Result<SessionRecord, String> {
    let Some(file_id) = name.strip_suffix(".json") else {
        return Err("not a session record: its name does not end in .json".to_owned());
    };
    if let Err(err) = validate_session_id(file_id) {
        return Err(format!("not a session record: {err}"));
    }
    // Not followed: a symlink here was not written by the store.
    let meta = fs::symlink_metadata(path).map_err(|err| format!("cannot inspect: {err}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if meta.len() > MAX_RECORD_BYTES {
        return Err(format!(
            "{} bytes, more than any session record ({MAX_RECORD_BYTES})",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(MAX_RECORD_BYTES).read_to_end(&mut bytes))
        .map_err(|err| format!("cannot read: {err}"))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("empty file".to_owned());
    }
    let mut record: SessionRecord = serde_json::from_slice(&bytes)
        .map_err(|err| format!("not a valid session record: {err}"))?;
    if record.session_id != file_id {
        return Err(format!(
            "holds session {:?}, not {file_id:?} as its name says",
            record.session_id
        ));
    }
    if !record.cwd.is_absolute() {
        return Err(format!("cwd {} is not absolute", record.cwd.display()));
    }
    if record.roots.is_empty() {
        record.roots = vec![record.cwd.clone()];
    }
    if record.created_at.is_empty() {
        record.created_at = rfc3339(meta.modified().unwrap_or(UNIX_EPOCH));
    }
    Ok(record)
}

#[cfg(test)]
mod tests;
