//! The command sandbox, end to end on the real daemon, real bash and the real kernel: what a
//! command of each mode can and cannot write, reach on the network, do to the daemon (its
//! socket, signals, tracing, environment), with every tier of the daemon socket's protection
//! exercised (the lower ones on a kernel made to seem to lack user namespaces or Landlock by
//! `without-kernel-features`). Each test checks effects — files unchanged, listeners that got
//! nothing, sessions not created — not only the errors.
//!
//! This file holds the places, the sessions and the calls the tests share; the tests are in
//! modules by topic: writes, protected places, the network, the daemon, the sandbox's settings
//! and tiers, and processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers};

mod escalation;
mod hidden;
mod network;
mod private_tmp;
mod processes;
mod protected_places;
mod settings_and_tiers;
mod the_daemon;
mod unasked;
mod unchanged_outside;
mod unix_sockets;
mod writes;

/// A project (the session's root, a git repository), a directory outside every writable
/// place (under the build's own temp directory, not `/tmp`, which commands may write), and a
/// symlink in the project that leads there.
struct Places {
    _project_dir: tempfile::TempDir,
    _outside_dir: tempfile::TempDir,
    project: PathBuf,
    outside: PathBuf,
}

impl Places {
    fn new() -> Self {
        let project_dir = tempfile::tempdir().unwrap();
        let project = project_dir.path().canonicalize().unwrap();
        let outside_dir = tempfile::tempdir_in(outside_base()).unwrap();
        let outside = outside_dir.path().canonicalize().unwrap();
        std::fs::write(outside.join("keep.txt"), "kept\n").unwrap();
        std::fs::create_dir(outside.join("dir")).unwrap();
        std::fs::write(project.join("keep.txt"), "kept\n").unwrap();
        std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
        Self {
            _project_dir: project_dir,
            _outside_dir: outside_dir,
            project,
            outside,
        }
    }

    /// Every entry under `dir` with the content of each file: any change is an effect.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut entries = BTreeMap::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(current) = pending.pop() {
            for entry in std::fs::read_dir(&current).unwrap().flatten() {
                let path = entry.path();
                let kind = entry.file_type().unwrap();
                let content = if kind.is_dir() {
                    pending.push(path.clone());
                    "<dir>".to_owned()
                } else if kind.is_symlink() {
                    format!("-> {:?}", std::fs::read_link(&path).unwrap())
                } else {
                    std::fs::read_to_string(&path).unwrap_or_default()
                };
                entries.insert(path, content);
            }
        }
        entries
    }
}

/// A directory outside every place a sandboxed command may write (`/tmp`, `$TMPDIR`,
/// `/dev/shm`, the roots): `/var/tmp`, else the build's own temp directory, else `$HOME`,
/// whichever is first to lie outside them (a checkout under `/tmp` puts the build's there).
fn outside_base() -> PathBuf {
    let writable: Vec<PathBuf> = ["/tmp", "/dev/shm"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .filter_map(|dir| dir.canonicalize().ok())
        .collect();
    [
        Some(PathBuf::from("/var/tmp")),
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        std::env::var_os("HOME").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .filter_map(|dir| dir.canonicalize().ok())
    .find(|dir| dir.is_dir() && !writable.iter().any(|place| dir.starts_with(place)))
    .expect("a directory outside /tmp, $TMPDIR and /dev/shm for the tests' outside files")
}

/// Every `run_command` call is allowed: the sandbox alone bounds what they do.
const ALLOW_COMMANDS: &str = r#"{"allow": ["run_command"]}"#;

async fn session(client: &TestClient, project: &Path, sandbox: Value) -> String {
    client
        .create_session(
            project,
            json!({"rules": serde_json::from_str::<Value>(ALLOW_COMMANDS).unwrap(), "sandbox": sandbox}),
        )
        .await
}

/// Runs `line` as a one-call batch; returns the call's result.
async fn run(client: &TestClient, session: &str, line: &str) -> Value {
    let response = client
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [
                {"id": "c", "name": "run_command", "arguments": {"command": line, "timeout_ms": 60000}}]}),
        )
        .await
        .expect("tools/execute");
    response["results"][0]["result"].clone()
}

fn output(result: &Value) -> &str {
    result["content"].as_str().unwrap_or_default()
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

async fn connected(daemon: &TestDaemon) -> TestClient {
    daemon.connect(json!({}), no_answers()).await
}

/// A daemon with every default, a client, fresh places, and a session in the project with
/// the config's sandbox (every command allowed).
async fn sandboxed() -> (TestDaemon, TestClient, Places, String) {
    let daemon = TestDaemon::start();
    let (client, places, session) = sandboxed_on(&daemon).await;
    (daemon, client, places, session)
}

/// A client of `daemon`, fresh places, and a session in the project with the config's sandbox
/// (every command allowed).
async fn sandboxed_on(daemon: &TestDaemon) -> (TestClient, Places, String) {
    let client = connected(daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    (client, places, session)
}

/// The sandbox report of `initialize`, asked on a fresh connection.
async fn sandbox_report(daemon: &TestDaemon) -> Value {
    let fresh = TestClient::connect_raw(
        &daemon.socket(),
        toold_protocol::Framing::Ndjson,
        no_answers(),
    )
    .await;
    let mut result = fresh
        .request("initialize", json!({"protocol_version": 1}))
        .await
        .unwrap();
    result["sandbox"].take()
}

fn without(features: &[&str]) -> Vec<String> {
    let mut wrapper = vec![env!("CARGO_BIN_EXE_without-kernel-features").to_owned()];
    wrapper.extend(features.iter().map(|feature| (*feature).to_owned()));
    wrapper.push("--".to_owned());
    wrapper
}
