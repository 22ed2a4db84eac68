//! Socket activation end to end under `systemd-socket-activate` (Debian package `systemd`):
//! `toold serve` takes the inherited socket, answers a request on it, and tells the test's
//! `NOTIFY_SOCKET` `READY=1`, `WATCHDOG=1` and, on SIGTERM, `STOPPING=1`, then exits 0.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use toold_tests::daemon::toold_binary;

/// The program activated and its arguments: the real daemon.
fn activated_program() -> (PathBuf, Vec<String>) {
    (toold_binary(), vec!["serve".into(), "--allow-root".into()])
}

/// Where Debian's `systemd` package puts the tool (bookworm: /usr/bin).
const SOCKET_ACTIVATE: &[&str] = &[
    "/usr/bin/systemd-socket-activate",
    "/lib/systemd/systemd-socket-activate",
    "/usr/lib/systemd/systemd-socket-activate",
];

/// How long any single step may take on a loaded machine; the test waits only as long as
/// each step needs.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The watchdog timeout given to the program: a ping every 200 ms.
const WATCHDOG_USEC: u32 = 400_000;

/// Kills the activated program if the test ends before it exited.
struct Activated(Child);

impl Drop for Activated {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Activated {
    fn wait_with_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

fn socket_activate() -> &'static Path {
    SOCKET_ACTIVATE
        .iter()
        .map(Path::new)
        .find(|path| path.exists())
        .unwrap_or_else(|| {
            panic!(
                "systemd-socket-activate not found in {SOCKET_ACTIVATE:?}; install it with \
                 `apt-get install -y systemd`"
            )
        })
}

/// Receives notifications until one has the line `wanted`; returns every message seen.
fn receive_until(notify: &UnixDatagram, wanted: &str, seen: &mut Vec<String>) {
    let mut buffer = [0u8; 4096];
    while !seen
        .iter()
        .any(|message| message.lines().any(|line| line == wanted))
    {
        let len = notify.recv(&mut buffer).unwrap_or_else(|error| {
            panic!("no {wanted} within {STEP_TIMEOUT:?} ({error}); got {seen:?}")
        });
        seen.push(String::from_utf8_lossy(&buffer[..len]).into_owned());
    }
}

#[test]
fn an_activated_daemon_serves_the_inherited_socket_and_notifies() {
    // Private, as the daemon's directories must be; its state and config live here too.
    let temp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 700");
    let socket = temp.path().join("toold.sock");
    let notify_path = temp.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).expect("bind NOTIFY_SOCKET");
    notify
        .set_read_timeout(Some(STEP_TIMEOUT))
        .expect("read timeout");

    let (program, program_args) = activated_program();
    let child = Command::new(socket_activate())
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
    let mut activated = Activated(child);

    // systemd-socket-activate listens first and starts the program at the first connection.
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            socket.display()
        );
        if let Some(status) = activated.0.try_wait().expect("try_wait") {
            panic!("systemd-socket-activate exited before listening: {status}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut stream = UnixStream::connect(&socket).expect("connect to the activation socket");
    stream
        .set_read_timeout(Some(STEP_TIMEOUT))
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
        .wait_with_timeout(STEP_TIMEOUT)
        .expect("the program did not exit after SIGTERM");
    assert!(status.success(), "{status}");
    receive_until(&notify, "STOPPING=1", &mut notifications);
}
