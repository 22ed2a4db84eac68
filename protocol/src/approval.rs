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
    /// What the call will do, computed by the daemon from the files and the session as they
    /// are when it asks: a file tool's change as a diff, a command's working directory, simple
    /// commands and sandbox. Absent for tools that say nothing more than their arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
}

/// The most bytes of a diff an approval's preview carries: past it the diff is cut after a
/// whole line, and a last line says how many bytes were left out ([`Preview::Diff`]'s
/// `cut_bytes`).
pub const PREVIEW_MAX_BYTES: usize = 64 * 1024;

/// `preview` of an approval request, told apart by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Preview {
    /// `write_file` and `edit_file`: the unified diff of exactly what the call changes in the
    /// file as it is now, made by the code the tool changes it with (3 lines of context; a new
    /// file's header is `--- /dev/null`, its content all `+` lines).
    Diff {
        /// The file, as the tool names it in its result: absolute, `.` and `..` collapsed.
        path: String,
        /// The diff, at most [`PREVIEW_MAX_BYTES`] and a last line saying what was cut; empty
        /// when the call would leave the file as it is.
        diff: String,
        /// How many bytes of the diff were cut (0: none).
        #[serde(default, skip_serializing_if = "is_zero")]
        cut_bytes: u64,
    },
    /// A file tool's change the daemon could not compute (`old_string` not found, a file
    /// that is not text, or cannot be read): why, in one line. The call fails the same way if
    /// it runs on the file as it is.
    Unavailable { path: String, reason: String },
    /// `run_command`: where and what it runs, and the sandbox it runs in.
    Command {
        /// The working directory, absolute.
        cwd: String,
        /// Each simple command of the line as the permission rules see it (what
        /// `permissions/explain` lists as `commands`).
        commands: Vec<String>,
        sandbox: CommandSandboxPreview,
    },
    /// A kind this version does not know (a newer daemon's): there is nothing to show.
    #[serde(other)]
    Other,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// The sandbox a previewed command runs in, its escalation applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSandboxPreview {
    /// `off`, `workspace_write` or `read_only`.
    pub mode: crate::SandboxMode,
    /// Whether the command reaches the network.
    pub network: bool,
    /// The directories it may write under besides its private `/tmp` and `/dev/shm`: the
    /// roots and the config's `writable` (in `workspace_write`), and those its escalation
    /// adds. Empty with mode `off`, where nothing is confined.
    pub writable: Vec<String>,
    /// What the call's `escalate` loosens, when it asks for anything (the request's
    /// `escalation`, the model's justification included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<crate::Escalation>,
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
    fn every_preview_round_trips() {
        let diff: Preview = assert_round_trip(json!({"kind":"diff","path":"/w/a.txt",
            "diff":"--- /w/a.txt\n+++ /w/a.txt\n@@ -1 +1 @@\n-a\n+b\n"}));
        assert!(matches!(diff, Preview::Diff { cut_bytes: 0, .. }));
        assert_round_trip::<Preview>(
            json!({"kind":"diff","path":"/w/a.txt","diff":"+a\n[cut]\n","cut_bytes":12}),
        );
        assert_round_trip::<Preview>(
            json!({"kind":"unavailable","path":"/w/a.txt","reason":"old_string was not found"}),
        );
        let command: Preview = assert_round_trip(json!({"kind":"command","cwd":"/w",
            "commands":["git status","wc -l"],
            "sandbox":{"mode":"workspace_write","network":true,"writable":["/w","/srv"],
                "escalation":{"network":true,"justification":"fetch"}}}));
        assert!(matches!(command, Preview::Command { .. }));
    }

    #[test]
    fn a_preview_of_an_unknown_kind_is_read_as_other() {
        let preview: Preview =
            serde_json::from_value(json!({"kind":"picture","pixels":[1,2]})).unwrap();
        assert_eq!(preview, Preview::Other);
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
