//! The `edit_file` builtin tool: replace an exact string in a text file, atomically, and show
//! the change as a unified diff.
//!
//! Bounded whatever the file and the strings: the file is at most [`MAX_EDIT_BYTES`] before
//! and after the edit (checked before the new text is built), the diff is computed within
//! `preview`'s time limit (then coarser) and shown up to the session's `max_read_bytes`, and a
//! call stopped before its new text and its diff are ready leaves the file as it was. The new
//! text is made by one function, `edited`, for the run and for an approval's preview alike.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::{ErrorType, Preview, Safety, ToolDefinition};

use super::preview::{self, cut_at_line, unified_diff};
use super::read_file::{MAX_EDIT_BYTES, read_text};
use super::write_file::{stopped_unchanged, write_atomically};
use super::{
    JudgedArguments, Reads, Tool, ToolContext, ToolFailure, ToolFuture, ToolSuccess, blocking,
    builtin_definition, parse_args, resolve_judged,
};
use crate::env::Env;
use crate::paths::ResolvedPath;

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
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::Path {
            argument: "path",
            reads: Reads::Contents,
            writes: true,
            one_file: true,
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "edit_file",
            "Replace an exact string in a text file. `old_string` must occur exactly \
            once unless `replace_all` is true; include enough surrounding lines to make it \
            unique. Returns a unified diff of the change.",
            json!({
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
            Safety::SideEffect,
        )
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(async move {
            let args: Args = parse_args(args)?;
            let target = ctx.resolve_path(&args.path);
            let stop = ctx.cancel.clone();
            let max_diff_bytes = ctx.env.max_read_bytes;
            blocking(move || {
                let shown = target.lexical.display().to_string();
                let Change {
                    before,
                    after,
                    matches,
                } = change(&target, &args)?;
                // The diff (up to its time limit) is made before the write, so that nothing
                // slow follows the rename: a call answered "stopped" or `timeout` has left the
                // file as it was, and one answered with the diff has changed it. Not begun for
                // a call already stopped.
                if stop.is_cancelled() {
                    return Err(stopped_unchanged());
                }
                let diff = unified_diff(&before, &after, &shown, &shown);
                write_atomically(&target.resolved, after.as_bytes(), Some(&stop))?;
                let (diff, cut) =
                    cut_at_line(diff, max_diff_bytes, "; read the file to see the rest");
                let mut output = ToolSuccess::new(diff)
                    .with_meta("path", shown)
                    .with_meta("replacements", matches);
                if cut > 0 {
                    output = output.with_meta("diff_bytes_cut", cut);
                }
                Ok(output)
            })
            .await
        })
    }

    fn preview(
        &self,
        args: &Map<String, Value>,
        judged: &[ResolvedPath],
        env: &Env,
    ) -> Option<Preview> {
        let args: Args = parse_args(args.clone()).ok()?;
        let target = resolve_judged(judged, env, &args.path);
        Some(match change(&target, &args) {
            Ok(change) => preview::diff_preview(&target, Some(&change.before), &change.after),
            Err(failure) => preview::unavailable(&target, &failure),
        })
    }
}

/// An edit worked out: the file's text as it is, its text after the edit, how many places
/// changed.
struct Change {
    before: String,
    after: String,
    matches: usize,
}

/// The edit the call makes of `target` as the file is now: its arguments checked, the file
/// read, the new text made ([`edited`]). What the tool writes and what an approval's preview
/// shows both come from here, so that what is approved is what is written.
fn change(target: &ResolvedPath, args: &Args) -> Result<Change, ToolFailure> {
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
    let before = read_text(&target.resolved)?;
    let shown = target.lexical.display().to_string();
    let (after, matches) = edited(&before, args, &shown)?;
    Ok(Change {
        before,
        after,
        matches,
    })
}

/// The file's new text and how many places changed: `before` (the file's text as it is) with
/// the call's `old_string` replaced, once or everywhere, after the checks that refuse an edit
/// (nothing to find, more than one match without `replace_all`, a result too large).
fn edited(before: &str, args: &Args, shown: &str) -> Result<(String, usize), ToolFailure> {
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
    // Checked before it is built: 16 MiB of `a` with each replaced by a kilobyte would be
    // 16 GiB.
    let after_len = (before.len() as u128 - (matches * args.old_string.len()) as u128)
        + matches as u128 * args.new_string.len() as u128;
    if after_len > u128::from(MAX_EDIT_BYTES) {
        return Err(ToolFailure::invalid_arguments(format!(
            "the edit would make {shown} {after_len} bytes, more than the {} MiB edit_file \
             writes; write_file can write it whole",
            MAX_EDIT_BYTES / (1024 * 1024)
        )));
    }
    Ok((before.replace(&args.old_string, &args.new_string), matches))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(old: &str, new: &str, replace_all: bool) -> Args {
        Args {
            path: "f".into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all,
        }
    }

    #[test]
    fn an_edit_replaces_one_match_or_every_one() {
        assert_eq!(
            edited("a b a", &args("b", "c", false), "f").unwrap(),
            ("a c a".into(), 1)
        );
        assert_eq!(
            edited("a b a", &args("a", "x", true), "f").unwrap(),
            ("x b x".into(), 2)
        );
        let refused = |before: &str, args: Args| edited(before, &args, "f").unwrap_err().error_type;
        assert_eq!(
            refused("a b a", args("a", "x", false)),
            ErrorType::NotUnique
        );
        assert_eq!(refused("a b a", args("z", "x", false)), ErrorType::NotFound);
    }
}
