//! Running and canceling batches: `tools/execute`, `tools/cancel` and `$/cancelRequest`
//! (docs/protocol.md section 5).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::rpc::Id;
use crate::tool::{ToolCall, ToolResult};

/// `tools/execute` params: one model turn's tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteParams {
    pub session_id: String,
    /// The agent loop's turn number, echoed in events; 0 when the client does not count.
    #[serde(default)]
    pub iteration: u64,
    /// Ids must be unique within the batch.
    pub calls: Vec<ToolCall>,
}

/// One call's outcome in an [`ExecuteResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOutcome {
    pub call_id: String,
    /// Shared with the call's `tool/result` and `tool/call_done` events.
    pub result: Arc<ToolResult>,
    pub elapsed_ms: u64,
}

/// `tools/execute` result: exactly one outcome per call, in the order of `calls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResult {
    pub batch_id: String,
    pub results: Vec<CallOutcome>,
}

/// `tools/cancel` params; without `batch_id` every running batch of the session is
/// canceled, without `call_ids` every call of the chosen batches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_ids: Option<Vec<String>>,
}

/// `tools/cancel` result: the ids of the calls that were still running or waiting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelResult {
    pub canceled: Vec<String>,
}

/// `$/cancelRequest` params, sent by either peer about a request it sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequestParams {
    pub id: Id,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_refused, assert_round_trip};
    use crate::tool::ErrorType;
    use serde_json::json;

    #[test]
    fn execute_params_round_trip_the_protocol_example() {
        let params: ExecuteParams = assert_round_trip(json!({
            "session_id":"s_1","iteration":3,
            "calls":[{"id":"call_a","name":"read_file","arguments":{"path":"A"}},
                     {"id":"call_b","name":"search_code","arguments":"{\"pattern\":\"fn main\"}"}]}));
        assert_eq!(params.calls.len(), 2);
        assert_eq!(
            params.calls[1].arguments,
            json!("{\"pattern\":\"fn main\"}")
        );
    }

    #[test]
    fn bad_execute_params_are_refused() {
        assert_refused::<ExecuteParams>(json!({"session_id":"s_1"}), "missing field `calls`");
        assert_refused::<ExecuteParams>(json!({"calls":[]}), "missing field `session_id`");
        assert_refused::<ExecuteParams>(
            json!({"session_id":"s","calls":[{"id":"c","arguments":{}}]}),
            "missing field `name`",
        );
        assert_refused::<ExecuteParams>(
            json!({"session_id":"s","calls":[],"parallel":true}),
            "unknown field `parallel`",
        );
    }

    #[test]
    fn execute_result_round_trips() {
        let result: ExecuteResult = assert_round_trip(json!({
            "batch_id":"b_1",
            "results":[
                {"call_id":"call_a","result":{"ok":true,"tool":"read_file","content":"hi\n",
                  "metadata":{"call_id":"call_a","path":"/w/A","total_lines":1,"truncated":false}},
                 "elapsed_ms":3},
                {"call_id":"call_b","result":{"ok":false,"tool":"search_code","content":"",
                  "error_type":"canceled","error":"the batch was canceled",
                  "metadata":{"call_id":"call_b"}},
                 "elapsed_ms":0}]}));
        assert_eq!(
            result.results[1].result.error_type,
            Some(ErrorType::Canceled)
        );
    }

    #[test]
    fn cancel_round_trips() {
        assert_round_trip::<CancelParams>(json!({"session_id":"s_1"}));
        assert_round_trip::<CancelParams>(
            json!({"session_id":"s_1","batch_id":"b_1","call_ids":["call_a"]}),
        );
        assert_refused::<CancelParams>(json!({"batch_id":"b_1"}), "session_id");
        assert_round_trip::<CancelResult>(json!({"canceled":["call_a","call_b"]}));
        let by_number: CancelRequestParams = assert_round_trip(json!({"id":7}));
        assert_eq!(by_number.id, Id::Number(7));
        assert_round_trip::<CancelRequestParams>(json!({"id":"req-7"}));
        assert_refused::<CancelRequestParams>(json!({"id":[7]}), "id must be");
    }
}
