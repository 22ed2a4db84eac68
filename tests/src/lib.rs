//! Shared fixtures for toold's end-to-end tests: temporary trees built from strings, and one
//! call through the real registry.

pub mod daemon;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toold::{Env, Registry};
use toold_protocol::{ToolCall, ToolResult};

/// A temporary directory holding `files` (path, content); parents are created.
pub struct Tree {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        // Canonical, so that paths the tools report compare equal on systems where /tmp is a link.
        let root = dir
            .path()
            .canonicalize()
            .expect("canonical temporary directory");
        let tree = Self { dir, root };
        for (path, content) in files {
            tree.write(path, content);
        }
        tree
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    pub fn write(&self, relative: &str, content: &str) {
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
    let registry = Registry::with_builtins();
    registry
        .execute(
            &ToolCall::new("call_1", tool, arguments),
            Arc::new(env),
            CancellationToken::new(),
            None,
        )
        .await
}

/// The `error_type` of a result as its wire string, or "ok".
pub fn outcome(result: &ToolResult) -> String {
    match &result.error_type {
        Some(error_type) => error_type.to_string(),
        None => "ok".to_owned(),
    }
}
