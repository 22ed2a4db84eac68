//! The `edit_file` builtin tool: replace an exact string in a text file, atomically, and show
//! the change as a unified diff.
//!
//! Bounded whatever the file and the strings: the file is at most [`MAX_EDIT_BYTES`] before
//! and after the edit (checked before the new text is built), the diff is computed within
//! `DIFF_TIME_LIMIT` (then coarser) and shown up to the session's `max_read_bytes`, and a
//! call stopped before its new text and its diff are ready leaves the file as it was.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use similar::TextDiff;
use toold_protocol::{ErrorType, Safety, ToolDefinition};

use super::read_file::{MAX_EDIT_BYTES, read_text};
use super::write_file::{stopped_unchanged, write_atomically};
use super::{
    JudgedArguments, Reads, Tool, ToolContext, ToolFailure, ToolFuture, ToolOutput, blocking,
    builtin_definition, parse_args,
};

/// How long the diff of an edit may take before it settles for a coarser one: a diff of two
/// large texts that share no line is quadratic.
const DIFF_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

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
            let stop = ctx.cancel.clone();
            let max_diff_bytes = ctx.env.max_read_bytes;
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
                // Checked before it is built: 16 MiB of `a` with each replaced by a kilobyte
                // would be 16 GiB.
                let after_len = (before.len() as u128 - (matches * args.old_string.len()) as u128)
                    + matches as u128 * args.new_string.len() as u128;
                if after_len > u128::from(MAX_EDIT_BYTES) {
                    return Err(ToolFailure::invalid_arguments(format!(
                        "the edit would make {shown} {after_len} bytes, more than the {} MiB \
                         edit_file writes; write_file can write it whole",
                        MAX_EDIT_BYTES / (1024 * 1024)
                    )));
                }
                let after = before.replace(&args.old_string, &args.new_string);
                // The diff (up to its time limit) is made before the write, so that nothing
                // slow follows the rename: a call answered "stopped" or `timeout` has left the
                // file as it was, and one answered with the diff has changed it. Not begun for
                // a call already stopped.
                if stop.is_cancelled() {
                    return Err(stopped_unchanged());
                }
                let diff = TextDiff::configure()
                    .timeout(DIFF_TIME_LIMIT)
                    .diff_lines(&before, &after)
                    .unified_diff()
                    .context_radius(3)
                    .header(&shown, &shown)
                    .to_string();
                write_atomically(&target.resolved, after.as_bytes(), Some(&stop))?;
                let (diff, cut) = cut_at_line(diff, max_diff_bytes);
                let mut output = ToolOutput::new(diff)
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
}

/// `diff` cut to at most `max_bytes`, after a whole line, with a last line saying how much was
/// left out; and how many bytes that was (0 when nothing was cut).
fn cut_at_line(mut diff: String, max_bytes: usize) -> (String, usize) {
    if diff.len() <= max_bytes {
        return (diff, 0);
    }
    let end = diff[..max_bytes]
        .rfind('\n')
        .map_or(0, |newline| newline + 1);
    let cut = diff.len() - end;
    diff.truncate(end);
    diff.push_str(&format!(
        "[… {cut} more bytes of the diff cut; read the file to see the rest]\n"
    ));
    (diff, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_diff_is_cut_after_a_whole_line() {
        let diff = "-a\n+b\n-c\n+d\n".to_owned();
        assert_eq!(cut_at_line(diff.clone(), 100), (diff.clone(), 0));
        let (cut, left_out) = cut_at_line(diff, 7);
        assert_eq!(left_out, 6);
        assert_eq!(
            cut,
            "-a\n+b\n[… 6 more bytes of the diff cut; read the file to see the rest]\n"
        );
    }
}
