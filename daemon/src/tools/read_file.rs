//! The `read_file` builtin tool (placeholder while it is being written).

use serde_json::{Map, Value, json};
use toold_protocol::{ErrorType, Safety, ToolDefinition, ToolSource};

use super::{Tool, ToolContext, ToolFailure, ToolFuture};

pub struct ReadFile;

impl Tool for ReadFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "read_file".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            safety: Safety::ReadOnly,
            system: false,
            timeout_ms: None,
            source: ToolSource::Builtin,
        }
    }

    fn run(&self, _args: Map<String, Value>, _ctx: ToolContext) -> ToolFuture {
        Box::pin(async { Err(ToolFailure::new(ErrorType::InternalError, "not built yet")) })
    }
}
