//! The trigram index of a root's files: for each trigram, the files whose searched bytes hold
//! it, compact and immutable once built; and the candidates of a [`Query`]: the files that
//! can hold a match, which the searcher then reads.
//!
//! What is indexed of a file is what `search_code`'s searcher reads of it: its bytes up to the
//! first NUL (it abandons a file there). A file the index cannot stand for is never excluded:
//! one the searcher transcodes (a UTF-16 byte-order mark: its matches are in other bytes than
//! the file's), and one with more distinct trigrams than [`MAX_TRIGRAMS_PER_FILE`] (a
//! compressed or random file, where every query would match anyway).
//!
//! Posting lists are sorted file numbers stored as varint deltas in one byte vector, keyed by
//! a sorted table of trigrams: a few bytes a posting for the usual source tree.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::plan::{Query, Trigram};

/// Past this many distinct trigrams a file is searched whatever the query.
pub(crate) const MAX_TRIGRAMS_PER_FILE: usize = 1 << 20;

/// A file's number in the index: its position in the builder's order.
pub(crate) type FileId = u32;

/// Collects files' trigrams; [`TrigramIndexBuilder::build`] makes the index.
#[derive(Default)]
pub struct TrigramIndexBuilder {
    postings: HashMap<u32, Posting, BuildHasherDefault<KeyHasher>>,
    always: Vec<FileId>,
    files: u32,
    seen: Option<Seen>,
}

/// Why a file is searched whatever the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unindexable {
    /// The searcher transcodes it (a UTF-16 byte-order mark).
    Transcoded,
    /// More distinct trigrams than the index keeps for one file.
    TooManyTrigrams,
}

/// One trigram's files so far, already as the index stores them (varint deltas): a quarter
/// of the memory of a list of numbers while the index is built.
#[derive(Default)]
struct Posting {
    last: FileId,
    count: u32,
    bytes: Vec<u8>,
}

/// A set of trigrams as one bit each (2 MiB), cleared after each use by the trigrams it
/// holds: finding a file's distinct trigrams costs one pass, not a sort.
pub(crate) struct Seen {
    bits: Vec<u64>,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            bits: vec![0; (1 << 24) / 64],
        }
    }
}

/// What `search_code`'s searcher reads of a file's `contents` (when it does not transcode
/// them): its bytes up to the first NUL, where it abandons the file as binary.
pub fn searched_bytes(contents: &[u8]) -> &[u8] {
    match memchr::memchr(0, contents) {
        Some(nul) => &contents[..nul],
        None => contents,
    }
}

/// The distinct trigrams (as keys) of what `search_code`'s searcher reads of `contents` (see
/// [`searched_bytes`]); `Err` says why the file will be searched whatever the query.
pub(crate) fn distinct_trigrams(contents: &[u8], seen: &mut Seen) -> Result<Vec<u32>, Unindexable> {
    if contents.starts_with(&[0xFF, 0xFE]) || contents.starts_with(&[0xFE, 0xFF]) {
        return Err(Unindexable::Transcoded);
    }
    let searched = searched_bytes(contents);
    let mut keys = Vec::new();
    for window in searched.windows(3) {
        let key = key([window[0], window[1], window[2]]);
        let (word, bit) = ((key / 64) as usize, 1u64 << (key % 64));
        if seen.bits[word] & bit == 0 {
            seen.bits[word] |= bit;
            keys.push(key);
        }
    }
    for &key in &keys {
        seen.bits[(key / 64) as usize] = 0;
    }
    if keys.len() > MAX_TRIGRAMS_PER_FILE {
        return Err(Unindexable::TooManyTrigrams);
    }
    Ok(keys)
}

impl TrigramIndexBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next file (its number is the count of files added before it), from its whole
    /// contents; `Err` says why it will be searched whatever the query.
    pub fn add(&mut self, contents: &[u8]) -> Result<FileId, Unindexable> {
        let id = self.files;
        let mut seen = self.seen.take().unwrap_or_default();
        let keys = distinct_trigrams(contents, &mut seen);
        self.seen = Some(seen);
        let keys = keys.as_deref().map_err(|why| *why);
        self.insert(id, keys);
        keys.map(|_| id)
    }

    /// Adds file `id` by its distinct trigrams ([`distinct_trigrams`]). Files come in order:
    /// each `id` greater than the one before.
    pub(crate) fn insert(&mut self, id: FileId, keys: Result<&[u32], Unindexable>) {
        debug_assert!(self.files == 0 || id >= self.files, "files in order");
        self.files = self.files.max(id + 1);
        match keys {
            Ok(keys) => {
                for &key in keys {
                    let posting = self.postings.entry(key).or_default();
                    // The first file is stored whole, each next one as the step from the last.
                    let delta = if posting.count == 0 {
                        id
                    } else {
                        id - posting.last
                    };
                    write_varint(&mut posting.bytes, delta);
                    posting.last = id;
                    posting.count += 1;
                }
            }
            Err(_) => self.always.push(id),
        }
    }

    /// The immutable index.
    pub fn build(self) -> TrigramIndex {
        let mut keys: Vec<u32> = self.postings.keys().copied().collect();
        keys.sort_unstable();
        let mut table = Vec::with_capacity(keys.len());
        let mut bytes = Vec::new();
        let total: usize = self
            .postings
            .values()
            .map(|posting| posting.bytes.len())
            .sum();
        bytes.reserve_exact(total);
        let mut postings = self.postings;
        for key in keys {
            let start = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            let posting = postings.remove(&key).unwrap_or_default();
            bytes.extend_from_slice(&posting.bytes);
            table.push(Entry {
                key,
                start,
                count: posting.count,
            });
        }
        let always = self.always;
        TrigramIndex {
            table,
            bytes,
            always,
            files: self.files,
        }
    }
}

/// A trigram key is already well spread over its 24 bits: a multiply is hash enough, and far
/// cheaper than SipHash for the millions of inserts of a build.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8 | u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.0 = u64::from(value).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u32,
    start: u32,
    count: u32,
}

/// Which files hold which trigrams.
#[derive(Debug, Clone)]
pub struct TrigramIndex {
    /// Sorted by trigram.
    table: Vec<Entry>,
    /// Every posting list, varint deltas.
    bytes: Vec<u8>,
    /// Files searched whatever the query, sorted.
    always: Vec<FileId>,
    files: u32,
}

impl TrigramIndex {
    /// How many files were added.
    pub(crate) fn files(&self) -> u32 {
        self.files
    }

    /// Heap bytes the index takes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<Entry>()
            + self.bytes.capacity()
            + self.always.capacity() * std::mem::size_of::<FileId>()
    }

    /// The files that can hold a match of a query's regex, sorted: every file that satisfies
    /// the query, and every file the index cannot stand for.
    pub fn candidates(&self, query: &Query) -> Vec<FileId> {
        let found = match self.evaluate(query) {
            Set::All => return (0..self.files).collect(),
            Set::Some(found) => found,
        };
        union(&found, &self.always)
    }

    fn evaluate(&self, query: &Query) -> Set {
        match query {
            Query::All => Set::All,
            Query::Trigram(trigram) => Set::Some(self.posting(*trigram)),
            Query::And(parts) => {
                // The most selective part first: intersections only shrink.
                let mut sets: Vec<Vec<FileId>> = Vec::new();
                for part in parts {
                    if let Set::Some(set) = self.evaluate(part) {
                        if set.is_empty() {
                            return Set::Some(set);
                        }
                        sets.push(set);
                    }
                }
                sets.sort_by_key(Vec::len);
                let mut sets = sets.into_iter();
                let Some(mut result) = sets.next() else {
                    return Set::All;
                };
                for set in sets {
                    result = intersection(&result, &set);
                    if result.is_empty() {
                        break;
                    }
                }
                Set::Some(result)
            }
            Query::Or(parts) => {
                let mut result = Vec::new();
                for part in parts {
                    match self.evaluate(part) {
                        Set::All => return Set::All,
                        Set::Some(set) => result = union(&result, &set),
                    }
                }
                Set::Some(result)
            }
        }
    }

    fn posting(&self, trigram: Trigram) -> Vec<FileId> {
        let key = key(trigram);
        let Ok(at) = self.table.binary_search_by_key(&key, |entry| entry.key) else {
            return Vec::new();
        };
        let entry = self.table[at];
        let mut ids = Vec::with_capacity(entry.count as usize);
        let mut offset = entry.start as usize;
        let mut last = 0;
        for n in 0..entry.count {
            let (delta, used) = read_varint(&self.bytes[offset..]);
            offset += used;
            last = if n == 0 { delta } else { last + delta };
            ids.push(last);
        }
        ids
    }
}

/// A query's files: all of them, or these (sorted).
enum Set {
    All,
    Some(Vec<FileId>),
}

fn key(trigram: Trigram) -> u32 {
    u32::from(trigram[0]) << 16 | u32::from(trigram[1]) << 8 | u32::from(trigram[2])
}

fn write_varint(bytes: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        bytes.push((value as u8) | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}

/// The value at the start of `bytes`, and how many bytes it took.
fn read_varint(bytes: &[u8]) -> (u32, usize) {
    let mut value = 0u32;
    for (n, &byte) in bytes.iter().enumerate().take(5) {
        value |= u32::from(byte & 0x7F) << (7 * n);
        if byte & 0x80 == 0 {
            return (value, n + 1);
        }
    }
    (value, bytes.len().min(5))
}

fn intersection(left: &[FileId], right: &[FileId]) -> Vec<FileId> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(left.len().min(right.len()));
    while i < left.len() && j < right.len() {
        match left[i].cmp(&right[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(left[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

fn union(left: &[FileId], right: &[FileId]) -> Vec<FileId> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(left.len() + right.len());
    while i < left.len() || j < right.len() {
        let take_left = j == right.len() || i < left.len() && left[i] <= right[j];
        if take_left {
            if j < right.len() && left[i] == right[j] {
                j += 1;
            }
            out.push(left[i]);
            i += 1;
        } else {
            out.push(right[j]);
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;
