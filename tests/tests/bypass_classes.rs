//! The permission engine's bypass classes, end to end on the real daemon and real bash: in a
//! session whose rules allow `echo *`, `git status`, `cd *` and `true`, deny `rm *` and
//! `read_file(secrets/**)`, and with no approver attached (so anything that asks is denied),
//! every variant of each class is run and its **effect** checked: no marker file created, no
//! file truncated or deleted, no secret in any output, no process alive after its call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers};
use toold_tests::require;

/// What the secret file holds; no output may show it.
const SECRET: &str = "SECRET-7f3a9c";

const RULES: &str = r#"{"allow": ["run_command(echo *)", "run_command(git status)",
    "run_command(cd *)", "run_command(true)"],
    "deny": ["run_command(rm *)", "read_file(secrets/**)"]}"#;

/// A project (the session's only root) with a secret, a file the deny rule protects, a git
/// repository, and a directory outside the roots.
struct Workspace {
    _dir: tempfile::TempDir,
    project: PathBuf,
    outside: PathBuf,
}

impl Workspace {
    fn new(git: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let project = base.join("project");
        let outside = base.join("outside");
        for directory in [project.join("secrets"), outside.clone()] {
            std::fs::create_dir_all(directory).unwrap();
        }
        std::fs::write(project.join("secrets/key.txt"), format!("{SECRET}\n")).unwrap();
        std::fs::write(project.join("keep.txt"), "kept\n").unwrap();
        std::fs::write(outside.join("keep.txt"), "kept\n").unwrap();
        let init = std::process::Command::new(git)
            .args(["init", "-q"])
            .current_dir(&project)
            .status()
            .unwrap();
        assert!(init.success());
        Self {
            _dir: dir,
            project,
            outside,
        }
    }

    /// Every file under the workspace with its content, `.git/objects` aside: a change to
    /// any of them is an effect some line had.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let base = self.project.parent().unwrap().to_owned();
        let mut pending = vec![base];
        while let Some(directory) = pending.pop() {
            for entry in std::fs::read_dir(&directory).unwrap().flatten() {
                let path = entry.path();
                if path.ends_with(".git/objects") {
                    continue;
                }
                if entry.file_type().unwrap().is_dir() {
                    pending.push(path);
                } else {
                    let content = std::fs::read(&path).unwrap_or_default();
                    files.push((path, content));
                }
            }
        }
        files.sort();
        files
    }
}

/// Starts a daemon and a client without approvals, and a session with [`RULES`].
async fn setup(test: &str, mode: &str) -> Option<(TestDaemon, TestClient, Workspace, String)> {
    let git = require::program(test, "git", &[], "apt-get install git")?;
    let daemon = TestDaemon::start_with_config(Some("allow_bypass = true\n"));
    let client = daemon.connect(json!({}), no_answers()).await;
    let workspace = Workspace::new(&git);
    let rules: Value = serde_json::from_str(RULES).unwrap();
    let session = client
        .create_session(&workspace.project, json!({"rules": rules, "mode": mode}))
        .await;
    Some((daemon, client, workspace, session))
}

async fn execute(client: &TestClient, session: &str, call: Value) -> Value {
    client
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [call]}),
        )
        .await
        .expect("tools/execute")
}

fn command(line: &str) -> Value {
    json!({"id": "c", "name": "run_command", "arguments": {"command": line}})
}

/// Runs each call as its own batch and checks that it left the workspace exactly as it was,
/// made no marker anywhere, and showed no secret; reports every call that did.
async fn no_effect(
    client: &TestClient,
    session: &str,
    workspace: &Workspace,
    calls: &[Value],
    markers: &[PathBuf],
) {
    let mut effects = Vec::new();
    for call in calls {
        let before = workspace.snapshot();
        let response = execute(client, session, call.clone()).await;
        let result = &response["results"][0]["result"];
        if response.to_string().contains(SECRET) {
            effects.push(format!("{call} showed the secret: {result}"));
        }
        let after = workspace.snapshot();
        if before != after {
            effects.push(format!(
                "{call} changed the workspace ({result}):\n  before {:?}\n  after {:?}",
                names(&before),
                names(&after)
            ));
        }
        for marker in markers.iter().filter(|marker| marker.exists()) {
            effects.push(format!("{call} made {} ({result})", marker.display()));
            let _ = std::fs::remove_file(marker);
        }
    }
    assert!(
        effects.is_empty(),
        "effects no rule allowed:\n{}",
        effects.join("\n")
    );
}

fn names(files: &[(PathBuf, Vec<u8>)]) -> Vec<String> {
    files
        .iter()
        .map(|(path, content)| format!("{}={}", path.display(), content.len()))
        .collect()
}

#[tokio::test]
async fn lines_bash_and_a_posix_shell_read_differently_run_as_judged() {
    let Some((_daemon, client, workspace, session)) = setup(
        "lines_bash_and_a_posix_shell_read_differently_run_as_judged",
        "default",
    )
    .await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let outside = workspace.outside.join("f");
    let home = _daemon.root().join("home");
    let lines = [
        format!("echo $'\\' ; touch {} #'", p.display()),
        format!("echo hi; [[ a > {} ]]", outside.display()),
        "echo hi; ((1>~/9))".to_owned(),
        format!("echo $'\\x27' ; touch {}", p.display()),
        "echo hi > $'\\x2e\\x2e/outside/f'".to_owned(),
        format!("echo $\"x\" ; touch {} #\"", p.display()),
        format!("echo hi |& touch {}", p.display()),
        format!("echo {{a,b}} > {{{},}}", outside.display()),
        format!("{{touch,}} {}", p.display()),
        format!("echo a; {{touch,{}}}", p.display()),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(
        &client,
        &session,
        &workspace,
        &calls,
        &[p, outside, home.join("9"), workspace.project.join("1")],
    )
    .await;
}

#[tokio::test]
async fn tilde_forms_other_than_home_are_not_judged_as_local_names() {
    let Some((daemon, client, workspace, session)) = setup(
        "tilde_forms_other_than_home_are_not_judged_as_local_names",
        "default",
    )
    .await
    else {
        return;
    };
    let marker = format!("toold-bypass-{}", std::process::id());
    let lines = [
        format!("echo x >> ~root/{marker}"),
        format!("echo x > ~+/{marker}"),
        format!("cd ../outside; echo x > ~-/{marker}"),
        format!("echo x > ~nobody/{marker}"),
        format!("echo x > {{~root,}}/{marker}"),
        format!("echo x &> ~root/{marker}"),
        format!("echo x > ~0/{marker}"),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    let markers = [
        PathBuf::from("/root").join(&marker),
        workspace.project.join(&marker),
        workspace.outside.join(&marker),
        daemon.root().join("home").join(&marker),
    ];
    no_effect(&client, &session, &workspace, &calls, &markers).await;
    let _ = std::fs::remove_file(PathBuf::from("/root").join(&marker));
}

#[tokio::test]
async fn wrapper_options_the_analysis_does_not_know_are_not_skipped() {
    let Some((_daemon, client, workspace, session)) = setup(
        "wrapper_options_the_analysis_does_not_know_are_not_skipped",
        "default",
    )
    .await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let keep = workspace.project.join("keep.txt");
    let lines = [
        format!("env -S 'touch {}' echo hi", p.display()),
        format!("env --split-string='touch {}' echo hi", p.display()),
        format!("env -S'touch {}' echo hi", p.display()),
        format!("env -iS'touch {}' echo hi", p.display()),
        format!("env -i -S 'touch {}' echo hi", p.display()),
        format!("env --split-s='touch {}' echo hi", p.display()),
        format!("env -S 'rm -f {}' echo hi", keep.display()),
        format!("nice --adjustment=1 env -S 'touch {}' echo", p.display()),
        format!(
            "timeout --signal=KILL 5 env -S 'touch {}' echo",
            p.display()
        ),
        format!("env -u X -S 'touch {}' echo", p.display()),
        format!("$'\\x72m' -f {}", keep.display()),
        format!("{{rm,}} -f {}", keep.display()),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[p]).await;
    assert!(keep.exists());
}

#[tokio::test]
async fn the_env_argument_is_judged_as_leading_words() {
    let Some((_daemon, client, workspace, session)) =
        setup("the_env_argument_is_judged_as_leading_words", "default").await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let bin = workspace.outside.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake_git = bin.join("git");
    std::fs::write(&fake_git, format!("#!/bin/sh\ntouch {}\n", p.display())).unwrap();
    std::os::unix::fs::PermissionsExt::set_mode(
        &mut std::fs::metadata(&fake_git).unwrap().permissions(),
        0o755,
    );
    std::fs::set_permissions(
        &fake_git,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let with_env = |line: &str, env: Value| {
        json!({"id": "c", "name": "run_command",
            "arguments": {"command": line, "env": env}})
    };
    let touch = format!("touch {}", p.display());
    let calls = [
        with_env(
            "git status",
            json!({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor",
                "GIT_CONFIG_VALUE_0": touch}),
        ),
        with_env(
            "git status",
            json!({"PATH": format!("{}:/usr/bin:/bin", bin.display())}),
        ),
        with_env("git status", json!({"GIT_PAGER": touch, "PAGER": touch})),
        with_env(
            "echo hi",
            json!({"BASH_ENV": fake_git.display().to_string()}),
        ),
        with_env(
            "echo hi",
            json!({"BASH_FUNC_echo%%": format!("() {{ {touch}; }}")}),
        ),
        with_env(
            "echo hi",
            json!({"SHELLOPTS": "xtrace", "PS4": format!("$({touch})")}),
        ),
    ];
    no_effect(
        &client,
        &session,
        &workspace,
        &calls,
        std::slice::from_ref(&p),
    )
    .await;

    // A grant records the env: a grant for `git status` with one env never covers another.
    let response = execute(&client, &session, calls[0].clone()).await;
    let result = &response["results"][0]["result"];
    assert_eq!(result["error_type"], "permission_denied", "{result}");
    let message = result["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains("GIT_CONFIG_COUNT=1"),
        "the reason names the env as words: {message}"
    );
    assert!(!p.exists());
}

#[tokio::test]
async fn files_that_make_later_code_run_are_protected() {
    let Some((_daemon, client, workspace, session)) = setup(
        "files_that_make_later_code_run_are_protected",
        "accept_edits",
    )
    .await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let config = format!("[core]\n\tfsmonitor = touch {}\n", p.display());
    let hook = format!("#!/bin/sh\ntouch {}\n", p.display());
    let write = |path: &str, content: &str| {
        json!({"id": "c", "name": "write_file",
            "arguments": {"path": path, "content": content}})
    };
    let calls = [
        command(&format!("echo '{config}' >> .git/config")),
        command(&format!("echo '{hook}' > .git/hooks/pre-commit")),
        command("echo x > ./.git/config.worktree"),
        command("echo x >| .git/hooks/../config"),
        write(".git/config", &config),
        write(".git/hooks/post-checkout", &hook),
        write("./.git/../.git/config", &config),
        write(".git", "gitdir: /tmp\n"),
        command("git status"),
    ];
    no_effect(
        &client,
        &session,
        &workspace,
        &calls,
        std::slice::from_ref(&p),
    )
    .await;

    // Inside the roots but elsewhere, accept_edits still writes without asking.
    let response = execute(&client, &session, write("notes.txt", "fine")).await;
    assert_eq!(response["results"][0]["result"]["ok"], true, "{response}");
}

#[tokio::test]
async fn relative_paths_after_cd_are_not_judged_from_the_cwd() {
    let Some((_daemon, client, workspace, session)) = setup(
        "relative_paths_after_cd_are_not_judged_from_the_cwd",
        "default",
    )
    .await
    else {
        return;
    };
    let outside = workspace.outside.display().to_string();
    let lines = [
        format!("cd {outside} && echo x > f"),
        format!("cd {outside}; echo x > f"),
        format!("cd {outside} || true; echo x >> keep.txt"),
        "cd ../outside && echo x > keep.txt".to_owned(),
        format!("pushd {outside}; echo x > f"),
        format!("cd {outside}; cd -; cd -; echo x > f"),
        format!("echo x > f; cd {outside}; echo y > f"),
        format!("cd {outside} && echo x > ./f"),
        format!("CDPATH={outside} cd . && echo x > f"),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(
        &client,
        &session,
        &workspace,
        &calls,
        &[workspace.outside.join("f")],
    )
    .await;
}

#[tokio::test]
async fn what_a_line_reads_is_judged_against_read_deny_rules() {
    let Some((_daemon, client, workspace, session)) = setup(
        "what_a_line_reads_is_judged_against_read_deny_rules",
        "default",
    )
    .await
    else {
        return;
    };
    let secret = workspace.project.join("secrets/key.txt");
    let lines = [
        "xargs echo < secrets/key.txt".to_owned(),
        "xargs -a secrets/key.txt echo".to_owned(),
        "xargs --arg-file=secrets/key.txt echo".to_owned(),
        format!("xargs -a {} echo", secret.display()),
        "echo hi < secrets/key.txt".to_owned(),
        "echo hi <> secrets/key.txt".to_owned(),
        "echo \"$(< secrets/key.txt)\"".to_owned(),
        "echo hi 0< ./secrets/../secrets/key.txt".to_owned(),
        "cd secrets && xargs echo < key.txt".to_owned(),
        "echo $(<secrets/key.txt)".to_owned(),
        "env xargs echo < secrets/key.txt".to_owned(),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[]).await;

    // The deny rule itself is the reason, not only the lack of an allow rule.
    let response = execute(&client, &session, command("echo hi < secrets/key.txt")).await;
    let message = response["results"][0]["result"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("read_file(secrets/**)"), "{message}");
}

/// Processes the call's shell left behind after leaving its group, dropping its tag and
/// losing their parent: none is alive once the call has ended.
#[tokio::test]
async fn no_process_outlives_its_call() {
    let Some((_daemon, client, workspace, session)) =
        setup("no_process_outlives_its_call", "bypass").await
    else {
        return;
    };
    let marker = |index: u32| format!("4000.{:010}{index:03}", std::process::id());
    let lines = [
        format!("env -i setsid sh -c 'sleep {} &'", marker(1)),
        format!("env -i setsid -f sleep {}", marker(2)),
        format!("(env -i setsid sleep {} &)", marker(3)),
        format!("env -i setsid sh -c '(sleep {} &) &'", marker(4)),
    ];
    for line in &lines {
        execute(&client, &session, command(line)).await;
    }
    let timed_out = json!({"id": "c", "name": "run_command", "arguments": {
        "command": format!("env -i setsid sh -c 'sleep {} &'; sleep 600", marker(5)),
        "timeout_ms": 1000}});
    let response = execute(&client, &session, timed_out).await;
    assert_eq!(
        response["results"][0]["result"]["error_type"], "timeout",
        "{response}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alive: Vec<String> = (1..=5)
        .map(marker)
        .filter(|marker| processes_with(marker))
        .collect();
    assert!(alive.is_empty(), "alive 2 s after their call: {alive:?}");
    drop(workspace);
}

/// Whether a live process has `needle` on its command line.
fn processes_with(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let path = entry.path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        !zombie
            && std::fs::read(path.join("cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
    })
}
