//! Tool definitions, calls and results (docs/protocol.md sections 4 and 6).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Whether a tool only reads (and may run concurrently) or changes something.
///
/// Declared by whoever registered the tool, never taken from a model or a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Safety {
    ReadOnly,
    SideEffect,
}

/// Who provides a tool's implementation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    /// Built into the daemon.
    Builtin,
    /// Registered by a connection and executed through `tool/invoke`.
    Client,
    /// A tool of the MCP server the config names so: `{"mcp": "fs"}` (docs/protocol.md section 11.9).
    Mcp(String),
}

/// `builtin`, `client`, or `mcp:SERVER`, as tables show a tool's source.
impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolSource::Builtin => f.write_str("builtin"),
            ToolSource::Client => f.write_str("client"),
            ToolSource::Mcp(server) => write!(f, "mcp:{server}"),
        }
    }
}

/// A tool definition as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefinition {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema for the arguments; compiled once, when the tool is registered.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    pub safety: Safety,
    /// Control-plane tools: always visible, never filtered by name lists or rules.
    #[serde(default)]
    pub system: bool,
    /// Overrides the session's timeout for this tool.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default = "client_source")]
    pub source: ToolSource,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

fn client_source() -> ToolSource {
    ToolSource::Client
}

/// One tool call as a model emitted it.
///
/// `arguments` stays a raw [`Value`] here: providers send an object or a string
/// holding JSON, and anything else must become an `invalid_arguments` result for
/// this call, never a rejected request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl ToolCall {
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    /// The arguments as a JSON object, decoding a JSON string first.
    ///
    /// A missing or `null` argument value, and an empty string, count as `{}`:
    /// providers send both for tools without parameters.
    pub fn arguments_object(&self) -> Result<Map<String, Value>, String> {
        match &self.arguments {
            Value::Object(map) => Ok(map.clone()),
            Value::Null => Ok(Map::new()),
            Value::String(text) if text.trim().is_empty() => Ok(Map::new()),
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => Ok(map),
                Ok(other) => Err(format!(
                    "arguments must be a JSON object, got {}",
                    json_kind(&other)
                )),
                Err(err) => Err(format!("arguments are not valid JSON: {err}")),
            },
            other => Err(format!(
                "arguments must be a JSON object or a string holding one, got {}",
                json_kind(other)
            )),
        }
    }
}

/// The JSON type name of a value, for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Why a call failed. Serializes to the exact snake_case strings of docs/protocol.md
/// section 6; any other string (a client tool's own error type) is kept as is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ErrorType {
    UnknownTool,
    ToolNotAllowed,
    InvalidArguments,
    HookBlocked,
    PermissionDenied,
    PermissionCanceled,
    Canceled,
    Timeout,
    InternalError,
    NotFound,
    NotUnique,
    CommandFailed,
    IoError,
    /// `read_file` or `edit_file` was given a directory.
    IsDirectory,
    /// `read_file` or `edit_file` was given a file that is not text.
    BinaryFile,
    /// `run_command` did not run: the sandbox its session asks for cannot be enforced here
    /// and the config says `on_unsupported = "refuse"`.
    SandboxUnavailable,
    /// An MCP server's tool reported a failure (`isError`, or a JSON-RPC error from the
    /// server); the message is the server's.
    ToolError,
    /// An error type this crate does not know, such as one a client tool returned.
    Other(String),
}

impl ErrorType {
    pub fn as_str(&self) -> &str {
        match self {
            ErrorType::UnknownTool => "unknown_tool",
            ErrorType::ToolNotAllowed => "tool_not_allowed",
            ErrorType::InvalidArguments => "invalid_arguments",
            ErrorType::HookBlocked => "hook_blocked",
            ErrorType::PermissionDenied => "permission_denied",
            ErrorType::PermissionCanceled => "permission_canceled",
            ErrorType::Canceled => "canceled",
            ErrorType::Timeout => "timeout",
            ErrorType::InternalError => "internal_error",
            ErrorType::NotFound => "not_found",
            ErrorType::NotUnique => "not_unique",
            ErrorType::CommandFailed => "command_failed",
            ErrorType::IoError => "io_error",
            ErrorType::IsDirectory => "is_directory",
            ErrorType::BinaryFile => "binary_file",
            ErrorType::SandboxUnavailable => "sandbox_unavailable",
            ErrorType::ToolError => "tool_error",
            ErrorType::Other(other) => other,
        }
    }
}

impl FromStr for ErrorType {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "unknown_tool" => ErrorType::UnknownTool,
            "tool_not_allowed" => ErrorType::ToolNotAllowed,
            "invalid_arguments" => ErrorType::InvalidArguments,
            "hook_blocked" => ErrorType::HookBlocked,
            "permission_denied" => ErrorType::PermissionDenied,
            "permission_canceled" => ErrorType::PermissionCanceled,
            "canceled" => ErrorType::Canceled,
            "timeout" => ErrorType::Timeout,
            "internal_error" => ErrorType::InternalError,
            "not_found" => ErrorType::NotFound,
            "not_unique" => ErrorType::NotUnique,
            "command_failed" => ErrorType::CommandFailed,
            "io_error" => ErrorType::IoError,
            "is_directory" => ErrorType::IsDirectory,
            "binary_file" => ErrorType::BinaryFile,
            "sandbox_unavailable" => ErrorType::SandboxUnavailable,
            "tool_error" => ErrorType::ToolError,
            other => ErrorType::Other(other.to_owned()),
        })
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(text.parse().unwrap_or_else(|never| match never {}))
    }
}

/// The one shape every call ends in, success or failure (docs/protocol.md section 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub ok: bool,
    pub tool: String,
    #[serde(default)]
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Always holds `call_id`; tools add their own fields.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl ToolResult {
    /// A successful result with `content`.
    pub fn success(tool: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            ok: true,
            tool: tool.into(),
            content: content.into(),
            error_type: None,
            error: None,
            metadata: Map::new(),
        }
    }

    /// A failed result: `error_type` says what kind, `error` says what to do about it.
    pub fn failure(
        tool: impl Into<String>,
        error_type: ErrorType,
        error: impl Into<String>,
    ) -> Self {
        Self {
            ok: false,
            tool: tool.into(),
            content: String::new(),
            error_type: Some(error_type),
            error: Some(error.into()),
            metadata: Map::new(),
        }
    }

    /// Adds one metadata field.
    pub fn with_meta(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    /// Replaces the content.
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = content.into();
        self
    }

    /// The call id this result answers, from `metadata.call_id`.
    pub fn call_id(&self) -> Option<&str> {
        self.metadata.get("call_id").and_then(Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn error_types_serialize_to_the_protocol_strings() {
        let all = [
            (ErrorType::UnknownTool, "unknown_tool"),
            (ErrorType::ToolNotAllowed, "tool_not_allowed"),
            (ErrorType::InvalidArguments, "invalid_arguments"),
            (ErrorType::HookBlocked, "hook_blocked"),
            (ErrorType::PermissionDenied, "permission_denied"),
            (ErrorType::PermissionCanceled, "permission_canceled"),
            (ErrorType::Canceled, "canceled"),
            (ErrorType::Timeout, "timeout"),
            (ErrorType::InternalError, "internal_error"),
            (ErrorType::NotFound, "not_found"),
            (ErrorType::NotUnique, "not_unique"),
            (ErrorType::CommandFailed, "command_failed"),
            (ErrorType::IoError, "io_error"),
            (ErrorType::IsDirectory, "is_directory"),
            (ErrorType::BinaryFile, "binary_file"),
            (ErrorType::Other("quota_exceeded".into()), "quota_exceeded"),
        ];
        for (error_type, text) in all {
            assert_eq!(serde_json::to_value(&error_type).unwrap(), json!(text));
            assert_eq!(
                serde_json::from_value::<ErrorType>(json!(text)).unwrap(),
                error_type
            );
        }
    }

    #[test]
    fn result_round_trips_the_protocol_example() {
        let text = r#"{"ok":false,"tool":"edit_file","content":"","error_type":"not_unique",
            "error":"old_string matches 3 places","metadata":{"call_id":"call_c","matches":3}}"#;
        let result: ToolResult = serde_json::from_str(text).unwrap();
        assert_eq!(result.error_type, Some(ErrorType::NotUnique));
        assert_eq!(result.call_id(), Some("call_c"));
        let expected = ToolResult::failure(
            "edit_file",
            ErrorType::NotUnique,
            "old_string matches 3 places",
        )
        .with_meta("call_id", "call_c")
        .with_meta("matches", 3);
        assert_eq!(result, expected);
        let back: Value = serde_json::to_value(&result).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn success_omits_error_fields() {
        let result = ToolResult::success("read_file", "hi").with_meta("call_id", "c1");
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            json!({"ok":true,"tool":"read_file","content":"hi","metadata":{"call_id":"c1"}})
        );
    }

    #[test]
    fn definition_round_trips_the_protocol_example() {
        let text = r#"{"name":"read_file","description":"…","input_schema":{"type":"object"},
            "safety":"read_only","system":false,"timeout_ms":null,"source":"builtin"}"#;
        let definition: ToolDefinition = serde_json::from_str(text).unwrap();
        assert_eq!(definition.safety, Safety::ReadOnly);
        assert_eq!(definition.source, ToolSource::Builtin);
        let back = serde_json::to_value(&definition).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn an_mcp_source_names_its_server() {
        let source: ToolSource = serde_json::from_value(json!({"mcp": "fs"})).unwrap();
        assert_eq!(source, ToolSource::Mcp("fs".into()));
        assert_eq!(serde_json::to_value(&source).unwrap(), json!({"mcp": "fs"}));
        assert_eq!(
            serde_json::to_value(ToolSource::Client).unwrap(),
            json!("client")
        );
        assert_eq!(source.to_string(), "mcp:fs");
        assert_eq!(
            "tool_error".parse::<ErrorType>().unwrap(),
            ErrorType::ToolError
        );
        assert_eq!(ErrorType::ToolError.as_str(), "tool_error");
    }

    #[test]
    fn call_arguments_as_object_or_json_string() {
        let object: ToolCall = serde_json::from_value(
            json!({"id":"call_a","name":"read_file","arguments":{"path":"A"}}),
        )
        .unwrap();
        let string: ToolCall = serde_json::from_value(
            json!({"id":"call_b","name":"search_code","arguments":"{\"pattern\":\"fn main\"}"}),
        )
        .unwrap();
        assert_eq!(
            object.arguments_object().unwrap(),
            json!({"path":"A"}).as_object().unwrap().clone()
        );
        assert_eq!(
            string.arguments_object().unwrap(),
            json!({"pattern":"fn main"}).as_object().unwrap().clone()
        );
        let missing: ToolCall = serde_json::from_value(json!({"id":"c","name":"t"})).unwrap();
        assert!(missing.arguments_object().unwrap().is_empty());
    }

    #[test]
    fn call_arguments_that_are_not_an_object_are_explained() {
        let bad_json = ToolCall::new("c", "t", json!("{\"path\":"));
        assert!(
            bad_json
                .arguments_object()
                .unwrap_err()
                .contains("not valid JSON")
        );
        let array = ToolCall::new("c", "t", json!([1]));
        assert!(array.arguments_object().unwrap_err().contains("an array"));
        let string_array = ToolCall::new("c", "t", json!("[1]"));
        assert!(
            string_array
                .arguments_object()
                .unwrap_err()
                .contains("an array")
        );
    }
}
