//! `hook/pre_tool_use` and `hook/post_tool_use`: params, answers and decision strictness
//! (docs/protocol.md section 8).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::session::SessionMode;
use crate::tool::{Safety, ToolCall, ToolResult};

/// The hook events, as declared in `capabilities.hooks` and named in a configured
/// hook's input (`"event"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
}

impl HookEvent {
    /// The event's name on the wire and in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
        }
    }
}

/// `hook/pre_tool_use` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreToolUseParams {
    pub session_id: String,
    pub batch_id: String,
    pub call: ToolCall,
    pub safety: Safety,
    pub mode: SessionMode,
}

/// A PreToolUse hook's decision.
///
/// Declared from least to most strict so that the derived `Ord` is strictness:
/// when several hooks answer, the maximum wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreToolUseDecision {
    /// No opinion: the permission step decides.
    Continue,
    /// Skip the final ask, never a deny or ask rule.
    Allow,
    /// Ask the approver, in every mode.
    Ask,
    /// End the call as `hook_blocked` with the reason.
    Block,
}

impl PreToolUseDecision {
    /// The stricter of two decisions.
    pub fn strictest(self, other: Self) -> Self {
        self.max(other)
    }
}

/// The answer to `hook/pre_tool_use` (and a configured hook's stdout).
///
/// Unknown members are refused: an invalid answer blocks the call, which is safer than
/// ignoring, say, a misspelt `arguments` rewrite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreToolUseAnswer {
    pub decision: PreToolUseDecision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Replaces the call's arguments (validated again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
}

impl PreToolUseAnswer {
    pub fn new(decision: PreToolUseDecision) -> Self {
        Self {
            decision,
            reason: None,
            arguments: None,
        }
    }
}

/// `hook/post_tool_use` params: the call and its result, whatever it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostToolUseParams {
    pub session_id: String,
    pub batch_id: String,
    pub call: ToolCall,
    pub result: ToolResult,
    pub elapsed_ms: u64,
}

/// The answer to `hook/post_tool_use`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostToolUseAnswer {
    /// Added to the result's `metadata.additional_context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
}

/// A configured hook program's stdin: the client hook's params with `"event"` and the
/// session's working directory (`"cwd"`) added. The program itself runs elsewhere, in a
/// directory of toold's that no session can write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookProgramInput<P> {
    pub event: HookEvent,
    pub cwd: String,
    #[serde(flatten)]
    pub params: P,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    fn call() -> serde_json::Value {
        json!({"id":"call_a","name":"run_command","arguments":{"command":"cargo test"}})
    }

    #[test]
    fn pre_tool_use_params_round_trip() {
        let params: PreToolUseParams = assert_round_trip(json!({
            "session_id":"s_1","batch_id":"b_1","call":call(),
            "safety":"side_effect","mode":"dont_ask"}));
        assert_eq!(params.mode, SessionMode::DontAsk);
    }

    #[test]
    fn every_decision_round_trips_and_strictness_orders_them() {
        let decisions = [
            (PreToolUseDecision::Continue, "continue"),
            (PreToolUseDecision::Allow, "allow"),
            (PreToolUseDecision::Ask, "ask"),
            (PreToolUseDecision::Block, "block"),
        ];
        for (decision, name) in decisions {
            let answer: PreToolUseAnswer = assert_round_trip(json!({"decision":name}));
            assert_eq!(answer, PreToolUseAnswer::new(decision));
        }
        use PreToolUseDecision::*;
        assert_eq!(Continue.strictest(Allow), Allow);
        assert_eq!(Allow.strictest(Ask), Ask);
        assert_eq!(Block.strictest(Ask), Block);
        assert_eq!(Continue.strictest(Continue), Continue);
    }

    #[test]
    fn pre_tool_use_answer_with_rewrite_round_trips() {
        assert_round_trip::<PreToolUseAnswer>(json!({
            "decision":"allow","reason":"safe in CI","arguments":{"command":"cargo test -q"}}));
    }

    #[test]
    fn invalid_pre_tool_use_answers_are_refused() {
        assert_refused::<PreToolUseAnswer>(json!({"decision":"deny"}), "unknown variant `deny`");
        assert_refused::<PreToolUseAnswer>(json!({"reason":"x"}), "missing field `decision`");
        assert_refused::<PreToolUseAnswer>(
            json!({"decision":"continue","why":"x"}),
            "unknown field `why`",
        );
    }

    #[test]
    fn post_tool_use_round_trips() {
        assert_round_trip::<PostToolUseParams>(json!({
            "session_id":"s_1","batch_id":"b_1","call":call(),
            "result":{"ok":false,"tool":"run_command","content":"1 failed\n",
                      "error_type":"command_failed","error":"exit code 101",
                      "metadata":{"call_id":"call_a","exit_code":101}},
            "elapsed_ms":812}));
        assert_round_trip::<PostToolUseAnswer>(json!({}));
        assert_round_trip::<PostToolUseAnswer>(json!({"additional_context":"tests are flaky"}));
        assert_refused::<PostToolUseAnswer>(json!({"context":"x"}), "unknown field");
    }

    #[test]
    fn program_input_adds_the_event() {
        let input: HookProgramInput<PreToolUseParams> = assert_round_trip(json!({
            "event":"pre_tool_use","cwd":"/work","session_id":"s_1","batch_id":"b_1",
            "call":call(),"safety":"side_effect","mode":"default"}));
        assert_eq!(input.event, HookEvent::PreToolUse);
    }
}
