//! The contents of a root's files as the warm index holds them: the trigram index of every
//! listed file, read once, and the overlay of files changed since (created, written, moved
//! in), which every search reads whatever its trigrams. A query asks which files can hold a
//! match ([`Contents::selector`]); the searcher still reads each of those.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};

use toold_protocol::sync::LockUnpoisoned;

use super::files::walk_threads;
use super::plan::Query;
use super::trigrams::{FileId, Seen, TrigramIndex, TrigramIndexBuilder, distinct_trigrams};

/// A file larger than this is not read into the index: it is searched whatever the query.
const MAX_INDEXED_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// What one file's entry takes besides its path's bytes.
const ENTRY_BYTES: usize = 48;
/// The overlay is merged (the index read again, in the background) past this many changed
/// files, or a sixteenth of the files if more.
const MERGE_AFTER: usize = 256;

/// The trigram index of a root's files, and what changed since it was read.
pub struct Contents {
    trigrams: TrigramIndex,
    /// Each indexed file's number, by its path relative to the root.
    ids: HashMap<OsString, FileId>,
    /// Files changed since the index read them (relative paths).
    changed: HashSet<OsString>,
}

/// Which files a query must read.
pub struct Selector<'c> {
    contents: &'c Contents,
    /// By file number: whether the trigram index says it can hold a match.
    candidate: Vec<bool>,
}

impl Contents {
    /// Reads every file of `files` (paths relative to `root`) on the walk's threads; `None`
    /// when `stop` was set meanwhile.
    pub fn build(root: &Path, files: Vec<OsString>, stop: &AtomicBool) -> Option<Self> {
        let next = AtomicUsize::new(0);
        let (sender, receiver) = mpsc::sync_channel::<(FileId, Option<Vec<u32>>)>(256);
        let unindexed = Mutex::new(Vec::new());
        let mut builder = TrigramIndexBuilder::new();
        std::thread::scope(|scope| {
            for _ in 0..walk_threads() {
                let sender = sender.clone();
                let (files, next, unindexed) = (&files, &next, &unindexed);
                scope.spawn(move || {
                    let mut seen = Seen::default();
                    let mut buffer = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        if at >= files.len() || stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let id = FileId::try_from(at).unwrap_or(FileId::MAX);
                        let keys = read(&root.join(&files[at]), &mut buffer)
                            .map(|contents| distinct_trigrams(contents, &mut seen).ok());
                        match keys {
                            Some(keys) => {
                                if sender.send((id, keys)).is_err() {
                                    return;
                                }
                            }
                            // Unreadable now: left out of the index, so always searched.
                            None => unindexed.lock_unpoisoned().push(id),
                        }
                    }
                });
            }
            drop(sender);
            for (id, keys) in receiver {
                builder.insert(
                    id,
                    keys.as_deref()
                        .ok_or(super::trigrams::Unindexable::TooManyTrigrams),
                );
            }
        });
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let unindexed: HashSet<FileId> = unindexed.into_inner_unpoisoned().into_iter().collect();
        let ids = files
            .into_iter()
            .enumerate()
            .filter_map(|(at, path)| {
                let id = FileId::try_from(at).ok()?;
                (!unindexed.contains(&id)).then_some((path, id))
            })
            .collect();
        Some(Self {
            trigrams: builder.build(),
            ids,
            changed: HashSet::new(),
        })
    }

    /// Counts the file at `relative` as changed: every search reads it.
    pub fn changed(&mut self, relative: &OsStr) {
        if !self.changed.contains(relative) {
            self.changed.insert(relative.to_owned());
        }
    }

    /// Whether the overlay has grown enough to read the index again.
    pub fn needs_merge(&self) -> bool {
        self.changed.len() > MERGE_AFTER.max(self.ids.len() / 16)
    }

    pub fn memory_bytes(&self) -> usize {
        self.trigrams.memory_bytes()
            + self
                .ids
                .keys()
                .chain(self.changed.iter())
                .map(|path| ENTRY_BYTES + path.len())
                .sum::<usize>()
    }

    /// The files a search for `query` must read.
    pub fn selector(&self, query: &Query) -> Selector<'_> {
        let mut candidate = vec![false; self.trigrams.files() as usize];
        for id in self.trigrams.candidates(query) {
            if let Some(slot) = candidate.get_mut(id as usize) {
                *slot = true;
            }
        }
        Selector {
            contents: self,
            candidate,
        }
    }
}

impl Selector<'_> {
    /// Whether the file at `relative` can hold a match: it is a candidate of the trigram
    /// index, or changed since it was read, or not in the index at all (new, or unreadable
    /// when the index was read).
    pub fn may_match(&self, relative: &OsStr) -> bool {
        match self.contents.ids.get(relative) {
            None => true,
            Some(&id) => {
                self.candidate.get(id as usize).copied().unwrap_or(true)
                    || self.contents.changed.contains(relative)
            }
        }
    }
}

/// The file's bytes into `buffer` (the whole file, up to [`MAX_INDEXED_FILE_BYTES`]); `None`
/// when it cannot be read or is larger.
fn read<'b>(path: &Path, buffer: &'b mut Vec<u8>) -> Option<&'b [u8]> {
    use std::os::unix::fs::OpenOptionsExt;
    // Not blocking: a file swapped for a FIFO since it was listed must not hold the build.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    buffer.clear();
    let read = file
        .take(MAX_INDEXED_FILE_BYTES + 1)
        .read_to_end(buffer)
        .ok()?;
    (read as u64 <= MAX_INDEXED_FILE_BYTES).then_some(buffer.as_slice())
}
