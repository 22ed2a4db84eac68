//! How a batch is planned and run: read-only calls together, side effects alone (also in plan
//! mode), unknown tools and asking reads alone, results in call order, and the events that
//! frame every call and stream a command's output.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pretty_assertions::assert_eq;
use serde_json::json;
use toold::pipeline::{BatchSettings, Pipeline};
use toold_protocol::{Event, Rules, Safety, SessionMode};
use toold_tests::daemon::shell_parser;

use super::{Act, Harness, call, outcomes, plan_of, rules, tool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_calls_run_at_the_same_time() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let tool = tool("rendezvous", Safety::ReadOnly, Act::Rendezvous(barrier));
    let harness = Harness::with(
        &[],
        Rules::default(),
        SessionMode::Default,
        vec![tool],
        Vec::new(),
    );
    let results = harness
        .run(vec![
            call("a", "rendezvous", json!({})),
            call("b", "rendezvous", json!({})),
        ])
        .await;
    assert_eq!(outcomes(&results), ["ok", "ok"], "{results:?}");
    assert_eq!(plan_of(&harness), [vec![0, 1]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_effect_calls_never_overlap() {
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let act = Act::Exclusive {
        running,
        most: most.clone(),
    };
    let tool = tool("exclusive", Safety::SideEffect, act);
    let harness = Harness::with(
        &[],
        rules(&["exclusive"], &[], &[]),
        SessionMode::Default,
        vec![tool],
        Vec::new(),
    );
    let calls = (0..4)
        .map(|n| call(&format!("c{n}"), "exclusive", json!({})))
        .collect();
    let results = harness.run(calls).await;
    assert_eq!(outcomes(&results), ["ok"; 4]);
    assert_eq!(most.load(Ordering::SeqCst), 1);
    assert_eq!(plan_of(&harness), [vec![0], vec![1], vec![2], vec![3]]);
}

#[tokio::test]
async fn results_come_in_call_order_whatever_finishes_first() {
    let sleeper = tool("sleepy_read", Safety::ReadOnly, Act::Sleep);
    let harness = Harness::with(
        &[("d.txt", "D")],
        rules(&["write_file"], &[], &[]),
        SessionMode::Default,
        vec![sleeper],
        Vec::new(),
    );
    let results = harness
        .run(vec![
            call("A", "sleepy_read", json!({"ms": 300, "label": "A"})),
            call("B", "search_code", json!({"pattern": "D"})),
            call("C", "write_file", json!({"path": "c.txt", "content": "C"})),
            call("D", "read_file", json!({"path": "d.txt"})),
        ])
        .await;
    let ids: Vec<&str> = results
        .iter()
        .map(|outcome| outcome.call_id.as_str())
        .collect();
    assert_eq!(ids, ["A", "B", "C", "D"]);
    assert_eq!(outcomes(&results), ["ok", "ok", "ok", "ok"], "{results:?}");
    assert_eq!(results[0].result.content, "A");
    assert_eq!(plan_of(&harness), [vec![0, 1], vec![2], vec![3]]);
    // B finished first: its events come before A's result.
    let trace = harness.event_trace();
    let position = |method: &str, id: &str| {
        trace
            .iter()
            .position(|(m, c)| m == method && c == id)
            .unwrap()
    };
    assert!(
        position("tool/call_done", "B") < position("tool/result", "A"),
        "{trace:?}"
    );
}

#[tokio::test]
async fn events_frame_every_call_and_seq_only_grows() {
    let harness = Harness::new(&[("a.txt", "A")], Rules::default(), SessionMode::Default);
    harness
        .run(vec![
            call("r", "read_file", json!({"path": "a.txt"})),
            call("u", "no_such_tool", json!({})),
        ])
        .await;
    let trace = harness.event_trace();
    let methods: Vec<&str> = trace.iter().map(|(method, _)| method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "batch/start",
            "tool/call_start",
            "tool/result",
            "tool/call_done",
            "tool/call_start",
            "tool/result",
            "tool/call_done",
            "batch/done"
        ]
    );
    let seqs: Vec<u64> = harness.events.events().iter().map(Event::seq).collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    assert!(
        harness
            .events
            .events()
            .iter()
            .all(|event| event.batch_id() == "b_1" && event.session_id() == "s_test")
    );
}

#[tokio::test]
async fn unknown_tools_and_asking_reads_are_planned_alone() {
    let harness = Harness::new(&[("a.txt", "A")], Rules::default(), SessionMode::Default);
    let results = harness
        .run(vec![
            call("1", "read_file", json!({"path": "a.txt"})),
            call("2", "nope", json!({})),
            call("3", "read_file", json!({"path": "a.txt"})),
            call("4", "read_file", json!({"path": "/etc/hostname"})),
            call("5", "find_files", json!({"pattern": "*"})),
        ])
        .await;
    assert_eq!(
        plan_of(&harness),
        [vec![0], vec![1], vec![2], vec![3], vec![4]]
    );
    assert_eq!(
        outcomes(&results),
        ["ok", "unknown_tool", "ok", "permission_denied", "ok"]
    );
    assert!(
        results[3]
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("no approver is attached")
    );
}

#[tokio::test]
async fn command_output_streams_as_events_up_to_the_limit() {
    let probe = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let mut settings = BatchSettings::default();
    settings.limits.max_stream_bytes = 1000;
    let pipeline =
        Pipeline::with_settings(probe.pipeline.registry.clone(), shell_parser(), settings);
    let harness = Harness {
        pipeline: Arc::new(pipeline),
        ..probe
    };
    let results = harness
        .run(vec![call(
            "1",
            "run_command",
            json!({"command": "head -c 5000 /dev/zero | tr '\\0' x"}),
        )])
        .await;
    assert_eq!(outcomes(&results), ["ok"]);
    let outputs: Vec<_> = harness
        .events
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::Output(params) => Some(params.body),
            _ => None,
        })
        .collect();
    let streamed: usize = outputs.iter().map(|output| output.data.len()).sum();
    assert_eq!(streamed, 1000);
    assert!(outputs.last().unwrap().truncated);
    assert_eq!(outputs.iter().filter(|output| output.truncated).count(), 1);
    let trace = harness.event_trace();
    let first_output = trace
        .iter()
        .position(|(method, _)| method == "tool/output")
        .unwrap();
    let result = trace
        .iter()
        .position(|(method, _)| method == "tool/result")
        .unwrap();
    assert!(first_output < result);
}

#[tokio::test]
async fn plan_mode_keeps_reads_concurrent_and_side_effects_alone() {
    let harness = Harness::new(&[("a.txt", "A")], Rules::default(), SessionMode::Plan);
    let results = harness
        .run(vec![
            call("1", "read_file", json!({"path": "a.txt"})),
            call("2", "read_file", json!({"path": "a.txt"})),
            call("3", "write_file", json!({"path": "b.txt", "content": "B"})),
            call("4", "run_command", json!({"command": "ls"})),
        ])
        .await;
    assert_eq!(plan_of(&harness), [vec![0, 1], vec![2], vec![3]]);
    assert_eq!(
        outcomes(&results),
        ["ok", "ok", "tool_not_allowed", "tool_not_allowed"]
    );
}
