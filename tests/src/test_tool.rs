//! A tool written for a test: its definition and what it does when it runs.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use toold::tools::ToolFuture;
use toold::{Tool, ToolContext};
use toold_protocol::{Safety, ToolDefinition, ToolSource};

/// What a test tool does with a call's arguments and context.
type Act = dyn Fn(Map<String, Value>, ToolContext) -> ToolFuture + Send + Sync;

/// A client tool of a test: read-only, not a system tool, no timeout of its own, any object as
/// its arguments, until a test changes its fields.
pub struct TestTool {
    pub name: String,
    pub safety: Safety,
    pub system: bool,
    pub timeout_ms: Option<u64>,
    pub schema: Value,
    act: Arc<Act>,
}

impl TestTool {
    pub fn new(
        name: &str,
        act: impl Fn(Map<String, Value>, ToolContext) -> ToolFuture + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_owned(),
            safety: Safety::ReadOnly,
            system: false,
            timeout_ms: None,
            schema: json!({"type": "object"}),
            act: Arc::new(act),
        }
    }

    pub fn with_safety(mut self, safety: Safety) -> Self {
        self.safety = safety;
        self
    }
}

impl Tool for TestTool {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: "a tool for tests".into(),
            input_schema: self.schema.clone(),
            safety: self.safety,
            system: self.system,
            timeout_ms: self.timeout_ms,
            source: ToolSource::Client,
        }
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        (self.act)(args, ctx)
    }
}
