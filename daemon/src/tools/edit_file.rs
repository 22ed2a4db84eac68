//! The `edit_file` builtin tool: replace an exact string in a text file, atomically, and show
//! the change as a unified diff.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use similar::TextDiff;
use toold_protocol::{ErrorType, Safety, ToolDefinition, ToolSource};

use super::read_file::read_text;
use super::write_file::write_atomically;
use super::{Tool, ToolContext, ToolFailure, ToolFuture, ToolOutput, blocking, parse_args};

pub struct EditFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

impl Tool for EditFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "edit_file".into(),
            description: "Replace an exact string in a text file. `old_string` must occur exactly \
                once unless `replace_all` is true; include enough surrounding lines to make it \
                unique. Returns a unified diff of the change."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File to edit"},
                    "old_string": {"type": "string", "description": "Exact text to replace"},
                    "new_string": {"type": "string", "description": "Replacement text"},
                    "replace_all": {"type": "boolean", "default": false,
                        "description": "Replace every occurrence instead of exactly one"}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
            safety: Safety::SideEffect,
            system: false,
            timeout_ms: None,
            source: ToolSource::Builtin,
        }
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(async move {
            let args: Args = parse_args(args)?;
            if args.old_string.is_empty() {
                return Err(ToolFailure::invalid_arguments(
                    "old_string is empty; to create or overwrite a whole file use write_file",
                ));
            }
            if args.old_string == args.new_string {
                return Err(ToolFailure::invalid_arguments(
                    "old_string and new_string are the same; the edit would change nothing",
                ));
            }
            let target = ctx.resolve_path(&args.path);
            blocking(move || {
                let shown = target.lexical.display().to_string();
                let before = read_text(&target.resolved)?;
                let matches = before.matches(&args.old_string).count();
                if matches == 0 {
                    return Err(ToolFailure::new(
                        ErrorType::NotFound,
                        format!("old_string was not found in {shown}; read the file and copy the text exactly"),
                    ));
                }
                if matches > 1 && !args.replace_all {
                    return Err(ToolFailure::new(
                        ErrorType::NotUnique,
                        format!(
                            "old_string matches {matches} places in {shown}; add surrounding lines to \
                             make it unique, or set replace_all"
                        ),
                    )
                    .with_meta("matches", matches));
                }
                let after = before.replace(&args.old_string, &args.new_string);
                write_atomically(&target.resolved, after.as_bytes())?;
                let diff = TextDiff::from_lines(&before, &after)
                    .unified_diff()
                    .context_radius(3)
                    .header(&shown, &shown)
                    .to_string();
                Ok(ToolOutput::new(diff).with_meta("path", shown).with_meta("replacements", matches))
            })
            .await
        })
    }
}
