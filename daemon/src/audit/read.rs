//! Reading the audit log back, oldest line first across its rotated files: the lines for
//! `toold audit`, and `toold audit verify`'s check of the chain, which names the first line
//! that was changed, removed or moved, and, given the running daemon's chain head, a log
//! that ends before the last record the daemon wrote.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde_json::Value;
use toold_protocol::AuditHead;

use super::file::{GENESIS, Seal, read_seal, rotated, rotated_numbers};
use super::record::sha256_hex;

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

/// The log's files, oldest first: `audit.jsonl.N` … `.1`, then `audit.jsonl`. Every rotated
/// file in the directory counts, gaps in the numbers included.
pub fn files(path: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = rotated_numbers(path)
        .into_iter()
        .map(|n| rotated(path, n))
        .collect();
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
    /// Records the daemon could not write (a full or failing disk), as the `records_lost`
    /// records it wrote once writing resumed say: gaps in what the log holds, not breaks in
    /// its chain.
    pub lost: u64,
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
    /// The file of the line at fault, and its line (1-based); no line when the log could not
    /// be read.
    pub file: PathBuf,
    pub line: Option<usize>,
    pub why: String,
}

/// A line read as a record: its `seq`, `prev`, `kind` and its own hash.
struct Parsed {
    line: Line,
    seq: Option<u64>,
    prev: Option<String>,
    kind: Option<String>,
    covers: Option<String>,
    /// A `log_replaced` record's `found`.
    found: Option<String>,
    /// A `records_lost` record's `count`, `since` and `why`.
    lost: Option<(u64, String, String)>,
    /// A `seal_broken` record's `sealed` seal.
    sealed: Option<Seal>,
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
        found: text("found"),
        lost: value
            .as_ref()
            .and_then(|value| value.get("count"))
            .and_then(Value::as_u64)
            .filter(|_| text("kind").as_deref() == Some("records_lost"))
            .map(|count| {
                (
                    count,
                    text("since").unwrap_or_default(),
                    text("why").unwrap_or_default(),
                )
            }),
        sealed: value
            .as_ref()
            .filter(|_| text("kind").as_deref() == Some("seal_broken"))
            .and_then(|value| serde_json::from_value(value.get("sealed")?.clone()).ok()),
        hash: sha256_hex(&line.bytes),
        line,
    }
}

/// Checks the chain over every file: each line's `prev` is the hash of the line before it,
/// its `seq` the one after the line before's, and a line that is not a record is a torn line
/// covered by the `recovered` record right after it (or, the very last line of the log, one
/// still being written). The first problem is named by its line.
pub fn verify(path: &Path) -> Result<Verified, Broken> {
    let (verified, broken) = check(path);
    match broken {
        Some(broken) => Err(broken),
        None => Ok(verified),
    }
}

/// [`verify`]'s walk, with what it found before the break when there is one: the records
/// walked until the break was seen, and the notes (`toold audit verify --json` shows both).
pub(crate) fn check(path: &Path) -> (Verified, Option<Broken>) {
    check_against(path, None)
}

/// [`check`], and, given the chain head a running daemon reports (the last record it
/// wrote), that the log holds that record as the daemon wrote it: a log that ends before it
/// lost lines at its end, which no link shows (the last line's hash is recorded nowhere in
/// the file). Records after the head are ones written since the daemon reported it.
pub fn check_against(path: &Path, head: Option<&AuditHead>) -> (Verified, Option<Broken>) {
    let mut verified = Verified {
        files: files(path).len(),
        records: 0,
        recovered: 0,
        lost: 0,
        notes: Vec::new(),
    };
    let broken = walk(path, &mut verified, head).err();
    (verified, broken)
}

fn walk(path: &Path, verified: &mut Verified, head: Option<&AuditHead>) -> Result<(), Broken> {
    let files = files(path);
    let oldest_is_rotated = files.first().is_some_and(|file| file != path);
    let mut lines = lines(path).map(|line| {
        line.map(parse).map_err(|err| Broken {
            place: path.display().to_string(),
            file: path.to_owned(),
            line: None,
            why: format!("cannot read the log: {err}"),
        })
    });
    let mut rest: VecDeque<Parsed> = VecDeque::new();
    let mut next = |rest: &mut VecDeque<Parsed>| -> Result<Option<Parsed>, Broken> {
        match rest.pop_front() {
            Some(parsed) => Ok(Some(parsed)),
            None => lines.next().transpose(),
        }
    };
    // Before the first line: the chain's start (64 zeros, record 0), unless older files were
    // rotated away, when the first record starts it whatever its `prev` and `seq`.
    let mut previous: Option<Parsed> = None;
    // The log's record of the head's `seq`, when the log holds it: its hash and line.
    let mut at_head: Option<(String, Line)> = None;
    // The same for the seal the daemon last wrote (at its start, a rotation or its stop).
    let seal = read_seal(path);
    let mut at_seal: Option<(String, Line)> = None;
    while let Some(current) = next(&mut rest)? {
        let previous_hash = previous
            .as_ref()
            .map_or(GENESIS, |previous| previous.hash.as_str())
            .to_owned();
        // A line that is not a record: being written (the last line of the log, unended), or
        // torn by a kill and covered by the `recovered` record after it.
        let current = if current.seq.is_none() {
            let after = next(&mut rest)?;
            let Some(after) = after else {
                if current.line.ended {
                    return Err(broken(
                        &current.line,
                        "not an audit record (not JSON, or no seq)",
                    ));
                }
                verified.notes.push(format!(
                    "{}: the newest line is incomplete (being written, or the daemon was killed; \
                     its next start covers it)",
                    current.line.place()
                ));
                break;
            };
            if after.kind.as_deref() == Some("log_replaced") {
                // The file the daemon found ended in a torn line: not its last record.
                return Err(replaced(&after, previous.as_ref()));
            }
            let covered = current.line.ended
                && after.kind.as_deref() == Some("recovered")
                && after.prev.as_deref() == Some(current.hash.as_str())
                && (after.covers.as_deref() == Some(previous_hash.as_str())
                    || previous.is_none() && oldest_is_rotated);
            if !covered {
                return Err(broken(
                    &current.line,
                    "not an audit record, and not a torn line covered by a `recovered` record \
                     right after it",
                ));
            }
            verified.recovered += 1;
            if let Some(previous) = &previous {
                check_seq(previous, &after, &mut rest, &mut next)?;
            }
            after
        } else {
            if current.kind.as_deref() == Some("log_replaced")
                && !(previous.is_none() && oldest_is_rotated)
            {
                // The daemon chained it from its own last record: the link holds when the file
                // it found ended with that record.
                let (expected_seq, expected_prev) = match &previous {
                    Some(previous) => (previous.seq.map(|seq| seq + 1), previous.hash.as_str()),
                    None => (Some(1), GENESIS),
                };
                if current.seq != expected_seq || current.prev.as_deref() != Some(expected_prev) {
                    return Err(replaced(&current, previous.as_ref()));
                }
                verified.notes.push(format!(
                    "{}: the daemon found the log's path {}, reopened it and said so in a \
                     `log_replaced` record; the file ended with the daemon's last record, so \
                     the chain holds through it",
                    current.line.place(),
                    found_text(current.found.as_deref()),
                ));
            }
            // A record out of sequence says more (removed, moved) than the broken link it also
            // makes: checked first.
            if let Some(previous) = &previous {
                check_seq(previous, &current, &mut rest, &mut next)?;
            }
            if current.prev.as_deref() != Some(previous_hash.as_str())
                && !(previous.is_none() && oldest_is_rotated)
            {
                return Err(match &previous {
                    None => broken(
                        &current.line,
                        "the first line of the log does not start the chain (its prev is not 64 \
                         zeros): lines before it were removed",
                    ),
                    Some(previous) => {
                        // The link from `previous` to `current` is broken. `current` itself was
                        // changed (its `prev`) when its link to the next line is broken too;
                        // otherwise `previous` was changed after `current` recorded its hash.
                        let following = next(&mut rest)?;
                        let current_changed = following.as_ref().is_some_and(|following| {
                            following.prev.as_deref() != Some(current.hash.as_str())
                        });
                        if current_changed {
                            broken(
                                &current.line,
                                "changed: its prev is not the hash of the line before it, and \
                                 the next line's prev is not its hash",
                            )
                        } else {
                            broken(
                                &previous.line,
                                "changed: the next line's prev is not the hash of this line",
                            )
                        }
                    }
                });
            }
            current
        };
        match &previous {
            Some(_) => {}
            None if oldest_is_rotated && current.prev.as_deref() != Some(GENESIS) => {
                verified.notes.push(format!(
                    "the chain starts at record {} ({}): older files were rotated away",
                    current.seq.unwrap_or(0),
                    current.line.place()
                ));
            }
            None if oldest_is_rotated => {}
            None if current.seq != Some(1) => {
                return Err(broken(
                    &current.line,
                    "the first record of the log is not record 1: records before it were removed",
                ));
            }
            None => {}
        }
        if let Some(sealed) = &current.sealed {
            return Err(broken(
                &current.line,
                &format!(
                    "at its start the daemon found that the log no longer held record {} \
                     (sealed at its {} at {}): the log's newest records were cut or rewritten \
                     while no daemon ran{}",
                    sealed.seq, sealed.at, sealed.ts, ON_PURPOSE
                ),
            ));
        }
        if seal
            .as_ref()
            .is_some_and(|seal| current.seq == Some(seal.seq))
        {
            at_seal = Some((current.hash.clone(), current.line.clone()));
        }
        verified.records += 1;
        if let Some((count, since, why)) = &current.lost {
            verified.lost += count;
            verified.notes.push(format!(
                "{}: {count} record{} lost since {since}, which the daemon could not write ({why}); \
                 the log does not hold them, and its chain holds around the gap",
                current.line.place(),
                if *count == 1 { " was" } else { "s were" },
            ));
        }
        if head.is_some_and(|head| current.seq == Some(head.seq)) {
            at_head = Some((current.hash.clone(), current.line.clone()));
        }
        previous = Some(current);
    }
    if let Some(seal) = &seal {
        check_seal(path, seal, at_seal, previous.as_ref())?;
    }
    let Some(head) = head else {
        return Ok(());
    };
    match how_it_lacks(head.seq, &head.hash, at_head, previous.as_ref()) {
        None => Ok(()),
        Some(Lacks::Rewritten(line)) => Err(broken(
            &line,
            &format!(
                "record {} is not the one the daemon wrote (its hash is not the one the running \
                 daemon reports for it): the log was rewritten",
                head.seq
            ),
        )),
        Some(Lacks::CutAfter(line, last_seq)) => {
            let missing = head.seq - last_seq;
            Err(broken(
                &line,
                &format!(
                    "the log ends before the last record the daemon wrote ({missing} record{} \
                     missing at the end: the daemon's last is record {}, this line is record \
                     {last_seq})",
                    if missing == 1 { "" } else { "s" },
                    head.seq,
                ),
            ))
        }
        Some(Lacks::Everything) => Err(Broken {
            place: path.display().to_string(),
            file: path.to_owned(),
            line: None,
            why: format!(
                "the log holds no record, but the daemon wrote {} ({} records missing)",
                head.seq, head.seq
            ),
        }),
    }
}

/// How a log lacks record `seq` as it was written (its `hash`), given the log's record of that
/// `seq` when it holds one (`found`: its hash and line) and its last record: `None` when it
/// holds it, or its files were rotated away (the log's records start after it).
enum Lacks {
    /// Another record stands at its place.
    Rewritten(Line),
    /// The log ends before it: at this line, record N.
    CutAfter(Line, u64),
    /// The log holds no record at all.
    Everything,
}

fn how_it_lacks(
    seq: u64,
    hash: &str,
    found: Option<(String, Line)>,
    last: Option<&Parsed>,
) -> Option<Lacks> {
    match (found, last) {
        (Some((found, _)), _) if found == hash => None,
        (Some((_, line)), _) => Some(Lacks::Rewritten(line)),
        (None, Some(last)) => match last.seq {
            Some(last_seq) if last_seq < seq => Some(Lacks::CutAfter(last.line.clone(), last_seq)),
            _ => None,
        },
        (None, None) => Some(Lacks::Everything),
    }
}

/// That the log holds no record past `head`, the last one the running daemon wrote when it
/// was asked after the log was read: such a record is one the daemon never wrote, appended by
/// another program (its chain may well hold).
pub fn written_after(path: &Path, head: &AuditHead) -> Result<(), Broken> {
    for line in lines(path) {
        let Ok(line) = line else {
            continue;
        };
        let parsed = parse(line);
        if let Some(seq) = parsed.seq.filter(|seq| *seq > head.seq) {
            return Err(broken(
                &parsed.line,
                &format!(
                    "record {seq} was not written by the running daemon (the last record it \
                     wrote is record {}): another program appended it",
                    head.seq
                ),
            ));
        }
    }
    Ok(())
}

/// What to do when the log was removed or cut on purpose, said with a broken seal.
const ON_PURPOSE: &str = " (if you removed or cut the log on purpose, remove its seal, \
     audit.jsonl.head, with it)";

/// The log holds the record its seal names, as sealed: a log that ends before it, or holds
/// another record in its place, was cut or rewritten after the seal was written (while the
/// daemon was stopped, when the seal is its stop's).
fn check_seal(
    path: &Path,
    seal: &Seal,
    at_seal: Option<(String, Line)>,
    last: Option<&Parsed>,
) -> Result<(), Broken> {
    let sealed = format!("sealed at the daemon's {} at {}", seal.at, seal.ts);
    match how_it_lacks(seal.seq, &seal.hash, at_seal, last) {
        None => Ok(()),
        Some(Lacks::Rewritten(line)) => Err(broken(
            &line,
            &format!(
                "record {} is not the record {sealed}: the log was rewritten{ON_PURPOSE}",
                seal.seq
            ),
        )),
        Some(Lacks::CutAfter(line, last_seq)) => Err(broken(
            &line,
            &format!(
                "the log ends before record {}, {sealed}{}: its newest records were cut{ON_PURPOSE}",
                seal.seq,
                records_missing(seal.seq - last_seq)
            ),
        )),
        Some(Lacks::Everything) => Err(Broken {
            place: path.display().to_string(),
            file: path.to_owned(),
            line: None,
            why: format!(
                "the log holds no record, but its seal names record {}, {sealed}{ON_PURPOSE}",
                seal.seq
            ),
        }),
    }
}

/// ` (N records missing)`.
fn records_missing(count: u64) -> String {
    format!(
        " ({count} record{} missing)",
        if count == 1 { "" } else { "s" }
    )
}

/// What a `log_replaced` record says the daemon found at the log's path.
fn found_text(found: Option<&str>) -> &'static str {
    match found {
        Some("no_file") => "naming no file (removed or moved away while the daemon ran)",
        _ => "naming another file (replaced while the daemon ran, as `sed -i` or an editor does)",
    }
}

/// The break at a `log_replaced` record whose link does not hold: the file the daemon found
/// did not end with its last record.
fn replaced(record: &Parsed, previous: Option<&Parsed>) -> Broken {
    let daemon_last = record.seq.map_or(0, |seq| seq.saturating_sub(1));
    let missing = match previous.and_then(|previous| previous.seq) {
        Some(seq) if seq < daemon_last => records_missing(daemon_last - seq),
        _ if previous.is_none() && daemon_last > 0 => records_missing(daemon_last),
        _ => String::new(),
    };
    broken(
        &record.line,
        &format!(
            "the daemon found the log's path {}, and what it found did not end with the daemon's \
             last record (record {daemon_last}){missing}: lines were removed or changed; the \
             daemon went on here, in a `log_replaced` record chained from its own last record",
            found_text(record.found.as_deref()),
        ),
    )
}

/// `current.seq` follows `previous.seq`; a gap is lines removed, unless the missing records
/// turn up later (lines moved).
fn check_seq<F>(
    previous: &Parsed,
    current: &Parsed,
    rest: &mut VecDeque<Parsed>,
    next: &mut F,
) -> Result<(), Broken>
where
    F: FnMut(&mut VecDeque<Parsed>) -> Result<Option<Parsed>, Broken>,
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
        file: line.file.clone(),
        line: Some(line.number),
        why: why.to_owned(),
    }
}
