//! MCP servers that misbehave, against the real daemon (`tests/mcp_servers/hostile.py`): a
//! server's stderr is drained whatever it writes and costs bounded memory; the secrets its
//! table holds or names reach no command's environment, result, event, status or log; its
//! listing is bounded, what exceeds quarantined and reported; and "allow for this session"
//! grants the call the approval showed, not the tool's every call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toold_tests::PATIENCE;
use toold_tests::daemon::{
    TestClient, TestDaemon, always, no_answers, results, wire_error_type_or_ok,
};
use toold_tests::mcp::{status_until, test_server, toold, tools_when};
use toold_tests::require;

/// `[mcp.servers.h]`: the hostile test server under python3, with `env` (a TOML inline
/// table's members) and more keys; `None` (the test skipped) without python3.
fn hostile_table(test: &str, env: &str, more: &str) -> Option<String> {
    let python = require::program(test, "python3", &[], "apt-get install python3")?;
    Some(format!(
        "[mcp.servers.h]\ncommand = {:?}\nargs = [{:?}]\nenv = {{ {env} }}\ntool_timeout_ms = 30000\n{more}",
        python.display().to_string(),
        test_server("hostile.py").display().to_string()
    ))
}

async fn call(client: &TestClient, session: &str, tool: &str, arguments: Value) -> Value {
    let response = client
        .execute(
            session,
            json!([{"id": "c1", "name": format!("mcp__h__{tool}"), "arguments": arguments}]),
        )
        .await;
    results(&response)[0].clone()
}

#[tokio::test]
async fn a_servers_stderr_is_drained_whatever_it_writes_in_bounded_memory() {
    let Some(config) = hostile_table("mcp_hostile::stderr", "", "") else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    tools_when(&client, "mcp__h__", |count| count >= 5).await;
    let session = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["mcp__h__*"]}}))
        .await;
    // Bytes that are not UTF-8 once stopped the reading of stderr for good.
    let result = call(
        &client,
        &session,
        "spew",
        json!({"binary": true, "then": "after the bad bytes"}),
    )
    .await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    let before = daemon.rss_bytes();
    // 64 MiB without a newline: one line, kept to its bound.
    let result = call(
        &client,
        &session,
        "spew",
        json!({"bytes": 64 << 20, "then": "end of the long line"}),
    )
    .await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    // Two MiB more, which fill the pipe many times over: the server never blocks on it.
    let result = call(
        &client,
        &session,
        "spew",
        json!({"bytes": 2 << 20, "newline": true, "then": "still drained"}),
    )
    .await;
    assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
    let grown = daemon.rss_bytes().saturating_sub(before);
    assert!(
        grown < 24 << 20,
        "64 MiB of stderr grew the daemon by {} MiB",
        grown >> 20
    );
    let log = daemon.state_dir().join("mcp/h.log");
    let logged = wait_for_log(&log, "still drained").await;
    assert!(logged.contains("bad bytes \u{FFFD}"), "lossily decoded");
    assert!(
        logged.contains("more bytes of this line not kept"),
        "the long line is cut and says so"
    );
    let status = client.request("mcp/status", json!({})).await.unwrap();
    assert_eq!(status["servers"][0]["state"], "ready", "{status}");
    assert_eq!(status["servers"][0]["restarts"], 0, "{status}");
}

async fn wait_for_log(log: &std::path::Path, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let logged = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
        if logged.contains(text) {
            return logged;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} never held {text:?}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const KEY: &str = "sk-test-0123456789abcdef";
const TOKEN: &str = "bearer-0123456789-secret";
const QUERY_KEY: &str = "query-secret-4242";

#[tokio::test]
async fn configured_secrets_reach_no_command_result_event_status_or_log() {
    let remote = format!(
        "[mcp.servers.remote]\nurl = \"http://user:hunter2pass@127.0.0.1:9/mcp?api_key={QUERY_KEY}\"\n\
         bearer_token_env = \"MY_MCP_TOKEN\"\n"
    );
    let Some(config) = hostile_table(
        "mcp_hostile::secrets",
        &format!("API_KEY = {KEY:?}, MODE = \"plain\""),
        &remote,
    ) else {
        return;
    };
    // The daemon's own log, at its most verbose, into a file the test reads.
    let logs = tempfile::tempdir().unwrap();
    let log_file = logs.path().join("daemon.log");
    let daemon = TestDaemon::start_under_with_config_and_env(
        &toold_tests::daemon::log_into(&log_file),
        &config,
        &[
            ("MY_MCP_TOKEN", TOKEN),
            ("OTHER_COPY", KEY),
            ("TOOLD_LOG", "debug"),
        ],
    );
    let mut client = daemon.connect(json!({}), no_answers()).await;
    tools_when(&client, "mcp__h__", |count| count >= 5).await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__h__*", "run_command(echo *)"]}}),
        )
        .await;
    let secrets = [KEY, TOKEN, QUERY_KEY, "hunter2pass"];
    let holds_no_secret = |what: &str, text: &str| {
        for secret in secrets {
            assert!(!text.contains(secret), "{what} holds {secret}: {text}");
        }
    };

    // A command inherits neither the token's variable nor another holding a secret.
    let response = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "run_command",
                "arguments": {"command": "echo \"token=$MY_MCP_TOKEN copy=$OTHER_COPY\""}}]),
        )
        .await;
    assert_eq!(
        results(&response)[0]["content"].as_str().map(str::trim),
        Some("token= copy="),
        "{response}"
    );

    // A result that quotes the key: its text and its structured content.
    let revealed = call(&client, &session, "reveal", json!({"name": "API_KEY"})).await;
    assert_eq!(wire_error_type_or_ok(&revealed), "ok", "{revealed}");
    holds_no_secret("a result", &revealed.to_string());
    assert_eq!(revealed["content"], "the value is [redacted]", "{revealed}");
    let events: Vec<String> = client
        .drain_notifications()
        .iter()
        .map(|notification| format!("{notification:?}"))
        .collect();
    holds_no_secret("an event", &events.join("\n"));

    // A server that prints the key on its way out: the failed call quotes its stderr redacted.
    let confessed = call(&client, &session, "confess", json!({"name": "API_KEY"})).await;
    assert_eq!(
        wire_error_type_or_ok(&confessed),
        "internal_error",
        "{confessed}"
    );
    let error = confessed["error"].as_str().unwrap_or_default();
    assert!(error.contains("my secret is [redacted]"), "{error}");
    holds_no_secret("a failed call", &confessed.to_string());
    let logged = wait_for_log(&daemon.state_dir().join("mcp/h.log"), "my secret is").await;
    holds_no_secret("the server's log", &logged);

    // The HTTP server that cannot be reached: its status says why, without its URL's secrets.
    let status = status_until(&client, PATIENCE, "the remote server's error", |status| {
        let remote = status["servers"]
            .as_array()?
            .iter()
            .find(|server| server["name"] == "remote")?;
        remote["last_error"].is_string().then(|| status.clone())
    })
    .await;
    holds_no_secret("mcp/status", &status.to_string());
    let shown = toold(&daemon, &["mcp", "status"]).await;
    holds_no_secret("toold mcp status", &String::from_utf8_lossy(&shown.stdout));
    let checked = toold(&daemon, &["check-config"]).await;
    holds_no_secret(
        "toold check-config",
        &String::from_utf8_lossy(&checked.stdout),
    );
    let logged = std::fs::read_to_string(&log_file).unwrap_or_default();
    assert!(logged.contains("MCP server"), "the daemon logged: {logged}");
    holds_no_secret("the daemon's log", &logged);
}

#[tokio::test]
async fn a_huge_listing_is_bounded_and_what_exceeds_is_quarantined() {
    let Some(config) = hostile_table(
        "mcp_hostile::listing",
        "HOSTILE_TOOLS = \"3000\", HOSTILE_DESCRIPTION_BYTES = \"20000\", HOSTILE_PAGE_SIZE = \"100\"",
        "",
    ) else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let status = status_until(
        &client,
        Duration::from_secs(60),
        "the server ready",
        |status| (status["servers"][0]["state"] == "ready").then(|| status.clone()),
    )
    .await;
    let server = &status["servers"][0];
    let registered = server["tools"].as_array().map_or(0, Vec::len);
    assert!(
        (5..=110).contains(&registered),
        "about 2 MiB of 20 KB tools: {registered}"
    );
    let quarantined = server["quarantined"].as_array().expect("quarantined");
    assert_eq!(quarantined.len(), 101, "a hundred shown, the rest counted");
    assert!(
        quarantined[0]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("2 MiB")),
        "{}",
        quarantined[0]
    );
    assert!(
        quarantined[100]["tool"]
            .as_str()
            .is_some_and(|tool| tool.ends_with("more tools")),
        "{}",
        quarantined[100]
    );
    // What every client's tools/list carries is bounded too.
    let listed = client.request("tools/list", json!({})).await.unwrap();
    let bytes = listed.to_string().len();
    assert!(bytes < 3 << 20, "tools/list is {} KiB", bytes >> 10);
    let peak = daemon.peak_rss_bytes();
    assert!(
        peak < 160 << 20,
        "60 MB of listing raised the daemon's peak to {} MiB",
        peak >> 20
    );
}

#[tokio::test]
async fn a_session_grant_covers_the_call_the_approval_showed() {
    let Some(config) = hostile_table("mcp_hostile::grants", "", "") else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let client = daemon
        .connect(
            json!({"approvals": true}),
            always(json!({"decision": "allow_session"}), asked.clone()),
        )
        .await;
    tools_when(&client, "mcp__h__", |count| count >= 5).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let asks = || asked.lock().unwrap().len();

    let first = call(
        &client,
        &session,
        "edit",
        json!({"text": "x", "path": "/a"}),
    )
    .await;
    assert_eq!(wire_error_type_or_ok(&first), "ok", "{first}");
    assert_eq!(asks(), 1);
    let shown = asked.lock().unwrap()[0].params.clone().unwrap_or_default();
    assert_eq!(
        shown["suggestions"][0], "mcp__h__edit {\"path\":\"/a\",\"text\":\"x\"}",
        "the approval shows what it grants: {shown}"
    );

    // The same arguments, in another order: granted.
    let again = call(
        &client,
        &session,
        "edit",
        json!({"path": "/a", "text": "x"}),
    )
    .await;
    assert_eq!(wire_error_type_or_ok(&again), "ok", "{again}");
    assert_eq!(asks(), 1);

    // Other arguments, another tool of the server: asked again.
    for (tool, arguments) in [
        ("edit", json!({"path": "/etc/passwd", "text": "x"})),
        ("edit", json!({"path": "/a"})),
        ("echo", json!({"text": "x", "path": "/a"})),
    ] {
        let before = asks();
        let result = call(&client, &session, tool, arguments.clone()).await;
        assert_eq!(wire_error_type_or_ok(&result), "ok", "{result}");
        assert_eq!(asks(), before + 1, "{tool} {arguments} was not asked");
    }
}
