//! The `read_file` builtin tool: a text file, or a window of its lines, within `max_read_bytes`.
//!
//! The file is streamed once: lines before the window are skipped, the window is kept up to the
//! byte limit, and the rest is only counted (`total_lines`), so memory stays at the limit
//! whatever the file's size.
//!
//! The file is opened on the calling task (as cheap as judging its path, which happened there
//! too); a small one (up to `INLINE_READ_MAX_BYTES`) is also read there, which saves two
//! thread hand-offs, the largest part of a small read's latency. A larger one is read on the
//! blocking pool, so a worker never waits long.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::{ErrorType, Safety, ToolDefinition};

use crate::paths::ResolvedPath;

use super::{
    JudgedArguments, Reads, StopReading, Tool, ToolContext, ToolFailure, ToolFuture, ToolSuccess,
    blocking, builtin_definition, parse_args,
};

/// How much of a file's start is checked for NUL bytes to tell binary from text, as git does.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// The largest regular file read on the calling task instead of the blocking pool.
const INLINE_READ_MAX_BYTES: u64 = 64 * 1024;

pub(crate) struct ReadFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

impl Tool for ReadFile {
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::Path {
            argument: "path",
            reads: Reads::Contents,
            writes: false,
            one_file: true,
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "read_file",
            "Read a text file. `path` is absolute or relative to the working \
            directory. `offset` is the first line to return (1-based) and `limit` the number \
            of lines; without them the whole file is returned, up to the read limit \
            (metadata `truncated` then says it was cut, `next_offset` where to go on).",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "File to read"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line, 1-based"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines"}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            Safety::ReadOnly,
        )
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(async move {
            let args: Args = parse_args(args)?;
            let target = ctx.resolve_path(&args.path);
            let window = Window {
                first_line: args.offset.unwrap_or(1),
                limit: args.limit,
                max_bytes: ctx.env.max_read_bytes,
            };
            let (file, size) = open_regular_file(&target.resolved)?;
            if size <= INLINE_READ_MAX_BYTES {
                // Bounded: a file that grows while it is read (a log being written) must not
                // hold the async thread; past the bound it starts over on the blocking pool.
                let mut bounded = (&file).take(INLINE_READ_MAX_BYTES + 1);
                let output = read_output(&mut bounded, &target, &window);
                if bounded.limit() > 0 {
                    return output;
                }
                (&file)
                    .seek(SeekFrom::Start(0))
                    .map_err(|err| ToolFailure::io(&target.resolved, "read", &err))?;
            }
            // Counting the lines of a large file takes long: it stops with the call.
            let stop = ctx.cancel.clone();
            blocking(move || read_output(StopReading::new(file, &stop), &target, &window)).await
        })
    }
}

/// Opens the judged `path` for reading (a symlink appeared on it since the check: refused) and
/// returns it with its size, if it is a regular file. `O_NONBLOCK` keeps the open itself from
/// waiting (a FIFO would block it until a writer came); it changes nothing for reading a
/// regular file. FIFOs, sockets and devices are refused: their reads may never end.
fn open_regular_file(path: &Path) -> Result<(File, u64), ToolFailure> {
    let fail = |err: io::Error| ToolFailure::io(path, "read", &err);
    let file = crate::judged_files::open_read(path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if meta.is_dir() {
        return Err(fail(io::Error::from(io::ErrorKind::IsADirectory)));
    }
    if !meta.is_file() {
        return Err(ToolFailure::invalid_arguments(format!(
            "{} is not a regular file (a FIFO, socket or device); only regular files are read or edited",
            path.display()
        )));
    }
    Ok((file, meta.len()))
}

/// Reads the window of `file` (opened from `target.resolved`) into the tool's output.
fn read_output(
    file: impl Read,
    target: &ResolvedPath,
    window: &Window,
) -> Result<ToolSuccess, ToolFailure> {
    let read = read_window(file, &target.resolved, window)?;
    if read.total_lines > 0 && window.first_line > read.total_lines {
        return Err(ToolFailure::invalid_arguments(format!(
            "offset {} is past the end of {} ({} lines)",
            window.first_line,
            target.lexical.display(),
            read.total_lines
        )));
    }
    let mut output = ToolSuccess::new(read.text)
        .with_meta("path", target.lexical.display().to_string())
        .with_meta("total_lines", read.total_lines)
        .with_meta("truncated", read.next_offset.is_some());
    if let Some(next) = read.next_offset {
        output = output.with_meta("next_offset", next);
    }
    Ok(output)
}

struct Window {
    first_line: u64,
    limit: Option<u64>,
    max_bytes: usize,
}

struct WindowRead {
    text: String,
    total_lines: u64,
    /// Set when the byte limit cut the window: the line to continue from.
    next_offset: Option<u64>,
}

fn read_window(file: impl Read, path: &Path, window: &Window) -> Result<WindowRead, ToolFailure> {
    let fail = |err: io::Error| ToolFailure::io(path, "read", &err);
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    if reader
        .fill_buf()
        .map_err(fail)?
        .iter()
        .take(BINARY_SNIFF_BYTES)
        .any(|&byte| byte == 0)
    {
        return Err(binary_file(path));
    }
    let last_line = window
        .limit
        .map(|limit| window.first_line.saturating_add(limit - 1));
    let mut line_number = skip_lines(&mut reader, window.first_line - 1).map_err(fail)?;
    let mut kept: Vec<u8> = Vec::new();
    let mut next_offset = None;
    let mut line: Vec<u8> = Vec::new();
    while last_line.is_none_or(|last| line_number < last) {
        line.clear();
        // A line is read only as far as it can fit, plus one byte to tell that it does not:
        // a file of one long line must not be read into memory whole.
        let room = window.max_bytes - kept.len();
        let read = (&mut reader)
            .take(room as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(fail)?;
        if read == 0 {
            break;
        }
        line_number += 1;
        if line.len() <= room {
            kept.extend_from_slice(&line);
            continue;
        }
        if kept.is_empty() {
            // Not even one line fits: give the start of it rather than nothing.
            kept.extend_from_slice(&line[..char_boundary_at_most(&line, window.max_bytes)]);
            next_offset = Some(line_number + 1);
        } else {
            next_offset = Some(line_number);
        }
        if !line.ends_with(b"\n") {
            // The rest of the cut line, which the count below must not take for a line.
            skip_lines(&mut reader, 1).map_err(fail)?;
        }
        break;
    }
    line_number += count_lines_to_end(&mut reader).map_err(fail)?;
    let text = match String::from_utf8(kept) {
        Ok(text) => text,
        Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
    };
    Ok(WindowRead {
        text,
        total_lines: line_number,
        next_offset,
    })
}

/// The largest index `<= limit` that does not split a UTF-8 sequence in `bytes`.
fn char_boundary_at_most(bytes: &[u8], limit: usize) -> usize {
    let mut end = limit.min(bytes.len());
    // UTF-8 continuation bytes look like 0b10xx_xxxx; a sequence is at most 4 bytes long.
    while end > 0 && end < bytes.len() && bytes[end] & 0b1100_0000 == 0b1000_0000 && limit - end < 3
    {
        end -= 1;
    }
    end
}

/// Skips up to `count` lines a buffer at a time without keeping them; returns how many there
/// were (fewer at the end of the file, where a last line without a newline counts too).
fn skip_lines<R: BufRead>(reader: &mut R, count: u64) -> io::Result<u64> {
    let mut skipped = 0u64;
    while skipped < count {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(skipped);
        }
        let mut consumed = buffer.len();
        for index in memchr::memchr_iter(b'\n', buffer) {
            skipped += 1;
            if skipped == count {
                consumed = index + 1;
                break;
            }
        }
        let ends_mid_line = buffer[consumed - 1] != b'\n';
        reader.consume(consumed);
        if ends_mid_line && reader.fill_buf()?.is_empty() {
            return Ok(skipped + 1);
        }
    }
    Ok(skipped)
}

/// Counts the lines left, a last line without a newline included, keeping none of them.
fn count_lines_to_end<R: BufRead>(reader: &mut R) -> io::Result<u64> {
    let mut lines = 0u64;
    let mut last_byte = b'\n';
    loop {
        let buffer = reader.fill_buf()?;
        let Some(&last) = buffer.last() else {
            return Ok(lines + u64::from(last_byte != b'\n'));
        };
        lines += memchr::memchr_iter(b'\n', buffer).count() as u64;
        last_byte = last;
        let consumed = buffer.len();
        reader.consume(consumed);
    }
}

pub(crate) fn binary_file(path: &Path) -> ToolFailure {
    ToolFailure::new(
        ErrorType::BinaryFile,
        format!(
            "{} is a binary file (it contains NUL bytes); only text files can be read or edited",
            path.display()
        ),
    )
}

/// The largest file `edit_file` reads whole to edit. An edit holds the file, its new text and
/// a diff at once; past this, a file is not one an exact-string edit is meant for.
pub(crate) const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a whole text file for editing: refuses directories, binary files, invalid UTF-8, and
/// files over [`MAX_EDIT_BYTES`] (also one that grows past it while it is read).
pub(crate) fn read_text(path: &Path) -> Result<String, ToolFailure> {
    let fail = |err: io::Error| ToolFailure::io(path, "read", &err);
    let (file, size) = open_regular_file(path)?;
    let too_large = || {
        ToolFailure::invalid_arguments(format!(
            "{} is larger than {} MiB, the most edit_file edits; write_file can replace it, \
             or run_command can edit it with a stream editor",
            path.display(),
            MAX_EDIT_BYTES / (1024 * 1024)
        ))
    };
    if size > MAX_EDIT_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    if bytes.len() as u64 > MAX_EDIT_BYTES {
        return Err(too_large());
    }
    if bytes.iter().take(BINARY_SNIFF_BYTES).any(|&byte| byte == 0) {
        return Err(binary_file(path));
    }
    String::from_utf8(bytes).map_err(|_| {
        ToolFailure::new(
            ErrorType::BinaryFile,
            format!(
                "{} is not valid UTF-8 text; it cannot be edited as text",
                path.display()
            ),
        )
    })
}
