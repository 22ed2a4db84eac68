//! `toold mcp serve` on each kind of stdin and stdout a host may give it, against the real
//! daemon: sockets (what Node's `child_process`, and so most MCP hosts, give a child), a file
//! on stdin with stderr on stdout's pipe (both read through tokio's blocking stdio). Pipes, what
//! Python's hosts give, are every test of `mcp_serve.rs`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toold_tests::PATIENCE;
use toold_tests::daemon::{TestDaemon, toold_binary};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"stdio-test","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;

fn serve(daemon: &TestDaemon) -> Command {
    let mut command = Command::new(toold_binary());
    command
        .args(["mcp", "serve", "--socket"])
        .arg(daemon.socket())
        .current_dir(daemon.work());
    command
}

/// The answer of `id` among `lines`.
fn answer(lines: &[Value], id: u64) -> &Value {
    lines
        .iter()
        .find(|line| line["id"] == id)
        .unwrap_or_else(|| panic!("an answer to request {id} in {lines:#?}"))
}

fn assert_the_builtins_listed(lines: &[Value]) {
    assert_eq!(answer(lines, 1)["result"]["serverInfo"]["name"], "toold");
    let tools = answer(lines, 2)["result"]["tools"]
        .as_array()
        .expect("a tool list");
    for builtin in ["read_file", "write_file", "edit_file", "run_command"] {
        assert!(
            tools.iter().any(|tool| tool["name"] == builtin),
            "{builtin} listed: {tools:#?}"
        );
    }
}

#[test]
fn a_host_giving_sockets_as_stdin_and_stdout_is_answered() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "through a socket\n").unwrap();
    let (mut to_server, server_in) = UnixStream::pair().unwrap();
    let (from_server, server_out) = UnixStream::pair().unwrap();
    let mut child = serve(&daemon)
        .stdin(Stdio::from(OwnedFd::from(server_in)))
        .stdout(Stdio::from(OwnedFd::from(server_out)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    from_server.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut answers = BufReader::new(from_server);
    let mut read_answer = |id: u64| -> Value {
        loop {
            let mut line = String::new();
            let read = answers.read_line(&mut line).expect("an answer within 30 s");
            assert!(read > 0, "the server closed stdout before answering {id}");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message["id"] == id {
                return message;
            }
        }
    };
    writeln!(to_server, "{INITIALIZE}").unwrap();
    let initialized = read_answer(1);
    writeln!(to_server, "{INITIALIZED}\n{LIST}").unwrap();
    let listed = read_answer(2);
    assert_the_builtins_listed(&[initialized, listed]);

    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "a.txt"}}});
    writeln!(to_server, "{call}").unwrap();
    let read = read_answer(3);
    assert_eq!(read["result"]["isError"], false, "{read}");
    assert!(
        read["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("through a socket")),
        "{read}"
    );

    // The host closing the server's stdin ends it.
    drop(to_server);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn requests_from_a_file_are_answered_with_stderr_on_stdouts_pipe() {
    let daemon = TestDaemon::start();
    let requests = daemon.work().join("requests.jsonl");
    std::fs::write(&requests, format!("{INITIALIZE}\n{INITIALIZED}\n{LIST}\n")).unwrap();
    let (output, output_writer) = std::io::pipe().unwrap();
    let mut child = serve(&daemon)
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(output_writer.try_clone().unwrap())
        .stderr(output_writer)
        .spawn()
        .unwrap();
    // Our copies of the pipe's writing end went to the child: the read ends when it exits.
    let lines: Vec<Value> = BufReader::new(output)
        .lines()
        .map(|line| line.unwrap())
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {lines:#?}");
    assert_the_builtins_listed(&lines);
}
