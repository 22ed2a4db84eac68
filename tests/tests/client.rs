//! `toold-client` end to end against the real `toold serve`: every typed method, events in
//! order (also through a one-event stream), answerers for approvals, hooks and client tools,
//! canceling an execution, a request without an answerer, and `reconnect` after a restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::UnixListener;
use toold_client::protocol::{
    ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, BoxFuture, CancelParams,
    ClientCapabilities, ErrorType, Event, ExecuteParams, ExecuteResult, Handler, HookEvent,
    InitializeParams, InitializeResult, Notification, PeerHandle, PeerInfo, PeerOptions,
    PostToolUseAnswer, PreToolUseAnswer, PreToolUseDecision, Reply, Request, RequestError, Rules,
    Safety, ServerCapabilities, SessionCreateParams, SessionUpdateParams, ToolCall, ToolDefinition,
    ToolResult, ToolSource, ToolsListParams, error_code,
};
use toold_client::{Approval, Client, ClientError, ClientEvent, ClientOptions, Events};
use toold_tests::PATIENCE;
use toold_tests::daemon::TestDaemon;
use toold_tests::error_type_or_ok;

fn options(daemon: &TestDaemon) -> ClientOptions {
    ClientOptions::new("e2e-client").with_socket(daemon.socket())
}

async fn connect(options: ClientOptions) -> (Client, Events) {
    Client::connect(options).await.expect("connect to toold")
}

/// A session at the daemon's work directory where `run_command` needs no approval.
fn session_params(daemon: &TestDaemon) -> SessionCreateParams {
    let mut params = SessionCreateParams::new(daemon.work());
    params.rules = Some(Rules {
        allow: vec!["run_command".to_owned()],
        ..Rules::default()
    });
    params
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall::new(id, name, arguments)
}

fn batch(session_id: &str, calls: Vec<ToolCall>) -> ExecuteParams {
    ExecuteParams {
        session_id: session_id.to_owned(),
        iteration: 1,
        calls,
    }
}

async fn execute(client: &Client, params: ExecuteParams) -> ExecuteResult {
    tokio::time::timeout(PATIENCE, client.tools_execute(params))
        .await
        .expect("tools/execute answers within 30 s")
        .expect("tools/execute")
}

async fn next_event(events: &mut Events) -> ClientEvent {
    tokio::time::timeout(PATIENCE, events.recv())
        .await
        .expect("an event within 30 s")
        .expect("the stream is open")
}

/// Session events up to and including `batch/done`; other items are skipped.
async fn events_until_batch_done(events: &mut Events) -> Vec<Event> {
    let mut received = Vec::new();
    loop {
        if let ClientEvent::Session(event) = next_event(events).await {
            let done = matches!(event, Event::BatchDone(_));
            received.push(event);
            if done {
                return received;
            }
        }
    }
}

fn client_tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: "echoes its text".to_owned(),
        input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        safety: Safety::ReadOnly,
        system: false,
        timeout_ms: None,
        source: ToolSource::Client,
    }
}

fn echo_tool(options: ClientOptions) -> ClientOptions {
    options.on_tool_invoke(|invoke| async move {
        let text = invoke.call.arguments["text"].as_str().unwrap_or_default();
        ToolResult::success(invoke.call.name.clone(), format!("echo: {text}"))
    })
}

#[tokio::test]
async fn every_typed_method_answers() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let (client, _events) = connect(echo_tool(options(&daemon))).await;

    let initialized = client.initialized();
    assert_eq!(initialized.protocol_version, 1);
    assert_eq!(initialized.server_info.name, "toold");
    assert!(!client.instance_id().is_empty());
    assert_eq!(client.socket_path(), daemon.socket());

    let created = client
        .session_create(session_params(&daemon))
        .await
        .expect("session/create");
    let session_id = created.session_id.clone();
    assert_eq!(created.attached, 1);
    assert_eq!(client.attached_sessions().len(), 1);

    let fetched = client.session_get(&session_id).await.expect("session/get");
    assert_eq!(fetched.cwd, daemon.work());
    let listed = client.session_list().await.expect("session/list");
    assert!(
        listed
            .iter()
            .any(|session| session.session_id == session_id)
    );
    let mut update = SessionUpdateParams::new(&session_id);
    update.title = Some(Some("renamed".to_owned()));
    let updated = client.session_update(update).await.expect("session/update");
    assert_eq!(updated.title.as_deref(), Some("renamed"));

    let tools = client
        .tools_list(ToolsListParams::default())
        .await
        .expect("tools/list");
    assert!(tools.tools.iter().any(|tool| tool.name == "read_file"));
    let registered = client
        .tools_register(vec![client_tool("e2e_client_echo")], false)
        .await
        .expect("tools/register");
    assert!(registered > tools.revision);
    let unregistered = client
        .tools_unregister(vec!["e2e_client_echo".to_owned()])
        .await
        .expect("tools/unregister");
    assert!(unregistered > registered);

    let executed = execute(
        &client,
        batch(
            &session_id,
            vec![call("read", "read_file", json!({"path": "a.txt"}))],
        ),
    )
    .await;
    assert_eq!(executed.results.len(), 1);
    assert_eq!(executed.results[0].result.content, "alpha\n");

    let canceled = client
        .tools_cancel(CancelParams {
            session_id: session_id.clone(),
            batch_id: None,
            call_ids: None,
        })
        .await
        .expect("tools/cancel");
    assert!(canceled.canceled.is_empty(), "{canceled:?}");
    // Naming no request of ours is harmless.
    client.cancel_request(999).await.expect("$/cancelRequest");

    client
        .session_detach(&session_id)
        .await
        .expect("session/detach");
    assert!(client.attached_sessions().is_empty());
    let attached = client
        .session_attach(&session_id, None)
        .await
        .expect("session/attach");
    assert_eq!(attached.attached, 1);
    client
        .session_close(&session_id)
        .await
        .expect("session/close");
    assert!(client.attached_sessions().is_empty());

    let gone = client.session_get(&session_id).await.unwrap_err();
    assert_eq!(gone.rpc_code(), Some(error_code::UNKNOWN_SESSION), "{gone}");
    assert!(
        matches!(&gone, ClientError::Rpc { method, .. } if method == "session/get"),
        "{gone:?}"
    );
}

#[tokio::test]
async fn connecting_where_no_daemon_listens_says_how_to_start_one() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("nothing.sock");
    let error = Client::connect(ClientOptions::new("e2e").with_socket(&socket))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ClientError::Connect { path, .. } if *path == socket),
        "{error:?}"
    );
    assert!(error.to_string().contains("toold serve"), "{error}");
}

#[tokio::test]
async fn events_arrive_in_order() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let (client, mut events) = connect(options(&daemon)).await;
    let session = client
        .session_create(session_params(&daemon))
        .await
        .expect("session/create");
    let result = execute(
        &client,
        batch(
            &session.session_id,
            vec![
                call("read", "read_file", json!({"path": "a.txt"})),
                call("say", "run_command", json!({"command": "echo said"})),
            ],
        ),
    )
    .await;
    assert_eq!(
        result
            .results
            .iter()
            .map(|outcome| outcome.call_id.as_str())
            .collect::<Vec<_>>(),
        ["read", "say"]
    );

    let received = events_until_batch_done(&mut events).await;
    let seqs: Vec<u64> = received.iter().map(Event::seq).collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    assert!(
        received
            .iter()
            .all(|event| event.session_id() == session.session_id)
    );
    assert!(
        received
            .iter()
            .all(|event| event.batch_id() == result.batch_id)
    );
    assert!(matches!(received.first(), Some(Event::BatchStart(_))));
    for call_id in ["read", "say"] {
        let kinds: Vec<&str> = received
            .iter()
            .filter(|event| {
                event.call_id() == Some(call_id) && !matches!(event, Event::ApprovalResolved(_))
            })
            .map(Event::method)
            .filter(|method| *method != "tool/output")
            .collect();
        assert_eq!(
            kinds,
            ["tool/call_start", "tool/result", "tool/call_done"],
            "{call_id}"
        );
    }
    let output: String = received
        .iter()
        .filter_map(|event| match event {
            Event::Output(output) => Some(output.body.data.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(output, "said\n");
}

/// With room for one event, the connection waits for the consumer instead of dropping:
/// every line of a long output arrives, in order.
#[tokio::test]
async fn a_one_event_stream_loses_nothing() {
    let daemon = TestDaemon::start();
    let (client, mut events) = connect(options(&daemon).with_event_capacity(1)).await;
    let session = client
        .session_create(session_params(&daemon))
        .await
        .expect("session/create");
    let execution = client.tools_execute(batch(
        &session.session_id,
        vec![call(
            "count",
            "run_command",
            json!({"command": "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo line $i; done"}),
        )],
    ));
    // Read slowly at first, so that the stream is full while the command writes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let received = events_until_batch_done(&mut events).await;
    let result = tokio::time::timeout(PATIENCE, execution)
        .await
        .expect("the batch ends")
        .expect("tools/execute");
    assert_eq!(error_type_or_ok(&result.results[0].result), "ok");
    let seqs: Vec<u64> = received.iter().map(Event::seq).collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    let output: String = received
        .iter()
        .filter_map(|event| match event {
            Event::Output(output) => Some(output.body.data.as_str()),
            _ => None,
        })
        .collect();
    let expected: String = (1..=3000).map(|line| format!("line {line}\n")).collect();
    assert_eq!(output, expected);
}

#[tokio::test]
async fn an_approval_handler_allows_once() {
    let daemon = TestDaemon::start_asking();
    let asked: Arc<Mutex<Vec<ApprovalRequestParams>>> = Arc::default();
    let recorded = Arc::clone(&asked);
    let approving = options(&daemon).on_approval(move |request| {
        recorded.lock().expect("asked").push(request);
        async { ApprovalAnswer::new(ApprovalDecision::AllowOnce) }
    });
    assert!(approving.capabilities().approvals);
    let (client, mut events) = connect(approving).await;
    // No allow rule: run_command asks.
    let session = client
        .session_create(SessionCreateParams::new(daemon.work()))
        .await
        .expect("session/create");
    let result = execute(
        &client,
        batch(
            &session.session_id,
            vec![call(
                "ask",
                "run_command",
                json!({"command": "echo approved"}),
            )],
        ),
    )
    .await;
    assert_eq!(error_type_or_ok(&result.results[0].result), "ok");
    assert_eq!(result.results[0].result.content, "approved\n");

    let asked = asked.lock().expect("asked").clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].call.id, "ask");
    assert_eq!(asked[0].session_id, session.session_id);
    let resolved: Vec<_> = events_until_batch_done(&mut events)
        .await
        .into_iter()
        .filter_map(|event| match event {
            Event::ApprovalResolved(resolved) => Some(resolved.body),
            _ => None,
        })
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].decision, Some(ApprovalDecision::AllowOnce));
}

/// A session where `run_command` asks, and a line that needs the approval to run.
async fn asking_batch(client: &Client, daemon: &TestDaemon) -> ExecuteParams {
    let session = client
        .session_create(SessionCreateParams::new(daemon.work()))
        .await
        .expect("session/create");
    batch(
        &session.session_id,
        vec![call(
            "ask",
            "run_command",
            json!({"command": "echo approved > approved.txt"}),
        )],
    )
}

/// An approver that declines leaves the approval to the session's other approvers: the one
/// that answers decides, and the decliner was asked too.
#[tokio::test]
async fn a_declining_approver_leaves_the_approval_to_another() {
    let daemon = TestDaemon::start_asking();
    let declined = Arc::new(Mutex::new(0));
    let counted = Arc::clone(&declined);
    let declining = options(&daemon).on_approval_or_decline(move |_request| {
        *counted.lock().expect("declined") += 1;
        async { Approval::Decline("nobody here to ask".to_owned()) }
    });
    assert!(declining.capabilities().approvals);
    let (submitter, _submitter_events) = connect(declining).await;
    let params = asking_batch(&submitter, &daemon).await;
    // The other approver answers only after the decline reached the daemon: a decline must
    // not settle the approval.
    let (approver, _approver_events) = connect(options(&daemon).on_approval(|_request| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ApprovalAnswer::new(ApprovalDecision::AllowOnce)
    }))
    .await;
    approver
        .session_attach(&params.session_id, None)
        .await
        .expect("session/attach");

    let result = execute(&submitter, params).await;
    assert_eq!(
        error_type_or_ok(&result.results[0].result),
        "ok",
        "{result:?}"
    );
    assert_eq!(*declined.lock().expect("declined"), 1);
    assert_eq!(
        std::fs::read_to_string(daemon.work().join("approved.txt")).expect("the command ran"),
        "approved\n"
    );
}

/// When every approver declines, the call is denied at once (as with no approver attached),
/// and its error carries the decline's reason.
#[tokio::test]
async fn a_call_every_approver_declines_is_denied_with_the_reason() {
    let daemon = TestDaemon::start_asking();
    let declining = |reason: &'static str| {
        options(&daemon)
            .on_approval_or_decline(move |_request| async move { Approval::Decline(reason.into()) })
    };
    let (submitter, _submitter_events) = connect(declining("first declines")).await;
    let params = asking_batch(&submitter, &daemon).await;
    let (other, _other_events) = connect(declining("second declines too")).await;
    other
        .session_attach(&params.session_id, None)
        .await
        .expect("session/attach");

    let started = std::time::Instant::now();
    let result = execute(&submitter, params).await;
    let result = &result.results[0].result;
    assert_eq!(error_type_or_ok(result), "permission_denied", "{result:?}");
    let error = result.error.as_deref().expect("an error");
    assert!(
        error.contains("every approver declined") && error.contains("declines"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "denied after {:?}: the approval waited instead of ending",
        started.elapsed()
    );
    assert!(!daemon.work().join("approved.txt").exists());
}

#[tokio::test]
async fn a_client_tool_is_registered_and_invoked_through_its_handler() {
    let daemon = TestDaemon::start();
    let owner_options = echo_tool(options(&daemon));
    assert!(owner_options.capabilities().client_tools);
    let (owner, _owner_events) = connect(owner_options).await;
    let (caller, mut caller_events) = connect(options(&daemon)).await;
    let revision = owner
        .tools_register(vec![client_tool("e2e_echo")], false)
        .await
        .expect("tools/register");
    loop {
        if let ClientEvent::ToolsListChanged { revision: changed } =
            next_event(&mut caller_events).await
            && changed == revision
        {
            break;
        }
    }
    let session = caller
        .session_create(SessionCreateParams::new(daemon.work()))
        .await
        .expect("session/create");
    let result = execute(
        &caller,
        batch(
            &session.session_id,
            vec![call("echoed", "e2e_echo", json!({"text": "hello"}))],
        ),
    )
    .await;
    assert_eq!(error_type_or_ok(&result.results[0].result), "ok");
    assert_eq!(result.results[0].result.content, "echo: hello");
    // Without the capability, registering is refused.
    let refused = caller
        .tools_register(vec![client_tool("e2e_other")], false)
        .await
        .unwrap_err();
    assert_eq!(
        refused.rpc_code(),
        Some(error_code::INVALID_PARAMS),
        "{refused}"
    );
}

#[tokio::test]
async fn a_pre_tool_use_hook_blocks_and_a_post_hook_adds_context() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    std::fs::write(daemon.work().join("secret.txt"), "hush\n").expect("fixture");
    let hooked = options(&daemon)
        .on_pre_tool_use(|params| async move {
            if params.call.arguments["path"] == "secret.txt" {
                let mut answer = PreToolUseAnswer::new(PreToolUseDecision::Block);
                answer.reason = Some("secrets stay secret".to_owned());
                answer
            } else {
                PreToolUseAnswer::new(PreToolUseDecision::Continue)
            }
        })
        .on_post_tool_use(|params| async move {
            PostToolUseAnswer {
                additional_context: Some(format!("seen {}", params.call.id)),
            }
        });
    assert_eq!(
        hooked.capabilities().hooks,
        [HookEvent::PreToolUse, HookEvent::PostToolUse]
    );
    let (client, _events) = connect(hooked).await;
    let session = client
        .session_create(SessionCreateParams::new(daemon.work()))
        .await
        .expect("session/create");
    let result = execute(
        &client,
        batch(
            &session.session_id,
            vec![
                call("blocked", "read_file", json!({"path": "secret.txt"})),
                call("read", "read_file", json!({"path": "a.txt"})),
            ],
        ),
    )
    .await;
    let blocked = &result.results[0].result;
    assert_eq!(blocked.error_type, Some(ErrorType::HookBlocked));
    assert!(
        blocked
            .error
            .as_deref()
            .is_some_and(|error| error.contains("secrets stay secret")),
        "{blocked:?}"
    );
    let read = &result.results[1].result;
    assert_eq!(read.content, "alpha\n");
    assert_eq!(read.metadata["additional_context"], "seen read");
}

#[tokio::test]
async fn canceling_an_execution_still_returns_its_results() {
    let daemon = TestDaemon::start();
    let (client, mut events) = connect(options(&daemon)).await;
    let session = client
        .session_create(session_params(&daemon))
        .await
        .expect("session/create");
    let execution = client.tools_execute(batch(
        &session.session_id,
        vec![
            call("slow", "run_command", json!({"command": "sleep 60"})),
            call("never", "run_command", json!({"command": "echo never"})),
        ],
    ));
    loop {
        if let ClientEvent::Session(Event::CallStart(start)) = next_event(&mut events).await
            && start.body.call.id == "slow"
        {
            break;
        }
    }
    execution.cancel().await.expect("$/cancelRequest");
    let result = tokio::time::timeout(PATIENCE, execution)
        .await
        .expect("the canceled batch answers")
        .expect("tools/execute");
    let outcomes: Vec<String> = result
        .results
        .iter()
        .map(|call| error_type_or_ok(&call.result))
        .collect();
    assert_eq!(outcomes, ["canceled", "canceled"]);

    // Dropping an execution cancels its batch too.
    let dropped = client.tools_execute(batch(
        &session.session_id,
        vec![call(
            "dropped",
            "run_command",
            json!({"command": "sleep 60"}),
        )],
    ));
    loop {
        if let ClientEvent::Session(Event::CallStart(start)) = next_event(&mut events).await
            && start.body.call.id == "dropped"
        {
            break;
        }
    }
    drop(dropped);
    loop {
        if let ClientEvent::Session(Event::CallDone(done)) = next_event(&mut events).await
            && done.body.call_id == "dropped"
        {
            assert_eq!(error_type_or_ok(&done.body.result), "canceled");
            break;
        }
    }
}

#[tokio::test]
async fn reconnect_after_a_restart_reattaches_after_the_last_event() {
    let mut daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let (client, mut events) = connect(options(&daemon)).await;
    let session = client
        .session_create(session_params(&daemon))
        .await
        .expect("session/create");
    let session_id = session.session_id.clone();
    // A second client that attached before the batch and has room for one event only, and
    // does not read: it will have missed events when the daemon restarts.
    let (lagging, mut lagging_events) = connect(options(&daemon).with_event_capacity(1)).await;
    lagging
        .session_attach(&session_id, Some(0))
        .await
        .expect("session/attach");

    let read = || {
        batch(
            &session_id,
            vec![call("read", "read_file", json!({"path": "a.txt"}))],
        )
    };
    execute(&client, read()).await;
    let first = events_until_batch_done(&mut events).await;
    let last_seen = first.last().map(Event::seq).expect("events");
    assert_eq!(client.attached_sessions()[0].last_seq, last_seen);
    let instance_before = client.instance_id();

    daemon.restart();
    loop {
        if let ClientEvent::Disconnected { .. } = next_event(&mut events).await {
            break;
        }
    }
    let report = client.reconnect().await.expect("reconnect");
    assert!(report.instance_changed);
    assert_eq!(report.previous_instance_id, instance_before);
    assert_ne!(client.instance_id(), instance_before);
    assert_eq!(report.sessions.len(), 1);
    let reattached = &report.sessions[0];
    assert_eq!(reattached.session_id, session_id);
    assert_eq!(reattached.after_seq, last_seen);
    assert!(reattached.result.is_ok(), "{:?}", reattached.result);
    assert!(!reattached.replay_truncated());

    // New events reach the same stream, numbered after the old ones.
    execute(&client, read()).await;
    let second = events_until_batch_done(&mut events).await;
    assert!(
        second.iter().all(|event| event.seq() > last_seen),
        "{second:?}"
    );

    // The lagging client's connection still waits for room for its second event (it never
    // saw the daemon go). Closed, it forgets the events it could not put on its stream, so
    // it is behind, and the restarted daemon no longer has those events: truncated.
    lagging.close();
    lagging.closed().await;
    let behind = lagging.attached_sessions()[0].last_seq;
    assert!(behind < last_seen, "{behind} of {last_seen}");
    // The replay reaches the stream before the attach answer: it must be read meanwhile.
    let drained = tokio::spawn(async move {
        let mut replayed = Vec::new();
        while let Some(event) = lagging_events.recv().await {
            if let ClientEvent::Session(event) = event {
                replayed.push(event.seq());
            }
        }
        replayed
    });
    let lagging_report = tokio::time::timeout(PATIENCE, lagging.reconnect())
        .await
        .expect("reconnect within 30 s")
        .expect("reconnect");
    assert_eq!(lagging_report.sessions[0].after_seq, behind);
    assert!(lagging_report.sessions[0].replay_truncated());
    drop(lagging);
    let replayed = drained.await.expect("the drain ends with the client");
    // Whatever the restarted daemon still has (the second batch) is replayed, in order.
    assert!(
        replayed.ends_with(&second.iter().map(Event::seq).collect::<Vec<_>>()),
        "{replayed:?}"
    );
}

/// `reconnect` registers the client's tools again: on the same daemon, whose cleanup of the
/// old connection's tools may come after the new registration, and after a restart, where
/// they are gone with the process. Each time another client calls the tool and it runs
/// through the reconnected client; a tool unregistered before is not registered again.
#[tokio::test]
async fn reconnect_registers_the_client_tools_again() {
    let mut daemon = TestDaemon::start();
    let (owner, mut owner_events) = connect(echo_tool(options(&daemon))).await;
    owner
        .tools_register(
            vec![client_tool("e2e_echo"), client_tool("e2e_dropped")],
            false,
        )
        .await
        .expect("tools/register");
    owner
        .tools_unregister(vec!["e2e_dropped".to_owned()])
        .await
        .expect("tools/unregister");

    let call_the_tool = |daemon: &TestDaemon| {
        let caller_options = options(daemon);
        let work = daemon.work();
        async move {
            let (caller, _caller_events) = connect(caller_options).await;
            let session = caller
                .session_create(SessionCreateParams::new(work))
                .await
                .expect("session/create");
            let listed = caller
                .tools_list(ToolsListParams::default())
                .await
                .expect("tools/list");
            let names: Vec<String> = listed.tools.into_iter().map(|tool| tool.name).collect();
            let result = execute(
                &caller,
                batch(
                    &session.session_id,
                    vec![call("echoed", "e2e_echo", json!({"text": "again"}))],
                ),
            )
            .await;
            (names, result.results[0].result.clone())
        }
    };

    let report = owner.reconnect().await.expect("reconnect, same daemon");
    assert!(!report.instance_changed);
    assert_eq!(report.tools.expect("tools again"), ["e2e_echo"]);
    let (names, result) = call_the_tool(&daemon).await;
    assert!(names.contains(&"e2e_echo".to_owned()), "{names:?}");
    assert!(!names.contains(&"e2e_dropped".to_owned()), "{names:?}");
    assert_eq!(result.content, "echo: again", "{result:?}");

    daemon.restart();
    loop {
        if let ClientEvent::Disconnected { .. } = next_event(&mut owner_events).await {
            break;
        }
    }
    let report = owner
        .reconnect()
        .await
        .expect("reconnect, restarted daemon");
    assert!(report.instance_changed);
    assert_eq!(report.tools.expect("tools again"), ["e2e_echo"]);
    let (_, result) = call_the_tool(&daemon).await;
    assert_eq!(result.content, "echo: again", "{result:?}");
}

/// A request the client installed no answerer for is answered `-32601`, and `initialize`
/// declares only what is installed: checked against a stand-in daemon, since the real one
/// never sends an undeclared request.
#[tokio::test]
async fn a_request_without_an_answerer_is_method_not_found() {
    struct StandIn {
        declared: Arc<Mutex<Option<ClientCapabilities>>>,
    }
    impl Handler for StandIn {
        fn request(&self, _peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
            let params: InitializeParams =
                serde_json::from_value(request.params.unwrap_or(Value::Null)).expect("initialize");
            *self.declared.lock().expect("declared") = Some(params.capabilities);
            let result = InitializeResult {
                protocol_version: 1,
                server_info: PeerInfo {
                    name: "stand-in".to_owned(),
                    version: None,
                },
                instance_id: "i_stand_in".to_owned(),
                // As a daemon from before `started_at` and `sandbox` answers.
                started_at: None,
                sandbox: None,
                audit: None,
                pid: None,
                log_file: None,
                capabilities: ServerCapabilities {
                    modes: Vec::new(),
                    hooks: Vec::new(),
                    client_tools: true,
                    max_message_bytes: 1 << 20,
                },
            };
            Box::pin(async move { Reply::result(serde_json::to_value(result).expect("result")) })
        }

        fn notification(&self, _peer: PeerHandle, _notification: Notification) {}
    }

    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("stand-in.sock");
    let listener = UnixListener::bind(&socket).expect("listen");
    let declared = Arc::new(Mutex::new(None));
    let stand_in = Arc::new(StandIn {
        declared: Arc::clone(&declared),
    });
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        let (reader, writer) = stream.into_split();
        let (peer, _task) =
            toold_client::protocol::Peer::spawn(reader, writer, PeerOptions::server(), stand_in);
        peer
    });
    let (client, _events) = connect(
        ClientOptions::new("e2e")
            .with_socket(&socket)
            .on_approval(|_| async { ApprovalAnswer::new(ApprovalDecision::Deny) }),
    )
    .await;
    assert_eq!(client.instance_id(), "i_stand_in");
    let declared = declared.lock().expect("declared").clone();
    assert_eq!(
        declared,
        Some(ClientCapabilities {
            approvals: true,
            hooks: Vec::new(),
            client_tools: false,
        })
    );

    let daemon_side = server.await.expect("the stand-in accepted");
    let unanswered = daemon_side
        .request("tool/invoke", Some(json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&unanswered, RequestError::Rpc(error) if error.code == error_code::METHOD_NOT_FOUND),
        "{unanswered:?}"
    );
    let answered = daemon_side
        .request(
            "approval/request",
            Some(json!({
                "session_id": "s", "batch_id": "b", "approval_id": "b/c",
                "call": {"id": "c", "name": "run_command", "arguments": {}},
                "safety": "side_effect", "reason": "asked"
            })),
        )
        .await
        .expect("the approval is answered");
    assert_eq!(answered, json!({"decision": "deny"}));
}
