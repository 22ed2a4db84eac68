//! The JSON-RPC 2.0 envelope: ids, requests, notifications, responses, error objects and codes.
//!
//! Both peers send all three kinds of message, so [`Message::from_value`] classifies an
//! incoming object by the presence of `method` (never by its id: both sides number from 1).
//! [`Incoming::from_raw`] classifies one from its text the same way, leaving a request's
//! params as the text they came as.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// JSON-RPC error codes used by toold (docs/protocol.md section 6).
pub mod error_code {
    /// Invalid JSON or UTF-8.
    pub const PARSE_ERROR: i32 = -32700;
    /// A well-formed message that is not a JSON-RPC request, or one over `max_message_bytes`.
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// A request other than `initialize` arrived before `initialize`.
    pub const NOT_INITIALIZED: i32 = -32002;
    pub const UNKNOWN_SESSION: i32 = -32004;
    /// The daemon is at a limit (connections, queued work) and refuses for now.
    pub const OVERLOADED: i32 = -32001;
    /// A client's answer to `approval/request`: it will not decide this approval (it has
    /// nobody to ask, or the batch is not its own) and leaves it to the session's other
    /// approvers. The error's message says why.
    pub const DECLINED: i32 = -32005;
}

/// The `"jsonrpc":"2.0"` member; any other value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Version;

impl Version {
    pub const TEXT: &'static str = "2.0";
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(Self::TEXT)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == Self::TEXT {
            Ok(Version)
        } else {
            Err(de::Error::custom(format!(
                "jsonrpc must be \"2.0\", got {text:?}"
            )))
        }
    }
}

/// A request id: an integer, a string, or `null` (only in error responses to
/// messages whose id could not be read).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    Number(i64),
    String(String),
    Null,
}

impl Id {
    /// Reads an id from its JSON value, explaining what is wrong with a bad one.
    pub fn from_value(value: &Value) -> Result<Id, String> {
        match value {
            Value::Null => Ok(Id::Null),
            Value::String(text) => Ok(Id::String(text.clone())),
            Value::Number(number) => number.as_i64().map(Id::Number).ok_or_else(|| {
                format!("id must be an integer within 64 bits, a string or null, got {number}")
            }),
            other => Err(format!(
                "id must be an integer, a string or null, got {}",
                crate::tool::json_kind(other)
            )),
        }
    }
}

impl From<i64> for Id {
    fn from(number: i64) -> Self {
        Id::Number(number)
    }
}

impl From<String> for Id {
    fn from(text: String) -> Self {
        Id::String(text)
    }
}

impl From<&str> for Id {
    fn from(text: &str) -> Self {
        Id::String(text.to_owned())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Number(number) => write!(f, "{number}"),
            Id::String(text) => write!(f, "{text:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Number(number) => serializer.serialize_i64(*number),
            Id::String(text) => serializer.serialize_str(text),
            Id::Null => serializer.serialize_unit(),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Id::from_value(&value).map_err(de::Error::custom)
    }
}

/// A request: it has an `id` and expects exactly one response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: Version,
    pub id: Id,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Request {
    pub fn new(id: impl Into<Id>, method: impl Into<String>, params: Option<Value>) -> Self {
        Self {
            jsonrpc: Version,
            id: id.into(),
            method: method.into(),
            params,
        }
    }
}

/// A request as it came, its params still JSON text: a handler that reads them into types of
/// its own reads them from the text, never through a `Value`.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub id: Id,
    pub method: String,
    /// An object or an array; `None` when absent or `null`.
    pub params: Option<Box<RawValue>>,
}

impl RawRequest {
    /// The request with its params read as a `Value`.
    pub fn into_request(self) -> Request {
        // The text was read as JSON on its way in; reading it again cannot fail.
        let params = self
            .params
            .map(|params| serde_json::from_str(params.get()).unwrap_or(Value::Null));
        Request::new(self.id, self.method, params)
    }
}

impl From<Request> for RawRequest {
    fn from(request: Request) -> Self {
        Self {
            id: request.id,
            method: request.method,
            // A `Value` always renders.
            params: request
                .params
                .and_then(|params| serde_json::value::to_raw_value(&params).ok()),
        }
    }
}

/// A notification: no `id`, never answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub jsonrpc: Version,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Notification {
    pub fn new(method: impl Into<String>, params: Option<Value>) -> Self {
        Self {
            jsonrpc: Version,
            method: method.into(),
            params,
        }
    }
}

/// The `error` member of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i32,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn parse_error(detail: impl fmt::Display) -> Self {
        Self::new(error_code::PARSE_ERROR, format!("parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            format!("invalid request: {detail}"),
        )
    }

    /// The answer to a message over `max_message_bytes`; the connection is closed after it.
    pub fn too_large(max_message_bytes: usize) -> Self {
        Self::new(
            error_code::INVALID_REQUEST,
            format!(
                "message too large: the limit is {max_message_bytes} bytes (max_message_bytes); \
                 the connection will be closed"
            ),
        )
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            error_code::METHOD_NOT_FOUND,
            format!("unknown method {method:?}"),
        )
    }

    pub fn invalid_params(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INVALID_PARAMS,
            format!("invalid params: {detail}"),
        )
    }

    pub fn internal_error(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::INTERNAL_ERROR,
            format!("internal error: {detail}"),
        )
    }

    pub fn not_initialized(method: &str) -> Self {
        Self::new(
            error_code::NOT_INITIALIZED,
            format!("{method:?} before initialize: send \"initialize\" first on this connection"),
        )
    }

    pub fn unknown_session(session_id: &str) -> Self {
        Self::new(
            error_code::UNKNOWN_SESSION,
            format!(
                "unknown session {session_id:?}: it was closed, expired, or never existed; \
                 see session/list"
            ),
        )
    }

    pub fn overloaded(detail: impl fmt::Display) -> Self {
        Self::new(
            error_code::OVERLOADED,
            format!("overloaded: {detail}; retry later"),
        )
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}

/// A response: the `result` or the `error` of the request with the same `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: Id,
    pub outcome: Result<Value, ErrorObject>,
}

impl Response {
    pub fn success(id: Id, result: Value) -> Self {
        Self {
            id,
            outcome: Ok(result),
        }
    }

    pub fn error(id: Id, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
        }
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("jsonrpc", &Version)?;
        map.serialize_entry("id", &self.id)?;
        match &self.outcome {
            Ok(result) => map.serialize_entry("result", result)?,
            Err(error) => map.serialize_entry("error", error)?,
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Response {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Message::deserialize(deserializer)? {
            Message::Response(response) => Ok(response),
            Message::Request(_) | Message::Notification(_) => Err(de::Error::custom(
                "expected a response, got a message with a method",
            )),
        }
    }
}

/// Any single JSON-RPC message (a batch is a JSON array of these).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// Why a JSON value is not a JSON-RPC message, with the id to answer under (`null`
/// when the id itself could not be read).
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidMessage {
    pub id: Id,
    pub reason: String,
}

impl InvalidMessage {
    fn new(id: Id, reason: impl Into<String>) -> Self {
        Self {
            id,
            reason: reason.into(),
        }
    }

    /// The `-32600` error response this message deserves.
    pub fn to_response(&self) -> Response {
        Response::error(self.id.clone(), ErrorObject::invalid_request(&self.reason))
    }
}

impl fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for InvalidMessage {}

impl Message {
    /// Classifies one JSON value: with `method` it is a request (with `id`) or a
    /// notification (without); without, a response. Unknown members are ignored, and
    /// `"params": null` counts as no params, as most JSON-RPC peers treat them.
    pub fn from_value(value: Value) -> Result<Message, InvalidMessage> {
        let Value::Object(mut object) = value else {
            return Err(InvalidMessage::new(
                Id::Null,
                format!(
                    "a message must be a JSON object, got {}",
                    crate::tool::json_kind(&value)
                ),
            ));
        };
        let id = match object.get("id") {
            Some(raw) => {
                Some(Id::from_value(raw).map_err(|why| InvalidMessage::new(Id::Null, why))?)
            }
            None => None,
        };
        let answer_id = id.clone().unwrap_or(Id::Null);
        match object.get("jsonrpc") {
            Some(Value::String(text)) if text == Version::TEXT => {}
            Some(other) => {
                return Err(InvalidMessage::new(
                    answer_id,
                    format!("jsonrpc must be \"2.0\", got {other}"),
                ));
            }
            None => {
                return Err(InvalidMessage::new(
                    answer_id,
                    "missing \"jsonrpc\":\"2.0\"",
                ));
            }
        }
        match object.remove("method") {
            Some(Value::String(method)) => {
                let params = take_params(&mut object)
                    .map_err(|why| InvalidMessage::new(answer_id.clone(), why))?;
                Ok(match id {
                    Some(id) => Message::Request(Request {
                        jsonrpc: Version,
                        id,
                        method,
                        params,
                    }),
                    None => Message::Notification(Notification {
                        jsonrpc: Version,
                        method,
                        params,
                    }),
                })
            }
            Some(other) => Err(InvalidMessage::new(
                answer_id,
                format!(
                    "method must be a string, got {}",
                    crate::tool::json_kind(&other)
                ),
            )),
            None => response_from_object(object, id),
        }
    }
}

/// A message as the peer's reader takes it: a request with its params still text.
#[derive(Debug, Clone)]
pub enum Incoming {
    Request(RawRequest),
    Notification(Notification),
    Response(Response),
}

impl Incoming {
    /// Classifies one message from its text, as [`Message::from_value`] does. A well-formed
    /// request (an object with `"jsonrpc":"2.0"`, a string `method`, a non-null `id` and params
    /// absent, `null`, an object or an array) is read in one pass without building a `Value`;
    /// anything else (a notification, a response, a malformed message, duplicate members) is
    /// read as a `Value` and classified by [`Message::from_value`], which explains what is wrong.
    pub fn from_raw(text: &RawValue) -> Result<Incoming, InvalidMessage> {
        if let Some(request) = well_formed_request(text) {
            return Ok(Incoming::Request(request));
        }
        let value = serde_json::from_str(text.get())
            .map_err(|err| InvalidMessage::new(Id::Null, format!("not JSON: {err}")))?;
        Ok(match Message::from_value(value)? {
            Message::Request(request) => Incoming::Request(request.into()),
            Message::Notification(notification) => Incoming::Notification(notification),
            Message::Response(response) => Incoming::Response(response),
        })
    }
}

/// A request's members, borrowed from its text; any other member is skipped (and checked to
/// be JSON).
#[derive(Deserialize)]
struct RequestMembers<'a> {
    #[serde(borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

fn well_formed_request(text: &RawValue) -> Option<RawRequest> {
    if !text.get().starts_with('{') {
        return None;
    }
    let members = serde_json::from_str::<RequestMembers<'_>>(text.get()).ok()?;
    if members.jsonrpc.as_deref() != Some(Version::TEXT) {
        return None;
    }
    // Absent or `null` reads as `None`: a notification, or a request whose id is null, both
    // left to the general path.
    let id = serde_json::from_str::<Id>(members.id?.get()).ok()?;
    let params = match members.params {
        None => None,
        Some(params) if params.get().starts_with(['{', '[']) => Some(params.to_owned()),
        Some(_) => return None,
    };
    Some(RawRequest {
        id,
        method: members.method?.into_owned(),
        params,
    })
}

fn take_params(object: &mut Map<String, Value>) -> Result<Option<Value>, String> {
    match object.remove("params") {
        None | Some(Value::Null) => Ok(None),
        Some(params @ (Value::Object(_) | Value::Array(_))) => Ok(Some(params)),
        Some(other) => Err(format!(
            "params must be an object or an array, got {}",
            crate::tool::json_kind(&other)
        )),
    }
}

fn response_from_object(
    mut object: Map<String, Value>,
    id: Option<Id>,
) -> Result<Message, InvalidMessage> {
    let Some(id) = id else {
        return Err(InvalidMessage::new(
            Id::Null,
            "a message needs a method (request or notification) or an id (response)",
        ));
    };
    // Presence, not value: `"result": null` is a valid success.
    match (object.remove("result"), object.remove("error")) {
        (Some(result), None) => Ok(Message::Response(Response::success(id, result))),
        (None, Some(error)) => match serde_json::from_value::<ErrorObject>(error) {
            Ok(error) => Ok(Message::Response(Response::error(id, error))),
            Err(why) => Err(InvalidMessage::new(
                id,
                format!("invalid error object: {why}"),
            )),
        },
        (Some(_), Some(_)) => Err(InvalidMessage::new(
            id,
            "a response has either result or error, not both",
        )),
        (None, None) => Err(InvalidMessage::new(
            id,
            "a message needs a method (request or notification), or result or error (response)",
        )),
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Message::from_value(value).map_err(de::Error::custom)
    }
}

/// The result of `session/detach`, `session/close` and other calls that answer `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn message(value: Value) -> Message {
        Message::from_value(value).unwrap()
    }

    #[test]
    fn request_round_trips() {
        let wire =
            json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}});
        let parsed = message(wire.clone());
        assert_eq!(
            parsed,
            Message::Request(Request::new(
                1,
                "initialize",
                Some(json!({"protocol_version":1}))
            ))
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
    }

    #[test]
    fn notification_has_no_id() {
        let wire = json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"a"}});
        let parsed = message(wire.clone());
        assert!(matches!(parsed, Message::Notification(_)));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
    }

    #[test]
    fn response_with_null_result_is_a_success() {
        let wire = json!({"jsonrpc":"2.0","id":"x","result":null});
        let parsed = message(wire.clone());
        assert_eq!(
            parsed,
            Message::Response(Response::success(Id::from("x"), Value::Null))
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
    }

    #[test]
    fn error_response_round_trips() {
        let wire = json!({"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad","data":{"supported":[1]}}});
        let parsed: Response = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(parsed.id, Id::Null);
        assert_eq!(
            parsed.outcome.as_ref().unwrap_err().code,
            error_code::INVALID_PARAMS
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
    }

    #[test]
    fn params_null_counts_as_absent() {
        let parsed = message(json!({"jsonrpc":"2.0","id":2,"method":"session/list","params":null}));
        assert_eq!(
            parsed,
            Message::Request(Request::new(2, "session/list", None))
        );
    }

    #[test]
    fn invalid_messages_are_explained_with_the_id_to_answer() {
        let cases = [
            (json!([1]), Id::Null, "must be a JSON object"),
            (
                json!({"id":1,"method":"x"}),
                Id::Number(1),
                "missing \"jsonrpc\"",
            ),
            (
                json!({"jsonrpc":"1.0","id":1,"method":"x"}),
                Id::Number(1),
                "must be \"2.0\"",
            ),
            (
                json!({"jsonrpc":"2.0","id":1.5,"method":"x"}),
                Id::Null,
                "id must be an integer",
            ),
            (
                json!({"jsonrpc":"2.0","id":{},"method":"x"}),
                Id::Null,
                "id must be",
            ),
            (
                json!({"jsonrpc":"2.0","id":3,"method":7}),
                Id::Number(3),
                "method must be a string",
            ),
            (
                json!({"jsonrpc":"2.0","id":3,"method":"x","params":1}),
                Id::Number(3),
                "params must be",
            ),
            (
                json!({"jsonrpc":"2.0","result":1}),
                Id::Null,
                "needs a method",
            ),
            (
                json!({"jsonrpc":"2.0","id":4}),
                Id::Number(4),
                "result or error",
            ),
            (
                json!({"jsonrpc":"2.0","id":4,"result":1,"error":{"code":1,"message":"m"}}),
                Id::Number(4),
                "not both",
            ),
            (
                json!({"jsonrpc":"2.0","id":4,"error":{"code":"x"}}),
                Id::Number(4),
                "invalid error object",
            ),
        ];
        for (value, id, reason) in cases {
            let invalid = Message::from_value(value.clone()).unwrap_err();
            assert_eq!(invalid.id, id, "{value}");
            assert!(
                invalid.reason.contains(reason),
                "{value}: {}",
                invalid.reason
            );
            assert_eq!(
                invalid.to_response().outcome.unwrap_err().code,
                error_code::INVALID_REQUEST
            );
        }
    }

    /// What `from_raw` makes of `text`, as a `Message`.
    fn classified_from_text(text: &str) -> Result<Message, InvalidMessage> {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        Ok(match Incoming::from_raw(&raw)? {
            Incoming::Request(request) => Message::Request(request.into_request()),
            Incoming::Notification(notification) => Message::Notification(notification),
            Incoming::Response(response) => Message::Response(response),
        })
    }

    #[test]
    fn a_message_read_from_its_text_is_classified_as_from_its_value() {
        let texts = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/execute","params":{"session_id":"s","calls":[]}}"#,
            r#"  {"params": [1, 2], "method": "m", "id": "a\"b", "jsonrpc": "2.0", "extra": {"x": [null]}}  "#,
            r#"{"jsonrpc":"2.0","id":-3,"method":"session/list"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"session/list","params":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"m","params":{"a":1},"params":{"a":2}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"first","method":"second"}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
            r#"{"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"x","params":1}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"x","params":"{}"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
            r#"[1]"#,
            r#""text""#,
        ];
        for text in texts {
            let from_value = Message::from_value(serde_json::from_str(text).unwrap());
            assert_eq!(classified_from_text(text), from_value, "{text}");
        }
        // The params of a request are passed on as the text they came as.
        let raw: Box<RawValue> = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params": {"b": 1, "a": 2}}"#,
        )
        .unwrap();
        let Ok(Incoming::Request(request)) = Incoming::from_raw(&raw) else {
            panic!("a request");
        };
        assert_eq!(request.params.unwrap().get(), r#"{"b": 1, "a": 2}"#);
    }

    #[test]
    fn empty_serializes_as_an_empty_object() {
        assert_eq!(serde_json::to_value(Empty {}).unwrap(), json!({}));
        assert_eq!(
            serde_json::from_value::<Empty>(json!({})).unwrap(),
            Empty {}
        );
    }

    #[test]
    fn error_codes_match_the_protocol() {
        use error_code::*;
        assert_eq!(
            [
                PARSE_ERROR,
                INVALID_REQUEST,
                METHOD_NOT_FOUND,
                INVALID_PARAMS,
                INTERNAL_ERROR,
                NOT_INITIALIZED,
                UNKNOWN_SESSION,
                OVERLOADED
            ],
            [
                -32700, -32600, -32601, -32602, -32603, -32002, -32004, -32001
            ]
        );
        assert_eq!(ErrorObject::too_large(16).code, -32600);
        assert_eq!(ErrorObject::not_initialized("x").code, -32002);
        assert_eq!(ErrorObject::unknown_session("s").code, -32004);
    }
}
