//! The `find_files` builtin tool: lists the files under a directory whose path matches a glob,
//! honouring ignore files and skipping hidden files as ripgrep does (see [`super::walk`]).
//!
//! **Truncation and determinism.** The walk runs on several threads and stops as soon as
//! `max_results + 1` files were found (the extra one proves there are more). The answer is
//! always sorted, and when nothing was cut it is exactly the same on every run. When it *was*
//! cut, *which* `max_results` files are listed depends on which threads got there first, so two
//! runs may list different subsets; `truncated: true` and `count` are the same either way. We
//! chose bounded work over a deterministic prefix (which would need the whole tree walked, for
//! a home directory many seconds): a truncated listing is a sign to narrow the pattern, and
//! the model is told so in the tool description.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ignore::WalkState;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::{ErrorType, Safety, ToolDefinition, ToolSource};

use super::walk::{self, FileFilter, ThreadResults};
use super::{Tool, ToolContext, ToolFailure, ToolFuture, ToolOutcome, ToolOutput, parse_args};

/// How many paths a call lists when it does not say.
pub const DEFAULT_MAX_RESULTS: usize = 1000;

pub struct FindFiles;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FindArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default = "default_max_results")]
    max_results: usize,
}

fn default_max_results() -> usize {
    DEFAULT_MAX_RESULTS
}

impl Tool for FindFiles {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "find_files".into(),
            description: "Lists the files whose path matches a glob, under a directory. \
                The glob is gitignore-style: without a `/` it matches the file name at any \
                depth (`*.rs`); `*` stays within one directory level, `**` crosses levels \
                (`src/**/*.ts`). Files ignored by .gitignore or .ignore are left out, and so \
                are hidden files unless the glob names them (`.github/**`). Paths are relative \
                to `path`, one per line, sorted. When more than max_results match, an \
                arbitrary subset is listed and `truncated` is true: narrow the pattern."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Glob to match, e.g. `*.rs`, `src/**/*.test.ts`, `Cargo.toml`."
                    },
                    "path": {
                        "type": "string",
                        "description": "Directory to search, absolute or relative to the working directory (default: the working directory)."
                    },
                    "max_results": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Most paths to list (default 1000)."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            safety: Safety::ReadOnly,
            system: false,
            timeout_ms: None,
            source: ToolSource::Builtin,
        }
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(async move {
            let args: FindArgs = parse_args(args)?;
            super::blocking(move || find_files(&args, &ctx)).await
        })
    }
}

fn find_files(args: &FindArgs, ctx: &ToolContext) -> ToolOutcome {
    let filter = FileFilter::new(Some(&args.pattern))?.hiding(ctx.hidden.clone());
    let root = walk::locate_directory(ctx, args.path.as_deref(), "find_files")?;
    let cancel = &ctx.cancel;
    // One more than asked for, so that a full answer and a cut one can be told apart.
    let wanted = args.max_results.saturating_add(1);
    let found = AtomicUsize::new(0);
    let shared = Mutex::new(Vec::new());
    walk::walk_files(&root, &filter, cancel, || {
        let mut results = ThreadResults::new(&shared);
        let found = &found;
        move |_path, relative| {
            results.local.push(walk::shown_path(relative));
            if found.fetch_add(1, Ordering::Relaxed) + 1 >= wanted {
                WalkState::Quit
            } else {
                WalkState::Continue
            }
        }
    });
    let mut paths = shared
        .into_inner()
        .unwrap_or_else(|poison| poison.into_inner());
    paths.sort_unstable_by(|left, right| walk::path_order(left, right));
    let truncated = paths.len() > args.max_results;
    paths.truncate(args.max_results);
    let output = ToolOutput::new(paths.join("\n"))
        .with_meta("count", paths.len())
        .with_meta("truncated", truncated);
    if cancel.is_cancelled() {
        // The registry reports this as `canceled` or `timeout`, keeping what was found.
        return Err(
            ToolFailure::new(ErrorType::Canceled, "the search was stopped")
                .with_content(output.content)
                .with_meta("count", paths.len())
                .with_meta("truncated", true),
        );
    }
    Ok(output)
}
