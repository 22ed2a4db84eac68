//! What an audit record holds: a call's (its decision and who made it, its outcome) and a
//! session change's; arguments digested; a record rendered once, where it happens.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use toold_protocol::RuleSource;

use super::AuditMode;
pub use crate::approval::ApproverIdentity;

/// String values longer than this are recorded as `{sha256, bytes}` in `digest` mode.
pub const DIGEST_OVER_BYTES: usize = 256;

/// The decision on a call and who made it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    /// `rule`, `grant`, `mode`, `hook`, `approver` or `system`.
    pub by: &'static str,
    /// The engine's decision step (docs/protocol.md section 11.11's names).
    pub step: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<RuleSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approver: Option<ApproverIdentity>,
    /// The approver's answer (`allow_once`, `allow_session`, `deny`, `abort`), or why none
    /// came (`timeout`, `no_approver`, `disconnected`, `declined`, `failed`, `canceled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<&'static str>,
}

/// One call, as it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRecord {
    pub kind: &'static str,
    pub ts: String,
    pub session: String,
    pub batch: String,
    pub call_id: String,
    pub tool: String,
    /// The arguments the call ran with (after a hook or an approver replaced them).
    pub arguments: Value,
    /// `null` for a call that ended before it was judged (an unknown tool, invalid
    /// arguments, a hook's block is `by: hook`).
    pub decision: Option<DecisionRecord>,
    /// `ok`, or the result's error_type.
    pub outcome: String,
    pub elapsed_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl CallRecord {
    pub const KIND: &'static str = "call";
}

/// A session created, updated or closed, or a grant recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionChange {
    /// `session_create`, `session_update`, `session_close` or `grant`.
    pub kind: &'static str,
    pub ts: String,
    pub session: String,
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

impl SessionChange {
    /// A change of `kind` to `session`, now; `details` is an object (anything else is kept
    /// under `details`).
    pub fn new(kind: &'static str, session: &str, details: Value) -> Self {
        let details = match details {
            Value::Object(details) => details,
            Value::Null => Map::new(),
            other => Map::from_iter([("details".to_owned(), other)]),
        };
        Self {
            kind,
            ts: now(),
            session: session.to_owned(),
            details,
        }
    }
}

/// Now, as records write it: RFC 3339 in UTC to the millisecond.
pub fn now() -> String {
    toold_protocol::time::rfc3339_millis(std::time::SystemTime::now())
}

/// The record's JSON object, without `seq` and `prev` (added when it is written).
pub(super) fn render_body(record: &impl Serialize) -> Result<String, serde_json::Error> {
    serde_json::to_string(record)
}

/// `arguments` as `mode` records them: whole (`full`), or with every string value over
/// [`DIGEST_OVER_BYTES`] (at any depth) replaced by `{"sha256": HEX, "bytes": N}`.
pub fn recorded_arguments(arguments: &Value, mode: AuditMode) -> Value {
    match mode {
        AuditMode::Digest => digested(arguments),
        AuditMode::Full | AuditMode::Off => arguments.clone(),
    }
}

fn digested(value: &Value) -> Value {
    match value {
        Value::String(text) if text.len() > DIGEST_OVER_BYTES => {
            serde_json::json!({"sha256": sha256_hex(text.as_bytes()), "bytes": text.len()})
        }
        Value::Array(items) => Value::Array(items.iter().map(digested).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(name, value)| (name.clone(), digested(value)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// SHA-256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}
