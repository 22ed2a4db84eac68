//! `toold watch` following sessions as they come and go, and `toold sessions new` and `close`,
//! run as the real binary against a real daemon: a watch started before any session waits for
//! one, switches to each new session and says so, outlives the sessions it watched until
//! SIGTERM, and asks the approvals of the session it switched to; `--session ID` ends with its
//! session; `--json` has a line for each switch and close; a session made by hand has the cwd,
//! mode, rules and title asked for, and closing an unknown id is reported without stopping the
//! others.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, results, wire_error_type_or_ok};
use toold_tests::terminal::{Finished, Terminal};

/// `toold ARGS…` against `daemon`, run to its end (stdin empty).
fn toold(daemon: &TestDaemon, args: &[&str]) -> Output {
    let mut command: Command = daemon.command();
    command.args(args).stdin(Stdio::null());
    command.output().expect("run toold")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `toold sessions new ARGS…`: the id it printed, which must be all of its stdout.
fn new_session(daemon: &TestDaemon, args: &[&str]) -> String {
    let mut all = vec!["sessions", "new"];
    all.extend_from_slice(args);
    let output = toold(daemon, &all);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    let stdout = text(&output.stdout);
    let id = stdout.trim_end_matches('\n');
    assert!(
        id.starts_with("s_") && !id.contains(char::is_whitespace),
        "one id on stdout: {stdout:?}"
    );
    id.to_owned()
}

/// The daemon's sessions, by `session/list`.
async fn listed(client: &TestClient) -> Vec<Value> {
    client.request("session/list", json!({})).await.unwrap()["sessions"]
        .as_array()
        .expect("a list of sessions")
        .clone()
}

/// The next line `toold watch --json` prints, as JSON.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a line from toold watch within 60 s")
        .expect("read toold watch's stdout")
        .expect("toold watch still running");
    serde_json::from_str(&line).expect("a JSON line")
}

fn sigterm(pid: u32) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("send SIGTERM");
}

/// Waits `wait` and asserts that the terminal's command is still running then.
fn still_running_after(terminal: &mut Terminal, wait: Duration) {
    std::thread::sleep(wait);
    assert!(
        terminal.is_running(),
        "toold watch ended; the terminal shows:\n{}",
        terminal.screen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_started_first_waits_then_follows_each_new_session_until_sigterm() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "watched\n").unwrap();
    let mut watch = daemon.command();
    watch.arg("watch");
    let mut terminal = Terminal::spawn(watch);
    terminal.wait_for("no session yet; waiting for one");

    // A session made by hand, then one made by a client: each is watched in turn.
    let work = daemon.work().display().to_string();
    let by_hand = new_session(&daemon, &["--cwd", &work, "--title", "made by hand"]);
    terminal.wait_for(&format!(
        "watching session {by_hand} (made by hand) in {work}"
    ));
    let client = daemon.connect(json!({}), no_answers()).await;
    let by_client = client
        .create_session(&daemon.work(), json!({"title": "the client's"}))
        .await;
    terminal.wait_for(&format!(
        "watching session {by_client} (the client's) in {work}"
    ));

    // Only the watched session's calls are shown.
    for (session, id) in [(&by_hand, "in_first"), (&by_client, "in_second")] {
        client
            .execute(
                session,
                json!([{"id": id, "name": "read_file", "arguments": {"path": "a.txt"}}]),
            )
            .await;
    }

    // The first closed: nothing to say, the watch goes on with the second.
    let closed = toold(&daemon, &["sessions", "close", &by_hand]);
    assert_eq!(closed.status.code(), Some(0), "{}", text(&closed.stderr));
    still_running_after(&mut terminal, Duration::from_millis(1500));
    // The watched one closed: said, and the watch waits for the next.
    client
        .request("session/close", json!({"session_id": by_client}))
        .await
        .unwrap();
    terminal.wait_for(&format!(
        "session {by_client} was closed; waiting for the next"
    ));
    still_running_after(&mut terminal, Duration::from_millis(1500));
    let third = new_session(&daemon, &["--cwd", &work]);
    terminal.wait_for(&format!("watching session {third} (untitled) in {work}"));

    sigterm(terminal.pid());
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish_async().await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(stdout.contains("▶ in_second read_file"), "{stdout}");
    assert!(stdout.contains("in_second ✓ read_file ok"), "{stdout}");
    assert!(!stdout.contains("in_first"), "{stdout}");
    assert!(
        !screen.contains(&format!("session {by_hand} was closed")),
        "{screen}"
    );
}

/// Started before the session, the watch that switched to it is its approver: the call asked
/// about is answered on its terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_followed_has_its_approvals_asked_on_the_watching_terminal() {
    let daemon = TestDaemon::start_asking();
    let mut watch = daemon.command();
    watch.arg("watch");
    let terminal = Terminal::spawn(watch);
    terminal.wait_for("no session yet; waiting for one");
    // The owner approves nothing: only the watch can.
    let owner = daemon.connect(json!({}), no_answers()).await;
    let session = owner.create_session(&daemon.work(), json!({})).await;
    terminal.wait_for(&format!("watching session {session}"));

    let answering = tokio::task::spawn_blocking(move || {
        let mut terminal = terminal;
        terminal.wait_for("[a] abort?");
        terminal.type_line("y");
        terminal
    });
    let response = owner
        .execute(
            &session,
            json!([{"id": "t", "name": "run_command", "arguments": {"command": "touch approved"}}]),
        )
        .await;
    let terminal = answering.await.unwrap();
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "ok",
        "{response}"
    );
    assert!(daemon.work().join("approved").exists());
    assert!(
        terminal.screen().contains("touch approved"),
        "{}",
        terminal.screen()
    );
    sigterm(terminal.pid());
    let Finished { status, screen, .. } = terminal.finish_async().await;
    assert_eq!(status.code(), Some(0), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_session_id_stays_on_it_and_ends_when_it_closes() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let watched = client.create_session(&daemon.work(), json!({})).await;
    let mut watch = daemon.command();
    watch.args(["watch", "--session", &watched]);
    let mut terminal = Terminal::spawn(watch);
    terminal.wait_for(&format!("watching session {watched}"));

    // A newer session does not take it away.
    let newer = client.create_session(&daemon.work(), json!({})).await;
    still_running_after(&mut terminal, Duration::from_millis(1500));
    assert!(!terminal.screen().contains(&newer), "{}", terminal.screen());

    client
        .request("session/close", json!({"session_id": watched}))
        .await
        .unwrap();
    let Finished { status, screen, .. } = terminal.finish_async().await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(
        screen.contains(&format!("session {watched} was closed")),
        "{screen}"
    );
    assert!(!screen.contains("waiting for the next"), "{screen}");
}

/// With --json, a switch of session is a `watch/session` line and a close a `watch/closed`
/// line, among the session's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_json_has_a_line_for_each_session_watched_and_closed() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "json\n").unwrap();
    let mut watch = tokio::process::Command::from(daemon.command());
    watch
        .args(["watch", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut watch = watch.spawn().expect("start toold watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("piped stdout")).lines();

    let client = daemon.connect(json!({}), no_answers()).await;
    let first = client
        .create_session(&daemon.work(), json!({"mode": "plan"}))
        .await;
    let line = next_line(&mut lines).await;
    assert_eq!(line["method"], "watch/session", "{line}");
    assert_eq!(line["params"]["session_id"], first.as_str(), "{line}");
    assert_eq!(line["params"]["mode"], "plan", "{line}");
    assert_eq!(
        line["params"]["cwd"],
        daemon.work().display().to_string(),
        "{line}"
    );
    client
        .execute(
            &first,
            json!([{"id": "r", "name": "read_file", "arguments": {"path": "a.txt"}}]),
        )
        .await;
    let mut methods = Vec::new();
    loop {
        let line = next_line(&mut lines).await;
        assert_eq!(line["params"]["session_id"], first.as_str(), "{line}");
        let method = line["method"].as_str().unwrap().to_owned();
        methods.push(method.clone());
        if method == "batch/done" {
            break;
        }
    }
    assert_eq!(
        methods,
        [
            "batch/start",
            "tool/call_start",
            "tool/result",
            "tool/call_done",
            "batch/done"
        ]
    );
    client
        .request("session/close", json!({"session_id": first}))
        .await
        .unwrap();
    let line = next_line(&mut lines).await;
    assert_eq!(
        line,
        json!({"method": "watch/closed", "params": {"session_id": first}})
    );
    let second = client.create_session(&daemon.work(), json!({})).await;
    let line = next_line(&mut lines).await;
    assert_eq!(line["method"], "watch/session", "{line}");
    assert_eq!(line["params"]["session_id"], second.as_str(), "{line}");

    sigterm(watch.id().expect("a running toold watch"));
    let status = tokio::time::timeout(Duration::from_secs(60), watch.wait())
        .await
        .expect("toold watch ends on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_new_makes_the_session_asked_for_and_close_reports_unknown_ids() {
    let daemon = TestDaemon::start();
    let project = daemon.work().join("project");
    std::fs::create_dir(&project).unwrap();
    let project_text = project.display().to_string();
    let id = new_session(
        &daemon,
        &[
            "--cwd",
            &project_text,
            "--mode",
            "plan",
            "--allow",
            "run_command(cargo test *)",
            "--deny",
            "run_command(git push *)",
            "--title",
            "by hand",
        ],
    );
    let client = daemon.connect(json!({}), no_answers()).await;
    let sessions = listed(&client).await;
    let session = sessions
        .iter()
        .find(|session| session["session_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} in {sessions:#?}"));
    assert_eq!(session["cwd"], project_text.as_str(), "{session}");
    assert_eq!(session["mode"], "plan", "{session}");
    assert_eq!(session["title"], "by hand", "{session}");
    assert_eq!(
        session["rules"]["allow"],
        json!(["run_command(cargo test *)"]),
        "{session}"
    );
    assert_eq!(
        session["rules"]["deny"],
        json!(["run_command(git push *)"]),
        "{session}"
    );
    // Nobody stays attached once the command is done; the session stays.
    assert_eq!(session["attached"], 0, "{session}");
    // `toold sessions` alone still lists, the new one among them.
    let table = toold(&daemon, &["sessions"]);
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));
    assert!(text(&table.stdout).contains(&id), "{}", text(&table.stdout));

    // A wrong mode is refused before anything is made.
    let refused = toold(&daemon, &["sessions", "new", "--mode", "sometimes"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("unknown mode `sometimes`"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(listed(&client).await.len(), 1);

    // The unknown id is reported; the known ones are closed all the same, before and after it.
    let other = new_session(&daemon, &["--cwd", &project_text]);
    let closed = toold(&daemon, &["sessions", "close", &id, "s_bogus", &other]);
    assert_eq!(closed.status.code(), Some(1), "{}", text(&closed.stderr));
    assert!(text(&closed.stdout).is_empty(), "{}", text(&closed.stdout));
    let stderr = text(&closed.stderr);
    assert!(stderr.contains("no session s_bogus"), "{stderr}");
    assert!(
        !stderr.contains(&id) && !stderr.contains(&other),
        "{stderr}"
    );
    assert_eq!(listed(&client).await, Vec::<Value>::new());

    // Every id known: exit 0.
    let last = new_session(&daemon, &[]);
    let closed = toold(&daemon, &["sessions", "close", &last]);
    assert_eq!(closed.status.code(), Some(0), "{}", text(&closed.stderr));
    // An id is required.
    let none = toold(&daemon, &["sessions", "close"]);
    assert_eq!(none.status.code(), Some(2), "{}", text(&none.stderr));
}
