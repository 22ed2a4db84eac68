//! The `preview` of an approval request against what happens: for `write_file` and
//! `edit_file`, the diff the approver saw equals the diff of the file before the call and the
//! file the call left on disk (a new file, an edit, `replace_all`, replaced arguments, a diff
//! over the cap); for `run_command`, the directory, the simple commands and the sandbox.

use std::path::Path;

use serde_json::{Value, json};
use similar::TextDiff;
use toold_protocol::PREVIEW_MAX_BYTES;
use toold_tests::daemon::{TestClient, TestDaemon, always};

use super::{approvals, outcomes, requests, seen};

/// The unified diff of `before` (`None`: no file) and `after` for `path`, as a preview makes
/// it: 3 lines of context, a new file against `/dev/null`.
fn expected_diff(path: &Path, before: Option<&str>, after: &str) -> String {
    let shown = path.display().to_string();
    let old_header = if before.is_some() {
        shown.as_str()
    } else {
        "/dev/null"
    };
    TextDiff::from_lines(before.unwrap_or(""), after)
        .unified_diff()
        .context_radius(3)
        .header(old_header, &shown)
        .to_string()
}

/// Runs `call` in a fresh session of `daemon` whose approver answers `answer`; returns the
/// `preview` of the one approval request and the call's outcome.
async fn preview_of(daemon: &TestDaemon, call: Value, answer: Value) -> (Value, String) {
    let asked = seen();
    let client: TestClient = daemon
        .connect(approvals(), always(answer, asked.clone()))
        .await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let response = client.execute(&session, json!([call])).await;
    let asked = requests(&asked);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let request = asked[0].params.clone().expect("params");
    (
        request["preview"].clone(),
        outcomes(&response)[0].to_owned(),
    )
}

fn allow_once() -> Value {
    json!({"decision": "allow_once"})
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("the file")
}

#[tokio::test]
async fn a_new_file_is_previewed_as_its_whole_content() {
    let daemon = TestDaemon::start();
    let path = daemon.work().join("sub/new.txt");
    let content = "first line\nsecond line\nno newline at the end";
    let call = json!({"id": "w", "name": "write_file",
                      "arguments": {"path": "sub/new.txt", "content": content}});
    let (preview, outcome) = preview_of(&daemon, call, allow_once()).await;
    assert_eq!(outcome, "ok");
    assert_eq!(read(&path), content);
    assert_eq!(
        preview,
        json!({"kind": "diff", "path": path.display().to_string(),
               "diff": expected_diff(&path, None, &read(&path))})
    );
    assert!(
        preview["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- /dev/null\n")
    );
}

#[tokio::test]
async fn an_edit_is_previewed_as_the_change_it_makes() {
    let daemon = TestDaemon::start();
    let path = daemon.work().join("a.txt");
    let before: String = (1..=40).map(|n| format!("line {n}\n")).collect();
    std::fs::write(&path, &before).expect("fixture");
    let call = json!({"id": "e", "name": "edit_file", "arguments":
        {"path": "a.txt", "old_string": "line 20\n", "new_string": "line twenty\nline 20½\n"}});
    let (preview, outcome) = preview_of(&daemon, call, allow_once()).await;
    assert_eq!(outcome, "ok");
    let after = read(&path);
    assert_ne!(after, before);
    assert_eq!(preview["kind"], "diff");
    assert_eq!(preview["diff"], expected_diff(&path, Some(&before), &after));
    assert!(preview.get("cut_bytes").is_none(), "{preview}");
}

#[tokio::test]
async fn replace_all_is_previewed_with_every_match() {
    let daemon = TestDaemon::start();
    let path = daemon.work().join("many.rs");
    let before: String = (1..=60)
        .map(|n| {
            if n % 15 == 0 {
                "old_name();\n".to_owned()
            } else {
                format!("// {n}\n")
            }
        })
        .collect();
    std::fs::write(&path, &before).expect("fixture");
    let call = json!({"id": "e", "name": "edit_file", "arguments": {"path": "many.rs",
        "old_string": "old_name", "new_string": "new_name", "replace_all": true}});
    let (preview, outcome) = preview_of(&daemon, call, allow_once()).await;
    assert_eq!(outcome, "ok");
    let after = read(&path);
    assert_eq!(after.matches("new_name").count(), 4);
    let diff = preview["diff"].as_str().expect("a diff");
    assert_eq!(diff, expected_diff(&path, Some(&before), &after));
    assert_eq!(diff.matches("\n+new_name").count(), 4, "{diff}");
}

#[tokio::test]
async fn arguments_the_approver_replaced_land_and_preview_as_they_land() {
    let daemon = TestDaemon::start();
    let path = daemon.work().join("a.txt");
    let before = "alpha\nbeta\ngamma\n";
    std::fs::write(&path, before).expect("fixture");
    let arguments = |new: &str| json!({"path": "a.txt", "old_string": "beta", "new_string": new});
    let call = |new: &str| json!({"id": "e", "name": "edit_file", "arguments": arguments(new)});
    // The model asked for "beta2"; the approver changes it to "BETA": the preview showed the
    // model's, the disk has the approver's.
    let answer = json!({"decision": "allow_once", "arguments": arguments("BETA")});
    let (preview, outcome) = preview_of(&daemon, call("beta2"), answer).await;
    assert_eq!(outcome, "ok");
    assert_eq!(read(&path), "alpha\nBETA\ngamma\n");
    assert_eq!(
        preview["diff"],
        expected_diff(&path, Some(before), "alpha\nbeta2\ngamma\n")
    );
    // Asked with the approver's arguments on the file as it was, the preview is what lands.
    std::fs::write(&path, before).expect("fixture again");
    let (preview, outcome) = preview_of(&daemon, call("BETA"), allow_once()).await;
    assert_eq!(outcome, "ok");
    assert_eq!(
        preview["diff"],
        expected_diff(&path, Some(before), &read(&path))
    );
}

#[tokio::test]
async fn a_diff_over_the_cap_is_cut_after_a_line_and_says_how_much() {
    let daemon = TestDaemon::start();
    let path = daemon.work().join("big.txt");
    // A new file: its diff is as long as it, and cheap to make (lines that all differ from an
    // existing file's would make the diff quadratic, and slow in a debug build).
    let content: String = (0..10_000).map(|n| format!("new line {n:05}\n")).collect();
    let call = json!({"id": "w", "name": "write_file",
                      "arguments": {"path": "big.txt", "content": content}});
    let (preview, outcome) = preview_of(&daemon, call, allow_once()).await;
    assert_eq!(outcome, "ok");
    let full = expected_diff(&path, None, &read(&path));
    assert!(full.len() > 2 * PREVIEW_MAX_BYTES);
    let diff = preview["diff"].as_str().expect("a diff");
    let cut = preview["cut_bytes"].as_u64().expect("cut_bytes") as usize;
    let last_line = format!("[… {cut} more bytes of the diff cut]\n");
    let kept = diff
        .strip_suffix(&last_line)
        .unwrap_or_else(|| panic!("{}", &diff[diff.len() - 80..]));
    assert!(kept.len() <= PREVIEW_MAX_BYTES && kept.ends_with('\n'));
    assert!(full.starts_with(kept));
    assert_eq!(kept.len() + cut, full.len());
}

#[tokio::test]
async fn a_change_that_cannot_be_worked_out_says_why_in_one_line() {
    let daemon = TestDaemon::start();
    std::fs::write(daemon.work().join("a.txt"), "alpha\n").expect("fixture");
    let call = json!({"id": "e", "name": "edit_file",
        "arguments": {"path": "a.txt", "old_string": "omega", "new_string": "x"}});
    let (preview, outcome) = preview_of(&daemon, call, allow_once()).await;
    assert_eq!(outcome, "not_found");
    assert_eq!(preview["kind"], "unavailable");
    let reason = preview["reason"].as_str().expect("a reason");
    assert!(reason.contains("old_string was not found"), "{reason}");
    assert!(!reason.contains('\n'));
}

#[tokio::test]
async fn a_command_is_previewed_with_its_directory_commands_and_sandbox() {
    let daemon = TestDaemon::start_asking();
    let work = daemon.work();
    std::fs::create_dir(work.join("sub")).expect("fixture");
    let call = json!({"id": "c", "name": "run_command", "arguments": {
        "command": "echo hi | wc -l && git status", "cwd": "sub",
        "escalate": {"network": true}, "justification": "to fetch"}});
    let (preview, outcome) = preview_of(&daemon, call, json!({"decision": "deny"})).await;
    assert_eq!(outcome, "permission_denied");
    assert_eq!(
        preview,
        json!({"kind": "command", "cwd": work.join("sub").display().to_string(),
               "commands": ["echo hi", "wc -l", "git status"],
               "sandbox": {"mode": "workspace_write", "network": true,
                           "writable": [work.display().to_string()],
                           "escalation": {"network": true, "justification": "to fetch"}}})
    );
    // Without an escalation the sandbox is the session's: no network.
    let call = json!({"id": "c", "name": "run_command",
                      "arguments": {"command": "touch made.txt"}});
    let (preview, _) = preview_of(&daemon, call, json!({"decision": "deny"})).await;
    assert_eq!(preview["cwd"], work.display().to_string());
    assert_eq!(preview["commands"], json!(["touch made.txt"]));
    assert_eq!(preview["sandbox"]["network"], false);
    assert!(preview["sandbox"].get("escalation").is_none(), "{preview}");
}
