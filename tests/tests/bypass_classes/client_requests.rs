//! What a client asks of the daemon: tools it registers (no system tools, no names a rule cannot
//! name), sessions that must survive a restart, and rules that can never match.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_protocol::{Request, RequestError};
use toold_tests::daemon::{TestDaemon, command_call, no_answers, tool_names};

use super::{SECRET, approving_for_the_session, call, execute_one, session_with, setup};

/// A client tool that records every invocation.
fn recording_tool(seen: Arc<Mutex<Vec<String>>>) -> toold_tests::daemon::Answerer {
    Arc::new(move |request: Request| {
        seen.lock().unwrap().push(request.method.clone());
        Box::pin(async move { Reply::result(json!({"content": "ran"})) })
    })
}

#[tokio::test]
async fn clients_register_neither_system_tools_nor_names_no_rule_can_name() {
    let Some((daemon, client, workspace, _session)) = setup(
        "clients_register_neither_system_tools_nor_names_no_rule_can_name",
        "default",
    )
    .await
    else {
        return;
    };
    let invoked = Arc::new(Mutex::new(Vec::new()));
    let owner = daemon
        .connect(
            json!({"client_tools": true}),
            recording_tool(Arc::clone(&invoked)),
        )
        .await;
    let tool = |name: &str, system: bool| {
        json!({"name": name, "description": "d", "input_schema": {"type": "object"},
            "safety": "side_effect", "system": system})
    };
    let refused = [
        tool("control_plane", true),
        tool("x(y)", false),
        tool("run\u{200b}_command", false),
        tool("run command", false),
        tool("mcp__*", false),
        tool("", false),
        tool(&"a".repeat(65), false),
        tool("caf\u{e9}", false),
    ];
    for definition in refused {
        let name = definition["name"].clone();
        match owner
            .request("tools/register", json!({"tools": [definition]}))
            .await
        {
            Err(RequestError::Rpc(error)) => assert_eq!(error.code, -32602, "{error:?}"),
            other => panic!("{name} was registered: {other:?}"),
        }
    }
    // One refused tool refuses the whole registration: nothing of it is half registered.
    let mixed = json!({"tools": [tool("fine_tool", false), tool("sys", true)]});
    assert!(owner.request("tools/register", mixed).await.is_err());

    let list = client.list_tools(json!({})).await;
    let names = tool_names(&list);
    assert!(
        names.iter().all(|name| {
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        }),
        "{names:?}"
    );
    assert!(!names.contains(&"control_plane") && !names.contains(&"fine_tool"));

    // In plan mode, with a deny rule, and outside allowed_tools: no call of any of them runs.
    let plan = session_with(&client, &workspace.project, "plan", json!({})).await;
    let denying = session_with(
        &client,
        &workspace.project,
        "bypass",
        json!({"deny": ["control_plane"]}),
    )
    .await;
    for session in [&plan, &denying] {
        for name in ["control_plane", "x(y)", "run\u{200b}_command", "sys"] {
            execute_one(&client, session, call(name, json!({}))).await;
        }
    }
    assert!(invoked.lock().unwrap().is_empty(), "{invoked:?}");
}

/// What `session/create` and `session/update` accept can be saved and loaded: a request that
/// would make the session's record too large to load is refused with the reason, grants stop
/// being recorded before the record fills, and after a restart every accepted session is back
/// with its deny rules.
#[tokio::test]
async fn what_a_session_accepts_survives_a_restart() {
    let mut daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::write(work.join("marker.txt"), "kept\n").unwrap();
    let (client, _asked) = approving_for_the_session(&daemon).await;
    let refused = |error: Result<Value, RequestError>, what: &str| match error {
        Err(RequestError::Rpc(error)) => {
            assert_eq!(error.code, -32602, "{what}: {error:?}");
            error.message
        }
        other => panic!("{what} was accepted: {other:?}"),
    };
    let create = |extra: Value| {
        let mut params = json!({"cwd": work});
        for (key, value) in extra.as_object().unwrap() {
            params[key] = value.clone();
        }
        client.request("session/create", params)
    };
    let message = refused(
        create(json!({"title": "t".repeat(5 << 20)})).await,
        "a 5 MB title",
    );
    assert!(message.contains("title"), "{message}");
    let many_rules: Vec<String> = (0..4000)
        .map(|index| format!("run_command(rm {index}-{})", "x".repeat(1000)))
        .collect();
    let message = refused(
        create(json!({"rules": {"deny": many_rules}})).await,
        "4 MB of rules",
    );
    assert!(message.contains("bytes to save"), "{message}");
    let big_env: serde_json::Map<String, Value> = (0..5000)
        .map(|index| (format!("V{index}"), json!("e".repeat(1000))))
        .collect();
    refused(
        create(json!({"command_env": big_env})).await,
        "5 MB of command_env",
    );

    // Accepted at the edge of what fits: 2 MB of deny rules, a long title, then updates.
    let kept_rules: Vec<String> = (0..2000)
        .map(|index| format!("run_command(rm {index}-{})", "x".repeat(1000)))
        .chain(["run_command(rm *)".to_owned()])
        .collect();
    let session = client
        .create_session(
            &work,
            json!({"title": "t".repeat(1024), "rules": {"deny": kept_rules.clone()}}),
        )
        .await;
    let too_much: Vec<String> = (0..1500)
        .map(|index| format!("run_command(echo {index}-{})", "y".repeat(1000)))
        .collect();
    let message = refused(
        client
            .request(
                "session/update",
                json!({"session_id": session, "rules": {"deny": kept_rules, "allow": too_much}}),
            )
            .await,
        "an update past the budget",
    );
    assert!(message.contains("bytes to save"), "{message}");
    // Grants of long lines, approved for the session, until the grants are full.
    for index in 0..12 {
        let line = format!("echo {index}-{}", "z".repeat(100 * 1024));
        let response = execute_one(&client, &session, command_call("c", &line)).await;
        assert_eq!(response["results"][0]["result"]["ok"], true, "{index}");
    }
    let snapshot = client
        .request("session/get", json!({"session_id": session}))
        .await
        .unwrap();
    let grants = snapshot["grants"].as_array().unwrap().len();
    assert!((1..12).contains(&grants), "{grants} grants recorded");
    client.disconnect();

    daemon.restart();
    let client = daemon.connect(json!({}), no_answers()).await;
    let restored = client
        .request("session/get", json!({"session_id": session}))
        .await
        .expect("the session came back after the restart");
    assert_eq!(restored["rules"]["deny"].as_array().unwrap().len(), 2001);
    assert_eq!(restored["grants"].as_array().unwrap().len(), grants);
    let response = execute_one(&client, &session, command_call("c", "rm marker.txt")).await;
    assert_eq!(
        response["results"][0]["result"]["error_type"], "permission_denied",
        "{response}"
    );
    assert!(work.join("marker.txt").exists());
}

/// Session rules that can never match what they name are refused with the reason, at create
/// and at update: a deny rule that protects nothing must not look as if it did. A rule for a
/// tool not registered yet (a client's, an MCP server's) is still accepted.
#[tokio::test]
async fn rules_that_can_never_match_are_refused() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::create_dir_all(work.join("secrets")).unwrap();
    std::fs::write(work.join("secrets/key.txt"), format!("{SECRET}\n")).unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    let never = [
        ("READ_FILE(secrets/**)", "did you mean \"read_file\""),
        ("Run_Command(cat *)", "did you mean \"run_command\""),
        ("read_flie(secrets/**)", "did you mean \"read_file\""),
        (
            "read_file(/etc/hostname)",
            "write //PATH for an absolute path",
        ),
        ("run command(cat *)", "no tool can be named"),
        ("read_file(file_path=secrets/**)", "no string argument"),
        ("read_file(offset=1)", "no string argument"),
        ("run_command(cmd=cat *)", "no string argument"),
        ("run_command(command=)", "an empty command pattern"),
        ("run_command( cat *)", "starts or ends with blanks"),
        (
            "read_file(secrets/../secrets/key.txt)",
            "matched normalized",
        ),
        ("read_file(secrets//key.txt)", "matched normalized"),
    ];
    let session = client.create_session(&work, json!({})).await;
    for (rule, reason) in never {
        for kind in ["deny", "ask", "allow"] {
            let created = client
                .request(
                    "session/create",
                    json!({"cwd": work, "rules": {kind: [rule]}}),
                )
                .await;
            let updated = client
                .request(
                    "session/update",
                    json!({"session_id": session, "rules": {kind: [rule]}}),
                )
                .await;
            for answer in [created, updated] {
                match answer {
                    Err(RequestError::Rpc(error)) => {
                        assert_eq!(error.code, -32602);
                        assert!(error.message.contains(reason), "{rule}: {}", error.message);
                    }
                    other => panic!("{kind} {rule} was accepted: {other:?}"),
                }
            }
        }
    }
    // What they meant is accepted, and denies; so is a rule for a tool registered later. A
    // directory's pattern covers what is inside it, as in a gitignore file, however written.
    for meaning in [
        "read_file(secrets/**)",
        "read_file(secrets/)",
        "read_file(secrets)",
        "read_file(./secrets)",
        "Read(secrets)",
    ] {
        let meant = client
            .create_session(
                &work,
                json!({"rules": {"deny": [meaning, "read_file(//etc/hostname)",
                    "deploy_to_production"]}}),
            )
            .await;
        let response = execute_one(
            &client,
            &meant,
            json!({"id": "r", "name": "read_file", "arguments": {"path": "secrets/key.txt"}}),
        )
        .await;
        assert_eq!(
            response["results"][0]["result"]["error_type"], "permission_denied",
            "{meaning}: {response}"
        );
    }
}
