//! Socket activation end to end under `systemd-socket-activate` (Debian package `systemd`):
//! `toold serve` takes the inherited socket, answers a request on it, and tells the test's
//! `NOTIFY_SOCKET` `READY=1`, `WATCHDOG=1` and, on SIGTERM, `STOPPING=1`, then exits 0. And
//! activation variables meant for another process (inherited by a shell) are ignored.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::PathBuf;
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use toold_tests::PATIENCE;
use toold_tests::child::{KillOnDrop, wait_for_path_made_by};
use toold_tests::daemon::{TestDaemon, no_answers, toold_binary};

/// The program activated and its arguments: the real daemon.
fn activated_program() -> (PathBuf, Vec<String>) {
    (toold_binary(), vec!["serve".into(), "--allow-root".into()])
}

/// Where Debian's `systemd` package puts the tool when it is not on `PATH`.
const SOCKET_ACTIVATE_PLACES: &[&str] = &[
    "/lib/systemd/systemd-socket-activate",
    "/usr/lib/systemd/systemd-socket-activate",
];

/// The watchdog timeout given to the program: a ping every 200 ms.
const WATCHDOG_USEC: u32 = 400_000;

/// Receives notifications until one has the line `wanted`; returns every message seen.
fn receive_until(notify: &UnixDatagram, wanted: &str, seen: &mut Vec<String>) {
    let mut buffer = [0u8; 4096];
    while !seen
        .iter()
        .any(|message| message.lines().any(|line| line == wanted))
    {
        let len = notify.recv(&mut buffer).unwrap_or_else(|error| {
            panic!("no {wanted} within {PATIENCE:?} ({error}); got {seen:?}")
        });
        seen.push(String::from_utf8_lossy(&buffer[..len]).into_owned());
    }
}

#[test]
fn an_activated_daemon_serves_the_inherited_socket_and_notifies() {
    let Some(socket_activate) = toold_tests::require::program(
        "an_activated_daemon_serves_the_inherited_socket_and_notifies",
        "systemd-socket-activate",
        SOCKET_ACTIVATE_PLACES,
        "Debian: apt-get install systemd",
    ) else {
        return;
    };
    // Private, as the daemon's directories must be; its state and config live here too.
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 700");
    let socket = temp.path().join("toold.sock");
    let notify_path = temp.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("bind NOTIFY_SOCKET");
    notify
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");

    let (program, program_args) = activated_program();
    let child = Command::new(&socket_activate)
        .arg("--listen")
        .arg(&socket)
        .arg("--fdname=toold")
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg(format!("--setenv=WATCHDOG_USEC={WATCHDOG_USEC}"))
        .arg(format!(
            "--setenv=XDG_STATE_HOME={}",
            temp.path().join("state").display()
        ))
        .arg(format!(
            "--setenv=XDG_CONFIG_HOME={}",
            temp.path().join("config").display()
        ))
        .arg(&program)
        .args(&program_args)
        .spawn()
        .expect("start systemd-socket-activate");
    // Killed if the test ends before it exited.
    let mut activated = KillOnDrop(child);

    // systemd-socket-activate listens first and starts the program at the first connection.
    wait_for_path_made_by(&socket, &mut activated.0, "systemd-socket-activate");
    let mut stream = UnixStream::connect(&socket).expect("connect to the activation socket");
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");

    // The daemon never writes first: ask, as a client would.
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1,"client_info":{"name":"activation-test","version":"0"}}}"#;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .expect("send initialize");
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .expect("read the answer");
    let answer: serde_json::Value = serde_json::from_str(&line)
        .unwrap_or_else(|error| panic!("not a JSON line ({error}): {line:?}"));
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(
        answer["result"]["server_info"]["name"], "toold",
        "not toold's initialize result: {answer}"
    );

    let mut notifications = Vec::new();
    receive_until(&notify, "READY=1", &mut notifications);
    receive_until(&notify, "WATCHDOG=1", &mut notifications);

    // systemd stops a service with SIGTERM; the daemon drains, says so, and exits 0.
    kill(Pid::from_raw(activated.0.id() as i32), Signal::SIGTERM).expect("SIGTERM");
    let status = activated
        .wait_within(PATIENCE)
        .expect("the program did not exit after SIGTERM");
    assert!(status.success(), "{status}");
    receive_until(&notify, "STOPPING=1", &mut notifications);
}

/// A daemon started from a shell that inherited another process's `LISTEN_*` variables (a
/// terminal of a socket-activated service) was passed nothing: it ignores them, as
/// sd_listen_fds(3) says, whatever they hold, listens on its own path, and its commands still
/// never see them.
#[tokio::test]
async fn activation_variables_meant_for_another_process_are_ignored() {
    let inherited: [&[(&str, &str)]; 4] = [
        &[
            ("LISTEN_PID", "1"),
            ("LISTEN_FDS", "1"),
            ("LISTEN_FDNAMES", "x"),
        ],
        &[
            ("LISTEN_PID", "1"),
            ("LISTEN_FDS", "many"),
            ("LISTEN_FDNAMES", "a:b:c"),
        ],
        &[("LISTEN_PID", "not a pid"), ("LISTEN_FDS", "1")],
        &[("LISTEN_FDS", "1"), ("LISTEN_FDNAMES", "toold")],
    ];
    for variables in inherited {
        // Starting waits until the daemon listens on its own socket path.
        let daemon = TestDaemon::start_with_env(variables);
        let client = daemon.connect(json!({}), no_answers()).await;
        let session_id = client
            .create_session(
                &daemon.work(),
                json!({"rules": {"allow": ["run_command(env)"]}}),
            )
            .await;
        let response = client
            .request(
                "tools/execute",
                json!({"session_id": session_id, "calls": [
                    {"id": "env", "name": "run_command", "arguments": {"command": "env"}}
                ]}),
            )
            .await
            .expect("tools/execute");
        let result = &response["results"][0]["result"];
        assert_eq!(result["ok"], true, "{variables:?}: {result}");
        let seen: Vec<&str> = result["content"]
            .as_str()
            .expect("the output")
            .lines()
            .filter(|line| line.starts_with("LISTEN_"))
            .collect();
        assert!(seen.is_empty(), "{variables:?}: the command saw {seen:?}");
    }
}
