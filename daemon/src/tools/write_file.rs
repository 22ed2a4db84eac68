//! The `write_file` builtin tool, and the atomic replace that `edit_file` shares.
//!
//! A write goes to a temporary file beside the target, is fsynced, renamed over the target and
//! the directory fsynced: a reader, a crash or a `kill -9` sees the old file or the new one,
//! never a torn or empty one. Writes go to the resolved path, so a symlink stays a symlink and
//! its target is replaced. Everything happens relative to the target's directory opened as it
//! was judged (`crate::judged_files`): a symlink swapped into the path after the check makes the
//! write fail rather than land somewhere else.

use std::fs::{self, File, Permissions};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use toold_protocol::{ErrorType, Preview, Safety, ToolDefinition};

use super::{
    JudgedArguments, Reads, Tool, ToolContext, ToolFailure, ToolFuture, ToolSuccess, blocking,
    builtin_definition, parse_args, resolve_judged,
};
use super::{preview, write_journal};
use crate::env::Env;
use crate::judged_files;
use crate::paths::ResolvedPath;

pub struct WriteFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::Path {
            argument: "path",
            reads: Reads::Nothing,
            writes: true,
            one_file: true,
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "write_file",
            "Write a text file, replacing it if it exists. Creates missing parent \
            directories; the file is replaced atomically and keeps its permissions. \
            `path` is absolute or relative to the working directory. Prefer edit_file for \
            changing part of an existing file.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File to write"},
                    "content": {"type": "string", "description": "The whole new content"}
                },
                "required": ["path", "content"],
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
            blocking(move || {
                let created = !write_atomically(
                    &target.resolved,
                    new_content(&args).as_bytes(),
                    Some(&stop),
                )?;
                Ok(ToolSuccess::new(format!(
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

    fn preview(
        &self,
        args: &Map<String, Value>,
        judged: &[ResolvedPath],
        env: &Env,
    ) -> Option<Preview> {
        let args: Args = parse_args(args.clone()).ok()?;
        let target = resolve_judged(judged, env, &args.path);
        Some(match preview::current_text(&target) {
            Ok(before) => preview::diff_preview(&target, before.as_deref(), new_content(&args)),
            Err(failure) => preview::unavailable(&target, &failure),
        })
    }
}

/// The text the call puts in the file, whatever was there: what the tool writes and what an
/// approval's preview diffs the file against.
fn new_content(args: &Args) -> &str {
    &args.content
}

/// A write's answer when its call was stopped before the file was replaced.
pub(crate) fn stopped_unchanged() -> ToolFailure {
    ToolFailure::new(
        ErrorType::Canceled,
        "the call was stopped before the file was replaced; it is unchanged",
    )
}

/// Replaces the judged `path` with `bytes` atomically, creating parent directories; returns
/// whether a file was there before. An existing file keeps its mode; a new one gets the mode a
/// plain `open(O_CREAT, 0666)` would give under the umask. The temporary file, the rename and
/// the directory's fsync all go through one descriptor of the parent directory. When `stop`
/// (the call's stop signal) has fired by the time the new content is ready, nothing replaces
/// the file: a call answered "stopped" must not change it afterwards.
pub(crate) fn write_atomically(
    path: &Path,
    bytes: &[u8],
    stop: Option<&CancellationToken>,
) -> Result<bool, ToolFailure> {
    let fail = |err: io::Error| ToolFailure::io(path, "write", &err);
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ToolFailure::invalid_arguments(format!(
            "{} is not a file path",
            path.display()
        )));
    };
    let dir = judged_files::open_dir_creating(parent)
        .map_err(|err| ToolFailure::io(parent, "create directory", &err))?;
    let existing_mode = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) => match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => return Err(fail(io::Error::from(io::ErrorKind::IsADirectory))),
            // It was not one when the path was judged: a swap, refused like one in the path.
            SFlag::S_IFLNK => return Err(fail(io::Error::from(Errno::ELOOP))),
            _ => Some(stat.st_mode & 0o7777),
        },
        Err(Errno::ENOENT) => None,
        Err(err) => return Err(fail(err.into())),
    };
    let mode = existing_mode.unwrap_or(0o666 & !process_umask());
    let (temp_name, temp, _in_flight) = create_temp(&dir, parent).map_err(fail)?;
    let filled = fill_temp(temp, bytes, mode);
    if filled.is_ok() && stop.is_some_and(CancellationToken::is_cancelled) {
        let _ = unlinkat(&dir, temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(stopped_unchanged());
    }
    let written = filled
        .and_then(|()| renameat(&dir, temp_name.as_str(), &dir, name).map_err(io::Error::from));
    if let Err(err) = written {
        // Best effort: the error that matters is the write's.
        let _ = unlinkat(&dir, temp_name.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(fail(err));
    }
    // The rename is durable only once the directory entry is.
    File::from(dir).sync_all().map_err(fail)?;
    Ok(existing_mode.is_some())
}

/// Creates a new temporary file in `dir` (the directory `parent` opened as judged), never
/// following or replacing anything there, recorded in the journal of writes in flight for as
/// long as the returned guard lives.
fn create_temp(
    dir: &OwnedFd,
    parent: &Path,
) -> io::Result<(String, File, write_journal::InFlight)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let name = format!(
            "{}{}-{}",
            write_journal::TEMP_PREFIX,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let in_flight = write_journal::begin(&parent.join(&name));
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(dir, name.as_str(), flags, Mode::from_bits_truncate(0o600)) {
            Ok(fd) => return Ok((name, File::from(fd), in_flight)),
            // Left by an earlier daemon with the same pid: take the next number.
            Err(Errno::EEXIST) => continue,
            Err(err) => return Err(err.into()),
        }
    }
}

/// Writes the content, sets the final mode and makes it durable.
fn fill_temp(mut temp: File, bytes: &[u8], mode: u32) -> io::Result<()> {
    temp.write_all(bytes)?;
    temp.set_permissions(Permissions::from_mode(mode))?;
    temp.sync_all()
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
