//! Stopping a call or the daemon: cancellation three ways (`tools/cancel`, `$/cancelRequest`,
//! the submitter leaving) and the drain on SIGTERM, with the command's processes gone
//! afterwards.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers};
use toold_tests::procs::{live_processes_with_variable, process_alive, shell_parser_workers};

use super::{command_session, is_call_event, params_of, result_of};
use toold_tests::PATIENCE;

/// A command that leaves processes behind three ways (a background job, one in a new session,
/// the shell itself) and says `started` once they exist.
const LINGERING_COMMAND: &str = "sleep 300 & setsid sleep 300 & echo started; sleep 300";

/// The variable that tags a test's command processes, found in `/proc/*/environ`.
const MARK_VAR: &str = "E2E_CANCEL_MARK";

fn unique_mark(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Live processes whose environment holds `MARK_VAR=mark`, with their command lines.
fn marked_processes(mark: &str) -> Vec<(u32, String)> {
    live_processes_with_variable(&format!("{MARK_VAR}={mark}"))
}

/// Waits (at most 5 s) until no process carries the mark.
async fn assert_processes_gone(mark: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let alive = marked_processes(mark);
        if alive.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "processes of the canceled command outlived it: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lingering_call(mark: &str) -> Value {
    json!([{
        "id": "lingering",
        "name": "run_command",
        "arguments": {"command": LINGERING_COMMAND, "env": {MARK_VAR: mark}},
    }])
}

/// Waits on `watcher`'s events until the command said `started`, then until its processes are
/// there to be found (at most 5 s): a background process may still be inside its `execve`,
/// when its `/proc/PID/environ` reads empty, and a loaded machine widens that moment.
async fn wait_until_started(watcher: &mut TestClient, mark: &str) {
    watcher
        .next_notification_matching(|n| {
            is_call_event(n, "tool/output", "lingering")
                && params_of(&n.params)["data"]
                    .as_str()
                    .is_some_and(|data| data.contains("started"))
        })
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let found = marked_processes(mark);
        if found.len() >= 3 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command's processes are not visible: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tools_cancel_stops_a_command_and_its_processes() {
    let daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("tools-cancel");
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut client, &mark).await;

    let canceled = client
        .request("tools/cancel", json!({"session_id": session_id}))
        .await
        .expect("tools/cancel");
    assert_eq!(canceled["canceled"], json!(["lingering"]));
    let response = running
        .await
        .expect("the request task")
        .expect("tools/execute");
    let result = result_of(&response, "lingering");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn cancel_request_stops_a_command_and_still_gets_its_response() {
    let daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("cancel-request");
    let request = client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    );
    let request_id = request.id();
    let running = tokio::spawn(request);
    wait_until_started(&mut client, &mark).await;

    client
        .peer
        .notify("$/cancelRequest", Some(json!({"id": request_id})))
        .await
        .expect("send $/cancelRequest");
    let response = running
        .await
        .expect("the request task")
        .expect("tools/execute still answers");
    let result = result_of(&response, "lingering");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn the_submitter_disconnecting_stops_its_command() {
    let daemon = TestDaemon::start();
    let (submitter, session_id) = command_session(&daemon).await;
    let mut watcher = daemon.connect(json!({}), no_answers()).await;
    watcher
        .request("session/attach", json!({"session_id": session_id}))
        .await
        .expect("attach the watcher");
    let mark = unique_mark("disconnect");
    let running = tokio::spawn(submitter.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut watcher, &mark).await;

    submitter.peer.close();
    assert!(
        running.await.expect("the request task").is_err(),
        "a closed connection gets no response"
    );
    let done = watcher
        .next_notification_matching(|n| is_call_event(n, "tool/result", "lingering"))
        .await;
    let result = &params_of(&done.params)["result"];
    assert_eq!(result["error_type"], "canceled", "{result}");
    watcher
        .next_notification_matching(|n| n.method == "batch/done")
        .await;
    assert_processes_gone(&mark).await;
}

#[tokio::test]
async fn sigterm_lets_a_running_batch_finish_and_keeps_the_session() {
    let mut daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    // The command waits for a file the test creates once the daemon is draining: the batch is
    // then certainly running across the SIGTERM, however slow the machine.
    let gate = daemon.work().join("go");
    let command = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo done",
        gate.display()
    );
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": [
            {"id": "draining", "name": "run_command", "arguments": {"command": command}},
        ]})),
    ));
    client
        .next_notification_matching(|n| {
            n.method == "tool/call_start" && params_of(&n.params)["call"]["id"] == "draining"
        })
        .await;

    daemon.send_sigterm();
    wait_until_refusing(&daemon.socket()).await;
    std::fs::write(&gate, "").expect("open the gate");
    let response = running
        .await
        .expect("the request task")
        .expect("the batch's response arrives during the drain");
    let result = result_of(&response, "draining");
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["content"], "done\n");
    let status = daemon.wait_for_exit().await;
    assert!(status.success(), "the daemon exited with {status}");

    daemon.start_again();
    let client = daemon.connect(json!({}), no_answers()).await;
    let snapshot = client
        .request("session/get", json!({"session_id": session_id}))
        .await
        .expect("the session survived the restart");
    assert_eq!(snapshot["rules"]["allow"], json!(["run_command"]));
    assert_eq!(snapshot["running_batches"], json!([]));
}

/// Waits until the socket refuses connections: the daemon has stopped accepting.
async fn wait_until_refusing(socket: &Path) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::net::UnixStream::connect(socket).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the daemon still accepts 30 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stop signals are listened for before the socket exists: a SIGTERM sent the moment the
/// first answer arrives (a script, or systemd stopping a unit it just started) drains and
/// exits 0 instead of killing the daemon. Repeated, because the window was a race.
#[test]
fn a_sigterm_right_after_the_first_answer_drains_and_exits_0() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Instant;

    for attempt in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = root.join("run/toold/toold.sock");
        let mut child = toold_tests::daemon::toold_command_in(root)
            .args(["serve", "--allow-root"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + PATIENCE;
        let stream = loop {
            match UnixStream::connect(&socket) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Err(err) => panic!("attempt {attempt}: the daemon never served: {err}"),
            }
        };
        (&stream)
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"capabilities\":{}}}\n")
            .unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        assert!(line.contains("\"result\""), "attempt {attempt}: {line}");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "attempt {attempt}: the daemon exited with {status}"
        );
    }
}

/// Stopping the daemon while a command (and processes it left in the background and in a new
/// session) runs past the drain's grace: every call still gets its answer (`canceled`), the
/// daemon exits 0, and no process it started is left.
#[tokio::test]
async fn stopping_the_daemon_leaves_no_process_it_started() {
    let mut daemon = TestDaemon::start();
    let (mut client, session_id) = command_session(&daemon).await;
    let mark = unique_mark("daemon-stop");
    let running = tokio::spawn(client.peer.request(
        "tools/execute",
        Some(json!({"session_id": session_id, "calls": lingering_call(&mark)})),
    ));
    wait_until_started(&mut client, &mark).await;
    let parsers = shell_parser_workers(daemon.pid());
    assert!(
        !parsers.is_empty(),
        "the command's line was parsed in a worker"
    );
    daemon.send_sigterm();
    let response = tokio::time::timeout(PATIENCE, running)
        .await
        .expect("an answer within the grace")
        .expect("the request task")
        .expect("the batch's response arrives during the drain");
    assert_eq!(result_of(&response, "lingering")["error_type"], "canceled");
    let status = daemon.wait_for_exit().await;
    assert!(status.success(), "the daemon exited with {status}");
    assert_processes_gone(&mark).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while parsers.iter().any(|pid| process_alive(*pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "shell parser workers outlived the daemon: {parsers:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
