//! The method table: every client→server method of docs/protocol.md registered in a jsonrpsee
//! `RpcModule`, and the call into it for one request. The connection a request came on reaches
//! its handler through the request's `Extensions`, and a handler's result comes back the same
//! way, rendered once: jsonrpsee renders a response and then parses it whole again to check it,
//! which for a batch's results cost as much as rendering them. Errors are jsonrpsee's to render.

use std::sync::{Arc, Mutex};

use jsonrpsee::core::server::{ConnectionId, Extensions, MethodCallback, Methods, RpcModule};
use jsonrpsee::types::{ErrorObjectOwned, Id, Params};
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use toold_protocol::peer::Reply;
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{ErrorObject, JsonText, RequestMethod};

use super::Daemon;
use super::connection::Connection;
use super::handlers;

/// What a handler learns about the request: its connection, its id and its params as the
/// JSON text that came (read into the method's typed params from there).
struct RequestContext {
    connection: Arc<Connection>,
    /// The request's id as JSON text, for `$/cancelRequest`.
    request_id: String,
    params: Option<Box<RawValue>>,
}

/// A request's context on its way to the handler, which takes it out, and the handler's result
/// on its way back, rendered as JSON text. jsonrpsee clones a request's `Extensions` (one for
/// the handler, one kept with the response): through a shared slot, that clone counts a
/// reference instead of copying the params.
#[derive(Clone)]
struct Handoff(Arc<Mutex<Slot>>);

struct Slot {
    context: Option<RequestContext>,
    result: Option<String>,
}

type Handled<T> = Result<T, ErrorObjectOwned>;

fn context(extensions: &Extensions) -> Handled<RequestContext> {
    let handoff = extensions.get::<Handoff>();
    handoff
        .and_then(|handoff| handoff.0.lock_unpoisoned().context.take())
        .ok_or_else(|| {
            to_rpc(ErrorObject::internal_error(
                "the request reached its handler without its connection",
            ))
        })
}

/// Hands a handler's result back rendered; jsonrpsee is given `null` to render in its place.
fn hand_back<T: serde::Serialize>(extensions: &Extensions, result: &T) -> Handled<()> {
    let rendered = serde_json::to_string(result).map_err(|err| {
        to_rpc(ErrorObject::internal_error(format!(
            "a result could not be rendered: {err}"
        )))
    })?;
    if let Some(handoff) = extensions.get::<Handoff>() {
        handoff.0.lock_unpoisoned().result = Some(rendered);
    }
    Ok(())
}

fn to_rpc(error: ErrorObject) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(error.code, error.message, error.data)
}

/// Params as `T`; absent params read as `{}`. Read from the text that came; params it
/// refuses are read as a `Value` and rendered compact on one line to be read again, which
/// gives a reason with a column in that line, and the verdict of a `Value`'s reading (a member
/// given twice counts once, its last value). A mismatch is `-32602` with serde's reason,
/// prefixed with the top-level field it concerns when serde's reason does not name it (a wrong
/// type or an unknown variant).
fn parse<T: DeserializeOwned>(params: Option<Box<RawValue>>) -> Handled<T> {
    let Some(params) = params else {
        return parse_text("{}");
    };
    match serde_json::from_str(params.get()) {
        Ok(typed) => Ok(typed),
        Err(_) => {
            // The text was read as JSON on its way in.
            let value: Value = serde_json::from_str(params.get()).unwrap_or(Value::Null);
            parse_text(&value.to_string())
        }
    }
}

fn parse_text<T: DeserializeOwned>(text: &str) -> Handled<T> {
    serde_json::from_str(text).map_err(|err| {
        let reason = err.to_string();
        let named = reason.starts_with("unknown field") || reason.starts_with("missing field");
        let detail = match field_at(text, err.column()) {
            Some(field) if !named => format!("{field}: {reason}"),
            _ => reason,
        };
        to_rpc(ErrorObject::invalid_params(detail))
    })
}

/// The top-level field of a params object whose member ends at or after `column` (serde's
/// 1-based column, just past the value it refused). The text is compact JSON on one line, as
/// `parse` renders it from a `Value`, so re-rendering each member finds its span.
fn field_at(text: &str, column: usize) -> Option<String> {
    let Ok(Value::Object(members)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    // Past the `{`; each member is `"key":value`, followed by a `,`.
    let mut end = 1;
    for (key, value) in &members {
        end +=
            serde_json::to_string(key).ok()?.len() + 1 + serde_json::to_string(value).ok()?.len();
        if column <= end {
            return Some(key.clone());
        }
        end += 1;
    }
    None
}

/// Registers the handler of one method of the protocol's typed table
/// (`toold_protocol::methods`), which gives its name, its params' type and its result's: the
/// table the client's calls are typed by is the one the daemon serves.
macro_rules! method {
    ($module:expr, $method:ty, |$daemon:ident, $request:ident, $params:ident| $body:expr) => {{
        let registered = $module.register_async_method(
            <$method as RequestMethod>::METHOD,
            |_params, $daemon, extensions| async move {
                let mut $request = context(&extensions)?;
                let $params: <$method as RequestMethod>::Params = parse($request.params.take())?;
                let reply: handlers::Reply<<$method as RequestMethod>::Result> = $body;
                hand_back(&extensions, &reply.map_err(to_rpc)?)
            },
        );
        // Only a name registered twice fails, and each name below appears once.
        if let Err(err) = registered {
            tracing::error!(%err, "a method could not be registered");
        }
    }};
}

/// Builds the method table.
pub(crate) fn method_table(daemon: Arc<Daemon>) -> Methods {
    use toold_protocol::methods::{
        ConfigReload, IndexStatus, Initialize, McpRestart, McpStatus, PermissionsExplain,
        SessionAttach, SessionClose, SessionCreate, SessionDetach, SessionGet, SessionList,
        SessionUpdate, ToolsCancel, ToolsExecute, ToolsList, ToolsRegister, ToolsUnregister,
    };
    let mut module = RpcModule::from_arc(daemon);
    method!(module, Initialize, |daemon, request, params| {
        handlers::initialize(&daemon, &request.connection, params)
    });
    method!(module, SessionCreate, |daemon, request, params| {
        handlers::session_create(&daemon, &request.connection, params)
    });
    method!(module, SessionAttach, |daemon, request, params| {
        handlers::session_attach(&daemon, &request.connection, params).await
    });
    method!(module, SessionDetach, |daemon, request, params| {
        handlers::session_detach(&daemon, &request.connection, params)
    });
    method!(module, SessionUpdate, |daemon, request, params| {
        handlers::session_update(&daemon, &request.connection, params)
    });
    method!(module, SessionGet, |daemon, _request, params| {
        handlers::session_get(&daemon, params)
    });
    method!(module, SessionList, |daemon, _request, _params| {
        handlers::session_list(&daemon)
    });
    method!(module, SessionClose, |daemon, request, params| {
        handlers::session_close(&daemon, &request.connection, params)
    });
    method!(module, ToolsList, |daemon, _request, params| {
        handlers::tools_list(&daemon, params).await
    });
    method!(module, ToolsRegister, |daemon, request, params| {
        handlers::tools_register(&daemon, &request.connection, params)
    });
    method!(module, ToolsUnregister, |daemon, request, params| {
        handlers::tools_unregister(&daemon, &request.connection, params)
    });
    method!(module, ToolsExecute, |daemon, request, params| {
        handlers::tools_execute(&daemon, &request.connection, request.request_id, params).await
    });
    method!(module, ToolsCancel, |daemon, _request, params| {
        handlers::tools_cancel(&daemon, params)
    });
    method!(module, McpStatus, |daemon, _request, _params| {
        handlers::mcp_status(&daemon)
    });
    method!(module, IndexStatus, |daemon, _request, _params| {
        handlers::index_status(&daemon)
    });
    method!(module, PermissionsExplain, |daemon, request, params| {
        handlers::permissions_explain(&daemon, &request.connection, params).await
    });
    method!(module, ConfigReload, |daemon, _request, _params| {
        daemon.reload().await.map_err(|reason| {
            ErrorObject::invalid_params(format!(
                "the config was not reloaded (the running config is kept): {reason}"
            ))
        })
    });
    method!(module, McpRestart, |daemon, _request, params| {
        handlers::mcp_restart(&daemon, params).await
    });
    module.into()
}

/// Runs one request through the table. The answer comes back rendered, under the request's own
/// id, so the peer sends it as is (no parse and render again); beside it, the error code when
/// the answer is an error, for logs.
pub(crate) async fn call(
    methods: &Methods,
    connection: &Arc<Connection>,
    id: &toold_protocol::Id,
    method: &str,
    params: Option<Box<RawValue>>,
) -> (Reply, Option<i32>) {
    let Some(callback) = methods.method(method) else {
        let error = ErrorObject::method_not_found(method);
        let code = error.code;
        return (Reply::error(error), Some(code));
    };
    let mut extensions = Extensions::new();
    let id_text = serde_json::to_string(id).unwrap_or_else(|_| "null".to_owned());
    let handoff = Handoff(Arc::new(Mutex::new(Slot {
        context: Some(RequestContext {
            connection: Arc::clone(connection),
            request_id: id_text.clone(),
            params,
        }),
        result: None,
    })));
    extensions.insert(handoff.clone());
    // The params travel in the context; jsonrpsee's own are left empty.
    let params = Params::new(None);
    let rpc_id = match id {
        toold_protocol::Id::Number(number) => match u64::try_from(*number) {
            Ok(number) => Id::Number(number),
            // jsonrpsee numbers ids as u64: a negative one goes as a string and is put back below.
            Err(_) => Id::Str(number.to_string().into()),
        },
        toold_protocol::Id::String(text) => Id::Str(text.clone().into()),
        toold_protocol::Id::Null => Id::Null,
    };
    let negative_id = matches!(id, toold_protocol::Id::Number(number) if *number < 0);
    let connection_id = ConnectionId(usize::try_from(connection.id()).unwrap_or(usize::MAX));
    let response = match callback {
        MethodCallback::Async(callback) => {
            callback(rpc_id, params, connection_id, usize::MAX, extensions).await
        }
        MethodCallback::Sync(callback) => callback(rpc_id, params, usize::MAX, extensions),
        MethodCallback::Subscription(_) | MethodCallback::Unsubscription(_) => {
            let error = ErrorObject::method_not_found(method);
            let code = error.code;
            return (Reply::error(error), Some(code));
        }
    };
    let code = response.as_error_code();
    if let Some(result) = handoff.0.lock_unpoisoned().result.take() {
        return (Reply::Rendered(success(&id_text, &result)), code);
    }
    if !negative_id {
        return (
            Reply::Rendered(JsonText(String::from(Box::<str>::from(
                response.into_json(),
            )))),
            code,
        );
    }
    // The rare negative id: read the rendering back and answer under the real id.
    let mut envelope: Value = match serde_json::from_str(response.as_json().get()) {
        Ok(envelope) => envelope,
        Err(err) => {
            let error =
                ErrorObject::internal_error(format!("a handler produced invalid JSON: {err}"));
            return (
                Reply::error(error),
                Some(toold_protocol::error_code::INTERNAL_ERROR),
            );
        }
    };
    let outcome = match envelope.get_mut("error") {
        Some(error) => Err(serde_json::from_value(error.take()).unwrap_or_else(|err| {
            ErrorObject::internal_error(format!("a handler produced an invalid error: {err}"))
        })),
        None => Ok(envelope
            .get_mut("result")
            .map(Value::take)
            .unwrap_or(Value::Null)),
    };
    (Reply::from(outcome), code)
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}`, of an id and a result already rendered.
fn success(id: &str, result: &str) -> JsonText {
    let mut text = String::with_capacity(result.len() + id.len() + 32);
    text.push_str(r#"{"jsonrpc":"2.0","id":"#);
    text.push_str(id);
    text.push_str(r#","result":"#);
    text.push_str(result);
    text.push('}');
    JsonText(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use toold_protocol::{Empty, ExecuteParams};

    use super::*;

    fn text(json: &str) -> Option<Box<RawValue>> {
        Some(serde_json::from_str(json).unwrap())
    }

    #[test]
    fn params_are_read_from_their_text_and_refused_ones_explained_by_field() {
        let params = json!({
            "session_id": "s_1",
            "iteration": 2,
            "calls": [{"id": "a", "name": "read_file", "arguments": {"path": "x", "n": 1.5}}]
        });
        let typed: ExecuteParams = parse(text(&params.to_string())).unwrap();
        let from_value: ExecuteParams = serde_json::from_value(params.clone()).unwrap();
        assert_eq!(typed, from_value);
        let pretty = serde_json::to_string_pretty(&params).unwrap();
        assert_eq!(parse::<ExecuteParams>(text(&pretty)).unwrap(), from_value);
        assert_eq!(parse::<Empty>(None).unwrap(), Empty {});
        // A member given twice counts once, its last value, as a `Value` reads it.
        let twice = r#"{"session_id": "s_0", "calls": [], "session_id": "s_1"}"#;
        assert_eq!(
            parse::<ExecuteParams>(text(twice)).unwrap().session_id,
            "s_1"
        );

        // Refused params are read again as one compact line: the reason names the field, even
        // when the params came pretty-printed over several lines.
        let wrong_type = json!({"session_id": "s_1", "iteration": "two", "calls": []});
        for sent in [
            wrong_type.to_string(),
            serde_json::to_string_pretty(&wrong_type).unwrap(),
        ] {
            let refused = parse::<ExecuteParams>(text(&sent)).unwrap_err();
            assert_eq!(refused.code(), toold_protocol::error_code::INVALID_PARAMS);
            assert!(
                refused
                    .message()
                    .starts_with("invalid params: iteration: invalid type: string"),
                "{}",
                refused.message()
            );
        }
        let unknown = json!({"session_id": "s_1", "calls": [], "time_out_ms": 1});
        let refused = parse::<ExecuteParams>(text(&unknown.to_string())).unwrap_err();
        assert!(
            refused.message().contains("unknown field `time_out_ms`"),
            "{}",
            refused.message()
        );
    }
}
