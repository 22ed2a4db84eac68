//! `permissions/explain` (docs/protocol.md section 11.11): a call decided as the pipeline would
//! decide it, with why, and nothing run.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::SessionCreateParams;

/// `permissions/explain` params: the call, and the session it is judged in — a live one by
/// `session_id`, or (an extension) one described as `session/create` would take it, which is
/// judged without being created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionCreateParams>,
    pub call: ExplainCall,
}

/// The call to explain: a tool call without an id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainCall {
    pub name: String,
    /// An object, or a JSON string holding one (as in `tools/execute`); absent: `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

/// What `permissions/explain` answers. Every member is always present (`null` or `[]` when it
/// does not apply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// `allow`, `ask`, `deny`, `tool_not_allowed`, `unknown_tool` or `invalid_arguments`.
    pub decision: String,
    /// The decision step (`deny_rule`, `plan_mode`, `ask_rule`, `bypass_mode`, `allow_rule`,
    /// `grant`, `sandboxed`, `accept_edits`, `read_only_inside_roots`, `default_ask`, `system_tool`,
    /// `dont_ask`; and `unreadable_command`, `protected_path`, `tool_list`); `null` for
    /// `unknown_tool` and `invalid_arguments`.
    pub step: Option<String>,
    pub reason: String,
    /// The rule (or grant) that decided, as written.
    pub rule: Option<String>,
    /// How toold reads that rule, when it is written in another form (Claude Code's
    /// `Bash(npm run test:*)` is read as `run_command(npm run test *)`); `null` otherwise.
    #[serde(default)]
    pub rule_read_as: Option<String>,
    pub source: Option<RuleSource>,
    /// The rules whose addition would allow the call (for an ask).
    pub suggestions: Vec<String>,
    pub paths: Vec<ExplainedPath>,
    pub commands: Vec<ExplainedCommand>,
    /// Why the command line asks in every mode, when it cannot be read.
    pub unreadable: Option<String>,
    /// The hooks that would run for the call (none is run): a program's command line, or
    /// `client <name>` for a connection's hook.
    pub hooks: Vec<String>,
    /// The sandbox mode the call's command would run under; `null` for a tool that runs
    /// none.
    pub sandbox: Option<String>,
    /// The lazy MCP server that a call of this tool would start (explain starts nothing): the
    /// call is judged as a call of one of its tools, on what its table says (its arguments
    /// are checked against the tool's schema only once the server lists it); `null`
    /// otherwise.
    #[serde(default)]
    pub starts_server: Option<String>,
}

/// Where a rule came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RuleSource {
    Config {
        file: Option<String>,
        line: Option<u32>,
    },
    Session,
    Grant,
}

/// A path the call names, as it was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedPath {
    /// The argument it came from (`path`, `cwd`); `command` for a file a command line's
    /// redirection reads or writes.
    pub argument: String,
    pub lexical: String,
    pub resolved: String,
    pub inside_roots: bool,
    /// `read` or `write`, for a command line's redirections; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
}

/// One simple command of a command line, with the allow rule that covers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedCommand {
    pub text: String,
    pub rule: Option<String>,
}
