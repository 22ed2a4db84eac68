//! The audit log, end to end on the real daemon: exactly one `call` record per call across
//! sessions and batches with the right decider for each kind (rule, grant, mode, hook, and an
//! approver's identity from a real second connection); the chain verified by `toold audit
//! verify` (and its `--json` report) across rotations and broken by one edited, removed or
//! moved line, and (with the daemon answering) by a last line removed; a log replaced by
//! `sed -i` under the running daemon, reopened with a `log_replaced` record; SIGKILLs during
//! a flood lose no record of a call whose response the client got; digest, full and off; and
//! a failing disk that stops no call and is reported by `toold status`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toold_protocol::Framing;
use toold_protocol::peer::Reply;
use toold_tests::PATIENCE;
use toold_tests::daemon::{
    TestClient, TestDaemon, answer_with, no_answers, results, wire_error_type_or_ok,
};
use toold_tests::require;

fn audit_path(daemon: &TestDaemon) -> PathBuf {
    daemon.state_dir().join("audit.jsonl")
}

/// Every record of the log, oldest first, across rotated files.
fn records(path: &Path) -> Vec<Value> {
    toold::audit::read::lines(path)
        .filter_map(|line| serde_json::from_slice(&line.expect("a line").bytes).ok())
        .collect()
}

fn calls(path: &Path) -> Vec<Value> {
    records(path)
        .into_iter()
        .filter(|record| record["kind"] == "call")
        .collect()
}

const HOOKED_CONFIG: &str = r#"
audit_max_bytes = 65536
audit_keep = 50

[permissions]
sandboxed_commands = "ask"

[[hooks.pre_tool_use]]
matcher = "^find_files$"
command = ["sh", "-c", "cat > /dev/null; echo '{\"decision\":\"allow\"}'"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_has_exactly_one_record_naming_who_decided() {
    let daemon = TestDaemon::start_with_config(Some(HOOKED_CONFIG));
    let work = daemon.work();
    std::fs::write(work.join("a.txt"), "a\n").expect("a file");
    // The submitter approves nothing; a second connection is every session's approver.
    let submitter =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let approver = TestClient::connect_raw(
        &daemon.socket(),
        Framing::Ndjson,
        answer_with(seen.clone(), |request| {
            let command = request
                .params
                .as_ref()
                .and_then(|params| params["call"]["arguments"]["command"].as_str())
                .unwrap_or("");
            let decision = if command == "echo granted" {
                "allow_session"
            } else {
                "allow_once"
            };
            Reply::result(json!({"decision": decision}))
        }),
    )
    .await;
    approver
        .request("initialize", json!({"protocol_version": 1, "client_info": {"name": "second-approver"}, "capabilities": {"approvals": true}}))
        .await
        .expect("initialize");

    // What each kind of call is, and who must be named as its decider.
    let kinds: [(&str, Value, &str, Option<&str>); 6] = [
        (
            "read_file",
            json!({"path": "a.txt"}),
            "mode",
            Some("read_only_inside_roots"),
        ),
        (
            "run_command",
            json!({"command": "true"}),
            "rule",
            Some("allow_rule"),
        ),
        (
            "run_command",
            json!({"command": "echo granted"}),
            "grant",
            Some("grant"),
        ),
        (
            "write_file",
            json!({"path": "w.txt", "content": "x"}),
            "approver",
            Some("default_ask"),
        ),
        (
            "find_files",
            json!({"pattern": "*.txt"}),
            "hook",
            Some("hook_allow"),
        ),
        ("no_such_tool", json!({}), "", None),
    ];
    let mut expected: HashMap<(String, String, String), (String, Option<&str>)> = HashMap::new();
    let mut sessions = Vec::new();
    for _ in 0..10 {
        let session = submitter
            .create_session(&work, json!({"rules": {"allow": ["run_command(true)"]}}))
            .await;
        approver
            .request("session/attach", json!({"session_id": session}))
            .await
            .expect("the approver attaches");
        sessions.push(session);
    }
    let mut total = 0;
    for (index, session) in sessions.iter().enumerate() {
        // The first `echo granted` of each session is asked, answered allow_session.
        let first = submitter
            .execute(session, json!([{"id": "g0", "name": "run_command", "arguments": {"command": "echo granted"}}]))
            .await;
        let batch = first["batch_id"].as_str().expect("a batch id").to_owned();
        expected.insert(
            (session.clone(), batch, "g0".into()),
            ("approver".into(), Some("default_ask")),
        );
        total += 1;
        for batch_number in 0..9 {
            let batch_calls: Vec<Value> = (0..11)
                .map(|n| {
                    let (tool, arguments, _, _) = &kinds[(n + batch_number + index) % kinds.len()];
                    json!({"id": format!("c{n}"), "name": tool, "arguments": arguments})
                })
                .collect();
            let response = submitter
                .execute(session, Value::Array(batch_calls.clone()))
                .await;
            let batch = response["batch_id"]
                .as_str()
                .expect("a batch id")
                .to_owned();
            for call in &batch_calls {
                let (_, _, by, step) = kinds
                    .iter()
                    .find(|kind| kind.0 == call["name"] && kind.1 == call["arguments"])
                    .expect("a kind");
                expected.insert(
                    (
                        session.clone(),
                        batch.clone(),
                        call["id"].as_str().unwrap().to_owned(),
                    ),
                    ((*by).to_owned(), *step),
                );
                total += 1;
            }
        }
    }
    assert_eq!(total, 1000);
    let log = audit_path(&daemon);
    let recorded = calls(&log);
    let mut seen_calls = HashSet::new();
    let pid = std::process::id();
    let uid = nix::unistd::getuid().as_raw();
    for record in &recorded {
        let key = (
            record["session"].as_str().unwrap().to_owned(),
            record["batch"].as_str().unwrap().to_owned(),
            record["call_id"].as_str().unwrap().to_owned(),
        );
        assert!(seen_calls.insert(key.clone()), "two records of {key:?}");
        let (by, step) = expected
            .get(&key)
            .unwrap_or_else(|| panic!("a record of a call never made: {record}"));
        if by.is_empty() {
            assert_eq!(record["decision"], Value::Null, "{record}");
            assert_eq!(record["outcome"], "unknown_tool");
            continue;
        }
        assert_eq!(record["decision"]["by"], by.as_str(), "{record}");
        assert_eq!(record["decision"]["step"].as_str(), *step, "{record}");
        match by.as_str() {
            "rule" => {
                assert_eq!(record["decision"]["rule"], "run_command(true)");
                assert_eq!(record["decision"]["source"], json!({"kind": "session"}));
            }
            "grant" => assert_eq!(record["decision"]["source"], json!({"kind": "grant"})),
            "approver" => {
                assert_eq!(
                    record["decision"]["approver"],
                    json!({"client_name": "second-approver", "pid": pid, "uid": uid}),
                    "{record}"
                );
                assert!(matches!(
                    record["decision"]["answer"].as_str(),
                    Some("allow_once" | "allow_session")
                ));
            }
            _ => {}
        }
        assert_eq!(record["outcome"], "ok", "{record}");
    }
    assert_eq!(recorded.len(), 1000, "one record per call");
    let grants = records(&log)
        .into_iter()
        .filter(|record| record["kind"] == "grant")
        .count();
    assert_eq!(grants, 10, "one grant per session");
    let created = records(&log)
        .into_iter()
        .filter(|record| record["kind"] == "session_create")
        .count();
    assert_eq!(created, 10);

    // The chain holds across the rotations these records made.
    assert!(
        toold::audit::read::files(&log).len() >= 3,
        "at least two rotations"
    );
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("chain holds"), "{text}");

    // `toold audit --session` lists that session's records alone.
    let (code, text) = daemon.run_toold("audit", &["--session", &sessions[3], "--json"]);
    assert_eq!(code, Some(0));
    let listed: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();
    assert!(
        listed
            .iter()
            .all(|record| record["session"] == sessions[3].as_str())
    );
    assert_eq!(
        listed
            .iter()
            .filter(|record| record["kind"] == "call")
            .count(),
        100
    );
    let (code, text) = daemon.run_toold("audit", &["--since", "1h"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("second-approver"), "{text}");
}

/// Copies the log to `dir` as one file, with `change` applied to its lines.
fn tampered_copy(log: &Path, dir: &Path, change: impl FnOnce(&mut Vec<Vec<u8>>)) -> PathBuf {
    let mut lines: Vec<Vec<u8>> = toold::audit::read::lines(log)
        .map(|line| line.expect("a line").bytes)
        .collect();
    change(&mut lines);
    let copy = dir.join("audit.jsonl");
    let mut bytes = lines.join(&b'\n');
    bytes.push(b'\n');
    std::fs::write(&copy, bytes).expect("the copy");
    copy
}

#[tokio::test]
async fn verify_names_the_one_line_edited_removed_or_moved() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client.create_session(&work, json!({})).await;
    for n in 0..30 {
        client
            .execute(&session, json!([{"id": format!("r{n}"), "name": "find_files", "arguments": {"pattern": "*"}}]))
            .await;
    }
    let log = audit_path(&daemon);
    type Change = Box<dyn FnOnce(&mut Vec<Vec<u8>>)>;
    let cases: Vec<(&str, usize, Change)> = vec![
        (
            "edited",
            12,
            Box::new(|lines| {
                let text = String::from_utf8(lines[11].clone()).unwrap();
                lines[11] = text.replace("find_files", "read_file").into_bytes();
            }),
        ),
        (
            "removed",
            20,
            Box::new(|lines| {
                lines.remove(19);
            }),
        ),
        ("moved", 8, Box::new(|lines| lines.swap(7, 8))),
    ];
    for (what, line, change) in cases {
        let dir = tempfile::tempdir().expect("a directory");
        let copy = tampered_copy(&log, dir.path(), change);
        let (code, text) = daemon.run_toold("audit", &["verify", "--log", copy.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{what}: {text}");
        assert!(
            text.contains(&format!("BROKEN at {}:{line}:", copy.display())),
            "{what}: {text}"
        );
        // `--json` names the same line, and counts the records walked before the break was seen.
        let (code, text) = daemon.run_toold(
            "audit",
            &["verify", "--json", "--log", copy.to_str().unwrap()],
        );
        assert_eq!(code, Some(1), "{what}: {text}");
        let report: Value = serde_json::from_str(&text).expect("one JSON object");
        assert_eq!(report["holds"], false, "{what}: {report}");
        assert_eq!(report["files"], json!([copy.display().to_string()]));
        let broken = &report["broken"];
        assert_eq!(broken["file"], copy.display().to_string(), "{what}");
        assert_eq!(broken["line"], line, "{what}: {report}");
        assert!(
            broken["reason"]
                .as_str()
                .is_some_and(|reason| !reason.is_empty())
        );
        let records = report["records"].as_u64().expect("a count");
        assert!(records <= line as u64, "{what}: {report}");
    }
    let dir = tempfile::tempdir().expect("a directory");
    let untouched = tampered_copy(&log, dir.path(), |_| {});
    let (code, text) = daemon.run_toold("audit", &["verify", "--log", untouched.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = daemon.run_toold(
        "audit",
        &["verify", "--log", untouched.to_str().unwrap(), "--json"],
    );
    assert_eq!(code, Some(0), "{text}");
    let report: Value = serde_json::from_str(&text).expect("one JSON object");
    let lines = records(&untouched).len();
    // The daemon answers, but writes another log: the copy's end is not checked against it.
    let note = format!(
        "the daemon on {} writes {}, not this log: only the file's own chain was checked \
         (lines removed from its end cannot be seen without the running daemon's last record)",
        daemon.socket().display(),
        log.display()
    );
    assert_eq!(
        report,
        json!({
            "log": untouched.display().to_string(),
            "files": [untouched.display().to_string()],
            "records": lines,
            "recovered": 0,
            "lost": 0,
            "holds": true,
            "broken": null,
            "daemon": null,
            "notes": [note],
        })
    );
}

fn verify_json(daemon: &TestDaemon, args: &[&str]) -> (Option<i32>, Value) {
    let (code, text) = daemon.run_toold("audit", &[&["verify", "--json"], args].concat());
    (code, serde_json::from_str(&text).expect("one JSON object"))
}

#[tokio::test]
async fn the_running_daemon_tells_verify_its_last_record_and_reopens_a_log_replaced_under_it() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client.create_session(&work, json!({})).await;
    let find = |id: &str| json!([{"id": id, "name": "find_files", "arguments": {"pattern": "*"}}]);
    for n in 0..10 {
        client.execute(&session, find(&format!("f{n}"))).await;
    }
    let log = audit_path(&daemon);
    let written = records(&log).len();
    assert_eq!(written, 11, "a session_create and ten calls");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "it holds the last record the running daemon wrote (record {written})"
        )),
        "{text}"
    );
    let (code, report) = verify_json(&daemon, &[]);
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["daemon"]["head"]["seq"], written, "{report:#}");
    assert_eq!(report["notes"], json!([]), "{report:#}");

    // The last line cut off the file in place: every link left holds, but the daemon knows it
    // wrote one more.
    let bytes = std::fs::read(&log).expect("the log");
    let last_starts = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|&byte| byte == b'\n')
        .expect("two lines")
        + 1;
    let removed = bytes[last_starts..].to_vec();
    let in_place = std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("the log");
    in_place.set_len(last_starts as u64).expect("cut");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "BROKEN at {}:{}: the log ends before the last record the daemon wrote (1 record \
             missing at the end",
            log.display(),
            written - 1
        )),
        "{text}"
    );
    let (code, report) = verify_json(&daemon, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["holds"], false);
    assert_eq!(report["broken"]["line"], written - 1, "{report:#}");
    assert!(
        report["broken"]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("1 record missing at the end")),
        "{report:#}"
    );
    // With no daemon to ask, the file alone holds, and verify says what it could not check.
    let (code, text) =
        daemon.run_toold("audit", &["verify", "--socket", "/nonexistent/toold.sock"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("note: no daemon answered on /nonexistent/toold.sock")
            && text.contains("only the file's own chain was checked"),
        "{text}"
    );
    // The line put back.
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("the log")
        .write_all(&removed)
        .expect("put back");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");

    // A record forged after the daemon's last, chained as the daemon would chain it: the
    // chain holds, but the daemon never wrote it.
    let whole = std::fs::read(&log).expect("the log");
    let last_line = whole[..whole.len() - 1]
        .rsplit(|&byte| byte == b'\n')
        .next()
        .expect("a last line");
    let forged = format!(
        "{{\"seq\":{},\"kind\":\"call\",\"ts\":\"2026-01-01T00:00:00.000Z\",\"session\":\"s_x\",\"prev\":\"{}\"}}\n",
        written + 1,
        toold::audit::record::sha256_hex(last_line)
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .expect("the log")
        .write_all(forged.as_bytes())
        .expect("forge");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "record {} was not written by the running daemon",
            written + 1
        )),
        "{text}"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("the log")
        .set_len(whole.len() as u64)
        .expect("the forged line cut");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");

    // `sed -i` writes a new file and renames it over the log: the daemon's next records go to
    // the file at the path, after a `log_replaced` record.
    let sed = std::process::Command::new("sed")
        .args(["-i", "s/x/x/"])
        .arg(&log)
        .status()
        .expect("sed");
    assert!(sed.success());
    for n in 0..3 {
        client.execute(&session, find(&format!("after{n}"))).await;
    }
    let all = records(&log);
    assert_eq!(all.len(), written + 4, "{all:#?}");
    let replaced = &all[written];
    assert_eq!(replaced["kind"], "log_replaced", "{replaced}");
    assert_eq!(replaced["found"], "another_file");
    assert_eq!(replaced["ends_with_last_record"], true);
    assert_eq!(replaced["seq"], written + 1);
    let after: Vec<&Value> = all[written + 1..]
        .iter()
        .map(|record| &record["call_id"])
        .collect();
    assert_eq!(
        after,
        [&json!("after0"), &json!("after1"), &json!("after2")]
    );
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "note: {}:{}: the daemon found the log's path naming another file",
            log.display(),
            written + 1
        )) && text.contains("the chain holds through it"),
        "{text}"
    );
    let output = daemon
        .command()
        .args(["status", "--json"])
        .output()
        .expect("toold status");
    let status: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(status["audit"]["replaced"]["count"], 1, "{status:#}");
    assert_eq!(status["audit"]["replaced"]["seq"], written + 1);
    assert_eq!(status["audit"]["head"]["seq"], written + 4);
    let output = daemon.command().arg("status").output().expect("status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("REPLACED: the log file was replaced by another file"),
        "{text}"
    );

    // `sed -i '$d'` drops the last line as it replaces the file: the daemon's next record
    // says the file it found did not end with its last record, and verify breaks there.
    let sed = std::process::Command::new("sed")
        .args(["-i", "$d"])
        .arg(&log)
        .status()
        .expect("sed");
    assert!(sed.success());
    client.execute(&session, find("last")).await;
    let all = records(&log);
    let replaced = &all[all.len() - 2];
    assert_eq!(replaced["kind"], "log_replaced", "{replaced}");
    assert_eq!(replaced["ends_with_last_record"], false);
    let (code, report) = verify_json(&daemon, &[]);
    assert_eq!(code, Some(1), "{report:#}");
    assert_eq!(report["broken"]["line"], all.len() - 1, "{report:#}");
    assert!(
        report["broken"]["reason"]
            .as_str()
            .is_some_and(
                |reason| reason.contains("did not end with the daemon's last record")
                    && reason.contains("(1 record missing)")
            ),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_during_a_flood_lose_no_record_of_an_answered_call() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::write(work.join("a.txt"), "a\n").expect("a file");
    let answered: Arc<Mutex<HashSet<String>>> = Arc::default();
    let kills = 20;
    for round in 0..kills {
        let client = Arc::new(
            TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await,
        );
        let session = client.create_session(&work, json!({})).await;
        let mut flooders = Vec::new();
        for flooder in 0..4 {
            let (client, session, answered) = (client.clone(), session.clone(), answered.clone());
            flooders.push(tokio::spawn(async move {
                for n in 0.. {
                    let id = format!("k{round}_{flooder}_{n}");
                    let calls = json!([
                        {"id": format!("{id}a"), "name": "read_file", "arguments": {"path": "a.txt"}},
                        {"id": format!("{id}b"), "name": "find_files", "arguments": {"pattern": "*.txt"}},
                    ]);
                    let sent = client.peer.request("tools/execute".to_owned(), Some(json!({"session_id": session, "calls": calls})));
                    let Ok(response) = sent.await else { return };
                    for result in results(&response) {
                        assert_eq!(wire_error_type_or_ok(result), "ok");
                    }
                    let mut answered = answered.lock().unwrap();
                    answered.insert(format!("{id}a"));
                    answered.insert(format!("{id}b"));
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(150 + (round * 37) % 200)).await;
        daemon.kill();
        for flooder in flooders {
            flooder.await.expect("a flooder");
        }
        daemon.start_again();
    }
    // The last start covered a torn line if the last kill left one; so did every other start.
    let log = audit_path(&daemon);
    let verified = toold::audit::read::verify(&log).expect("every file verifies");
    let torn = toold::audit::read::lines(&log)
        .filter(|line| {
            let line = line.as_ref().expect("a line");
            serde_json::from_slice::<Value>(&line.bytes).is_err()
        })
        .count() as u64;
    assert!(torn <= kills, "{torn} torn lines after {kills} kills");
    assert_eq!(
        verified.recovered, torn,
        "each torn line covered by a recovered record"
    );
    let recorded: HashSet<String> = calls(&log)
        .iter()
        .map(|record| record["call_id"].as_str().unwrap().to_owned())
        .collect();
    let answered = answered.lock().unwrap();
    assert!(
        answered.len() > 100,
        "the flood made {} calls",
        answered.len()
    );
    eprintln!(
        "{kills} kills: {} answered calls, {} call records, {torn} torn lines, {} recovered",
        answered.len(),
        recorded.len(),
        verified.recovered
    );
    let lost: Vec<&String> = answered
        .iter()
        .filter(|id| !recorded.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "answered calls missing from the log: {lost:?}"
    );
}

async fn write_a_mebibyte(config: &str) -> (TestDaemon, Option<Value>) {
    let daemon = TestDaemon::start_with_config(Some(config));
    let work = daemon.work();
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client
        .create_session(&work, json!({"mode": "accept_edits"}))
        .await;
    let content = "x".repeat(1024 * 1024);
    let response = client
        .execute(&session, json!([{"id": "w", "name": "write_file", "arguments": {"path": "big.txt", "content": content}}]))
        .await;
    assert_eq!(wire_error_type_or_ok(results(&response)[0]), "ok");
    let log = audit_path(&daemon);
    let record = log.exists().then(|| calls(&log).pop()).flatten();
    (daemon, record)
}

#[tokio::test]
async fn digest_full_and_off() {
    let (_digest_daemon, digested) = write_a_mebibyte("").await;
    let digested = digested.expect("a record");
    let content = "x".repeat(1024 * 1024);
    assert_eq!(
        digested["arguments"]["content"],
        json!({"sha256": toold::audit::record::sha256_hex(content.as_bytes()), "bytes": 1024 * 1024})
    );
    assert_eq!(digested["arguments"]["path"], "big.txt");

    let (_full_daemon, full) = write_a_mebibyte("audit = \"full\"\n").await;
    assert_eq!(
        full.expect("a record")["arguments"]["content"],
        content.as_str()
    );

    let (off_daemon, off) = write_a_mebibyte("audit = \"off\"\n").await;
    assert!(off.is_none());
    assert!(
        toold::audit::read::files(&audit_path(&off_daemon)).is_empty(),
        "off writes nothing"
    );
    let mode = std::fs::metadata(audit_path(&_digest_daemon))
        .expect("the log")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
}

#[tokio::test]
async fn a_full_disk_stops_no_call_and_status_says_how_many_records_were_lost() {
    if !require::root("a_full_disk_stops_no_call_and_status_says_how_many_records_were_lost") {
        return;
    }
    // The daemon's state directory on a tmpfs of 64 KiB, in a mount namespace of its own.
    let state = tempfile::tempdir().expect("a directory");
    let wrapper = vec![
        "unshare".to_owned(),
        "-m".to_owned(),
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "mount -t tmpfs -o size=64k tmpfs {0} && mkdir -p {0}/toold \
             && head -c 16384 /dev/zero > {0}/ballast && exec \"$@\"",
            state.path().display()
        ),
        "sh".to_owned(),
    ];
    let daemon = TestDaemon::start_under(
        &wrapper,
        &[("XDG_STATE_HOME", state.path().to_str().unwrap())],
    );
    let work = daemon.work();
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client.create_session(&work, json!({})).await;
    std::fs::write(work.join("a.txt"), "a\n").expect("a file");
    // About 300 records of some 350 bytes fill 64 KiB; every call still runs.
    for n in 0..60 {
        let batch: Vec<Value> = (0..5)
            .map(|k| json!({"id": format!("r{n}_{k}"), "name": "read_file", "arguments": {"path": "a.txt"}}))
            .collect();
        let response = client.execute(&session, Value::Array(batch)).await;
        for result in results(&response) {
            assert_eq!(wire_error_type_or_ok(result), "ok", "{response}");
        }
    }
    let output = daemon
        .command()
        .args(["status", "--json"])
        .output()
        .expect("toold status");
    let status: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let audit = &status["audit"];
    assert!(audit["lost"].as_u64().unwrap_or(0) > 0, "{status:#}");
    assert!(
        audit["last_error"]
            .as_str()
            .is_some_and(|error| error.contains("No space left")),
        "{status:#}"
    );
    let text = daemon
        .command()
        .arg("status")
        .output()
        .expect("toold status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("FAILING:") && text.contains("records lost"),
        "{text}"
    );

    // Room again: the next write says, in the log itself, how many records were lost and
    // since when, and `verify` reports the gap (the chain holds around it).
    let lost = audit["lost"].as_u64().unwrap_or(0);
    let inside = PathBuf::from(format!("/proc/{}/root", daemon.pid())).join(
        state
            .path()
            .strip_prefix("/")
            .expect("an absolute temporary directory"),
    );
    std::fs::remove_file(inside.join("ballast")).expect("the ballast, through the daemon's root");
    let response = client
        .execute(
            &session,
            json!([{"id": "after", "name": "read_file", "arguments": {"path": "a.txt"}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "ok",
        "{response}"
    );
    let log = inside.join("toold/audit.jsonl");
    let gaps: Vec<Value> = records(&log)
        .into_iter()
        .filter(|record| record["kind"] == "records_lost")
        .collect();
    // One record for each time writing resumed (a write may fit in what room is left, and
    // the next not): together they count every record lost.
    let counted: u64 = gaps.iter().filter_map(|gap| gap["count"].as_u64()).sum();
    assert!(!gaps.is_empty());
    assert_eq!(counted, lost, "{gaps:?}");
    for gap in &gaps {
        assert!(
            gap["since"].is_string()
                && gap["why"]
                    .as_str()
                    .is_some_and(|why| why.contains("No space left")),
            "{gap}"
        );
    }
    assert!(
        calls(&log).iter().any(|call| call["call_id"] == "after"),
        "the call after the gap is recorded"
    );
    let log_arg = log.display().to_string();
    let (code, verified) = verify_json(&daemon, &["--log", &log_arg]);
    assert_eq!(code, Some(0), "{verified:#}");
    assert_eq!(verified["lost"].as_u64(), Some(lost), "{verified:#}");
    assert!(
        verified["notes"]
            .as_array()
            .is_some_and(|notes| notes.iter().any(|note| note
                .as_str()
                .is_some_and(|note| note.contains("lost since")))),
        "{verified:#}"
    );
}

/// Every context switch of every thread of process `pid` so far.
fn context_switches(pid: u32) -> u64 {
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the daemon's threads") {
        let Ok(status) = std::fs::read_to_string(task.expect("a thread").path().join("status"))
        else {
            continue; // a thread that ended meanwhile
        };
        for line in status.lines() {
            if let Some(count) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += count.trim().parse::<u64>().expect("a count");
            }
        }
    }
    switches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_no_answer_waits_for_is_written_soon_and_an_idle_daemon_sleeps() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::write(work.join("small.txt"), "small\n").expect("a file");
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client
        .create_session(&work, json!({"rules": {"allow": ["run_command"]}}))
        .await;
    // The read ends at once, the command two seconds later: the read's record is the
    // background flush's to write, long before the batch's response writes the rest.
    let batch = json!([
        {"id": "read", "name": "read_file", "arguments": {"path": "small.txt"}},
        {"id": "wait", "name": "run_command", "arguments": {"command": "sleep 2"}},
    ]);
    let running = tokio::spawn(async move {
        let response = client.execute(&session, batch).await;
        (client, response)
    });
    let log = audit_path(&daemon);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    let read_record = loop {
        let read = log.exists().then(|| {
            calls(&log)
                .into_iter()
                .find(|record| record["call_id"] == "read")
        });
        if let Some(Some(record)) = read {
            break record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the finished read's record was not written while the batch ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(read_record["outcome"], "ok");
    assert!(!running.is_finished(), "the batch was still running");
    let (_client, response) = running.await.expect("the batch");
    for result in results(&response) {
        assert_eq!(wire_error_type_or_ok(result), "ok", "{result}");
    }
    assert_eq!(calls(&log).len(), 2, "one record per call");

    // Idle now: nothing queued, so nothing wakes the daemon to write it (a flush on a timer
    // would switch its threads ten times a second).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = context_switches(daemon.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Saturating: a thread that ends in the window (a blocking-pool thread idle for its
    // keep-alive) takes its count with it.
    let switches = context_switches(daemon.pid()).saturating_sub(before);
    assert!(
        switches <= 4,
        "an idle daemon's threads switched {switches} times in 2 s"
    );
}

/// A call that may change something is on disk, with who allowed it, before it runs: a
/// daemon killed during the call leaves its `call_decided` record (the approver's identity
/// and answer, the arguments it ran with) and no `call` record, and the chain still holds.
#[tokio::test]
async fn a_call_is_recorded_as_decided_before_it_runs() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    let approver = daemon
        .connect(
            json!({"approvals": true}),
            answer_with(Arc::new(Mutex::new(Vec::new())), |_| {
                Reply::result(json!({"decision": "allow_once"}))
            }),
        )
        .await;
    let session = approver
        .create_session(&work, json!({"rules": {"ask": ["run_command(sleep *)"]}}))
        .await;
    let marker = work.join("started");
    let command = format!("touch {} && sleep 60", marker.display());
    let calling = {
        let peer = approver.peer.clone();
        let params = json!({"session_id": session, "calls": [
            {"id": "long", "name": "run_command", "arguments": {"command": command}}
        ]});
        tokio::spawn(async move { peer.request("tools/execute".to_owned(), Some(params)).await })
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.kill();
    let _ = calling.await;

    let log = audit_path(&daemon);
    let records = records(&log);
    let decided: Vec<&Value> = records
        .iter()
        .filter(|record| record["kind"] == "call_decided" && record["call_id"] == "long")
        .collect();
    assert_eq!(decided.len(), 1, "{records:#?}");
    assert_eq!(decided[0]["tool"], "run_command");
    assert_eq!(decided[0]["arguments"]["command"], command.as_str());
    assert_eq!(decided[0]["decision"]["by"], "approver", "{}", decided[0]);
    assert_eq!(
        decided[0]["decision"]["answer"], "allow_once",
        "{}",
        decided[0]
    );
    assert_eq!(
        decided[0]["decision"]["approver"]["pid"],
        std::process::id(),
        "{}",
        decided[0]
    );
    assert!(
        calls(&log).iter().all(|call| call["call_id"] != "long"),
        "the call never ended"
    );
    daemon.start_again();
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");
}

/// The newest records cut while the daemon is stopped: its seal, written at its stop, shows
/// the cut to `verify` with no daemon running, and the next start records it.
#[tokio::test]
async fn records_cut_while_the_daemon_is_stopped_are_seen_by_its_seal() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client.create_session(&work, json!({})).await;
    for n in 0..5 {
        client
            .execute(
                &session,
                json!([{"id": format!("f{n}"), "name": "find_files", "arguments": {"pattern": "*"}}]),
            )
            .await;
    }
    drop(client);
    daemon.stop();
    let log = audit_path(&daemon);
    let seal: Value = serde_json::from_slice(
        &std::fs::read(toold::audit::seal_path(&log)).expect("the seal written at the stop"),
    )
    .expect("JSON");
    assert_eq!(seal["at"], "stop", "{seal}");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(0), "{text}");

    let lines = records(&log);
    let text = std::fs::read_to_string(&log).expect("the log");
    let kept: Vec<&str> = text.lines().take(lines.len() - 2).collect();
    std::fs::write(&log, kept.join("\n") + "\n").expect("cut");
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("sealed at the daemon's stop") && text.contains("2 records missing"),
        "{text}"
    );
    daemon.start_again();
    let (code, text) = daemon.run_toold("audit", &["verify"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("no longer held record"), "{text}");
    assert!(
        records(&log)
            .iter()
            .any(|record| record["kind"] == "seal_broken"),
        "the start recorded it"
    );
}
