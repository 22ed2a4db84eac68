//! Where the sandbox does not decide (`sandboxed_commands = "ask"`): read-only commands of the
//! known-safe list run unasked, and nothing else does; an "allow for this session" answer
//! grants the command's program and subcommand (`git log *`), never a program that runs other
//! code, which keeps its exact grant. Rules speak first throughout.

use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_tests::daemon::{TestDaemon, answer_with, asked_nobody, command_call, no_answers};

use super::{approvals, requests, result, seen};

fn output_of(result: &Value) -> &str {
    result["content"].as_str().unwrap_or_default()
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
    // A wrapper that moves the command elsewhere, and options that follow links out of the
    // roots, are not known-safe either.
    std::fs::write(outside.path().join("secret.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), work.join("vendor")).unwrap();
    for dir in ["left", "right"] {
        std::fs::create_dir(work.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), work.join("left/s.txt")).unwrap();
    std::fs::write(work.join("right/s.txt"), "inside\n").unwrap();
    for line in [
        format!("env -C {} cat secret.txt", outside.path().display()),
        format!("env --chdir={} cat secret.txt", outside.path().display()),
        "grep -R outside vendor/".to_owned(),
        "rg -L outside".to_owned(),
        "find -L . -name secret.txt".to_owned(),
        "diff -r vendor/ .".to_owned(),
        "diff left right".to_owned(),
    ] {
        let response = client
            .execute(&session, json!([command_call("c", &line)]))
            .await;
        assert!(asked_nobody(result(&response, 0)), "{line}: {response}");
        assert!(
            !output_of(result(&response, 0)).contains("outside"),
            "{line}: {response}"
        );
    }
    // The call's env could make `cat` another program: not known-safe.
    let response = client
        .execute(
            &session,
            json!([{"id": "c", "name": "run_command", "arguments": {"command": "cat a.txt", "env": {"PATH": "/tmp"}}}]),
        )
        .await;
    assert!(asked_nobody(result(&response, 0)), "{response}");
    // What a listed command reads is judged as `read_file` would be: a deny rule of the file
    // denies it, and beside one a command that reads a tree asks (it could show the file).
    std::fs::write(work.join(".env"), "TOKEN=x\n").unwrap();
    let guarded = client
        .create_session(&work, json!({"rules": {"deny": ["read_file(.env)"]}}))
        .await;
    let response = client
        .execute(
            &guarded,
            json!([
                command_call("a", "cat .env"),
                command_call("b", "grep -r TOKEN ."),
                command_call("c", "cat a.txt")
            ]),
        )
        .await;
    assert_eq!(
        result(&response, 0)["error_type"],
        "permission_denied",
        "{response}"
    );
    assert!(
        !asked_nobody(result(&response, 0)),
        "denied, not asked: {response}"
    );
    assert!(asked_nobody(result(&response, 1)), "{response}");
    assert!(result(&response, 2)["error_type"].is_null(), "{response}");
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

    // A quoted glob makes `git log` not known-safe (the word no longer says it was quoted):
    // it asks, and the approval offers the pattern it grants.
    let response = client
        .execute(
            &session,
            json!([command_call("a", "git log -1 -- '*.txt'")]),
        )
        .await;
    assert!(result(&response, 0)["error_type"].is_null(), "{response}");
    let first = requests(&asked);
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].params.as_ref().unwrap()["suggestions"],
        json!(["run_command(git log *)"])
    );
    // `git log -2` runs unasked, on the grant; `git push` and `git -c …` do not.
    let response = client
        .execute(
            &session,
            json!([command_call("b", "git log -2 -- '*.txt'")]),
        )
        .await;
    assert!(result(&response, 0)["error_type"].is_null(), "{response}");
    assert_eq!(requests(&asked).len(), 1, "the grant covered it");
    let explained = client
        .explain(
            &session,
            "run_command",
            &json!({"command": "git log -3 --stat -- '*.rs'"}),
        )
        .await;
    assert_eq!(explained["step"], "grant", "{explained}");
    assert_eq!(explained["rule"], "run_command(git log *)", "{explained}");
    assert_eq!(explained["source"]["kind"], "grant", "{explained}");
    for line in [
        "git push origin main",
        "git -c core.pager=cat log -- '*.txt'",
    ] {
        let explained = client
            .explain(&session, "run_command", &json!({"command": line}))
            .await;
        assert_eq!(explained["decision"], "ask", "{line}: {explained}");
    }

    // The grant's command moved elsewhere by `env -C` is not the granted one: it asks (with
    // it, `git log --output=config` would write the repository's config).
    let explained = client
        .explain(
            &session,
            "run_command",
            &json!({"command": "env -C .git git log -1 --output=config"}),
        )
        .await;
    assert_eq!(explained["decision"], "ask", "{explained}");

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
        .explain(
            &session,
            "run_command",
            &json!({"command": "bash -c 'touch other.txt'"}),
        )
        .await;
    assert_eq!(explained["decision"], "ask", "{explained}");
}

/// A session of `dir`, one call of `line`; the call's result.
async fn run_in(
    client: &toold_tests::daemon::TestClient,
    dir: &std::path::Path,
    line: &str,
) -> Value {
    let session = client.create_session(dir, json!({})).await;
    let response = client
        .execute(&session, json!([command_call("c", line)]))
        .await;
    result(&response, 0).clone()
}

#[tokio::test]
async fn always_holds_in_the_project_after_a_restart_and_until_removed() {
    let mut daemon = TestDaemon::start_asking();
    daemon.keep_config_file();
    let project = daemon.work().join("app");
    let other = daemon.work().join("other");
    for dir in [&project, &other] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let project = project.canonicalize().unwrap();
    let asked = seen();
    let decide = std::sync::Arc::new(std::sync::Mutex::new("allow_always"));
    let answer = decide.clone();
    let client = daemon
        .connect(
            approvals(),
            answer_with(asked.clone(), move |_| {
                Reply::result(json!({"decision": *answer.lock().unwrap()}))
            }),
        )
        .await;

    // Asked once, the person answers "always": the request named the rule and the project.
    let first = run_in(&client, &project, "mkdir -p build").await;
    assert!(first["error_type"].is_null(), "{first}");
    let request = requests(&asked)[0].params.clone().unwrap();
    assert_eq!(
        request["always"],
        json!({"rule": "run_command(mkdir *)", "project": project})
    );
    let config = std::fs::read_to_string(daemon.config_file()).unwrap();
    assert!(
        config.starts_with(toold_tests::daemon::COMMANDS_ASK),
        "{config}"
    );
    assert!(config.contains("[[permissions.project]]"), "{config}");

    // A new session of the project runs it unasked, by that rule of the config file.
    let again = run_in(&client, &project, "mkdir -p build/x").await;
    assert!(again["error_type"].is_null(), "{again}");
    assert!(project.join("build/x").is_dir());
    assert_eq!(requests(&asked).len(), 1, "the rule decided");
    // Another project is asked.
    run_in(&client, &other, "mkdir -p build").await;
    assert_eq!(requests(&asked).len(), 2, "another project asks");

    // After a restart it still holds.
    drop(client);
    daemon.restart();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&project, json!({})).await;
    let explained = client
        .explain(
            &session,
            "run_command",
            &json!({"command": "mkdir -p dist"}),
        )
        .await;
    assert_eq!(explained["step"], "allow_rule", "{explained}");
    assert_eq!(explained["rule"], "run_command(mkdir *)", "{explained}");
    assert_eq!(explained["source"]["kind"], "config", "{explained}");

    // `toold rules` lists it with its file and line; `toold rules remove` ends it.
    let listed = daemon
        .command()
        .args(["rules", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{text}");
    let file = daemon.config_file();
    assert!(
        text.contains(&format!(
            "allow  run_command(mkdir *)  ({}:",
            file.display()
        )),
        "{text}"
    );
    let removed = daemon
        .command()
        .args(["rules", "remove", "run_command(mkdir *)", "--project"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    let asked_now = run_in(&client, &project, "mkdir -p dist").await;
    assert_eq!(asked_now["error_type"], "permission_denied", "{asked_now}");
    assert!(!project.join("dist").exists());

    // `deny_always`: denied now, and from then on by the rule, without asking.
    *decide.lock().unwrap() = "deny_always";
    let asked = seen();
    let answer = decide.clone();
    let client = daemon
        .connect(
            approvals(),
            answer_with(asked.clone(), move |_| {
                Reply::result(json!({"decision": *answer.lock().unwrap()}))
            }),
        )
        .await;
    let denied = run_in(&client, &project, "touch a.txt").await;
    assert_eq!(denied["error_type"], "permission_denied", "{denied}");
    let denied = run_in(&client, &project, "touch b.txt").await;
    assert!(
        denied["error"]
            .as_str()
            .unwrap()
            .contains("denied by the rule run_command(touch *)"),
        "{denied}"
    );
    assert_eq!(requests(&asked).len(), 1);
    assert!(!project.join("a.txt").exists() && !project.join("b.txt").exists());
}
