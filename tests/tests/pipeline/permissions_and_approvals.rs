//! Permissions with approvals: allow, deny and remember; abort; approvers that fail, stay silent
//! or vanish; replacement arguments; plan mode; and canceling a batch or a call that waits.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold::approval::ApprovalReply;
use toold::pipeline::batch::{Batch, BatchControl};
use toold::pipeline::{BatchSettings, Pipeline};
use toold_protocol::{
    ApprovalAnswer, ApprovalDecision, Event, Rules, Safety, SessionMode, ToolCall,
};
use toold_tests::daemon::shell_parser;

use super::{Harness, ScriptedApprover, answer, call, outcomes, rules};
use toold_tests::PATIENCE;

#[tokio::test]
async fn approvals_allow_deny_and_remember() {
    let harness = Harness::new(&[], Rules::default(), SessionMode::Default);
    let mut deny = ApprovalAnswer::new(ApprovalDecision::Deny);
    deny.message = Some("not today".into());
    let approver = ScriptedApprover::answering(vec![
        answer(ApprovalDecision::AllowOnce),
        Some(ApprovalReply::Answer(deny, None)),
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
    let mut settings = BatchSettings::default();
    settings.limits.approval_timeout = Duration::from_millis(200);
    let pipeline = Arc::new(Pipeline::with_settings(
        harness.pipeline.registry.clone(),
        shell_parser(),
        settings,
    ));
    let calls: Vec<ToolCall> = (1..=3)
        .map(|n| call(&n.to_string(), "run_command", json!({"command": "true"})))
        .collect();
    let batch = Batch {
        id: "b_2".into(),
        iteration: 0,
        calls: calls.into_iter().map(Into::into).collect(),
    };
    let results = pipeline
        .run_batch(&harness.session, batch, &BatchControl::new(3), "test")
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
        Some(ApprovalReply::Answer(to_secret, None)),
        Some(ApprovalReply::Answer(to_junk, None)),
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
    // Canceled once the first command is seen running (its output is out), however long the
    // shell took to start.
    let events = Arc::clone(&harness.events);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !events.events().iter().any(
            |event| matches!(event, Event::Output(output) if output.body.data.contains("started")),
        ) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
    let approver = ScriptedApprover::answering(vec![None]);
    let control = BatchControl::new(1);
    // Canceled while the approval is pending, whenever the line's analysis let it be asked.
    let canceller = control.calls[0].clone();
    *approver.on_request.lock().unwrap() = Some(Box::new(move || canceller.cancel()));
    harness.approver(approver);
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
