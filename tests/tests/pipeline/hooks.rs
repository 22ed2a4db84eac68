//! Hooks, a client's and programs: what they block, allow, rewrite and add, programs' exit codes
//! and JSON, and a hook program that hangs or is missing.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold::hooks::{ClientHooks, ConfiguredHook, HookFuture};
use toold::pipeline::{BatchSettings, Pipeline};
use toold_protocol::{
    CallOutcome, HookEvent, PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer,
    PreToolUseDecision, PreToolUseParams, Rules, SessionMode,
};
use toold_tests::Tree;
use toold_tests::daemon::shell_parser;

use super::{Harness, call, outcomes, rules};

/// A client hook with a fixed PreToolUse answer (or error) and PostToolUse context.
struct FixedHooks {
    pre: Result<PreToolUseAnswer, String>,
    post: Option<String>,
}

impl ClientHooks for FixedHooks {
    fn handles(&self, _event: HookEvent) -> bool {
        true
    }

    fn describe(&self) -> String {
        "a fixed hook".to_owned()
    }

    fn pre_tool_use(&self, _params: PreToolUseParams) -> HookFuture<PreToolUseAnswer> {
        let pre = self.pre.clone();
        Box::pin(async move { pre })
    }

    fn post_tool_use(&self, _params: PostToolUseParams) -> HookFuture<PostToolUseAnswer> {
        let post = self.post.clone();
        Box::pin(async move {
            Ok(PostToolUseAnswer {
                additional_context: post,
            })
        })
    }
}

#[tokio::test]
async fn a_hook_block_still_emits_the_result_events() {
    let harness = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let mut blocked = PreToolUseAnswer::new(PreToolUseDecision::Block);
    blocked.reason = Some("no commands on Fridays".into());
    harness.client_hooks(Arc::new(FixedHooks {
        pre: Ok(blocked),
        post: Some("logged".into()),
    }));
    let results = harness
        .run(vec![call(
            "1",
            "run_command",
            json!({"command": "touch ran"}),
        )])
        .await;
    assert_eq!(outcomes(&results), ["hook_blocked"]);
    assert_eq!(
        results[0].result.error.as_deref(),
        Some("no commands on Fridays")
    );
    assert_eq!(
        results[0].result.metadata["additional_context"], "logged",
        "post hooks see every result"
    );
    assert!(!harness.tree.path("ran").exists());
    let methods: Vec<String> = harness
        .event_trace()
        .into_iter()
        .map(|(method, _)| method)
        .collect();
    assert_eq!(
        methods,
        [
            "batch/start",
            "tool/call_start",
            "tool/result",
            "tool/call_done",
            "batch/done"
        ]
    );
}

#[tokio::test]
async fn a_failing_client_hook_blocks_and_an_allowing_one_skips_the_approval() {
    let harness = Harness::new(
        &[],
        rules(&[], &["run_command(git push *)"], &[]),
        SessionMode::Default,
    );
    harness.client_hooks(Arc::new(FixedHooks {
        pre: Err("the client went away".into()),
        post: None,
    }));
    let results = harness
        .run(vec![call("1", "run_command", json!({"command": "true"}))])
        .await;
    assert_eq!(outcomes(&results), ["hook_blocked"]);
    assert!(
        results[0]
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("the client went away")
    );

    harness.client_hooks(Arc::new(FixedHooks {
        pre: Ok(PreToolUseAnswer::new(PreToolUseDecision::Allow)),
        post: None,
    }));
    let results = harness
        .run(vec![
            call("2", "run_command", json!({"command": "true"})),
            call("3", "run_command", json!({"command": "git push x"})),
        ])
        .await;
    assert_eq!(
        outcomes(&results),
        ["ok", "permission_denied"],
        "an allow skips the ask, never an ask rule"
    );
}

/// Writes an executable hook script into the tree and returns its configuration.
fn hook_program(
    tree: &Tree,
    name: &str,
    event: HookEvent,
    script: &str,
    timeout_ms: Option<u64>,
) -> ConfiguredHook {
    let path = tree.path(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    ConfiguredHook {
        event,
        matcher: Some(regex::Regex::new("^run_command$").unwrap()),
        command: vec![path.display().to_string()],
        timeout: timeout_ms.map(Duration::from_millis),
    }
}

async fn with_program(
    script: &str,
    timeout_ms: Option<u64>,
    command: &str,
) -> (CallOutcome, Harness) {
    let probe = Harness::new(&[], Rules::default(), SessionMode::Default);
    let hook = hook_program(
        &probe.tree,
        "hook.sh",
        HookEvent::PreToolUse,
        script,
        timeout_ms,
    );
    let harness = Harness {
        pipeline: Arc::new(Pipeline::with_settings(
            probe.pipeline.registry.clone(),
            shell_parser(),
            BatchSettings {
                hooks: vec![hook],
                ..BatchSettings::default()
            },
        )),
        ..probe
    };
    let result = harness
        .run(vec![call("1", "run_command", json!({"command": command}))])
        .await
        .remove(0);
    (result, harness)
}

#[tokio::test]
async fn hook_programs_decide_with_exit_codes_and_json() {
    let (blocked, _) = with_program("echo 'not allowed here' >&2; exit 2", None, "true").await;
    assert_eq!(
        blocked.result.error_type.as_ref().unwrap().to_string(),
        "hook_blocked"
    );
    assert_eq!(blocked.result.error.as_deref(), Some("not allowed here"));

    let (allowed, _) = with_program(
        "cat >/dev/null; echo '{\"decision\":\"allow\"}'",
        None,
        "echo ran",
    )
    .await;
    assert!(
        allowed.result.ok,
        "an allow from a hook runs a call that would ask: {:?}",
        allowed.result
    );

    let (rewritten, _) = with_program(
        "cat >/dev/null; echo '{\"decision\":\"allow\",\"arguments\":{\"command\":\"echo rewritten\"}}'",
        None,
        "echo original",
    )
    .await;
    assert_eq!(rewritten.result.content, "rewritten\n");

    let (invalid, _) = with_program(
        "echo '{\"decision\":\"allow\",\"arguments\":{\"command\":5}}'",
        None,
        "true",
    )
    .await;
    assert_eq!(
        invalid.result.error_type.as_ref().unwrap().to_string(),
        "invalid_arguments"
    );

    let (silent, _) = with_program("exit 0", None, "true").await;
    assert_eq!(
        silent.result.error_type.as_ref().unwrap().to_string(),
        "permission_denied",
        "continue, then the rules ask"
    );

    for (script, why) in [
        ("echo junk", "not a PreToolUse decision"),
        ("exit 3", "exited with 3"),
        ("kill -9 $$", "signal"),
    ] {
        let (failed, _) = with_program(script, None, "true").await;
        assert_eq!(
            failed.result.error_type.as_ref().unwrap().to_string(),
            "hook_blocked",
            "{script}"
        );
        assert!(
            failed.result.error.as_deref().unwrap().contains(why),
            "{script}: {:?}",
            failed.result.error
        );
    }
}

#[tokio::test]
async fn a_hook_program_that_hangs_is_killed_with_its_children() {
    let marker = format!("toold-hook-sleeper-{}", std::process::id());
    let script = format!("sleep 300 & exec -a {marker} sleep 300");
    let (result, _harness) = with_program(&script, Some(300), "true").await;
    assert_eq!(
        result.result.error_type.as_ref().unwrap().to_string(),
        "hook_blocked"
    );
    assert!(
        result
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("no answer within 300 ms")
    );
    let alive = !toold_tests::procs::live_processes_with(&marker).is_empty();
    assert!(!alive, "the hook's process outlived its timeout");
}

#[tokio::test]
async fn a_missing_hook_program_blocks() {
    let harness = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let hook = ConfiguredHook {
        event: HookEvent::PreToolUse,
        matcher: None,
        command: vec!["/nonexistent/hook".into()],
        timeout: None,
    };
    let harness = Harness {
        pipeline: Arc::new(Pipeline::with_settings(
            harness.pipeline.registry.clone(),
            shell_parser(),
            BatchSettings {
                hooks: vec![hook],
                ..BatchSettings::default()
            },
        )),
        ..harness
    };
    let results = harness
        .run(vec![call("1", "run_command", json!({"command": "true"}))])
        .await;
    assert_eq!(outcomes(&results), ["hook_blocked"]);
    assert!(
        results[0]
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("cannot start /nonexistent/hook")
    );
}

#[tokio::test]
async fn post_hook_programs_add_context_and_their_failures_change_nothing() {
    let probe = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let good = hook_program(
        &probe.tree,
        "post.sh",
        HookEvent::PostToolUse,
        "cat >/dev/null; echo '{\"additional_context\":\"checked\"}'",
        None,
    );
    let bad = hook_program(
        &probe.tree,
        "bad.sh",
        HookEvent::PostToolUse,
        "exit 1",
        None,
    );
    let harness = Harness {
        pipeline: Arc::new(Pipeline::with_settings(
            probe.pipeline.registry.clone(),
            shell_parser(),
            BatchSettings {
                hooks: vec![good, bad],
                ..BatchSettings::default()
            },
        )),
        ..probe
    };
    let results = harness
        .run(vec![call(
            "1",
            "run_command",
            json!({"command": "echo hi"}),
        )])
        .await;
    assert_eq!(outcomes(&results), ["ok"]);
    assert_eq!(results[0].result.metadata["additional_context"], "checked");
}

#[tokio::test]
async fn a_hook_that_rewrites_arguments_into_something_denied_is_refused() {
    let harness = Harness::new(
        &[(".env", "K=V"), ("a.txt", "A")],
        rules(&[], &[], &["read_file(.env)"]),
        SessionMode::Default,
    );
    let mut rewrite = PreToolUseAnswer::new(PreToolUseDecision::Allow);
    rewrite.arguments = Some(json!({"path": ".env"}).as_object().unwrap().clone());
    harness.client_hooks(Arc::new(FixedHooks {
        pre: Ok(rewrite),
        post: None,
    }));
    let results = harness
        .run(vec![call("1", "read_file", json!({"path": "a.txt"}))])
        .await;
    assert_eq!(outcomes(&results), ["permission_denied"]);
    assert!(
        results[0]
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("read_file(.env)")
    );
}
