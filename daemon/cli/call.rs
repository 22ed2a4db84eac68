//! `toold call TOOL [JSON|-]`: one tool call in a batch of its own. `run_command`'s output is
//! streamed live to stdout and stderr; then the content (when it was not streamed) goes to
//! stdout and one status line to stderr, or with `--json` the result object to stdout. What
//! goes to a terminal is made visible (`visible`); a pipe or a file gets the bytes as they are.

use std::io::{IsTerminal, Read, Write};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Map, Value};
use toold_client::protocol::{Event, OutputStream, ToolCall, ToolResult};

use super::Outcome;
use super::batch_run::{BatchArgs, run_batch};
use super::render;
use super::visible;

#[derive(Args, Debug)]
pub struct CallArgs {
    /// The tool to call (`toold tools` lists them).
    pub tool: String,
    /// The arguments, a JSON object; `-` reads it from stdin [default: {}].
    #[arg(value_name = "JSON|-")]
    pub arguments: Option<String>,
    #[command(flatten)]
    pub batch: BatchArgs,
}

/// Where live output left each stream: whether a newline is owed before the status line.
#[derive(Default)]
struct Streamed {
    any: bool,
    stdout_open_line: bool,
    stderr_open_line: bool,
}

pub async fn call(args: CallArgs) -> anyhow::Result<Outcome> {
    let arguments = read_arguments(args.arguments.as_deref())?;
    let call_id = format!("call_{}", std::process::id());
    let calls = vec![ToolCall::new(
        call_id,
        args.tool.clone(),
        Value::Object(arguments),
    )];
    let json = args.batch.json;
    let mut streamed = Streamed::default();
    let result = run_batch(&args.batch, "toold call", calls, |event| {
        match (event, json) {
            (Event::Output(output), false) => {
                write_live(&mut streamed, output.body.stream, &output.body.data);
            }
            // An MCP server's progress, as `toold exec` shows it: one line on stderr each.
            (Event::Progress(_), false) => {
                if let Some(line) = render::event_line(event) {
                    let _ = writeln!(std::io::stderr(), "{}", line.trim_start());
                }
            }
            _ => {}
        }
    })
    .await?;
    let Some(outcome) = result.results.into_iter().next() else {
        bail!("the daemon answered without a result for the call; this is a bug in toold");
    };
    if json {
        let result = render::compact_json(&serde_json::to_value(&outcome.result)?);
        render::print_out(&format!("{result}\n"));
    } else {
        print_for_people(&outcome.result, outcome.elapsed_ms, &streamed);
    }
    Ok(if outcome.result.ok {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// The arguments: absent → `{}`, `-` → stdin, else the text; a JSON object either way.
pub fn read_arguments(given: Option<&str>) -> anyhow::Result<Map<String, Value>> {
    let text = match given {
        None => return Ok(Map::new()),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the arguments from stdin")?;
            text
        }
        Some(text) => text.to_owned(),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(other) => bail!(
            "the arguments must be a JSON object such as '{{\"path\":\"README.md\"}}', not {}",
            toold_client::protocol::tool::json_kind(&other)
        ),
        Err(error) => bail!(
            "the arguments are not valid JSON ({error}); give an object such as \
             '{{\"path\":\"README.md\"}}'"
        ),
    }
}

fn write_live(streamed: &mut Streamed, stream: OutputStream, data: &str) {
    if data.is_empty() {
        return;
    }
    streamed.any = true;
    let open_line = !data.ends_with('\n');
    // A closed stdout or stderr only loses the live copy: the result still comes.
    match stream {
        OutputStream::Stdout => {
            write_shown(&mut std::io::stdout().lock(), data);
            streamed.stdout_open_line = open_line;
        }
        OutputStream::Stderr => {
            write_shown(&mut std::io::stderr().lock(), data);
            streamed.stderr_open_line = open_line;
        }
    }
}

/// `text` made visible on a terminal, byte for byte elsewhere, flushed.
fn write_shown(destination: &mut (impl Write + IsTerminal), text: &str) {
    let shown = if destination.is_terminal() {
        visible::block(text)
    } else {
        text.into()
    };
    let _ = destination
        .write_all(shown.as_bytes())
        .and_then(|()| destination.flush());
}

fn print_for_people(result: &ToolResult, elapsed_ms: u64, streamed: &Streamed) {
    let mut stdout = std::io::stdout().lock();
    let stdout_is_terminal = stdout.is_terminal();
    if !streamed.any && !result.content.is_empty() {
        write_shown(&mut stdout, &result.content);
        // A terminal gets its line ended; a pipe gets the content byte for byte.
        if stdout_is_terminal && !result.content.ends_with('\n') {
            let _ = writeln!(stdout);
        }
    } else if streamed.stdout_open_line && stdout_is_terminal {
        let _ = writeln!(stdout);
    }
    let _ = stdout.flush();
    let mut stderr = std::io::stderr().lock();
    if streamed.stderr_open_line {
        let _ = writeln!(stderr);
    }
    let _ = writeln!(stderr, "{}", render::status_line(result, elapsed_ms));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        assert_eq!(read_arguments(None).unwrap(), Map::new());
        let parsed = read_arguments(Some(r#"{"path":"a"}"#)).unwrap();
        assert_eq!(parsed["path"], "a");
        let not_object = read_arguments(Some("[1]")).unwrap_err().to_string();
        assert!(not_object.contains("not an array"), "{not_object}");
        let bad = read_arguments(Some("{path")).unwrap_err().to_string();
        assert!(bad.contains("not valid JSON"), "{bad}");
    }
}
