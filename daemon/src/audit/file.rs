//! The audit log's file: opened (or created, mode 0600) with the chain picked up where the
//! last line left it, a torn last line covered, lines appended with their `seq` and `prev`,
//! rotation to `audit.jsonl.1` … `.N` with the chain carried across, and the file reopened
//! when the path no longer names it (replaced, removed or moved by another program).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::record::{self, hex};

/// `prev` of the very first line of a log.
pub(super) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How much of a file's end is read at a time when looking for its last line.
const TAIL_CHUNK: u64 = 64 * 1024;

pub(super) struct AuditFile {
    path: PathBuf,
    file: File,
    /// The open file's (device, inode): what the path must still name for appends to reach
    /// the file a reader opens.
    identity: (u64, u64),
    size: u64,
    /// SHA-256 of the last line written (its bytes without the newline), as hex.
    last_hash: String,
    next_seq: u64,
    max_bytes: u64,
    keep: usize,
    /// A rotation renamed the file but could not open its successor: appends go on into the
    /// renamed one (nothing is lost, the chain holds) until a new file can be opened.
    reopen: bool,
}

impl AuditFile {
    /// Opens the log at `path`; the number of torn bytes covered, when the last line was torn.
    pub(super) fn open(
        path: &Path,
        max_bytes: u64,
        keep: usize,
    ) -> io::Result<(Self, Option<u64>)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = open_for_append(path)?;
        let metadata = file.metadata()?;
        let size = metadata.len();
        let tail = last_line(&mut file, size)?;
        // The chain goes on from the last whole line: this file's, or (a file just rotated,
        // or torn in its first line) the newest rotated file's.
        let chained = match &tail.complete {
            Some(line) => Some(line.clone()),
            None => match File::open(rotated(path, 1)) {
                Ok(mut previous) => {
                    let size = previous.metadata()?.len();
                    last_line(&mut previous, size)?.complete
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => None,
                Err(err) => return Err(err),
            },
        };
        let mut log = Self {
            path: path.to_owned(),
            file,
            identity: (metadata.dev(), metadata.ino()),
            size,
            last_hash: GENESIS.to_owned(),
            next_seq: 1,
            max_bytes,
            keep,
            reopen: false,
        };
        if let Some(line) = &chained {
            log.last_hash = record::sha256_hex(line);
            log.next_seq = seq_of(line).map_or(1, |seq| seq + 1);
        }
        let recovered = log.recover(tail.torn)?;
        log.check_seal()?;
        log.seal("start");
        Ok((log, recovered))
    }

    /// Covers a torn last line (a kill in the middle of an append) with a `recovered` record.
    fn recover(&mut self, torn: Option<Vec<u8>>) -> io::Result<Option<u64>> {
        let Some(torn) = torn else {
            return Ok(None);
        };
        // The torn bytes stay; a newline ends them, and a `recovered` record covers them: its
        // `prev` is their hash, its `covers` the hash of the last whole line before them. One
        // write: a kill cannot leave the newline without the record.
        let recovered = serde_json::json!({
            "kind": "recovered",
            "ts": record::now(),
            "torn_bytes": torn.len(),
            "covers": self.last_hash,
        });
        let body = serde_json::to_string(&recovered).map_err(io::Error::other)?;
        self.last_hash = record::sha256_hex(&torn);
        self.append_after(b"\n", &[body])?;
        Ok(Some(torn.len() as u64))
    }

    /// At the open: whether the log still holds the record the daemon sealed last (when it
    /// stopped, rotated or started). When it does not (its newest records were cut, or
    /// rewritten, while no daemon ran), a `seal_broken` record says so, chained from what the
    /// log ends with now, and the daemon logs it: `verify` reports the break there.
    fn check_seal(&mut self) -> io::Result<()> {
        let Some(seal) = read_seal(&self.path) else {
            return Ok(());
        };
        let holds = self.next_seq > seal.seq
            && (self.next_seq - 1 == seal.seq && self.last_hash == seal.hash
                || record_hash(&self.path, seal.seq).as_deref() == Some(seal.hash.as_str()));
        if holds {
            return Ok(());
        }
        let last = self.next_seq.saturating_sub(1);
        tracing::error!(
            sealed_seq = seal.seq,
            sealed_at = %seal.at,
            last_seq = last,
            path = %self.path.display(),
            "the audit log does not hold the record sealed when the daemon last started, rotated \
             or stopped: its newest records were cut or rewritten while no daemon ran"
        );
        let body = serde_json::json!({
            "kind": "seal_broken",
            "ts": record::now(),
            "sealed": seal,
            "last_seq": last,
        });
        let body = serde_json::to_string(&body).map_err(io::Error::other)?;
        self.append(&[body])
    }

    /// Writes the seal of the log's head now (`at`: `start`, `rotation` or `stop`): to a
    /// temporary file renamed over `audit.jsonl.head`, so that a reader finds the old seal or
    /// the new one whole; and to the daemon's log (the journal, under systemd), where a
    /// program of the same user cannot change it afterwards. A seal that cannot be written is
    /// logged and the log goes on.
    pub(super) fn seal(&self, at: &str) {
        let Some(head) = self.head() else {
            return;
        };
        let seal = Seal {
            seq: head.seq,
            hash: head.hash,
            ts: record::now(),
            at: at.to_owned(),
        };
        tracing::info!(seq = seal.seq, hash = %seal.hash, at, "audit log sealed");
        let path = seal_path(&self.path);
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let written = serde_json::to_vec(&seal)
            .map_err(io::Error::other)
            .and_then(|bytes| {
                let mut file = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
                    .open(&temporary)?;
                file.write_all(&bytes)?;
                file.sync_data()?;
                std::fs::rename(&temporary, &path)
            });
        if let Err(err) = written {
            tracing::error!(%err, path = %path.display(), "cannot write the audit log's seal");
        }
    }

    /// The last record written (or found at the open), when there is one: the chain's head.
    pub(super) fn head(&self) -> Option<toold_protocol::AuditHead> {
        (self.next_seq > 1).then(|| toold_protocol::AuditHead {
            seq: self.next_seq - 1,
            hash: self.last_hash.clone(),
        })
    }

    /// Before an append: when the path no longer names the open file (another program
    /// replaced it, as `sed -i` and editors do, or removed or moved it), appends would go
    /// where no reader looks. The file at the path is opened (created when there is none)
    /// and a `log_replaced` record says what was found. One `stat` of the path.
    ///
    /// The record is chained from the daemon's own last record (its `prev`, its `seq` the
    /// next), not from whatever the file found ends with: that content is another program's,
    /// and the daemon's chain is what it can vouch for. When the file ends with the daemon's
    /// last record the link holds; otherwise `verify` breaks there, naming the replacement.
    pub(super) fn reopen_if_replaced(&mut self) -> io::Result<Option<Replaced>> {
        if self.reopen {
            // Our own rotation left the path to a file not opened yet: not a replacement.
            return Ok(None);
        }
        let found = match std::fs::symlink_metadata(&self.path) {
            Ok(metadata) if (metadata.dev(), metadata.ino()) == self.identity => return Ok(None),
            Ok(_) => "another_file",
            Err(err) if err.kind() == io::ErrorKind::NotFound => "no_file",
            // The path cannot be looked at (its directory's permissions changed): appends go
            // on into the file held, the only one known to be the log.
            Err(_) => return Ok(None),
        };
        let mut file = open_for_append(&self.path)?;
        let metadata = file.metadata()?;
        let size = metadata.len();
        let tail = last_line(&mut file, size)?;
        let last_line = tail.complete.as_deref().map(record::sha256_hex);
        let ends_with_last_record = tail.torn.is_none()
            && match &last_line {
                Some(hash) => *hash == self.last_hash,
                None => self.next_seq == 1,
            };
        let ts = record::now();
        let body = serde_json::json!({
            "kind": "log_replaced",
            "ts": ts,
            "found": found,
            "ends_with_last_record": ends_with_last_record,
            "last_line": tail.torn.as_deref().map(record::sha256_hex).or(last_line),
        });
        let body = serde_json::to_string(&body).map_err(io::Error::other)?;
        let seq = self.next_seq;
        // The old file is kept until the record is written: a failed write leaves it held,
        // so the next write finds the replacement again and says so then.
        let identity = (metadata.dev(), metadata.ino());
        let old_file = std::mem::replace(&mut self.file, file);
        let old_identity = std::mem::replace(&mut self.identity, identity);
        let old_size = std::mem::replace(&mut self.size, size);
        // A file found ending without a newline gets one first, so that the record is a line
        // of its own (the torn bytes stay, before it).
        let prefix: &[u8] = if tail.torn.is_some() { b"\n" } else { b"" };
        if let Err(err) = self.append_after(prefix, &[body]) {
            if self.identity == identity && !self.reopen {
                // (Unless a rotation came first: the file found is then `.1`, the log a new
                // file.)
                self.file = old_file;
                self.identity = old_identity;
                self.size = old_size;
            }
            return Err(err);
        }
        Ok(Some(Replaced {
            found,
            ends_with_last_record,
            seq,
            ts,
        }))
    }

    /// Appends `bodies` (rendered records without `seq` and `prev`) as lines, in one write,
    /// rotating first when they would take the file past its size. On a failed write the file
    /// is cut back to where it was, so that the chain on disk stays whole.
    pub(super) fn append(&mut self, bodies: &[String]) -> io::Result<()> {
        self.append_after(b"", bodies)
    }

    /// [`Self::append`], with `prefix` written first in the same write.
    fn append_after(&mut self, prefix: &[u8], bodies: &[String]) -> io::Result<()> {
        let mut chunk = Vec::with_capacity(
            prefix.len() + bodies.iter().map(|body| body.len() + 100).sum::<usize>(),
        );
        chunk.extend_from_slice(prefix);
        let mut hash = None;
        let mut seq = self.next_seq;
        for body in bodies {
            let start = chunk.len();
            let inner = body
                .strip_prefix('{')
                .and_then(|body| body.strip_suffix('}'))
                .unwrap_or(body);
            let prev = hash.as_ref().unwrap_or(&self.last_hash);
            // Writing into a `Vec` cannot fail.
            let _ = write!(chunk, "{{\"seq\":{seq},{inner},\"prev\":\"{prev}\"}}");
            hash = Some(hex(&Sha256::digest(&chunk[start..])));
            chunk.push(b'\n');
            seq += 1;
        }
        if self.reopen {
            self.open_successor();
        } else if self.size > 0 && self.size + chunk.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        if let Err(err) = self.file.write_all(&chunk) {
            let _ = self.file.set_len(self.size);
            return Err(err);
        }
        self.size += chunk.len() as u64;
        if let Some(hash) = hash {
            self.last_hash = hash;
        }
        self.next_seq = seq;
        Ok(())
    }

    /// `audit.jsonl` becomes `audit.jsonl.1` and each `.N` becomes `.N+1`; every file at or
    /// past `keep` (once shifted) is removed, whatever `keep` was when it was made.
    fn rotate(&mut self) -> io::Result<()> {
        for n in rotated_numbers(&self.path) {
            if n >= self.keep {
                remove_if_there(&rotated(&self.path, n))?;
            }
        }
        for n in (1..self.keep).rev() {
            match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        self.reopen = true;
        self.open_successor();
        self.seal("rotation");
        Ok(())
    }

    /// After a rotation: the new `audit.jsonl`. Until it can be opened, appends go on into
    /// the rotated file the handle still holds.
    fn open_successor(&mut self) {
        match open_for_append(&self.path) {
            Ok(file) => {
                if let Ok(metadata) = file.metadata() {
                    self.identity = (metadata.dev(), metadata.ino());
                }
                self.file = file;
                self.size = 0;
                self.reopen = false;
            }
            Err(err) => tracing::error!(
                %err,
                path = %self.path.display(),
                "cannot start a new audit log after rotating; appending to the rotated one"
            ),
        }
    }
}

/// What [`AuditFile::reopen_if_replaced`] found, and the record that says so.
pub(super) struct Replaced {
    /// `another_file` or `no_file`.
    pub(super) found: &'static str,
    pub(super) ends_with_last_record: bool,
    /// The `log_replaced` record's.
    pub(super) seq: u64,
    pub(super) ts: String,
}

fn remove_if_there(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// The numbers `N` of the rotated files `audit.jsonl.N` next to `path`, gaps included (a
/// daemon killed in the middle of a rotation leaves one), largest first.
pub(super) fn rotated_numbers(path: &Path) -> Vec<usize> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let prefix = format!(
        "{}.",
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut numbers: Vec<usize> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let number = name.to_str()?.strip_prefix(&prefix)?;
            number
                .bytes()
                .all(|byte| byte.is_ascii_digit())
                .then(|| number.parse().ok())?
        })
        .filter(|&n| n > 0)
        .collect();
    numbers.sort_unstable_by(|a, b| b.cmp(a));
    numbers
}

/// `audit.jsonl.N`.
pub(super) fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Where the log's seal is: `audit.jsonl.head`, beside it.
pub fn seal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".head");
    PathBuf::from(name)
}

/// The head the daemon last sealed: the record the log held last when the daemon started,
/// rotated it or stopped, kept outside the log so that cutting the log's newest records, or
/// rewriting them, while the daemon is stopped shows at its next start and in `verify`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Seal {
    pub seq: u64,
    pub hash: String,
    pub ts: String,
    /// `start`, `rotation` or `stop`.
    pub at: String,
}

/// The seal of the log at `path`, when there is one that can be read.
pub(crate) fn read_seal(path: &Path) -> Option<Seal> {
    let text = std::fs::read(seal_path(path)).ok()?;
    serde_json::from_slice(&text).ok()
}

fn open_for_append(path: &Path) -> io::Result<File> {
    // Never through a symlink, and only a regular file: the log is toold's own.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    // A file made by hand (or by an older daemon) with a looser mode is tightened.
    if metadata.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// The end of a file: its last whole line, and the bytes after it when the file does not end
/// with a newline.
#[derive(Default)]
struct Tail {
    complete: Option<Vec<u8>>,
    torn: Option<Vec<u8>>,
}

/// Reads backwards from the end of `file` (of `size` bytes) to its last line.
fn last_line(file: &mut File, size: u64) -> io::Result<Tail> {
    if size == 0 {
        return Ok(Tail::default());
    }
    // The bytes from `start` to the end, extended backwards until they hold two newlines
    // (the last line is then whole between them, or after the second when the file does not
    // end with one) or the whole file.
    let mut start = size;
    let mut bytes: Vec<u8> = Vec::new();
    while start > 0 && bytes.iter().filter(|&&byte| byte == b'\n').count() < 2 {
        let from = start.saturating_sub(TAIL_CHUNK);
        let mut chunk = vec![0; (start - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut chunk)?;
        chunk.extend_from_slice(&bytes);
        bytes = chunk;
        start = from;
    }
    let mut lines: Vec<&[u8]> = bytes.split(|&byte| byte == b'\n').collect();
    // `split` gives an empty last piece after a final newline.
    let torn = match lines.pop() {
        Some(last) if !last.is_empty() => Some(last.to_vec()),
        _ => None,
    };
    let complete = lines
        .pop()
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec);
    Ok(Tail { complete, torn })
}

/// A line's `seq`, when it is a record.
pub(super) fn seq_of(line: &[u8]) -> Option<u64> {
    let value: Value = serde_json::from_slice(line).ok()?;
    value.get("seq")?.as_u64()
}

/// The hash of record `seq` in the log at `path`, when it is there: looked for in the file
/// that holds it (the newest whose first record is not after it), by the `{"seq":N,` each
/// line starts with.
fn record_hash(path: &Path, seq: u64) -> Option<String> {
    let prefix = format!("{{\"seq\":{seq},");
    let mut numbers = rotated_numbers(path);
    numbers.reverse();
    let newest_first =
        std::iter::once(path.to_owned()).chain(numbers.into_iter().map(|n| rotated(path, n)));
    for file in newest_first {
        let Ok(file) = File::open(&file) else {
            continue;
        };
        let mut lines = io::BufRead::split(io::BufReader::new(file), b'\n').map_while(Result::ok);
        let Some(first) = lines.next() else {
            continue;
        };
        let first_seq = seq_of(&first);
        if first_seq.is_some_and(|first| first > seq) {
            continue;
        }
        let found = std::iter::once(first)
            .chain(lines)
            .find(|line| line.starts_with(prefix.as_bytes()));
        match found {
            Some(line) => return Some(record::sha256_hex(&line)),
            // A file that starts before the record and does not hold it: nothing older does.
            None if first_seq.is_some() => return None,
            // A file torn in its first line (a rotation a kill cut short): the older ones.
            None => {}
        }
    }
    None
}
