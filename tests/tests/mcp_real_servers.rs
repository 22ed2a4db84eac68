//! MCP servers as tool sources, against the real servers of the npm and Python registries
//! (`@modelcontextprotocol/server-everything`, `-filesystem`, `-memory`, and `mcp-server-time`),
//! installed by `tests/mcp_servers/install.sh` (which `.ci/run` runs): one process per server
//! shared by every session, names and safety as the config's trust says, the registry kept
//! equal to the server's listing, cancel, crashes and restarts, rules with tool globs, and no
//! server left behind by a killed daemon.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::PATIENCE;
use toold_tests::daemon::{
    TestClient, TestDaemon, no_answers, outcomes, results, tool_names, wire_error_type_or_ok,
};
use toold_tests::mcp::{HttpServer, status_until, toold, tools_named};
use toold_tests::procs::{cmdline, descendants};
use toold_tests::require;

/// Where `install.sh` puts the servers.
fn installed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/installed")
}

fn node_bin(name: &str) -> PathBuf {
    installed().join("node/node_modules/.bin").join(name)
}

/// Whether the servers are installed; the test is skipped (saying so) when they are not.
fn servers_installed(test: &str) -> bool {
    let install = "run tests/mcp_servers/install.sh";
    [
        node_bin("mcp-server-everything"),
        node_bin("mcp-server-filesystem"),
        node_bin("mcp-server-memory"),
        installed().join("python/bin/mcp-server-time"),
    ]
    .iter()
    .all(|path| require::file(test, path, install))
}

/// `[mcp.servers.everything]`, run from its installed program.
fn everything_config() -> String {
    format!(
        "[mcp.servers.everything]\ncommand = {:?}\n",
        node_bin("mcp-server-everything").display().to_string()
    )
}

/// The four servers: `everything` and `memory` (through `npx`) untrusted, `fs` (serving
/// `root`) and `time` trusted.
fn four_servers_config(root: &Path) -> String {
    format!(
        "{}\n\
         [mcp.servers.fs]\ncommand = {:?}\nargs = [{:?}]\ntrust = \"trusted\"\n\n\
         [mcp.servers.memory]\ncommand = \"npx\"\nargs = [\"--offline\", \"@modelcontextprotocol/server-memory\"]\ncwd = {:?}\n\n\
         [mcp.servers.time]\ncommand = {:?}\ntrust = \"trusted\"\n",
        everything_config(),
        node_bin("mcp-server-filesystem").display().to_string(),
        root.display().to_string(),
        installed().join("node").display().to_string(),
        installed()
            .join("python/bin/mcp-server-time")
            .display()
            .to_string(),
    )
}

/// `mcp/status`'s entry for `server` once it is `state` (waiting up to 30 s).
async fn status_when(client: &TestClient, server: &str, state: &str) -> Value {
    status_until(
        client,
        PATIENCE,
        &format!("{server} to be {state}"),
        |status| {
            let entry = status["servers"]
                .as_array()
                .expect("servers")
                .iter()
                .find(|entry| entry["name"] == server)
                .unwrap_or_else(|| panic!("{server} is not configured: {status}"));
            (entry["state"] == state).then(|| entry.clone())
        },
    )
    .await
}

/// The registry's definitions of `server`'s tools, by name.
async fn registered(client: &TestClient, server: &str) -> BTreeMap<String, Value> {
    tools_named(client, &format!("mcp__{server}__")).await
}

/// `server`'s `echo` of `message` in `session`: the whole response.
async fn echo(client: &TestClient, session: &str, server: &str, message: &str) -> Value {
    client
        .execute(
            session,
            json!([{"id": "e", "name": format!("mcp__{server}__echo"),
                "arguments": {"message": message}}]),
        )
        .await
}

fn text(result: &Value) -> &str {
    result["content"].as_str().unwrap_or_default()
}

/// Four real servers, two sessions on two connections: one process per server serves both;
/// tools are named and rated as the config's trust says; rules with tool globs decide.
#[tokio::test]
async fn two_sessions_share_one_process_per_server_under_their_rules() {
    let test = "mcp_real_servers::two_sessions_share_one_process_per_server";
    if !servers_installed(test) {
        return;
    }
    let work = tempfile::tempdir().expect("a directory for the filesystem server");
    let root = work.path().canonicalize().expect("canonical");
    std::fs::write(root.join("notes.txt"), "shared notes\n").expect("a file");
    let daemon = TestDaemon::start_with_config(Some(&four_servers_config(&root)));
    let first = daemon.connect(json!({}), no_answers()).await;
    let mut pids = BTreeMap::new();
    for server in ["everything", "fs", "memory", "time"] {
        let status = status_when(&first, server, "ready").await;
        pids.insert(server, status["pid"].as_u64().expect("a pid"));
    }

    // Names and safety: an untrusted server's readOnlyHint lowers no risk; a trusted one's does.
    let everything = registered(&first, "everything").await;
    let long_running = &everything["mcp__everything__trigger-long-running-operation"];
    assert_eq!(long_running["safety"], "side_effect", "{long_running}");
    assert_eq!(long_running["source"], json!({"mcp": "everything"}));
    assert!(everything.contains_key("mcp__everything__echo"));
    let fs = registered(&first, "fs").await;
    assert_eq!(fs["mcp__fs__read_text_file"]["safety"], "read_only");
    assert_eq!(fs["mcp__fs__write_file"]["safety"], "side_effect");
    let time = registered(&first, "time").await;
    assert!(time.contains_key("mcp__time__get_current_time"), "{time:?}");
    let memory = registered(&first, "memory").await;
    assert!(
        memory.values().all(|tool| tool["safety"] == "side_effect"),
        "{memory:?}"
    );

    let rules = json!({"rules": {"allow": ["mcp__*"], "deny": ["mcp__fs__write_file"]}});
    let session_one = first.create_session(&root, rules.clone()).await;
    let second = daemon.connect(json!({}), no_answers()).await;
    let session_two = second.create_session(&root, rules).await;
    let processes_before = descendants(daemon.pid());

    for (client, session, entity) in [
        (&first, &session_one, "one"),
        (&second, &session_two, "two"),
    ] {
        let response = client
            .execute(
                session,
                json!([
                    {"id": "e", "name": "mcp__everything__echo", "arguments": {"message": entity}},
                    {"id": "r", "name": "mcp__fs__read_text_file", "arguments": {"path": root.join("notes.txt")}},
                    {"id": "w", "name": "mcp__fs__write_file", "arguments": {"path": root.join("written.txt"), "content": "no"}},
                    {"id": "d", "name": "mcp__fs__create_directory", "arguments": {"path": root.join(format!("dir-{entity}"))}},
                    {"id": "m", "name": "mcp__memory__create_entities", "arguments": {"entities": [{"name": entity, "entityType": "session", "observations": []}]}},
                    {"id": "t", "name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}},
                ]),
            )
            .await;
        let results = results(&response);
        assert_eq!(
            outcomes(&response),
            ["ok", "ok", "permission_denied", "ok", "ok", "ok"],
            "{response}"
        );
        assert!(text(results[0]).contains(entity), "{response}");
        assert_eq!(text(results[1]), "shared notes\n", "{response}");
        assert!(text(results[5]).contains("UTC"), "{response}");
        assert!(root.join(format!("dir-{entity}")).is_dir());
    }
    assert!(
        !root.join("written.txt").exists(),
        "the denied write_file never reached the server"
    );

    // One memory server for both sessions: each sees the other's entity.
    let graph = second
        .execute(
            &session_two,
            json!([{"id": "g", "name": "mcp__memory__read_graph", "arguments": {}}]),
        )
        .await;
    let graph = text(results(&graph)[0]).to_owned();
    assert!(
        graph.contains("\"one\"") && graph.contains("\"two\""),
        "{graph}"
    );

    // The same processes served both sessions; none was started for the second.
    for (server, pid) in &pids {
        let status = status_when(&second, server, "ready").await;
        assert_eq!(status["pid"].as_u64(), Some(*pid), "{server}");
        assert_eq!(status["restarts"], 0, "{server}");
    }
    assert_eq!(descendants(daemon.pid()), processes_before);
    let everything_processes = processes_before
        .iter()
        .filter(|pid| cmdline(**pid).contains("node_modules/.bin/mcp-server-everything"))
        .count();
    assert_eq!(everything_processes, 1);
}

/// A daemon running four servers (one through `npx`) killed with SIGKILL leaves none of their
/// processes alive 5 s later.
#[tokio::test]
async fn a_killed_daemon_leaves_none_of_four_servers_behind() {
    let test = "mcp_real_servers::a_killed_daemon_leaves_none_of_four_servers_behind";
    if !servers_installed(test) {
        return;
    }
    let work = tempfile::tempdir().expect("a directory for the filesystem server");
    let mut daemon = TestDaemon::start_with_config(Some(&four_servers_config(work.path())));
    let client = daemon.connect(json!({}), no_answers()).await;
    for server in ["everything", "fs", "memory", "time"] {
        status_when(&client, server, "ready").await;
    }
    let processes = descendants(daemon.pid());
    assert!(
        processes
            .iter()
            .any(|pid| cmdline(*pid).contains("npx") || cmdline(*pid).contains("npm exec")),
        "the memory server runs through npx: {:?}",
        processes
            .iter()
            .map(|pid| cmdline(*pid))
            .collect::<Vec<_>>()
    );
    daemon.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive: Vec<String> = processes
            .iter()
            .filter(|pid| toold_tests::procs::process_alive(**pid))
            .map(|pid| format!("{pid}: {}", cmdline(*pid)))
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "alive 5 s after the daemon was killed: {alive:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh listing of server-everything's tools, from a process of its own started here, as
/// the daemon names them.
fn fresh_everything_listing() -> BTreeMap<String, Value> {
    let mut server = Command::new(node_bin("mcp-server-everything"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server-everything");
    let mut stdin = server.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(server.stdout.take().expect("stdout"));
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").expect("write to the server");
    };
    let mut answer = |id: i64| loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "the server closed"
        );
        let message: Value = serde_json::from_str(&line).expect("JSON from the server");
        if message["id"] == id {
            return message;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fresh-listing", "version": "1"}}}),
    );
    answer(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    std::thread::sleep(Duration::from_millis(500));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    let listing = answer(2);
    let _ = server.kill();
    let _ = server.wait();
    listing["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| {
            let name = tool["name"].as_str().expect("a name");
            (format!("mcp__everything__{name}"), tool.clone())
        })
        .collect()
}

/// server-everything registers more tools once initialized and says so with
/// `notifications/tools/list_changed`: the registry ends equal to a fresh listing, and clients
/// are told `tools/list_changed`.
#[tokio::test]
async fn after_list_changed_the_registry_equals_a_fresh_listing() {
    let test = "mcp_real_servers::after_list_changed_the_registry_equals_a_fresh_listing";
    if !servers_installed(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some(&everything_config()));
    let mut client = daemon.connect(json!({}), no_answers()).await;
    client
        .next_notification_matching(|notification| notification.method == "tools/list_changed")
        .await;
    let fresh = fresh_everything_listing();
    assert!(
        fresh.contains_key("mcp__everything__simulate-research-query"),
        "registered after initialization: {:?}",
        fresh.keys()
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let registry = registered(&client, "everything").await;
        let same = registry.keys().eq(fresh.keys())
            && registry.iter().all(|(name, tool)| {
                tool["description"] == fresh[name]["description"]
                    && tool["input_schema"] == fresh[name]["inputSchema"]
            });
        if same {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the registry never matched a fresh listing:\n{:?}\n{:?}",
            registry.keys(),
            fresh.keys()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cancel at 1 s ends a long call within 200 ms, and the server still answers.
#[tokio::test]
async fn a_cancel_ends_a_long_call_at_once_and_the_server_still_answers() {
    let test = "mcp_real_servers::a_cancel_ends_a_long_call_at_once";
    if !servers_installed(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some(&everything_config()));
    let client = daemon.connect(json!({}), no_answers()).await;
    status_when(&client, "everything", "ready").await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__everything__*"]}}),
        )
        .await;
    let long = json!([{"id": "long", "name": "mcp__everything__trigger-long-running-operation",
        "arguments": {"duration": 10, "steps": 10}}]);
    let ((response, ended_at), canceled_at) = tokio::join!(
        async { (client.execute(&session, long).await, Instant::now()) },
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let at = Instant::now();
            client
                .request("tools/cancel", json!({"session_id": session}))
                .await
                .expect("tools/cancel");
            at
        }
    );
    assert_eq!(
        wire_error_type_or_ok(results(&response)[0]),
        "canceled",
        "{response}"
    );
    let ended = ended_at.saturating_duration_since(canceled_at);
    assert!(
        ended <= Duration::from_millis(200),
        "the call ended {ended:?} after the cancel"
    );
    let echoed = echo(&client, &session, "everything", "still").await;
    assert_eq!(wire_error_type_or_ok(results(&echoed)[0]), "ok", "{echoed}");
    assert!(text(results(&echoed)[0]).contains("still"), "{echoed}");
}

/// A server killed with SIGKILL during a call: the call fails at once quoting the server's
/// stderr, the server comes back; after 5 crashes it is `failed` and its tools are gone, until
/// a reload starts it again; `mcp/restart` replaces a running one.
#[tokio::test]
async fn a_killed_server_fails_its_call_comes_back_and_fails_after_five_crashes() {
    let test = "mcp_real_servers::a_killed_server_fails_its_call";
    if !servers_installed(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some(&everything_config()));
    let client = daemon.connect(json!({}), no_answers()).await;
    let mut pid = status_when(&client, "everything", "ready").await["pid"]
        .as_u64()
        .expect("a pid");
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__everything__*"]}}),
        )
        .await;
    let long = json!([{"id": "long", "name": "mcp__everything__trigger-long-running-operation",
        "arguments": {"duration": 20, "steps": 20}}]);
    let kill = |pid: u64| {
        toold_tests::procs::send_signal(
            u32::try_from(pid).expect("a pid"),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    let ((response, ended_at), killed_at) = tokio::join!(
        async { (client.execute(&session, long).await, Instant::now()) },
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            kill(pid);
            Instant::now()
        }
    );
    let result = results(&response)[0];
    assert_eq!(
        wire_error_type_or_ok(result),
        "internal_error",
        "{response}"
    );
    let message = result["error"].as_str().expect("a message");
    assert!(
        message.contains("Starting default (STDIO) server"),
        "the server's stderr is quoted: {message}"
    );
    assert!(
        ended_at.saturating_duration_since(killed_at) < Duration::from_secs(2),
        "the call ended at once"
    );

    // It comes back, and answers.
    for crash in 1..5 {
        let deadline = Instant::now() + PATIENCE;
        let next = loop {
            let status = status_when(&client, "everything", "ready").await;
            let next = status["pid"].as_u64().expect("a pid");
            if next != pid {
                assert_eq!(status["restarts"], crash, "{status}");
                break next;
            }
            assert!(Instant::now() < deadline, "never started again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if crash == 1 {
            let echoed = echo(&client, &session, "everything", "back").await;
            assert_eq!(wire_error_type_or_ok(results(&echoed)[0]), "ok", "{echoed}");
        }
        pid = next;
        kill(pid);
    }
    let failed = status_when(&client, "everything", "failed").await;
    assert_eq!(failed["restarts"], 5, "{failed}");
    assert!(failed.get("pid").is_none(), "{failed}");
    assert!(registered(&client, "everything").await.is_empty());
    let gone = echo(&client, &session, "everything", "x").await;
    assert_eq!(
        wire_error_type_or_ok(results(&gone)[0]),
        "unknown_tool",
        "{gone}"
    );

    // A reload starts a failed server again, its table unchanged, with a fresh count.
    let reloaded = toold(&daemon, &["reload", "--json"]).await;
    assert_eq!(reloaded.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&reloaded.stdout).expect("JSON");
    assert_eq!(report["mcp_restarted"], json!(["everything"]), "{report}");
    let ready = status_when(&client, "everything", "ready").await;
    assert_eq!(ready["restarts"], 0, "{ready}");
    let echoed = echo(&client, &session, "everything", "after the reload").await;
    assert_eq!(wire_error_type_or_ok(results(&echoed)[0]), "ok", "{echoed}");

    // mcp/restart replaces a running server with a new process.
    let before = ready["pid"].as_u64().expect("a pid");
    let restarted = client
        .request("mcp/restart", json!({"name": "everything"}))
        .await
        .expect("mcp/restart");
    assert_eq!(restarted["name"], "everything", "{restarted}");
    assert!(
        restarted["state"] == "starting" || restarted["state"] == "ready",
        "{restarted}"
    );
    let after = status_when(&client, "everything", "ready").await;
    assert_ne!(after["pid"].as_u64(), Some(before), "{after}");
    assert!(!toold_tests::procs::process_alive(
        u32::try_from(before).expect("a pid")
    ));
    let echoed = echo(&client, &session, "everything", "again").await;
    assert_eq!(wire_error_type_or_ok(results(&echoed)[0]), "ok", "{echoed}");
    let unknown = client
        .request("mcp/restart", json!({"name": "nope"}))
        .await
        .expect_err("no such server");
    assert!(unknown.to_string().contains("nope"), "{unknown:?}");
}

/// server-everything's long-running operation reports progress: each report is a
/// `tool/progress` event of the call, and restarts the call's timeout (a 3 s operation that
/// reports every 0.5 s finishes under a 1.5 s `tool_timeout_ms`).
#[tokio::test]
async fn progress_becomes_events_and_keeps_a_call_alive() {
    let test = "mcp_real_servers::progress_becomes_events";
    if !servers_installed(test) {
        return;
    }
    let config = format!("{}tool_timeout_ms = 1500\n", everything_config());
    let daemon = TestDaemon::start_with_config(Some(&config));
    let mut client = daemon.connect(json!({}), no_answers()).await;
    status_when(&client, "everything", "ready").await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__everything__*"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([{"id": "long", "name": "mcp__everything__trigger-long-running-operation",
                "arguments": {"duration": 3, "steps": 6}}]),
        )
        .await;
    let result = results(&response)[0];
    assert_eq!(wire_error_type_or_ok(result), "ok", "{response}");
    assert!(text(result).contains("Steps: 6"), "{response}");
    let progress: Vec<Value> = client
        .session_events()
        .into_iter()
        .filter(|event| event.method == "tool/progress")
        .filter_map(|event| event.params)
        .collect();
    // Six reports, the last one too: it was sent just before the answer, and the call waits
    // for it (the MCP library hands each notification over in a task of its own).
    assert_eq!(progress.len(), 6, "{progress:?}");
    for (step, event) in progress.iter().enumerate() {
        assert_eq!(event["call_id"], "long");
        assert_eq!(event["session_id"], session.as_str());
        assert_eq!(event["progress"].as_f64(), Some((step + 1) as f64));
        assert_eq!(event["total"].as_f64(), Some(6.0));
    }

    // Without progress, the same timeout ends a call that runs longer.
    let quiet = client
        .execute(
            &session,
            json!([{"id": "quiet", "name": "mcp__everything__trigger-long-running-operation",
                "arguments": {"duration": 3, "steps": 1}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&quiet)[0]),
        "timeout",
        "{quiet}"
    );
}

/// A server reached over streamable HTTP on 127.0.0.1 (its bearer token from the daemon's
/// environment): listed, called, its progress reported; a server that goes away fails the
/// call that needed it with a clear error.
#[tokio::test]
async fn a_server_over_streamable_http_is_listed_and_called() {
    let test = "mcp_real_servers::a_server_over_streamable_http";
    if !servers_installed(test) {
        return;
    }
    let server = HttpServer::start(|port| {
        let mut command = Command::new(node_bin("mcp-server-everything"));
        command.arg("streamableHttp").env("PORT", port.to_string());
        command
    });
    let config = format!(
        "[mcp.servers.remote]\nurl = {:?}\nheaders = {{ \"X-Team\" = \"a\" }}\n\
         bearer_token_env = \"REMOTE_TOKEN\"\n",
        server.url
    );
    let daemon =
        TestDaemon::start_with_config_and_env(&config, &[("REMOTE_TOKEN", "not-a-secret")]);
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let status = status_when(&client, "remote", "ready").await;
    assert_eq!(status["transport"], "http", "{status}");
    assert!(status.get("pid").is_none(), "{status}");
    let tools = registered(&client, "remote").await;
    assert!(tools.contains_key("mcp__remote__echo"), "{tools:?}");
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__remote__*"]}}),
        )
        .await;
    let response = client
        .execute(
            &session,
            json!([
                {"id": "e", "name": "mcp__remote__echo", "arguments": {"message": "over http"}},
                {"id": "l", "name": "mcp__remote__trigger-long-running-operation",
                    "arguments": {"duration": 1, "steps": 2}},
            ]),
        )
        .await;
    let answered = results(&response);
    assert_eq!(wire_error_type_or_ok(answered[0]), "ok", "{response}");
    assert!(text(answered[0]).contains("over http"), "{response}");
    assert_eq!(wire_error_type_or_ok(answered[1]), "ok", "{response}");
    let progress = client
        .session_events()
        .into_iter()
        .filter(|event| event.method == "tool/progress")
        .count();
    assert!(progress >= 1, "progress over HTTP");

    // The server gone: the call fails at once, saying where the server was; the daemon counts
    // it as ended and tries to reach it again (with backoff).
    let url = server.url.clone();
    drop(server);
    let gone = echo(&client, &session, "remote", "x").await;
    let result = results(&gone)[0];
    assert_eq!(wire_error_type_or_ok(result), "internal_error", "{gone}");
    let error = result["error"].as_str().expect("a message");
    assert!(
        error.contains("error sending request") && error.contains(&format!("reached at {url}")),
        "{error}"
    );
    status_until(
        &client,
        PATIENCE,
        "the server to be counted as ended",
        |status| {
            let server = &status["servers"][0];
            (server["restarts"].as_u64() >= Some(1) && server["state"] != "ready").then_some(())
        },
    )
    .await;
}

/// A client that lists the tools once, as soon as the daemon answers (as several MCP hosts do
/// at their start), gets the eager servers' tools in that first list: the list waits for a
/// server still on its first start to be ready or failed.
#[tokio::test]
async fn the_first_list_holds_the_eager_servers_tools() {
    let test = "mcp_real_servers::first_list";
    if !servers_installed(test) {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let daemon = TestDaemon::start_with_config(Some(&four_servers_config(root.path())));
    let client = daemon.connect(json!({}), no_answers()).await;
    let listed = client.list_tools(json!({})).await;
    let names = tool_names(&listed);
    for server in ["everything", "fs", "memory", "time"] {
        assert!(
            names
                .iter()
                .any(|name| name.starts_with(&format!("mcp__{server}__"))),
            "{server}'s tools are in the first list: {names:?}"
        );
    }
}

/// `toold call` of an MCP tool shows the server's progress as it comes, as `toold exec` does.
#[tokio::test]
async fn toold_call_shows_an_mcp_servers_progress() {
    let test = "mcp_real_servers::call_progress";
    if !servers_installed(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some(&everything_config()));
    let work = daemon.work();
    let called = toold(
        &daemon,
        &[
            "call",
            "--yes",
            "--cwd",
            work.to_str().unwrap(),
            "mcp__everything__trigger-long-running-operation",
            r#"{"duration": 1, "steps": 3}"#,
        ],
    )
    .await;
    let said = String::from_utf8_lossy(&called.stderr);
    assert!(called.status.success(), "{said}");
    let progress: Vec<&str> = said
        .lines()
        .filter(|line| line.contains(" progress "))
        .collect();
    assert_eq!(progress.len(), 3, "{said}");
    assert!(progress[2].contains("3/3"), "{said}");
}
