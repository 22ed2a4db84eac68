//! `toold mcp serve` driven by a real MCP host: the Python `mcp` client library (installed by
//! `tests/mcp_servers/install.sh`, which `.ci/run` runs) running `tests/mcp_servers/host.py`
//! against the real daemon: the handshake on two protocol versions, the tool list and its
//! annotations, results and failures as docs/protocol.md section 11.10 shapes them, live output as progress, a
//! cancel that leaves nothing running and gets no result, approvals by elicitation, and the
//! denial that names the rule to add when nobody can be asked.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use toold_tests::PATIENCE;
use toold_tests::child::stdout_of_success;
use toold_tests::daemon::{
    ForeignDaemon, TestClient, TestDaemon, daemon_pid, no_answers, tool_names, toold_binary,
};
use toold_tests::mcp::malformed_server_table;
use toold_tests::require;
use toold_tests::terminal::{Finished, Terminal};

/// The Python of `install.sh`'s environment, which has the `mcp` client library.
fn host_python(test: &str) -> Option<PathBuf> {
    let python =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/installed/python/bin/python");
    require::file(test, &python, "run tests/mcp_servers/install.sh").then_some(python)
}

/// The host running `scenario` against `toold mcp serve --socket … EXTRA`, started in the
/// daemon's work directory, its output piped.
fn host_command(
    python: &Path,
    daemon: &TestDaemon,
    extra: &[&str],
    scenario: &[&str],
) -> tokio::process::Command {
    let socket = daemon.socket().display().to_string();
    let mut server = vec![toold_binary().display().to_string()];
    server.extend(["mcp", "serve", "--socket", &socket].map(str::to_owned));
    server.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/host.py");
    let mut command = tokio::process::Command::new(python);
    command
        .arg(script)
        .args(scenario)
        .env("TOOLD_MCP_SERVER", serde_json::to_string(&server).unwrap())
        .current_dir(daemon.work())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs the host's `scenario` (see [`host_command`]) to its end; what it saw, one object per
/// line.
async fn host(python: &Path, daemon: &TestDaemon, extra: &[&str], scenario: &[&str]) -> Vec<Value> {
    json_lines_of(
        "the host",
        host_command(python, daemon, extra, scenario).output(),
    )
    .await
}

/// What a process printed, one JSON object a line, once it ended (within 60 s) successfully.
async fn json_lines_of(
    what: &str,
    run: impl Future<Output = std::io::Result<std::process::Output>>,
) -> Vec<Value> {
    stdout_of_success(what, Duration::from_secs(60), run)
        .await
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// A host running while the test acts on the daemon: what it says, line by line.
struct LiveHost {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl LiveHost {
    fn start(python: &Path, daemon: &TestDaemon, scenario: &[&str]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = host_command(python, daemon, &[], scenario)
            .spawn()
            .expect("start the host");
        let stdout = child.stdout.take().expect("the host's stdout");
        Self {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    /// The next line the host says (within 60 s).
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the host said more within 60 s")
            .unwrap()
            .expect("the host said more");
        serde_json::from_str(&line).unwrap()
    }

    /// Waits for the host's successful end.
    async fn finished(mut self) {
        let status = self.child.wait().await.unwrap();
        assert!(status.success(), "{status}");
    }
}

/// The first line the host saw of `event`.
fn seen<'a>(lines: &'a [Value], event: &str) -> &'a Value {
    lines
        .iter()
        .find(|line| line["event"] == event)
        .unwrap_or_else(|| panic!("no {event} in {lines:#?}"))
}

/// The daemon's live sessions.
async fn sessions(daemon: &TestDaemon) -> Vec<Value> {
    let client = daemon.connect(json!({}), no_answers()).await;
    let listed = client.request("session/list", json!({})).await.unwrap();
    listed["sessions"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_host_on_two_protocol_versions_lists_the_builtins_and_calls_them() {
    let test = "mcp_serve::two_versions";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "hello\n").unwrap();
    for version in ["2025-06-18", "2025-11-25"] {
        let lines = host(&python, &daemon, &[], &["basics", version, "a.txt"]).await;
        let initialized = seen(&lines, "initialized");
        assert_eq!(initialized["version"], version, "{lines:#?}");
        assert_eq!(initialized["server"], "toold");

        let tools = &seen(&lines, "tools")["tools"];
        let builtins = [
            "read_file",
            "write_file",
            "edit_file",
            "run_command",
            "find_files",
            "search_code",
        ];
        for name in builtins {
            let read_only = ["read_file", "find_files", "search_code"].contains(&name);
            let annotations = &tools[name];
            assert_eq!(annotations["readOnlyHint"], read_only, "{name}: {tools}");
            assert_eq!(
                annotations["destructiveHint"], !read_only,
                "{name}: {tools}"
            );
            assert_eq!(
                annotations["openWorldHint"],
                name == "run_command",
                "{name}: {tools}"
            );
        }

        let read = seen(&lines, "read_file");
        assert_eq!(read["is_error"], false, "{read}");
        assert_eq!(read["text"], "hello\n");

        let missing = seen(&lines, "missing");
        assert_eq!(missing["is_error"], true, "{missing}");
        assert_eq!(
            missing["structured"]["error_type"], "not_found",
            "{missing}"
        );
        assert!(
            missing["structured"]["metadata"]["call_id"].is_string(),
            "{missing}"
        );
        assert!(
            missing["text"].as_str().unwrap().starts_with("not_found: "),
            "{missing}"
        );
    }
    // Each host's session was closed when it went.
    assert_eq!(sessions(&daemon).await, Vec::<Value>::new());
}

#[tokio::test]
async fn live_output_reaches_the_host_as_progress() {
    let test = "mcp_serve::progress";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start();
    let lines = host(&python, &daemon, &["--allow", "run_command"], &["progress"]).await;
    let progress: Vec<&Value> = lines
        .iter()
        .filter(|line| line["event"] == "progress")
        .collect();
    let messages: Vec<&str> = progress
        .iter()
        .map(|line| line["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["line1\n", "line2\n", "line3\n"], "{lines:#?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|line| line["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "{values:?}"
    );
    let result = seen(&lines, "result");
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["text"], "line1\nline2\nline3\n");
}

#[tokio::test]
async fn a_cancelled_call_leaves_nothing_running_and_gets_no_result() {
    let test = "mcp_serve::cancel";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start();
    // Cancelled at 1 s: had anything of it lived on, it would make the file at 2 s.
    let lines = host(
        &python,
        &daemon,
        &["--allow", "run_command"],
        &["cancel", "sleep 2; touch survived"],
    )
    .await;
    seen(&lines, "cancelled");
    assert!(
        !lines.iter().any(|line| line["event"] == "result"),
        "{lines:#?}"
    );
    let after = seen(&lines, "after");
    assert_eq!(after["is_error"], false, "{after}");
    assert_eq!(after["text"], "still here\n");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!daemon.work().join("survived").exists());
}

#[tokio::test]
async fn the_host_approves_by_elicitation() {
    let test = "mcp_serve::elicitation";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    let allowed = host(&python, &daemon, &[], &["ask", "allow_once", "touch made"]).await;
    let asked = seen(&allowed, "elicitation")["message"].as_str().unwrap();
    assert!(asked.contains("touch made"), "{asked}");
    // Written for a form: no terminal's keys, no `toold:` line marks, the call first.
    assert!(
        asked.starts_with("run_command needs your approval"),
        "{asked}"
    );
    for terminal_wording in ["toold asks", "toold:", "[s]", "[y]"] {
        assert!(
            !asked.contains(terminal_wording),
            "{terminal_wording}: {asked}"
        );
    }
    assert_eq!(seen(&allowed, "result")["is_error"], false, "{allowed:#?}");
    assert!(daemon.work().join("made").exists());

    // Allowed for the session: the same call again runs unasked.
    let session_wide = host(
        &python,
        &daemon,
        &[],
        &["ask", "allow_session", "touch twice"],
    )
    .await;
    let asked = session_wide
        .iter()
        .filter(|line| line["event"] == "elicitation")
        .count();
    assert_eq!(asked, 1, "{session_wide:#?}");
    assert_eq!(seen(&session_wide, "result")["is_error"], false);
    assert_eq!(
        seen(&session_wide, "again")["is_error"],
        false,
        "{session_wide:#?}"
    );

    // "Always allow": the form offers it with the rule and the project, and the rule is
    // written into the config for the project.
    let always = host(
        &python,
        &daemon,
        &[],
        &["ask", "allow_always", "mkdir kept"],
    )
    .await;
    let choices = &seen(&always, "elicitation")["choices"];
    assert!(
        choices.as_array().unwrap().iter().any(|choice| choice
            .as_str()
            .unwrap()
            .starts_with("Always allow (run_command(mkdir *))")),
        "{choices}"
    );
    assert_eq!(seen(&always, "result")["is_error"], false, "{always:#?}");
    assert!(daemon.work().join("kept").is_dir());
    let config = std::fs::read_to_string(daemon.config_file()).unwrap();
    assert!(
        config.contains("[[permissions.project]]") && config.contains("run_command(mkdir *)"),
        "{config}"
    );

    let denied = host(&python, &daemon, &[], &["ask", "deny", "touch refused"]).await;
    seen(&denied, "elicitation");
    let result = seen(&denied, "result");
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["structured"]["error_type"], "permission_denied");
    assert!(!daemon.work().join("refused").exists());
}

/// Protocol `2026-07-28` has no server-to-client requests: the host is asked by the
/// input-required round trip, and its retry carries the answer.
#[tokio::test]
async fn a_host_on_2026_07_28_approves_by_the_input_required_round_trip() {
    let test = "mcp_serve::round_trip";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    for (answer, file, made) in [
        ("allow_once", "tripped", true),
        ("deny", "untripped", false),
    ] {
        let command = format!("touch {file}");
        let lines = host(&python, &daemon, &[], &["round-trip", answer, &command]).await;
        assert_eq!(seen(&lines, "initialized")["version"], "2026-07-28");
        let asked = seen(&lines, "input_required");
        assert!(
            asked["message"].as_str().unwrap().contains(&command),
            "{asked}"
        );
        let result = seen(&lines, "result");
        assert_eq!(result["is_error"], !made, "{result}");
        assert_eq!(daemon.work().join(file).exists(), made, "{answer}");
        // The same answer again finds no call waiting for it.
        let stale = seen(&lines, "stale");
        assert_eq!(stale["is_error"], true, "{stale}");
        assert!(
            stale["text"]
                .as_str()
                .unwrap()
                .contains("no call of this host waits"),
            "{stale}"
        );
    }
}

#[tokio::test]
async fn without_elicitation_or_approver_a_call_is_denied_naming_the_rule() {
    let test = "mcp_serve::no_approver";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    let lines = host(&python, &daemon, &[], &["ask", "none", "touch unasked"]).await;
    let result = seen(&lines, "result");
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["structured"]["error_type"], "permission_denied");
    let text = result["text"].as_str().unwrap();
    assert!(
        text.contains("add the rule 'run_command(touch *)'"),
        "{text}"
    );
    assert!(!daemon.work().join("unasked").exists());
}

#[tokio::test]
async fn a_joined_session_is_left_as_it_was() {
    let test = "mcp_serve::joined";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "joined\n").unwrap();
    let owner = daemon.connect(json!({}), no_answers()).await;
    let session = owner.create_session(&daemon.work(), json!({})).await;
    let lines = host(
        &python,
        &daemon,
        &["--session", &session],
        &["basics", "2025-11-25", "a.txt"],
    )
    .await;
    assert_eq!(seen(&lines, "read_file")["text"], "joined\n");
    let left: Vec<Value> = sessions(&daemon).await;
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0]["session_id"], session.as_str());
}

/// MCP: "receivers of a cancellation notification SHOULD NOT send a response for the cancelled
/// request". Spoken raw, so that no client library hides a response that came anyway.
#[tokio::test]
async fn a_cancelled_request_is_never_answered() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let daemon = TestDaemon::start();
    let mut server = tokio::process::Command::new(toold_binary())
        .args(["mcp", "serve", "--allow", "run_command", "--socket"])
        .arg(daemon.socket())
        .current_dir(daemon.work())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start toold mcp serve");
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let mut send = async |message: Value| {
        let line = format!("{message}\n");
        stdin.write_all(line.as_bytes()).await.unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    )
    .await;
    let initialized: Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap())
        .expect("the initialize answer");
    assert_eq!(initialized["result"]["protocolVersion"], "2025-06-18");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command": "sleep 30"}}}))
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 5, "reason": "the person pressed Esc"}}),
    )
    .await;
    send(json!({"jsonrpc": "2.0", "id": 6, "method": "ping"})).await;
    let next: Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(next["id"], 6, "{next}");
    // The host leaves: the server ends, having never answered request 5.
    drop(stdin);
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = stdout.next_line().await {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("the server ended when its input closed");
    assert_eq!(rest, Vec::<String>::new());
    let status = server.wait().await.unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_server_added_by_a_reload_reaches_the_host_with_list_changed() {
    let test = "mcp_serve::reload";
    let Some(python) = host_python(test) else {
        return;
    };
    let Some(server_python) = require::program(test, "python3", &[], "apt-get install python3")
    else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(""));
    let mut host = LiveHost::start(&python, &daemon, &["relist"]);
    assert_eq!(host.next().await["event"], "initialized");
    let listed = host.next().await;
    assert_eq!(listed["event"], "listed");
    assert!(!listed["tools"].to_string().contains("mcp__"), "{listed}");

    let config = daemon.root().join("config/toold/config.toml");
    std::fs::write(&config, malformed_server_table(&server_python)).unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    client.request("config/reload", json!({})).await.unwrap();

    let relisted = host.next().await;
    assert_eq!(relisted["event"], "relisted", "{relisted}");
    let names: Vec<&str> = relisted["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|name| name.starts_with("mcp__bad__"))
        .collect();
    assert!(!names.is_empty(), "{relisted}");
    host.finished().await;
}

/// The MCP Inspector's command-line mode, another real host: it lists the tools and calls
/// `read_file` through `toold mcp serve`.
#[tokio::test]
async fn the_mcp_inspector_lists_the_tools_and_reads_a_file() {
    let test = "mcp_serve::inspector";
    let inspector = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp_servers/installed/node/node_modules/.bin/mcp-inspector");
    if !require::file(test, &inspector, "run tests/mcp_servers/install.sh")
        || require::program(test, "node", &[], "apt-get install nodejs").is_none()
    {
        return;
    }
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "inspected\n").unwrap();
    let inspect = async |method: &[&str]| -> Value {
        let run = tokio::process::Command::new(&inspector)
            .arg("--cli")
            .arg(toold_binary())
            .args(["mcp", "serve", "--socket"])
            .arg(daemon.socket())
            .args(method)
            .current_dir(daemon.work())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let stdout = stdout_of_success("the inspector", Duration::from_secs(60), run).await;
        serde_json::from_str(&stdout)
            .unwrap_or_else(|_| panic!("JSON from the inspector: {stdout}"))
    };
    let listed = inspect(&["--method", "tools/list"]).await;
    let names = tool_names(&listed);
    for builtin in [
        "read_file",
        "write_file",
        "edit_file",
        "run_command",
        "find_files",
        "search_code",
    ] {
        assert!(names.contains(&builtin), "{builtin} in {names:?}");
    }
    let read = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "read_file",
        "--tool-arg",
        "path=a.txt",
    ])
    .await;
    assert_eq!(read["isError"], false, "{read}");
    assert_eq!(read["content"][0]["text"], "inspected\n", "{read}");
}

/// A session of an owner that approves nothing, and `toold watch` following it on a terminal.
async fn watched_session(daemon: &TestDaemon) -> (TestClient, String, Terminal) {
    let owner = daemon.connect(json!({}), no_answers()).await;
    let session = owner.create_session(&daemon.work(), json!({})).await;
    let mut watch = daemon.command();
    watch.args(["watch", &session]);
    let terminal = Terminal::spawn(watch);
    terminal.wait_for("watching session");
    (owner, session, terminal)
}

async fn close(owner: &TestClient, session: &str) {
    owner
        .request("session/close", json!({"session_id": session}))
        .await
        .unwrap();
}

/// Two hosts join one session; a person watches it with `toold watch` in a terminal and
/// answers the approval that the host without elicitation cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toold_watch_follows_two_hosts_and_answers_an_approval() {
    let test = "mcp_serve::watch";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    std::fs::write(daemon.work().join("a.txt"), "shared\n").unwrap();
    let (owner, session, mut terminal) = watched_session(&daemon).await;

    let reader = host(
        &python,
        &daemon,
        &["--session", &session],
        &["basics", "2025-11-25", "a.txt"],
    )
    .await;
    assert_eq!(seen(&reader, "read_file")["text"], "shared\n");

    let asker = host_command(
        &python,
        &daemon,
        &["--session", &session],
        &["ask", "none", "touch watched"],
    )
    .spawn()
    .expect("start the second host");
    terminal.wait_for(
        "[y] once / [s] session / [p] always (project) / [n] deny / [d] deny always / [a] abort?",
    );
    assert!(
        terminal.screen().contains("touch watched"),
        "{}",
        terminal.screen()
    );
    terminal.type_line("y");
    let lines = json_lines_of("the second host", asker.wait_with_output()).await;
    assert_eq!(seen(&lines, "result")["is_error"], false, "{lines:#?}");
    assert!(daemon.work().join("watched").exists());

    close(&owner, &session).await;
    let Finished {
        status,
        stdout,
        screen,
        ..
    } = terminal.finish_async().await;
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("was closed"), "{screen}");
    for shown in [
        "read_file {\"path\":\"a.txt\"}",
        "✓ read_file ok",
        "run_command {\"command\":\"touch watched\"}",
        "approval: allow_once (by client)",
        "✓ run_command ok",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }
}

/// Without a session named, `toold watch` follows the one created last; `--json` gives one
/// event a line (with a line for the session it watches and one when that session closes), and
/// off a terminal it asks nothing.
#[tokio::test]
async fn toold_watch_follows_the_newest_session_as_json() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "newest\n").unwrap();
    let owner = daemon.connect(json!({}), no_answers()).await;
    // Ten before it, most within the same second as it: `s_9` sorts after `s_11` as text.
    let mut older = Vec::new();
    for _ in 0..10 {
        older.push(owner.create_session(&daemon.work(), json!({})).await);
    }
    let newest = owner.create_session(&daemon.work(), json!({})).await;
    let mut watch = tokio::process::Command::from(daemon.command());
    watch
        .args(["watch", "--json"])
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut watch = watch.spawn().expect("start toold watch");
    // Attached once the session counts two connections.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let snapshot = owner
            .request("session/get", json!({"session_id": newest}))
            .await
            .unwrap();
        if snapshot["attached"] == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "toold watch never attached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for session in [&older[8], &newest] {
        owner
            .execute(
                session,
                json!([{"id": "r", "name": "read_file", "arguments": {"path": "a.txt"}}]),
            )
            .await;
    }
    owner
        .request("session/close", json!({"session_id": newest}))
        .await
        .unwrap();
    // Its session closed, it says so and waits for the next session, until SIGTERM.
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().expect("piped stdout")).lines();
    let mut events: Vec<Value> = Vec::new();
    while events
        .last()
        .is_none_or(|event| event["method"] != "watch/closed")
    {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("toold watch says its session closed within 60 s")
            .expect("read toold watch's stdout")
            .unwrap_or_else(|| panic!("toold watch ended: {events:#?}"));
        events.push(serde_json::from_str(&line).expect("a JSON line"));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(watch.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), watch.wait())
        .await
        .expect("toold watch ends on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let methods: Vec<&str> = events
        .iter()
        .map(|event| event["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "watch/session",
            "batch/start",
            "tool/call_start",
            "tool/result",
            "tool/call_done",
            "batch/done",
            "watch/closed"
        ],
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .all(|event| event["params"]["session_id"] == newest.as_str()),
        "{events:#?}"
    );
}

/// The host's Python and a daemon whose MCP server `everything` (server-everything) has listed
/// its tools; `None` when either is not installed (the test is skipped, saying so).
async fn host_and_everything(test: &str) -> Option<(PathBuf, TestDaemon)> {
    let python = host_python(test)?;
    let everything = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp_servers/installed/node/node_modules/.bin/mcp-server-everything");
    if !require::file(test, &everything, "run tests/mcp_servers/install.sh") {
        return None;
    }
    let config = format!(
        "[mcp.servers.everything]\ncommand = {:?}\n",
        everything.display().to_string()
    );
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    toold_tests::mcp::tools_when(&client, "mcp__everything__", |count| count > 0).await;
    Some((python, daemon))
}

/// An MCP server's progress (`tool/progress`) reaches the host as its progress notifications,
/// and its structured content as the result's `structuredContent`.
#[tokio::test]
async fn an_mcp_servers_progress_reaches_the_host() {
    let test = "mcp_serve::mcp_progress";
    let Some((python, daemon)) = host_and_everything(test).await else {
        return;
    };
    let lines = host(
        &python,
        &daemon,
        &["--allow", "mcp__everything__*"],
        &[
            "progress",
            "mcp__everything__trigger-long-running-operation",
            r#"{"duration": 1, "steps": 3}"#,
        ],
    )
    .await;
    let messages: Vec<&str> = lines
        .iter()
        .filter(|line| line["event"] == "progress")
        .map(|line| line["message"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(messages.len(), 3, "{lines:#?}");
    assert!(
        messages.iter().all(|message| !message.is_empty()),
        "{messages:?}"
    );
    assert_eq!(seen(&lines, "result")["is_error"], false, "{lines:#?}");

    // A result's `metadata.structured` (the server's structuredContent) is the host's
    // `structuredContent`.
    let lines = host(
        &python,
        &daemon,
        &["--allow", "mcp__everything__*"],
        &[
            "call",
            "mcp__everything__get-structured-content",
            r#"{"location": "New York"}"#,
        ],
    )
    .await;
    let result = seen(&lines, "result");
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        result["structured"],
        json!({"temperature": 33, "conditions": "Cloudy", "humidity": 82}),
        "{result}"
    );
}

/// A failed call reaches the host with its content before the error line: a command's output
/// (its exit code, a timeout), an MCP source's failure; and an MCP source's image reaches it
/// as an image, not as text describing one.
#[tokio::test]
async fn a_failed_call_reaches_the_host_with_its_output_and_images_pass_through() {
    let test = "mcp_serve::failed_output";
    let Some((python, daemon)) = host_and_everything(test).await else {
        return;
    };
    let allowed = ["--allow", "run_command", "--allow", "mcp__everything"];
    let call = |tool: &'static str, arguments: &'static str| ["call", tool, arguments];

    let failed = host(
        &python,
        &daemon,
        &allowed,
        &call(
            "run_command",
            r#"{"command": "echo out; echo err >&2; exit 3"}"#,
        ),
    )
    .await;
    let failed = seen(&failed, "result");
    assert_eq!(failed["is_error"], true, "{failed}");
    let text = failed["text"].as_str().unwrap();
    let error_line = text.find("command_failed: ").expect("the error line");
    for output in ["out", "err"] {
        let at = text
            .find(output)
            .unwrap_or_else(|| panic!("{output} lost: {text:?}"));
        assert!(at < error_line, "the output comes first: {text:?}");
    }
    assert!(text.contains("exited with code 3"), "{text:?}");
    assert_eq!(
        failed["structured"]["error_type"], "command_failed",
        "{failed}"
    );

    let timed_out = host(
        &python,
        &daemon,
        &allowed,
        &call(
            "run_command",
            r#"{"command": "echo before the end; sleep 30", "timeout_ms": 1000}"#,
        ),
    )
    .await;
    let timed_out = seen(&timed_out, "result");
    let text = timed_out["text"].as_str().unwrap();
    assert!(
        text.contains("before the end") && text.contains("timeout: "),
        "{timed_out}"
    );

    let image = host(
        &python,
        &daemon,
        &allowed,
        &call("mcp__everything__get-tiny-image", "{}"),
    )
    .await;
    let image = seen(&image, "result");
    assert_eq!(image["is_error"], false, "{image}");
    let parts = image["parts"].as_array().expect("parts");
    assert!(
        parts
            .iter()
            .any(|part| part["type"] == "image" && part["mime_type"] == "image/png"),
        "{image}"
    );
    assert!(
        !image["text"].as_str().unwrap().contains("[image:"),
        "an image is not described as text: {image}"
    );
}

/// With no daemon answering on its socket, `toold mcp serve` starts one (as `toold connect`
/// does), which outlives it.
#[tokio::test]
async fn toold_mcp_serve_starts_the_daemon_when_none_answers() {
    let test = "mcp_serve::starts_the_daemon";
    let Some(python) = host_python(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let socket = root.join("private/toold.sock");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("a.txt"), "started\n").unwrap();
    let server = [
        toold_binary().display().to_string(),
        "mcp".into(),
        "serve".into(),
        "--allow-root".into(),
        "--socket".into(),
        socket.display().to_string(),
    ];
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/host.py");
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .args(["basics", "2025-11-25", "a.txt"])
        .env("TOOLD_MCP_SERVER", serde_json::to_string(&server).unwrap())
        .env("XDG_RUNTIME_DIR", root.join("run"))
        .env("XDG_STATE_HOME", root.join("state"))
        .env("XDG_CONFIG_HOME", root.join("config"))
        .env_remove("TOOLD_SOCKET")
        .current_dir(&work)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let lines = json_lines_of("the host", run).await;
    assert_eq!(seen(&lines, "read_file")["text"], "started\n");
    let started = ForeignDaemon {
        pid: Some(daemon_pid(&socket)),
    };
    started.stop();
}

/// The daemon restarts under a host: `toold mcp serve` connects again, its session restored
/// and attached again, and the host's next call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_is_reached_again() {
    let test = "mcp_serve::restart";
    let Some(python) = host_python(test) else {
        return;
    };
    let mut daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "before and after\n").unwrap();
    let mut host = LiveHost::start(&python, &daemon, &["restart", "a.txt"]);
    assert_eq!(host.next().await["event"], "initialized");
    let read = host.next().await;
    assert_eq!(read["text"], "before and after\n", "{read}");
    tokio::task::block_in_place(|| daemon.restart());
    std::fs::write(daemon.work().join("go"), "").unwrap();
    let again = host.next().await;
    assert_eq!(again["event"], "again", "{again}");
    assert_eq!(again["is_error"], false, "{again}");
    assert_eq!(again["text"], "before and after\n", "{again}");
    host.finished().await;
}

/// On 2025-06-18 the form's choices are titled with `enumNames` (`oneOf` came later), and the
/// host's answer decides as well.
#[tokio::test]
async fn elicitation_on_2025_06_18() {
    let test = "mcp_serve::elicitation_2025_06_18";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    let mut command = host_command(&python, &daemon, &[], &["ask", "allow_once", "touch older"]);
    command.env("HOST_PROTOCOL_VERSION", "2025-06-18");
    let lines = json_lines_of("the host", command.output()).await;
    assert_eq!(seen(&lines, "initialized")["version"], "2025-06-18");
    seen(&lines, "elicitation");
    assert_eq!(seen(&lines, "result")["is_error"], false, "{lines:#?}");
    assert!(daemon.work().join("older").exists());
}

/// Another connection's client tools run in that client's process: the host may not call
/// them, listed or not.
#[tokio::test]
async fn another_connections_client_tool_is_not_served() {
    let test = "mcp_serve::client_tools";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start();
    let editor = daemon
        .connect(json!({"client_tools": true}), no_answers())
        .await;
    editor
        .request(
            "tools/register",
            json!({"tools": [{"name": "editor_only", "description": "runs in the editor",
                "input_schema": {"type": "object"}, "safety": "read_only"}]}),
        )
        .await
        .unwrap();
    let lines = host(&python, &daemon, &[], &["call", "editor_only", "{}"]).await;
    let result = seen(&lines, "result");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["text"]
            .as_str()
            .unwrap()
            .contains("no tool `editor_only` is served here"),
        "{result}"
    );
}

/// Started in the home directory (or `/`) without `--cwd`, it refuses: the session's roots
/// would hold every secret of the user's.
#[tokio::test]
async fn started_in_the_home_directory_without_cwd_it_refuses() {
    let daemon = TestDaemon::start();
    let home = daemon.work();
    let output = tokio::process::Command::new(toold_binary())
        .args(["mcp", "serve", "--socket"])
        .arg(daemon.socket())
        .env("HOME", &home)
        .current_dir(&home)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("--cwd"), "{said}");
    assert_eq!(sessions(&daemon).await, Vec::<Value>::new());
}

/// A prompt of `toold watch` whose approval another approver settled (here the host, by
/// elicitation) says so and stops reading the terminal: the next line typed answers the
/// next approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_prompt_settled_elsewhere_gives_the_terminal_back() {
    let test = "mcp_serve::watch_settled_elsewhere";
    let Some(python) = host_python(test) else {
        return;
    };
    let daemon = TestDaemon::start_asking();
    let (owner, session, mut terminal) = watched_session(&daemon).await;

    let by_host = host(
        &python,
        &daemon,
        &["--session", &session],
        &["ask", "allow_once", "touch by-host"],
    )
    .await;
    assert_eq!(seen(&by_host, "result")["is_error"], false, "{by_host:#?}");
    terminal.wait_for("(settled elsewhere)");

    let asker = host_command(
        &python,
        &daemon,
        &["--session", &session],
        &["ask", "none", "touch by-watch"],
    )
    .spawn()
    .expect("start the second host");
    let screen_before = terminal.screen().matches("[a] abort?").count();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while terminal.screen().matches("[a] abort?").count() == screen_before {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            terminal.screen()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    terminal.type_line("y");
    let lines = json_lines_of("the second host", asker.wait_with_output()).await;
    assert_eq!(seen(&lines, "result")["is_error"], false, "{lines:#?}");
    assert!(daemon.work().join("by-watch").exists());
    close(&owner, &session).await;
    let finished = terminal.finish_async().await;
    assert_eq!(finished.status.code(), Some(0), "{}", finished.screen);
}
