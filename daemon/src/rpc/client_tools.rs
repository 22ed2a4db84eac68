//! Client tools: a tool a connection registered, run by that client through `tool/invoke`.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::time::Instant;
use toold_protocol::{
    ErrorType, InvokeEnv, InvokeParams, ToolCall, ToolDefinition, ToolResult, methods,
};

use crate::session::client::{Client, OutboundError};
use crate::tools::{Tool, ToolContext, ToolFailure, ToolFuture, ToolSuccess};

/// A tool registered by a connection and run by it through `tool/invoke`.
pub(crate) struct ClientTool {
    definition: ToolDefinition,
    owner: Arc<Client>,
}

impl ClientTool {
    pub(crate) fn new(definition: ToolDefinition, owner: Arc<Client>) -> Self {
        Self { definition, owner }
    }
}

impl Tool for ClientTool {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        let name = self.definition.name.clone();
        let (session_id, batch_id) = match &ctx.origin {
            Some(origin) => (origin.session_id.to_string(), origin.batch_id.to_string()),
            None => (String::new(), String::new()),
        };
        let remaining = ctx.deadline.saturating_duration_since(Instant::now());
        let params = InvokeParams {
            session_id,
            batch_id,
            call: ToolCall::new(ctx.call_id.clone(), name.clone(), Value::Object(args)),
            env: InvokeEnv {
                cwd: ctx.env.cwd.clone(),
                roots: ctx.env.roots.clone(),
                timeout_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            },
        };
        let request = match serde_json::to_value(&params) {
            Ok(value) => self.owner.outbound().request(methods::TOOL_INVOKE, value),
            Err(err) => {
                let failure = ToolFailure::new(
                    ErrorType::InternalError,
                    format!("cannot encode tool/invoke: {err}"),
                );
                return Box::pin(async move { Err(failure) });
            }
        };
        Box::pin(async move {
            // Cancellation and the deadline drop the request, which withdraws it from the client
            // with `$/cancelRequest`; the registry then reports `canceled` or `timeout`.
            let answer = tokio::select! {
                answer = request => answer,
                () = ctx.cancel.cancelled() => {
                    return Err(ToolFailure::new(ErrorType::Canceled, format!("{name} was stopped")));
                }
            };
            match answer {
                Ok(value) => outcome_of(&name, value),
                Err(OutboundError::Error(error)) => Err(ToolFailure::new(
                    ErrorType::InternalError,
                    format!(
                        "the client running {name} answered with an error: {}",
                        error.message
                    ),
                )),
                Err(OutboundError::Closed) => Err(ToolFailure::new(
                    ErrorType::InternalError,
                    format!("the connection that registered {name} closed before it answered"),
                )),
            }
        })
    }
}

/// A client's `tool/invoke` answer: a result object (docs/protocol.md section 6).
fn outcome_of(name: &str, value: Value) -> Result<ToolSuccess, ToolFailure> {
    let result: ToolResult = serde_json::from_value(value).map_err(|err| {
        ToolFailure::new(
            ErrorType::InternalError,
            format!("the client's answer for {name} is not a tool result: {err}"),
        )
    })?;
    let mut metadata = result.metadata;
    // The registry stamps the call id itself; a client cannot claim another call's.
    metadata.remove("call_id");
    if result.ok {
        return Ok(ToolSuccess {
            content: result.content,
            metadata,
        });
    }
    let error_type = result.error_type.unwrap_or(ErrorType::InternalError);
    let message = result.error.unwrap_or_else(|| format!("{name} failed"));
    Err(ToolFailure {
        error_type,
        message,
        content: result.content,
        metadata,
    })
}
