//! The command sandbox on the wire (docs/protocol.md section 11.8): the modes, what a session asks
//! for, what it gets (its snapshot), and what the kernel enforces (`initialize`'s report).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a command started by `run_command` may write. Ordered from the loosest to the
/// strictest, so that "tighter" is `>`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// No sandbox: the command has the user's full rights.
    Off,
    /// Writes only under the session's roots, the temp directories and `writable`.
    #[default]
    WorkspaceWrite,
    /// No writes but `/dev/null` and a private temp directory per call.
    ReadOnly,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::WorkspaceWrite => "workspace_write",
            SandboxMode::ReadOnly => "read_only",
        }
    }
}

/// `sandbox` in `session/create` and `session/update`: each member given replaces the
/// config's value (an update replaces the session's request whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SandboxMode>,
    /// `false`: no IP networking for the session's commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
}

/// The sandbox a session's commands run in (the snapshot's `sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSettings {
    pub mode: SandboxMode,
    pub network: bool,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            mode: SandboxMode::WorkspaceWrite,
            // Closed, so that a command the sandbox confines can run without asking: one that
            // reached the network could send the workspace anywhere.
            network: false,
        }
    }
}

impl SandboxSettings {
    /// `self` with the members `request` gives.
    pub fn overlaid(self, request: SandboxRequest) -> Self {
        Self {
            mode: request.mode.unwrap_or(self.mode),
            network: request.network.unwrap_or(self.network),
        }
    }

    /// Whether `self` allows something `base` does not: a looser mode, or networking that
    /// `base` turns off.
    pub fn is_looser_than(self, base: Self) -> bool {
        self.mode < base.mode || (self.network && !base.network)
    }
}

/// `escalate` of a `run_command` call: what the model asks its sandbox to loosen for that one
/// command. In an approval request (`escalation`), what the person is asked to loosen, with the
/// model's `justification`; `writable` holds the directories as the daemon resolved them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Escalation {
    /// IP networking for the command.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Directories the command may also write under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<String>,
    /// No sandbox at all: the command runs with the user's full rights.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsandboxed: bool,
    /// Why the model asks, in its words (approval requests only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub justification: Option<String>,
}

impl Escalation {
    /// What is loosened, in words for the person asked: `network access`, `writes under /x`,
    /// `no sandbox at all`.
    pub fn loosened(&self) -> Vec<String> {
        let mut what = Vec::new();
        if self.unsandboxed {
            what.push("no sandbox at all (the user's full rights)".to_owned());
        }
        if self.network {
            what.push("network access".to_owned());
        }
        for dir in &self.writable {
            what.push(format!("writes under {dir}"));
        }
        what
    }
}

/// What the kernel enforces, probed once when the daemon starts (`initialize`'s `sandbox`,
/// `toold status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    /// The Landlock ABI version the kernel offers; `null` without Landlock.
    pub landlock_abi: Option<u32>,
    /// Whether commands' writes can be confined (Landlock).
    pub fs: bool,
    /// Whether commands' IP networking can be turned off (seccomp).
    pub network: bool,
    /// How commands are kept from the daemon's socket: `"landlock"`, `"mount_namespace"` or
    /// `"peer_check"` (the first tier that works here).
    pub daemon_socket: String,
    /// How no process of a command outlives its call: `"pid_namespace"` (each command in a
    /// PID namespace of its own) or `"sweep"` (the daemon's sweep of `/proc` alone).
    pub processes: String,
    /// What a mode would ask for and cannot be enforced here (names of `metadata.sandbox`'s
    /// `degraded`); empty when everything can.
    pub degraded: Vec<String>,
    /// Why, for each name in `degraded`: the layer that failed and the kernel's error.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub why: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    #[test]
    fn modes_order_from_loose_to_strict() {
        assert!(SandboxMode::Off < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::ReadOnly);
        assert_eq!(SandboxMode::default(), SandboxMode::WorkspaceWrite);
    }

    #[test]
    fn a_request_round_trips_and_refuses_unknown_members() {
        let request: SandboxRequest =
            assert_round_trip(json!({"mode": "read_only", "network": false}));
        assert_eq!(request.mode, Some(SandboxMode::ReadOnly));
        assert_round_trip::<SandboxRequest>(json!({}));
        assert_refused::<SandboxRequest>(json!({"mode": "strict"}), "unknown variant");
        assert_refused::<SandboxRequest>(json!({"writable": []}), "unknown field");
    }

    #[test]
    fn looser_means_a_looser_mode_or_network_turned_back_on() {
        let config = SandboxSettings {
            mode: SandboxMode::WorkspaceWrite,
            network: false,
        };
        let ask = |mode, network| SandboxSettings { mode, network };
        assert!(!ask(SandboxMode::ReadOnly, false).is_looser_than(config));
        assert!(!ask(SandboxMode::WorkspaceWrite, false).is_looser_than(config));
        assert!(ask(SandboxMode::Off, false).is_looser_than(config));
        assert!(ask(SandboxMode::ReadOnly, true).is_looser_than(config));
    }
}
