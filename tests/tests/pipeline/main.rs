//! The call pipeline end to end, in process: batch plans and concurrency, result order, events,
//! permissions with approvals, hooks (client and program), the recheck and cancellation.
//!
//! This file holds the test tools, the scripted approver and the harness the tests share; the
//! tests are in modules by topic: scheduling and events, permissions and approvals, hooks, and
//! symlinks swapped in after the check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use toold::approval::{ApprovalFuture, ApprovalReply, Approver};
use toold::events::CollectingListener;
use toold::hooks::{ClientHooks, ConfiguredHook};
use toold::pipeline::batch::{Batch, BatchControl};
use toold::pipeline::session::{SessionPeers, SessionState, SessionView};
use toold::pipeline::{BatchSettings, Pipeline};
use toold::tools::ToolFuture;
use toold::{Registry, ToolSuccess};
use toold_protocol::{
    ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, CallOutcome, Event, Rules, Safety,
    SessionMode, ToolCall,
};
use toold_tests::Tree;
use toold_tests::daemon::shell_parser;
use toold_tests::test_tool::TestTool;

mod hooks;
mod permissions_and_approvals;
mod scheduling_and_events;
mod symlink_swaps;

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
                        Ok(_) => Ok(ToolSuccess::new("met")),
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
                    Ok(ToolSuccess::new("done"))
                }
                Act::Sleep => {
                    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(ToolSuccess::new(
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
    Some(ApprovalReply::Answer(ApprovalAnswer::new(decision), None))
}

// ---------------------------------------------------------------------------------------------
// The harness

struct Harness {
    tree: Tree,
    pipeline: Arc<Pipeline>,
    session: Arc<SessionView>,
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
        let mut settings = BatchSettings {
            hooks,
            ..BatchSettings::default()
        };
        settings.limits.approval_timeout = Duration::from_secs(20);
        let pipeline = Pipeline::with_settings(Arc::new(registry), shell_parser(), settings);
        // Commands the rules leave open ask, though the sandbox would confine them: these tests
        // are of the pipeline's asking, approving and hooks.
        let config = toold::permission::ConfigRules {
            sandboxed_commands: toold::permission::SandboxedCommands::Ask,
            ..Default::default()
        };
        let state = SessionState::new(
            tree.env(),
            mode,
            rules,
            &config,
            std::path::Path::new("/home/user"),
        )
        .unwrap();
        let events = Arc::new(CollectingListener::default());
        let session = Arc::new(SessionView::new("s_test", state, events.clone(), 0));
        Self {
            tree,
            pipeline: Arc::new(pipeline),
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
            calls: calls.into_iter().map(Into::into).collect(),
        };
        self.pipeline
            .run_batch(&self.session, batch, &control, "test")
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
        .map(|outcome| toold_tests::error_type_or_ok(&outcome.result))
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
