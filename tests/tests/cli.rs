//! The `toold` command line end to end: the real binary against a real daemon, its exit codes,
//! its output for people and in JSON, approvals without a terminal and through a
//! pseudo-terminal, and `connect` starting a daemon of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toold_tests::daemon::toold_command_in;

/// Runs `command` with `input` on stdin; fails the test if it takes over 60 s.
fn run(mut command: Command, input: &[u8]) -> Output {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start toold");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // The command may exit without reading its input.
        let _ = stdin.write_all(&input);
    });
    let stdout = read_all_on_a_thread(child.stdout.take().expect("piped stdout"));
    let stderr = read_all_on_a_thread(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for toold") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("toold {command:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    writer.join().expect("stdin writer");
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn read_all_on_a_thread(
    mut source: impl Read + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        bytes
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The process at the other end of a connection to `socket` (SO_PEERCRED).
fn daemon_pid(socket: &Path) -> nix::unistd::Pid {
    let stream = UnixStream::connect(socket).expect("the daemon answers");
    let credentials =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            .expect("peer credentials");
    nix::unistd::Pid::from_raw(credentials.pid())
}

/// Fields of `/proc/PID/stat` after the command name: state is [0], session is [3].
fn proc_stat_fields(pid: nix::unistd::Pid) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    Some(after_name.split(' ').map(str::to_owned).collect())
}

/// Stops a daemon that is not our child, and waits until it is gone (or a zombie nobody
/// reaps).
fn stop_foreign_daemon(pid: nix::unistd::Pid) {
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM the daemon");
    let deadline = Instant::now() + Duration::from_secs(30);
    while proc_stat_fields(pid).is_some_and(|fields| fields[0] != "Z") {
        assert!(
            Instant::now() < deadline,
            "the daemon did not stop within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connect_starts_a_daemon_when_none_answers_and_bridges_to_it() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().canonicalize().expect("canonical directory");
    let socket = root.join("private/toold.sock");
    assert!(!socket.exists());

    let mut connect = toold_command_in(&root);
    connect
        .args(["connect", "--allow-root", "--socket"])
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = connect.spawn().expect("start toold connect");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n",
        )
        .expect("write initialize");
    let (lines, answers) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let answer = answers
        .recv_timeout(Duration::from_secs(60))
        .expect("an answer to initialize through the bridge");
    let answer: Value = serde_json::from_str(&answer).expect("the answer is JSON");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["protocol_version"], 1, "{answer}");
    assert_eq!(answer["result"]["server_info"]["name"], "toold", "{answer}");

    let pid = daemon_pid(&socket);
    let fields = proc_stat_fields(pid).expect("the daemon's /proc entry");
    assert_eq!(
        fields[3],
        pid.to_string(),
        "the daemon leads a session of its own (setsid)"
    );

    // The end of stdin ends the bridge; the daemon it started stays.
    drop(stdin);
    let status = child.wait().expect("wait for toold connect");
    assert!(status.success(), "toold connect exited with {status}");
    assert_eq!(daemon_pid(&socket), pid, "the daemon outlives the bridge");

    // A second bridge finds the running daemon and starts none.
    let output = run(
        {
            let mut again = toold_command_in(&root);
            again.args(["connect", "--socket"]).arg(&socket);
            again
        },
        b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n",
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let answer: Value = serde_json::from_slice(&output.stdout).expect("one JSON answer");
    assert_eq!(answer["id"], 7);
    assert_eq!(daemon_pid(&socket), pid, "no second daemon was started");

    stop_foreign_daemon(pid);
}

#[test]
fn connect_says_why_when_the_daemon_cannot_start() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().canonicalize().expect("canonical directory");
    // A socket directory others may enter: `toold serve` refuses it.
    let open_dir = root.join("open");
    std::fs::create_dir(&open_dir).expect("a directory");
    std::fs::set_permissions(
        &open_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod 755");
    let mut connect = toold_command_in(&root);
    connect
        .args(["connect", "--allow-root", "--socket"])
        .arg(open_dir.join("toold.sock"));
    let output = run(connect, b"");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("exited") && stderr.contains("toold serve --socket"),
        "{stderr}"
    );
}

#[test]
fn completions_print_a_script() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for shell in ["bash", "zsh", "fish"] {
        let mut command = toold_command_in(dir.path());
        command.args(["completions", shell]);
        let output = run(command, b"");
        assert!(output.status.success(), "{shell}: {}", text(&output.stderr));
        let script = text(&output.stdout);
        assert!(script.contains("toold"), "{shell}: {script}");
        assert!(script.contains("connect"), "{shell}: {script}");
    }
    let mut unknown = toold_command_in(dir.path());
    unknown.args(["completions", "cmd.exe"]);
    assert_eq!(run(unknown, b"").status.code(), Some(2));
}
