//! The contents of a root's files as the warm index holds them: the trigram index of every
//! listed file, read once, and the overlay of files changed since (created, written, moved
//! in), which every search reads whatever its trigrams. A query asks which files can hold a
//! match ([`Contents::selector`]); the searcher still reads each of those.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use super::files::walk_threads;
use super::plan::Query;
use super::trigrams::{
    FileId, Seen, TrigramIndex, TrigramIndexBuilder, Unindexable, distinct_trigrams,
};

/// A file larger than this is not read into the index: it is searched whatever the query.
const MAX_INDEXED_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// What one file's entry takes besides its path's bytes.
const ENTRY_BYTES: usize = 48;
/// The overlay is merged (the index read again, in the background) past this many changed
/// files, or a sixteenth of the files if more.
const MERGE_AFTER: usize = 256;

/// The trigram index of a root's files, and what changed since it was read.
pub(crate) struct Contents {
    trigrams: TrigramIndex,
    /// Each indexed file's number, by its path relative to the root.
    ids: HashMap<OsString, FileId>,
    /// Files changed since the index read them (relative paths).
    changed: HashSet<OsString>,
}

/// Which files a query must read.
pub(crate) struct Selector<'c> {
    contents: &'c Contents,
    /// By file number: whether the trigram index says it can hold a match.
    candidate: Vec<bool>,
}

impl Contents {
    /// Reads every file of `files` (paths relative to `root`) on the walk's threads; `None`
    /// when `stop` was set meanwhile.
    pub(crate) fn build(root: &Path, files: Vec<OsString>, stop: &AtomicBool) -> Option<Self> {
        let next = AtomicUsize::new(0);
        let (sender, receiver) = mpsc::sync_channel::<(FileId, Found)>(256);
        let mut builder = TrigramIndexBuilder::new();
        let mut unreadable = HashSet::new();
        std::thread::scope(|scope| {
            for _ in 0..walk_threads() {
                let sender = sender.clone();
                let (files, next) = (&files, &next);
                scope.spawn(move || {
                    let mut seen = Seen::default();
                    let mut buffer = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        if at >= files.len() || stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let id = FileId::try_from(at).unwrap_or(FileId::MAX);
                        let read = match read(&root.join(&files[at]), &mut buffer) {
                            Some(contents) => {
                                Found::Trigrams(distinct_trigrams(contents, &mut seen))
                            }
                            None => Found::Unreadable,
                        };
                        if sender.send((id, read)).is_err() {
                            return;
                        }
                    }
                });
            }
            drop(sender);
            // Readers finish out of order; the builder takes files in order, so that each
            // posting list is written as it grows.
            let mut waiting = BTreeMap::new();
            let mut expected: FileId = 0;
            for (id, read) in receiver {
                waiting.insert(id, read);
                while let Some(read) = waiting.remove(&expected) {
                    match read {
                        Found::Trigrams(keys) => {
                            builder.insert(expected, keys.as_deref().map_err(|why| *why))
                        }
                        // Left out of the index, so always searched.
                        Found::Unreadable => {
                            unreadable.insert(expected);
                        }
                    }
                    expected += 1;
                }
            }
        });
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let ids = files
            .into_iter()
            .enumerate()
            .filter_map(|(at, path)| {
                let id = FileId::try_from(at).ok()?;
                (!unreadable.contains(&id)).then_some((path, id))
            })
            .collect();
        let contents = Self {
            trigrams: builder.build(),
            ids,
            changed: HashSet::new(),
        };
        release_freed_memory();
        Some(contents)
    }

    /// Counts the file at `relative` as changed: every search reads it.
    pub(crate) fn changed(&mut self, relative: &OsStr) {
        if !self.changed.contains(relative) {
            self.changed.insert(relative.to_owned());
        }
    }

    /// Whether the overlay has grown enough to read the index again.
    pub(crate) fn needs_merge(&self) -> bool {
        self.changed.len() > MERGE_AFTER.max(self.ids.len() / 16)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.trigrams.memory_bytes()
            + self
                .ids
                .keys()
                .chain(self.changed.iter())
                .map(|path| ENTRY_BYTES + path.len())
                .sum::<usize>()
    }

    /// The files a search for `query` must read.
    pub(crate) fn selector(&self, query: &Query) -> Selector<'_> {
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
    pub(crate) fn may_match(&self, relative: &OsStr) -> bool {
        match self.contents.ids.get(relative) {
            None => true,
            Some(&id) => {
                self.candidate.get(id as usize).copied().unwrap_or(true)
                    || self.contents.changed.contains(relative)
            }
        }
    }
}

/// What a reader found of one file.
enum Found {
    Trigrams(Result<Vec<u32>, Unindexable>),
    Unreadable,
}

/// Gives the memory a build freed back to the system: the allocator would keep it, and the
/// daemon's resident size with it, long after the build.
#[allow(unsafe_code)]
fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// The file's bytes into `buffer` (the whole file, up to [`MAX_INDEXED_FILE_BYTES`]); `None`
/// when it cannot be read, is larger, or has other hard links.
fn read<'b>(path: &Path, buffer: &'b mut Vec<u8>) -> Option<&'b [u8]> {
    use std::os::unix::fs::OpenOptionsExt;
    // Not blocking: a file swapped for a FIFO since it was listed must not hold the build.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    // A file with other hard links can be written through a name outside the root, which no
    // watch of it reports: it is left out of the index, and so always read.
    if !meta.is_file() || std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return None;
    }
    buffer.clear();
    let read = file
        .take(MAX_INDEXED_FILE_BYTES + 1)
        .read_to_end(buffer)
        .ok()?;
    (read as u64 <= MAX_INDEXED_FILE_BYTES).then_some(buffer.as_slice())
}
