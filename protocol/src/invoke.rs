//! `tool/invoke`: the daemon asks the connection that registered a client tool to run a call
//! (docs/protocol.md section 9). The answer is a [`crate::ToolResult`].

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::tool::ToolCall;

/// The slice of the session's Env a client tool needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvokeEnv {
    pub cwd: PathBuf,
    pub roots: Vec<PathBuf>,
    /// The call's deadline; after it the daemon sends `$/cancelRequest`.
    pub timeout_ms: u64,
}

/// `tool/invoke` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvokeParams {
    pub session_id: String,
    pub batch_id: String,
    /// The call with its final arguments (after hooks and approval).
    pub call: ToolCall,
    pub env: InvokeEnv,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolResult;
    use crate::test_support::{assert_refused, assert_round_trip};
    use serde_json::json;

    #[test]
    fn invoke_params_round_trip() {
        let params: InvokeParams = assert_round_trip(json!({
            "session_id":"s_1","batch_id":"b_1",
            "call":{"id":"call_d","name":"lookup","arguments":{"symbol":"main"}},
            "env":{"cwd":"/w","roots":["/w"],"timeout_ms":30000}}));
        assert_eq!(params.env.timeout_ms, 30000);
        assert_refused::<InvokeParams>(
            json!({"session_id":"s_1","batch_id":"b_1","call":{"id":"c","name":"t"}}),
            "missing field `env`",
        );
    }

    #[test]
    fn the_answer_is_a_tool_result() {
        assert_round_trip::<ToolResult>(json!({
            "ok":true,"tool":"lookup","content":"src/main.rs:1","metadata":{"call_id":"call_d"}}));
    }
}
