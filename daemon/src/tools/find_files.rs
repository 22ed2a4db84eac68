//! The `find_files` builtin tool: lists the files under a directory whose path matches a glob,
//! honouring ignore files and skipping hidden files as ripgrep does (see [`super::walk`]).
//! The files come from the directory's warm index when it can give exactly what the walk
//! would ([`crate::index::roots`]), else from the walk; the answer is the same either way.
//!
//! **Truncation and determinism.** The walk runs on several threads and stops as soon as
//! `max_results + 1` files were found (the extra one proves there are more). The answer is
//! always sorted, and when nothing was cut it is exactly the same on every run. When it *was*
//! cut, *which* `max_results` files are listed depends on which threads got there first, so two
//! runs may list different subsets; `truncated: true` and `count` are the same either way. We
//! chose bounded work over a deterministic prefix (which would need the whole tree walked, for
//! a home directory many seconds): a truncated listing is a sign to narrow the pattern, and
//! the model is told so in the tool description.
//!
//! **Bounds.** `max_results` is at most [`MAX_RESULTS`], and the listing at most the session's
//! `max_read_bytes` (cut at a whole path, `truncated: true`), so one call holds a bounded amount
//! whatever the tree. A name with a control character is escaped in the text (a newline would
//! forge a line) and given exactly in the metadata's `escaped_paths`.

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ignore::WalkState;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{ErrorType, Safety, ToolDefinition};

use crate::index::roots::Indexes;

use super::walk::{self, Budget, FileFilter, MAX_RESULTS, ThreadResults};
use super::{
    JudgedArguments, Reads, Tool, ToolContext, ToolFailure, ToolFuture, ToolOutcome, ToolSuccess,
    builtin_definition, parse_args,
};

/// How many paths a call lists when it does not say.
pub(crate) const DEFAULT_MAX_RESULTS: usize = 1000;

pub(crate) struct FindFiles {
    pub indexes: Arc<Indexes>,
}

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
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::Path {
            argument: "path",
            reads: Reads::Names,
            writes: false,
            one_file: false,
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "find_files",
            "Lists the files whose path matches a glob, under a directory. \
            The glob is gitignore-style: without a `/` it matches the file name at any \
            depth (`*.rs`); `*` stays within one directory level, `**` crosses levels \
            (`src/**/*.ts`). Files ignored by .gitignore or .ignore are left out, and so \
            are hidden files unless the glob names them (`.github/**`). Paths are relative \
            to `path`, one per line, sorted. When more than max_results match, an \
            arbitrary subset is listed and `truncated` is true: narrow the pattern.",
            json!({
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
                        "maximum": MAX_RESULTS,
                        "description": "Most paths to list (default 1000)."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            Safety::ReadOnly,
        )
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        let indexes = Arc::clone(&self.indexes);
        Box::pin(async move {
            let args: FindArgs = parse_args(args)?;
            super::blocking(move || find_files(&args, &ctx, &indexes)).await
        })
    }
}

fn find_files(args: &FindArgs, ctx: &ToolContext, indexes: &Indexes) -> ToolOutcome {
    let filter = FileFilter::new(Some(&args.pattern))?.hiding(ctx.hidden.clone());
    let root = walk::locate_directory(ctx, args.path.as_deref(), "find_files")?;
    let cancel = &ctx.cancel;
    let budget = Budget::new(args.max_results, ctx.env.max_read_bytes);
    let found = |results: &mut Vec<(String, Option<String>)>, relative: &Path| {
        let shown = walk::shown_path(relative);
        let full = budget.take(1, shown.len() + 1);
        let exact = match &shown {
            Cow::Owned(shown) => walk::exact_name(relative, shown),
            Cow::Borrowed(_) => None,
        };
        results.push((shown.into_owned(), exact));
        if full {
            WalkState::Quit
        } else {
            WalkState::Continue
        }
    };
    let warm = indexes.with_files(&root, filter.walks_git_dirs(), |list| {
        let mut results = Vec::new();
        walk::walk_listed(list, &filter, cancel, |relative, _| {
            found(&mut results, relative)
        });
        results
    });
    let (mut paths, cold) = match warm {
        Ok(paths) => (paths, None),
        Err(reason) => {
            let shared = Mutex::new(Vec::new());
            walk::walk_files(&root, &filter, cancel, || {
                let mut results = ThreadResults::new(&shared);
                move |_path, relative| found(&mut results.local, relative)
            });
            (shared.into_inner_unpoisoned(), Some(reason))
        }
    };
    paths.sort_unstable_by(|(left, _), (right, _)| walk::path_order(left, right));
    let found = paths.len();
    paths.truncate(listed(&paths, &budget));
    let truncated = found > paths.len();
    let escaped: Map<String, Value> = paths
        .iter()
        .filter_map(|(shown, exact)| Some((shown.clone(), Value::from(exact.clone()?))))
        .collect();
    let shown: Vec<String> = paths.into_iter().map(|(shown, _)| shown).collect();
    let mut output = ToolSuccess::new(shown.join("\n"))
        .with_meta("count", shown.len())
        .with_meta("truncated", truncated);
    output = walk::with_index_metadata(output, cold);
    if !escaped.is_empty() {
        output = output.with_meta("escaped_paths", escaped);
    }
    if cancel.is_cancelled() {
        // The registry reports this as `canceled` or `timeout`, keeping what was found.
        return Err(
            ToolFailure::new(ErrorType::Canceled, "the search was stopped")
                .with_content(output.content)
                .with_meta("count", shown.len())
                .with_meta("truncated", true),
        );
    }
    Ok(output)
}

/// How many of the sorted `paths` the answer lists: at most the budget's items, and as many
/// as fit its bytes (one path a line).
fn listed(paths: &[(String, Option<String>)], budget: &Budget) -> usize {
    let mut bytes = 0;
    paths
        .iter()
        .take(budget.max_items())
        .take_while(|(shown, _)| {
            bytes += shown.len() + usize::from(bytes > 0);
            bytes <= budget.max_bytes()
        })
        .count()
}
