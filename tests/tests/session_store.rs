//! Session events and persistence end to end, in process: a real command's events through the
//! retained log to a reader that follows it, and a session saved, loaded in a "restarted"
//! daemon and continued with its numbering and state intact.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold::Registry;
use toold::events::{EventBody, EventSink};
use toold::pipeline::Pipeline;
use toold::pipeline::batch::{Batch, BatchControl};
use toold::pipeline::session::{SessionState, SessionView};
use toold::session::log::EventLog;
use toold::session::store::{SessionRecord, SessionStore};
use toold_protocol::{Event, OnDisconnect, OutputStream, Rules, SessionMode, ToolCall};
use toold_tests::PATIENCE;
use toold_tests::Tree;
use toold_tests::daemon::shell_parser;

fn allow_commands() -> Rules {
    Rules {
        allow: vec!["run_command".into()],
        ask: vec![],
        deny: vec![],
    }
}

/// A reader attached before a batch sees exactly what the log retains, in `seq` order, with a
/// command's live output between its call's start and its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_follows_a_real_batch_through_the_log() {
    let tree = Tree::new(&[]);
    let state = SessionState::new(
        tree.env(),
        SessionMode::Default,
        allow_commands(),
        &Default::default(),
        std::path::Path::new("/home/user"),
    )
    .unwrap();
    let log = Arc::new(EventLog::new(0));
    let session = Arc::new(SessionView::new("s_log", state, log.clone(), 0));
    let pipeline = Arc::new(Pipeline::new(
        Arc::new(Registry::with_builtins()),
        shell_parser(),
    ));

    let mut reader = log.reader(0);
    let follower = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(item) = reader.next().await {
            let event = item.expect("a reader keeping up never lags");
            let done = matches!(*event, Event::BatchDone(_));
            seen.push(Event::clone(&event));
            if done {
                break;
            }
        }
        seen
    });

    let command = "for i in $(seq 1 300); do echo line $i; done";
    let batch = Batch {
        id: "b_1".into(),
        iteration: 1,
        calls: vec![ToolCall::new("call_a", "run_command", json!({"command": command})).into()],
    };
    let results = pipeline
        .run_batch(&session, batch, &BatchControl::new(1), "test")
        .await;
    assert!(results[0].result.ok, "{:?}", results[0].result);

    let seen = tokio::time::timeout(PATIENCE, follower)
        .await
        .unwrap()
        .unwrap();
    let (retained, truncated) = log.replay(0);
    assert!(!truncated);
    assert_eq!(seen, retained);
    let seqs: Vec<u64> = seen.iter().map(Event::seq).collect();
    assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>());
    assert_eq!(log.last_seq(), session.events().last_seq());

    let methods: Vec<&str> = seen.iter().map(Event::method).collect();
    let outputs = methods.iter().filter(|m| **m == "tool/output").count();
    assert!(outputs >= 1);
    let mut expected = vec!["batch/start", "tool/call_start"];
    expected.extend(std::iter::repeat_n("tool/output", outputs));
    expected.extend(["tool/result", "tool/call_done", "batch/done"]);
    assert_eq!(methods, expected);

    let stdout: String = seen
        .iter()
        .filter_map(|event| match event {
            Event::Output(output) if output.body.stream == OutputStream::Stdout => {
                Some(output.body.data.as_str())
            }
            _ => None,
        })
        .collect();
    let lines: String = (1..=300).map(|n| format!("line {n}\n")).collect();
    assert_eq!(stdout, lines);
}

/// A reader slow enough that the output waits for it (it trails by more than the allowed lag)
/// still gets every byte, including the chunk the forwarding held when the command ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_every_byte_of_a_command_that_ends_while_it_lags() {
    let tree = Tree::new(&[]);
    let state = SessionState::new(
        tree.env(),
        SessionMode::Default,
        allow_commands(),
        &Default::default(),
        std::path::Path::new("/home/user"),
    )
    .unwrap();
    // A short allowed lag, so that a few kilobytes of output make the command wait.
    let log = Arc::new(EventLog::new(0).with_output_lag(2));
    let session = Arc::new(SessionView::new("s_slow", state, log.clone(), 0));
    let pipeline = Arc::new(Pipeline::new(
        Arc::new(Registry::with_builtins()),
        shell_parser(),
    ));

    let mut reader = log.reader(0);
    let follower = tokio::spawn(async move {
        let mut stdout = String::new();
        while let Some(item) = reader.next().await {
            let event = item.expect("the output waits for this reader: it never lags out");
            match &*event {
                Event::Output(output) => {
                    stdout.push_str(&output.body.data);
                    // Slower than the command: the output backs up and waits for us.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Event::BatchDone(_) => break,
                _ => {}
            }
        }
        stdout
    });

    // A line at a time (each its own event), and the command ends while the reader trails.
    let command = "for i in $(seq 1 150); do echo line $i; sleep 0.001; done";
    let batch = Batch {
        id: "b_1".into(),
        iteration: 1,
        calls: vec![ToolCall::new("call_a", "run_command", json!({"command": command})).into()],
    };
    let results = pipeline
        .run_batch(&session, batch, &BatchControl::new(1), "test")
        .await;
    assert!(results[0].result.ok, "{:?}", results[0].result);
    let stdout = tokio::time::timeout(PATIENCE, follower)
        .await
        .unwrap()
        .unwrap();
    let lines: String = (1..=150).map(|n| format!("line {n}\n")).collect();
    assert_eq!(stdout.len(), lines.len(), "bytes lost");
    assert_eq!(stdout, lines);
}

/// What a session was survives a "restart": its state comes back from the store, and its
/// events go on numbering after the last one saved, with the old ones reported as gone.
#[tokio::test]
async fn a_saved_session_comes_back_after_a_restart() {
    let tree = Tree::new(&[("notes.txt", "hello\n")]);
    let state_dir = tempfile::tempdir().unwrap();
    let sessions_dir = state_dir.path().join("toold/sessions");
    let home = std::path::Path::new("/home/user");

    // The first daemon: a session with its own rules, a grant and some events.
    let mut env = tree.env();
    env.timeout_ms = 4_000;
    env.command_env.insert("RUST_LOG".into(), "debug".into());
    let mut state = SessionState::new(
        env,
        SessionMode::AcceptEdits,
        allow_commands(),
        &Default::default(),
        home,
    )
    .unwrap();
    state.grants.push("run_command(git status)".into());
    let first_log = Arc::new(EventLog::new(0));
    let sink = EventSink::new("s_keep", 0, first_log.clone());
    for _ in 0..5 {
        sink.emit(&"b_1".into(), EventBody::BatchDone);
    }
    let mut record = SessionRecord::new("s_keep", tree.root());
    record.capture(&state);
    record.title = Some("keep me".into());
    record.on_disconnect = OnDisconnect::Continue;
    record.last_seq = sink.last_seq();
    SessionStore::new(&sessions_dir).save(&record).unwrap();
    SessionStore::new(&sessions_dir)
        .save(&SessionRecord::new("s_gone", tree.root()))
        .unwrap();
    SessionStore::new(&sessions_dir).remove("s_gone").unwrap();
    drop((sink, first_log));

    // The second daemon.
    let (records, unreadable) = SessionStore::new(&sessions_dir).load_all();
    assert_eq!(unreadable, vec![]);
    let [restored] = &records[..] else {
        panic!("{records:?}")
    };
    assert_eq!(restored, &record);
    let env = restored.env(state.env.max_command_timeout_ms);
    assert_eq!(&env, &*state.env);
    let mut again = SessionState::new(
        env,
        restored.mode,
        restored.rules.clone(),
        &Default::default(),
        home,
    )
    .unwrap();
    again.grants.clone_from(&restored.grants);
    again.allowed_tools.clone_from(&restored.allowed_tools);
    assert_eq!(again.rules, state.rules);
    assert_eq!(again.grants, state.grants);
    assert_eq!(again.mode, state.mode);

    let log = Arc::new(EventLog::new(restored.last_seq));
    let sink = EventSink::new("s_keep", restored.last_seq, log.clone());
    assert_eq!(sink.emit(&"b_2".into(), EventBody::BatchDone), 6);
    let (events, truncated) = log.replay(2);
    assert!(truncated, "events 3..=5 died with the first daemon");
    assert_eq!(events.iter().map(Event::seq).collect::<Vec<_>>(), vec![6]);
    assert_eq!(log.replay(5), (events, false));
}
