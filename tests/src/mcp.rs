//! What the MCP tests share: the test server written for them (`tests/mcp_servers/`), a server
//! serving streamable HTTP as the test's child, the registry's tools of one server, waiting for
//! them and for `mcp/status`, and the `toold` command line run against a test daemon.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::PATIENCE;
use crate::child::KillOnDrop;
use crate::daemon::{TestClient, TestDaemon};

/// A file of `tests/mcp_servers/`.
pub fn test_server(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("mcp_servers")
        .join(name)
}

/// `[mcp.servers.bad]`: the malformed test server run by `python`.
pub fn malformed_server_table(python: &Path) -> String {
    format!(
        "[mcp.servers.bad]\ncommand = {:?}\nargs = [{:?}]\n",
        python.display().to_string(),
        test_server("malformed.py").display().to_string()
    )
}

/// An MCP server serving streamable HTTP on 127.0.0.1 as a child of the test, killed when
/// dropped.
pub struct HttpServer {
    _child: KillOnDrop,
    /// Its endpoint, `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl HttpServer {
    /// Starts the server `command` makes for a free port, and waits until it listens.
    pub fn start(command: impl FnOnce(u16) -> Command) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = command(port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the HTTP server");
        let server = Self {
            _child: KillOnDrop(child),
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the HTTP server never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }
}

/// The registry's tools whose names start with `prefix`, by name.
pub async fn tools_named(client: &TestClient, prefix: &str) -> BTreeMap<String, Value> {
    let listed = client.list_tools(json!({})).await;
    listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| {
            let name = tool["name"].as_str()?;
            name.starts_with(prefix)
                .then(|| (name.to_owned(), tool.clone()))
        })
        .collect()
}

/// The registry's tools whose names start with `prefix`, once `wanted` accepts how many there
/// are (waiting up to 30 s).
pub async fn tools_when(
    client: &TestClient,
    prefix: &str,
    wanted: impl Fn(usize) -> bool,
) -> BTreeMap<String, Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let tools = tools_named(client, prefix).await;
        if wanted(tools.len()) {
            return tools;
        }
        assert!(
            Instant::now() < deadline,
            "the registry never held the wanted number of {prefix}* tools: {:?}",
            tools.keys()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `found` makes of `mcp/status` once it makes something of it, asked every 50 ms for up
/// to `within`; past that, the test fails saying it was waiting for `what`, with the last status.
pub async fn status_until<T>(
    client: &TestClient,
    within: Duration,
    what: &str,
    mut found: impl FnMut(&Value) -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let status = client
            .request("mcp/status", json!({}))
            .await
            .expect("mcp/status");
        if let Some(found) = found(&status) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "waited {within:?} for {what}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `toold ARGS` against `daemon`.
pub async fn toold(daemon: &TestDaemon, args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::from(daemon.command());
    command.args(args);
    command.output().await.expect("run toold")
}
