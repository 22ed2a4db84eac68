//! The audit log (docs/protocol.md section 11.12): every call's decision and outcome, who decided,
//! and every session change, one JSON object a line in `$XDG_STATE_HOME/toold/audit.jsonl`,
//! each line carrying the SHA-256 of the one before it (`prev`) and its record number (`seq`).
//!
//! Recording is cheap and never waits on the disk: a record is rendered where it happens and
//! queued (bounded: past [`MAX_QUEUED_BYTES`] records are counted as lost, never silently
//! dropped). Whoever needs the records on disk (a batch's response, a session change's
//! answer, the background flush) writes everything queued in one `write(2)`, so concurrent
//! batches share their appends; a response is sent only once its records are written, so a
//! client that saw a result can find it in the log. A failing disk fails the write, not the
//! calls: the records are counted as lost and the daemon says so (its log, `toold status`).
//!
//! The daemon reports its chain's head (the last record it wrote) so that `toold audit
//! verify` can tell a file that ends early, and before each write it checks that the path
//! still names the file it appends to, reopening it (with a `log_replaced` record) when
//! another program replaced, removed or moved it.
//!
//! - [`file`]: the file itself: opening, the torn last line a kill left, the chain, rotation.
//! - [`record`]: what a record holds, and arguments digested.
//! - [`read`]: reading the files back, `toold audit` and `toold audit verify`.

mod file;
pub mod read;

pub use file::seal_path;

pub mod record;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{AuditHead, AuditReplaced, AuditStatus};

pub(crate) use record::{CallDecided, CallRecord, DecisionRecord, SessionChange};

/// How much recorded-but-unwritten text the queue holds before records are lost: far more
/// than any burst of calls renders between two writes; reached only while the disk fails.
pub(crate) const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;

/// How long a record no answer waits for (a call finished early in a long batch, a grant, a
/// session change) may stay queued before [`flush_in_background`] writes it.
pub(crate) const FLUSH_WITHIN: std::time::Duration = std::time::Duration::from_millis(100);

/// `audit` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuditMode {
    /// Every argument whole.
    Full,
    /// String values over [`record::DIGEST_OVER_BYTES`] as `{sha256, bytes}`.
    #[default]
    Digest,
    /// No log.
    Off,
}

impl AuditMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuditMode::Full => "full",
            AuditMode::Digest => "digest",
            AuditMode::Off => "off",
        }
    }
}

/// The config's audit keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    pub mode: AuditMode,
    /// The size at which `audit.jsonl` is rotated.
    pub max_bytes: u64,
    /// How many rotated files are kept (`audit.jsonl.1` … `.N`).
    pub keep: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            mode: AuditMode::Digest,
            max_bytes: 64 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// Where the log is: `$XDG_STATE_HOME/toold/audit.jsonl`.
pub fn default_path() -> Option<PathBuf> {
    crate::paths::toold_state_dir().map(|dir| dir.join("audit.jsonl"))
}

/// The daemon's audit log: a handle every part that records shares.
pub struct AuditLog {
    mode: AuditMode,
    path: Option<PathBuf>,
    queue: Mutex<Queue>,
    /// The open file; `None` when the log is off or could not be opened. Held while writing,
    /// which orders the appends.
    file: Mutex<Option<file::AuditFile>>,
    written: AtomicU64,
    lost: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// The last record written: kept apart from the file so that a status never waits on a
    /// write.
    head: Mutex<Option<AuditHead>>,
    /// The last time the path was found no longer naming the open file.
    replaced: Mutex<Option<AuditReplaced>>,
    /// Told when the queue stops being empty: what wakes [`flush_in_background`], so that an
    /// idle daemon is not woken to find nothing to write.
    queued: Arc<Notify>,
    /// Records lost since the last write that succeeded: the next write starts with a
    /// `records_lost` record saying so, so that the file itself shows the gap.
    gap: Mutex<Option<Gap>>,
}

/// Records lost in a row: how many, since when, and the last reason.
#[derive(Debug, Clone)]
struct Gap {
    count: u64,
    since: String,
    why: String,
}

impl Gap {
    /// The `records_lost` record: `{"kind":"records_lost","ts","count","since","why"}`.
    fn render(&self) -> String {
        serde_json::json!({
            "kind": "records_lost",
            "ts": record::now(),
            "count": self.count,
            "since": self.since,
            "why": self.why,
        })
        .to_string()
    }
}

#[derive(Default)]
struct Queue {
    /// Rendered records without `seq` and `prev`, in the order they happened.
    records: Vec<String>,
    bytes: usize,
}

impl AuditLog {
    /// A log that records nothing (`audit = "off"`, and tests of other parts).
    pub(crate) fn off() -> Self {
        Self::with_file(AuditMode::Off, None, None)
    }

    /// Opens (or creates, mode 0600) the log at `path`, covering a torn last line a kill left
    /// with a `recovered` record. A log that cannot be opened is reported, and calls go on
    /// unrecorded (counted as lost).
    pub(crate) fn open(path: &Path, config: &AuditConfig) -> Self {
        if config.mode == AuditMode::Off {
            return Self::off();
        }
        match file::AuditFile::open(path, config.max_bytes, config.keep) {
            Ok((file, recovered)) => {
                if let Some(torn) = recovered {
                    tracing::warn!(
                        torn_bytes = torn,
                        path = %path.display(),
                        "the audit log ended in a torn line (the daemon was killed mid-write); \
                         it is kept and covered by a `recovered` record"
                    );
                }
                Self::with_file(config.mode, Some(path.to_owned()), Some(file))
            }
            Err(err) => {
                tracing::error!(%err, path = %path.display(), "cannot open the audit log: calls go on, unrecorded");
                let log = Self::with_file(config.mode, Some(path.to_owned()), None);
                *log.last_error.lock_unpoisoned() = Some(format!("cannot open the log: {err}"));
                log
            }
        }
    }

    fn with_file(mode: AuditMode, path: Option<PathBuf>, file: Option<file::AuditFile>) -> Self {
        let head = file.as_ref().and_then(file::AuditFile::head);
        Self {
            mode,
            path,
            queue: Mutex::new(Queue::default()),
            head: Mutex::new(head),
            replaced: Mutex::new(None),
            file: Mutex::new(file),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            last_error: Mutex::new(None),
            queued: Arc::new(Notify::new()),
            gap: Mutex::new(None),
        }
    }

    pub(crate) fn mode(&self) -> AuditMode {
        self.mode
    }

    pub(crate) fn is_on(&self) -> bool {
        self.mode != AuditMode::Off
    }

    /// Queues a call's record.
    pub(crate) fn call(&self, record: &CallRecord) {
        if self.is_on() {
            self.queue_rendered(record::render_body(record));
        }
    }

    /// Writes a call's decision before the call runs: queued with whatever else is queued,
    /// and on disk when this returns (or counted as lost).
    pub(crate) fn decided(&self, record: &CallDecided<'_>) {
        if self.is_on() {
            self.queue_rendered(record::render_body(record));
            self.flush();
        }
    }

    /// Queues a session change's record.
    pub(crate) fn session(&self, change: &SessionChange) {
        if self.is_on() {
            self.queue_rendered(record::render_body(change));
        }
    }

    fn queue_rendered(&self, body: Result<String, serde_json::Error>) {
        let body = match body {
            Ok(body) => body,
            Err(err) => {
                self.lose(1, format!("a record could not be rendered: {err}"));
                return;
            }
        };
        let mut queue = self.queue.lock_unpoisoned();
        if queue.bytes + body.len() > MAX_QUEUED_BYTES {
            drop(queue);
            self.lose(1, "the queue of records to write is full".to_owned());
            return;
        }
        queue.bytes += body.len();
        queue.records.push(body);
        if queue.records.len() == 1 {
            self.queued.notify_one();
        }
    }

    /// Writes every record queued so far, in one append. Returns when they are written (or
    /// counted as lost): what a response waits for before it is sent.
    pub(crate) fn flush(&self) {
        if !self.is_on() {
            return;
        }
        // The file's lock first: records queued before this call are written by it or by the
        // flush holding the lock now, in queue order.
        let mut file = self.file.lock_unpoisoned();
        let records = {
            let mut queue = self.queue.lock_unpoisoned();
            queue.bytes = 0;
            std::mem::take(&mut queue.records)
        };
        if records.is_empty() {
            return;
        }
        let count = records.len() as u64;
        match file.as_mut() {
            Some(open) => {
                let reopened = open.reopen_if_replaced();
                *self.head.lock_unpoisoned() = open.head();
                match reopened {
                    Ok(Some(replaced)) => self.note_replaced(replaced),
                    Ok(None) => {}
                    Err(err) => {
                        drop(file);
                        self.lose(
                            count,
                            format!(
                                "the audit log's path no longer names the file being written, \
                                 and cannot be reopened: {err}"
                            ),
                        );
                        return;
                    }
                }
                // Records lost before these are said first, in the same append.
                let gap = self.gap.lock_unpoisoned().take();
                let mut records = records;
                if let Some(gap) = &gap {
                    records.insert(0, gap.render());
                }
                let appended = open.append(&records);
                *self.head.lock_unpoisoned() = open.head();
                match appended {
                    Ok(()) => {
                        let gap_record = u64::from(gap.is_some());
                        self.written
                            .fetch_add(count + gap_record, Ordering::Relaxed);
                    }
                    Err(err) => {
                        drop(file);
                        *self.gap.lock_unpoisoned() = gap;
                        self.lose(count, format!("cannot write the audit log: {err}"));
                    }
                }
            }
            None => {
                drop(file);
                self.lose(count, "the audit log is not open".to_owned());
            }
        }
    }

    /// A `log_replaced` record written: counted, logged, and kept for the status.
    fn note_replaced(&self, replaced: file::Replaced) {
        self.written.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            found = replaced.found,
            ends_with_last_record = replaced.ends_with_last_record,
            seq = replaced.seq,
            path = ?self.path,
            "the audit log's path no longer named the file being written (another program \
             replaced, removed or moved it): reopened, with a `log_replaced` record"
        );
        let mut last = self.replaced.lock_unpoisoned();
        let count = last.as_ref().map_or(0, |last| last.count) + 1;
        *last = Some(AuditReplaced {
            count,
            ts: replaced.ts,
            found: replaced.found.to_owned(),
            ends_with_last_record: replaced.ends_with_last_record,
            seq: replaced.seq,
        });
    }

    fn lose(&self, count: u64, why: String) {
        let lost = self.lost.fetch_add(count, Ordering::Relaxed) + count;
        tracing::error!(lost_now = count, lost_in_all = lost, %why, "audit records lost");
        {
            let mut gap = self.gap.lock_unpoisoned();
            let gap = gap.get_or_insert_with(|| Gap {
                count: 0,
                since: record::now(),
                why: String::new(),
            });
            gap.count += count;
            gap.why.clone_from(&why);
        }
        *self.last_error.lock_unpoisoned() = Some(why);
    }

    /// At the daemon's stop: everything queued written, and the head sealed
    /// ([`file::AuditFile::seal`]).
    pub(crate) fn seal_at_stop(&self) {
        self.flush();
        if let Some(file) = self.file.lock_unpoisoned().as_ref() {
            file.seal("stop");
        }
    }

    /// The log's state as `initialize` reports it (and `toold status` shows it).
    pub(crate) fn status(&self) -> AuditStatus {
        AuditStatus {
            mode: self.mode.as_str().to_owned(),
            path: self.path.as_ref().map(|path| path.display().to_string()),
            written: self.written.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            last_error: self.last_error.lock_unpoisoned().clone(),
            head: self.head.lock_unpoisoned().clone(),
            replaced: self.replaced.lock_unpoisoned().clone(),
        }
    }
}

impl Drop for AuditLog {
    /// Wakes [`flush_in_background`] to find the log gone, and end.
    fn drop(&mut self) {
        self.queued.notify_one();
    }
}

/// Writes the records no answer waits for within [`FLUSH_WITHIN`] of the first of them, for as
/// long as `log` lives. Woken only by a record queued into an empty queue: an idle daemon sleeps.
pub(crate) async fn flush_in_background(log: Weak<AuditLog>) {
    let Some(queued) = log.upgrade().map(|log| Arc::clone(&log.queued)) else {
        return;
    };
    loop {
        queued.notified().await;
        // Records queued meanwhile go out with this one, in the same append.
        tokio::time::sleep(FLUSH_WITHIN).await;
        let Some(log) = log.upgrade() else {
            return;
        };
        log.flush();
    }
}

#[cfg(test)]
mod tests;
