//! What the editor plugins' tests share (`tests/tests/editor_nvim.rs`, `editor_emacs.rs`): the
//! scenario a person watching an agent from an editor goes through, against the real daemon.
//! The editor runs a driver (`tests/editors/`) that answers each approval with the next of a
//! list of labels, in place of the person, and records each prompt in `DIR/prompts.jsonl` as
//! `{prompt, labels, preview, diff, pending, answered}`; it writes `DIR/attached` once it
//! watches the session (with `DIR/health.txt`, `DIR/picked` and `DIR/explain.json` when it
//! checks those), and, once `DIR/done` exists, the session's buffer to `DIR/buffer.txt`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::PATIENCE;
use crate::child::{KillOnDrop, wait_for_path};
use crate::daemon::{TestClient, TestDaemon, no_answers, results, wire_error_type_or_ok};

/// The labels the editor answers with, in order: the scenario's five approvals.
pub const ANSWERS: &str = "Allow once,Deny,Allow for this session,Allow once,Allow once";

/// The repository's root.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The prompts the editor recorded so far.
pub fn prompts(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("prompts.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a prompt record"))
        .collect()
}

async fn write(agent: &TestClient, session: &str, id: &str, path: &str, content: &str) -> Value {
    let response = agent
        .execute(
            session,
            json!([{"id": id, "name": "write_file", "arguments": {"path": path, "content": content}}]),
        )
        .await;
    results(&response)[0].clone()
}

/// The scenario: `start(daemon, session, dir)` starts the editor watching `session`. An agent
/// writes files through approvals the editor answers (allow once: the file with the previewed
/// content; deny: nothing; allow for this session: the identical call again unasked), runs a
/// command whose output reaches the session's buffer, has a command approved from its preview
/// (directory, commands, sandbox), and, after the daemon restarts, is answered by the editor
/// again.
pub async fn approve_from_the_editor(start: impl Fn(&TestDaemon, &str, &Path) -> Child) {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    let agent = daemon.connect(json!({}), no_answers()).await;
    let session = agent.create_session(&work, json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let editor = KillOnDrop(start(&daemon, &session, dir));
    wait_for_path(&dir.join("attached"));
    let picked = std::fs::read_to_string(dir.join("picked")).unwrap();
    assert!(picked.starts_with(&session), "the session picker: {picked}");
    let explained: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("explain.json")).unwrap()).unwrap();
    assert_eq!(explained["decision"], "allow", "{explained}");
    assert_eq!(explained["step"], "sandboxed", "{explained}");

    // Allow once: the file lands with the content the preview showed.
    let result = write(&agent, &session, "w1", "a.txt", "first line\n").await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "first line\n"
    );
    let asked = prompts(dir);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let labels: Vec<&str> = asked[0]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        labels[..2],
        ["Allow once", "Allow for this session"],
        "{labels:?}"
    );
    assert_eq!(labels[labels.len() - 2..], ["Deny", "Abort"], "{labels:?}");
    assert_eq!(asked[0]["diff"], true, "{}", asked[0]);
    assert!(
        asked[0]["preview"]
            .as_str()
            .unwrap()
            .lines()
            .any(|line| line == "+first line"),
        "{}",
        asked[0]
    );
    assert_eq!(asked[0]["pending"], "toold: 1 pending", "{}", asked[0]);

    // Deny: nothing written.
    let result = write(&agent, &session, "w2", "b.txt", "never\n").await;
    assert_ne!(wire_error_type_or_ok(&result), "ok", "{result}");
    assert!(!work.join("b.txt").exists());

    // Allow for this session: the identical call again runs unasked.
    let result = write(&agent, &session, "w3", "c.txt", "granted\n").await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    let result = write(&agent, &session, "w4", "c.txt", "granted\n").await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    assert_eq!(
        prompts(dir).len(),
        3,
        "the granted call was not asked again"
    );

    // A command's live output reaches the session's buffer.
    let response = agent
        .execute(
            &session,
            json!([{"id": "r1", "name": "run_command", "arguments": {"command": "echo live-output-marker"}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "ok",
        "{response}"
    );

    // A command that asks to leave its sandbox asks: its approval shows where it runs, what
    // it runs and the sandbox it would run in.
    let response = agent
        .execute(
            &session,
            json!([{"id": "r2", "name": "run_command", "arguments": {
                "command": "touch made.txt",
                "escalate": {"network": true},
                "justification": "the test asks"
            }}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "ok",
        "{response}"
    );
    assert!(work.join("made.txt").exists());
    let asked = prompts(dir);
    let preview = asked[3]["preview"].as_str().unwrap();
    for shown in [
        format!("cwd: {}", work.display()),
        "  touch made.txt".to_owned(),
        "sandbox: workspace_write, network open".to_owned(),
    ] {
        assert!(preview.contains(&shown), "{shown:?} not in {preview}");
    }
    assert_eq!(asked[3]["diff"], false, "{}", asked[3]);

    // The daemon restarts: the editor reconnects, attaches again, and answers.
    drop(agent);
    daemon.stop();
    daemon.start_again();
    let agent = daemon.connect(json!({}), no_answers()).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let snapshot = agent
            .request("session/get", json!({"session_id": session}))
            .await
            .expect("the session survived the restart");
        if snapshot["attached"].as_u64() >= Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the editor never attached again: {snapshot}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = write(&agent, &session, "w5", "d.txt", "after the restart\n").await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    assert_eq!(prompts(dir).len(), 5);

    std::fs::write(dir.join("done"), "").unwrap();
    editor.finished();
    let buffer = std::fs::read_to_string(dir.join("buffer.txt")).unwrap();
    for shown in [
        "▶ w1 write_file",
        "✓ w1",
        "approval of w2: deny",
        "live-output-marker",
        "reconnected to the daemon",
        "▶ w5 write_file",
    ] {
        assert!(
            buffer.contains(shown),
            "{shown:?} not in the buffer:\n{buffer}"
        );
    }
}
