//! What the client subcommands print for people: a result's status line, one line per session
//! event, and the tables of `tools` and `sessions`, with everything that came from the daemon
//! or the model made visible (`visible`).

use super::visible;
use toold_protocol::{
    ApprovalDecision, Event, OutputStream, ReplacedBy, ResolvedBy, SessionMode, SessionSnapshot,
    ToolDefinition, ToolResult,
};

/// Writes `text` to stdout, flushed. A reader that went away (`toold tools | head -1`) is not
/// an error of ours, so nothing is reported, unlike `print!`, which would panic.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// `✓ read_file ok (3 ms)` or `✗ run_command command_failed: exit code 1`.
pub fn status_line(result: &ToolResult, elapsed_ms: u64) -> String {
    let tool = visible::line(&result.tool);
    if result.ok {
        return format!("✓ {tool} ok ({elapsed_ms} ms)");
    }
    let error_type = result
        .error_type
        .as_ref()
        .map_or("failed", |error_type| error_type.as_str());
    match result.error.as_deref().filter(|error| !error.is_empty()) {
        Some(error) => format!("✗ {tool} {error_type}: {}", visible::line(error)),
        None => format!("✗ {tool} {error_type}"),
    }
}

/// One line for a session event, or `None` for `tool/call_done`, which repeats
/// `tool/result`. `tool/output` is printed by the caller, as it arrived.
pub fn event_line(event: &Event) -> Option<String> {
    match event {
        Event::BatchStart(start) => Some(format!(
            "batch {} started: {} call(s), runs {:?}",
            visible::line(&start.batch_id),
            start.body.call_ids.len(),
            start.body.plan
        )),
        Event::CallStart(start) => Some(format!(
            "▶ {} {} {}",
            visible::line(&start.body.call.id),
            visible::line(&start.body.call.name),
            visible::line(&compact_json(&start.body.call.arguments))
        )),
        Event::ArgumentsReplaced(replaced) => Some(format!(
            "↻ {} {} arguments replaced by {}: {}",
            visible::line(&replaced.body.call.id),
            visible::line(&replaced.body.call.name),
            match replaced.body.by {
                ReplacedBy::Hook => "a hook",
                ReplacedBy::Approver => "an approver",
            },
            visible::line(&compact_json(&replaced.body.call.arguments))
        )),
        Event::Output(output) => Some(format!(
            "  {} {}: {}",
            visible::line(&output.body.call_id),
            stream_name(output.body.stream),
            visible::line(output.body.data.trim_end_matches('\n'))
        )),
        Event::Progress(progress) => {
            let mut line = format!(
                "  {} progress {}",
                visible::line(&progress.body.call_id),
                progress.body.progress
            );
            if let Some(total) = progress.body.total {
                line.push_str(&format!("/{total}"));
            }
            if let Some(message) = &progress.body.message {
                line.push_str(&format!(": {}", visible::line(message)));
            }
            Some(line)
        }
        Event::Result(ended) => Some(format!(
            "{} {}",
            visible::line(&ended.body.call_id),
            status_line(&ended.body.result, ended.body.elapsed_ms)
        )),
        Event::CallDone(_) => None,
        Event::ApprovalResolved(resolved) => Some(format!(
            "approval {} for {}: {} by {}",
            visible::line(&resolved.body.approval_id),
            visible::line(&resolved.body.call_id),
            resolved
                .body
                .decision
                .map_or("no decision", ApprovalDecision::as_str),
            resolved_by_name(resolved.body.by)
        )),
        Event::BatchDone(done) => Some(format!("batch {} done", visible::line(&done.batch_id))),
    }
}

pub fn stream_name(stream: OutputStream) -> &'static str {
    match stream {
        OutputStream::Stdout => "stdout",
        OutputStream::Stderr => "stderr",
    }
}

fn resolved_by_name(by: ResolvedBy) -> &'static str {
    match by {
        ResolvedBy::Client => "a client",
        ResolvedBy::Timeout => "timeout",
        ResolvedBy::Cancel => "cancel",
        ResolvedBy::Disconnect => "disconnect",
    }
}

pub fn mode_name(mode: SessionMode) -> String {
    serde_json::to_value(mode)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{mode:?}"))
}

/// A JSON value on one line.
pub fn compact_json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// `tools`: name, safety, source, the first sentence of the description.
pub fn tools_table(tools: &[ToolDefinition]) -> String {
    let rows: Vec<[String; 4]> = tools
        .iter()
        .map(|tool| {
            let safety = serde_json::to_value(tool.safety)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            let source = visible::line(&tool.source.to_string()).into_owned();
            let source = if tool.system {
                format!("{source}, system")
            } else {
                source
            };
            let description =
                visible::line(&first_sentence(&tool.description, DESCRIPTION_CHARS)).into_owned();
            [
                visible::line(&tool.name).into_owned(),
                safety,
                source,
                description,
            ]
        })
        .collect();
    table(["TOOL", "SAFETY", "SOURCE", "DESCRIPTION"], &rows)
}

/// How much of a tool's description the table shows.
const DESCRIPTION_CHARS: usize = 72;

/// The first sentence of `text`, cut to `max_chars` with `…`.
fn first_sentence(text: &str, max_chars: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    let sentence = match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    };
    if sentence.chars().count() <= max_chars {
        return sentence.to_owned();
    }
    let mut cut: String = sentence.chars().take(max_chars - 1).collect();
    cut.push('…');
    cut
}

/// `sessions`: id, mode, attached connections, running batches, cwd, title.
pub fn sessions_table(sessions: &[SessionSnapshot]) -> String {
    let rows: Vec<[String; 6]> = sessions
        .iter()
        .map(|session| {
            [
                visible::line(&session.session_id).into_owned(),
                mode_name(session.mode),
                session.attached.to_string(),
                session.running_batches.len().to_string(),
                visible::line(&session.cwd.display().to_string()).into_owned(),
                visible::line(session.title.as_deref().unwrap_or_default()).into_owned(),
            ]
        })
        .collect();
    table(
        ["SESSION", "MODE", "ATTACHED", "RUNNING", "CWD", "TITLE"],
        &rows,
    )
}

/// Left-aligned columns two spaces apart; the last column is not padded.
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|title| title.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[column]));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// A duration for people: `42 s`, `5 min 3 s`, `2 h 7 min`, `3 d 4 h`.
pub fn duration(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{} min {} s", seconds / 60, seconds % 60),
        3600..86400 => format!("{} h {} min", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{} d {} h", seconds / 86400, seconds % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toold_protocol::ErrorType;

    #[test]
    fn status_lines() {
        let ok = ToolResult::success("read_file", "hi");
        assert_eq!(status_line(&ok, 3), "✓ read_file ok (3 ms)");
        let failed = ToolResult::failure("run_command", ErrorType::CommandFailed, "exit code 1");
        assert_eq!(
            status_line(&failed, 9),
            "✗ run_command command_failed: exit code 1"
        );
    }

    #[test]
    fn tables_align() {
        let rows = [
            ["a".to_owned(), "long value".to_owned(), "x".to_owned()],
            ["bbbb".to_owned(), "v".to_owned(), String::new()],
        ];
        assert_eq!(
            table(["K", "VALUE", "LAST"], &rows),
            "K     VALUE       LAST\na     long value  x\nbbbb  v\n"
        );
    }

    #[test]
    fn descriptions_are_cut_to_their_first_sentence() {
        assert_eq!(
            first_sentence("Read a file. Then more.", 72),
            "Read a file."
        );
        assert_eq!(first_sentence("abcdef", 4), "abc…");
        assert_eq!(first_sentence("", 4), "");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(42), "42 s");
        assert_eq!(duration(303), "5 min 3 s");
        assert_eq!(duration(7620), "2 h 7 min");
        assert_eq!(duration(273_600), "3 d 4 h");
    }
}
