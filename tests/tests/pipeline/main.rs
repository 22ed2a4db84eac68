//! The call pipeline end to end, in process: batch plans and concurrency, result order, events,
//! permissions with approvals, hooks (client and program), the recheck and cancellation.

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};
use toold::approval::{ApprovalFuture, ApprovalReply, Approver};
use toold::events::CollectingListener;
use toold::hooks::{ClientHooks, ConfiguredHook, HookFuture};
use toold::pipeline::Executor;
use toold::pipeline::batch::{Batch, BatchControl};
use toold::pipeline::session::{Session, SessionPeers, SessionState};
use toold::tools::ToolFuture;
use toold::{Registry, ToolOutput};
use toold_protocol::{
    ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, CallOutcome, Event, HookEvent,
    PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer, PreToolUseDecision, PreToolUseParams,
    Rules, Safety, SessionMode, ToolCall,
};
use toold_tests::Tree;
use toold_tests::daemon::shell_parser;
use toold_tests::test_tool::TestTool;

// ---------------------------------------------------------------------------------------------
// Test tools

/// What a test tool does.
#[derive(Clone)]
enum Act {
    /// Waits until `parties` calls are inside at once; fails if they never are.
    Rendezvous(Arc<tokio::sync::Barrier>),
    /// Counts how many run at once, keeping the most ever seen.
    Exclusive {
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    },
    /// Sleeps `ms` from its arguments, then echoes `label`.
    Sleep,
}

impl Act {
    fn run(self, args: Map<String, Value>) -> ToolFuture {
        Box::pin(async move {
            match self {
                Act::Rendezvous(barrier) => {
                    match tokio::time::timeout(Duration::from_secs(10), barrier.wait()).await {
                        Ok(_) => Ok(ToolOutput::new("met")),
                        Err(_) => Err(toold::ToolFailure::new(
                            toold_protocol::ErrorType::Timeout,
                            "the other call never came",
                        )),
                    }
                }
                Act::Exclusive { running, most } => {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(ToolOutput::new("done"))
                }
                Act::Sleep => {
                    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(ToolOutput::new(
                        args.get("label")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                    ))
                }
            }
        })
    }
}

/// A test tool named `name` of `safety` that does `act`.
fn tool(name: &str, safety: Safety, act: Act) -> TestTool {
    TestTool::new(name, move |args, _ctx| act.clone().run(args)).with_safety(safety)
}

// ---------------------------------------------------------------------------------------------
// Approvers and client hooks

/// Answers every approval request with the next scripted reply, recording the requests. A
/// reply of `None` never answers.
#[derive(Default)]
struct ScriptedApprover {
    replies: Mutex<Vec<Option<ApprovalReply>>>,
    requests: Mutex<Vec<ApprovalRequestParams>>,
    /// Run when a request arrives, before answering (to change the session meanwhile).
    on_request: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl ScriptedApprover {
    fn answering(replies: Vec<Option<ApprovalReply>>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies),
            ..Default::default()
        })
    }

    fn requests(&self) -> Vec<ApprovalRequestParams> {
        self.requests.lock().unwrap().clone()
    }
}

impl Approver for ScriptedApprover {
    fn request(&self, params: ApprovalRequestParams) -> ApprovalFuture {
        self.requests.lock().unwrap().push(params);
        if let Some(hook) = self.on_request.lock().unwrap().as_ref() {
            hook();
        }
        let reply = {
            let mut replies = self.replies.lock().unwrap();
            if replies.is_empty() {
                None
            } else {
                replies.remove(0)
            }
        };
        Box::pin(async move {
            match reply {
                Some(reply) => reply,
                None => std::future::pending().await,
            }
        })
    }
}

fn answer(decision: ApprovalDecision) -> Option<ApprovalReply> {
    Some(ApprovalReply::Answer(ApprovalAnswer::new(decision)))
}

/// A client hook with a fixed PreToolUse answer (or error) and PostToolUse context.
struct FixedHooks {
    pre: Result<PreToolUseAnswer, String>,
    post: Option<String>,
}

impl ClientHooks for FixedHooks {
    fn handles(&self, _event: HookEvent) -> bool {
        true
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

// ---------------------------------------------------------------------------------------------
// The harness

struct Harness {
    tree: Tree,
    executor: Arc<Executor>,
    session: Arc<Session>,
    events: Arc<CollectingListener>,
}

impl Harness {
    fn new(files: &[(&str, &str)], rules: Rules, mode: SessionMode) -> Self {
        Self::with(files, rules, mode, Vec::new(), Vec::new())
    }

    fn with(
        files: &[(&str, &str)],
        rules: Rules,
        mode: SessionMode,
        tools: Vec<TestTool>,
        hooks: Vec<ConfiguredHook>,
    ) -> Self {
        let tree = Tree::new(files);
        let registry = Registry::with_builtins();
        for tool in tools {
            registry.register(Arc::new(tool)).unwrap();
        }
        let mut executor = Executor::new(Arc::new(registry), shell_parser());
        executor.hooks = hooks;
        executor.limits.approval_timeout = Duration::from_secs(20);
        let state = SessionState::new(
            tree.env(),
            mode,
            rules,
            &Rules::default(),
            std::path::Path::new("/home/user"),
        )
        .unwrap();
        let events = Arc::new(CollectingListener::default());
        let session = Arc::new(Session::new("s_test", state, events.clone(), 0));
        Self {
            tree,
            executor: Arc::new(executor),
            session,
            events,
        }
    }

    fn approver(&self, approver: Arc<dyn Approver>) {
        let peers = self.session.peers();
        self.session.set_peers(SessionPeers {
            approver: Some(approver),
            ..peers
        });
    }

    fn client_hooks(&self, hooks: Arc<dyn ClientHooks>) {
        let peers = self.session.peers();
        self.session.set_peers(SessionPeers {
            hooks: vec![hooks],
            ..peers
        });
    }

    async fn run(&self, calls: Vec<ToolCall>) -> Vec<CallOutcome> {
        self.run_with(calls, &BatchControl::new(0)).await
    }

    async fn run_with(&self, calls: Vec<ToolCall>, control: &BatchControl) -> Vec<CallOutcome> {
        let control = if control.calls.len() == calls.len() {
            control.clone()
        } else {
            BatchControl::new(calls.len())
        };
        let batch = Batch {
            id: "b_1".into(),
            iteration: 1,
            calls,
        };
        self.executor
            .run_batch(&self.session, batch, &control)
            .await
    }

    /// (method, call id) of every event, in order.
    fn event_trace(&self) -> Vec<(String, String)> {
        self.events
            .events()
            .iter()
            .map(|event| {
                let call_id = event.call_id().unwrap_or_default().to_owned();
                (event.method().to_owned(), call_id)
            })
            .collect()
    }
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

fn outcomes(results: &[CallOutcome]) -> Vec<String> {
    results
        .iter()
        .map(|outcome| {
            outcome
                .result
                .error_type
                .as_ref()
                .map_or("ok".to_owned(), ToString::to_string)
        })
        .collect()
}

fn rules(allow: &[&str], ask: &[&str], deny: &[&str]) -> Rules {
    let strings = |list: &[&str]| list.iter().map(|rule| rule.to_string()).collect();
    Rules {
        allow: strings(allow),
        ask: strings(ask),
        deny: strings(deny),
    }
}

fn plan_of(harness: &Harness) -> Vec<Vec<usize>> {
    match &harness.events.events()[0] {
        Event::BatchStart(params) => params.body.plan.clone(),
        other => panic!("the first event is {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Scheduling and order

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

// ---------------------------------------------------------------------------------------------
// Permissions and approvals

#[tokio::test]
async fn approvals_allow_deny_and_remember() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    let mut deny = ApprovalAnswer::new(ApprovalDecision::Deny);
    deny.message = Some("not today".into());
    let approver = ScriptedApprover::answering(vec![
        answer(ApprovalDecision::AllowOnce),
        Some(ApprovalReply::Answer(deny)),
        answer(ApprovalDecision::AllowSession),
    ]);
    harness.approver(approver.clone());
    let results = harness
        .run(vec![
            call(
                "1",
                "write_file",
                json!({"path": "one.txt", "content": "1"}),
            ),
            call(
                "2",
                "write_file",
                json!({"path": "two.txt", "content": "2"}),
            ),
            call("3", "run_command", json!({"command": "echo hi"})),
            call("4", "run_command", json!({"command": "echo hi"})),
        ])
        .await;
    assert_eq!(
        outcomes(&results),
        ["ok", "permission_denied", "ok", "ok"],
        "{results:?}"
    );
    assert_eq!(results[1].result.error.as_deref(), Some("not today"));
    assert!(!harness.tree.path("two.txt").exists());
    assert_eq!(
        approver.requests().len(),
        3,
        "the grant answered the fourth call"
    );
    assert_eq!(harness.session.state().grants, ["run_command(echo hi)"]);
    let request = &approver.requests()[2];
    assert_eq!(request.suggestions, ["run_command(echo hi)"]);
    assert_eq!(request.safety, Safety::SideEffect);
    assert!(
        request.reason.contains("no allow rule matches"),
        "{}",
        request.reason
    );
    let resolved: Vec<_> = harness
        .events
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ApprovalResolved(params) => Some((params.body.call_id, params.body.decision)),
            _ => None,
        })
        .collect();
    assert_eq!(
        resolved,
        [
            ("1".to_owned(), Some(ApprovalDecision::AllowOnce)),
            ("2".to_owned(), Some(ApprovalDecision::Deny)),
            ("3".to_owned(), Some(ApprovalDecision::AllowSession)),
        ]
    );
}

#[tokio::test]
async fn abort_cancels_the_rest_of_the_batch() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    harness.approver(ScriptedApprover::answering(vec![answer(
        ApprovalDecision::Abort,
    )]));
    let results = harness
        .run(vec![
            call(
                "1",
                "write_file",
                json!({"path": "one.txt", "content": "1"}),
            ),
            call(
                "2",
                "write_file",
                json!({"path": "two.txt", "content": "2"}),
            ),
            call("3", "read_file", json!({"path": "one.txt"})),
        ])
        .await;
    assert_eq!(
        outcomes(&results),
        ["permission_canceled", "canceled", "canceled"]
    );
    assert!(!harness.tree.path("one.txt").exists() && !harness.tree.path("two.txt").exists());
    let trace = harness.event_trace();
    assert_eq!(
        trace
            .iter()
            .filter(|(method, _)| method == "tool/call_done")
            .count(),
        3,
        "{trace:?}"
    );
}

#[tokio::test]
async fn failed_silent_and_vanished_approvers_cancel_the_permission() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    let approver = ScriptedApprover::answering(vec![
        Some(ApprovalReply::Failed(
            "the answer was not an approval".into(),
        )),
        Some(ApprovalReply::Disconnected),
        None,
    ]);
    harness.approver(approver);
    let mut executor = Executor::new(harness.executor.registry.clone(), shell_parser());
    executor.limits.approval_timeout = Duration::from_millis(200);
    let executor = Arc::new(executor);
    let calls: Vec<ToolCall> = (1..=3)
        .map(|n| call(&n.to_string(), "run_command", json!({"command": "true"})))
        .collect();
    let batch = Batch {
        id: "b_2".into(),
        iteration: 0,
        calls,
    };
    let results = executor
        .run_batch(&harness.session, batch, &BatchControl::new(3))
        .await;
    assert_eq!(outcomes(&results), ["permission_canceled"; 3]);
    assert!(
        results[2]
            .result
            .error
            .as_deref()
            .unwrap()
            .contains("no approval within 200 ms")
    );
    let by: Vec<String> = harness
        .events
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ApprovalResolved(params) => Some(format!("{:?}", params.body.by)),
            _ => None,
        })
        .collect();
    assert_eq!(by, ["Client", "Disconnect", "Timeout"]);
}

#[tokio::test]
async fn approved_replacement_arguments_are_validated_and_checked_against_deny_rules() {
    let harness = Harness::new(
        &[(".env", "K=V")],
        rules(&[], &[], &["read_file(.env)"]),
        SessionMode::Default,
    );
    let mut to_secret = ApprovalAnswer::new(ApprovalDecision::AllowOnce);
    to_secret.arguments = Some(json!({"path": ".env"}).as_object().unwrap().clone());
    let mut to_junk = ApprovalAnswer::new(ApprovalDecision::AllowOnce);
    to_junk.arguments = Some(json!({"path": 5}).as_object().unwrap().clone());
    harness.approver(ScriptedApprover::answering(vec![
        Some(ApprovalReply::Answer(to_secret)),
        Some(ApprovalReply::Answer(to_junk)),
    ]));
    let results = harness
        .run(vec![
            call("1", "read_file", json!({"path": "/etc/hostname"})),
            call("2", "read_file", json!({"path": "/etc/hostname"})),
        ])
        .await;
    assert_eq!(
        outcomes(&results),
        ["permission_denied", "invalid_arguments"],
        "{results:?}"
    );
}

#[tokio::test]
async fn plan_mode_refuses_a_forged_side_effect_call() {
    let harness = Harness::new(&[], rules(&["write_file"], &[], &[]), SessionMode::Plan);
    let results = harness
        .run(vec![call(
            "w",
            "write_file",
            json!({"path": "x.txt", "content": "x"}),
        )])
        .await;
    assert_eq!(outcomes(&results), ["tool_not_allowed"]);
    assert!(!harness.tree.path("x.txt").exists());
}

#[tokio::test]
async fn switching_to_plan_mode_during_an_approval_stops_the_call() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    let approver = ScriptedApprover::answering(vec![answer(ApprovalDecision::AllowOnce)]);
    let session = harness.session.clone();
    *approver.on_request.lock().unwrap() = Some(Box::new(move || {
        session.update(|state| state.mode = SessionMode::Plan)
    }));
    harness.approver(approver);
    let results = harness
        .run(vec![call(
            "w",
            "write_file",
            json!({"path": "x.txt", "content": "x"}),
        )])
        .await;
    assert_eq!(outcomes(&results), ["tool_not_allowed"]);
    assert!(!harness.tree.path("x.txt").exists());
}

#[tokio::test]
async fn canceling_a_batch_stops_running_calls_and_ends_the_rest() {
    let harness = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let control = BatchControl::new(2);
    let canceller = control.batch.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let results = harness
        .run_with(
            vec![
                call(
                    "1",
                    "run_command",
                    json!({"command": "echo started; sleep 30"}),
                ),
                call("2", "run_command", json!({"command": "true"})),
            ],
            &control,
        )
        .await;
    assert_eq!(outcomes(&results), ["canceled", "canceled"]);
    assert!(
        results[0].result.content.contains("started"),
        "{:?}",
        results[0].result
    );
    assert!(results[0].elapsed_ms < 10_000);
}

#[tokio::test]
async fn canceling_a_call_withdraws_its_approval() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    harness.approver(ScriptedApprover::answering(vec![None]));
    let control = BatchControl::new(1);
    let canceller = control.calls[0].clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let results = harness
        .run_with(
            vec![call("1", "run_command", json!({"command": "true"}))],
            &control,
        )
        .await;
    assert_eq!(outcomes(&results), ["canceled"]);
    let by = harness
        .events
        .events()
        .into_iter()
        .find_map(|event| match event {
            Event::ApprovalResolved(params) => Some(format!("{:?}", params.body.by)),
            _ => None,
        });
    assert_eq!(by.as_deref(), Some("Cancel"));
}

// ---------------------------------------------------------------------------------------------
// Hooks

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
        executor: Arc::new(Executor {
            hooks: vec![hook],
            ..Executor::new(probe.executor.registry.clone(), shell_parser())
        }),
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
        blocked.result.error_type.unwrap().to_string(),
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
        invalid.result.error_type.unwrap().to_string(),
        "invalid_arguments"
    );

    let (silent, _) = with_program("exit 0", None, "true").await;
    assert_eq!(
        silent.result.error_type.unwrap().to_string(),
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
            failed.result.error_type.unwrap().to_string(),
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
        result.result.error_type.unwrap().to_string(),
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
    let alive = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("cmdline")).ok())
        .any(|cmdline| String::from_utf8_lossy(&cmdline).contains(&marker));
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
        executor: Arc::new(Executor {
            hooks: vec![hook],
            ..Executor::new(harness.executor.registry.clone(), shell_parser())
        }),
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
        executor: Arc::new(Executor {
            hooks: vec![good, bad],
            ..Executor::new(probe.executor.registry.clone(), shell_parser())
        }),
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
async fn command_output_streams_as_events_up_to_the_limit() {
    let probe = Harness::new(&[], rules(&["run_command"], &[], &[]), SessionMode::Default);
    let mut executor = Executor::new(probe.executor.registry.clone(), shell_parser());
    executor.limits.max_stream_bytes = 1000;
    let harness = Harness {
        executor: Arc::new(executor),
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

/// Swaps `dir` for a symlink to `outside` (the real directory kept aside as `dir.real`).
fn swap_for_symlink(dir: &std::path::Path, outside: &std::path::Path) {
    let aside = dir.with_extension("real");
    std::fs::rename(dir, &aside).unwrap();
    std::os::unix::fs::symlink(outside, dir).unwrap();
}

/// The window between the permission check and the tool: an approver's answer. A directory of
/// the judged path swapped for a symlink meanwhile must not redirect a read, a write or an
/// edit outside the roots: the tool acts on the path as it was judged and refuses the change.
#[tokio::test]
async fn a_symlink_swapped_in_after_the_check_redirects_nothing() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("old.txt"), "outside before\n").unwrap();
    let calls = [
        call(
            "w",
            "write_file",
            json!({"path": "d/new.txt", "content": "payload"}),
        ),
        call(
            "e",
            "edit_file",
            json!({"path": "d/old.txt", "old_string": "before", "new_string": "after"}),
        ),
        call("r", "read_file", json!({"path": "d/old.txt"})),
    ];
    for call in calls {
        let harness = Harness::new(
            &[("d/old.txt", "inside before\n")],
            rules(&[], &["write_file", "edit_file", "read_file"], &[]),
            SessionMode::Default,
        );
        let approver = ScriptedApprover::answering(vec![answer(ApprovalDecision::AllowOnce)]);
        let (dir, target) = (harness.tree.path("d"), outside.path().to_path_buf());
        *approver.on_request.lock().unwrap() =
            Some(Box::new(move || swap_for_symlink(&dir, &target)));
        harness.approver(approver.clone());
        let results = harness.run(vec![call.clone()]).await;
        assert_eq!(approver.requests().len(), 1, "{}: asked once", call.name);
        let result = &results[0].result;
        assert!(!result.ok, "{}: {result:?}", call.name);
        assert!(
            result
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("changed after it was checked"),
            "{}: {result:?}",
            call.name
        );
        assert!(
            !result.content.contains("outside"),
            "{}: read outside",
            call.name
        );
        assert!(
            !outside.path().join("new.txt").exists(),
            "{}: wrote outside",
            call.name
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("old.txt")).unwrap(),
            "outside before\n",
            "{}: edited outside",
            call.name
        );
    }
}

/// A directory flipping between itself and a symlink out of the roots while writes go into it:
/// not one byte may land outside. `TOOLD_RACE_ITERATIONS` sets the writes (default 2,000; the
/// documented full run is 10,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_symlink_swap_never_land_outside_the_roots() {
    use std::sync::atomic::AtomicBool;
    let iterations: usize = std::env::var("TOOLD_RACE_ITERATIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(2_000);
    let outside = tempfile::tempdir().unwrap();
    let harness = Harness::new(
        &[("d/keep", "")],
        Rules::default(),
        SessionMode::AcceptEdits,
    );
    let dir = harness.tree.path("d");
    let stop = Arc::new(AtomicBool::new(false));
    // `d` and a symlink to `outside` trade names atomically (RENAME_EXCHANGE), so `d` is never
    // missing: every write meets either the real directory or the link.
    let link = harness.tree.path("d_link");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let flipper = {
        let (dir, link, stop) = (dir.clone(), link.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &dir,
                    nix::fcntl::AT_FDCWD,
                    &link,
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                flips += 1;
                std::thread::yield_now();
            }
            flips
        })
    };
    let (mut written, mut refused) = (0, 0);
    for index in 0..iterations {
        let path = format!("d/f{index}.txt");
        let results = harness
            .run(vec![call(
                "w",
                "write_file",
                json!({"path": path, "content": "x"}),
            )])
            .await;
        if results[0].result.ok {
            written += 1;
        } else {
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    let landed: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(landed.is_empty(), "written outside the roots: {landed:?}");
    eprintln!("{iterations} writes: {written} inside, {refused} refused, 0 outside; {flips} flips");
    assert!(
        flips > 0 && written > 0,
        "the race ran: {flips} flips, {written} written, {refused} refused"
    );
}
