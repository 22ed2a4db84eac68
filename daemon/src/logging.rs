//! The daemon's log: one line per event on stderr (the journal under systemd, or the log file
//! `--log-file` names, which a daemon that `toold connect` or `toold mcp serve` starts writes
//! to), every control character made visible. Log fields carry what clients and models sent
//! (call ids, tool and method names, paths in errors): a newline in one would forge a log
//! line, an escape sequence would reach the terminal or the journal's viewer as one. Lines are
//! written by a thread of their own: logging never waits on stderr's reader and never panics
//! when it is gone (a closed terminal, a finished ssh command), and the daemon keeps serving.

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};

/// The filter when `TOOLD_LOG` is unset or invalid: toold's own `info`, and only warnings from
/// the MCP library, whose `info` lines repeat a server's whole handshake (its instructions
/// included) at every start.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// How large the log file grows before it is rotated: it becomes `toold.log.1` (replacing the
/// one before) and a new file is begun, so at most twice this is kept.
pub(crate) const LOG_FILE_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Lines waiting for the writer thread; past this many, new lines are dropped rather than wait.
const QUEUED_LINES: usize = 16 * 1024;

/// The log file this daemon writes to, once [`log_to_file`] has made it its stderr.
static LOG_FILE: OnceLock<PathBuf> = OnceLock::new();

/// The log file of a daemon started in the background by `toold connect` or `toold mcp serve`:
/// `toold.log` in toold's state directory.
pub fn default_log_file() -> Option<PathBuf> {
    crate::paths::toold_state_dir().map(|dir| dir.join("toold.log"))
}

/// The log file this daemon writes to, if it writes to one.
pub(crate) fn log_file() -> Option<&'static Path> {
    LOG_FILE.get().map(PathBuf::as_path)
}

/// Makes `path` this process's stderr (appending; its directory made, private, when missing),
/// rotated first when it is past [`LOG_FILE_MAX_BYTES`]: from here on, whatever the daemon
/// writes to stderr (a config error before the log starts included) is in the file.
pub(crate) fn log_to_file(path: &Path) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let file = open_rotated(path)?;
    rustix::stdio::dup2_stderr(&file)?;
    let _ = LOG_FILE.set(path.to_owned());
    Ok(())
}

/// `path` opened for appending, after renaming it to `PATH.1` when it is past the bound.
fn open_rotated(path: &Path) -> io::Result<File> {
    if std::fs::metadata(path).is_ok_and(|meta| meta.len() >= LOG_FILE_MAX_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        std::fs::rename(path, old)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Starts the log at the level `TOOLD_LOG` gives ([`DEFAULT_FILTER`] when unset or invalid).
/// The guard flushes what is queued when dropped: keep it until the daemon ends.
pub(crate) fn init() -> WorkerGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("toold-log")
        .finish(SafeLines(Stderr::default()));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours are escape sequences, which the writer would show as text.
        .with_ansi(false)
        .with_writer(writer)
        // A line that cannot be written (stderr's reader gone: the terminal or the process
        // that started the daemon) is lost, never reported with `eprintln!`, which panics on
        // the same closed pipe.
        .log_internal_errors(false)
        .init();
    guard
}

/// stderr, as the writer thread writes it: rotated when it is the log file and has grown past
/// its bound.
#[derive(Default)]
struct Stderr {
    /// The log file's size as this writer knows it (`None` until its first line), for rotation.
    written: Option<u64>,
}

impl Write for Stderr {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.written.get_or_insert_with(|| {
            log_file()
                .and_then(|path| std::fs::metadata(path).ok())
                .map_or(0, |meta| meta.len())
        });
        if let Some(path) = log_file()
            && *written >= LOG_FILE_MAX_BYTES
        {
            *written = 0;
            // A rotation that fails leaves the old file in use: better a large log than none.
            if let Ok(file) = open_rotated(path) {
                let _ = rustix::stdio::dup2_stderr(&file);
            }
        }
        let count = io::stderr().write(bytes)?;
        *written += count as u64;
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// Writes each event it is given (the formatter writes one whole event, ending in its
/// newline, per call) with control characters escaped, the final newline kept, and every
/// configured secret redacted ([`crate::secrets`]: a library's own log line may quote an MCP
/// server's URL or answer).
struct SafeLines<W>(W);

impl<W: Write> Write for SafeLines<W> {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        let line = escaped(event);
        self.0
            .write_all(crate::secrets::current().redact(&line).as_bytes())?;
        Ok(event.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `event` with each control character (C0, DEL, C1, line and paragraph separators) but a
/// final newline written as `\n`, `\r`, `\t` or `\u{…}`; invalid UTF-8 replaced. A line of
/// printable ASCII, as nearly every line is, is written as it is, unchecked char by char.
fn escaped(event: &[u8]) -> Cow<'_, str> {
    let body = event.strip_suffix(b"\n").unwrap_or(event);
    if body.iter().all(|byte| matches!(byte, b' '..=b'~'))
        && let Ok(line) = std::str::from_utf8(event)
    {
        return Cow::Borrowed(line);
    }
    let text = String::from_utf8_lossy(event);
    let (body, end) = match text.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (&*text, ""),
    };
    let mut shown = String::with_capacity(text.len());
    for c in body.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                shown.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
            }
            c => shown.push(c),
        }
    }
    shown.push_str(end);
    Cow::Owned(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_file_past_its_bound_is_rotated_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("toold.log");
        std::fs::write(&path, "small\n").unwrap();
        drop(open_rotated(&path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "small\n");
        let full = vec![b'x'; LOG_FILE_MAX_BYTES as usize];
        std::fs::write(&path, &full).unwrap();
        let mut file = open_rotated(&path).unwrap();
        file.write_all(b"new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        assert_eq!(std::fs::read(dir.path().join("toold.log.1")).unwrap(), full);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_field_cannot_forge_a_line_or_send_a_sequence() {
        assert_eq!(
            escaped(b"INFO call call=id\x1b[2J\nFAKE LINE tool=x\x07\n"),
            "INFO call call=id\\u{1b}[2J\\nFAKE LINE tool=x\\u{7}\n"
        );
        assert_eq!(
            escaped("a\u{9b}b\u{2028}c".as_bytes()),
            "a\\u{9b}b\\u{2028}c"
        );
        assert_eq!(escaped(b"plain line\n"), "plain line\n");
        assert!(matches!(escaped(b"plain line\n"), Cow::Borrowed(_)));
        assert_eq!(escaped(b"two\n\n"), "two\\n\n");
        assert_eq!(escaped(b"caf\xc3\xa9 \xff\n"), "café \u{fffd}\n");
    }
}
