//! The permission engine's bypass classes, end to end on the real daemon and real bash: in a
//! session whose rules allow `echo *`, `git status`, `cd *` and `true`, deny `rm *` and
//! `read_file(secrets/**)`, and with no approver attached (so anything that asks is denied),
//! every variant of each class is run and its **effect** checked: no marker file created, no
//! file truncated or deleted, no secret in any output, no process alive after its call. The
//! classes beyond the command line (walks, client tools, approvals, hooks, the daemon's own
//! process) use sessions and daemons of their own, checked the same way.
//!
//! This file holds the workspace, the session and the checks the classes share; the classes are
//! in modules by what they go after: how bash reads a line, what it reads, what it writes, the
//! processes, approvals and hooks, and what clients ask of the daemon.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::Request;
use toold_tests::daemon::{TestClient, TestDaemon, no_answers};
use toold_tests::require;

mod approvals_and_hooks;
mod client_requests;
mod command_lines;
mod processes;
mod reads;
mod writes;

/// What the secret file holds; no output may show it.
const SECRET: &str = "SECRET-7f3a9c";

const RULES: &str = r#"{"allow": ["run_command(echo *)", "run_command(git status)",
    "run_command(cd *)", "run_command(true)"],
    "deny": ["run_command(rm *)", "read_file(secrets/**)"]}"#;

/// A project (the session's only root) with a secret, a file the deny rule protects, a git
/// repository, and a directory outside the roots.
struct Workspace {
    _dir: tempfile::TempDir,
    project: PathBuf,
    outside: PathBuf,
}

impl Workspace {
    fn new(git: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let project = base.join("project");
        let outside = base.join("outside");
        for directory in [project.join("secrets"), outside.clone()] {
            std::fs::create_dir_all(directory).unwrap();
        }
        std::fs::write(project.join("secrets/key.txt"), format!("{SECRET}\n")).unwrap();
        std::fs::write(project.join("keep.txt"), "kept\n").unwrap();
        std::fs::write(outside.join("keep.txt"), "kept\n").unwrap();
        let init = std::process::Command::new(git)
            .args(["init", "-q"])
            .current_dir(&project)
            .status()
            .unwrap();
        assert!(init.success());
        Self {
            _dir: dir,
            project,
            outside,
        }
    }

    /// Every file under the workspace with its content, `.git/objects` aside: a change to
    /// any of them is an effect some line had.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let base = self.project.parent().unwrap().to_owned();
        let mut pending = vec![base];
        while let Some(directory) = pending.pop() {
            for entry in std::fs::read_dir(&directory).unwrap().flatten() {
                let path = entry.path();
                if path.ends_with(".git/objects") {
                    continue;
                }
                if entry.file_type().unwrap().is_dir() {
                    pending.push(path);
                } else {
                    let content = std::fs::read(&path).unwrap_or_default();
                    files.push((path, content));
                }
            }
        }
        files.sort();
        files
    }
}

/// Starts a daemon and a client without approvals, and a session with [`RULES`]. Its commands
/// are judged by the rules alone, as where the sandbox does not confine them: what these tests
/// hold is that what runs is what the analysis judged.
async fn setup(test: &str, mode: &str) -> Option<(TestDaemon, TestClient, Workspace, String)> {
    let git = require::program(test, "git", &[], "apt-get install git")?;
    let config = format!("allow_bypass = true\n{}", toold_tests::daemon::COMMANDS_ASK);
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let workspace = Workspace::new(&git);
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let session = client
        .create_session(&workspace.project, json!({"rules": rules, "mode": mode}))
        .await;
    Some((daemon, client, workspace, session))
}

async fn execute_one(client: &TestClient, session: &str, call: Value) -> Value {
    client.execute(session, json!([call])).await
}

/// A client that approves every request for the session, and the requests it was sent.
async fn approving_for_the_session(daemon: &TestDaemon) -> (TestClient, Arc<Mutex<Vec<Request>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let client = daemon
        .connect(
            json!({"approvals": true}),
            toold_tests::daemon::always(json!({"decision": "allow_session"}), asked.clone()),
        )
        .await;
    (client, asked)
}

/// Runs each call as its own batch and checks that it left the workspace exactly as it was,
/// made no marker anywhere, and showed no secret; reports every call that did.
async fn no_effect(
    client: &TestClient,
    session: &str,
    workspace: &Workspace,
    calls: &[Value],
    markers: &[PathBuf],
) {
    let mut effects = Vec::new();
    for call in calls {
        let before = workspace.snapshot();
        let response = execute_one(client, session, call.clone()).await;
        let result = &response["results"][0]["result"];
        if response.to_string().contains(SECRET) {
            effects.push(format!("{call} showed the secret: {result}"));
        }
        let after = workspace.snapshot();
        if before != after {
            effects.push(format!(
                "{call} changed the workspace ({result}):\n  before {:?}\n  after {:?}",
                names(&before),
                names(&after)
            ));
        }
        for marker in markers.iter().filter(|marker| marker.exists()) {
            effects.push(format!("{call} made {} ({result})", marker.display()));
            let _ = std::fs::remove_file(marker);
        }
    }
    assert!(
        effects.is_empty(),
        "effects no rule allowed:\n{}",
        effects.join("\n")
    );
}

fn names(files: &[(PathBuf, Vec<u8>)]) -> Vec<String> {
    files
        .iter()
        .map(|(path, content)| format!("{}={}", path.display(), content.len()))
        .collect()
}

/// A session of its own on `client`, in `mode`, with `rules`.
async fn session_with(client: &TestClient, cwd: &Path, mode: &str, rules: Value) -> String {
    client
        .create_session(cwd, json!({"rules": rules, "mode": mode}))
        .await
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"id": "c", "name": name, "arguments": arguments})
}

/// The text a result shows the model: its content, or its error.
fn shown(response: &Value) -> String {
    let result = &response["results"][0]["result"];
    format!("{}{}", result["content"], result["error"])
}
