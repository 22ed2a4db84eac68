//! `tools/list`, `tools/register` and `tools/unregister` params and results (docs/protocol.md
//! section 4).

use serde::{Deserialize, Serialize};

use crate::tool::{Safety, ToolDefinition};

/// `tools/list` params; every filter is optional and they narrow together.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsListParams {
    /// List what this session's model may see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Only these names (system tools are always listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety: Option<Safety>,
}

/// `tools/list` result: definitions sorted by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolsListResult {
    /// Only ever increases; equal to the last `tools/list_changed` revision.
    pub revision: u64,
    pub tools: Vec<ToolDefinition>,
}

/// `tools/register` params (needs the `client_tools` capability).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsRegisterParams {
    pub tools: Vec<ToolDefinition>,
    /// Replace tools of the same name that this connection registered before.
    #[serde(default)]
    pub replace: bool,
}

/// `tools/unregister` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsUnregisterParams {
    pub names: Vec<String>,
}

/// The registry revision after a change: the result of `tools/register` and
/// `tools/unregister`, and the params of `tools/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    pub revision: u64,
}

pub type ToolsRegisterResult = Revision;
pub type ToolsUnregisterResult = Revision;
pub type ToolsListChangedParams = Revision;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    fn definition() -> serde_json::Value {
        json!({"name":"read_file","description":"Reads a file","input_schema":{"type":"object"},
               "safety":"read_only","system":false,"timeout_ms":null,"source":"builtin"})
    }

    #[test]
    fn list_params_round_trip() {
        assert_round_trip::<ToolsListParams>(json!({}));
        let params: ToolsListParams = assert_round_trip(
            json!({"session_id":"s_1","allowed":["read_file"],"safety":"side_effect"}),
        );
        assert_eq!(params.safety, Some(Safety::SideEffect));
        assert_refused::<ToolsListParams>(json!({"safety":"harmless"}), "unknown variant");
        assert_refused::<ToolsListParams>(json!({"session":"s_1"}), "unknown field");
    }

    #[test]
    fn list_result_round_trips() {
        let result: ToolsListResult =
            assert_round_trip(json!({"revision":4,"tools":[definition()]}));
        assert_eq!(result.tools[0].name, "read_file");
    }

    #[test]
    fn register_and_unregister_round_trip() {
        let mut client_tool = definition();
        client_tool["name"] = json!("lookup");
        client_tool["source"] = json!("client");
        client_tool["timeout_ms"] = json!(5000);
        let params: ToolsRegisterParams =
            assert_round_trip(json!({"tools":[client_tool],"replace":true}));
        assert!(params.replace);
        let defaulted: ToolsRegisterParams = serde_json::from_value(json!({"tools":[]})).unwrap();
        assert!(!defaulted.replace);
        assert_refused::<ToolsRegisterParams>(json!({"replace":true}), "missing field `tools`");
        assert_round_trip::<ToolsUnregisterParams>(json!({"names":["lookup"]}));
        assert_refused::<ToolsUnregisterParams>(json!({"names":"lookup"}), "invalid type");
        assert_round_trip::<Revision>(json!({"revision":5}));
    }
}
