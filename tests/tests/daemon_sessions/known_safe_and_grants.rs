//! Where the sandbox does not decide (`sandboxed_commands = "ask"`): read-only commands of the
//! known-safe list run unasked, and nothing else does; an "allow for this session" answer
//! grants the command's program and subcommand (`git log *`), never a program that runs other
//! code, which keeps its exact grant. Rules speak first throughout.

use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_tests::daemon::{TestDaemon, answer_with, no_answers};

use super::{approvals, command_call, requests, result, seen};

fn asked_nobody(result: &Value) -> bool {
    result["error_type"] == "permission_denied"
        && result["error"]
            .as_str()
            .is_some_and(|error| error.contains("no approver is attached"))
}

#[tokio::test]
async fn known_safe_reads_run_unasked_and_nothing_else_does() {
    let daemon = TestDaemon::start_asking();
    let work = daemon.work();
    std::fs::write(work.join("a.txt"), "alpha\nbeta\n").unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&work, json!({})).await;
    let safe = [
        "ls -la",
        "cat a.txt",
        "head -n 1 a.txt",
        "wc -l a.txt",
        "grep -n beta a.txt",
        "find . -name a.txt",
        "cat a.txt | wc -l",
    ];
    for line in safe {
        let response = client
            .execute(&session, json!([command_call("c", line)]))
            .await;
        let result = result(&response, 0);
        assert!(result["error_type"].is_null(), "{line}: {result}");
        assert_eq!(
            result["metadata"]["permission"]["step"], "known_safe",
            "{line}"
        );
    }
    // Each of these writes, runs something else, reads outside the roots or hides what it
    // reads: asked, and nothing happened.
    let outside = tempfile::tempdir().unwrap();
    let unsafe_lines = [
        "find . -name a.txt -delete".to_owned(),
        "sort -o sorted.txt a.txt".to_owned(),
        "cat a.txt > copy.txt".to_owned(),
        "cat $(echo a.txt)".to_owned(),
        "cat /etc/hostname".to_owned(),
        format!("ls {}", outside.path().display()),
        "ls ~".to_owned(),
        "git -c core.pager=touch log".to_owned(),
        "rg --pre ./x beta".to_owned(),
        "touch new.txt".to_owned(),
    ];
    for line in &unsafe_lines {
        let response = client
            .execute(&session, json!([command_call("c", line)]))
            .await;
        assert!(asked_nobody(result(&response, 0)), "{line}: {response}");
    }
    assert!(work.join("a.txt").is_file());
    for made in ["sorted.txt", "copy.txt", "new.txt"] {
        assert!(!work.join(made).exists(), "{made}");
    }
    // The call's env could make `cat` another program: not known-safe.
    let response = client
        .execute(
            &session,
            json!([{"id": "c", "name": "run_command", "arguments": {"command": "cat a.txt", "env": {"PATH": "/tmp"}}}]),
        )
        .await;
    assert!(asked_nobody(result(&response, 0)), "{response}");
    // Deny and ask rules beat the list.
    let ruled = client
        .create_session(
            &work,
            json!({"rules": {"deny": ["run_command(cat *)"], "ask": ["run_command(ls *)"]}}),
        )
        .await;
    let response = client
        .execute(
            &ruled,
            json!([command_call("a", "cat a.txt"), command_call("b", "ls")]),
        )
        .await;
    assert_eq!(result(&response, 0)["error_type"], "permission_denied");
    assert!(
        result(&response, 0)["error"]
            .as_str()
            .unwrap()
            .contains("denied by the rule run_command(cat *)")
    );
    assert!(asked_nobody(result(&response, 1)), "{response}");
}

#[tokio::test]
async fn a_session_grant_covers_the_program_and_subcommand_and_no_more() {
    let daemon = TestDaemon::start_asking();
    let work = daemon.work();
    let git = |args: &str| {
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("git {args}"))
            .current_dir(&work)
            .status()
            .unwrap();
        assert!(status.success(), "git {args}");
    };
    git("init -q");
    std::fs::write(work.join("a.txt"), "alpha\n").unwrap();
    git("add a.txt");
    git("-c user.name=t -c user.email=t@t commit -qm one");
    let asked = seen();
    let client = daemon
        .connect(
            approvals(),
            answer_with(asked.clone(), |_| {
                Reply::result(json!({"decision": "allow_session"}))
            }),
        )
        .await;
    let session = client.create_session(&work, json!({})).await;

    // `git ls-files` is not on the known-safe list: it asks, and the approval offers the
    // pattern it grants.
    let response = client
        .execute(&session, json!([command_call("a", "git ls-files")]))
        .await;
    assert!(result(&response, 0)["error_type"].is_null(), "{response}");
    let first = requests(&asked);
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].params.as_ref().unwrap()["suggestions"],
        json!(["run_command(git ls-files *)"])
    );
    // Another `git ls-files` runs unasked, on the grant; `git push` and `git -c …` do not.
    let response = client
        .execute(&session, json!([command_call("b", "git ls-files --stage")]))
        .await;
    assert!(result(&response, 0)["error_type"].is_null(), "{response}");
    assert_eq!(requests(&asked).len(), 1, "the grant covered it");
    let explained = client
        .request(
            "permissions/explain",
            json!({"session_id": session, "call": {"name": "run_command", "arguments": {"command": "git ls-files -o"}}}),
        )
        .await
        .unwrap();
    assert_eq!(explained["step"], "grant", "{explained}");
    assert_eq!(
        explained["rule"], "run_command(git ls-files *)",
        "{explained}"
    );
    assert_eq!(explained["source"]["kind"], "grant", "{explained}");
    for line in ["git push origin main", "git -c core.pager=cat ls-files"] {
        let explained = client
            .request(
                "permissions/explain",
                json!({"session_id": session, "call": {"name": "run_command", "arguments": {"command": line}}}),
            )
            .await
            .unwrap();
        assert_eq!(explained["decision"], "ask", "{line}: {explained}");
    }

    // A program that runs other code keeps an exact grant: `bash -c …` once granted covers
    // that line only.
    let response = client
        .execute(
            &session,
            json!([command_call("c", "bash -c 'touch made.txt'")]),
        )
        .await;
    assert!(result(&response, 0)["error_type"].is_null(), "{response}");
    let asked_now = requests(&asked);
    assert_eq!(
        asked_now[1].params.as_ref().unwrap()["suggestions"],
        json!(["run_command(bash -c 'touch made.txt')"])
    );
    let explained = client
        .request(
            "permissions/explain",
            json!({"session_id": session, "call": {"name": "run_command", "arguments": {"command": "bash -c 'touch other.txt'"}}}),
        )
        .await
        .unwrap();
    assert_eq!(explained["decision"], "ask", "{explained}");
}
