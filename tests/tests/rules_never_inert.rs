//! No rule, hook matcher or tool filter is accepted and then inert, against the real daemon:
//! each form that would match nothing is refused where it is given (`session/create`,
//! `check-config`, the config at load) with the reason and what to write; the forms a reader
//! expects to work do (an MCP tool's argument spelt as its schema spells it, a tool filter
//! written as `tools/list` shows the tool, a hook matcher written as a regex).

use serde_json::{Value, json};
use toold_tests::daemon::{TestDaemon, no_answers, results, wire_error_type_or_ok};
use toold_tests::mcp::{test_server, tools_when};
use toold_tests::require;

fn hostile_table(test: &str, more: &str) -> Option<String> {
    let python = require::program(test, "python3", &[], "apt-get install python3")?;
    Some(format!(
        "[mcp.servers.h]\ncommand = {:?}\nargs = [{:?}]\n{more}",
        python.display().to_string(),
        test_server("hostile.py").display().to_string()
    ))
}

#[tokio::test]
async fn rules_that_would_match_nothing_are_refused_where_they_are_given() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    for (rule, says) in [
        ("run_command(rm  *)", "write \"rm *\""),
        ("run_command(rm\t*)", "write \"rm *\""),
        ("Bash(git  push:*)", "write \"git push *\""),
        ("read_file(Path=secrets/**)", "write path=secrets/**"),
    ] {
        let refused = client
            .request(
                "session/create",
                json!({"cwd": daemon.work(), "rules": {"deny": [rule]}}),
            )
            .await
            .expect_err(rule);
        let text = format!("{refused:?}").replace("\\\"", "\"");
        assert!(text.contains(says), "{rule}: {text}");

        let config = daemon.root().join("inert.toml");
        std::fs::write(
            &config,
            format!("[permissions]\ndeny = [{}]\n", Value::from(rule)),
        )
        .unwrap();
        let checked = daemon
            .command()
            .args(["check-config", config.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(checked.status.code(), Some(1), "{rule}: {checked:?}");
        assert!(
            String::from_utf8_lossy(&checked.stderr).contains(says),
            "{rule}: {checked:?}"
        );
    }
    // A daemon given such a config does not start with it.
    let config = daemon.root().join("inert.toml");
    let served = daemon
        .command()
        .args([
            "serve",
            "--allow-root",
            "--config",
            config.to_str().unwrap(),
        ])
        .env("XDG_RUNTIME_DIR", daemon.root().join("other-run"))
        .output()
        .unwrap();
    assert_ne!(served.status.code(), Some(0), "{served:?}");
    assert!(
        String::from_utf8_lossy(&served.stderr).contains("can never match"),
        "{served:?}"
    );
}

#[tokio::test]
async fn a_hook_matcher_written_as_a_glob_and_a_filter_naming_another_server_are_refused() {
    let daemon = TestDaemon::start();
    for (config, says) in [
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"mcp__h__*\"\ncommand = [\"true\"]\n",
            "write \\\"mcp__h__.*\\\"",
        ),
        (
            "[mcp.servers.h]\ncommand = \"true\"\ndisabled_tools = [\"mcp__other__delete\"]\n",
            "names the tools of the server \\\"other\\\"",
        ),
    ] {
        let path = daemon.root().join("refused.toml");
        std::fs::write(&path, config).unwrap();
        let checked = daemon
            .command()
            .args(["check-config", "--json", path.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(checked.status.code(), Some(1), "{checked:?}");
        let report = String::from_utf8_lossy(&checked.stdout);
        assert!(report.contains(says), "{config}: {report}");
    }
}

#[tokio::test]
async fn the_forms_a_reader_expects_to_work_do() {
    let Some(config) = hostile_table(
        "rules_never_inert::the_forms_a_reader_expects",
        "disabled_tools = [\"mcp__h__reveal\"]\n\n\
         [[hooks.pre_tool_use]]\nmatcher = \"mcp__h__.*\"\ncommand = [\"sh\", \"-c\", \"grep -q blockme || exit 0; echo blocked by the hook >&2; exit 2\"]\n",
    ) else {
        return;
    };
    let daemon = TestDaemon::start_with_config(Some(&config));
    let client = daemon.connect(json!({}), no_answers()).await;
    let tools = tools_when(&client, "mcp__h__", |count| count >= 4).await;
    assert!(
        !tools.contains_key("mcp__h__reveal"),
        "disabled as tools/list shows it: {:?}",
        tools.keys()
    );
    // The argument spelt as the tool's schema spells it: denied (the hook lets this one by).
    let session = client
        .create_session(
            &daemon.work(),
            json!({"rules": {"allow": ["mcp__h__*"], "deny": ["mcp__h__edit(filePath=/etc/*)"]}}),
        )
        .await;
    let denied = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__h__edit", "arguments": {"filePath": "/etc/passwd"}}]),
        )
        .await;
    assert_eq!(
        wire_error_type_or_ok(results(&denied)[0]),
        "permission_denied",
        "{denied}"
    );
    // Another path: not denied by the rule, and the hook (a regex) blocks it.
    let blocked = client
        .execute(
            &session,
            json!([{"id": "c1", "name": "mcp__h__edit", "arguments": {"filePath": "/srv/blockme"}}]),
        )
        .await;
    let result = results(&blocked)[0];
    assert_eq!(wire_error_type_or_ok(result), "hook_blocked", "{blocked}");
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|error| error.contains("blocked by the hook")),
        "{blocked}"
    );
}
