//! Sessions: create/attach/detach/update/get/list/close params, the snapshot, modes and rules
//! (docs/protocol.md sections 3 and 7).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::sandbox::{SandboxRequest, SandboxSettings};

/// The permission mode of a session (docs/protocol.md section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    #[default]
    Default,
    /// `write_file` and `edit_file` inside the roots run without asking.
    AcceptEdits,
    /// Only `read_only` tools (and system tools) may run.
    Plan,
    /// Whatever would ask is denied instead.
    DontAsk,
    /// Everything runs unless a deny or ask rule matches; needs `allow_bypass`.
    Bypass,
}

/// What happens to a running batch when the connection that submitted it closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    #[default]
    Cancel,
    Continue,
}

/// Permission rules, each a `tool` or `tool(specifier)` string.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

/// The session's Env limits as they apply to its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnv {
    pub timeout_ms: u64,
    pub max_output_bytes: u64,
    pub max_read_bytes: u64,
}

/// Declares `session/create`'s and `session/update`'s params: their leading members, then the
/// settings both take, written once here. Absent settings are `None`. `$clearable` wraps the two
/// settings an update may also clear with `null` (`allowed_tools`, `title`), with
/// `$clear_serde` as their extra serde attributes.
macro_rules! session_params {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$lead_meta:meta])* pub $lead:ident: $lead_ty:ty,)+
        }
        clearable: $clearable:ident { $($clear_serde:tt)* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$lead_meta])* pub $lead: $lead_ty,)+
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub roots: Option<Vec<PathBuf>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub mode: Option<SessionMode>,
            /// The tool names the session's model may see; absent at creation means every tool
            /// (an update's `null` makes every tool visible again).
            #[serde(default, skip_serializing_if = "Option::is_none" $($clear_serde)*)]
            pub allowed_tools: Option<$clearable<Vec<String>>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rules: Option<Rules>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub timeout_ms: Option<u64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub max_output_bytes: Option<u64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub max_read_bytes: Option<u64>,
            /// Extra environment variables for commands.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub command_env: Option<BTreeMap<String, String>>,
            /// An update's `null` removes the title.
            #[serde(default, skip_serializing_if = "Option::is_none" $($clear_serde)*)]
            pub title: Option<$clearable<String>>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub on_disconnect: Option<OnDisconnect>,
            /// The sandbox for the session's commands, over the config's: tighter always,
            /// looser only when the config allows it. An update replaces the session's request
            /// whole (members not given: the config's).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub sandbox: Option<SandboxRequest>,
        }

        impl $name {
            /// The leading members, every setting absent.
            fn with_settings_absent($($lead: $lead_ty),+) -> Self {
                Self {
                    $($lead,)+
                    roots: None,
                    mode: None,
                    allowed_tools: None,
                    rules: None,
                    timeout_ms: None,
                    max_output_bytes: None,
                    max_read_bytes: None,
                    command_env: None,
                    title: None,
                    on_disconnect: None,
                    sandbox: None,
                }
            }
        }
    };
}

/// A setting as `session/create` gives it.
type Given<T> = T;
/// A setting an update may give (`Some`) or clear (`None`, from JSON `null`).
type Clearable<T> = Option<T>;

session_params! {
    /// `session/create` params. Absent optional fields take the daemon's defaults
    /// (`roots` = `[cwd]`, `mode` = `default`, `on_disconnect` = `cancel`, limits from the
    /// config).
    pub struct SessionCreateParams {
        /// Absolute; the daemon refuses a relative or missing directory.
        pub cwd: PathBuf,
    }
    clearable: Given {}
}

impl SessionCreateParams {
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self::with_settings_absent(cwd.into())
    }
}

session_params! {
    /// `session/update` params: any of create's fields but `cwd`; an absent field is left
    /// as it is, a present one replaces the session's value whole (lists and `rules` are
    /// not merged). `allowed_tools` and `title` may also be `null`, which clears them.
    pub struct SessionUpdateParams {
        pub session_id: String,
    }
    clearable: Clearable { , deserialize_with = "present_or_null" }
}

impl SessionUpdateParams {
    /// An update that changes nothing yet.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self::with_settings_absent(session_id.into())
    }
}

/// Tells a present `null` (`Some(None)`) from an absent member (`None`, via `default`).
fn present_or_null<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `session/attach` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionAttachParams {
    pub session_id: String,
    /// Replay the retained events with a larger `seq` before live ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
}

/// Params naming one session: `session/detach`, `session/get`, `session/close`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionIdParams {
    pub session_id: String,
}

pub type SessionDetachParams = SessionIdParams;
pub type SessionGetParams = SessionIdParams;
pub type SessionCloseParams = SessionIdParams;

/// `session/list` params: none; `{}` (or no params at all) is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionListParams {}

/// `session/list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionListResult {
    pub sessions: Vec<SessionSnapshot>,
}

/// A session's state, the result of create, attach, update and get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    pub session_id: String,
    /// `null` when the session has no title.
    pub title: Option<String>,
    pub cwd: PathBuf,
    pub roots: Vec<PathBuf>,
    pub mode: SessionMode,
    /// `null` when every tool is visible.
    pub allowed_tools: Option<Vec<String>>,
    pub rules: Rules,
    pub env: SessionEnv,
    pub command_env: BTreeMap<String, String>,
    /// Rule strings granted by `allow_session` answers.
    pub grants: Vec<String>,
    /// How many connections are attached.
    pub attached: u64,
    pub running_batches: Vec<String>,
    pub last_seq: u64,
    /// RFC 3339.
    pub created_at: String,
    pub on_disconnect: OnDisconnect,
    /// The sandbox the session's commands run in. Optional when read, so that a newer client
    /// still understands a daemon that did not send it.
    #[serde(default)]
    pub sandbox: SandboxSettings,
    /// Set on `session/attach` when events after `after_seq` were no longer retained.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replay_truncated: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    #[test]
    fn create_with_every_field_round_trips() {
        let params: SessionCreateParams = assert_round_trip(json!({
            "cwd":"/home/u/project","roots":["/home/u/project","/tmp/scratch"],
            "mode":"accept_edits","allowed_tools":["read_file","run_command"],
            "rules":{"allow":["run_command(cargo test *)"],"ask":[],"deny":["read_file(//etc/**)"]},
            "timeout_ms":60000,"max_output_bytes":65536,"max_read_bytes":1048576,
            "command_env":{"RUST_LOG":"debug"},"title":"fix the build","on_disconnect":"continue"}));
        assert_eq!(params.mode, Some(SessionMode::AcceptEdits));
        assert_eq!(params.on_disconnect, Some(OnDisconnect::Continue));
    }

    #[test]
    fn create_with_only_cwd_round_trips() {
        let params: SessionCreateParams = assert_round_trip(json!({"cwd":"/w"}));
        assert_eq!(params, SessionCreateParams::new("/w"));
    }

    #[test]
    fn every_mode_has_its_protocol_name() {
        let modes = [
            (SessionMode::Default, "default"),
            (SessionMode::AcceptEdits, "accept_edits"),
            (SessionMode::Plan, "plan"),
            (SessionMode::DontAsk, "dont_ask"),
            (SessionMode::Bypass, "bypass"),
        ];
        for (mode, name) in modes {
            assert_eq!(assert_round_trip::<SessionMode>(json!(name)), mode);
        }
        assert_eq!(
            assert_round_trip::<OnDisconnect>(json!("cancel")),
            OnDisconnect::Cancel
        );
    }

    #[test]
    fn bad_create_params_are_refused() {
        assert_refused::<SessionCreateParams>(json!({"mode":"plan"}), "missing field `cwd`");
        assert_refused::<SessionCreateParams>(
            json!({"cwd":"/w","mode":"yolo"}),
            "unknown variant `yolo`",
        );
        assert_refused::<SessionCreateParams>(
            json!({"cwd":"/w","on_disconnect":"stay"}),
            "unknown variant `stay`",
        );
        assert_refused::<SessionCreateParams>(
            json!({"cwd":"/w","rules":{"allow":[],"permit":[]}}),
            "unknown field `permit`",
        );
        assert_refused::<SessionCreateParams>(json!({"cwd":"/w","cwd_":"/x"}), "unknown field");
    }

    #[test]
    fn update_tells_null_from_absent() {
        let cleared: SessionUpdateParams =
            assert_round_trip(json!({"session_id":"s_1","allowed_tools":null,"title":null}));
        assert_eq!(cleared.allowed_tools, Some(None));
        assert_eq!(cleared.title, Some(None));
        let untouched: SessionUpdateParams = assert_round_trip(json!({"session_id":"s_1"}));
        assert_eq!(untouched, SessionUpdateParams::new("s_1"));
        let set: SessionUpdateParams = assert_round_trip(json!({
            "session_id":"s_1","mode":"plan","allowed_tools":["read_file"],"title":"t",
            "rules":{"allow":[],"ask":["write_file"],"deny":[]},"roots":["/w"],
            "timeout_ms":1,"max_output_bytes":2,"max_read_bytes":3,
            "command_env":{},"on_disconnect":"cancel"}));
        assert_eq!(set.allowed_tools, Some(Some(vec!["read_file".to_owned()])));
    }

    #[test]
    fn update_cannot_change_cwd() {
        assert_refused::<SessionUpdateParams>(
            json!({"session_id":"s_1","cwd":"/elsewhere"}),
            "unknown field `cwd`",
        );
        assert_refused::<SessionUpdateParams>(json!({"mode":"plan"}), "session_id");
    }

    #[test]
    fn attach_and_id_params_round_trip() {
        assert_round_trip::<SessionAttachParams>(json!({"session_id":"s_1","after_seq":41}));
        assert_round_trip::<SessionAttachParams>(json!({"session_id":"s_1"}));
        assert_round_trip::<SessionIdParams>(json!({"session_id":"s_1"}));
        assert_round_trip::<SessionListParams>(json!({}));
        assert_refused::<SessionIdParams>(json!({}), "session_id");
    }

    fn snapshot_json() -> serde_json::Value {
        json!({
            "session_id":"s_1","title":null,"cwd":"/w","roots":["/w"],"mode":"default",
            "allowed_tools":null,"rules":{"allow":[],"ask":[],"deny":[]},
            "env":{"timeout_ms":120000,"max_output_bytes":65536,"max_read_bytes":262144},
            "command_env":{},"grants":["run_command(git status)"],"attached":1,
            "running_batches":["b_3"],"last_seq":17,"created_at":"2026-11-30T09:00:00Z",
            "on_disconnect":"cancel","sandbox":{"mode":"workspace_write","network":true}})
    }

    #[test]
    fn snapshot_round_trips_and_lists_sessions() {
        let snapshot: SessionSnapshot = assert_round_trip(snapshot_json());
        assert!(!snapshot.replay_truncated);
        let mut truncated = snapshot_json();
        truncated["replay_truncated"] = json!(true);
        assert!(assert_round_trip::<SessionSnapshot>(truncated).replay_truncated);
        assert_round_trip::<SessionListResult>(json!({"sessions":[snapshot_json()]}));
    }
}
