//! What an audit record holds: a call's (its decision and who made it, its outcome) and a
//! session change's; arguments digested; a record rendered once, where it happens.

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use toold_protocol::RuleSource;

use super::AuditMode;
pub(crate) use crate::approval::ApproverIdentity;

/// String values longer than this are recorded as `{sha256, bytes}` in `digest` mode.
pub(crate) const DIGEST_OVER_BYTES: usize = 256;

/// The decision on a call and who made it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DecisionRecord {
    /// `rule`, `grant`, `mode`, `hook`, `sandbox`, `approver` or `system`.
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

/// A call as decided: what it is, with what arguments, and who allowed it (or why not). On
/// its own (kind `call_decided`), written before a call that may change something runs, so
/// that what ran, and who allowed it, is on disk even when the daemon dies during the call;
/// within a [`CallRecord`] when the call ends.
#[derive(Debug, Serialize)]
pub(crate) struct CallDecided<'a> {
    pub kind: &'static str,
    pub ts: String,
    pub session: &'a str,
    pub batch: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    /// The arguments the call runs with (after a hook or an approver replaced them).
    pub arguments: RecordedArguments<'a>,
    /// `null` for a call that ended before it was judged (an unknown tool, invalid
    /// arguments, a hook's block is `by: hook`).
    pub decision: Option<&'a DecisionRecord>,
}

impl CallDecided<'_> {
    pub(crate) const KIND: &'static str = "call_decided";
}

/// One call, as it ended: borrowed from the call, rendered where it ends.
#[derive(Debug, Serialize)]
pub(crate) struct CallRecord<'a> {
    /// Its `kind` is [`CallRecord::KIND`].
    #[serde(flatten)]
    pub call: CallDecided<'a>,
    /// `ok`, or the result's error_type.
    pub outcome: &'a str,
    pub elapsed_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl CallRecord<'_> {
    pub(crate) const KIND: &'static str = "call";
}

/// A session created, updated or closed, or a grant recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SessionChange {
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
    pub(crate) fn new(kind: &'static str, session: &str, details: Value) -> Self {
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
pub(crate) fn now() -> String {
    toold_protocol::time::rfc3339_millis(std::time::SystemTime::now())
}

/// The record's JSON object, without `seq` and `prev` (added when it is written).
pub(super) fn render_body(record: &impl Serialize) -> Result<String, serde_json::Error> {
    serde_json::to_string(record)
}

/// A call's arguments as `mode` records them: whole (`full`), or with every string value over
/// [`DIGEST_OVER_BYTES`] (at any depth) replaced by `{"sha256": HEX, "bytes": N}`. Rendered
/// from the call's own arguments, never copied first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordedArguments<'a> {
    arguments: Arguments<'a>,
    mode: AuditMode,
}

/// The arguments as the call holds them: as sent, or as a hook or an approver replaced them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arguments<'a> {
    Sent(&'a Value),
    Replaced(&'a Map<String, Value>),
}

impl<'a> RecordedArguments<'a> {
    pub(crate) fn new(arguments: Arguments<'a>, mode: AuditMode) -> Self {
        Self { arguments, mode }
    }
}

impl Serialize for RecordedArguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let digest = matches!(self.mode, AuditMode::Digest);
        match self.arguments {
            Arguments::Sent(value) if digest => Digested(value).serialize(serializer),
            Arguments::Sent(value) => value.serialize(serializer),
            Arguments::Replaced(members) if digest => digested_members(members, serializer),
            Arguments::Replaced(members) => members.serialize(serializer),
        }
    }
}

/// A value rendered with its long strings digested.
struct Digested<'a>(&'a Value);

impl Serialize for Digested<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::String(text) if text.len() > DIGEST_OVER_BYTES => StringDigest {
                sha256: sha256_hex(text.as_bytes()),
                bytes: text.len(),
            }
            .serialize(serializer),
            Value::Array(items) => serializer.collect_seq(items.iter().map(Digested)),
            Value::Object(members) => digested_members(members, serializer),
            other => other.serialize(serializer),
        }
    }
}

fn digested_members<S: Serializer>(
    members: &Map<String, Value>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(members.iter().map(|(name, value)| (name, Digested(value))))
}

/// What a long string is recorded as.
#[derive(Serialize)]
struct StringDigest {
    sha256: String,
    bytes: usize,
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
