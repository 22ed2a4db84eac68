//! `approval/request`, the server→client request for a permission decision, and its answer
//! (docs/protocol.md section 7).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool::{Safety, ToolCall};

/// `approval/request` params, sent to every attached connection that declared `approvals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequestParams {
    pub session_id: String,
    pub batch_id: String,
    pub approval_id: String,
    pub call: ToolCall,
    pub safety: Safety,
    /// Why the call needs approval, for a human.
    pub reason: String,
    /// Rule strings that would allow this call, offered for `allow_session`.
    #[serde(default)]
    pub suggestions: Vec<String>,
    /// For a command that asks to leave its sandbox (`run_command`'s `escalate`): exactly what
    /// approving it loosens, and the model's justification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<crate::Escalation>,
    /// The rule an `allow_always` or `deny_always` answer writes into the user's config for
    /// the session's project (`project`); absent, those answers are not offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always: Option<AlwaysRule>,
}

/// What answering "always" would persist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlwaysRule {
    pub rule: String,
    /// The project it applies to: the session's first root.
    pub project: String,
}

/// The approver's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    AllowOnce,
    /// Run it and grant the session this call's exact canonical form.
    AllowSession,
    /// `permission_denied`; `message` goes to the model.
    Deny,
    /// This call `permission_canceled`, the rest of the batch `canceled`.
    Abort,
    /// Run it, and write the request's `always.rule` as an allow rule of its project into the
    /// user's config: every session of the project, now and after restarts.
    AllowAlways,
    /// `permission_denied`, and write `always.rule` as a deny rule of its project.
    DenyAlways,
}

impl ApprovalDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::AllowOnce => "allow_once",
            ApprovalDecision::AllowSession => "allow_session",
            ApprovalDecision::Deny => "deny",
            ApprovalDecision::Abort => "abort",
            ApprovalDecision::AllowAlways => "allow_always",
            ApprovalDecision::DenyAlways => "deny_always",
        }
    }
}

/// The answer to `approval/request`.
///
/// Unknown members are refused: an answer that misspells `arguments` must not run the
/// original arguments as if approved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalAnswer {
    pub decision: ApprovalDecision,
    /// With `allow_once`: run these arguments instead (validated and matched against
    /// deny rules again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    /// With `deny`: the error the model sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ApprovalAnswer {
    pub fn new(decision: ApprovalDecision) -> Self {
        Self {
            decision,
            arguments: None,
            message: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    #[test]
    fn request_round_trips_the_protocol_example() {
        let params: ApprovalRequestParams = assert_round_trip(json!({
            "session_id":"s_1","batch_id":"b_1","approval_id":"a_1",
            "call":{"id":"call_c","name":"run_command","arguments":{"command":"rm -rf build"}},
            "safety":"side_effect","reason":"no allow rule matches run_command(rm -rf build)",
            "suggestions":["run_command(rm -rf build)"]}));
        assert_eq!(params.call.name, "run_command");
    }

    #[test]
    fn every_decision_round_trips() {
        let decisions = [
            (ApprovalDecision::AllowOnce, "allow_once"),
            (ApprovalDecision::AllowSession, "allow_session"),
            (ApprovalDecision::Deny, "deny"),
            (ApprovalDecision::Abort, "abort"),
            (ApprovalDecision::AllowAlways, "allow_always"),
            (ApprovalDecision::DenyAlways, "deny_always"),
        ];
        for (decision, name) in decisions {
            let answer: ApprovalAnswer = assert_round_trip(json!({"decision":name}));
            assert_eq!(answer, ApprovalAnswer::new(decision));
        }
    }

    #[test]
    fn answer_with_arguments_and_message_round_trips() {
        let answer: ApprovalAnswer = assert_round_trip(
            json!({"decision":"allow_once","arguments":{"command":"rm -rf build/tmp"}}),
        );
        assert!(answer.arguments.is_some());
        assert_round_trip::<ApprovalAnswer>(
            json!({"decision":"deny","message":"use cargo clean instead"}),
        );
    }

    #[test]
    fn invalid_answers_are_refused() {
        assert_refused::<ApprovalAnswer>(json!({"decision":"allow"}), "unknown variant `allow`");
        assert_refused::<ApprovalAnswer>(json!({"decision":"ALLOW_ONCE"}), "unknown variant");
        assert_refused::<ApprovalAnswer>(json!({}), "missing field `decision`");
        assert_refused::<ApprovalAnswer>(
            json!({"decision":"allow_once","args":{}}),
            "unknown field `args`",
        );
        assert_refused::<ApprovalAnswer>(
            json!({"decision":"allow_once","arguments":"{}"}),
            "invalid type",
        );
    }
}
