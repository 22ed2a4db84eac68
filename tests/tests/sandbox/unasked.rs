//! Commands the sandbox confines run without asking (`[permissions] sandboxed_commands =
//! "allow"`, the network closed), and say why; where the sandbox would not confine them, or a
//! rule speaks first, they are judged as before. No approver is attached to these clients: a
//! call that asked ends `permission_denied` ("no approver is attached") and did nothing.

use std::path::Path;

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon};

use super::{Places, connected, output, quoted, run, without};

const UNASKED: &str =
    "[permissions]\nsandboxed_commands = \"allow\"\n\n[sandbox]\nnetwork = false\n";

async fn session_without_rules(client: &TestClient, project: &Path) -> String {
    client.create_session(project, json!({})).await
}

fn asked(result: &Value) -> bool {
    result["error_type"] == "permission_denied"
        && result["error"]
            .as_str()
            .is_some_and(|error| error.contains("no approver is attached"))
}

fn audit_calls(daemon: &TestDaemon) -> Vec<Value> {
    toold::audit::read::lines(&daemon.state_dir().join("audit.jsonl"))
        .filter_map(|line| serde_json::from_slice::<Value>(&line.expect("a line").bytes).ok())
        .filter(|record| record["kind"] == "call")
        .collect()
}

#[tokio::test]
async fn confined_commands_run_unasked_and_every_record_says_why() {
    let daemon = TestDaemon::start_with_config(Some(UNASKED));
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session_without_rules(&client, &places.project).await;
    let project = &places.project;

    // An ordinary loop of work: each line runs, none asks, and each did what it says.
    let lines = [
        "ls",
        "pwd",
        "git init -q && git status --short",
        "mkdir -p src/nested && touch src/nested/a.rs",
        "printf 'fn main() {}\\n' > src/main.rs",
        "cat src/main.rs | wc -l",
        "grep -rn main src",
        "cp src/main.rs src/copy.rs && rm src/copy.rs",
        "echo $(date +%Y) > year.txt",
    ];
    for line in lines {
        let result = run(&client, &session, line).await;
        assert!(result["error_type"].is_null(), "{line}: {result}");
        assert_eq!(
            result["metadata"]["permission"]["step"], "sandboxed",
            "{line}"
        );
        assert_eq!(result["metadata"]["permission"]["by"], "sandbox", "{line}");
    }
    assert!(project.join(".git").is_dir());
    assert!(project.join("src/nested/a.rs").is_file());
    assert_eq!(
        std::fs::read_to_string(project.join("src/main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert!(!project.join("src/copy.rs").exists());
    assert!(project.join("year.txt").is_file());

    // The audit log names the step and who decided: the sandbox.
    let calls = audit_calls(&daemon);
    assert_eq!(calls.len(), lines.len(), "{calls:?}");
    for call in &calls {
        assert_eq!(call["decision"]["step"], "sandboxed", "{call}");
        assert_eq!(call["decision"]["by"], "sandbox", "{call}");
        assert_eq!(call["outcome"], "ok", "{call}");
    }

    // `permissions/explain` gives the same decision before the call, and `toold explain` says
    // it in words.
    let explained = client
        .explain(&session, "run_command", &json!({"command": "rm -rf build"}))
        .await;
    assert_eq!(explained["decision"], "allow", "{explained}");
    assert_eq!(explained["step"], "sandboxed", "{explained}");
    let cli = daemon
        .command()
        .args([
            "explain",
            "--session",
            &session,
            "run_command",
            r#"{"command":"rm -rf build"}"#,
        ])
        .output()
        .expect("toold explain");
    let said = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{said}");
    assert!(said.contains("sandbox"), "{said}");
}

#[tokio::test]
async fn an_unasked_command_still_cannot_write_outside_its_roots() {
    let daemon = TestDaemon::start_with_config(Some(UNASKED));
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session_without_rules(&client, &places.project).await;
    let before = Places::snapshot(&places.outside);
    let target = places.outside.join("planted.txt");
    let result = run(&client, &session, &format!("echo x > {}", quoted(&target))).await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    assert_eq!(result["metadata"]["permission"]["step"], "sandboxed");
    assert_eq!(
        result["metadata"]["sandbox"]["likely_denied"], true,
        "{result}"
    );
    assert!(
        result["metadata"]["sandbox"]["hint"]
            .as_str()
            .is_some_and(|hint| hint.contains("writable")),
        "{result}"
    );
    assert_eq!(Places::snapshot(&places.outside), before);
    assert!(output(&result).contains("ermission denied") || output(&result).contains("Read-only"));
}

/// With the network closed by default, a command that needs it fails saying so, and what the
/// user can do.
#[tokio::test]
async fn a_command_that_finds_no_network_is_told_why() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session_without_rules(&client, &places.project).await;
    let line = "python3 -c \"import socket; socket.getaddrinfo('example.com', 80)\"";
    let result = run(&client, &session, line).await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    assert_eq!(result["metadata"]["sandbox"]["network"], false, "{result}");
    assert_eq!(
        result["metadata"]["sandbox"]["likely_denied"], true,
        "{result}"
    );
    let hint = result["metadata"]["sandbox"]["hint"]
        .as_str()
        .unwrap_or_default();
    assert!(hint.contains(r#"escalate {"network": true}"#), "{hint}");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("networking is off"),
        "{result}"
    );
}

#[tokio::test]
async fn rules_hooks_and_modes_speak_before_the_sandbox() {
    let config = "[permissions]\nsandboxed_commands = \"allow\"\ndeny = [\"run_command(rm *)\"]\n\
                  ask = [\"run_command(git push *)\"]\n\n[sandbox]\nnetwork = false\n";
    let daemon = TestDaemon::start_with_config(Some(config));
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session_without_rules(&client, &places.project).await;
    let kept = places.project.join("keep.txt");

    // Beside these rules the sandbox does not decide: a line that hides `rm` from the deny rule
    // asks (and nothing ran), as a plain one does.
    for line in [
        "x=rm; $x keep.txt",
        "printf 'rm keep.txt' > s.sh; sh s.sh",
        "touch made.txt",
    ] {
        let result = run(&client, &session, line).await;
        assert!(asked(&result), "{line}: {result}");
        assert!(
            result["error"]
                .as_str()
                .unwrap()
                .contains("does not decide"),
            "{result}"
        );
        assert!(kept.is_file(), "{line} ran");
        assert!(!places.project.join("s.sh").exists(), "{line} ran");
    }
    let denied = run(&client, &session, "rm keep.txt").await;
    assert_eq!(denied["error_type"], "permission_denied", "{denied}");
    assert!(
        denied["error"]
            .as_str()
            .unwrap()
            .contains("run_command(rm *)")
    );
    assert!(kept.is_file(), "a denied line ran");

    // An ask rule asks, for the plain line and for one that hides the program from it.
    for line in [
        "git push origin main",
        "$(echo git) push origin main > pushed.txt",
    ] {
        let result = run(&client, &session, line).await;
        assert!(asked(&result), "{line}: {result}");
        assert!(!places.project.join("pushed.txt").exists(), "{line} ran");
    }
    // Code read from the input could be what the deny rule forbids: denied, as without the
    // sandbox.
    let hidden = run(&client, &session, "echo 'rm keep.txt' | bash").await;
    assert_eq!(hidden["error_type"], "permission_denied", "{hidden}");
    assert!(
        hidden["error"]
            .as_str()
            .unwrap()
            .contains("cannot be checked"),
        "{hidden}"
    );
    assert!(kept.is_file(), "a hidden rm ran");

    // Plan mode runs no side effect, whatever the sandbox.
    client
        .update_session(&session, json!({"mode": "plan"}))
        .await;
    let planned = run(&client, &session, "touch planned.txt").await;
    assert_eq!(planned["error_type"], "tool_not_allowed", "{planned}");
    assert!(!places.project.join("planned.txt").exists());
}

#[tokio::test]
async fn commands_ask_where_the_sandbox_would_not_confine_them() {
    let places = Places::new();
    let touch = "touch made.txt";
    let made = places.project.join("made.txt");
    // The setting's default, the network open, a session's sandbox off, and a kernel without
    // Landlock: each asks.
    let network_open =
        "[permissions]\nsandboxed_commands = \"allow\"\n\n[sandbox]\nnetwork = true\n";
    let sandbox_off = format!("{UNASKED}allow_unsandboxed = true\n");
    // A place outside the roots commands may write (code planted there could run later outside
    // the sandbox), a service's socket they may reach, a rule of commands they could sidestep.
    let writable_outside = format!("[sandbox]\nwritable = [{:?}]\n", places.outside);
    let socket = "[sandbox]\nunix_sockets = [\"/run/user/0/agent.sock\"]\n";
    let command_rule = "[permissions]\ndeny = [\"run_command(rm *)\"]\n";
    for (config, sandbox) in [
        (
            "[permissions]\nsandboxed_commands = \"ask\"\n\n[sandbox]\nnetwork = false\n",
            json!({}),
        ),
        (network_open, json!({})),
        (sandbox_off.as_str(), json!({"mode": "off"})),
        (writable_outside.as_str(), json!({})),
        (socket, json!({})),
        (command_rule, json!({})),
    ] {
        let daemon = TestDaemon::start_with_config(Some(config));
        let client = connected(&daemon).await;
        let session = client
            .create_session(&places.project, json!({"sandbox": sandbox}))
            .await;
        let result = run(&client, &session, touch).await;
        assert!(asked(&result), "{config} {sandbox}: {result}");
        assert!(!made.exists(), "{config} {sandbox}: the line ran");
    }
    // A kernel that lacks a layer: Landlock (what a command may write), user namespaces (the
    // hidden credential stores, the read-only `.git/config`), PID namespaces, the mount API
    // (nothing else changes).
    for missing in [
        "--landlock",
        "--user-namespaces",
        "--pid-namespaces",
        "--mount-api",
    ] {
        let daemon = TestDaemon::start_under_with_config(&without(&[missing]), UNASKED);
        let client = connected(&daemon).await;
        let session = session_without_rules(&client, &places.project).await;
        let result = run(&client, &session, touch).await;
        assert!(asked(&result), "{missing}: {result}");
        assert!(!made.exists(), "{missing}: the line ran");
    }
}

/// A Rust crate and a Node package side by side, each with a passing test.
fn write_projects(root: &Path) {
    let files = [
        (
            "rust/Cargo.toml",
            "[package]\nname = \"adder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        (
            "rust/src/lib.rs",
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    \
             #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n}\n",
        ),
        (
            "node/package.json",
            "{\"name\": \"greeter\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"node test.js\"}}\n",
        ),
        (
            "node/index.js",
            "exports.greet = (name) => `hello ${name}`;\n",
        ),
        (
            "node/test.js",
            "const assert = require('assert');\nassert.strictEqual(require('./index').greet('x'), 'hello x');\nconsole.log('ok');\n",
        ),
        ("README.md", "# two projects\n"),
    ];
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// Forty commands of an ordinary build-test-edit loop over a Rust and a Node project, in the
/// default configuration with nobody to ask: every one runs, none asks.
#[tokio::test]
async fn forty_commands_of_a_rust_and_a_node_project_run_without_a_prompt() {
    let test = "forty_commands_of_a_rust_and_a_node_project_run_without_a_prompt";
    for program in ["git", "cargo", "node", "npm"] {
        if toold_tests::require::program(test, program, &[], "the project's .ci/run installs it")
            .is_none()
        {
            return;
        }
    }
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let project = &places.project;
    write_projects(project);
    // The tools' caches inside the project, where commands may write (README, "When a command
    // fails because of the sandbox").
    let session = client
        .create_session(
            project,
            json!({"command_env": {
                "CARGO_HOME": project.join(".cache/cargo"),
                "npm_config_cache": project.join(".cache/npm"),
            }}),
        )
        .await;
    let lines = [
        "ls -la",
        "pwd",
        "cat README.md",
        "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
        "git status --short",
        "git log --oneline -1",
        "git diff",
        "find . -name '*.rs' -not -path './.git/*'",
        "grep -rn 'fn add' rust",
        "wc -l rust/src/lib.rs node/index.js",
        "head -3 rust/Cargo.toml",
        "tail -1 node/test.js",
        "cd rust && cargo build --offline -q",
        "cd rust && cargo test --offline -q",
        "cd rust && cargo check --offline -q",
        "ls rust/target",
        "cd node && node test.js",
        "cd node && npm test --silent",
        "cd node && node -e 'console.log(require(\"./index\").greet(\"y\"))'",
        "mkdir -p notes && touch notes/todo.md",
        "echo '- write more tests' >> notes/todo.md",
        "cat notes/todo.md",
        "sed -i 's/a + b/b + a/' rust/src/lib.rs",
        "git diff --stat",
        "cd rust && cargo test --offline -q",
        "cp node/index.js node/index.bak",
        "diff node/index.js node/index.bak",
        "rm node/index.bak",
        "mv notes/todo.md notes/done.md",
        "ls notes",
        "echo $(git rev-parse --short HEAD) > head.txt",
        "cat head.txt",
        "tar czf /tmp/src.tgz rust/src && ls -la /tmp/src.tgz",
        "env | grep -c PATH",
        "which cargo node",
        "uname -s",
        "date +%Y",
        "git add -A && git -c user.name=t -c user.email=t@t commit -qm edit && git log --oneline | wc -l",
        "rm -rf rust/target",
        "git status --short | wc -l",
    ];
    assert_eq!(lines.len(), 40);
    let mut asked = Vec::new();
    let mut failed = Vec::new();
    for line in lines {
        let result = run(&client, &session, line).await;
        if result["error_type"] == "permission_denied" {
            asked.push(line);
        } else if !result["error_type"].is_null() {
            failed.push(format!("{line}: {result}"));
        }
    }
    assert!(asked.is_empty(), "asked: {asked:?}");
    assert!(failed.is_empty(), "failed: {failed:#?}");
    // What they did is there: the edit, the commits, the moved note.
    assert!(
        std::fs::read_to_string(project.join("rust/src/lib.rs"))
            .unwrap()
            .contains("b + a")
    );
    assert!(project.join("notes/done.md").is_file());
    assert!(!project.join("rust/target").exists());

    // The same forty where the sandbox does not decide (`sandboxed_commands = "ask"`): only
    // the read-only commands of the known-safe list run, the others ask, and nothing changed.
    let asking =
        TestDaemon::start_with_config(Some("[permissions]\nsandboxed_commands = \"ask\"\n"));
    let client = connected(&asking).await;
    let session = client.create_session(project, json!({})).await;
    let before = Places::snapshot(project);
    let mut ran = Vec::new();
    for line in lines {
        let result = run(&client, &session, line).await;
        if !self::asked(&result) {
            assert_eq!(
                result["metadata"]["permission"]["step"], "known_safe",
                "{line}: {result}"
            );
            ran.push(line);
        }
    }
    assert_eq!(
        ran,
        [
            "ls -la",
            "pwd",
            "cat README.md",
            "git status --short",
            "git log --oneline -1",
            "git diff",
            "grep -rn 'fn add' rust",
            "wc -l rust/src/lib.rs node/index.js",
            "head -3 rust/Cargo.toml",
            "tail -1 node/test.js",
            "ls rust/target",
            "cat notes/todo.md",
            "git diff --stat",
            "diff node/index.js node/index.bak",
            "ls notes",
            "cat head.txt",
            "which cargo node",
            "uname -s",
            "date +%Y",
            "git status --short | wc -l",
        ]
    );
    assert_eq!(Places::snapshot(project), before);
}
