//! `permissions/explain` against the real decision, end to end: every row of a permission
//! table covering each decision step and each rule source is explained, then run through the
//! real pipeline on the same daemon (an approver that records what it is asked), and the two
//! must agree; the step and the rule's source are those the row expects. Explaining has no
//! side effect: no file written, no hook program run, no event, no approval request. And
//! `toold explain` prints the decision first, then why, then what to add.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::Request;
use toold_protocol::peer::Reply;
use toold_tests::daemon::{
    TestClient, TestDaemon, answer_with, is_session_event, results, wire_error_type_or_ok,
};

/// Config rules on known lines (the file's line numbers are asserted below).
const CONFIG: &str = "allow_bypass = true

[permissions]
allow = [
  \"run_command(echo config-allowed *)\",
]
ask = [
  \"read_file(asked/**)\",
]
deny = [
  \"run_command(shred *)\",
  \"read_file(secret/**)\",
]
sandboxed_commands = \"ask\"
";
const ALLOW_LINE: u64 = 5;
const SHRED_LINE: u64 = 11;
const SECRET_LINE: u64 = 12;

/// One row: the session, the call, and what explain must say of it.
struct Row {
    name: &'static str,
    session: Value,
    tool: &'static str,
    arguments: Value,
    decision: &'static str,
    step: Option<&'static str>,
    /// `config`, `session`, `grant`, or none.
    source: Option<&'static str>,
}

fn row(
    name: &'static str,
    session: Value,
    tool: &'static str,
    arguments: Value,
    expected: (&'static str, Option<&'static str>, Option<&'static str>),
) -> Row {
    Row {
        name,
        session,
        tool,
        arguments,
        decision: expected.0,
        step: expected.1,
        source: expected.2,
    }
}

/// What the approver answers: `deny`, or `allow_session` while a grant is being recorded.
type Answer = Arc<Mutex<&'static str>>;

async fn approving_client(daemon: &TestDaemon) -> (TestClient, Arc<Mutex<Vec<Request>>>, Answer) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer: Answer = Arc::new(Mutex::new("deny"));
    let decide = answer.clone();
    let client = TestClient::connect(
        &daemon.socket(),
        toold_protocol::Framing::Ndjson,
        json!({"approvals": true}),
        answer_with(seen.clone(), move |request| {
            assert_eq!(request.method, "approval/request");
            Reply::result(json!({"decision": *decide.lock().expect("answer")}))
        }),
    )
    .await;
    (client, seen, answer)
}

/// The decision the pipeline made: `ask` when the approver was asked, else the result's.
async fn real_decision(
    client: &TestClient,
    seen: &Mutex<Vec<Request>>,
    session_id: &str,
    tool: &str,
    arguments: &Value,
) -> String {
    let asked_before = seen.lock().expect("requests").len();
    let response = client
        .execute(
            session_id,
            json!([{"id": "c", "name": tool, "arguments": arguments}]),
        )
        .await;
    if seen.lock().expect("requests").len() > asked_before {
        return "ask".to_owned();
    }
    match wire_error_type_or_ok(results(&response)[0]) {
        "permission_denied" => "deny",
        "tool_not_allowed" => "tool_not_allowed",
        "unknown_tool" => "unknown_tool",
        "invalid_arguments" => "invalid_arguments",
        // It ran: whatever the tool made of it, the permission step let it through.
        _ => "allow",
    }
    .to_owned()
}

fn table(work: &std::path::Path) -> Vec<Row> {
    let none = json!({});
    let read = |path: &str| json!({"path": work.join(path)});
    let run = |line: &str| json!({"command": line});
    vec![
        row(
            "config deny rule",
            none.clone(),
            "run_command",
            run("shred -u x"),
            ("deny", Some("deny_rule"), Some("config")),
        ),
        row(
            "config deny rule on a path",
            none.clone(),
            "read_file",
            read("secret/key"),
            ("deny", Some("deny_rule"), Some("config")),
        ),
        row(
            "a redirection reads a denied file",
            none.clone(),
            "run_command",
            run("cat < secret/key"),
            ("deny", Some("deny_rule"), Some("config")),
        ),
        row(
            "session deny rule",
            json!({"rules": {"deny": ["read_file(notes/**)"]}}),
            "read_file",
            read("notes/a.txt"),
            ("deny", Some("deny_rule"), Some("session")),
        ),
        row(
            "deny wins in bypass",
            json!({"mode": "bypass"}),
            "run_command",
            run("shred x"),
            ("deny", Some("deny_rule"), Some("config")),
        ),
        row(
            "plan mode",
            json!({"mode": "plan"}),
            "write_file",
            json!({"path": work.join("p.txt"), "content": "x"}),
            ("tool_not_allowed", Some("plan_mode"), None),
        ),
        row(
            "config ask rule",
            none.clone(),
            "read_file",
            read("asked/q.txt"),
            ("ask", Some("ask_rule"), Some("config")),
        ),
        row(
            "session ask rule",
            json!({"rules": {"ask": ["run_command(echo session-asked *)"]}}),
            "run_command",
            run("echo session-asked now"),
            ("ask", Some("ask_rule"), Some("session")),
        ),
        row(
            "ask rule in bypass",
            json!({"mode": "bypass"}),
            "read_file",
            read("asked/q.txt"),
            ("ask", Some("ask_rule"), Some("config")),
        ),
        row(
            "bypass",
            json!({"mode": "bypass"}),
            "run_command",
            run("true"),
            ("allow", Some("bypass_mode"), None),
        ),
        row(
            "config allow rule",
            none.clone(),
            "run_command",
            run("echo config-allowed hi"),
            ("allow", Some("allow_rule"), Some("config")),
        ),
        row(
            "session allow rule",
            json!({"rules": {"allow": ["run_command(true)"]}}),
            "run_command",
            run("true && echo config-allowed x"),
            ("allow", Some("allow_rule"), Some("session")),
        ),
        row(
            "one command uncovered",
            json!({"rules": {"allow": ["run_command(true)"]}}),
            "run_command",
            run("true && date"),
            ("ask", Some("default_ask"), None),
        ),
        row(
            "accept_edits",
            json!({"mode": "accept_edits"}),
            "write_file",
            json!({"path": work.join("edit.txt"), "content": "x"}),
            ("allow", Some("accept_edits"), None),
        ),
        row(
            "accept_edits outside the roots",
            json!({"mode": "accept_edits"}),
            "write_file",
            json!({"path": "/tmp/toold-explain-outside.txt", "content": "x"}),
            ("ask", Some("default_ask"), None),
        ),
        row(
            "read-only inside the roots",
            none.clone(),
            "read_file",
            read("notes/a.txt"),
            ("allow", Some("read_only_inside_roots"), None),
        ),
        row(
            "read-only outside the roots",
            none.clone(),
            "read_file",
            json!({"path": "/etc/hostname"}),
            ("ask", Some("default_ask"), None),
        ),
        row(
            "default ask",
            none.clone(),
            "run_command",
            run("true"),
            ("ask", Some("default_ask"), None),
        ),
        row(
            "dont_ask",
            json!({"mode": "dont_ask"}),
            "run_command",
            run("true"),
            ("deny", Some("dont_ask"), None),
        ),
        row(
            "dont_ask with an ask rule",
            json!({"mode": "dont_ask"}),
            "read_file",
            read("asked/q.txt"),
            ("deny", Some("dont_ask"), Some("config")),
        ),
        row(
            "unreadable line",
            json!({"mode": "bypass"}),
            "run_command",
            run("echo $("),
            ("ask", Some("unreadable_command"), None),
        ),
        row(
            "protected path",
            json!({"mode": "accept_edits"}),
            "write_file",
            json!({"path": work.join(".git/hooks/pre-commit"), "content": "x"}),
            ("ask", Some("protected_path"), None),
        ),
        row(
            "not in allowed_tools",
            json!({"allowed_tools": ["read_file"]}),
            "run_command",
            run("true"),
            ("tool_not_allowed", Some("tool_list"), None),
        ),
        row(
            "unknown tool",
            none.clone(),
            "no_such_tool",
            json!({}),
            ("unknown_tool", None, None),
        ),
        row(
            "invalid arguments",
            none,
            "read_file",
            json!({"path": 7}),
            ("invalid_arguments", None, None),
        ),
    ]
}

#[tokio::test]
async fn explain_agrees_with_the_real_decision_over_the_permission_table() {
    let daemon = TestDaemon::start_with_config(Some(CONFIG));
    let work = daemon.work();
    for dir in ["notes", "asked", "secret", ".git/hooks"] {
        std::fs::create_dir_all(work.join(dir)).expect("directories");
    }
    for file in ["notes/a.txt", "asked/q.txt", "secret/key"] {
        std::fs::write(work.join(file), "text\n").expect("files");
    }
    let config_file = daemon.root().join("config/toold/config.toml");
    let (client, seen, _answer) = approving_client(&daemon).await;
    for row in table(&work) {
        let session = client.create_session(&work, row.session.clone()).await;
        let explained = client.explain(&session, row.tool, &row.arguments).await;
        let what = format!("{}: {explained:#}", row.name);
        assert_eq!(explained["decision"], row.decision, "{what}");
        assert_eq!(explained["step"].as_str(), row.step, "{what}");
        assert_eq!(explained["source"]["kind"].as_str(), row.source, "{what}");
        if row.source == Some("config") {
            assert_eq!(explained["source"]["file"], json!(config_file), "{what}");
        }
        // The same call described instead of live: the same answer.
        let mut described = row.session.clone();
        described["cwd"] = json!(work);
        let from_description = client
            .request(
                "permissions/explain",
                json!({"session": described, "call": {"name": row.tool, "arguments": row.arguments}}),
            )
            .await
            .expect("permissions/explain of a described session");
        assert_eq!(from_description, explained, "{}", row.name);
        let real = real_decision(&client, &seen, &session, row.tool, &row.arguments).await;
        assert_eq!(real, row.decision, "{}: the real decision", row.name);
        // What explain suggests adding does allow the call; where it suggests nothing, no
        // allow rule could.
        let suggested = explained["suggestions"]
            .as_array()
            .expect("suggestions")
            .clone();
        if !suggested.is_empty() {
            let mut with_rules = row.session.clone();
            let mut allow: Vec<Value> = with_rules["rules"]["allow"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            allow.extend(suggested);
            with_rules["rules"]["allow"] = Value::Array(allow);
            with_rules["cwd"] = json!(work);
            let again = client
                .request("permissions/explain", json!({"session": with_rules, "call": {"name": row.tool, "arguments": row.arguments}}))
                .await
                .expect("explain with the suggested rules");
            assert_eq!(
                again["decision"], "allow",
                "{}: the suggestion {again:#}",
                row.name
            );
        }
    }
}

#[tokio::test]
async fn explain_names_the_rule_line_each_command_and_the_grant() {
    let daemon = TestDaemon::start_with_config(Some(CONFIG));
    let work = daemon.work();
    let (client, seen, answer) = approving_client(&daemon).await;
    let session = client
        .create_session(&work, json!({"rules": {"allow": ["run_command(true)"]}}))
        .await;

    let line = json!({"command": "true; echo config-allowed a; date > out.txt"});
    let explained = client.explain(&session, "run_command", &line).await;
    assert_eq!(explained["decision"], "ask");
    assert_eq!(
        explained["commands"],
        json!([
            {"text": "true", "rule": "run_command(true)"},
            {"text": "echo config-allowed a", "rule": "run_command(echo config-allowed *)"},
            {"text": "date", "rule": null},
        ])
    );
    // An allow rule for the one command no rule covers is what would allow the line.
    assert_eq!(explained["suggestions"], json!(["run_command(date)"]));
    let out = work.join("out.txt");
    assert_eq!(
        explained["paths"],
        json!([{"argument": "command", "lexical": out, "resolved": out, "inside_roots": true,
                "access": "write"}])
    );
    assert_eq!(explained["sandbox"], "workspace_write");
    assert!(
        !out.exists(),
        "explaining a line that writes a file wrote it"
    );

    for (tool, arguments, line) in [
        ("run_command", json!({"command": "shred -u x"}), SHRED_LINE),
        (
            "read_file",
            json!({"path": work.join("secret/k")}),
            SECRET_LINE,
        ),
        (
            "run_command",
            json!({"command": "echo config-allowed b"}),
            ALLOW_LINE,
        ),
    ] {
        let explained = client.explain(&session, tool, &arguments).await;
        assert_eq!(explained["source"]["line"], line, "{explained:#}");
    }

    // A symlink: both forms of the path as judged.
    std::os::unix::fs::symlink("/etc/hostname", work.join("link")).expect("symlink");
    let explained = client
        .explain(&session, "read_file", &json!({"path": "link"}))
        .await;
    assert_eq!(
        explained["paths"],
        json!([{"argument": "path", "lexical": work.join("link"), "resolved": "/etc/hostname",
                "inside_roots": false}])
    );
    assert_eq!(explained["decision"], "ask");

    // An allow_session answer records a grant; explain then names it.
    *answer.lock().expect("answer") = "allow_session";
    let date = json!({"command": "sleep 0"});
    assert_eq!(
        real_decision(&client, &seen, &session, "run_command", &date).await,
        "ask"
    );
    let explained = client.explain(&session, "run_command", &date).await;
    assert_eq!(explained["decision"], "allow");
    assert_eq!(explained["step"], "grant");
    assert_eq!(explained["rule"], "run_command(sleep 0)");
    assert_eq!(explained["source"], json!({"kind": "grant"}));
    *answer.lock().expect("answer") = "deny";
    assert_eq!(
        real_decision(&client, &seen, &session, "run_command", &date).await,
        "allow"
    );
}

#[tokio::test]
async fn explaining_runs_nothing_asks_nobody_and_emits_nothing() {
    let probe_dir = tempfile::tempdir().expect("temporary directory");
    let probe = probe_dir.path().join("hook-ran");
    let config = format!(
        "[[hooks.pre_tool_use]]\ncommand = [\"touch\", {probe:?}]\n\n\
         [[hooks.post_tool_use]]\nmatcher = \"^write_file$\"\ncommand = [\"touch\", {probe:?}]\n"
    );
    let daemon = TestDaemon::start_with_config(Some(&config));
    let work = daemon.work();
    let (mut client, seen, _answer) = approving_client(&daemon).await;
    let session = client.create_session(&work, json!({})).await;
    // Its creator is attached: every event of the session would reach it.
    client.drain_notifications();
    let target = work.join("written.txt");
    for (tool, arguments) in [
        ("write_file", json!({"path": target, "content": "x"})),
        (
            "run_command",
            json!({"command": format!("touch {}", target.display())}),
        ),
        (
            "edit_file",
            json!({"path": target, "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let explained = client.explain(&session, tool, &arguments).await;
        // The command would run unasked in its sandbox: explaining it runs it no more than
        // explaining a call that asks.
        let expected = if tool == "run_command" {
            "allow"
        } else {
            "ask"
        };
        assert_eq!(explained["decision"], expected, "{explained:#}");
        let mut hooks = vec![format!("pre_tool_use: touch {}", probe.display())];
        if tool == "write_file" {
            hooks.push(format!("post_tool_use: touch {}", probe.display()));
        }
        assert_eq!(explained["hooks"], json!(hooks));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!target.exists(), "explain wrote the file");
    assert!(!probe.exists(), "explain ran a hook program");
    assert!(
        seen.lock().expect("requests").is_empty(),
        "explain asked an approver"
    );
    let events: Vec<_> = client
        .drain_notifications()
        .into_iter()
        .filter(is_session_event)
        .collect();
    assert!(events.is_empty(), "explain emitted events: {events:?}");

    // Unknown sessions and ambiguous params are errors, not answers.
    let unknown = client
        .request(
            "permissions/explain",
            json!({"session_id": "s_nope", "call": {"name": "read_file"}}),
        )
        .await
        .expect_err("an unknown session");
    assert!(format!("{unknown:?}").contains("s_nope"), "{unknown:?}");
    let both = client
        .request(
            "permissions/explain",
            json!({"session_id": session, "session": {"cwd": work}, "call": {"name": "read_file"}}),
        )
        .await
        .expect_err("both a session id and a description");
    assert!(format!("{both:?}").contains("exactly one"), "{both:?}");
}

#[tokio::test]
async fn toold_explain_prints_the_decision_why_and_what_to_add() {
    let daemon = TestDaemon::start_with_config(Some(CONFIG));
    let work = daemon.work();
    let config_file = daemon.root().join("config/toold/config.toml");
    let run = |args: &[&str]| daemon.run_toold("explain", args);
    let cwd = work.to_str().expect("a UTF-8 path");
    let (code, text) = run(&[
        "run_command",
        r#"{"command":"date && echo config-allowed x"}"#,
        "--cwd",
        cwd,
    ]);
    assert_eq!(code, Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ask: run_command (default_ask)", "{text}");
    assert!(text.contains("command: date  (no allow rule)"), "{text}");
    assert!(
        text.contains(
            "command: echo config-allowed x  (allowed by run_command(echo config-allowed *))"
        ),
        "{text}"
    );
    assert!(
        lines.last().is_some_and(
            |last| last.contains("to change it: add the allow rule 'run_command(date)'")
        ),
        "{text}"
    );
    // The rule it suggests does allow the call.
    let (code, text) = run(&[
        "run_command",
        r#"{"command":"date && echo config-allowed x"}"#,
        "--cwd",
        cwd,
        "--allow",
        "run_command(date)",
    ]);
    assert_eq!(code, Some(0), "{text}");

    let (code, text) = run(&["run_command", r#"{"command":"shred x"}"#, "--cwd", cwd]);
    assert_eq!(code, Some(1));
    assert!(text.starts_with("deny: run_command (deny_rule)"), "{text}");
    assert!(
        text.contains(&format!(
            "(from the config file {}:{SHRED_LINE})",
            config_file.display()
        )),
        "{text}"
    );

    let (code, text) = run(&[
        "run_command",
        r#"{"command":"date"}"#,
        "--cwd",
        cwd,
        "--allow",
        "run_command(date)",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{text}");
    let explained: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(explained["decision"], "allow");
    assert_eq!(explained["source"], json!({"kind": "session"}));

    let (code, text) = run(&[
        "write_file",
        r#"{"path":"x","content":"y"}"#,
        "--cwd",
        cwd,
        "--mode",
        "plan",
    ]);
    assert_eq!(code, Some(1));
    assert!(
        text.starts_with("tool_not_allowed: write_file (plan_mode)"),
        "{text}"
    );
    assert!(!work.join("x").exists());
}
