//! What approvers, hooks and grants decide: an approval never outlives a change made while it
//! was pending, hook output past the cap blocks, replaced arguments are in the events, and a
//! grant covers only the directory, bytes and env it was given for.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::Request;
use toold_protocol::peer::Reply;
use toold_tests::daemon::{TestDaemon, command_call, no_answers};
use toold_tests::require;

use super::{Workspace, approving_for_the_session, execute_one, no_effect, session_with, setup};

#[tokio::test]
async fn an_approval_never_outlives_a_rule_or_mode_change_made_while_it_was_pending() {
    let Some((daemon, client, workspace, _session)) = setup(
        "an_approval_never_outlives_a_rule_or_mode_change_made_while_it_was_pending",
        "default",
    )
    .await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let changes = [
        (
            json!({"rules": {"deny": ["run_command(touch *)"]}}),
            "allow_once",
        ),
        (
            json!({"rules": {"deny": ["run_command(touch *)"]}}),
            "allow_session",
        ),
        (json!({"rules": {"deny": ["run_command"]}}), "allow_once"),
        (json!({"mode": "plan"}), "allow_once"),
        (
            json!({"mode": "dont_ask", "rules": {"deny": ["run_command(*)"]}}),
            "allow_session",
        ),
    ];
    for (change, decision) in changes {
        // The approver answers only once the session has changed.
        let changed = Arc::new(tokio::sync::Notify::new());
        let asked = Arc::new(tokio::sync::Notify::new());
        let answerer: toold_tests::daemon::Answerer = {
            let (changed, asked) = (Arc::clone(&changed), Arc::clone(&asked));
            Arc::new(move |_request: Request| {
                let (changed, asked) = (Arc::clone(&changed), Arc::clone(&asked));
                Box::pin(async move {
                    asked.notify_one();
                    changed.notified().await;
                    Reply::result(json!({"decision": decision}))
                })
            })
        };
        let approver = daemon.connect(json!({"approvals": true}), answerer).await;
        let session = session_with(&approver, &workspace.project, "default", json!({})).await;
        let line = format!("touch {}", p.display());
        let running = {
            let session = session.clone();
            let approver = &approver;
            async move { execute_one(approver, &session, command_call("c", &line)).await }
        };
        let update = async {
            asked.notified().await;
            let mut params = change.clone();
            params["session_id"] = json!(session);
            client
                .request("session/update", params)
                .await
                .expect("session/update");
            changed.notify_one();
        };
        let (response, ()) = tokio::join!(running, update);
        let result = &response["results"][0]["result"];
        assert_ne!(result["ok"], true, "{change} then {decision}: {result}");
        assert!(
            !p.exists(),
            "{change} then {decision} ran the call: {result}"
        );
        let snapshot = client
            .request("session/get", json!({"session_id": session}))
            .await
            .expect("session/get");
        assert_eq!(snapshot["grants"], json!([]), "{snapshot}");
    }
}

#[tokio::test]
async fn hook_output_over_the_cap_blocks_and_is_never_read_by_its_prefix() {
    let Some(git) = require::program(
        "hook_output_over_the_cap_blocks_and_is_never_read_by_its_prefix",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let workspace = Workspace::new(&git);
    let p = workspace.project.join("P");
    // Each pads its answer past the 1 MiB cap: with spaces, newlines, a long JSON string, or
    // a valid answer followed by more.
    let hooks = [
        r#"head -c 1100000 /dev/zero | tr '\0' ' '; echo '{"decision":"block"}'"#,
        r#"head -c 2000000 /dev/zero | tr '\0' '\n'; echo '{"decision":"block"}'"#,
        r#"printf '{"decision":"allow","reason":"'; head -c 1200000 /dev/zero | tr '\0' x; printf '"}'"#,
        r#"echo '{"decision":"continue"}'; head -c 1100000 /dev/zero | tr '\0' ' '"#,
    ];
    for hook in hooks {
        let config = format!(
            "allow_bypass = true\n[[hooks.pre_tool_use]]\nmatcher = \"run_command\"\n\
             command = [\"/bin/sh\", \"-c\", {}]\n",
            toml_string(hook)
        );
        let daemon = TestDaemon::start_with_config(Some(&config));
        let client = daemon.connect(json!({}), no_answers()).await;
        let session = session_with(&client, &workspace.project, "bypass", json!({})).await;
        let line = format!("touch {}", p.display());
        let response = execute_one(&client, &session, command_call("c", &line)).await;
        let result = &response["results"][0]["result"];
        assert_eq!(result["error_type"], "hook_blocked", "{hook}: {result}");
        assert!(
            result["error"].as_str().unwrap_or_default().contains("cap"),
            "{result}"
        );
        assert!(!p.exists(), "{hook} let the call run");
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// `run_command`'s `cwd` is part of what a rule or grant covers: after `allow_session` for a
/// line, the same line with `cwd` outside the roots asks (and here is refused), and an allowed
/// line never runs outside the roots.
#[tokio::test]
async fn grants_and_rules_cover_the_directory_a_command_runs_in() {
    let Some((daemon, _client, workspace, _session)) = setup(
        "grants_and_rules_cover_the_directory_a_command_runs_in",
        "default",
    )
    .await
    else {
        return;
    };
    for dir in [
        workspace.project.join("build"),
        workspace.outside.join("build"),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("artifact"), "x").unwrap();
    }
    std::os::unix::fs::symlink(&workspace.outside, workspace.project.join("out")).unwrap();
    // The approver grants the first request for the session, and refuses every other.
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answerer: toold_tests::daemon::Answerer = {
        let answered = Arc::clone(&answered);
        Arc::new(move |_request: Request| {
            let first = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
            let decision = if first { "allow_session" } else { "deny" };
            Box::pin(async move { Reply::result(json!({ "decision": decision })) })
        })
    };
    let approver = daemon.connect(json!({"approvals": true}), answerer).await;
    let rules = json!({"allow": ["run_command(echo *)", "run_command(true)"]});
    let session = session_with(&approver, &workspace.project, "default", rules).await;
    let granted = execute_one(&approver, &session, command_call("c", "rm -rf build")).await;
    assert_eq!(granted["results"][0]["result"]["ok"], true, "{granted}");
    std::fs::create_dir_all(workspace.project.join("build")).unwrap();
    std::fs::write(workspace.project.join("build/artifact"), "x").unwrap();

    let outside = workspace.outside.display().to_string();
    let at = |line: &str, cwd: &str| json!({"id": "c", "name": "run_command", "arguments": {"command": line, "cwd": cwd}});
    let calls = [
        at("rm -rf build", &outside),
        at("rm -rf build", ".."),
        at("rm -rf build", "../outside"),
        at("rm -rf build", "out"),
        at("echo data > out.txt", &outside),
        at("true", &outside),
        at("echo hi", "out"),
    ];
    no_effect(&approver, &session, &workspace, &calls, &[]).await;
    assert!(workspace.outside.join("build/artifact").exists());
}

/// A grant is keyed on the exact bytes of the path it was given for: two files outside the
/// roots whose names differ only in bytes that are not UTF-8 (and so display the same) need
/// two approvals, for a read and for a command's `cwd`.
#[tokio::test]
async fn a_grant_covers_the_exact_bytes_it_was_given_for() {
    use std::os::unix::ffi::OsStrExt;
    let daemon = TestDaemon::start();
    let outside = daemon.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let named = |byte: u8| outside.join(std::ffi::OsStr::from_bytes(&[b'n', byte]));
    for (byte, link) in [(0xff, "first"), (0xfe, "second")] {
        std::fs::create_dir(named(byte)).unwrap();
        std::fs::write(named(byte).join("f.txt"), format!("{link}\n")).unwrap();
        std::os::unix::fs::symlink(named(byte), outside.join(link)).unwrap();
    }
    let (client, asked) = approving_for_the_session(&daemon).await;
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["run_command(cat *)"]}}),
        )
        .await;
    let read = |link: &str| {
        json!({"id": "r", "name": "read_file",
            "arguments": {"path": format!("{}/{link}/f.txt", outside.display())}})
    };
    let cat_in = |link: &str| {
        json!({"id": "c", "name": "run_command",
            "arguments": {"command": "cat f.txt", "cwd": format!("{}/{link}", outside.display())}})
    };
    for (first, second) in [
        (read("first"), read("second")),
        (cat_in("first"), cat_in("second")),
    ] {
        let before = asked.lock().unwrap().len();
        for call in [&first, &second, &first] {
            let response = execute_one(&client, &session, call.clone()).await;
            assert_eq!(
                response["results"][0]["result"]["ok"], true,
                "{call}: {response}"
            );
        }
        // Asked for each file once; the third call is the first file's grant at work.
        assert_eq!(asked.lock().unwrap().len() - before, 2, "{first}");
    }
}

/// Arguments a PreToolUse hook or an approver replaced are in the session's events
/// (`tool/arguments_replaced`, between `tool/call_start` and `tool/result`), so that an
/// observer sees the command that runs, not only the one the model asked for.
#[tokio::test]
async fn replaced_arguments_are_in_the_events() {
    use toold_tests::daemon::answer_with;
    let daemon = TestDaemon::start_asking();
    let submitter = daemon.connect(json!({}), no_answers()).await;
    let session = submitter
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["run_command(echo hooked-*)"]}}),
        )
        .await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let helper = daemon
        .connect(
            json!({"hooks": ["pre_tool_use"], "approvals": true}),
            answer_with(asked.clone(), |request| {
                let params = request.params.clone().unwrap_or_default();
                match (request.method.as_str(), params["call"]["id"].as_str()) {
                    ("hook/pre_tool_use", Some("hooked")) => Reply::result(json!({
                        "decision": "continue",
                        "arguments": {"command": "echo hooked-REPLACED"}})),
                    ("hook/pre_tool_use", _) => Reply::result(json!({"decision": "continue"})),
                    _ => Reply::result(json!({"decision": "allow_once",
                        "arguments": {"command": "echo APPROVER-REPLACED"}})),
                }
            }),
        )
        .await;
    helper
        .request("session/attach", json!({"session_id": session}))
        .await
        .unwrap();
    let mut observer = daemon.connect(json!({}), no_answers()).await;
    observer
        .request("session/attach", json!({"session_id": session}))
        .await
        .unwrap();
    let response = submitter
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [
                {"id": "hooked", "name": "run_command", "arguments": {"command": "echo hooked-innocent"}},
                {"id": "approved", "name": "run_command", "arguments": {"command": "echo asked"}},
            ]}),
        )
        .await
        .unwrap();
    let contents: Vec<&Value> = response["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|outcome| &outcome["result"]["content"])
        .collect();
    assert_eq!(
        contents,
        [&json!("hooked-REPLACED\n"), &json!("APPROVER-REPLACED\n")]
    );
    let events = observer
        .session_events_until(|event| event.method == "batch/done")
        .await;
    for (call_id, original, replaced, by) in [
        (
            "hooked",
            "echo hooked-innocent",
            "echo hooked-REPLACED",
            "hook",
        ),
        (
            "approved",
            "echo asked",
            "echo APPROVER-REPLACED",
            "approver",
        ),
    ] {
        let of_call: Vec<(&str, Value)> = events
            .iter()
            .filter_map(|event| {
                let params = event.params.clone()?;
                let id = params["call"]["id"]
                    .as_str()
                    .or(params["call_id"].as_str())?
                    .to_owned();
                (id == call_id).then_some((event.method.as_str(), params))
            })
            .collect();
        let methods: Vec<&str> = of_call.iter().map(|(method, _)| *method).collect();
        let start = methods
            .iter()
            .position(|m| *m == "tool/call_start")
            .unwrap();
        let swapped = methods
            .iter()
            .position(|m| *m == "tool/arguments_replaced")
            .unwrap_or_else(|| panic!("{call_id}: no tool/arguments_replaced in {methods:?}"));
        let result = methods.iter().position(|m| *m == "tool/result").unwrap();
        assert!(start < swapped && swapped < result, "{methods:?}");
        assert_eq!(of_call[start].1["call"]["arguments"]["command"], original);
        assert_eq!(of_call[swapped].1["call"]["arguments"]["command"], replaced);
        assert_eq!(of_call[swapped].1["by"], by);
    }
    // The approver was asked about the call as it stood when it asked.
    let requests = asked.lock().unwrap();
    let approval = requests
        .iter()
        .find(|request| request.method == "approval/request")
        .expect("an approval request");
    assert_eq!(
        approval.params.as_ref().unwrap()["call"]["arguments"]["command"],
        "echo asked"
    );
}

/// The call's `env` reaches every command of its line, an assignment written in the line only
/// its own command: a grant for `PATH=/evil true; git --version` (the real git runs) must not
/// cover `true; git --version` with `env` `PATH=/evil` (a fake git runs).
#[tokio::test]
async fn a_grant_for_an_assignment_never_covers_the_env_argument() {
    use std::os::unix::fs::PermissionsExt;
    let daemon = TestDaemon::start_asking();
    let evil_bin = daemon.root().join("evilbin");
    std::fs::create_dir_all(&evil_bin).unwrap();
    let marker = daemon.root().join("FAKE_GIT_RAN");
    let fake = evil_bin.join("git");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (client, asked) = approving_for_the_session(&daemon).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let path = evil_bin.display().to_string();
    let inline = command_call("c", &format!("PATH={path} true; git --version"));
    execute_one(&client, &session, inline.clone()).await;
    execute_one(&client, &session, inline).await;
    assert_eq!(
        asked.lock().unwrap().len(),
        1,
        "the grant covers the same line"
    );
    let with_env = json!({"id": "e", "name": "run_command",
        "arguments": {"command": "true; git --version", "env": {"PATH": path}}});
    execute_one(&client, &session, with_env).await;
    assert_eq!(
        asked.lock().unwrap().len(),
        2,
        "the env call was asked about, not run on the inline line's grant"
    );
    let snapshot = client
        .request("session/get", json!({"session_id": session}))
        .await
        .unwrap();
    assert!(
        snapshot["grants"]
            .as_array()
            .unwrap()
            .iter()
            .any(|grant| grant
                .as_str()
                .unwrap()
                .ends_with(&format!(r#"with env {{"PATH":"{path}"}}"#))),
        "{snapshot}"
    );
}

/// Configured hooks run in a directory of toold's that no session can write, with the daemon's
/// environment and never a session's, and are told the session's working directory: a module
/// a session wrote into its root (`python3 -m NAME` looks in the working directory first) is
/// not what runs, and no session variable (`PYTHONPATH`) changes what does.
#[tokio::test]
async fn a_hook_runs_nothing_a_session_wrote() {
    let record = tempfile::tempdir().unwrap();
    let seen = record.path().join("seen");
    let config = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"run_command\"\ncommand = [\"python3\", \"-m\", \"toold_test_guard\"]\n\n\
         [[hooks.pre_tool_use]]\nmatcher = \"run_command\"\n\
         command = [\"sh\", \"-c\", \"pwd > {seen}; env >> {seen}; cat >> {seen}; echo '{{\\\"decision\\\": \\\"continue\\\"}}'\"]\n",
        seen = seen.display()
    );
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let project = daemon.work();
    let session = client
        .create_session(
            &project,
            json!({"mode": "accept_edits",
                   "command_env": {"PYTHONPATH": project.display().to_string(), "TOOLD_HOOK_MARK": "session"}}),
        )
        .await;
    let planted = execute_one(
        &client,
        &session,
        json!({"id": "w", "name": "write_file", "arguments": {"path": "toold_test_guard.py",
            "content": "import json\nprint(json.dumps({'decision': 'allow'}))\n"}}),
    )
    .await;
    assert_eq!(planted["results"][0]["result"]["ok"], true, "{planted}");
    let response = execute_one(&client, &session, command_call("c", "touch pwned")).await;
    let result = &response["results"][0]["result"];
    assert_eq!(result["error_type"], "hook_blocked", "{response}");
    assert!(!project.join("pwned").exists());
    let seen = std::fs::read_to_string(&seen).unwrap();
    let mut lines = seen.lines();
    assert_eq!(
        lines.next().map(std::path::PathBuf::from),
        Some(daemon.root().join("state/toold/hooks")),
        "{seen}"
    );
    assert!(!seen.contains("TOOLD_HOOK_MARK"), "{seen}");
    assert!(
        !seen.contains(&format!("PYTHONPATH={}", project.display())),
        "{seen}"
    );
    let input: Value = serde_json::from_str(seen.lines().last().unwrap()).unwrap();
    assert_eq!(input["cwd"], json!(project), "{seen}");
    assert_eq!(input["event"], "pre_tool_use", "{seen}");
}
