//! The journal of writes in flight: where `write_file`'s temporary files are, so that a daemon
//! killed mid-write (SIGKILL, a crash) has its stray temporaries removed at the next start.
//!
//! Each temporary file's path is appended (one `write(2)` on an `O_APPEND` file) before the file
//! is created, and the journal is emptied whenever no write is in flight, so it stays a few
//! lines long. A process crash keeps what was appended (it is in the kernel already); an OS
//! crash may lose the last lines, and with them only the cleanup of those files. Without a
//! journal (tests and benchmarks that run tools in process) nothing is recorded.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// The prefix of every temporary file a write creates; recovery removes only such names.
pub const TEMP_PREFIX: &str = ".toold-write-";

struct Journal {
    file: File,
    in_flight: usize,
}

static JOURNAL: OnceLock<Mutex<Journal>> = OnceLock::new();

/// Removes the temporary files a killed daemon left (as its journal lists them), empties the
/// journal, and records the writes of this process in it from now on. Returns how many stray
/// files were removed. Called once, at start, before any call runs.
pub fn recover_and_open(path: &Path) -> io::Result<usize> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut removed = 0;
    if let Ok(listed) = std::fs::read_to_string(path) {
        for line in listed.lines() {
            let stray = PathBuf::from(line);
            let ours = stray
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with(TEMP_PREFIX));
            // `remove_file` removes a symlink itself, never what it points to.
            if ours && std::fs::remove_file(&stray).is_ok() {
                removed += 1;
            }
        }
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_len(0)?;
    // A second call (tests) keeps the first journal.
    let _ = JOURNAL.set(Mutex::new(Journal { file, in_flight: 0 }));
    Ok(removed)
}

/// A write in flight, recorded in the journal (when there is one) until dropped.
pub struct InFlight {
    recorded: bool,
}

/// Records that a temporary file is about to be created at `temp`.
pub fn begin(temp: &Path) -> InFlight {
    let Some(journal) = JOURNAL.get() else {
        return InFlight { recorded: false };
    };
    let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
    let mut line = temp.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    if let Err(err) = journal.file.write_all(&line) {
        // The write goes on; only its cleanup after a crash is lost.
        tracing::warn!(%err, "cannot record a write in the journal");
    }
    journal.in_flight += 1;
    InFlight { recorded: true }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(journal) = JOURNAL.get().filter(|_| self.recorded) else {
            return;
        };
        let mut journal = journal.lock().unwrap_or_else(PoisonError::into_inner);
        journal.in_flight -= 1;
        if journal.in_flight == 0 {
            // Nothing in flight: nothing to clean up after a crash.
            let _ = journal.file.set_len(0);
        }
    }
}
