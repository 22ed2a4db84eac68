//! Config reload, end to end: `toold reload` and SIGHUP make a running daemon read its config
//! file again. New rules apply to live sessions, an MCP server added is started and one removed
//! is stopped (with `tools/list_changed` each time), a file with an error is refused with its
//! place and the running config kept, and what only a restart changes is named.

use std::path::PathBuf;

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, results, wire_error_type_or_ok};
use toold_tests::mcp::{malformed_server_table, toold, tools_when};
use toold_tests::require;

fn config_file(daemon: &TestDaemon) -> PathBuf {
    daemon.root().join("config/toold/config.toml")
}

/// The outcome of a `write_file` of `name` in the session.
async fn write(client: &TestClient, session: &str, daemon: &TestDaemon, name: &str) -> String {
    let response = client
        .execute(
            session,
            json!([{"id": "w", "name": "write_file",
                "arguments": {"path": daemon.work().join(name), "content": "x"}}]),
        )
        .await;
    wire_error_type_or_ok(results(&response)[0]).to_owned()
}

/// Waits until the registry holds `count` tools of the MCP server `bad`.
async fn bad_tools(client: &TestClient, count: usize) {
    tools_when(client, "mcp__bad__", |held| held == count).await;
}

async fn list_changed(client: &mut TestClient) {
    client
        .next_notification_matching(|notification| notification.method == "tools/list_changed")
        .await;
}

#[tokio::test]
async fn a_reload_applies_rules_and_mcp_servers_and_refuses_a_bad_file() {
    let Some(python) = require::program(
        "reload::a_reload_applies",
        "python3",
        &[],
        "apt-get install python3",
    ) else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some("max_connections = 64\n"));
    let mut client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    assert_eq!(
        write(&client, &session, &daemon, "before.txt").await,
        "permission_denied",
        "write_file asks, and no one answers"
    );

    // Rules and a server added: the live session is allowed at once; the server starts.
    std::fs::write(
        config_file(&daemon),
        format!(
            "max_connections = 64\n[permissions]\nallow = [\"write_file\"]\n\n{}",
            malformed_server_table(&python)
        ),
    )
    .expect("write the config");
    client.drain_notifications();
    let reloaded = toold(&daemon, &["reload", "--json"]).await;
    assert_eq!(
        reloaded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&reloaded.stderr)
    );
    let report: Value = serde_json::from_slice(&reloaded.stdout).expect("JSON");
    assert_eq!(report["changed"], json!(["rules"]), "{report}");
    assert_eq!(report["mcp_started"], json!(["bad"]), "{report}");
    assert_eq!(report["needs_restart"], json!([]), "{report}");
    bad_tools(&client, 5).await;
    list_changed(&mut client).await;
    assert_eq!(write(&client, &session, &daemon, "after.txt").await, "ok");
    assert!(daemon.work().join("after.txt").exists());
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    let pid = status["servers"][0]["pid"].clone();
    assert!(pid.is_u64(), "{status}");

    // A file with an error: refused, with its place; nothing changes.
    std::fs::write(
        config_file(&daemon),
        "[permissions]\nallow = [\"write_file(\"]\n",
    )
    .expect("write the config");
    let refused = toold(&daemon, &["reload"]).await;
    assert_eq!(
        refused.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("config.toml:2:") && said.contains("running config is kept"),
        "{said}"
    );
    assert_eq!(write(&client, &session, &daemon, "kept.txt").await, "ok");
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    assert_eq!(status["servers"][0]["pid"], pid, "the server kept running");

    // SIGHUP: the server removed, the rules gone, a restart-only key changed and named.
    std::fs::write(config_file(&daemon), "max_connections = 8\n").expect("write the config");
    client.drain_notifications();
    toold_tests::procs::send_signal(daemon.pid(), nix::sys::signal::Signal::SIGHUP);
    bad_tools(&client, 0).await;
    list_changed(&mut client).await;
    let status = client
        .request("mcp/status", json!({}))
        .await
        .expect("mcp/status");
    assert_eq!(status, json!({"servers": []}));
    assert_eq!(
        write(&client, &session, &daemon, "denied.txt").await,
        "permission_denied"
    );
    assert!(!daemon.work().join("denied.txt").exists());
    std::fs::write(
        config_file(&daemon),
        "max_connections = 8\nmax_parallel = 2\n",
    )
    .expect("write the config");
    let again = toold(&daemon, &["reload"]).await;
    assert_eq!(again.status.code(), Some(0));
    let shown = String::from_utf8_lossy(&again.stdout);
    assert!(shown.contains("changed:          limits"), "{shown}");
    assert!(
        shown.contains("not applied until the daemon restarts: max_connections"),
        "the restart-only key is still named: {shown}"
    );
}
