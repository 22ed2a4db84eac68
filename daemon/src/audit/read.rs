//! Reading the audit log back, oldest line first across its rotated files: the lines for
//! `toold audit`, and `toold audit verify`'s check of the chain, which names the first line
//! that was changed, removed or moved.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::file::{GENESIS, rotated};
use super::record::sha256_hex;

/// The most rotated files looked for: far past any `audit_keep` a person sets.
const MAX_ROTATED: usize = 10_000;

/// One line of the log and where it is.
#[derive(Debug, Clone)]
pub struct Line {
    pub file: PathBuf,
    /// 1-based.
    pub number: usize,
    pub bytes: Vec<u8>,
    /// Whether a newline ended it (the last line of a log being written, or torn, has none).
    pub ended: bool,
}

impl Line {
    /// `FILE:LINE`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file.display(), self.number)
    }
}

/// The log's files, oldest first: `audit.jsonl.N` … `.1`, then `audit.jsonl`.
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = (1..=MAX_ROTATED)
        .map(|n| rotated(path, n))
        .take_while(|file| file.exists())
        .collect();
    found.reverse();
    if path.exists() {
        found.push(path.to_owned());
    }
    found
}

/// Every line of the log, oldest first, read as it goes.
pub fn lines(path: &Path) -> impl Iterator<Item = io::Result<Line>> {
    files(path).into_iter().flat_map(|file| {
        let reader = File::open(&file).map(BufReader::new);
        let mut number = 0;
        let mut reader = Some(reader);
        std::iter::from_fn(move || {
            let reader = match reader.as_mut()? {
                Ok(reader) => reader,
                Err(_) => {
                    let Some(Err(err)) = reader.take() else {
                        return None;
                    };
                    return Some(Err(err));
                }
            };
            let mut bytes = Vec::new();
            match reader.read_until(b'\n', &mut bytes) {
                Ok(0) => None,
                Ok(_) => {
                    number += 1;
                    let ended = bytes.last() == Some(&b'\n');
                    if ended {
                        bytes.pop();
                    }
                    Some(Ok(Line {
                        file: file.clone(),
                        number,
                        bytes,
                        ended,
                    }))
                }
                Err(err) => Some(Err(err)),
            }
        })
    })
}

/// What `verify` found in a log whose chain holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub files: usize,
    pub records: u64,
    /// Torn lines a restart covered with a `recovered` record.
    pub recovered: u64,
    /// Notes that are not breaks: the chain starts after rotated-away files, the newest line
    /// is still being written.
    pub notes: Vec<String>,
}

/// Where the chain breaks, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}: {why}")]
pub struct Broken {
    /// `FILE:LINE` of the line at fault.
    pub place: String,
    pub why: String,
}

/// A line read as a record: its `seq`, `prev`, `kind` and its own hash.
struct Parsed {
    line: Line,
    seq: Option<u64>,
    prev: Option<String>,
    kind: Option<String>,
    covers: Option<String>,
    hash: String,
}

fn parse(line: Line) -> Parsed {
    let value: Option<Value> = serde_json::from_slice(&line.bytes).ok();
    let text = |name: &str| {
        value
            .as_ref()
            .and_then(|value| value.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Parsed {
        seq: value
            .as_ref()
            .and_then(|value| value.get("seq"))
            .and_then(Value::as_u64),
        prev: text("prev"),
        kind: text("kind"),
        covers: text("covers"),
        hash: sha256_hex(&line.bytes),
        line,
    }
}

/// Checks the chain over every file: each line's `prev` is the hash of the line before it,
/// its `seq` the one after the line before's, and a line that is not a record is a torn line
/// covered by the `recovered` record right after it. The first problem is named by its line.
pub fn verify(path: &Path) -> Result<Verified, Broken> {
    let files = files(path);
    let oldest_is_rotated = files.first().is_some_and(|file| file != path);
    let mut verified = Verified {
        files: files.len(),
        records: 0,
        recovered: 0,
        notes: Vec::new(),
    };
    let mut lines = lines(path).map(|line| {
        line.map(parse).map_err(|err| Broken {
            place: path.display().to_string(),
            why: format!("cannot read the log: {err}"),
        })
    });
    let mut rest: std::collections::VecDeque<Parsed> = std::collections::VecDeque::new();
    let mut next =
        |rest: &mut std::collections::VecDeque<Parsed>| -> Result<Option<Parsed>, Broken> {
            match rest.pop_front() {
                Some(parsed) => Ok(Some(parsed)),
                None => lines.next().transpose(),
            }
        };
    let Some(first) = next(&mut rest)? else {
        return Ok(verified);
    };
    if first.seq.is_none() {
        return Err(broken(
            &first.line,
            "not an audit record (not JSON, or no seq)",
        ));
    }
    if first.prev.as_deref() != Some(GENESIS) {
        if !oldest_is_rotated {
            return Err(broken(
                &first.line,
                "the first line of the log does not start the chain (its prev is not 64 zeros): \
                 lines before it were removed",
            ));
        }
        verified.notes.push(format!(
            "the chain starts at record {} ({}): older files were rotated away",
            first.seq.unwrap_or(0),
            first.line.place()
        ));
    }
    verified.records = 1;
    let mut previous = first;
    while let Some(current) = next(&mut rest)? {
        // A torn line: not a record, and the next line a `recovered` one covering it.
        if current.seq.is_none() {
            if !current.line.ended {
                verified.notes.push(format!(
                    "{}: the newest line is incomplete (being written, or the daemon was killed; \
                     its next start covers it)",
                    current.line.place()
                ));
                break;
            }
            let Some(after) = next(&mut rest)? else {
                return Err(broken(
                    &current.line,
                    "not an audit record (not JSON, or no seq)",
                ));
            };
            let covered = after.kind.as_deref() == Some("recovered")
                && after.prev.as_deref() == Some(current.hash.as_str())
                && after.covers.as_deref() == Some(previous.hash.as_str());
            if !covered {
                return Err(broken(
                    &current.line,
                    "not an audit record, and not a torn line covered by a `recovered` record",
                ));
            }
            check_seq(&previous, &after, &mut rest, &mut next)?;
            verified.recovered += 1;
            verified.records += 1;
            previous = after;
            continue;
        }
        check_seq(&previous, &current, &mut rest, &mut next)?;
        if current.prev.as_deref() != Some(previous.hash.as_str()) {
            // The link from `previous` to `current` is broken. `current` itself was changed
            // (its `prev`) when its link to the next line is broken too; otherwise `previous`
            // was changed after `current` recorded its hash.
            let following = next(&mut rest)?;
            let current_changed = following
                .as_ref()
                .is_some_and(|following| following.prev.as_deref() != Some(current.hash.as_str()));
            return Err(if current_changed {
                broken(
                    &current.line,
                    "changed: its prev is not the hash of the line before it, and the next line's \
                     prev is not its hash",
                )
            } else {
                broken(
                    &previous.line,
                    "changed: the next line's prev is not the hash of this line",
                )
            });
        }
        verified.records += 1;
        previous = current;
    }
    Ok(verified)
}

/// `current.seq` follows `previous.seq`; a gap is lines removed, unless the missing records
/// turn up later (lines moved).
fn check_seq<F>(
    previous: &Parsed,
    current: &Parsed,
    rest: &mut std::collections::VecDeque<Parsed>,
    next: &mut F,
) -> Result<(), Broken>
where
    F: FnMut(&mut std::collections::VecDeque<Parsed>) -> Result<Option<Parsed>, Broken>,
{
    let (Some(before), Some(seq)) = (previous.seq, current.seq) else {
        return Ok(());
    };
    let expected = before + 1;
    if seq == expected {
        return Ok(());
    }
    if seq < expected {
        return Err(broken(
            &current.line,
            &format!("out of order: it holds record {seq}, after record {before}"),
        ));
    }
    // Look ahead for the missing records; what is read is kept for the main walk.
    let mut ahead = Vec::new();
    let mut found = None;
    while let Some(later) = next(rest)? {
        if later
            .seq
            .is_some_and(|later_seq| (expected..seq).contains(&later_seq))
        {
            found = Some(later.line.place());
        }
        ahead.push(later);
        if found.is_some() {
            break;
        }
    }
    rest.extend(ahead);
    Err(match found {
        Some(place) => broken(
            &current.line,
            &format!(
                "out of order: it holds record {seq} where record {expected} was due \
                 (that record is at {place})"
            ),
        ),
        None if seq == expected + 1 => broken(
            &current.line,
            &format!("record {expected}, which came right before this line, was removed"),
        ),
        None => broken(
            &current.line,
            &format!(
                "records {expected} to {} were removed before this line",
                seq - 1
            ),
        ),
    })
}

fn broken(line: &Line, why: &str) -> Broken {
    Broken {
        place: line.place(),
        why: why.to_owned(),
    }
}
