//! An MCP server's tool in the registry: a call sent to the server as `tools/call` (under the
//! server's own name for the tool), its result mapped to toold's (text joined as `content`,
//! other parts described there and kept whole in `metadata.mcp_content`, `structuredContent` as
//! `metadata.structured`, `isError` and JSON-RPC errors as `tool_error`), and a call whose
//! server exits ended at once, quoting the server's stderr.

use std::borrow::Cow;
use std::sync::Weak;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use toold_protocol::{ErrorType, ToolDefinition};

use super::client::{CallError, Reachable};
use super::listing::ListedTool;
use crate::secrets::Secrets;
use crate::tools::{Tool, ToolContext, ToolFailure, ToolFuture, ToolSuccess};

/// What a tool needs of its server; the server's supervisor provides it.
pub(crate) trait ToolServer: Send + Sync {
    fn name(&self) -> &str;
    /// The live session, or why there is none.
    fn reachable(&self) -> Result<Reachable, String>;
    /// The last lines of the server's stderr, for an error to quote, once it has been read to
    /// its end (a server that just exited may have written its last words a moment before).
    fn stderr_tail(&self) -> BoxFuture<'_, String>;
}

/// One tool of one server. The server is held weakly: a tool left in a registry never keeps
/// its server alive.
pub(crate) struct McpTool {
    server: Weak<dyn ToolServer>,
    listed: ListedTool,
}

impl McpTool {
    pub(crate) fn new(server: Weak<dyn ToolServer>, listed: ListedTool) -> Self {
        Self { server, listed }
    }
}

impl Tool for McpTool {
    fn definition(&self) -> ToolDefinition {
        self.listed.definition.clone()
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        let server = self.server.clone();
        let name = self.listed.server_name.clone();
        Box::pin(async move {
            let server = server.upgrade().ok_or_else(|| {
                ToolFailure::new(ErrorType::InternalError, "the MCP server was removed")
            })?;
            let reachable = server
                .reachable()
                .map_err(|reason| ToolFailure::new(ErrorType::InternalError, reason))?;
            let answer = tokio::select! {
                answer = reachable.session.call(&name, args, &ctx) => answer,
                () = reachable.ended.cancelled() => Err(CallError::Closed("it exited".to_owned())),
            };
            match answer {
                Ok(result) => output(&result),
                Err(CallError::Stopped) => Err(ToolFailure::new(
                    ErrorType::Canceled,
                    "the call was stopped; the MCP server was told",
                )),
                Err(CallError::Server(message)) => Err(ToolFailure::new(
                    ErrorType::ToolError,
                    crate::secrets::redact(&message),
                )),
                Err(CallError::Closed(why)) => Err(ToolFailure::new(
                    ErrorType::InternalError,
                    crate::secrets::redact(&format!(
                        "the MCP server {:?} ended during the call ({why}); {}",
                        server.name(),
                        server.stderr_tail().await
                    )),
                )),
            }
        })
    }
}

/// A tool of a lazy server that has not started, as `permissions/explain` judges a call of it
/// without starting the server: named as the call names it, of the server's source, changing
/// things (the annotations that could say otherwise come with the listing), taking any object.
pub(crate) struct NotStarted {
    definition: ToolDefinition,
}

impl NotStarted {
    pub(crate) fn new(server: &super::McpServerConfig, tool: &str) -> Self {
        Self {
            definition: ToolDefinition {
                name: tool.to_owned(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
                safety: toold_protocol::Safety::SideEffect,
                system: false,
                timeout_ms: u64::try_from(server.tool_timeout.as_millis()).ok(),
                source: toold_protocol::ToolSource::Mcp(server.name.clone()),
            },
        }
    }
}

impl Tool for NotStarted {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn run(&self, _args: Map<String, Value>, _ctx: ToolContext) -> ToolFuture {
        let server = match &self.definition.source {
            toold_protocol::ToolSource::Mcp(server) => server.clone(),
            _ => String::new(),
        };
        Box::pin(async move {
            Err(ToolFailure::new(
                ErrorType::InternalError,
                format!("the MCP server {server:?} has not started"),
            ))
        })
    }
}

/// The server's `CallToolResult` (as JSON text) as toold's output or failure. Most answers
/// are text parts alone, and are read as such without building a tree of the answer; any
/// other shape (another kind of part, a member of an unexpected type) is read as a whole
/// `Value` and mapped leniently.
///
/// Every configured secret in the answer's text (its parts, its structured content, any
/// string in it, read unescaped) is redacted ([`crate::secrets`]).
fn output(result: &RawValue) -> Result<ToolSuccess, ToolFailure> {
    let secrets = crate::secrets::current();
    match serde_json::from_str::<TextAnswer<'_>>(result.get()) {
        Ok(answer) if answer.content.iter().all(|part| part.kind == "text") => {
            text_output(answer, &secrets)
        }
        _ => {
            let mut answer = readable(result)?;
            redact_strings(&mut answer, &secrets);
            output_of_value(&answer)
        }
    }
}

/// Every string in `value` (not its object keys) with the secrets redacted.
fn redact_strings(value: &mut Value, secrets: &Secrets) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(redacted) = secrets.redact(text) {
                *text = redacted;
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| redact_strings(item, secrets)),
        Value::Object(members) => members
            .values_mut()
            .for_each(|member| redact_strings(member, secrets)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// JSON text of the answer as a `Value`. The text was checked as JSON when it came, but that
/// check sets no limit on nesting and a `Value` read does (128 levels): what it refuses is an
/// answer toold cannot map, and the call fails rather than losing it.
fn readable(text: &RawValue) -> Result<Value, ToolFailure> {
    serde_json::from_str(text.get()).map_err(|err| {
        ToolFailure::new(
            ErrorType::ToolError,
            format!("the MCP server sent an unreadable result: {err}"),
        )
    })
}

/// A `CallToolResult` whose content is a list of parts with a `type` and a `text`.
#[derive(Deserialize)]
struct TextAnswer<'a> {
    #[serde(borrow)]
    content: Vec<TextPart<'a>>,
    #[serde(default, rename = "isError")]
    is_error: Option<bool>,
    /// Present (even as `null`) or not, as [`output_of_value`] sees it.
    #[serde(
        default,
        borrow,
        rename = "structuredContent",
        deserialize_with = "present"
    )]
    structured: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct TextPart<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: Cow<'a, str>,
}

fn present<'de, D: Deserializer<'de>>(member: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(member).map(Some)
}

/// [`output_of_value`] for an answer of text parts alone.
fn text_output(answer: TextAnswer<'_>, secrets: &Secrets) -> Result<ToolSuccess, ToolFailure> {
    let content = match <[TextPart<'_>; 1]>::try_from(answer.content) {
        Ok([part]) => part.text.into_owned(),
        Err(parts) => parts
            .iter()
            .map(|part| &*part.text)
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let content = match secrets.redact(&content) {
        Cow::Borrowed(_) => content,
        Cow::Owned(redacted) => redacted,
    };
    if answer.is_error == Some(true) {
        return Err(failed(content));
    }
    let mut output = ToolSuccess::new(content);
    if let Some(structured) = answer.structured {
        let mut structured = readable(structured)?;
        redact_strings(&mut structured, secrets);
        output = output.with_meta("structured", structured);
    }
    Ok(output)
}

/// The failure of an answer with `isError`: its content, which is also the message unless
/// empty.
fn failed(content: String) -> ToolFailure {
    let message = if content.is_empty() {
        "the tool reported an error".to_owned()
    } else {
        content.clone()
    };
    ToolFailure::new(ErrorType::ToolError, message).with_content(content)
}

/// The server's `CallToolResult`, of any shape, as toold's output or failure.
fn output_of_value(result: &Value) -> Result<ToolSuccess, ToolFailure> {
    let parts = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut texts = Vec::new();
    let mut other_parts = false;
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(
                part.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            kind => {
                other_parts = true;
                texts.push(describe(kind.unwrap_or("unknown"), part));
            }
        }
    }
    let content = texts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let failure = failed(content);
        return Err(if other_parts {
            failure.with_meta("mcp_content", Value::Array(parts.to_vec()))
        } else {
            failure
        });
    }
    let mut output = ToolSuccess::new(content);
    if other_parts {
        output = output.with_meta("mcp_content", Value::Array(parts.to_vec()));
    }
    if let Some(structured) = result.get("structuredContent") {
        output = output.with_meta("structured", structured.clone());
    }
    Ok(output)
}

/// `[image: image/png, 1234 bytes]`: a part that is not text, in a line of the content.
fn describe(kind: &str, part: &Value) -> String {
    let mime = part
        .get("mimeType")
        .or_else(|| {
            part.get("resource")
                .and_then(|resource| resource.get("mimeType"))
        })
        .and_then(Value::as_str);
    let size = part
        .get("data")
        .and_then(Value::as_str)
        .map(|data| data.len() / 4 * 3);
    match (mime, size) {
        (Some(mime), Some(bytes)) => format!("[{kind}: {mime}, {bytes} bytes]"),
        (Some(mime), None) => format!("[{kind}: {mime}]"),
        (None, _) => format!("[{kind}]"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The mapping of an answer, as the server would write it.
    fn output(result: Value) -> Result<ToolSuccess, ToolFailure> {
        super::output(&serde_json::value::to_raw_value(&result).unwrap())
    }

    #[test]
    fn results_map_as_section_a_says() {
        let text = output(
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        )
        .unwrap();
        assert_eq!(text.content, "a\nb");
        assert!(text.metadata.is_empty());

        let mixed = output(json!({
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"}
            ],
            "structuredContent": {"n": 1}
        }))
        .unwrap();
        assert_eq!(mixed.content, "see\n[image: image/png, 3 bytes]");
        assert_eq!(mixed.metadata["structured"], json!({"n": 1}));
        assert_eq!(mixed.metadata["mcp_content"][1]["type"], "image");

        let failed =
            output(json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}))
                .unwrap_err();
        assert_eq!(failed.error_type, ErrorType::ToolError);
        assert_eq!(failed.message, "no such file");
        let bare = output(json!({"isError": true})).unwrap_err();
        assert_eq!(bare.message, "the tool reported an error");
    }

    #[test]
    fn an_answer_too_deep_to_read_fails_its_call_in_either_reading() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let answers = [
            format!(r#"{{"content":[{{"type":"text","text":"t"}}],"structuredContent":{deep}}}"#),
            format!(r#"{{"content":[{{"type":"image","data":{deep}}}]}}"#),
        ];
        for answer in answers {
            let text = RawValue::from_string(answer).unwrap();
            let failure = super::output(&text).unwrap_err();
            assert_eq!(failure.error_type, ErrorType::ToolError);
            assert!(
                failure.message.contains("an unreadable result"),
                "{}",
                failure.message
            );
        }
    }

    #[test]
    fn answers_of_text_parts_map_as_any_other_shape_does() {
        let answers = [
            json!({"content": [{"type": "text", "text": "Echo: hi"}]}),
            json!({"content": [{"type": "text", "text": "a\\\"b"}, {"type": "text", "text": ""}]}),
            json!({"content": [], "isError": false}),
            json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
            json!({"content": [{"type": "text", "text": "n"}], "structuredContent": {"n": 1}}),
            json!({"content": [{"type": "text", "text": "n"}], "structuredContent": null}),
            json!({"content": [{"type": "text", "text": "x", "annotations": {"priority": 1}}]}),
            // Shapes the text-only reading refuses, mapped from the whole value instead.
            json!({"content": [{"type": "text", "text": 5}]}),
            json!({"content": {"type": "text"}, "isError": "yes"}),
            json!({"isError": true}),
            json!(7),
        ];
        for answer in answers {
            let text = serde_json::value::to_raw_value(&answer).unwrap();
            let read = |mapped: Result<ToolSuccess, ToolFailure>| match mapped {
                Ok(output) => Ok((output.content, output.metadata)),
                Err(failure) => Err((failure.error_type, failure.message, failure.content)),
            };
            assert_eq!(
                read(super::output(&text)),
                read(output_of_value(&answer)),
                "{answer}"
            );
        }
    }
}
