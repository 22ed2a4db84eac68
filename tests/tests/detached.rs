//! A daemon away from a terminal: one that `toold connect` starts in the background logs to a
//! file in the state directory (shown by `toold status`, private, rotated) and, when it cannot
//! start, the command that started it prints the daemon's own reason; one started on a
//! terminal that nobody reads and that then closes (its SIGHUP, every write failing) keeps
//! serving, and SIGTERM still stops it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use toold_tests::child::KillOnDrop;
use toold_tests::daemon::{daemon_root, sigterm_and_exits_cleanly, toold_command_in};
use toold_tests::wait_until;

/// One request on a fresh connection; its result.
fn ask(socket: &Path, method: &str, params: Value) -> Value {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut send = |id: u64, method: &str, params: Value| {
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        stream.write_all(&line).unwrap();
    };
    send(
        1,
        "initialize",
        json!({"protocol_version": 1, "capabilities": {}}),
    );
    send(2, method, params);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).expect("an answer within 20 s") > 0,
            "the daemon hung up"
        );
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == json!(2) {
            return message["result"].clone();
        }
    }
}

#[test]
fn a_daemon_started_in_the_background_logs_to_a_file_and_says_why_it_stopped() {
    let root = daemon_root();
    let log = root.path().join("state/toold/toold.log");
    // A daemon that cannot start: the command that started it says the daemon's own reason
    // (one only the daemon meets: a socket it cannot create; as root, being root).
    let mut refusals = vec![(
        vec![
            "connect",
            "--allow-root",
            "--socket",
            "/proc/self/toold/toold.sock",
        ],
        "/proc/self/toold",
    )];
    if nix::unistd::geteuid().is_root() {
        refusals.push((vec!["connect"], "--allow-root"));
    }
    for (args, reason) in refusals {
        let refused = toold_command_in(root.path())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{args:?}: {said}");
        assert!(
            said.contains("exited") && said.contains(reason),
            "{args:?}: the daemon's own reason is printed: {said}"
        );
        assert!(said.contains(&log.display().to_string()), "{said}");
    }

    // One that starts logs there, privately, and `toold status` says where.
    let mut started = KillOnDrop(
        toold_command_in(root.path())
            .args(["connect", "--allow-root"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let socket = root.path().join("run/toold/toold.sock");
    wait_until("the socket", || socket.exists());
    let status = toold_command_in(root.path())
        .args(["status", "--json"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["log_file"], json!(log), "{status:#}");
    let pid = status["pid"].as_u64().expect("the daemon's pid");
    assert!(
        toold_tests::procs::cmdline(u32::try_from(pid).expect("a pid")).contains("serve"),
        "the pid is the daemon's own"
    );
    let text = toold_command_in(root.path())
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("log:       {}", log.display())),
        "{text}"
    );
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the log is private");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("toold is serving"), "{logged}");
    drop(started.0.stdin.take());
    let _ = started.0.wait();
    // The daemon outlives the connection that started it; stop it.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_until("the daemon to stop", || !socket.exists());
}

/// A daemon on a terminal nobody reads (its writes to it would block once the terminal's
/// buffer is full) keeps answering while it logs a great deal; when the terminal closes (a
/// SIGHUP, taken as a reload, and every write failing) it keeps serving; SIGTERM stops it.
#[test]
#[allow(unsafe_code)]
fn a_daemon_whose_terminal_is_unread_then_closed_serves_and_stops() {
    let root = daemon_root();
    let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
    let mut command = toold_command_in(root.path());
    command
        .args(["serve", "--allow-root"])
        .env("TOOLD_LOG", "trace")
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave.try_clone().unwrap()));
    let slave_fd = std::os::fd::AsRawFd::as_raw_fd(&pty.slave);
    // SAFETY: ioctl is async-signal-safe and the closure allocates nothing. The daemon is a
    // session leader (toold_command_in's setsid) whose controlling terminal is the pty.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::ioctl(slave_fd, nix::libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = KillOnDrop(command.spawn().unwrap());
    drop(command);
    drop(pty.slave);
    let socket = root.path().join("run/toold/toold.sock");
    wait_until("the socket", || socket.exists());
    let work = root.path().join("work").canonicalize().unwrap();
    // Far more log than a terminal's buffer holds, with nobody reading it.
    for _ in 0..200 {
        let created = ask(&socket, "session/create", json!({"cwd": work}));
        assert!(created["session_id"].is_string(), "{created}");
    }
    // The terminal closes: the daemon gets SIGHUP, and its writes to it fail from now on.
    drop(pty.master);
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..20 {
        let created = ask(&socket, "session/create", json!({"cwd": work}));
        assert!(created["session_id"].is_string(), "{created}");
    }
    assert!(
        daemon.0.try_wait().unwrap().is_none(),
        "the daemon is still running"
    );
    sigterm_and_exits_cleanly(
        &mut daemon.0,
        Duration::from_secs(20),
        "with its terminal gone",
    );
}
