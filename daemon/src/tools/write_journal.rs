//! The journal of writes in flight: where `write_file`'s temporary files are, so that a daemon
//! killed mid-write (SIGKILL, a crash) has its stray temporaries removed at the next start.
//!
//! Each temporary file's path is appended (one `write(2)` on an `O_APPEND` file, NUL-terminated:
//! a path may hold newlines and need not be UTF-8) before the file is created, and the journal
//! is emptied whenever no write is in flight, so it stays short. A process crash keeps what was
//! appended (it is in the kernel already); an OS crash may lose the last entries, and with them
//! only the cleanup of those files. The journal is locked (`flock`) for the daemon's lifetime:
//! a second daemon with the same state directory neither cleans up after a live one nor
//! journals its own writes. Without a journal (tests and benchmarks that run tools in process)
//! nothing is recorded.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use toold_protocol::sync::LockUnpoisoned;

/// The prefix of every temporary file a write creates; recovery removes only such names.
pub(crate) const TEMP_PREFIX: &str = ".toold-write-";

struct Journal {
    file: Flock<File>,
    in_flight: usize,
}

static JOURNAL: OnceLock<Mutex<Journal>> = OnceLock::new();

/// Takes the journal at `path` for this process: `None` when another live daemon holds it.
fn lock(path: &Path) -> io::Result<Option<Flock<File>>> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(Some(locked)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, err)) => Err(err.into()),
    }
}

/// Removes the temporary files the journal lists (a killed daemon's), then empties it.
fn clean_up(journal: &mut Flock<File>) -> io::Result<usize> {
    let mut listed = Vec::new();
    journal.seek(SeekFrom::Start(0))?;
    journal.read_to_end(&mut listed)?;
    let mut removed = 0;
    for entry in listed
        .split(|byte| *byte == 0)
        .filter(|entry| !entry.is_empty())
    {
        let stray = Path::new(OsStr::from_bytes(entry));
        let ours = stray
            .file_name()
            .is_some_and(|name| name.as_bytes().starts_with(TEMP_PREFIX.as_bytes()));
        // `remove_file` removes a symlink itself, never what it points to.
        if ours && stray.is_absolute() && std::fs::remove_file(stray).is_ok() {
            removed += 1;
        }
    }
    journal.set_len(0)?;
    Ok(removed)
}

/// Removes the temporary files a killed daemon left (as its journal lists them), empties the
/// journal, and records the writes of this process in it from now on. Returns how many stray
/// files were removed, or `None` when another live daemon holds the journal (then nothing is
/// removed and this process journals nothing). Called once, at start, before any call runs.
pub(crate) fn recover_and_open(path: &Path) -> io::Result<Option<usize>> {
    let Some(mut journal) = lock(path)? else {
        return Ok(None);
    };
    let removed = clean_up(&mut journal)?;
    // A second call (tests) keeps the first journal.
    let _ = JOURNAL.set(Mutex::new(Journal {
        file: journal,
        in_flight: 0,
    }));
    Ok(Some(removed))
}

/// A write in flight, recorded in the journal (when there is one) until dropped.
pub(crate) struct InFlight {
    recorded: bool,
}

/// Records that a temporary file is about to be created at `temp`.
pub(crate) fn begin(temp: &Path) -> InFlight {
    let Some(journal) = JOURNAL.get() else {
        return InFlight { recorded: false };
    };
    let mut journal = journal.lock_unpoisoned();
    let mut line = temp.as_os_str().as_bytes().to_vec();
    line.push(0);
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
        let mut journal = journal.lock_unpoisoned();
        journal.in_flight -= 1;
        if journal.in_flight == 0 {
            // Nothing in flight: nothing to clean up after a crash.
            let _ = journal.file.set_len(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_journal_is_left_alone_and_entries_are_paths_not_lines() {
        let dir = tempfile::tempdir().unwrap();
        let journal_path = dir.path().join("state/writes-in-flight");
        let stray = dir.path().join(".toold-write-1-0");
        std::fs::create_dir(dir.path().join("a\nb")).unwrap();
        let with_newline = dir.path().join("a\nb/.toold-write-1-1");
        let not_ours = dir.path().join("notes.txt");
        for file in [&stray, &with_newline, &not_ours] {
            std::fs::write(file, "x").unwrap();
        }
        let mut held = lock(&journal_path).unwrap().expect("the first lock");
        for entry in [&stray, &with_newline, &not_ours] {
            held.write_all(entry.as_os_str().as_bytes()).unwrap();
            held.write_all(&[0]).unwrap();
        }
        // Another daemon: it must neither clean up nor truncate what the live one journals.
        assert!(lock(&journal_path).unwrap().is_none(), "locked twice");
        assert!(stray.exists());
        // The holder's own cleanup (what the next start does).
        assert_eq!(clean_up(&mut held).unwrap(), 2);
        assert!(!stray.exists() && !with_newline.exists() && not_ours.exists());
        assert_eq!(std::fs::read(&journal_path).unwrap(), b"");
    }
}
