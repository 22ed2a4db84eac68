//! Shared fixtures for toold's end-to-end tests: temporary trees built from strings, one call
//! through the real registry, a tool written for a test, waiting for a condition, and a test run
//! again alone in a process of its own.

pub mod bash_trace;
pub mod child;
pub mod daemon;
pub mod editor;
pub mod mcp;
pub mod procs;
pub mod require;
pub mod terminal;
pub mod test_tool;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toold::{Env, Registry};
use toold_protocol::{ToolCall, ToolResult};

/// How long a test waits for anything it expects (a daemon serving, an answer, a process
/// ending, a file appearing) before it fails instead of hanging: long enough for a loaded
/// machine, and no test waits longer than it needs.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits up to [`PATIENCE`] until `done` holds, asking every 20 ms; past that the test fails,
/// saying it waited for `what`.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited {PATIENCE:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary directory holding `files` (path, content); parents are created. Its root is
/// canonical, so that paths the tools report compare equal on systems where /tmp is a link.
pub struct Tree {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let tree = Self::empty();
        for (path, content) in files {
            tree.write(path, content);
        }
        tree
    }

    /// A tree of files whose contents are bytes, not necessarily text.
    pub fn with_bytes(files: &[(&str, &[u8])]) -> Self {
        let tree = Self::empty();
        for (path, content) in files {
            tree.write_bytes(path, content);
        }
        tree
    }

    fn empty() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = dir
            .path()
            .canonicalize()
            .expect("canonical temporary directory");
        Self { dir, root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    pub fn write(&self, relative: &str, content: &str) {
        self.write_bytes(relative, content.as_bytes());
    }

    pub fn write_bytes(&self, relative: &str, content: &[u8]) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("a file has a parent"))
            .expect("create parents");
        std::fs::write(path, content).expect("write fixture file");
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).expect("read fixture file")
    }

    /// An Env rooted at this tree.
    pub fn env(&self) -> Env {
        Env::new(self.root.clone())
    }

    /// Keeps the directory alive until the tree is dropped.
    pub fn temp_dir(&self) -> &tempfile::TempDir {
        &self.dir
    }
}

/// Runs one call through a registry of the builtins, as the daemon's execution boundary does.
pub async fn call(env: Env, tool: &str, arguments: Value) -> ToolResult {
    call_canceled_by(env, tool, arguments, CancellationToken::new()).await
}

/// [`call`], canceled when `cancel` is.
pub async fn call_canceled_by(
    env: Env,
    tool: &str,
    arguments: Value,
    cancel: CancellationToken,
) -> ToolResult {
    Registry::with_builtins()
        .execute(
            &ToolCall::new("call_1", tool, arguments),
            Arc::new(env),
            cancel,
            None,
        )
        .await
}

/// The `error_type` of an in-process result as its wire string, "ok", or "failed" for a
/// failure without one (which no result should be); for a result on the wire (JSON),
/// [`daemon::wire_error_type_or_ok`].
pub fn error_type_or_ok(result: &ToolResult) -> String {
    match &result.error_type {
        Some(error_type) => error_type.to_string(),
        None if result.ok => "ok".to_owned(),
        None => "failed".to_owned(),
    }
}

/// A fixed-seed xorshift generator: the same sequence from the same seed on every run, so that
/// a failing sequence replays, and no dependency.
pub struct XorShift(pub u64);

impl XorShift {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `bound`.
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    /// One of `items`.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// The variable naming the test that [`alone_in_a_process`] runs in a child process.
const ALONE_VAR: &str = "TOOLD_TEST_ALONE";

/// Whether this process is the one where the test `name` runs alone. A test that measures or
/// changes the whole process (its peak memory, its environment) starts with
/// `if !alone_in_a_process(NAME, &[]) { return; }`: `cargo test` runs a binary's tests as
/// threads of one process, so the test body runs again in a child process of the same test
/// binary, with only that test, one thread and `env` set. In the parent this returns `false`
/// once the child passed, and panics with the child's output if it did not.
pub fn alone_in_a_process(name: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var_os(ALONE_VAR).is_some_and(|running| running == name) {
        return true;
    }
    let mut command = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(ALONE_VAR, name)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // Known to `toold::process_tree`: a command that another test of this process runs must
    // not take it for an orphan of its own and kill it.
    let (child, _known) =
        toold::process_tree::spawn_known(|| command.spawn(), |child| Some(child.id()))
            .expect("run the test binary again");
    let output = child.wait_with_output().expect("wait for the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{name}, alone in a process, failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    false
}
