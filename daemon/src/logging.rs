//! The daemon's log: one line per event on stderr (the journal under systemd), with every
//! control character made visible. Log fields carry what clients and models sent (call ids,
//! tool and method names, paths in errors): a newline in one would forge a log line, an escape
//! sequence would reach the terminal or the journal's viewer as one.

use std::borrow::Cow;
use std::io::{self, Write};

/// The filter when `TOOLD_LOG` is unset or invalid: toold's own `info`, and only warnings from
/// the MCP library, whose `info` lines repeat a server's whole handshake (its instructions
/// included) at every start.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// Starts the log at the level `TOOLD_LOG` gives ([`DEFAULT_FILTER`] when unset or invalid).
pub(crate) fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours are escape sequences, which the writer would show as text.
        .with_ansi(false)
        .with_writer(|| SafeLines(io::stderr()))
        // A line that cannot be written (stderr's reader gone: the terminal or the process
        // that started the daemon) is lost, never reported with `eprintln!`, which panics on
        // the same closed pipe inside whatever task logged: a call that never ends, a SIGTERM
        // that never drains.
        .log_internal_errors(false)
        .init();
}

/// Writes each event it is given (the formatter writes one whole event, ending in its
/// newline, per call) with control characters escaped, the final newline kept.
struct SafeLines<W>(W);

impl<W: Write> Write for SafeLines<W> {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        self.0.write_all(escaped(event).as_bytes())?;
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
