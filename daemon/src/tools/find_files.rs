//! The `find_files` builtin tool (placeholder while it is being written).

use serde_json::{Map, Value, json};
use toold_protocol::{ErrorType, Safety, ToolDefinition, ToolSource};

use super::{Tool, ToolContext, ToolFailure, ToolFuture};

pub struct FindFiles;

impl Tool for FindFiles {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "find_files".into(),
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
