//! What a command may do to the daemon: reach it through its socket (in every tier of the
//! socket's protection), signal, trace or read it, move its socket directory, or make a
//! session whose root holds the socket.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon};
use toold_tests::require;

use super::{
    Places, connected, output, quoted, run, sandbox_report, sandboxed, sandboxed_on, session,
    without,
};

/// Lines that try to reach the daemon through its socket: Python directly and through
/// `/proc/<daemon pid>/root`, `socat`, `toold status`, and Python through a hard link to the
/// socket made outside the sandbox (only the peer check stops that one). Each writes
/// `initialize` and a `session/create` and prints what it got back.
fn lines_reaching_the_daemon(daemon: &TestDaemon, project: &Path, hard_link: &Path) -> Vec<String> {
    let socket = daemon.socket();
    let through_proc = PathBuf::from(format!("/proc/{}/root", daemon.pid()))
        .join(socket.strip_prefix("/").unwrap());
    let messages = project.join("messages.ndjson");
    std::fs::write(
        &messages,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n\
         {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"session/create\",\"params\":{\"cwd\":\"{}\"}}\n"
            .replace("{}", &project.display().to_string()),
    )
    .unwrap();
    let python = |path: &Path| {
        format!(
            "python3 -c \"import socket,time; s=socket.socket(socket.AF_UNIX); s.connect('{}'); \
             s.sendall(open('{}','rb').read()); time.sleep(0.5); s.settimeout(5); \
             print(s.recv(65536))\"",
            path.display(),
            messages.display()
        )
    };
    let toold = toold_tests::daemon::toold_binary();
    vec![
        python(&socket),
        python(&through_proc),
        python(hard_link),
        format!(
            "socat -t 5 - UNIX-CONNECT:{} < {}",
            socket.display(),
            messages.display()
        ),
        format!(
            "TOOLD_SOCKET={} {} status",
            socket.display(),
            toold.display()
        ),
    ]
}

/// What a command that reached the daemon would have made: another session.
async fn session_count(client: &TestClient) -> usize {
    let list = client.request("session/list", json!({})).await.unwrap();
    list["sessions"].as_array().unwrap().len()
}

/// Runs every line of [`lines_reaching_the_daemon`] in a session with `sandbox`; returns
/// the results, and whether any created a session.
async fn reach_the_daemon(daemon: &TestDaemon, sandbox: Value) -> (Vec<Value>, bool) {
    let client = connected(daemon).await;
    let places = Places::new();
    let hard_link = places.project.join("hard-link.sock");
    std::fs::hard_link(daemon.socket(), &hard_link).unwrap();
    let session = session(&client, &places.project, sandbox).await;
    let sessions_before = session_count(&client).await;
    let mut results = Vec::new();
    for line in lines_reaching_the_daemon(daemon, &places.project, &hard_link) {
        results.push(run(&client, &session, &line).await);
    }
    let created = session_count(&client).await != sessions_before;
    (results, created)
}

/// Whether a line's output shows an answer from the daemon.
fn answered(result: &Value) -> bool {
    let printed = output(result);
    printed.contains("protocol_version") || printed.contains("toold is up")
}

fn require_socat(test: &str) -> bool {
    require::program(test, "socat", &[], "apt-get install socat").is_some()
}

#[tokio::test]
async fn commands_cannot_reach_the_daemon_through_its_socket() {
    let test = "commands_cannot_reach_the_daemon_through_its_socket";
    if !require_socat(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some("[sandbox]\nallow_unsandboxed = true\n"));
    let (results, created) = reach_the_daemon(&daemon, json!({})).await;
    for result in &results {
        assert!(
            !answered(result),
            "the daemon answered a sandboxed command: {result}"
        );
    }
    assert!(!created, "a sandboxed command created a session");

    // The control: unsandboxed, the same lines reach it (the one through /proc only with
    // the power to trace the non-dumpable daemon, which root has).
    let (results, created) = reach_the_daemon(&daemon, json!({"mode": "off"})).await;
    for (index, result) in results.iter().enumerate() {
        assert!(index == 1 || answered(result), "{result}");
    }
    assert!(created);
}

#[tokio::test]
async fn commands_cannot_signal_trace_or_read_the_daemon() {
    let Some(strace) = require::program(
        "commands_cannot_signal_trace_or_read_the_daemon",
        "strace",
        &[],
        "apt-get install strace",
    ) else {
        return;
    };
    let (daemon, client, _places, session) = sandboxed().await;
    let pid = daemon.pid();
    for line in [
        format!("kill -STOP {pid}"),
        format!("kill -TERM {pid}"),
        format!("kill -KILL {pid}"),
        format!("timeout 5 {} -p {pid} -e trace=none", strace.display()),
        format!("cat /proc/{pid}/environ"),
        format!("cat /proc/{pid}/task/{pid}/environ"),
        format!("readlink /proc/{pid}/fd/0"),
        format!("ls /proc/{pid}/cwd/"),
        format!("head -c 16 /proc/{pid}/mem"),
    ] {
        let result = run(&client, &session, &line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert!(!output(&result).contains("TOOLD"), "{line}: {result}");
    }
    // Every process it may signal, which is none outside its own sandbox.
    run(&client, &session, "kill -KILL -1").await;
    // Still serving, not stopped.
    let state = toold_tests::procs::stat_fields(pid).unwrap()[0].clone();
    assert!(
        matches!(state.as_str(), "S" | "R"),
        "the daemon is in state {state}"
    );
    assert_eq!(run(&client, &session, "echo alive").await["ok"], true);
}

#[tokio::test]
async fn a_root_holding_the_daemon_socket_is_refused() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let refused = client
        .request(
            "session/create",
            json!({"cwd": daemon.root(), "roots": [daemon.root()]}),
        )
        .await
        .unwrap_err();
    assert!(format!("{refused:?}").contains("socket"), "{refused:?}");
}

/// Without user namespaces the socket is kept out by the peer check alone, and the rest of
/// the sandbox holds.
#[tokio::test]
async fn without_user_namespaces_the_peer_check_keeps_commands_out() {
    let test = "without_user_namespaces_the_peer_check_keeps_commands_out";
    if !require_socat(test) {
        return;
    }
    let daemon = TestDaemon::start_under_with_config(
        &without(&["--user-namespaces"]),
        "[sandbox]\nallow_unsandboxed = true\n",
    );
    let report = sandbox_report(&daemon).await;
    assert_eq!(report["daemon_socket"], "peer_check", "{report}");
    assert_eq!(report["processes"], "sweep", "{report}");
    // Every protection that rests on the namespaces is named, each with why.
    let namespaced = json!([
        "unchanged_outside",
        "git_metadata",
        "private_tmp",
        "hidden_paths",
        "local_services",
        "pid_namespace"
    ]);
    assert_eq!(report["degraded"], namespaced, "{report}");
    for name in namespaced.as_array().unwrap() {
        let why = report["why"][name.as_str().unwrap()]
            .as_str()
            .unwrap_or_default();
        assert!(why.contains("Operation not permitted"), "{name}: {report}");
    }

    let (results, created) = reach_the_daemon(&daemon, json!({})).await;
    for result in &results {
        assert!(
            !answered(result),
            "the daemon answered a sandboxed command: {result}"
        );
        assert_eq!(result["metadata"]["sandbox"]["degraded"], namespaced);
    }
    assert!(!created, "a sandboxed command created a session");
    let (results, created) = reach_the_daemon(&daemon, json!({"mode": "off"})).await;
    assert!(answered(&results[0]), "{results:#?}");
    assert!(created);

    // Writes are still confined.
    let (client, places, session) = sandboxed_on(&daemon).await;
    let before = Places::snapshot(&places.outside);
    let result = run(
        &client,
        &session,
        &format!("echo x > {}/new", quoted(&places.outside)),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(Places::snapshot(&places.outside), before);
}

/// The daemon's socket directory under `/tmp` (as for the `/tmp/toold-$UID` fallback): a
/// command's `/tmp` is the session's own, where the socket's directory is not; neither it nor
/// a parent can be moved away or removed, so no decoy takes its place and the socket stays
/// where clients find it.
#[tokio::test]
async fn the_socket_directory_cannot_be_moved_or_removed() {
    let (daemon, client, places, session) = sandboxed().await;
    let socket_dir = daemon.socket().parent().unwrap().to_owned();
    let run_dir = socket_dir.parent().unwrap().to_owned();
    assert!(run_dir.starts_with("/tmp"), "{}", run_dir.display());
    for (index, line) in [
        format!("mv {} {}-moved", run_dir.display(), run_dir.display()),
        format!("mv {} {}-moved", socket_dir.display(), socket_dir.display()),
        format!("rm -rf {}", run_dir.display()),
        format!("rm {}", daemon.socket().display()),
    ]
    .iter()
    .enumerate()
    {
        // In a script, out of the permission engine's sight (it protects toold's directories
        // from lines that name them): only the sandbox stands in the way.
        let script = places.project.join(format!("move-{index}.sh"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let result = run(&client, &session, &format!("bash {}", script.display())).await;
        assert!(daemon.socket().exists(), "{line}: {result}");
        assert!(socket_dir.is_dir() && run_dir.is_dir(), "{line}: {result}");
    }
    assert!(daemon.socket().exists());
    // Still served where it was.
    let again = connected(&daemon).await;
    assert!(again.request("session/list", json!({})).await.is_ok());
}
