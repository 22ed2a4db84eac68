//! The registry of tools and the execution boundary every call passes through: resolve
//! (unknown tool, argument validation), then run with a deadline, cancellation and panic
//! isolation, ending in exactly one `ToolResult`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toold_protocol::sync::RwLockUnpoisoned;
use toold_protocol::{
    ErrorType, Preview, Safety, ToolCall, ToolDefinition, ToolResult, ToolSource,
};

use super::{CallOrigin, Judged, LiveUpdate, Tool, ToolContext, ToolOutcome};
use crate::env::Env;
use crate::paths::ResolvedPath;

/// How long a tool has, once cancelled or past its deadline, to stop and hand back its partial
/// result. A tool that ignores cancellation is dropped after this, and the call ends without it.
pub(crate) const STOP_GRACE: Duration = Duration::from_millis(1_000);

/// Why a registration was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RegisterError {
    #[error(
        "the tool name {0:?} is refused: a tool name is 1 to 64 of A-Z a-z 0-9 _ . - so that \
         every permission rule can name it"
    )]
    InvalidName(String),
    #[error("a tool named {0:?} is already registered")]
    Duplicate(String),
    #[error("the input_schema of tool {name:?} is not a valid JSON Schema: {reason}")]
    InvalidSchema { name: String, reason: String },
}

/// A registered tool: its definition, its compiled schema and its implementation.
struct Entry {
    /// Shared, so that a call's recheck reads the current definition without copying its schema.
    definition: Arc<ToolDefinition>,
    /// Compiled at registration for a client's tool (an invalid schema is refused then); for a
    /// builtin, whose schema a test checks, at its first call: a daemon nobody has called yet
    /// holds no validator, nor the meta-schema validator that compiling builds (3 MiB).
    validator: OnceLock<Result<jsonschema::Validator, String>>,
    tool: Arc<dyn Tool>,
}

impl Entry {
    /// Checks arguments (an object) against the tool's schema, compiling it first if it is not
    /// yet.
    fn validate(&self, arguments: &Value) -> Result<(), super::ToolFailure> {
        let compiled = self
            .validator
            .get_or_init(|| compile_schema(&self.definition));
        match compiled {
            Ok(validator) => validate(validator, arguments),
            Err(reason) => Err(super::ToolFailure::new(
                ErrorType::InternalError,
                format!("the tool's input_schema does not compile: {reason}"),
            )),
        }
    }
}

#[derive(Default)]
struct Inner {
    tools: BTreeMap<String, Arc<Entry>>,
    revision: u64,
}

/// Every tool the daemon knows. Cheap to share: lookups take a read lock for a map access.
#[derive(Default)]
pub struct Registry {
    inner: RwLock<Inner>,
}

/// A call whose tool exists and whose arguments passed its schema: ready to run.
#[derive(Clone)]
pub struct ResolvedCall {
    pub call_id: String,
    pub arguments: Map<String, Value>,
    entry: Arc<Entry>,
}

impl ResolvedCall {
    pub(crate) fn definition(&self) -> &ToolDefinition {
        &self.entry.definition
    }

    /// What the call would change, for its approval ([`super::Tool::preview`]): blocking IO.
    pub(crate) fn preview(&self, judged: &[ResolvedPath], env: &Env) -> Option<Preview> {
        self.entry.tool.preview(&self.arguments, judged, env)
    }

    /// Replaces the arguments (a hook or an approver rewrote them), validating them again.
    pub(crate) fn replace_arguments(
        &mut self,
        arguments: Map<String, Value>,
    ) -> Result<(), ToolResult> {
        let tool = &self.entry.definition.name;
        let arguments = Value::Object(arguments);
        self.entry
            .validate(&arguments)
            .map_err(|failure| stamp(failure.into_result(tool), &self.call_id))?;
        // Always an object: wrapped above only to be validated without a copy.
        if let Value::Object(arguments) = arguments {
            self.arguments = arguments;
        }
        Ok(())
    }
}

impl Registry {
    /// A registry holding the six builtin tools, searching without a warm index.
    pub fn with_builtins() -> Self {
        Self::with_builtins_indexed(&Arc::new(crate::index::roots::Indexes::disabled()))
    }

    /// A registry holding the six builtin tools, `find_files` and `search_code` using
    /// `indexes`.
    pub(crate) fn with_builtins_indexed(indexes: &Arc<crate::index::roots::Indexes>) -> Self {
        let registry = Self::default();
        for tool in super::builtins_indexed(indexes) {
            // The builtins' names are distinct and their schemas are literals tested below.
            registry.register(tool).expect("builtin tools register");
        }
        registry
    }

    /// Adds a tool; refuses a name no rule could name, a name already taken, or an invalid schema.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<u64, RegisterError> {
        self.insert(tool, false)
    }

    /// Adds a tool, replacing any tool of the same name.
    pub fn register_or_replace(&self, tool: Arc<dyn Tool>) -> Result<u64, RegisterError> {
        self.insert(tool, true)
    }

    fn insert(&self, tool: Arc<dyn Tool>, replace: bool) -> Result<u64, RegisterError> {
        let definition = tool.definition();
        let name = definition.name.clone();
        if !is_valid_tool_name(&name) {
            return Err(RegisterError::InvalidName(name));
        }
        let validator = if definition.source == ToolSource::Builtin {
            OnceLock::new()
        } else {
            // Compiled outside the lock: compilation can take a while for large schemas.
            let compiled =
                compile_schema(&definition).map_err(|reason| RegisterError::InvalidSchema {
                    name: name.clone(),
                    reason,
                })?;
            OnceLock::from(Ok(compiled))
        };
        let entry = Arc::new(Entry {
            definition: Arc::new(definition),
            validator,
            tool,
        });
        let mut inner = self.write();
        if !replace && inner.tools.contains_key(&name) {
            return Err(RegisterError::Duplicate(name));
        }
        inner.tools.insert(name, entry);
        inner.revision += 1;
        Ok(inner.revision)
    }

    /// Removes a tool; returns whether it was there. The revision changes only if it was.
    pub fn unregister(&self, name: &str) -> bool {
        let mut inner = self.write();
        let removed = inner.tools.remove(name).is_some();
        if removed {
            inner.revision += 1;
        }
        removed
    }

    /// Removes the tool `name` only if it is still `tool` (the same registered object, not one
    /// registered since under the same name); returns whether it was removed.
    pub fn unregister_exact(&self, name: &str, tool: &Arc<dyn Tool>) -> bool {
        let mut inner = self.write();
        let same = inner
            .tools
            .get(name)
            .is_some_and(|entry| std::ptr::addr_eq(Arc::as_ptr(&entry.tool), Arc::as_ptr(tool)));
        if same {
            inner.tools.remove(name);
            inner.revision += 1;
        }
        same
    }

    /// Changes on every registration, replacement and removal; never decreases.
    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    pub fn get(&self, name: &str) -> Option<Arc<ToolDefinition>> {
        self.read()
            .tools
            .get(name)
            .map(|entry| Arc::clone(&entry.definition))
    }

    /// Every definition, sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.list(&ListFilter::default())
    }

    /// What `tools/list` returns: the definitions `filter` lets through, sorted by name (only
    /// those are cloned).
    pub fn list(&self, filter: &ListFilter<'_>) -> Vec<ToolDefinition> {
        self.read()
            .tools
            .values()
            .map(|entry| &*entry.definition)
            .filter(|definition| filter.lets_through(definition))
            .cloned()
            .collect()
    }

    /// [`Self::resolve`] against `tool`, which is not registered (a lazy MCP server's tool,
    /// judged by `permissions/explain` before the server starts): its schema checks the
    /// arguments as a registered tool's would.
    pub(crate) fn resolve_unregistered(
        call: &ToolCall,
        tool: Arc<dyn Tool>,
    ) -> Result<ResolvedCall, ToolResult> {
        let entry = Arc::new(Entry {
            definition: Arc::new(tool.definition()),
            validator: OnceLock::new(),
            tool,
        });
        Self::resolve_entry(call, entry)
    }

    /// Step "resolve": the tool exists and the arguments are a JSON object valid for its schema.
    /// The error is the call's final result.
    pub(crate) fn resolve(&self, call: &ToolCall) -> Result<ResolvedCall, ToolResult> {
        let Some(entry) = self.read().tools.get(&call.name).cloned() else {
            let failure = ToolResult::failure(
                &call.name,
                ErrorType::UnknownTool,
                format!(
                    "no tool named {:?}; tools/list shows the available tools",
                    call.name
                ),
            );
            return Err(stamp(failure, &call.id));
        };
        Self::resolve_entry(call, entry)
    }

    fn resolve_entry(call: &ToolCall, entry: Arc<Entry>) -> Result<ResolvedCall, ToolResult> {
        let tool = &entry.definition.name;
        let arguments = call.arguments_object().map_err(|reason| {
            stamp(
                ToolResult::failure(tool, ErrorType::InvalidArguments, reason),
                &call.id,
            )
        })?;
        // The call's own object is what was read, unless it came as `null` or as a string.
        let read = match &call.arguments {
            Value::Object(_) => Cow::Borrowed(&call.arguments),
            _ => Cow::Owned(Value::Object(arguments.clone())),
        };
        entry
            .validate(&read)
            .map_err(|failure| stamp(failure.into_result(tool), &call.id))?;
        Ok(ResolvedCall {
            call_id: call.id.clone(),
            arguments,
            entry,
        })
    }

    /// Resolves and runs one call: the execution boundary without the permission pipeline.
    pub async fn execute(
        &self,
        call: &ToolCall,
        env: Arc<Env>,
        cancel: CancellationToken,
        live: Option<mpsc::Sender<LiveUpdate>>,
    ) -> ToolResult {
        match self.resolve(call) {
            Ok(resolved) => {
                let options = RunOptions {
                    env,
                    judged: Judged::default(),
                    cancel,
                    live,
                    origin: None,
                };
                run_resolved(resolved, options).await
            }
            Err(failure) => failure,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the map half-changed: every write is
        // a single insert or remove. So a poisoned lock is still sound to use.
        self.inner.read_unpoisoned()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write_unpoisoned()
    }
}

/// The narrowing `tools/list` asks for (docs/protocol.md section 4); every part is optional
/// and they narrow together. The default lets everything through.
#[derive(Default)]
pub struct ListFilter<'a> {
    /// What a session's model may see (its `allowed_tools` and mode), when listing for one.
    pub visible: Option<&'a dyn Fn(&ToolDefinition) -> bool>,
    /// Only these names, plus every system tool ([`is_listed`]).
    pub allowed: Option<&'a [String]>,
    pub safety: Option<Safety>,
}

impl ListFilter<'_> {
    pub(crate) fn lets_through(&self, definition: &ToolDefinition) -> bool {
        self.visible.is_none_or(|visible| visible(definition))
            && self
                .allowed
                .is_none_or(|allowed| is_listed(definition, allowed))
            && self.safety.is_none_or(|safety| definition.safety == safety)
    }
}

/// Whether `name` is a tool name every permission rule can write: 1 to 64 ASCII letters, digits,
/// `_`, `.` or `-`. Anything else (parentheses, spaces, invisible Unicode) could be registered
/// under a name that no rule matches, or that looks like another tool's name.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether a name list lets a tool through: system tools always; otherwise an empty list (or one
/// of blank names only) restricts nothing, and names are compared trimmed.
pub(crate) fn is_listed(definition: &ToolDefinition, allowed: &[String]) -> bool {
    let mut names = allowed
        .iter()
        .map(|name| name.trim())
        .filter(|name| !name.is_empty())
        .peekable();
    definition.system || names.peek().is_none() || names.any(|name| name == definition.name)
}

/// How [`run_resolved`] runs a call: in which Env, on what the permission step judged, stopped
/// by `cancel`, its live output sent to `live`, and where it came from (`None`: a call made
/// outside a session, as `Registry::execute` makes).
pub(crate) struct RunOptions {
    pub env: Arc<Env>,
    pub judged: Judged,
    pub cancel: CancellationToken,
    pub live: Option<mpsc::Sender<LiveUpdate>>,
    pub origin: Option<CallOrigin>,
}

/// Why a running call was stopped from outside.
#[derive(Clone, Copy)]
enum StopReason {
    Canceled,
    Timeout,
}

/// Runs a resolved call with its deadline, cancellation and panic isolation.
///
/// The timeout is the call's own request (capped at `max_command_timeout_ms`), else the tool
/// definition's `timeout_ms`, else the Env's. Time spent before this point (hooks, approval)
/// does not count.
pub(crate) async fn run_resolved(resolved: ResolvedCall, options: RunOptions) -> ToolResult {
    let RunOptions {
        env,
        judged,
        cancel,
        live,
        origin,
    } = options;
    let ResolvedCall {
        call_id,
        arguments,
        entry,
    } = resolved;
    let name = entry.definition.name.clone();
    let timeout_ms = match entry.tool.requested_timeout_ms(&arguments) {
        Some(requested) => requested.min(env.max_command_timeout_ms),
        None => entry.definition.timeout_ms.unwrap_or(env.timeout_ms),
    };
    let timeout = Duration::from_millis(timeout_ms);
    let mut deadline = Instant::now() + timeout;
    let progressed = Arc::new(Notify::new());
    // The tool's own token, fired only here: were it a child of `cancel`, the tool could stop
    // and return before the select below saw the cancellation, and the call would end with the
    // tool's own failure instead of `canceled`. The guard stops the tool if this future is dropped.
    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    let ctx = ToolContext {
        call_id: call_id.clone(),
        origin,
        env,
        judged: judged.paths,
        hidden: judged.hidden,
        cancel: stop.clone(),
        deadline,
        live,
        progressed: Arc::clone(&progressed),
    };
    // Polled here rather than spawned (a task hop costs more than most tools take); a panic in
    // it is caught as one in a spawned task would be, and on a stop the future is simply dropped.
    let mut task = AssertUnwindSafe(entry.tool.run(arguments, ctx)).catch_unwind();

    let stopped = loop {
        tokio::select! {
            joined = &mut task => return stamp(finished(&name, joined), &call_id),
            () = cancel.cancelled() => break StopReason::Canceled,
            () = tokio::time::sleep_until(deadline) => break StopReason::Timeout,
            () = progressed.notified() => deadline = Instant::now() + timeout,
        }
    };

    // Tell the tool, give it a moment to stop and hand back what it has, then leave it.
    stop.cancel();
    let partial = match tokio::time::timeout(STOP_GRACE, &mut task).await {
        Ok(joined) => Some(finished(&name, joined)),
        Err(_) => None,
    };
    let result = match partial {
        // The tool finished its work after all; its result is the truth.
        Some(result) if result.ok => result,
        partial => {
            let (error_type, error) = match stopped {
                StopReason::Canceled => (ErrorType::Canceled, "the call was canceled".to_owned()),
                StopReason::Timeout => (
                    ErrorType::Timeout,
                    format!("the call timed out after {timeout_ms} ms and was stopped"),
                ),
            };
            let mut result = ToolResult::failure(&name, error_type, error);
            if let Some(partial) = partial {
                result.content = partial.content;
                result.metadata = partial.metadata;
            }
            if matches!(stopped, StopReason::Timeout) {
                result
                    .metadata
                    .insert("timeout_ms".into(), json!(timeout_ms));
            }
            result
        }
    };
    stamp(result, &call_id)
}

/// The result of a tool task that ended: its outcome, or `internal_error` for a panic.
fn finished(name: &str, joined: Result<ToolOutcome, Box<dyn std::any::Any + Send>>) -> ToolResult {
    match joined {
        Ok(Ok(output)) => {
            let mut result = ToolResult::success(name, output.content);
            result.metadata = output.metadata;
            result
        }
        Ok(Err(failure)) => failure.into_result(name),
        Err(payload) => {
            let why = panic_message(payload);
            tracing::error!(tool = name, panic = %why, "tool panicked");
            ToolResult::failure(
                name,
                ErrorType::InternalError,
                format!("the tool {name} failed internally: {why}"),
            )
        }
    }
}

/// The message a panic carried, for a result that says why.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => (*text).to_owned(),
            Err(_) => "a panic without a message".to_owned(),
        },
    }
}

/// Puts the call id into the result's metadata, as every result must carry it.
fn stamp(mut result: ToolResult, call_id: &str) -> ToolResult {
    result
        .metadata
        .insert("call_id".into(), Value::String(call_id.to_owned()));
    result
}

/// Compiles a tool's input schema. Builtin schemas use only keywords that mean the same in
/// draft 4, draft 7 and 2020-12 (a test checks each against all three meta-schemas and the
/// keywords against that list; draft 4 alone refuses `1.0` as an integer, which the tools'
/// argument types refuse anyway), and are compiled as draft 4: compiling a schema builds its
/// draft's meta-schema validator once, for good, and draft 4's takes about 3 MiB where draft 7's
/// takes 6 and 2020-12's 13. A daemon that no client has registered a tool with never builds the
/// larger ones. Every other schema follows its `$schema`, 2020-12 by default.
fn compile_schema(definition: &ToolDefinition) -> Result<jsonschema::Validator, String> {
    let compiled = if definition.source == ToolSource::Builtin {
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(&definition.input_schema)
    } else {
        jsonschema::validator_for(&definition.input_schema)
    };
    compiled.map_err(|err| err.to_string())
}

/// Checks arguments against a compiled schema; the failure lists every violation with its
/// JSON pointer in `metadata.errors`.
fn validate(
    validator: &jsonschema::Validator,
    arguments: &Value,
) -> Result<(), super::ToolFailure> {
    if validator.is_valid(arguments) {
        return Ok(());
    }
    let errors: Vec<Value> = validator
        .iter_errors(arguments)
        .map(|err| json!({"pointer": err.instance_path.to_string(), "message": err.to_string()}))
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let summary: Vec<String> = errors
        .iter()
        .map(|err| {
            let pointer = err["pointer"].as_str().unwrap_or_default();
            let message = err["message"].as_str().unwrap_or_default();
            if pointer.is_empty() {
                message.to_owned()
            } else {
                format!("{pointer}: {message}")
            }
        })
        .collect();
    Err(
        super::ToolFailure::invalid_arguments(format!("invalid arguments: {}", summary.join("; ")))
            .with_meta("errors", Value::Array(errors)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keywords whose meaning draft 4, draft 7 and 2020-12 share, as builtin schemas use
    /// them (`exclusiveMinimum`, `const`, `if` and the like changed or came later).
    const KEYWORDS_OF_EVERY_DRAFT: &[&str] = &[
        "type",
        "description",
        "default",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "pattern",
        "minItems",
        "maxItems",
    ];

    /// Every keyword of `schema` and its subschemas (property names are not keywords).
    fn keywords(schema: &Value, found: &mut Vec<String>) {
        let Some(members) = schema.as_object() else {
            return;
        };
        for (keyword, value) in members {
            found.push(keyword.clone());
            match keyword.as_str() {
                "properties" => value
                    .as_object()
                    .into_iter()
                    .flat_map(|properties| properties.values())
                    .for_each(|subschema| keywords(subschema, found)),
                "items" | "additionalProperties" => keywords(value, found),
                _ => {}
            }
        }
    }

    /// Builtins compile as draft 4 (see `compile_schema`); they must mean the same under
    /// draft 7 and under the 2020-12 default that a client's copy of them would get.
    #[test]
    fn builtin_schemas_mean_the_same_in_draft_4_7_and_2020_12() {
        for tool in crate::tools::builtins() {
            let definition = tool.definition();
            let schema = &definition.input_schema;
            let mut found = Vec::new();
            keywords(schema, &mut found);
            for keyword in found {
                assert!(
                    KEYWORDS_OF_EVERY_DRAFT.contains(&keyword.as_str()),
                    "{}: `{keyword}` is not a keyword draft 4, 7 and 2020-12 share",
                    definition.name
                );
            }
            assert!(
                jsonschema::draft4::meta::is_valid(schema),
                "{}: not draft 4",
                definition.name
            );
            assert!(
                jsonschema::draft7::meta::is_valid(schema),
                "{}: not draft 7",
                definition.name
            );
            assert!(
                jsonschema::draft202012::meta::is_valid(schema),
                "{}: not 2020-12",
                definition.name
            );
            assert!(compile_schema(&definition).is_ok(), "{}", definition.name);
        }
    }
}
