//! MCP servers as tool sources, end to end: a real daemon starts a real MCP server (a small
//! one written for these tests, in `tests/mcp_servers/`), registers the tools its listing
//! gives (quarantining the malformed one, shortening the long name), and runs calls through
//! the pipeline under the session's rules.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::PATIENCE;
use toold_tests::daemon::{
    TestClient, TestDaemon, no_answers, outcomes, results, wire_error_type_or_ok,
};
use toold_tests::mcp::{
    HttpServer, malformed_server_table, status_until, test_server, toold, tools_when,
};
use toold_tests::procs::children_running;
use toold_tests::require;

/// The config of one server, `bad`, running the malformed test server under python3; `None`
/// (the test skipped) without python3.
fn malformed_server_config(test: &str) -> Option<String> {
    let python = require::program(test, "python3", &[], "apt-get install python3")?;
    Some(malformed_server_table(&python))
}

/// The registry's tools whose names start with `prefix`, once `expected` of them are there.
async fn mcp_tools(client: &TestClient, prefix: &str, expected: usize) -> Vec<Value> {
    tools_when(client, prefix, |count| count >= expected)
        .await
        .into_values()
        .collect()
}

#[tokio::test]
async fn a_malformed_servers_good_tools_are_registered_and_called_through_the_pipeline() {
    let Some(config) = malformed_server_config("mcp_sources::a_malformed_servers_good_tools")
    else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;

    let tools = mcp_tools(&client, "mcp__bad__", 5).await;
    let mut names: Vec<&str> = tools
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names.len(), 5, "no_schema is quarantined: {names:?}");
    assert!(names.contains(&"mcp__bad__echo"));
    assert!(names.contains(&"mcp__bad__fail"));
    let long = *names
        .iter()
        .find(|name| name.starts_with("mcp__bad__a_tool_with"))
        .expect("the long-named tool, shortened");
    assert_eq!(long.len(), 64, "{long}");
    let suffix = &long[long.len() - 9..];
    assert!(
        suffix.starts_with('_') && suffix[1..].chars().all(|c| c.is_ascii_hexdigit()),
        "{long}"
    );
    let echo = tools
        .iter()
        .find(|tool| tool["name"] == "mcp__bad__echo")
        .expect("echo");
    assert_eq!(echo["source"], json!({"mcp": "bad"}));
    assert_eq!(echo["safety"], "side_effect");
    assert_eq!(echo["description"], "Echoes its text");
    let fail = tools
        .iter()
        .find(|tool| tool["name"] == "mcp__bad__fail")
        .expect("fail");
    assert_eq!(
        fail["safety"], "side_effect",
        "an untrusted server's readOnlyHint lowers no risk"
    );

    // mcp/status: the server, its tools, the quarantined one and why.
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    let server = &status["servers"][0];
    assert_eq!(server["name"], "bad", "{status}");
    assert_eq!(server["state"], "ready", "{status}");
    assert_eq!(server["transport"], "stdio", "{status}");
    assert_eq!(server["restarts"], 0, "{status}");
    assert_eq!(
        server["pid"].as_u64(),
        server_pid(&daemon, "malformed.py").map(u64::from),
        "{status}"
    );
    assert!(server["protocol_version"].is_string(), "{status}");
    assert_eq!(
        server["tools"].as_array().map(Vec::len),
        Some(5),
        "{status}"
    );
    assert_eq!(server["quarantined"][0]["tool"], "no_schema", "{status}");
    assert!(
        server["quarantined"][0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("\"type\": \"object\"")),
        "{status}"
    );

    // Calls go through the pipeline: the session's rules decide.
    let asking = client.create_session(&daemon.work(), json!({})).await;
    let denied = client
        .execute(
            &asking,
            json!([{"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "hi"}}]),
        )
        .await;
    assert_eq!(
        outcomes(&denied),
        ["permission_denied"],
        "a side-effect tool asks, and no approver answers: {denied}"
    );

    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__bad__*"], "deny": ["mcp__bad__fail"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([
                {"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "hi"}},
                {"id": "c2", "name": long, "arguments": {}},
                {"id": "c3", "name": "mcp__bad__fail", "arguments": {}},
                {"id": "c4", "name": "mcp__bad__echo", "arguments": {"text": 5}},
            ]),
        )
        .await;
    let results = results(&response);
    assert_eq!(
        outcomes(&response),
        ["ok", "ok", "permission_denied", "invalid_arguments"],
        "{response}"
    );
    assert_eq!(results[0]["content"], "echo: hi");
    assert_eq!(results[1]["content"], "the long one answered");

    // Without the deny, the server's own failure is a tool_error with its message.
    let open = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["mcp__bad__*"]}}))
        .await;
    let failed = client
        .execute(
            &open,
            json!([{"id": "c1", "name": "mcp__bad__fail", "arguments": {}}]),
        )
        .await;
    let failed = &results_of(&failed)[0];
    assert_eq!(wire_error_type_or_ok(failed), "tool_error", "{failed}");
    assert_eq!(failed["error"], "it failed on purpose", "{failed}");

    // An answer over the 16 MiB limit on one message fails its call at once, and the server's
    // next answer is read whole.
    let over = client
        .execute(
            &open,
            json!([
                {"id": "c1", "name": "mcp__bad__echo",
                 "arguments": {"text": "x".repeat(1024), "times": 17 * 1024}},
                {"id": "c2", "name": "mcp__bad__echo", "arguments": {"text": "after"}},
            ]),
        )
        .await;
    let over = results_of(&over);
    assert_eq!(wire_error_type_or_ok(&over[0]), "tool_error", "{}", over[0]);
    assert!(
        over[0]["error"]
            .as_str()
            .is_some_and(|error| error.contains("over the 16 MiB limit")),
        "{}",
        over[0]
    );
    assert_eq!(over[1]["content"], "echo: after", "{}", over[1]);

    // An answer nested deeper than toold reads (128 levels) fails its call rather than losing
    // part of it; one nested within the limit comes back whole.
    let nested = client
        .execute(
            &open,
            json!([
                {"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "deep", "nest": 200}},
                {"id": "c2", "name": "mcp__bad__echo", "arguments": {"text": "deep", "nest": 100}},
            ]),
        )
        .await;
    let nested = results_of(&nested);
    assert_eq!(
        wire_error_type_or_ok(&nested[0]),
        "tool_error",
        "{}",
        nested[0]
    );
    assert!(
        nested[0]["error"]
            .as_str()
            .is_some_and(|error| error.contains("an unreadable result")),
        "{}",
        nested[0]
    );
    assert_eq!(nested[1]["content"], "echo: deep", "{}", nested[1]);
    let mut depth = 0;
    let mut level = &nested[1]["metadata"]["structured"]["nested"];
    while let Some(inner) = level.as_array() {
        depth += 1;
        level = inner.first().unwrap_or(&Value::Null);
    }
    assert_eq!(depth, 100, "{}", nested[1]);

    // The server's stderr went to its log, not to the daemon's.
    let log = daemon.state_dir().join("mcp/bad.log");
    let logged = std::fs::read_to_string(&log).expect("the server's log");
    assert!(logged.contains("malformed test server started"), "{logged}");
}

/// Over streamable HTTP, rmcp's transport refuses an answer too deep to read: the call fails at
/// once with `internal_error` quoting it (no wait for a timeout), the server is reached again,
/// and its next answer is read whole.
#[tokio::test]
async fn an_http_servers_answer_too_deep_to_read_fails_its_call_at_once() {
    let Some(python) = require::program(
        "mcp_sources::an_http_servers_answer_too_deep_to_read",
        "python3",
        &[],
        "apt-get install python3",
    ) else {
        return;
    };
    let server = HttpServer::start(|port| {
        let mut command = Command::new(&python);
        command
            .arg(test_server("malformed.py"))
            .args(["--http", &port.to_string()]);
        command
    });
    let config = format!(
        "[mcp.servers.web]\nurl = {:?}\ntool_timeout_ms = 20000\n",
        server.url
    );
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    mcp_tools(&client, "mcp__web__", 5).await;
    let session = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["mcp__web__*"]}}))
        .await;

    let started = Instant::now();
    let deep = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__web__echo",
                    "arguments": {"text": "deep", "nest": 200}}]),
        )
        .await;
    let deep = &results_of(&deep)[0];
    assert_eq!(wire_error_type_or_ok(deep), "internal_error", "{deep}");
    assert!(
        deep["error"]
            .as_str()
            .is_some_and(|error| error.contains("recursion limit")),
        "{deep}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{deep}");

    status_until(&client, PATIENCE, "the server reached again", |status| {
        let server = &status["servers"][0];
        (server["state"] == "ready"
            && server["restarts"].as_u64() >= Some(1)
            && server["tools"].as_array().map(Vec::len) == Some(5))
        .then_some(())
    })
    .await;
    mcp_tools(&client, "mcp__web__", 5).await;
    let shallow = client
        .execute(
            &session,
            json!([{"id": "c2", "name": "mcp__web__echo",
                    "arguments": {"text": "shallow", "nest": 100}}]),
        )
        .await;
    let shallow = &results_of(&shallow)[0];
    assert_eq!(wire_error_type_or_ok(shallow), "ok", "{shallow}");
    assert_eq!(shallow["content"], "echo: shallow", "{shallow}");
    assert!(
        shallow["metadata"]["structured"]["nested"].is_array(),
        "{shallow}"
    );
}

fn results_of(response: &Value) -> Vec<Value> {
    results(response).into_iter().cloned().collect()
}

/// The daemon's child running `script`, if any.
fn server_pid(daemon: &TestDaemon, script: &str) -> Option<u32> {
    children_running(daemon.pid(), script).first().copied()
}

/// The pid of the one configured server once `mcp/status` says it is ready in a process other
/// than `not`, and that process runs `script`: after a crash or a restart the old listing can
/// still be seen for a moment, and the new process is started after a backoff.
async fn ready_server_pid(
    client: &TestClient,
    daemon: &TestDaemon,
    script: &str,
    not: Option<u32>,
) -> u32 {
    status_until(
        client,
        PATIENCE,
        "the server to be ready in a new process",
        |status| {
            let server = &status["servers"][0];
            (server["state"] == "ready")
                .then(|| server["pid"].as_u64())
                .flatten()
                .and_then(|pid| u32::try_from(pid).ok())
                .filter(|pid| Some(*pid) != not && server_pid(daemon, script) == Some(*pid))
        },
    )
    .await
}

/// A server killed with SIGKILL loses its tools, and comes back with them after its backoff,
/// as a new process.
#[tokio::test]
async fn a_killed_server_comes_back_with_its_tools() {
    let Some(config) = malformed_server_config("mcp_sources::a_killed_server_comes_back") else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    mcp_tools(&client, "mcp__bad__", 5).await;
    let first = server_pid(&daemon, "malformed.py").expect("the server's process");

    toold_tests::procs::send_signal(first, nix::sys::signal::Signal::SIGKILL);
    let deadline = Instant::now() + PATIENCE;
    let second = loop {
        if let Some(pid) = server_pid(&daemon, "malformed.py").filter(|pid| *pid != first) {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the server was not started again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(first, second);
    let tools = mcp_tools(&client, "mcp__bad__", 5).await;
    assert_eq!(tools.len(), 5);
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    assert_eq!(status["servers"][0]["restarts"], 1, "{status}");
    assert!(
        status["servers"][0]["last_error"]
            .as_str()
            .is_some_and(|error| error.contains("exited")),
        "{status}"
    );
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__bad__echo"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "again"}}]),
        )
        .await;
    assert_eq!(
        results(&response)[0]["content"],
        "echo: again",
        "{response}"
    );

    // A crash during a call: once the call has failed, the status never says `ready` with
    // the dead process's pid.
    let crashed = server_pid(&daemon, "malformed.py").expect("the server's process");
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__bad__crash"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([{"id": "c2", "name": "mcp__bad__crash", "arguments": {}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "internal_error",
        "{response}"
    );
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    let server = &status["servers"][0];
    assert!(
        !(server["state"] == "ready" && server["pid"] == crashed),
        "ready with the crashed process's pid: {status}"
    );
}

/// Waits until the server's log holds `count` lines containing `text`.
async fn logged(daemon: &TestDaemon, text: &str, count: usize) -> String {
    let log = daemon.state_dir().join("mcp/bad.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if logged.matches(text).count() >= count {
            return logged;
        }
        assert!(
            Instant::now() < deadline,
            "the server's log never showed {count} × {text:?}: {logged}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A call stopped by a cancel or by its timeout ends at once, the server is told
/// (`notifications/cancelled`), and it still answers afterwards; a server that exits during a
/// call fails it with its last words quoted.
#[tokio::test]
async fn stopped_calls_end_at_once_and_a_crash_is_quoted() {
    let Some(mut config) = malformed_server_config("mcp_sources::stopped_calls_end_at_once") else {
        return;
    };
    config.push_str("tool_timeout_ms = 3000\n");
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    mcp_tools(&client, "mcp__bad__", 5).await;
    let session = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["mcp__bad__*"]}}))
        .await;
    let slow = json!([{"id": "c1", "name": "mcp__bad__slow", "arguments": {}}]);

    // Canceled: the batch ends before the tool's timeout could end it.
    let started = Instant::now();
    let (canceled, _) = tokio::join!(client.execute(&session, slow.clone()), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        client
            .request("tools/cancel", json!({"session_id": session}))
            .await
            .expect("tools/cancel")
    });
    assert_eq!(
        wire_error_type_or_ok(results(&canceled)[0]),
        "canceled",
        "{canceled}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "the cancel, not the timeout, ended it"
    );
    logged(&daemon, "cancelled request", 1).await;

    // Timed out: ended at the tool's timeout, the server told again.
    let timed_out = client.execute(&session, slow).await;
    assert_eq!(
        wire_error_type_or_ok(results(&timed_out)[0]),
        "timeout",
        "{timed_out}"
    );
    logged(&daemon, "cancelled request", 2).await;

    let echo = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "still here"}}]),
        )
        .await;
    assert_eq!(results(&echo)[0]["content"], "echo: still here", "{echo}");

    let crashed = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__bad__crash", "arguments": {"words": "farewell"}}]),
        )
        .await;
    let result = results(&crashed)[0];
    assert_eq!(wire_error_type_or_ok(result), "internal_error", "{crashed}");
    let message = result["error"].as_str().expect("a message");
    assert!(message.contains("dying now: farewell"), "{message}");

    // A server that closes its output but lives on answers nothing more: its call ends, and
    // the process is stopped and a new one started.
    let hanging = ready_server_pid(&client, &daemon, "malformed.py", None).await;
    let hung_up = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__bad__crash",
                "arguments": {"words": "bye", "hang_up": true}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&hung_up)[0]),
        "internal_error",
        "{hung_up}"
    );
    let deadline = Instant::now() + PATIENCE;
    while toold_tests::procs::process_alive(hanging)
        || server_pid(&daemon, "malformed.py").is_none_or(|pid| pid == hanging)
    {
        assert!(
            Instant::now() < deadline,
            "the hung-up server was not replaced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A daemon killed with SIGKILL leaves no server process behind.
#[tokio::test]
async fn a_daemon_killed_leaves_no_server_behind() {
    let Some(config) = malformed_server_config("mcp_sources::a_daemon_killed_leaves_no_server")
    else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    mcp_tools(&client, "mcp__bad__", 5).await;
    let server = server_pid(&daemon, "malformed.py").expect("the server's process");

    toold_tests::procs::send_signal(daemon.pid(), nix::sys::signal::Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(5);
    while toold_tests::procs::process_alive(server) {
        assert!(
            Instant::now() < deadline,
            "the server outlived its daemon by 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Without MCP servers in the config, `mcp/status` lists none.
#[tokio::test]
async fn mcp_status_lists_no_server_without_one_configured() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    assert_eq!(status, json!({"servers": []}));
}

/// `toold mcp status` shows each server and its quarantined tools (exit 0 when all are
/// ready); `toold mcp restart NAME` starts a new process; an unknown name is an error (exit 2).
#[tokio::test]
async fn the_mcp_commands_show_and_restart_servers() {
    let Some(config) = malformed_server_config("mcp_sources::the_mcp_commands") else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    mcp_tools(&client, "mcp__bad__", 5).await;
    let first = server_pid(&daemon, "malformed.py").expect("the server's process");

    let status = toold(&daemon, &["mcp", "status"]).await;
    let shown = String::from_utf8_lossy(&status.stdout);
    assert_eq!(status.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains(&format!("bad: ready (pid {first}, stdio")),
        "{shown}"
    );
    assert!(shown.contains("5 tools"), "{shown}");
    assert!(shown.contains("quarantined no_schema:"), "{shown}");

    let restarted = toold(&daemon, &["mcp", "restart", "bad", "--json"]).await;
    assert_eq!(restarted.status.code(), Some(0));
    let restarted: Value = serde_json::from_slice(&restarted.stdout).expect("JSON");
    assert_eq!(restarted["name"], "bad");
    let second = ready_server_pid(&client, &daemon, "malformed.py", Some(first)).await;
    mcp_tools(&client, "mcp__bad__", 5).await;
    assert_ne!(first, second);
    assert!(
        !toold_tests::procs::process_alive(first),
        "the old one is gone"
    );

    let unknown = toold(&daemon, &["mcp", "restart", "nope"]).await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("no MCP server is named \"nope\""),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
}

/// A lazy server starts at its first use: a call that names one of its tools (which then
/// runs), or the first `tools/list` (which then lists its tools).
#[tokio::test]
async fn a_lazy_server_starts_at_its_first_use() {
    let Some(mut config) = malformed_server_config("mcp_sources::a_lazy_server_starts") else {
        return;
    };
    config.push_str("start = \"lazy\"\n");

    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server_pid(&daemon, "malformed.py"), None, "not started yet");
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    assert_eq!(status["servers"][0]["state"], "stopped", "{status}");
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__bad__*"], "deny": ["mcp__bad__fail"]}}),
        )
        .await;
    // Explain judges a call of its tools as a call would be judged once it started, says it
    // would start, and starts nothing.
    for (tool, decision, step) in [
        ("mcp__bad__echo", "allow", "allow_rule"),
        ("mcp__bad__fail", "deny", "deny_rule"),
    ] {
        let explained = client.explain(&session, tool, &json!({"text": "x"})).await;
        assert_eq!(explained["decision"], decision, "{explained}");
        assert_eq!(explained["step"], step, "{explained}");
        assert_eq!(explained["starts_server"], "bad", "{explained}");
    }
    let explained = client
        .request(
            "permissions/explain",
            json!({"session_id": session, "call": {"name": "mcp__elsewhere__echo"}}),
        )
        .await
        .expect("permissions/explain");
    assert_eq!(explained["decision"], "unknown_tool", "{explained}");
    assert_eq!(explained["starts_server"], Value::Null, "{explained}");
    let shown = toold(&daemon, &["explain", "mcp__bad__echo", "{}"]).await;
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("starts: the MCP server bad"),
        "{shown:?}"
    );
    assert_eq!(
        server_pid(&daemon, "malformed.py"),
        None,
        "explain started nothing"
    );
    let response = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__bad__echo", "arguments": {"text": "lazy"}}]),
        )
        .await;
    assert_eq!(results(&response)[0]["content"], "echo: lazy", "{response}");
    assert!(server_pid(&daemon, "malformed.py").is_some());

    // Beside a lazy server that cannot start: the first listing waits for its first failure,
    // not through its backoff.
    config
        .push_str("\n[mcp.servers.broken]\ncommand = \"/nonexistent/server\"\nstart = \"lazy\"\n");
    let listing = TestDaemon::start_with_config(Some(&config));
    let client = listing.connect(json!({}), no_answers()).await;
    let started = Instant::now();
    let listed = client.list_tools(json!({})).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the listing waited {:?}",
        started.elapsed()
    );
    let mcp_tools = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter(|tool| {
            tool["name"]
                .as_str()
                .is_some_and(|name| name.starts_with("mcp__bad__"))
        })
        .count();
    assert_eq!(
        mcp_tools, 5,
        "the first listing has the lazy server's tools"
    );
}

/// A server that never answers `tools/list` is not left `starting`: the listing is given up
/// after its startup timeout, the process stopped, and the server started again.
#[tokio::test]
async fn a_server_that_never_lists_its_tools_is_started_again() {
    let Some(mut config) = malformed_server_config("mcp_sources::a_server_that_never_lists") else {
        return;
    };
    config.push_str("startup_timeout_ms = 500\nenv = { MALFORMED_NEVER_LISTS = \"1\" }\n");
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let status = status_until(
        &client,
        Duration::from_secs(20),
        "the listing to be given up",
        |status| {
            // The same timeout bounds the handshake: on a slow machine the first attempt may
            // be given up there, so wait for the listing's own.
            let gave_up_listing = status["servers"][0]["last_error"]
                .as_str()
                .is_some_and(|error| error.contains("tools/list"));
            (status["servers"][0]["restarts"].as_u64() >= Some(1) && gave_up_listing)
                .then(|| status.clone())
        },
    )
    .await;
    assert!(
        status["servers"][0]["last_error"]
            .as_str()
            .is_some_and(|error| error.contains("no answer to tools/list within 500 ms")),
        "{status}"
    );
    let servers = children_running(daemon.pid(), "malformed.py").len();
    assert!(
        servers <= 1,
        "the given-up process was stopped ({servers} alive)"
    );
}
