//! The daemon process and its socket: the socket's mode and directory, a second daemon on a
//! live socket, a stale socket replaced, the connection limit, and `toold check-config`.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;
use toold_tests::daemon::{RawConnection, TestDaemon, Wire, no_answers};

use super::{OVERLOADED, code_of};
use toold_tests::PATIENCE;

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o7777
}

/// Runs a `toold` command to its end (bounded by the patience); returns its status and stderr.
fn run_to_end(mut command: Command) -> (ExitStatus, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toold");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for toold") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("toold did not exit within {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    (status, stdout, stderr)
}

// ---------------------------------------------------------------------------------------------
// The socket.

#[tokio::test]
async fn the_socket_is_0600_in_a_0700_directory() {
    let daemon = TestDaemon::start();
    let socket = daemon.socket();
    assert_eq!(mode_of(&socket), 0o600);
    assert_eq!(mode_of(socket.parent().expect("its directory")), 0o700);
}

#[tokio::test]
async fn a_second_daemon_on_a_live_socket_exits_with_a_clear_error() {
    let daemon = TestDaemon::start();
    let mut command = daemon.command();
    command.arg("serve").arg("--allow-root");
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "the second daemon exited with {status}");
    assert!(stderr.contains("already serving"), "{stderr}");
    // The first one is unharmed.
    let client = daemon.connect(json!({}), no_answers()).await;
    client
        .request("session/list", json!({}))
        .await
        .expect("the first daemon still serves");
}

#[tokio::test]
async fn a_stale_socket_left_by_a_killed_daemon_is_replaced() {
    let mut daemon = TestDaemon::start();
    let first_instance = {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        connection.initialize().await["instance_id"].clone()
    };
    daemon.kill();
    assert!(
        daemon.socket().exists(),
        "SIGKILL leaves the socket file behind"
    );
    daemon.start_again();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let init = connection.initialize().await;
    assert_ne!(init["instance_id"], first_instance, "a new daemon answers");
    assert_eq!(mode_of(&daemon.socket()), 0o600);
}

/// A socket that still accepts after the process that made it listen died (a child it had
/// just started holds its descriptor) is stale, not another daemon: a new daemon replaces it.
/// A real one, made by a Python process that forks and exits, its child keeping the listener.
#[tokio::test]
async fn a_socket_whose_listener_died_is_replaced_though_it_still_accepts() {
    let mut daemon = TestDaemon::start();
    daemon.kill();
    std::fs::remove_file(daemon.socket()).expect("remove the killed daemon's socket file");
    let holder = Command::new("python3")
        .arg("-c")
        .arg(
            "import os, socket, sys, time\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.bind(sys.argv[1])\n\
             s.listen(8)\n\
             child = os.fork()\n\
             if child == 0:\n    null = os.open(os.devnull, os.O_RDWR)\n    \
             os.dup2(null, 1)\n    os.dup2(null, 2)\n    time.sleep(60)\n    os._exit(0)\n\
             print(child, flush=True)\n",
        )
        .arg(daemon.socket())
        .stdout(Stdio::piped())
        .output()
        .expect("run python3");
    assert!(holder.status.success(), "{holder:?}");
    let holder: i32 = String::from_utf8_lossy(&holder.stdout)
        .trim()
        .parse()
        .expect("the holder's pid");
    let holder = nix::unistd::Pid::from_raw(holder);
    assert!(
        std::os::unix::net::UnixStream::connect(daemon.socket()).is_ok(),
        "the old socket still accepts"
    );

    daemon.start_again();
    let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let init = connection.initialize().await;
    assert_eq!(init["protocol_version"], 1, "{init}");
    let _ = nix::sys::signal::kill(holder, nix::sys::signal::Signal::SIGKILL);
}

// ---------------------------------------------------------------------------------------------
// The connection limit.

/// A raw connection that the daemon serves, retried while the daemon still counts connections
/// that are closing (such as the harness's readiness probe, which connects and leaves at once).
async fn served_connection(daemon: &TestDaemon) -> RawConnection {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut connection = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
        let response = connection
            .call(0, "initialize", json!({"protocol_version": 1}))
            .await;
        if response.get("error").is_none() {
            return connection;
        }
        assert_eq!(code_of(&response), OVERLOADED, "{response}");
        assert!(Instant::now() < deadline, "never served: {response}");
        drop(connection);
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn connections_over_max_connections_are_refused_as_overloaded() {
    let daemon = TestDaemon::start_with_config(Some("max_connections = 2\n"));
    let mut first = served_connection(&daemon).await;
    let mut second = served_connection(&daemon).await;
    let mut third = RawConnection::connect(&daemon.socket(), Wire::Ndjson).await;
    let refused = third
        .call(1, "initialize", json!({"protocol_version": 1}))
        .await;
    assert_eq!(code_of(&refused), OVERLOADED, "{refused}");
    let refused_again = third.call(2, "session/list", json!({})).await;
    assert_eq!(code_of(&refused_again), OVERLOADED);
    assert_eq!(
        first.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );
    assert_eq!(
        second.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );

    // Once the refused one and a served one leave, their slots are free again.
    drop(third);
    drop(first);
    let mut later = served_connection(&daemon).await;
    assert_eq!(
        later.call_ok(1, "session/list", json!({})).await["sessions"],
        json!([])
    );
}

#[tokio::test]
async fn a_burst_of_connections_cannot_exceed_max_connections() {
    let daemon = TestDaemon::start_with_config(Some("max_connections = 2\n"));
    let mut served = served_connection(&daemon).await;
    // Three connections at once: only the first of them fits.
    let mut burst = Vec::new();
    for _ in 0..3 {
        burst.push(RawConnection::connect(&daemon.socket(), Wire::Ndjson).await);
    }
    let mut codes = Vec::new();
    for connection in &mut burst {
        let response = connection
            .call(1, "initialize", json!({"protocol_version": 1}))
            .await;
        codes.push(response.get("error").map(|_| code_of(&response)));
    }
    // At most the one free slot is used: the others are refused. (The slot of a connection
    // that just left, such as the start-up probe, may still be held: then none is served.)
    let served_in_burst = codes.iter().filter(|code| code.is_none()).count();
    assert!(served_in_burst <= 1, "{codes:?}");
    assert!(
        codes
            .iter()
            .all(|code| code.is_none() || *code == Some(OVERLOADED)),
        "{codes:?}"
    );
    served.call_ok(1, "session/list", json!({})).await;
}

// ---------------------------------------------------------------------------------------------
// toold check-config.

#[tokio::test]
async fn check_config_accepts_a_good_file_and_names_the_key_of_a_bad_one() {
    let daemon = TestDaemon::start();
    let good = daemon.root().join("good.toml");
    std::fs::write(&good, "max_connections = 8\nallow_bypass = true\n").expect("good file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&good);
    let (status, stdout, stderr) = run_to_end(command);
    assert!(status.success(), "{status}: {stderr}");
    assert!(stdout.contains("valid"), "{stdout}");

    let wrong_type = daemon.root().join("wrong-type.toml");
    std::fs::write(&wrong_type, "max_connections = \"many\"\n").expect("bad file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&wrong_type);
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "a bad file is refused");
    assert!(stderr.contains("max_connections"), "{stderr}");

    let unknown_key = daemon.root().join("unknown-key.toml");
    std::fs::write(&unknown_key, "max_conections = 2\n").expect("bad file");
    let mut command = daemon.command();
    command.arg("check-config").arg(&unknown_key);
    let (status, _, stderr) = run_to_end(command);
    assert!(!status.success(), "an unknown key is refused");
    assert!(stderr.contains("max_conections"), "{stderr}");
}
