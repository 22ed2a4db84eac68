//! A root watched by inotify, for the warm index's sync barrier: what changed under the root
//! since the last barrier, so that no answer is given from a stale index.
//!
//! The walker adds a watch on each directory *before* it reads it ([`RootWatch::watch_dir`]):
//! a file created in a new directory before that directory's watch exists is then either seen
//! by the read or reported by the watch, never missed. [`RootWatch::barrier`] drains every
//! pending event without blocking (an idle tree costs one `read(2)` that finds nothing) and
//! says which directories changed, or that the index must be rebuilt: the kernel's queue
//! overflowed, the root itself went (deleted, moved, replaced), or a directory's watch could
//! not be added (the watch limit).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

/// What a directory's watch reports: entries created, deleted, moved, their metadata and
/// contents changed (ignore files, and the contents the trigram index holds), and the
/// directory itself going.
fn watched_events() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::ATTRIB
        | WatchFlags::MODIFY
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::DONT_FOLLOW
        | WatchFlags::ONLYDIR
}

/// What a barrier found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Changes {
    /// Directories whose entries (or entries' contents) changed, and the changed paths.
    pub paths: BTreeSet<PathBuf>,
    /// Why the index cannot be brought up to date from events alone, if it cannot.
    pub rebuild: Option<Rebuild>,
}

impl Changes {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.rebuild.is_none()
    }
}

/// Why the index of a root must be rebuilt from a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rebuild {
    /// The kernel dropped events (`IN_Q_OVERFLOW`).
    Overflow,
    /// The root was deleted, moved or replaced.
    RootGone,
    /// A directory could not be watched (the watch limit, most often): changes under it
    /// would go unseen.
    Unwatched,
}

/// One root's inotify instance and its watches.
pub(crate) struct RootWatch {
    root: PathBuf,
    fd: OwnedFd,
    /// Watch descriptor → the directory it watches...
    dirs: HashMap<i32, PathBuf>,
    /// ...and back.
    descriptors: HashMap<PathBuf, i32>,
    /// The most directories watched; past it a directory counts as one that cannot be
    /// watched, as at the kernel's own limit.
    max_watches: usize,
    /// A directory that could not be watched since the last barrier.
    unwatched: bool,
    buffer: Vec<MaybeUninit<u8>>,
}

impl RootWatch {
    /// An instance for `root`, watching nothing yet, that watches at most `max_watches`
    /// directories.
    pub(crate) fn new(root: &Path, max_watches: usize) -> io::Result<Self> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        Ok(Self {
            root: root.to_owned(),
            fd,
            dirs: HashMap::new(),
            descriptors: HashMap::new(),
            max_watches,
            unwatched: false,
            buffer: vec![MaybeUninit::uninit(); 64 * 1024],
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    #[cfg(test)]
    /// How many directories are watched.
    pub(crate) fn watched(&self) -> usize {
        self.dirs.len()
    }

    /// Watches `dir` (to be called before it is read). A directory past the watch limit
    /// makes the next barrier ask for a rebuild; one that is gone or cannot be read does not
    /// (its parent's watch reports its going, or the change that makes it readable). The
    /// error is returned either way.
    pub(crate) fn watch_dir(&mut self, dir: &Path) -> io::Result<()> {
        if self.dirs.len() >= self.max_watches && !self.descriptors.contains_key(dir) {
            self.unwatched = true;
            return Err(io::Error::from_raw_os_error(libc_enospc()));
        }
        match inotify::add_watch(&self.fd, dir, watched_events()) {
            Ok(wd) => {
                // The same directory (inode) watched again keeps its descriptor: the path is
                // what changes, after a move.
                if let Some(old) = self.dirs.insert(wd, dir.to_owned()) {
                    self.descriptors.remove(&old);
                }
                self.descriptors.insert(dir.to_owned(), wd);
                Ok(())
            }
            Err(err) => {
                if !matches!(
                    err,
                    rustix::io::Errno::NOENT
                        | rustix::io::Errno::ACCESS
                        | rustix::io::Errno::NOTDIR
                ) {
                    self.unwatched = true;
                }
                Err(err.into())
            }
        }
    }

    /// Whether every directory asked for is watched (none past the limit since the last
    /// barrier).
    pub(crate) fn complete(&self) -> bool {
        !self.unwatched
    }

    /// Stops watching `dir`, if it is watched.
    pub(crate) fn unwatch(&mut self, dir: &Path) {
        if let Some(wd) = self.descriptors.remove(dir) {
            self.dirs.remove(&wd);
            // A directory already gone took its watch with it.
            let _ = inotify::remove_watch(&self.fd, wd);
        }
    }

    /// Drains every event the kernel holds for this root, without waiting.
    pub(crate) fn barrier(&mut self) -> io::Result<Changes> {
        let mut changes = Changes::default();
        if std::mem::take(&mut self.unwatched) {
            changes.rebuild = Some(Rebuild::Unwatched);
        }
        let mut reader = inotify::Reader::new(&self.fd, &mut self.buffer);
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(err.into()),
            };
            let flags = event.events();
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                changes.rebuild = Some(Rebuild::Overflow);
                continue;
            }
            let Some(dir) = self.dirs.get(&event.wd()) else {
                continue;
            };
            let gone = flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF);
            if gone && *dir == self.root {
                changes.rebuild = Some(Rebuild::RootGone);
            }
            if flags.contains(ReadFlags::IGNORED) {
                // The watch is gone (its directory deleted, or unmounted).
                if let Some(dir) = self.dirs.remove(&event.wd()) {
                    self.descriptors.remove(&dir);
                }
                continue;
            }
            match event.file_name() {
                Some(name) if !name.to_bytes().is_empty() => {
                    changes
                        .paths
                        .insert(dir.join(OsStr::from_bytes(name.to_bytes())));
                }
                _ => {
                    changes.paths.insert(dir.clone());
                }
            }
        }
        Ok(changes)
    }
}

/// `ENOSPC`, what the kernel answers past its watch limit.
fn libc_enospc() -> i32 {
    rustix::io::Errno::NOSPC.raw_os_error()
}

#[cfg(test)]
mod tests;
