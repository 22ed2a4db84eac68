//! The `write_file` builtin tool, and the atomic replace that `edit_file` shares.
//!
//! A write goes to a temporary file beside the target, is fsynced, renamed over the target and
//! the directory fsynced: a reader, a crash or a `kill -9` sees the old file or the new one,
//! never a torn or empty one. Writes go to the resolved path, so a symlink stays a symlink and
//! its target is replaced.

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::{Safety, ToolDefinition, ToolSource};

use super::{Tool, ToolContext, ToolFailure, ToolFuture, ToolOutput, blocking, parse_args};

pub struct WriteFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "write_file".into(),
            description: "Write a text file, replacing it if it exists. Creates missing parent \
                directories; the file is replaced atomically and keeps its permissions. \
                `path` is absolute or relative to the working directory. Prefer edit_file for \
                changing part of an existing file."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File to write"},
                    "content": {"type": "string", "description": "The whole new content"}
                },
                "required": ["path", "content"],
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
            let target = ctx.env.resolve_path(&args.path);
            blocking(move || {
                let created = !target.resolved.exists();
                write_atomically(&target.resolved, args.content.as_bytes())?;
                Ok(ToolOutput::new(format!(
                    "{} {} ({} bytes)",
                    if created { "created" } else { "wrote" },
                    target.lexical.display(),
                    args.content.len()
                ))
                .with_meta("path", target.lexical.display().to_string())
                .with_meta("bytes", args.content.len())
                .with_meta("created", created))
            })
            .await
        })
    }
}

/// Replaces `path` with `bytes` atomically, creating parent directories. An existing file keeps
/// its mode; a new one gets the mode a plain `open(O_CREAT, 0666)` would give under the umask.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ToolFailure> {
    let existing_mode = match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolFailure::io(
                path,
                "write",
                &io::Error::from(io::ErrorKind::IsADirectory),
            ));
        }
        Ok(meta) => Some(meta.permissions().mode() & 0o7777),
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(err) => return Err(ToolFailure::io(path, "write", &err)),
    };
    let Some(parent) = path.parent() else {
        return Err(ToolFailure::invalid_arguments(format!(
            "{} is not a file path",
            path.display()
        )));
    };
    fs::create_dir_all(parent).map_err(|err| ToolFailure::io(parent, "create directory", &err))?;
    let mode = existing_mode.unwrap_or(0o666 & !process_umask());
    let fail = |err: io::Error| ToolFailure::io(path, "write", &err);
    let mut temp = tempfile::Builder::new()
        .prefix(".toold-write-")
        .tempfile_in(parent)
        .map_err(fail)?;
    temp.write_all(bytes).map_err(fail)?;
    temp.as_file()
        .set_permissions(Permissions::from_mode(mode))
        .map_err(fail)?;
    temp.as_file().sync_all().map_err(fail)?;
    temp.persist(path).map_err(|err| fail(err.error))?;
    // The rename is durable only once the directory entry is.
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(fail)?;
    Ok(())
}

/// The process umask, read once from /proc (reading it with umask(2) would briefly change it
/// for every thread). Falls back to the common 022.
fn process_umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("Umask:"))
                    .and_then(|value| u32::from_str_radix(value.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}
