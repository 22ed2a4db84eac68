//! `toold import` end to end: sample Claude Code and Codex settings written as real files, the
//! real `toold import` run on them, a real daemon given the config it made, and for each
//! imported rule calls that the other agent's documented semantics allow, ask or deny asked of
//! the daemon (`permissions/explain`): the decisions must be the same. What cannot be mapped
//! makes the exit status 1 and is named on stderr; a malformed file is exit 2 with its line.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use toold_protocol::Framing;
use toold_tests::daemon::{COMMANDS_ASK, TestClient, TestDaemon, no_answers};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
    std::fs::write(path, text).expect("a sample file");
}

/// `toold import ARGS` with the daemon's home and config directories, run in `cwd`.
fn import(daemon: &TestDaemon, cwd: &Path, args: &[&str]) -> Output {
    daemon
        .command()
        .env_remove("CODEX_HOME")
        .arg("import")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run toold import")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One call and the decision the other agent's rules give it.
struct Row {
    tool: &'static str,
    arguments: Value,
    decision: &'static str,
}

fn row(tool: &'static str, arguments: Value, decision: &'static str) -> Row {
    Row {
        tool,
        arguments,
        decision,
    }
}

fn command(line: &str) -> Value {
    json!({"command": line})
}

/// Asks the daemon to explain every row in a session at `cwd`; returns the rows it decided
/// otherwise, with what it said.
async fn disagreements(daemon: &TestDaemon, cwd: &Path, rows: &[Row]) -> Vec<String> {
    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let session = client.create_session(cwd, json!({})).await;
    let mut wrong = Vec::new();
    for row in rows {
        let explained = client.explain(&session, row.tool, &row.arguments).await;
        if explained["decision"] != row.decision {
            wrong.push(format!(
                "{} {}: expected {}, got {explained}",
                row.tool, row.arguments, row.decision
            ));
        }
    }
    wrong
}

#[tokio::test]
async fn claude_code_rules_decide_in_toold_as_in_claude_code() {
    let daemon = TestDaemon::start_with_config(Some(COMMANDS_ASK));
    let home = daemon.root().join("home");
    let project = daemon.work().join("app");
    std::fs::create_dir_all(project.join("src")).expect("the project");
    std::fs::create_dir_all(project.join("docs")).expect("the project");
    write(
        &home.join(".claude/settings.json"),
        r#"{
          "model": "opus",
          "env": {"A": "1"},
          "permissions": {
            "allow": ["Bash(npm run test:*)", "Bash(git *)"],
            "deny": ["Bash(git push:*)", "Read(./.env)", "WebFetch(domain:example.com)"],
            "defaultMode": "acceptEdits"
          }
        }"#,
    );
    write(
        &project.join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Edit(/src/**)"]}}"#,
    );
    write(&project.join(".env"), "SECRET=1\n");

    let output = import(&daemon, &project, &["claude", "--write"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("read ~/.claude/settings.json, "),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "dropped ~/.claude/settings.json: permissions.deny: \"WebFetch(domain:example.com)\""
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("permissions.defaultMode = \"acceptEdits\": toold has no config-wide mode"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not permission settings: model, env"),
        "{stderr}"
    );
    let config = std::fs::read_to_string(daemon.config_file()).expect("the written config");
    assert!(
        config.starts_with("[permissions]\nsandboxed_commands = \"ask\"\n"),
        "the file's own lines come first:\n{config}"
    );
    let anchored = format!("\"Edit(/{}/src/**)\"", project.display());
    assert!(config.contains(&anchored), "{config}");
    assert!(config.contains("# ~/.claude/settings.json\n"), "{config}");

    // The daemon read the file again when it was written (the running daemon, reloaded).
    let rows = [
        row("run_command", command("npm run test -- x"), "allow"),
        row("run_command", command("npm run test"), "allow"),
        row("run_command", command("npm run testx"), "ask"),
        row("run_command", command("git commit -m x"), "allow"),
        row("run_command", command("git push origin main"), "deny"),
        row("run_command", command("git push"), "deny"),
        row("read_file", json!({"path": ".env"}), "deny"),
        row("read_file", json!({"path": "docs/x.md"}), "allow"),
        row(
            "edit_file",
            json!({"path": "src/main.rs", "old_string": "a", "new_string": "b"}),
            "allow",
        ),
        row(
            "write_file",
            json!({"path": "src/new.rs", "content": "x"}),
            "allow",
        ),
        row(
            "write_file",
            json!({"path": "docs/x.md", "content": "x"}),
            "ask",
        ),
    ];
    let wrong = disagreements(&daemon, &project, &rows).await;
    assert!(wrong.is_empty(), "{wrong:#?}\n{config}");

    // Again: nothing is added twice.
    let before = std::fs::read_to_string(daemon.config_file()).expect("the config");
    let again = import(&daemon, &project, &["claude", "--write"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stdout).starts_with("added 0 to "),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(daemon.config_file()).expect("the config"),
        before
    );

    // --project: the rules become the project's, printed rather than written.
    let scoped = import(
        &daemon,
        &project,
        &[
            "claude",
            ".claude/settings.json",
            "--project",
            project.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(scoped.status.code(), Some(0), "{}", text(&scoped.stderr));
    let printed = text(&scoped.stdout);
    let config = toold::config::Config::from_toml(&printed, Path::new("stdout"))
        .unwrap_or_else(|error| panic!("{error}\n{printed}"));
    assert_eq!(config.rules.projects.len(), 1, "{printed}");
    assert_eq!(config.rules.projects[0].path, project);
    assert_eq!(
        config.rules.projects[0].rules.allow,
        [anchored.trim_matches('"')]
    );
}

#[tokio::test]
async fn codex_rules_and_sandbox_decide_in_toold_as_in_codex() {
    let mut daemon = TestDaemon::start_with_config(Some("[permissions]\nallow = []\n"));
    let home = daemon.root().join("home");
    let writable = daemon.root().join("data");
    std::fs::create_dir_all(&writable).expect("a writable root");
    write(
        &home.join(".codex/config.toml"),
        &format!(
            "model = \"o3\"\nsandbox_mode = \"workspace-write\"\napproval_policy = \"untrusted\"\n\
             [sandbox_workspace_write]\nwritable_roots = [{writable:?}]\nnetwork_access = true\n"
        ),
    );
    write(
        &home.join(".codex/rules/default.rules"),
        r#"# git's remotes are the CI's
prefix_rule(
    pattern = ["git", ["push", "fetch"]],
    decision = "forbidden",
    justification = "the CI pushes",
    match = [["git", "push", "origin"], "git fetch --all"],
    not_match = ["git pull", ["git", "pushx"]],
)
prefix_rule(pattern = ["npm", "install"], decision = "prompt", match = ["npm install left-pad"])
prefix_rule(pattern = ['cargo', 'test'], decision = "allow", match = [["cargo", "test"]],
            not_match = ["cargo testx"],)
"#,
    );
    let work = daemon.work();
    let output = import(&daemon, &work, &["codex", "--write"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("read ~/.codex/config.toml, ~/.codex/rules/default.rules"),
        "{stderr}"
    );
    assert!(stderr.contains("not mapped"), "{stderr}");
    let config_text = std::fs::read_to_string(daemon.config_file()).expect("the config");
    assert!(
        config_text.contains("# ~/.codex/rules/default.rules:2: the CI pushes\n"),
        "{config_text}"
    );

    // [sandbox] takes effect when the daemon starts.
    assert!(
        stderr.contains("not applied until it restarts: sandbox"),
        "{stderr}"
    );
    daemon.keep_config_file();
    daemon.restart();
    let config = toold::config::Config::load(Some(&daemon.config_file())).expect("the config");
    assert_eq!(config.sandbox.writable, [writable]);
    assert_eq!(
        config.rules.sandboxed_commands,
        toold::permission::SandboxedCommands::Ask
    );

    let client =
        TestClient::connect(&daemon.socket(), Framing::Ndjson, json!({}), no_answers()).await;
    let snapshot = client
        .request("session/create", json!({"cwd": work}))
        .await
        .expect("session/create");
    assert_eq!(
        snapshot["sandbox"],
        json!({"mode": "workspace_write", "network": true})
    );

    let rows = [
        row("run_command", command("git push origin main"), "deny"),
        row("run_command", command("git push"), "deny"),
        row("run_command", command("git fetch --all"), "deny"),
        row("run_command", command("git pull"), "ask"),
        row("run_command", command("npm install left-pad"), "ask"),
        row("run_command", command("cargo test -p x"), "allow"),
        row("run_command", command("cargo test"), "allow"),
        row("run_command", command("cargo testx"), "ask"),
    ];
    let wrong = disagreements(&daemon, &work, &rows).await;
    assert!(wrong.is_empty(), "{wrong:#?}\n{config_text}");

    // `sandbox_mode` read-only and never asking: mapped, and the mode that has no config
    // equivalent is dropped (exit 1).
    let other = work.join("other.toml");
    write(
        &other,
        "sandbox_mode = \"read-only\"\napproval_policy = \"never\"\n",
    );
    let output = import(&daemon, &work, &["codex", "other.toml"]);
    let printed = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(printed.contains("mode = \"read_only\""), "{printed}");
    assert!(text(&output.stderr).contains("--mode dont_ask"));

    // A token toold cannot say exactly: dropped, with why.
    let inexact = work.join("inexact.rules");
    write(
        &inexact,
        "prefix_rule(pattern = [\"echo\", \"a b\"])\nprefix_rule(pattern = [\"ls\"])\n",
    );
    let output = import(&daemon, &work, &["codex", "inexact.rules"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("inexact.rules:1"), "{stderr}");
    assert!(stderr.contains("holds whitespace"), "{stderr}");
    assert!(text(&output.stdout).contains("\"run_command(ls *)\""));

    // Outside the Starlark subset: exit 2, with the file and line.
    let malformed = work.join("bad.rules");
    write(&malformed, "prefix_rule(pattern = [\"ls\"])\nrules = [1]\n");
    let output = import(&daemon, &work, &["codex", "bad.rules"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.rules:2: "), "{stderr}");
    assert!(output.stdout.is_empty());
}
