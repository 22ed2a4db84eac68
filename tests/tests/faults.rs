//! Faults against the real daemon: killed with SIGKILL in the middle of large writes, again and
//! again. Every file is the old one or the new one (never torn or empty), keeps its mode, and
//! the next start removes the temporary files the killed writes left.
//!
//! `TOOLD_KILL_ITERATIONS` sets the number of kills (default 50, the reliability check's size).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::child::{KillOnDrop, wait_for_path};
use toold_tests::daemon::{TestDaemon, sigterm_and_exits_cleanly};

const FILE_BYTES: usize = 4 << 20;

/// The `tools/execute` request (id 10) of one `write_file` of `content` to `big.txt`, framed.
fn write_request(session: &str, content: &str) -> Vec<u8> {
    let mut request = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 10, "method": "tools/execute",
        "params": {"session_id": session, "calls": [
            {"id": "w", "name": "write_file", "arguments": {"path": "big.txt", "content": content}}
        ]}
    }))
    .unwrap();
    request.push(b'\n');
    request
}

/// Connects, initializes and opens a session whose writes inside the roots need no approval.
fn client(socket: &Path, work: &Path) -> (UnixStream, String) {
    let mut stream = UnixStream::connect(socket).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut call = |id: u64, method: &str, params: Value| -> Value {
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        stream.write_all(&line).unwrap();
        loop {
            let mut text = String::new();
            assert!(
                reader.read_line(&mut text).unwrap() > 0,
                "the daemon hung up"
            );
            let message: Value = serde_json::from_str(&text).unwrap();
            if message["id"] == json!(id) {
                return message["result"].clone();
            }
        }
    };
    call(
        1,
        "initialize",
        json!({"protocol_version": 1, "capabilities": {}}),
    );
    let session = call(
        2,
        "session/create",
        json!({"cwd": work, "mode": "accept_edits"}),
    )["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    (stream, session)
}

/// Sends a write of `content` and returns how long after its last byte `target` was replaced
/// (a new inode: the rename), then reads the response.
fn time_until_replaced(
    mut stream: UnixStream,
    session: &str,
    content: &str,
    target: &Path,
) -> Duration {
    let before = std::fs::metadata(target).unwrap().ino();
    stream.write_all(&write_request(session, content)).unwrap();
    let sent = Instant::now();
    let deadline = sent + Duration::from_secs(60);
    while std::fs::metadata(target).unwrap().ino() == before {
        assert!(Instant::now() < deadline, "a write took over 60 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    let window = sent.elapsed();
    let mut reader = BufReader::new(stream);
    loop {
        let mut text = String::new();
        assert!(
            reader.read_line(&mut text).unwrap() > 0,
            "the daemon hung up"
        );
        if text.contains("\"id\":10") {
            assert!(text.contains("\"result\""), "the write failed: {text}");
            return window;
        }
    }
}

fn temporaries_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".toold-write-"))
        .collect()
}

#[test]
fn kill_9_during_large_writes_leaves_whole_files_and_no_temporaries() {
    let iterations: u64 = std::env::var("TOOLD_KILL_ITERATIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(50);
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    let target = work.join("big.txt");
    let content = |round: u64| {
        char::from(b'a' + (round % 26) as u8)
            .to_string()
            .repeat(FILE_BYTES)
    };
    let mut current = content(0);
    std::fs::write(&target, &current).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    // The window a kill must hit, measured on this machine (a slow machine and a fast one
    // differ tenfold): from the request's last byte sent until the file is replaced, for the
    // first write of a daemon just started, as each round's is. The shortest of three.
    let mut window = Duration::MAX;
    for round in 0..3 {
        let next = content(100 + round);
        let (stream, session) = client(&daemon.socket(), &work);
        window = window.min(time_until_replaced(stream, &session, &next, &target));
        current = next;
        daemon.kill();
        daemon.start_again();
    }
    let (mut completed, mut interrupted, mut cleaned) = (0, 0, 0);
    for round in 1..=iterations {
        let next = content(round);
        let (mut stream, session) = client(&daemon.socket(), &work);
        stream.write_all(&write_request(&session, &next)).unwrap();
        // A different moment each round, from "still reading the request" (0) through "writing
        // the temporary file" to "already renamed" (1.5 windows), in a shuffled order: ten of
        // every sixteen rounds kill before the rename of the shortest write measured.
        let tenths = (round * 7) % 16;
        std::thread::sleep(window * tenths as u32 / 10);
        daemon.kill();

        let now = std::fs::read_to_string(&target).unwrap();
        assert!(
            now == current || now == next,
            "round {round}: a torn file ({} bytes)",
            now.len()
        );
        if now == next {
            completed += 1;
            current = next;
        } else {
            interrupted += 1;
        }
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640, "round {round}: the mode changed");
        cleaned += temporaries_in(&work).len();
        daemon.start_again();
        assert_eq!(
            temporaries_in(&work),
            Vec::<String>::new(),
            "round {round}: temporary files left after the restart"
        );
    }
    eprintln!(
        "{iterations} kills over writes replacing the file {window:?} after their request: \
         {completed} writes completed, {interrupted} interrupted, {cleaned} temporary files \
         removed at restart, 0 torn, 0 stray"
    );
    assert!(
        interrupted > 0,
        "the kills never hit a write in progress ({completed} completed, window {window:?})"
    );
}

/// The cleanup itself, whatever moment a kill hits: a temporary file the journal lists is gone
/// once the next daemon serves, and one it does not list (not ours to judge) stays.
#[test]
fn the_next_start_removes_the_temporary_files_the_journal_lists() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    daemon.kill();
    let listed = work.join(".toold-write-1-0");
    let unlisted = work.join(".toold-write-1-1");
    let not_ours = work.join("notes.txt");
    for file in [&listed, &unlisted, &not_ours] {
        std::fs::write(file, "x").unwrap();
    }
    std::fs::write(
        daemon.state_dir().join("writes-in-flight"),
        format!("{}\0{}\0", listed.display(), not_ours.display()),
    )
    .unwrap();
    daemon.start_again();
    assert!(
        !listed.exists(),
        "a listed temporary file survived the start"
    );
    assert!(
        unlisted.exists() && not_ours.exists(),
        "removed a file it should not have"
    );
    assert_eq!(
        std::fs::read_to_string(daemon.state_dir().join("writes-in-flight")).unwrap(),
        "",
        "the journal starts empty"
    );
}

/// A daemon whose stderr nobody reads any more (the terminal or the process that started it is
/// gone, its pipe closed) keeps serving: a log line it cannot write is lost, never a panic in
/// the task that logged it; and SIGTERM still drains it.
#[test]
fn a_daemon_whose_log_reader_is_gone_serves_and_stops() {
    let root = toold_tests::daemon::daemon_root();
    let socket = root.path().join("run/toold/toold.sock");
    let mut daemon = KillOnDrop(
        toold_tests::daemon::toold_command_in(root.path())
            .args(["serve", "--allow-root"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let daemon = &mut daemon.0;
    // Read the first line, so the daemon is up and logging, then close the pipe.
    let mut log = BufReader::new(daemon.stderr.take().unwrap());
    let mut first = String::new();
    log.read_line(&mut first).unwrap();
    drop(log);
    wait_for_path(&socket);
    let work = root.path().join("work").canonicalize().unwrap();
    for round in 0..3 {
        let (mut stream, session) = client(&socket, &work);
        stream.write_all(&write_request(&session, "x")).unwrap();
        let mut reader = BufReader::new(stream);
        let response = loop {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the daemon hung up"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(10) {
                break message;
            }
        };
        assert_eq!(
            response["result"]["results"][0]["result"]["ok"], true,
            "round {round}: {response}"
        );
    }
    sigterm_and_exits_cleanly(
        daemon,
        Duration::from_secs(20),
        "with its log's reader gone",
    );
}
