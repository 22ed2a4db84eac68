//! The audit file on real files: the chain across rotations, a torn line covered at the next
//! open, and `verify` naming the one line that was changed, removed or moved.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::read::{self, verify};
use super::{AuditConfig, AuditLog, AuditMode, SessionChange};

fn config(max_bytes: u64) -> AuditConfig {
    AuditConfig {
        mode: AuditMode::Full,
        max_bytes,
        keep: 5,
    }
}

fn record_some(log: &AuditLog, count: usize) {
    for n in 0..count {
        log.session(&SessionChange::new(
            "session_update",
            "s_1",
            json!({"n": n, "padding": "x".repeat(100)}),
        ));
        if n % 7 == 0 {
            log.flush();
        }
    }
    log.flush();
}

fn all_lines(path: &Path) -> Vec<String> {
    read::lines(path)
        .map(|line| String::from_utf8(line.expect("a line").bytes).expect("UTF-8"))
        .collect()
}

fn temp_log() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("audit.jsonl");
    (dir, path)
}

#[test]
fn the_chain_holds_across_two_rotations_and_a_reopen() {
    let (_dir, path) = temp_log();
    let roomy = AuditConfig {
        keep: 20,
        ..config(4096)
    };
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 40);
    drop(log);
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 40);
    assert!(read::files(&path).len() >= 3, "{:?}", read::files(&path));
    let verified = verify(&path).expect("an untouched log verifies");
    assert_eq!(verified.records, 80);
    let seqs: Vec<u64> = all_lines(&path)
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (1..=80).collect::<Vec<_>>());
    let mode = std::fs::metadata(&path).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
}

#[test]
fn more_rotations_than_kept_leave_a_chain_that_starts_later() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(
        &path,
        &AuditConfig {
            keep: 2,
            ..config(1024)
        },
    );
    record_some(&log, 60);
    assert_eq!(read::files(&path).len(), 3);
    let verified = verify(&path).expect("verifies");
    assert!(verified.notes[0].contains("rotated away"), "{verified:?}");
}

/// Rewrites the log as one file with `change` applied to its lines.
fn tampered(path: &Path, change: impl FnOnce(&mut Vec<String>)) {
    let mut lines = all_lines(path);
    change(&mut lines);
    for file in read::files(path) {
        std::fs::remove_file(file).unwrap();
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn verify_names_the_line_edited_removed_or_moved() {
    for (what, expected_line, change) in [
        (
            "an edited line",
            10,
            Box::new(|lines: &mut Vec<String>| {
                lines[9] = lines[9].replace("\"n\":9", "\"n\":90");
            }) as Box<dyn FnOnce(&mut Vec<String>)>,
        ),
        (
            "an edited prev",
            12,
            Box::new(|lines: &mut Vec<String>| {
                let line = &lines[11];
                let at = line.find("\"prev\":\"").unwrap() + 8;
                let mut edited = line.clone();
                edited.replace_range(at..at + 1, if &line[at..at + 1] == "a" { "b" } else { "a" });
                lines[11] = edited;
            }),
        ),
        (
            "a removed line",
            15,
            Box::new(|lines: &mut Vec<String>| {
                lines.remove(14);
            }),
        ),
        (
            "two lines swapped",
            20,
            Box::new(|lines: &mut Vec<String>| lines.swap(19, 20)),
        ),
        (
            "a line moved to the end",
            5,
            Box::new(|lines: &mut Vec<String>| {
                let moved = lines.remove(4);
                lines.push(moved);
            }),
        ),
        (
            "a line that is not a record",
            7,
            Box::new(|lines: &mut Vec<String>| lines[6] = "hello".to_owned()),
        ),
    ] {
        let (_dir, path) = temp_log();
        let log = AuditLog::open(&path, &config(1 << 30));
        record_some(&log, 30);
        drop(log);
        tampered(&path, change);
        let broken = verify(&path).expect_err(what);
        assert_eq!(
            broken.place,
            format!("{}:{expected_line}", path.display()),
            "{what}: {broken}"
        );
    }
}

#[test]
fn a_torn_last_line_is_kept_and_covered_at_the_next_open() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 30));
    record_some(&log, 5);
    drop(log);
    // A kill in the middle of a write: half a line.
    let last = all_lines(&path).pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&last.as_bytes()[..last.len() / 2]);
    std::fs::write(&path, &bytes).unwrap();
    let noted = verify(&path).expect("an unfinished last line is not a break");
    assert!(noted.notes[0].contains("incomplete"), "{noted:?}");

    let log = AuditLog::open(&path, &config(1 << 30));
    record_some(&log, 3);
    let verified = verify(&path).expect("covered by a recovered record");
    assert_eq!((verified.records, verified.recovered), (9, 1));
    let lines = all_lines(&path);
    let recovered: Value = serde_json::from_str(&lines[6]).unwrap();
    assert_eq!(recovered["kind"], "recovered");
    assert_eq!(recovered["torn_bytes"], last.len() / 2);
    assert_eq!(recovered["seq"], 6);
}

#[test]
fn an_unwritable_log_counts_what_it_loses_and_says_why() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 30));
    // The directory replaced by nothing writable: the next open fails; this one keeps its
    // file, so make the file's writes fail instead with a full device.
    drop(log);
    let log = AuditLog::open(
        Path::new("/proc/toold-no-such-dir/audit.jsonl"),
        &config(1 << 30),
    );
    record_some(&log, 3);
    let health = log.status();
    assert_eq!((health.written, health.lost), (0, 3));
    assert!(health.last_error.is_some());
}

#[test]
fn off_records_nothing() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(
        &path,
        &AuditConfig {
            mode: AuditMode::Off,
            ..config(1024)
        },
    );
    record_some(&log, 3);
    assert!(!path.exists());
}

#[test]
fn digest_keeps_short_strings_and_hashes_long_ones_at_any_depth() {
    let long = "a".repeat(300);
    let arguments = json!({"path": "x", "content": long, "nested": [{"deep": long}], "n": 1});
    let recorded = |mode| {
        let arguments = super::record::Arguments::Sent(&arguments);
        serde_json::to_value(super::record::RecordedArguments::new(arguments, mode)).unwrap()
    };
    let digested = recorded(AuditMode::Digest);
    let expected = json!({"sha256": super::record::sha256_hex(long.as_bytes()), "bytes": 300});
    assert_eq!(digested["path"], "x");
    assert_eq!(digested["n"], 1);
    assert_eq!(digested["content"], expected);
    assert_eq!(digested["nested"][0]["deep"], expected);
    assert_eq!(recorded(AuditMode::Full), arguments);
    // Replaced arguments are recorded the same way.
    let members = arguments.as_object().unwrap();
    let replaced = super::record::Arguments::Replaced(members);
    assert_eq!(
        serde_json::to_value(super::record::RecordedArguments::new(
            replaced,
            AuditMode::Digest
        ))
        .unwrap(),
        digested
    );
}

#[test]
fn a_rotation_cut_short_by_a_kill_leaves_a_log_that_verifies() {
    let (_dir, path) = temp_log();
    let roomy = AuditConfig {
        keep: 20,
        ..config(2048)
    };
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 30);
    drop(log);
    let rotated = read::files(&path).len() - 1;
    assert!(rotated >= 2, "{:?}", read::files(&path));
    // A rotation that renamed every `.N` up and was killed before `audit.jsonl` became `.1`.
    for n in (1..=rotated).rev() {
        std::fs::rename(
            super::file::rotated(&path, n),
            super::file::rotated(&path, n + 1),
        )
        .unwrap();
    }
    assert!(!super::file::rotated(&path, 1).exists());
    let verified = verify(&path).expect("the chain holds across the gap");
    assert_eq!(verified.records, 30);
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 30);
    assert_eq!(verify(&path).expect("and after more records").records, 60);
}

#[test]
fn a_torn_line_is_a_break_anywhere_but_at_the_very_end() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(
        &path,
        &AuditConfig {
            keep: 20,
            ..config(2048)
        },
    );
    record_some(&log, 30);
    drop(log);
    // Half a line without its newline at the end of a rotated file hides nothing after it.
    let older = super::file::rotated(&path, 1);
    let mut bytes = std::fs::read(&older).unwrap();
    bytes.extend_from_slice(b"{\"seq\":99");
    std::fs::write(&older, bytes).unwrap();
    let broken = verify(&path).expect_err("not the end of the log");
    assert!(
        broken.place.starts_with(&older.display().to_string()),
        "{broken}"
    );
}

#[test]
fn a_first_line_torn_in_a_fresh_file_is_covered_and_chained() {
    let (_dir, path) = temp_log();
    let roomy = AuditConfig {
        keep: 20,
        ..config(2048)
    };
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 30);
    drop(log);
    // The file a rotation just started, torn in its very first line.
    let current = std::fs::read(&path).unwrap();
    let first_line_end = current.iter().position(|&byte| byte == b'\n').unwrap();
    for n in (1..=read::files(&path).len() - 1).rev() {
        std::fs::rename(
            super::file::rotated(&path, n),
            super::file::rotated(&path, n + 1),
        )
        .unwrap();
    }
    std::fs::rename(&path, super::file::rotated(&path, 1)).unwrap();
    std::fs::write(&path, &current[..first_line_end / 2]).unwrap();
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 2);
    let verified = verify(&path).expect("the recovered record chains to the rotated file");
    assert_eq!(verified.recovered, 1);
    // And in a brand-new log.
    let (_dir, path) = temp_log();
    std::fs::write(&path, b"{\"seq\":1,\"kind\"").unwrap();
    let log = AuditLog::open(&path, &roomy);
    record_some(&log, 2);
    let verified = verify(&path).expect("a torn first line of a new log");
    assert_eq!((verified.recovered, verified.records), (1, 3));
}

#[test]
fn lowering_audit_keep_removes_the_files_past_it() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(
        &path,
        &AuditConfig {
            keep: 10,
            ..config(1024)
        },
    );
    record_some(&log, 40);
    drop(log);
    assert!(read::files(&path).len() > 4);
    let log = AuditLog::open(
        &path,
        &AuditConfig {
            keep: 3,
            ..config(1024)
        },
    );
    record_some(&log, 20);
    assert_eq!(read::files(&path).len(), 4, "{:?}", read::files(&path));
    verify(&path).expect("the kept files verify");
}

/// What `sed -i` does: the file's content, changed by `edit`, written to a new file renamed
/// over the log.
fn replace_as_sed_does(path: &Path, edit: impl FnOnce(&mut Vec<String>)) {
    let mut lines = all_lines(path);
    edit(&mut lines);
    let new = path.with_extension("sed-tmp");
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(&new, text).unwrap();
    std::fs::rename(&new, path).unwrap();
}

fn kinds(path: &Path) -> Vec<String> {
    all_lines(path)
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn the_head_is_the_last_record_written_and_a_log_ending_before_it_is_broken() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 30));
    assert_eq!(log.status().head, None, "an empty log has no head");
    record_some(&log, 10);
    let head = log.status().head.expect("a head");
    let lines = all_lines(&path);
    assert_eq!(head.seq, 10);
    assert_eq!(head.hash, super::record::sha256_hex(lines[9].as_bytes()));
    let (verified, broken) = read::check_against(&path, Some(&head));
    assert_eq!((verified.records, broken), (10, None));

    // The last two lines cut off in place: the file's own chain holds, the head says not.
    let keep: usize = lines[..8].iter().map(|line| line.len() + 1).sum();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(keep as u64)
        .unwrap();
    verify(&path).expect("the file alone cannot tell");
    let (_, broken) = read::check_against(&path, Some(&head));
    let broken = broken.expect("a break");
    assert_eq!(broken.line, Some(8), "{broken}");
    assert!(
        broken
            .why
            .contains("ends before the last record the daemon wrote (2 records missing"),
        "{broken}"
    );

    // A head from a reopened log is the file's last record.
    drop(log);
    let reopened = AuditLog::open(&path, &config(1 << 30));
    assert_eq!(reopened.status().head.map(|head| head.seq), Some(8));
}

#[test]
fn a_log_replaced_under_the_daemon_is_reopened_and_said_so() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 30));
    record_some(&log, 5);
    // Replaced with the same content: nothing lost, the chain holds through it.
    replace_as_sed_does(&path, |_| {});
    record_some(&log, 2);
    assert_eq!(
        kinds(&path),
        [
            vec!["session_update"; 5],
            vec!["log_replaced"],
            vec!["session_update"; 2]
        ]
        .concat()
    );
    let replaced: Value = serde_json::from_str(&all_lines(&path)[5]).unwrap();
    assert_eq!(replaced["found"], "another_file");
    assert_eq!(replaced["ends_with_last_record"], true);
    assert_eq!(replaced["seq"], 6);
    let verified = verify(&path).expect("nothing lost");
    assert_eq!(verified.records, 8);
    assert!(verified.notes[0].contains("log_replaced"), "{verified:?}");
    let status = log.status();
    let noted = status.replaced.expect("the status says so");
    assert_eq!((noted.count, noted.seq), (1, 6));
    assert_eq!(status.head.map(|head| head.seq), Some(8));
    assert_eq!(status.written, 8);

    // Replaced without its last line: broken at the `log_replaced` record.
    replace_as_sed_does(&path, |lines| {
        lines.pop();
    });
    record_some(&log, 1);
    let broken = verify(&path).expect_err("a line lost");
    assert_eq!(broken.line, Some(8), "{broken}");
    assert!(broken.why.contains("(1 record missing)"), "{broken}");
    assert_eq!(log.status().replaced.map(|noted| noted.count), Some(2));

    // Removed: a new file, starting with the record that says so.
    std::fs::remove_file(&path).unwrap();
    record_some(&log, 1);
    assert_eq!(kinds(&path), ["log_replaced", "session_update"]);
    let replaced: Value = serde_json::from_str(&all_lines(&path)[0]).unwrap();
    assert_eq!(replaced["found"], "no_file");
    assert_eq!(replaced["ends_with_last_record"], false);
    let broken = verify(&path).expect_err("records gone");
    assert_eq!(broken.line, Some(1), "{broken}");
    assert!(broken.why.contains("naming no file"), "{broken}");
}

#[test]
fn a_replaced_file_ending_in_a_torn_line_gets_its_newline() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 30));
    record_some(&log, 3);
    let new = path.with_extension("tmp");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"half");
    std::fs::write(&new, bytes).unwrap();
    std::fs::rename(&new, &path).unwrap();
    record_some(&log, 1);
    let lines = all_lines(&path);
    assert_eq!(lines[3], "{\"half");
    let replaced: Value = serde_json::from_str(&lines[4]).unwrap();
    assert_eq!(replaced["kind"], "log_replaced");
    assert_eq!(replaced["ends_with_last_record"], false);
    let broken = verify(&path).expect_err("not the daemon's end");
    assert_eq!(broken.line, Some(5), "{broken}");
}

/// The newest records cut while no daemon ran: the seal written at the stop shows it, to
/// `verify` at once and to the next start, which says so in a `seal_broken` record.
#[test]
fn records_cut_while_the_daemon_was_stopped_break_the_seal() {
    let (_dir, path) = temp_log();
    let log = AuditLog::open(&path, &config(1 << 20));
    record_some(&log, 10);
    log.seal_at_stop();
    drop(log);
    let seal = super::file::read_seal(&path).expect("a seal");
    assert_eq!((seal.seq, seal.at.as_str()), (10, "stop"));
    verify(&path).expect("an untouched log verifies against its seal");
    // A stop and a start with nothing cut: still whole.
    let log = AuditLog::open(&path, &config(1 << 20));
    record_some(&log, 2);
    log.seal_at_stop();
    drop(log);
    verify(&path).expect("stopped and started again");

    // The last three lines cut, each line's chain still whole.
    let lines = all_lines(&path);
    let kept = lines[..lines.len() - 3].join("\n") + "\n";
    std::fs::write(&path, kept).unwrap();
    let broken = verify(&path).expect_err("cut below the seal");
    assert!(
        broken.why.contains("ends before record 12") && broken.why.contains("3 records missing"),
        "{broken}"
    );
    // A well-chained record appended in place of the cut ones does not stand in for record 12.
    let log = AuditLog::open(&path, &config(1 << 20));
    record_some(&log, 1);
    drop(log);
    let records: Vec<Value> = all_lines(&path)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let sealed = records
        .iter()
        .find(|record| record["kind"] == "seal_broken")
        .expect("a seal_broken record at the next start");
    assert_eq!(sealed["sealed"]["seq"], 12, "{sealed}");
    assert_eq!(sealed["last_seq"], 9, "{sealed}");
    let broken = verify(&path).expect_err("the start found the seal broken");
    assert!(broken.why.contains("no longer held record 12"), "{broken}");
}
