//! `toold exec [FILE|-]`: a batch of calls from JSON, with its events printed as they arrive
//! (for people one line each, made visible, with `--json` one JSON object each), then the
//! results.

use std::collections::HashSet;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};
use toold_client::protocol::{Event, ExecuteResult, ToolCall};

use super::Outcome;
use super::batch_run::{BatchArgs, run_batch};
use super::render;
use super::visible;

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// A JSON file with the calls, a list of `{"id"?, "name", "arguments"}` (or an object with
    /// such a list as `calls`); `-` reads stdin [default: -].
    #[arg(value_name = "FILE|-")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub batch: BatchArgs,
}

/// One call as the file gives it; the id is generated when absent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCall {
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum BatchFile {
    Calls(Vec<FileCall>),
    Object { calls: Vec<FileCall> },
}

pub async fn exec(args: ExecArgs) -> anyhow::Result<Outcome> {
    let (text, source) = read_input(args.file.as_ref())?;
    let calls = parse_calls(&text).with_context(|| format!("cannot read the calls in {source}"))?;
    let json = args.batch.json;
    // Calls whose output was streamed: their content is not printed again.
    let mut streamed: HashSet<String> = HashSet::new();
    let result = run_batch(&args.batch, "toold exec", calls, |event| {
        if json {
            print_line(&render::compact_json(&json!({
                "method": event.method(),
                "params": event.params().unwrap_or(Value::Null),
            })));
        } else {
            print_event_for_people(event, &mut streamed);
        }
    })
    .await?;
    if json {
        print_line(&render::compact_json(&serde_json::to_value(&result)?));
    } else {
        print_summary(&result);
    }
    let all_ok = result.results.iter().all(|outcome| outcome.result.ok);
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

fn read_input(file: Option<&PathBuf>) -> anyhow::Result<(String, String)> {
    let mut text = String::new();
    match file {
        Some(path) if path.as_os_str() != "-" => {
            text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the calls from {}", path.display()))?;
            Ok((text, path.display().to_string()))
        }
        _ => {
            if std::io::stdin().is_terminal() {
                eprintln!("toold: reading the calls from stdin; end them with Ctrl-D");
            }
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read the calls from stdin")?;
            Ok((text, "stdin".to_owned()))
        }
    }
}

/// The calls, with ids `call_1`, `call_2`, … given to those without one (skipping ids the
/// file already uses).
fn parse_calls(text: &str) -> anyhow::Result<Vec<ToolCall>> {
    let file: BatchFile = serde_json::from_str(text).context(
        "expected a JSON list of calls such as \
         [{\"name\":\"read_file\",\"arguments\":{\"path\":\"README.md\"}}]",
    )?;
    let (BatchFile::Calls(calls) | BatchFile::Object { calls }) = file;
    if calls.is_empty() {
        bail!("the list of calls is empty; give at least one");
    }
    let taken: HashSet<String> = calls.iter().filter_map(|call| call.id.clone()).collect();
    let mut next = 0;
    let mut fresh_id = || loop {
        next += 1;
        let id = format!("call_{next}");
        if !taken.contains(&id) {
            return id;
        }
    };
    Ok(calls
        .into_iter()
        .map(|call| {
            let id = call.id.unwrap_or_else(&mut fresh_id);
            let arguments = match call.arguments {
                Value::Null => json!({}),
                given => given,
            };
            ToolCall::new(id, call.name, arguments)
        })
        .collect())
}

fn print_line(line: &str) {
    render::print_out(&format!("{line}\n"));
}

fn print_event_for_people(event: &Event, streamed: &mut HashSet<String>) {
    match event {
        Event::Output(output) => {
            streamed.insert(output.body.call_id.clone());
            let stream = render::stream_name(output.body.stream);
            let call_id = visible::line(&output.body.call_id);
            for line in output.body.data.lines() {
                print_line(&format!("  {call_id} {stream}: {}", visible::block(line)));
            }
        }
        Event::Result(ended) => {
            if let Some(line) = render::event_line(event) {
                print_line(&line);
            }
            if !streamed.contains(&ended.body.call_id) {
                for line in ended.body.result.content.lines() {
                    print_line(&format!("    {}", visible::block(line)));
                }
            }
        }
        other => {
            if let Some(line) = render::event_line(other) {
                print_line(&line);
            }
        }
    }
}

fn print_summary(result: &ExecuteResult) {
    let ok = result
        .results
        .iter()
        .filter(|outcome| outcome.result.ok)
        .count();
    let failed = result.results.len() - ok;
    print_line(&format!(
        "{} call(s): {ok} ok, {failed} failed",
        result.results.len()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_generated_around_given_ones() {
        let calls = parse_calls(
            r#"[{"name":"read_file","arguments":{"path":"a"}},
                {"id":"call_2","name":"find_files","arguments":"{\"pattern\":\"*\"}"},
                {"name":"search_code"}]"#,
        )
        .unwrap();
        let ids: Vec<&str> = calls.iter().map(|call| call.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2", "call_3"]);
        assert_eq!(calls[1].arguments, json!("{\"pattern\":\"*\"}"));
        assert_eq!(calls[2].arguments, json!({}));
    }

    #[test]
    fn an_object_with_calls_is_accepted_and_bad_input_is_explained() {
        let calls = parse_calls(r#"{"calls":[{"name":"read_file"}]}"#).unwrap();
        assert_eq!(calls.len(), 1);
        let empty = parse_calls("[]").unwrap_err().to_string();
        assert!(empty.contains("empty"), "{empty}");
        let wrong = format!("{:#}", parse_calls(r#"[{"tool":"x"}]"#).unwrap_err());
        assert!(wrong.contains("expected a JSON list of calls"), "{wrong}");
    }
}
