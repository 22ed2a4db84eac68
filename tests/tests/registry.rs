//! The registry and its execution boundary: registration rules, filtering, argument
//! validation, deadlines, cancellation and panic isolation, with tools written for the purpose.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use toold::tools::registry::ListFilter;
use toold::tools::{RegisterError, ToolFuture};
use toold::{Env, Registry, ToolContext, ToolSuccess};
use toold_protocol::{Safety, ToolCall, ToolDefinition, ToolResult};
use toold_tests::test_tool::TestTool;
use toold_tests::{Tree, error_type_or_ok};

/// What a test tool does when it runs.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Echoes its arguments back as content.
    Echo,
    Panic,
    /// Never finishes and never looks at its cancel token.
    IgnoreCancel,
    /// Waits for its cancel token, then hands back partial output.
    StopOnCancel,
}

impl Behaviour {
    fn run(self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(async move {
            match self {
                Behaviour::Echo => Ok(ToolSuccess::new(Value::Object(args).to_string())),
                Behaviour::Panic => panic!("the tool broke on purpose"),
                Behaviour::IgnoreCancel => std::future::pending().await,
                Behaviour::StopOnCancel => {
                    ctx.cancel.cancelled().await;
                    Err(toold::ToolFailure::new(
                        toold_protocol::ErrorType::CommandFailed,
                        "stopped",
                    )
                    .with_content("partial output"))
                }
            }
        })
    }
}

/// A test tool named `name` that does `behaviour`.
fn tool(name: &str, behaviour: Behaviour) -> TestTool {
    TestTool::new(name, move |args, ctx| behaviour.run(args, ctx))
}

fn registry_with(tools: Vec<TestTool>) -> Registry {
    let registry = Registry::default();
    for tool in tools {
        registry.register(Arc::new(tool)).unwrap();
    }
    registry
}

async fn run(registry: &Registry, env: Env, name: &str, arguments: Value) -> ToolResult {
    registry
        .execute(
            &ToolCall::new("call_x", name, arguments),
            Arc::new(env),
            CancellationToken::new(),
            None,
        )
        .await
}

fn env_with_timeout(tree: &Tree, timeout_ms: u64) -> Env {
    let mut env = tree.env();
    env.timeout_ms = timeout_ms;
    env
}

#[test]
fn register_refuses_names_no_rule_can_name_duplicates_and_bad_schemas() {
    let registry = registry_with(vec![tool("echo", Behaviour::Echo)]);
    let long: &'static str = Box::leak("a".repeat(65).into_boxed_str());
    let longest: &'static str = Box::leak("a".repeat(64).into_boxed_str());
    for name in [
        "",
        "  ",
        "x(y)",
        "run\u{200b}_command",
        "run command",
        "tool*",
        "caf\u{e9}",
        long,
    ] {
        assert_eq!(
            registry.register(Arc::new(tool(name, Behaviour::Echo))),
            Err(RegisterError::InvalidName(name.to_owned())),
            "{name:?}"
        );
    }
    for name in ["mcp__fs__read.v2", "a", longest, "A-Z_0.9"] {
        assert!(
            registry
                .register(Arc::new(tool(name, Behaviour::Echo)))
                .is_ok(),
            "{name:?}"
        );
    }
    let duplicate = registry
        .register(Arc::new(tool("echo", Behaviour::Echo)))
        .unwrap_err();
    assert_eq!(
        duplicate.to_string(),
        "a tool named \"echo\" is already registered"
    );
    let mut bad = tool("bad", Behaviour::Echo);
    bad.schema = json!({"type": "no-such-type"});
    let refused = registry.register(Arc::new(bad)).unwrap_err();
    assert!(
        matches!(&refused, RegisterError::InvalidSchema { name, .. } if name == "bad"),
        "{refused}"
    );
    assert!(registry.get("bad").is_none());
}

/// A tool is removed by its owner only while it is still the one registered under its name:
/// what replaced it stays (an MCP server restarted registers the names its predecessor had).
#[test]
fn an_exact_unregister_leaves_a_replacement_alone() {
    let registry = Registry::default();
    let first: Arc<dyn toold::tools::Tool> = Arc::new(tool("a", Behaviour::Echo));
    let second: Arc<dyn toold::tools::Tool> = Arc::new(tool("a", Behaviour::Echo));
    registry.register(Arc::clone(&first)).unwrap();
    registry.register_or_replace(Arc::clone(&second)).unwrap();
    let revision = registry.revision();
    assert!(!registry.unregister_exact("a", &first));
    assert!(registry.get("a").is_some());
    assert_eq!(
        registry.revision(),
        revision,
        "nothing removed, nothing changed"
    );
    assert!(registry.unregister_exact("a", &second));
    assert!(registry.get("a").is_none());
}

#[test]
fn every_change_moves_the_revision() {
    let registry = Registry::default();
    let mut last = registry.revision();
    let mut assert_moved = |registry: &Registry| {
        let now = registry.revision();
        assert!(now > last, "revision {now} after {last}");
        last = now;
    };
    registry
        .register(Arc::new(tool("a", Behaviour::Echo)))
        .unwrap();
    assert_moved(&registry);
    registry
        .register_or_replace(Arc::new(tool("a", Behaviour::Panic)))
        .unwrap();
    assert_moved(&registry);
    assert!(registry.unregister("a"));
    assert_moved(&registry);
    assert!(!registry.unregister("a"));
    assert_eq!(
        registry.revision(),
        last,
        "removing nothing changes nothing"
    );
}

#[test]
fn definitions_are_sorted_and_listed_through_the_tools_list_filter() {
    let mut system = tool("session_info", Behaviour::Echo);
    system.system = true;
    let mut side_effect = tool("mid", Behaviour::Echo);
    side_effect.safety = Safety::SideEffect;
    let registry = registry_with(vec![
        tool("zeta", Behaviour::Echo),
        tool("alpha", Behaviour::Echo),
        system,
        side_effect,
    ]);
    let names = |definitions: Vec<ToolDefinition>| {
        definitions.into_iter().map(|d| d.name).collect::<Vec<_>>()
    };
    assert_eq!(
        names(registry.definitions()),
        ["alpha", "mid", "session_info", "zeta"]
    );
    let allowed = |list: &[&str]| list.iter().map(|name| name.to_string()).collect::<Vec<_>>();
    let named = |list: &[String]| {
        names(registry.list(&ListFilter {
            allowed: Some(list),
            ..ListFilter::default()
        }))
    };
    assert_eq!(
        named(&allowed(&["zeta", "alpha", "zeta"])),
        ["alpha", "session_info", "zeta"]
    );
    assert_eq!(named(&[]), ["alpha", "mid", "session_info", "zeta"]);
    assert_eq!(
        named(&allowed(&["", " "])).len(),
        4,
        "blank names restrict nothing"
    );
    assert_eq!(named(&allowed(&["nope"])), ["session_info"]);
    let of_safety = |safety| {
        names(registry.list(&ListFilter {
            safety: Some(safety),
            ..ListFilter::default()
        }))
    };
    assert_eq!(of_safety(Safety::SideEffect), ["mid"]);
    let read_only_and_named = registry.list(&ListFilter {
        visible: Some(&|definition: &ToolDefinition| definition.name != "zeta"),
        allowed: Some(&allowed(&["zeta", "alpha", "mid"])),
        safety: Some(Safety::ReadOnly),
    });
    assert_eq!(names(read_only_and_named), ["alpha", "session_info"]);
}

#[test]
fn the_builtins_are_the_six_tools_with_their_safety() {
    let registry = Registry::with_builtins();
    let safeties: Vec<(String, Safety)> = registry
        .definitions()
        .into_iter()
        .map(|d| (d.name, d.safety))
        .collect();
    assert_eq!(
        safeties,
        [
            ("edit_file".to_owned(), Safety::SideEffect),
            ("find_files".to_owned(), Safety::ReadOnly),
            ("read_file".to_owned(), Safety::ReadOnly),
            ("run_command".to_owned(), Safety::SideEffect),
            ("search_code".to_owned(), Safety::ReadOnly),
            ("write_file".to_owned(), Safety::SideEffect),
        ]
    );
}

#[tokio::test]
async fn unknown_tools_get_a_result_naming_them() {
    let tree = Tree::new(&[]);
    let result = run(&Registry::with_builtins(), tree.env(), "rm_rf", json!({})).await;
    assert_eq!(error_type_or_ok(&result), "unknown_tool");
    assert_eq!(result.tool, "rm_rf");
    assert_eq!(result.metadata["call_id"], "call_x");
    assert!(result.error.as_deref().unwrap().contains("\"rm_rf\""));
}

#[tokio::test]
async fn arguments_come_as_an_object_or_a_json_string() {
    let tree = Tree::new(&[]);
    let registry = registry_with(vec![tool("echo", Behaviour::Echo)]);
    let object = run(&registry, tree.env(), "echo", json!({"a": 1})).await;
    let string = run(&registry, tree.env(), "echo", json!("{\"a\": 1}")).await;
    assert_eq!(object.content, r#"{"a":1}"#);
    assert_eq!(string.content, object.content);
    let broken = run(&registry, tree.env(), "echo", json!("{\"a\": ")).await;
    assert_eq!(error_type_or_ok(&broken), "invalid_arguments");
    assert!(broken.error.as_deref().unwrap().contains("not valid JSON"));
    let array = run(&registry, tree.env(), "echo", json!([1, 2])).await;
    assert_eq!(error_type_or_ok(&array), "invalid_arguments");
}

#[tokio::test]
async fn schema_violations_list_pointers_and_messages() {
    let tree = Tree::new(&[]);
    let mut strict = tool("strict", Behaviour::Echo);
    strict.schema = json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
        "required": ["s"],
        "additionalProperties": false
    });
    let registry = registry_with(vec![strict]);
    let result = run(
        &registry,
        tree.env(),
        "strict",
        json!({"n": 0, "extra": true}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "invalid_arguments");
    let errors = result.metadata["errors"].as_array().unwrap();
    let pointers: Vec<&str> = errors
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/n"), "{errors:?}");
    assert!(
        pointers.contains(&""),
        "the missing and extra properties are reported at the root: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| !e["message"].as_str().unwrap().is_empty())
    );
    assert_eq!(
        error_type_or_ok(&run(&registry, tree.env(), "strict", json!({"n": 2, "s": "ok"})).await),
        "ok"
    );
}

#[tokio::test]
async fn a_panic_becomes_internal_error_and_the_runtime_keeps_working() {
    let tree = Tree::new(&[]);
    let registry = registry_with(vec![
        tool("boom", Behaviour::Panic),
        tool("echo", Behaviour::Echo),
    ]);
    let result = run(&registry, tree.env(), "boom", json!({})).await;
    assert_eq!(error_type_or_ok(&result), "internal_error");
    assert!(
        result
            .error
            .as_deref()
            .unwrap()
            .contains("the tool broke on purpose")
    );
    assert_eq!(result.metadata["call_id"], "call_x");
    assert_eq!(
        error_type_or_ok(&run(&registry, tree.env(), "echo", json!({})).await),
        "ok"
    );
}

#[tokio::test]
async fn a_tool_that_ignores_its_deadline_cannot_hold_the_caller() {
    let tree = Tree::new(&[]);
    let registry = registry_with(vec![tool("stuck", Behaviour::IgnoreCancel)]);
    let started = Instant::now();
    let result = run(&registry, env_with_timeout(&tree, 100), "stuck", json!({})).await;
    assert_eq!(error_type_or_ok(&result), "timeout");
    assert_eq!(result.metadata["timeout_ms"], 100);
    assert!(result.error.as_deref().unwrap().contains("100 ms"));
    // The deadline, then at most the stop grace: never the tool's forever.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "held for {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn timeout_and_cancellation_are_different_and_keep_partial_output() {
    let tree = Tree::new(&[]);
    let registry = registry_with(vec![tool("slow", Behaviour::StopOnCancel)]);
    let timed_out = run(&registry, env_with_timeout(&tree, 50), "slow", json!({})).await;
    assert_eq!(error_type_or_ok(&timed_out), "timeout");
    assert_eq!(timed_out.content, "partial output");

    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        canceller.cancel();
    });
    let call = ToolCall::new("call_y", "slow", json!({}));
    let canceled = registry
        .execute(&call, Arc::new(tree.env()), cancel, None)
        .await;
    assert_eq!(error_type_or_ok(&canceled), "canceled");
    assert_eq!(canceled.content, "partial output");
    assert_eq!(canceled.metadata["call_id"], "call_y");
}

#[tokio::test]
async fn the_tool_definitions_timeout_overrides_the_envs() {
    let tree = Tree::new(&[]);
    let mut quick = tool("quick", Behaviour::StopOnCancel);
    quick.timeout_ms = Some(30);
    let registry = registry_with(vec![quick]);
    let result = run(
        &registry,
        env_with_timeout(&tree, 600_000),
        "quick",
        json!({}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "timeout");
    assert_eq!(result.metadata["timeout_ms"], 30);
}

#[tokio::test]
async fn an_already_canceled_call_does_not_wait_for_its_deadline() {
    let tree = Tree::new(&[]);
    let registry = registry_with(vec![tool("slow", Behaviour::StopOnCancel)]);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let call = ToolCall::new("c", "slow", json!({}));
    let result = registry
        .execute(
            &call,
            Arc::new(env_with_timeout(&tree, 600_000)),
            cancel,
            None,
        )
        .await;
    assert_eq!(error_type_or_ok(&result), "canceled");
}
