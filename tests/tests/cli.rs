//! The `toold` command line end to end: the real binary against a real daemon, its exit codes,
//! its output for people and in JSON, approvals without a terminal and through a
//! pseudo-terminal, and `connect` starting a daemon of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toold_protocol::time::parse_rfc3339;
use toold_tests::daemon::{
    ForeignDaemon, TestDaemon, daemon_pid, no_answers, tool_names, toold_command_in,
};
use toold_tests::terminal::{Finished, Terminal, read_all_on_a_thread};

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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
    let started = ForeignDaemon { pid: Some(pid) };
    let fields =
        toold_tests::procs::stat_fields(pid.as_raw() as u32).expect("the daemon's /proc entry");
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

    started.stop();
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

/// `toold ARGS…` against `daemon`, with `input` on stdin.
fn toold(daemon: &TestDaemon, args: &[&str], input: &[u8]) -> Output {
    let mut command = daemon.command();
    command.args(args);
    run(command, input)
}

/// A file in the daemon's work directory.
fn work_file(daemon: &TestDaemon, name: &str, content: &str) -> String {
    let path = daemon.work().join(name);
    std::fs::write(&path, content).expect("a work file");
    path.display().to_string()
}

fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

#[test]
fn call_read_file_prints_the_content_then_a_status_line() {
    let daemon = TestDaemon::start();
    work_file(&daemon, "hello.txt", "hello\nworld\n");
    let work = daemon.work().display().to_string();
    let output = toold(
        &daemon,
        &[
            "call",
            "read_file",
            r#"{"path":"hello.txt"}"#,
            "--cwd",
            &work,
        ],
        b"",
    );
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "hello\nworld\n");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("✓ read_file ok ("), "{stderr}");

    // The arguments from stdin, the result as JSON.
    let output = toold(
        &daemon,
        &["call", "read_file", "-", "--cwd", &work, "--json"],
        br#"{"path":"hello.txt","offset":2}"#,
    );
    assert_exit(&output, 0);
    let result: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["tool"], "read_file");
    assert_eq!(result["content"], "world\n");
    assert!(result["metadata"]["call_id"].is_string(), "{result}");

    // The fresh sessions were closed.
    let output = toold(&daemon, &["sessions", "--json"], b"");
    assert_exit(&output, 0);
    let listed: Value = serde_json::from_slice(&output.stdout).expect("sessions --json");
    assert_eq!(listed["sessions"], serde_json::json!([]), "{listed}");
}

#[test]
fn a_failed_result_exits_1_and_a_usage_or_connection_error_exits_2() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work().display().to_string();
    let output = toold(
        &daemon,
        &[
            "call",
            "read_file",
            r#"{"path":"missing.txt"}"#,
            "--cwd",
            &work,
        ],
        b"",
    );
    assert_exit(&output, 1);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("✗ read_file not_found"), "{stderr}");

    let output = toold(
        &daemon,
        &["call", "read_file", "--json", "--cwd", &work],
        b"",
    );
    assert_exit(&output, 1);
    let result: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    assert_eq!(result["error_type"], "invalid_arguments", "{result}");

    for args in [
        &["call", "read_file", "[1]"][..],
        &["call", "read_file", "{not json"],
        &["call", "read_file", "--mode", "yolo"],
        &["call", "read_file", "--session", "s_1", "--cwd", "/"],
        &["call"],
        &["exec", "/no/such/calls.json"],
        &["tools", "--frobnicate"],
    ] {
        let output = toold(&daemon, args, b"");
        assert_exit(&output, 2);
        assert!(!output.stderr.is_empty(), "{args:?} says why");
    }
    let output = toold(
        &daemon,
        &["call", "read_file", "{}", "--session", "s_nope"],
        b"",
    );
    assert_exit(&output, 2);
    assert!(
        text(&output.stderr).contains("toold sessions"),
        "{}",
        text(&output.stderr)
    );

    daemon.stop();
    let output = toold(&daemon, &["call", "read_file", r#"{"path":"x"}"#], b"");
    assert_exit(&output, 2);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cannot connect to toold"), "{stderr}");
}

#[test]
fn without_a_terminal_approvals_are_denied_unless_yes() {
    let daemon = TestDaemon::start_asking();
    let work = daemon.work().display().to_string();
    let command = r#"{"command":"echo from-the-command; echo to-stderr >&2"}"#;
    let output = toold(
        &daemon,
        &["call", "run_command", command, "--cwd", &work],
        b"",
    );
    assert_exit(&output, 1);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("✗ run_command permission_denied"),
        "{stderr}"
    );
    assert!(stderr.contains("--yes"), "says how to allow: {stderr}");
    assert!(!text(&output.stdout).contains("from-the-command"));

    let output = toold(
        &daemon,
        &["call", "run_command", command, "--cwd", &work, "--yes"],
        b"",
    );
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "from-the-command\n");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("to-stderr\n"), "{stderr}");
    assert!(stderr.contains("✓ run_command ok"), "{stderr}");

    let output = toold(
        &daemon,
        &[
            "call",
            "run_command",
            r#"{"command":"exit 3"}"#,
            "--cwd",
            &work,
            "-y",
            "--json",
        ],
        b"",
    );
    assert_exit(&output, 1);
    let result: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    assert_eq!(result["error_type"], "command_failed", "{result}");
    assert_eq!(result["metadata"]["exit_code"], 3, "{result}");
}

#[test]
fn call_runs_in_an_existing_session_and_leaves_it_open() {
    let daemon = TestDaemon::start();
    work_file(&daemon, "a.txt", "in the session\n");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (client, session_id) = runtime.block_on(async {
        let client = daemon.connect(serde_json::json!({}), no_answers()).await;
        let session_id = client
            .create_session(
                &daemon.work(),
                serde_json::json!({"on_disconnect": "continue"}),
            )
            .await;
        (client, session_id)
    });
    let output = toold(
        &daemon,
        &[
            "call",
            "read_file",
            r#"{"path":"a.txt"}"#,
            "--session",
            &session_id,
        ],
        b"",
    );
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "in the session\n");
    let output = toold(&daemon, &["sessions", "--json"], b"");
    let listed: Value = serde_json::from_slice(&output.stdout).expect("sessions --json");
    assert_eq!(
        listed["sessions"][0]["session_id"],
        session_id.as_str(),
        "{listed}"
    );
    let output = toold(&daemon, &["sessions"], b"");
    assert!(
        text(&output.stdout).contains(&session_id),
        "{}",
        text(&output.stdout)
    );
    client.disconnect();
}

#[test]
fn on_a_terminal_the_approval_is_asked_and_y_runs_the_command() {
    let daemon = TestDaemon::start_asking();
    let mut command = daemon.command();
    command.args([
        "call",
        "run_command",
        r#"{"command":"echo approved-run"}"#,
        "--cwd",
    ]);
    command.arg(daemon.work());
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for(
        "[y] once / [s] session / [p] always (project) / [n] deny / [d] deny always / [a] abort?",
    );
    let screen = terminal.screen();
    assert!(screen.contains("run_command"), "{screen}");
    assert!(
        screen.contains("echo approved-run"),
        "the call is shown: {screen}"
    );
    assert!(
        screen.contains("reason:    no allow rule matches"),
        "the reason is shown: {screen}"
    );
    terminal.type_line("y");
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish();
    assert_eq!(status.code(), Some(0), "{screen}");
    assert_eq!(stdout, "approved-run\n");
    assert!(screen.contains("✓ run_command ok"), "{screen}");
}

#[test]
fn on_a_terminal_n_denies_and_a_wrong_answer_is_asked_again() {
    let daemon = TestDaemon::start_asking();
    let mut command = daemon.command();
    command.args([
        "call",
        "run_command",
        r#"{"command":"echo never-runs"}"#,
        "--cwd",
    ]);
    command.arg(daemon.work());
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for("[a] abort?");
    terminal.type_line("perhaps");
    terminal.wait_for("please answer y");
    terminal.type_line("n");
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish();
    assert_eq!(status.code(), Some(1), "{screen}");
    assert_eq!(stdout, "");
    assert!(
        screen.contains("✗ run_command permission_denied: denied by the user"),
        "{screen}"
    );
}

#[test]
fn exec_prints_events_as_they_come_then_the_results() {
    let daemon = TestDaemon::start_asking();
    work_file(&daemon, "notes.txt", "a note\n");
    let calls = work_file(
        &daemon,
        "calls.json",
        r#"[{"id":"read","name":"read_file","arguments":{"path":"notes.txt"}},
            {"name":"run_command","arguments":{"command":"echo streamed"}}]"#,
    );
    let work = daemon.work().display().to_string();
    let output = toold(&daemon, &["exec", &calls, "--cwd", &work, "--yes"], b"");
    assert_exit(&output, 0);
    let stdout = text(&output.stdout);
    for wanted in [
        "batch ",
        "▶ read read_file {\"path\":\"notes.txt\"}",
        "read ✓ read_file ok",
        "    a note",
        "▶ call_1 run_command",
        "  call_1 stdout: streamed",
        "call_1 ✓ run_command ok",
        "done",
        "2 call(s): 2 ok, 0 failed",
    ] {
        assert!(
            stdout.contains(wanted),
            "{wanted:?} missing from:\n{stdout}"
        );
    }

    // NDJSON from stdin: the events, then the result; a denied call makes it exit 1.
    let output = toold(
        &daemon,
        &["exec", "-", "--cwd", &work, "--json"],
        br#"[{"name":"read_file","arguments":{"path":"notes.txt"}},
             {"name":"run_command","arguments":{"command":"echo denied"}}]"#,
    );
    assert_exit(&output, 1);
    let lines: Vec<Value> = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    let methods: Vec<&str> = lines
        .iter()
        .filter_map(|line| line["method"].as_str())
        .collect();
    assert_eq!(methods.first(), Some(&"batch/start"), "{methods:?}");
    assert_eq!(methods.last(), Some(&"batch/done"), "{methods:?}");
    assert!(methods.contains(&"tool/call_done"), "{methods:?}");
    let result = lines.last().expect("the result line");
    assert_eq!(result["results"][0]["result"]["ok"], true, "{result}");
    assert_eq!(
        result["results"][1]["result"]["error_type"], "permission_denied",
        "{result}"
    );
}

#[test]
fn status_says_up_or_not() {
    let mut daemon = TestDaemon::start();
    let output = toold(&daemon, &["status"], b"");
    assert_exit(&output, 0);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("toold is up"), "{stdout}");
    assert!(
        stdout.contains(&daemon.socket().display().to_string()),
        "{stdout}"
    );
    assert!(stdout.contains("version:   0.1.0"), "{stdout}");
    assert!(stdout.contains("sessions:  0"), "{stdout}");
    assert!(
        stdout.contains(&format!("pid:       {}\n", daemon.pid())),
        "{stdout}"
    );

    let output = toold(&daemon, &["status", "--json"], b"");
    assert_exit(&output, 0);
    let status: Value = serde_json::from_slice(&output.stdout).expect("status --json");
    assert_eq!(status["up"], true, "{status}");
    assert_eq!(status["sessions"], 0, "{status}");
    assert_eq!(status["pid"], daemon.pid(), "{status}");
    // What the kernel enforces on commands, as `initialize` reports it.
    assert_eq!(
        status["sandbox"]["daemon_socket"], "mount_namespace",
        "{status}"
    );
    assert_eq!(status["sandbox"]["processes"], "pid_namespace", "{status}");
    assert_eq!(
        status["sandbox"]["degraded"],
        Value::Array(Vec::new()),
        "{status}"
    );
    assert!(
        stdout.contains(
            "daemon socket kept out by mount_namespace; each command in a PID namespace\n"
        ) && stdout.contains("every protection enforced"),
        "{stdout}"
    );
    // The uptime is the time since the daemon's `started_at`, to the second.
    let started_at = status["started_at"].as_str().expect("started_at");
    let started = parse_rfc3339(started_at).expect("an RFC 3339 started_at");
    let uptime = status["uptime_seconds"].as_u64().expect("uptime_seconds");
    let expected = std::time::SystemTime::now()
        .duration_since(started)
        .expect("started in the past")
        .as_secs();
    assert!(
        uptime <= expected && expected <= uptime + 5,
        "uptime {uptime} s, {expected} s since {started_at}"
    );
    assert!(
        stdout.contains(&format!("s (since {started_at})\n")),
        "{stdout}"
    );

    let output = toold(&daemon, &["tools", "--json"], b"");
    assert_exit(&output, 0);
    let listed: Value = serde_json::from_slice(&output.stdout).expect("tools --json");
    let names = tool_names(&listed);
    assert!(
        names.contains(&"read_file") && names.contains(&"run_command"),
        "{names:?}"
    );
    let output = toold(&daemon, &["tools"], b"");
    let table = text(&output.stdout);
    assert!(
        table
            .lines()
            .any(|line| line.starts_with("read_file ") && line.contains(" read_only ")),
        "{table}"
    );

    daemon.stop();
    let output = toold(&daemon, &["status"], b"");
    assert_exit(&output, 1);
    assert!(
        text(&output.stdout).contains("toold is not running"),
        "{}",
        text(&output.stdout)
    );
    let output = toold(&daemon, &["status", "--json"], b"");
    assert_exit(&output, 1);
    let status: Value = serde_json::from_slice(&output.stdout).expect("status --json");
    assert_eq!(status["up"], false, "{status}");
}

#[test]
fn run_command_output_is_streamed_while_the_command_runs() {
    let daemon = TestDaemon::start();
    let go = daemon.work().join("go");
    let script = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.05; done; echo second",
        go.display()
    );
    let arguments = serde_json::json!({ "command": script }).to_string();
    let mut command = daemon.command();
    command
        .args(["call", "run_command", &arguments, "--yes", "--cwd"])
        .arg(daemon.work())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start toold call");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the first line");
    // The command is still waiting for `go`: the line came live, not with the result.
    assert_eq!(first, "first\n");
    assert!(child.try_wait().expect("toold call").is_none());
    std::fs::write(&go, "").expect("let the command finish");
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("the rest");
    assert_eq!(rest, "second\n");
    assert!(child.wait().expect("toold call").success());
}

#[test]
fn a_fresh_session_takes_the_mode_given() {
    let daemon = TestDaemon::start();
    let work = daemon.work().display().to_string();
    let output = toold(
        &daemon,
        &[
            "call",
            "write_file",
            r#"{"path":"x.txt","content":"x"}"#,
            "--mode",
            "plan",
            "--cwd",
            &work,
            "--yes",
        ],
        b"",
    );
    assert_exit(&output, 1);
    let stderr = text(&output.stderr);
    assert!(stderr.contains("✗ write_file tool_not_allowed"), "{stderr}");
    assert!(!daemon.work().join("x.txt").exists());
}

#[test]
fn on_a_terminal_a_aborts_and_s_grants_the_session() {
    let daemon = TestDaemon::start_asking();
    let mut command = daemon.command();
    command.args([
        "call",
        "run_command",
        r#"{"command":"echo aborted"}"#,
        "--cwd",
    ]);
    command.arg(daemon.work());
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for("[a] abort?");
    terminal.type_line("a");
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish();
    assert_eq!(status.code(), Some(1), "{screen}");
    assert_eq!(stdout, "");
    assert!(
        screen.contains("✗ run_command permission_canceled"),
        "{screen}"
    );

    // `s` in a session that outlives the command: the same call later runs unasked.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (client, session_id) = runtime.block_on(async {
        let client = daemon.connect(serde_json::json!({}), no_answers()).await;
        let session_id = client
            .create_session(&daemon.work(), serde_json::json!({}))
            .await;
        (client, session_id)
    });
    let granted = r#"{"command":"echo granted"}"#;
    let mut command = daemon.command();
    command.args(["call", "run_command", granted, "--session", &session_id]);
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for("[a] abort?");
    terminal.type_line("s");
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish();
    assert_eq!(status.code(), Some(0), "{screen}");
    assert_eq!(stdout, "granted\n");
    let output = toold(
        &daemon,
        &["call", "run_command", granted, "--session", &session_id],
        b"",
    );
    assert_exit(&output, 0);
    assert_eq!(text(&output.stdout), "granted\n");
    client.disconnect();
}

#[test]
fn connect_bridges_content_length_framing_byte_for_byte_to_the_default_socket() {
    let daemon = TestDaemon::start();
    let body =
        br#"{"jsonrpc":"2.0","id":"lsp-1","method":"initialize","params":{"protocol_version":1}}"#;
    let mut connect = daemon.command();
    // No --socket: $XDG_RUNTIME_DIR/toold/toold.sock, where the test daemon listens.
    connect
        .arg("connect")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = connect.spawn().expect("start toold connect");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .and_then(|()| stdin.write_all(body))
        .expect("write the frame");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut header = String::new();
    stdout.read_line(&mut header).expect("a header line");
    let length: usize = header
        .strip_prefix("Content-Length: ")
        .and_then(|rest| rest.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("a Content-Length header, got {header:?}"));
    let mut line = String::new();
    while line != "\r\n" {
        line.clear();
        stdout
            .read_line(&mut line)
            .expect("the rest of the headers");
    }
    let mut answer = vec![0; length];
    stdout.read_exact(&mut answer).expect("the body");
    let answer: Value = serde_json::from_slice(&answer).expect("a JSON body");
    assert_eq!(answer["id"], "lsp-1", "{answer}");
    assert_eq!(answer["result"]["protocol_version"], 1, "{answer}");
    drop(stdin);
    let status = child.wait().expect("wait for toold connect");
    assert!(status.success(), "toold connect exited with {status}");
}
