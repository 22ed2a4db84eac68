//! The permission engine's bypass classes, end to end on the real daemon and real bash: in a
//! session whose rules allow `echo *`, `git status`, `cd *` and `true`, deny `rm *` and
//! `read_file(secrets/**)`, and with no approver attached (so anything that asks is denied),
//! every variant of each class is run and its **effect** checked: no marker file created, no
//! file truncated or deleted, no secret in any output, no process alive after its call. The
//! classes beyond the command line (walks, client tools, approvals, hooks, the daemon's own
//! process) use sessions and daemons of their own, checked the same way.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use toold_protocol::peer::Reply;
use toold_protocol::{Request, RequestError};
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

async fn execute_one(client: &TestClient, session: &str, call: Value) -> Value {
    client.execute(session, json!([call])).await
}

/// A client that approves every request for the session, and the requests it was sent.
async fn approving_for_the_session(daemon: &TestDaemon) -> (TestClient, Arc<Mutex<Vec<Request>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let client = daemon
        .connect(
            json!({"approvals": true}),
            toold_tests::daemon::always(json!({"decision": "allow_session"}), asked.clone()),
        )
        .await;
    (client, asked)
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
        let response = execute_one(client, session, call.clone()).await;
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
        "echo hi > ../outsid?/keep.txt".to_owned(),
        "echo hi >> ../o*/keep.txt".to_owned(),
        format!("echo $\"x\" ; touch {} #\"", p.display()),
        format!("echo hi |& touch {}", p.display()),
        // In a here-document bash joins `\⏎` before it looks for the delimiter or a `$(`.
        format!("echo <<EOF\nE\\\nOF\ntouch {}\nexit 0\nEOF", p.display()),
        format!("echo <<EOF\n$\\\n(touch {})\nEOF", p.display()),
        "echo <<EOF\nE\\\nOF\nrm -f keep.txt\nexit 0\nEOF".to_owned(),
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
    // A home whose git config runs a program, and the same as an XDG config directory.
    let home = workspace.outside.join("home");
    std::fs::create_dir_all(home.join("git")).unwrap();
    let config = format!("[core]\n\tfsmonitor = touch {}\n", p.display());
    std::fs::write(home.join(".gitconfig"), &config).unwrap();
    std::fs::write(home.join("git/config"), &config).unwrap();
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
        // A loop variable is an assignment too, of a variable git or bash reads.
        command(&format!(
            "for PATH in {}; do git status; done",
            bin.display()
        )),
        command(&format!(
            "for PATH in {}; do true; done; git status",
            bin.display()
        )),
        command(&format!(
            "for HOME in {}; do git status; done",
            home.display()
        )),
        command(&format!(
            "for XDG_CONFIG_HOME in {}; do git status; done",
            home.display()
        )),
        command(&format!(
            "coproc PATH {{ true; }}; for PATH in {}; do git status; done",
            bin.display()
        )),
        command(&format!(
            "for GIT_CONFIG_PARAMETERS in \"'core.fsmonitor'='{touch}'\"; do git status; done"
        )),
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
    let response = execute_one(&client, &session, calls[0].clone()).await;
    let result = &response["results"][0]["result"];
    assert_eq!(result["error_type"], "permission_denied", "{result}");
    let message = result["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(r#""GIT_CONFIG_COUNT":"1""#),
        "the reason names the env: {message}"
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
    // A directory a repository could ship: git reads its config once `commondir` names it.
    let evil = workspace.project.parent().unwrap().join("evil");
    for dir in ["objects", "refs"] {
        std::fs::create_dir_all(evil.join(dir)).unwrap();
    }
    std::fs::write(evil.join("config"), &config).unwrap();
    let write = |path: &str, content: &str| {
        json!({"id": "c", "name": "write_file",
            "arguments": {"path": path, "content": content}})
    };
    let calls = [
        command(&format!("echo '{config}' >> .git/config")),
        command(&format!("echo '{hook}' > .git/hooks/pre-commit")),
        command("echo x > ./.git/config.worktree"),
        command(&format!("echo '{config}' >> .git/conf*")),
        command(&format!("echo '{config}' >> .gi[t]/config")),
        command("echo ../../evil > .git/commondir; git status"),
        command("echo x >| .git/hooks/../config"),
        write(".git/config", &config),
        write(".git/hooks/post-checkout", &hook),
        write("./.git/../.git/config", &config),
        write(".git", "gitdir: /tmp\n"),
        // A directory made to look like a repository needs a HEAD.
        write("fake/HEAD", "ref: refs/heads/main\n"),
        command("echo 'ref: refs/heads/x' > .git/HEAD"),
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
    let response = execute_one(&client, &session, write("notes.txt", "fine")).await;
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
        // Text order is not run order: a loop body and a function run after a later `cd`.
        format!("for i in 1 2; do echo x > f; cd {outside}; done"),
        format!("true() {{ echo x > f; }}; cd {outside}; true"),
        format!("echo() {{ builtin echo x > f; }}; cd {outside}; echo"),
        format!("for d in 1 2; do echo x > f && cd {outside}; done"),
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
    let response = execute_one(&client, &session, command("echo hi < secrets/key.txt")).await;
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
        execute_one(&client, &session, command(line)).await;
    }
    let timed_out = json!({"id": "c", "name": "run_command", "arguments": {
        "command": format!("env -i setsid sh -c 'sleep {} &'; sleep 600", marker(5)),
        "timeout_ms": 1000}});
    let response = execute_one(&client, &session, timed_out).await;
    assert_eq!(
        response["results"][0]["result"]["error_type"], "timeout",
        "{response}"
    );
    // A chain whose every link forks the next and exits at once: never a child of the
    // daemon for long, and thousands of them a second.
    let chain = format!(
        "env -i setsid bash -c 'hop(){{ ( : {}; [ $SECONDS -lt 20 ] && hop ) & }}; hop'",
        marker(6)
    );
    execute_one(&client, &session, command(&chain)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alive: Vec<String> = (1..=6)
        .map(marker)
        .filter(|marker| processes_with(marker))
        .collect();
    assert!(alive.is_empty(), "alive 2 s after their call: {alive:?}");
    // What died as the daemon's child was reaped: no zombie is left to fill the pid space.
    let zombies = zombie_children(_daemon.pid());
    assert!(zombies < 5, "{zombies} zombie children of the daemon");
    drop(workspace);
}

/// How many children of `parent` are zombies.
fn zombie_children(parent: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let mut fields = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            fields.next() == Some("Z") && fields.next() == Some(&parent.to_string())
        })
        .count()
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

/// A session of its own on `client`, in `mode`, with `rules`.
async fn session_with(client: &TestClient, cwd: &Path, mode: &str, rules: Value) -> String {
    client
        .create_session(cwd, json!({"rules": rules, "mode": mode}))
        .await
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"id": "c", "name": name, "arguments": arguments})
}

/// The text a result shows the model: its content, or its error.
fn shown(response: &Value) -> String {
    let result = &response["results"][0]["result"];
    format!("{}{}", result["content"], result["error"])
}

#[tokio::test]
async fn walks_never_show_what_deny_rules_cover() {
    let Some((_daemon, client, workspace, _session)) =
        setup("walks_never_show_what_deny_rules_cover", "default").await
    else {
        return;
    };
    let project = &workspace.project;
    for (path, content) in [
        (".env", format!("TOKEN={SECRET}\n")),
        ("private/notes.txt", format!("{SECRET}\n")),
        (
            "deep/er/unlisted.txt",
            "searchable, never listed\n".to_owned(),
        ),
        ("src/visible.txt", "visible needle\n".to_owned()),
    ] {
        let path = project.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    std::os::unix::fs::symlink(project.join("secrets"), project.join("src/link")).unwrap();
    let rules = json!({"deny": ["read_file(secrets/**)", "read_file(.env)",
        "search_code(private/**)", "find_files(**/er/**)"]});
    let session = session_with(&client, project, "default", rules).await;
    let search = |arguments: Value| call("search_code", arguments);
    let find = |arguments: Value| call("find_files", arguments);
    let calls = [
        search(json!({"pattern": "SECRET"})),
        search(json!({"pattern": "SECRET", "glob": "**"})),
        search(json!({"pattern": "SECRET", "glob": ".*"})),
        search(json!({"pattern": "SECRET", "glob": "{.env,**/*.txt}"})),
        search(json!({"pattern": "secret", "case_insensitive": true, "glob": "**/.env"})),
        search(json!({"pattern": "SECRET", "path": "private"})),
        search(json!({"pattern": "SECRET", "path": "./private/notes.txt"})),
        search(json!({"pattern": "SECRET", "path": "secrets"})),
        search(json!({"pattern": "SECRET", "path": "src/link/key.txt"})),
        search(json!({"pattern": "SECRET", "path": "deep"})),
        search(json!({"pattern": "TOKEN", "path": ".", "context": 3, "glob": "!*.rs"})),
        find(json!({"pattern": "**"})),
        find(json!({"pattern": "**/.env"})),
        find(json!({"pattern": ".*"})),
        find(json!({"pattern": "*", "path": "secrets"})),
        find(json!({"pattern": "**/*.txt"})),
        find(json!({"pattern": "**/notes.txt", "path": "private"})),
    ];
    let mut shown_anywhere = Vec::new();
    for call in &calls {
        let response = execute_one(&client, &session, call.clone()).await;
        let text = shown(&response);
        // A find_files deny rule hides from find_files only; the others from both walks.
        let listing = call["name"] == "find_files";
        for hidden in [SECRET, "key.txt", ".env", "notes.txt", "unlisted"] {
            if text.contains(hidden) && (listing || hidden != "unlisted") {
                shown_anywhere.push(format!("{call} showed {hidden}: {text}"));
            }
        }
    }
    assert!(shown_anywhere.is_empty(), "{}", shown_anywhere.join("\n"));

    // What no rule hides is still found: the walks skip only what is denied.
    let response = execute_one(&client, &session, search(json!({"pattern": "needle"}))).await;
    assert!(shown(&response).contains("src/visible.txt"), "{response}");
    let response = execute_one(
        &client,
        &session,
        search(json!({"pattern": "never listed"})),
    )
    .await;
    assert!(
        shown(&response).contains("deep/er/unlisted.txt"),
        "{response}"
    );
    let response = execute_one(&client, &session, find(json!({"pattern": "**/*.txt"}))).await;
    let text = shown(&response);
    assert!(
        text.contains("src/visible.txt") && text.contains("keep.txt"),
        "{text}"
    );
}

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

    let list = client
        .request("tools/list", json!({}))
        .await
        .expect("tools/list");
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
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
            async move { execute_one(approver, &session, command(&line)).await }
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
        let response = execute_one(&client, &session, command(&line)).await;
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

#[tokio::test]
async fn commands_cannot_read_or_trace_the_daemon_or_its_parser_workers() {
    let test = "commands_cannot_read_or_trace_the_daemon_or_its_parser_workers";
    // Root's capabilities read every process whatever it says: as root, the daemon and so its
    // commands run without any, as an ordinary user's daemon and commands do.
    let wrapper = if nix::unistd::geteuid().is_root() {
        let Some(setpriv) = require::program(test, "setpriv", &[], "apt-get install util-linux")
        else {
            return;
        };
        vec![
            setpriv.display().to_string(),
            "--inh-caps=-all".to_owned(),
            "--bounding-set=-all".to_owned(),
        ]
    } else {
        Vec::new()
    };
    let daemon = TestDaemon::start_under(&wrapper, &[("TOOLD_TEST_SECRET", SECRET)]);
    let client = daemon.connect(json!({}), no_answers()).await;
    let rules = json!({"allow": ["run_command"]});
    let session = session_with(&client, &daemon.work(), "default", rules).await;
    // The first command starts the parser workers.
    execute_one(&client, &session, command("true")).await;
    let workers = children_running(daemon.pid(), "__shell-parser-worker");
    assert!(!workers.is_empty(), "no parser worker found");
    for pid in std::iter::once(daemon.pid()).chain(workers) {
        for what in ["environ", "mem", "fd", "maps", "auxv"] {
            let line = format!(
                "cat /proc/{pid}/{what} | od -c | head -c 100000; ls -l /proc/{pid}/{what}; \
                 cat /proc/{pid}/{what} | tr '\\0' ' '"
            );
            let response = execute_one(&client, &session, command(&line)).await;
            let text = shown(&response);
            assert!(!text.contains(SECRET), "{line}: {text}");
            assert!(!text.contains("toold.sock"), "{line}: {text}");
            if what == "environ" {
                assert!(text.contains("Permission denied"), "{line}: {text}");
            }
        }
    }
}

/// Children of `parent` whose command line contains `needle`.
fn children_running(parent: u32, needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(parent)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
        })
        .collect()
}

/// Bash evaluates some values as code: a name with a subscript (`a[$(cmd)]`) that indirection,
/// an array index, a substring offset or `[[ -v ]]` evaluates, and `${x@P}`. The line needs no
/// assignment the rules would see: `[[ … =~ (.*) ]]` fills `BASH_REMATCH`.
#[tokio::test]
async fn values_bash_evaluates_as_code_run_nothing() {
    let Some((_daemon, client, workspace, session)) =
        setup("values_bash_evaluates_as_code_run_nothing", "default").await
    else {
        return;
    };
    let p = workspace.project.join("P");
    let touch = format!("touch {}", p.display());
    // `BASH_REMATCH` holds a subscript that runs `touch`, or a value with a substitution.
    let subscript = format!("[[ 'a[$({touch})]' =~ (.*) ]]");
    let substitution = format!("[[ '$({touch})' =~ (.*) ]]");
    let lines = [
        format!("{subscript}; echo ${{!BASH_REMATCH}}"),
        format!("{subscript}; echo ${{a[BASH_REMATCH]}}"),
        format!("{substitution}; echo ${{BASH_REMATCH@P}}"),
        format!("{subscript}; echo ${{x:BASH_REMATCH}}"),
        format!("{subscript}; echo ${{x:0:BASH_REMATCH}}"),
        format!("{subscript}; echo \"${{!BASH_REMATCH:-x}}\""),
        format!("{subscript}; echo ${{a[${{BASH_REMATCH}}]}}"),
        format!("[[ -v 'a[$({touch})]' ]]; echo"),
        format!("{subscript}; echo ${{#BASH_REMATCH[BASH_REMATCH]}}"),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[p]).await;
}

/// What a line writes by redirection is judged as `write_file` and `edit_file` would be.
#[tokio::test]
async fn what_a_line_writes_is_judged_against_write_deny_rules() {
    let Some((_daemon, client, workspace, _session)) = setup(
        "what_a_line_writes_is_judged_against_write_deny_rules",
        "default",
    )
    .await
    else {
        return;
    };
    let rules = json!({"allow": ["run_command(echo *)", "run_command(true)"],
        "deny": ["write_file(secrets/**)", "edit_file(keep.txt)"]});
    let session = session_with(&client, &workspace.project, "accept_edits", rules).await;
    std::os::unix::fs::symlink(
        workspace.project.join("keep.txt"),
        workspace.project.join("alias"),
    )
    .unwrap();
    let lines = [
        "echo x > secrets/key.txt",
        "true > secrets/key.txt",
        "echo x >> ./secrets/../secrets/new",
        "echo x > keep.txt",
        "echo x &>> keep.txt",
        "echo x > alias",
        "echo x 2>| secrets/key.txt",
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[]).await;
}

/// `edit_file` reads what it edits and shows lines of it: a file no model may read is not
/// edited either, not even in `accept_edits`.
#[tokio::test]
async fn edit_file_never_shows_what_read_rules_deny() {
    let Some((_daemon, client, workspace, _session)) =
        setup("edit_file_never_shows_what_read_rules_deny", "default").await
    else {
        return;
    };
    std::fs::write(
        workspace.project.join(".env"),
        format!("A=1\nTOKEN={SECRET}\nB=2\n"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        workspace.project.join("secrets/key.txt"),
        workspace.project.join("lkey"),
    )
    .unwrap();
    let rules = json!({"deny": ["read_file(secrets/**)", "read_file(.env)"]});
    let session = session_with(&client, &workspace.project, "accept_edits", rules).await;
    let edit = |path: &str, old: &str| {
        call(
            "edit_file",
            json!({"path": path, "old_string": old, "new_string": "x"}),
        )
    };
    let calls = [
        edit(".env", "B=2"),
        edit("./.env", "A=1"),
        edit("lkey", "SECRET"),
        edit("secrets/key.txt", "SECRET"),
        edit("secrets/../secrets/key.txt", "7f3a9c"),
    ];
    no_effect(&client, &session, &workspace, &calls, &[]).await;
}

/// Files a program is told to write by its arguments are writes like a redirection's target:
/// `allow run_command(git log *)` does not cover `git log --output=.git/config`.
#[tokio::test]
async fn files_programs_are_told_to_write_are_judged() {
    let test = "files_programs_are_told_to_write_are_judged";
    let Some((_daemon, client, workspace, _session)) = setup(test, "default").await else {
        return;
    };
    let git = require::program(test, "git", &[], "apt-get install git").unwrap();
    let committed = std::process::Command::new(git)
        .args([
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "--allow-empty",
            "-qm",
            "x",
        ])
        .current_dir(&workspace.project)
        .status()
        .unwrap();
    assert!(committed.success());
    let rules = json!({"allow": ["run_command(git log *)", "run_command(git status)",
        "run_command(tee *)", "run_command(sed *)", "run_command(echo *)", "run_command(cp *)"],
        "deny": ["write_file(secrets/**)"]});
    let session = session_with(&client, &workspace.project, "default", rules).await;
    let p = workspace.project.join("P");
    let outside = workspace.outside.display().to_string();
    let config = format!("[core]%n\\tfsmonitor = touch {}", p.display());
    let lines = [
        format!("git log -1 '--format={config}' --output=.git/config && git status"),
        format!("git log -1 '--format={config}' --output .git/config; git status"),
        format!("git log -1 --output={outside}/f"),
        "echo '[core]' | tee -a .git/config".to_owned(),
        format!("echo x | tee {outside}/f"),
        "echo x | tee \"$HOME/f\"".to_owned(),
        "sed -i s/a/b/ .git/config".to_owned(),
        "echo x | tee secrets/key.txt".to_owned(),
        format!("cp keep.txt {outside}/keep.txt"),
        "cp keep.txt .git/hooks/pre-commit".to_owned(),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command(line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[p]).await;
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
    let granted = execute_one(&approver, &session, command("rm -rf build")).await;
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

/// toold's own config, state and runtime directories, under a root that holds them all (a
/// root of `$HOME`): no file tool or command line writes there without an approval, in any
/// mode but bypass, and after a restart the daemon trusts nothing a call planted.
#[tokio::test]
async fn toolds_own_files_are_protected_like_git_config() {
    let mut daemon = TestDaemon::start_with_config(Some("# the user's config\n"));
    let root = daemon.root().to_owned();
    let config = root.join("config/toold/config.toml");
    let config_before = std::fs::read(&config).unwrap();
    let sessions = root.join("state/toold/sessions");
    // The journal of writes in flight, which the daemon keeps from its start.
    let journal = root.join("state/toold/writes-in-flight");
    assert!(journal.exists());
    let marker = root.join("work/HOOK_RAN");
    let planted_hook = format!(
        "[[hooks.pre_tool_use]]\nmatcher = \"*\"\ncommand = \"touch {}\"\n",
        marker.display()
    );
    std::fs::write(root.join("work/evil.toml"), &planted_hook).unwrap();
    // A directory to copy over toold's, and a repository's `.git` to copy into the work tree.
    for dir in ["work/evil/toold", "work/evil/.git/hooks"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join("work/evil/toold/config.toml"), &planted_hook).unwrap();
    std::fs::write(root.join("work/evil/.git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(root.join("config/toold"), root.join("work/link")).unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    let allowed: Vec<String> = [
        "echo", "tee", "cp", "mv", "rm", "sed", "dd", "truncate", "ln", "rsync", "cat",
    ]
    .iter()
    .map(|program| format!("run_command({program} *)"))
    .collect();
    let write = |path: &str, content: &str| json!({"id": "c", "name": "write_file", "arguments": {"path": path, "content": content}});
    let calls = [
        write("config/toold/config.toml", &planted_hook),
        write("./config/../config/toold/config.toml", &planted_hook),
        write("work/link/config.toml", &planted_hook),
        write("state/toold/sessions/s_planted.json", "{}"),
        json!({"id": "c", "name": "edit_file", "arguments": {"path": "config/toold/config.toml",
            "old_string": "# the user's config", "new_string": planted_hook}}),
        command(&format!(
            "echo '{planted_hook}' >> config/toold/config.toml"
        )),
        command(&format!("echo '{planted_hook}' >> work/link/config.toml")),
        command("tee -a config/toold/config.toml < work/evil.toml"),
        command("cp work/evil.toml config/toold/config.toml"),
        command("dd if=work/evil.toml of=config/toold/config.toml"),
        command("sed -i 's/^#.*//' config/toold/config.toml"),
        command("truncate -s 0 config/toold/config.toml"),
        command("rm -rf state/toold"),
        command("rm config/toold/config.toml"),
        command("mv state/toold/sessions work/moved"),
        command("mv config/toold work/moved-config"),
        command("echo x > run/toold/planted"),
        // Into a directory above toold's, whose copies land inside it.
        command("cp -r work/evil/toold config/"),
        command("cp -r work/evil/toold config"),
        command("cp -rT work/evil config"),
        command("rsync -a work/evil/ config/"),
        command("cp -r work/evil/.git work/"),
        // A second name for toold's files, made and used in one line or kept for later.
        command("cp -l config/toold/config.toml work/hard"),
        command("ln config/toold/config.toml work/hard"),
        command(&format!(
            "cp -s {} work/soft; echo '{planted_hook}' >> work/soft",
            config.display()
        )),
        command(&format!(
            "ln -s {} work/dir; cat work/evil.toml >> work/dir/config.toml",
            root.join("config/toold").display()
        )),
        command("rm -rf config"),
    ];
    // Every directory of the daemon's tree but the socket's (a root holding it is refused).
    let roots: Vec<PathBuf> = ["config", "state", "work"]
        .iter()
        .map(|dir| root.join(dir))
        .collect();
    for mode in ["accept_edits", "default", "dont_ask"] {
        let session = client
            .create_session(
                &root,
                json!({"mode": mode, "rules": {"allow": allowed}, "roots": roots}),
            )
            .await;
        for call in &calls {
            let response = execute_one(&client, &session, call.clone()).await;
            let result = &response["results"][0]["result"];
            assert_ne!(result["ok"], true, "{mode}: {call} was allowed: {result}");
            assert_eq!(
                std::fs::read(&config).unwrap(),
                config_before,
                "{mode}: {call}"
            );
            assert!(journal.exists(), "{mode}: {call}");
            assert!(!sessions.join("s_planted.json").exists(), "{mode}: {call}");
            assert!(!root.join("run/toold/planted").exists(), "{mode}: {call}");
            assert!(!root.join("work/.git").exists(), "{mode}: {call}");
            for name in ["hard", "soft", "dir"] {
                let _ = std::fs::remove_file(root.join("work").join(name));
            }
        }
        // Elsewhere under the same root, the same tools and lines still work.
        let response = execute_one(&client, &session, command("echo fine > work/fine.txt")).await;
        assert_eq!(
            response["results"][0]["result"]["ok"], true,
            "{mode}: {response}"
        );
    }
    client.disconnect();
    // Restarted, the daemon runs no planted hook.
    daemon.restart();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&root, json!({"roots": roots})).await;
    execute_one(&client, &session, command("true")).await;
    assert!(!marker.exists(), "a planted hook ran");
}

/// A root given through a symlink is made canonical when the session is created: repointing
/// the link (or a directory above the root) later moves nothing the session may write.
#[tokio::test]
async fn a_root_is_resolved_once_when_the_session_is_made() {
    let daemon = TestDaemon::start();
    let base = daemon.work();
    for dir in ["real", "elsewhere", "above/proj", "other/proj"] {
        std::fs::create_dir_all(base.join(dir)).unwrap();
    }
    let link = base.join("link");
    std::os::unix::fs::symlink(base.join("real"), &link).unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    let rules = json!({"allow": ["run_command(echo *)"]});
    let session = client
        .create_session(&link, json!({"mode": "accept_edits", "rules": rules}))
        .await;
    let nested = client
        .create_session(
            &base.join("above/proj"),
            json!({"mode": "accept_edits", "rules": rules}),
        )
        .await;
    let snapshot = client
        .request("session/get", json!({"session_id": session}))
        .await
        .unwrap();
    assert_eq!(snapshot["cwd"], base.join("real").display().to_string());
    assert_eq!(snapshot["roots"], json!([base.join("real")]));

    // The link now points outside; `above` is now a link to `other`.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(base.join("elsewhere"), &link).unwrap();
    std::fs::rename(base.join("above"), base.join("above-moved")).unwrap();
    std::os::unix::fs::symlink(base.join("other"), base.join("above")).unwrap();

    let write = |path: String| json!({"id": "w", "name": "write_file", "arguments": {"path": path, "content": "x"}});
    let through_link = format!("{}/f.txt", link.display());
    for call in [
        write(through_link.clone()),
        command(&format!("echo x > {through_link}")),
        write(base.join("elsewhere/g.txt").display().to_string()),
    ] {
        let response = execute_one(&client, &session, call.clone()).await;
        assert_ne!(
            response["results"][0]["result"]["ok"], true,
            "{call}: {response}"
        );
    }
    let in_moved_root = format!("{}/above/proj/f.txt", base.display());
    for call in [
        write(in_moved_root.clone()),
        command(&format!("echo x > {in_moved_root}")),
    ] {
        let response = execute_one(&client, &nested, call.clone()).await;
        assert_ne!(
            response["results"][0]["result"]["ok"], true,
            "{call}: {response}"
        );
    }
    assert_eq!(
        std::fs::read_dir(base.join("elsewhere")).unwrap().count(),
        0,
        "nothing was written through the repointed link"
    );
    assert!(!base.join("other/proj/f.txt").exists());

    // Relative paths still go to the directory the session was made in.
    for call in [write("a.txt".to_owned()), command("echo x > b.txt")] {
        let response = execute_one(&client, &session, call.clone()).await;
        assert_eq!(
            response["results"][0]["result"]["ok"], true,
            "{call}: {response}"
        );
    }
    assert!(base.join("real/a.txt").exists() && base.join("real/b.txt").exists());
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
    let daemon = TestDaemon::start();
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
        let response = execute_one(&client, &session, command(&line)).await;
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
    let response = execute_one(&client, &session, command("rm marker.txt")).await;
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
        ("read_file(secrets/)", "paths never end in '/'"),
        ("read_file(secrets)", "write \"secrets/**\""),
        ("read_file(./secrets)", "acts on files only"),
        ("read_file(/etc/hostname)", "write \"//etc/hostname\""),
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
    // What they meant is accepted, and denies; so is a rule for a tool registered later.
    let meant = client
        .create_session(
            &work,
            json!({"rules": {"deny": ["read_file(secrets/**)", "read_file(//etc/hostname)",
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
        "{response}"
    );
}

/// The call's `env` reaches every command of its line, an assignment written in the line only
/// its own command: a grant for `PATH=/evil true; git --version` (the real git runs) must not
/// cover `true; git --version` with `env` `PATH=/evil` (a fake git runs).
#[tokio::test]
async fn a_grant_for_an_assignment_never_covers_the_env_argument() {
    use std::os::unix::fs::PermissionsExt;
    let daemon = TestDaemon::start();
    let evil_bin = daemon.root().join("evilbin");
    std::fs::create_dir_all(&evil_bin).unwrap();
    let marker = daemon.root().join("FAKE_GIT_RAN");
    let fake = evil_bin.join("git");
    std::fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (client, asked) = approving_for_the_session(&daemon).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let path = evil_bin.display().to_string();
    let inline = command(&format!("PATH={path} true; git --version"));
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

/// Whatever started the daemon may have left it descriptors (a pipe, a socket): no command or
/// parser worker gets them.
#[tokio::test]
async fn commands_inherit_no_descriptor_the_daemon_was_given() {
    let wrapper = [
        "sh".to_owned(),
        "-c".to_owned(),
        // fd 9 is a pipe's write end, as a launcher's log pipe would be.
        "exec 9>&1; exec \"$@\"".to_owned(),
        "sh".to_owned(),
    ];
    let daemon = TestDaemon::start_under(&wrapper, &[]);
    let inherited = std::fs::read_link(format!("/proc/{}/fd/9", daemon.pid()));
    assert!(inherited.is_ok(), "the daemon was given fd 9");
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["run_command"]}}))
        .await;
    let response = execute_one(
        &client,
        &session,
        command("ls /proc/self/fd; ls /proc/$$/fd"),
    )
    .await;
    let result = &response["results"][0]["result"];
    assert_eq!(result["ok"], true, "{result}");
    let listed: Vec<&str> = result["content"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .collect();
    assert!(
        listed.iter().all(|fd| matches!(*fd, "0" | "1" | "2" | "3")),
        "a command holds more than its standard streams: {listed:?}"
    );
    for worker in toold_tests::daemon::shell_parser_workers(daemon.pid()) {
        let held: Vec<String> = std::fs::read_dir(format!("/proc/{worker}/fd"))
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !held.contains(&"9".to_owned()),
            "a parser worker holds fd 9: {held:?}"
        );
    }
}
