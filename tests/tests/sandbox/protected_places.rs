//! What stays read-only to commands wherever it lies: git metadata (also what git would read
//! once it exists, undone after the call), what the mount API could lift, and toold's own
//! directories and config file.

use std::path::Path;

use serde_json::json;
use toold_tests::daemon::TestDaemon;
use toold_tests::require;

use super::{Places, connected, output, quoted, run, sandboxed, sandboxed_on, session};

/// `dir` made a git repository by the real `git`.
fn git_init(git: &Path, dir: &Path) {
    let init = std::process::Command::new(git)
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(init.success());
}

#[tokio::test]
async fn git_metadata_inside_the_root_stays_read_only() {
    let Some(git) = require::program(
        "git_metadata_inside_the_root_stays_read_only",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    let git_dir = places.project.join(".git");
    let session = session(&client, &places.project, json!({})).await;
    let before = Places::snapshot(&git_dir);
    let mut hinted = 0;
    for line in [
        "echo '[core] hooksPath = /tmp' >> .git/config",
        "git config core.hooksPath /tmp",
        "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
        "rm -r .git/hooks",
        "mv .git/config .git/config.old",
        "mv .git .git-old && mkdir .git",
        "rm -rf .git",
        "python3 -c \"open('.git/hooks/pre-push', 'w')\"",
    ] {
        let result = run(&client, &session, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        // A failure to change git's metadata says what kept it and what to do, not where
        // commands may write (the repository, which holds it).
        let kept = if line.contains(".git/hooks/") && !line.starts_with("echo") {
            Some(".git/hooks read-only")
        } else if line.starts_with("git config") || line.ends_with(">> .git/config") {
            Some(".git/config read-only")
        } else {
            None
        };
        // (Those the rules see writing there are denied before they run.)
        let ran = result["metadata"]["sandbox"].is_object();
        if let Some(kept) = kept.filter(|_| ran) {
            hinted += 1;
            let hint = result["metadata"]["sandbox"]["hint"]
                .as_str()
                .unwrap_or_default();
            assert!(
                hint.contains(kept) && hint.contains("Ask the user"),
                "{line}: {result}"
            );
            assert!(!hint.contains("may write only under"), "{line}: {hint}");
        }
    }
    assert!(
        hinted >= 2,
        "git config and a hook's write ran and were explained"
    );
    assert_eq!(Places::snapshot(&git_dir), before);
}

/// A command run as root cannot lift the read-only mounts with the new mount API either:
/// `mount_setattr` to clear read-only, `open_tree` to reach what a mount covers.
#[tokio::test]
async fn the_mount_api_cannot_lift_what_covers_git_or_the_socket() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    let socket_parent = daemon
        .socket()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    // x86_64 and aarch64 share these numbers (the syscalls newer than 5.1 are numbered alike).
    let script = format!(
        "import ctypes, os, socket\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         class Attr(ctypes.Structure):\n\
         \x20   _fields_ = [('set', ctypes.c_uint64), ('clr', ctypes.c_uint64), ('prop', ctypes.c_uint64), ('userns', ctypes.c_uint64)]\n\
         attr = Attr(0, 1, 0, 0)\n\
         r = libc.syscall(442, -100, b'.git/config', 0, ctypes.byref(attr), ctypes.sizeof(attr))\n\
         print('mount_setattr', r, ctypes.get_errno())\n\
         try:\n\
         \x20   open('.git/config', 'a').write('[core] fsmonitor = touch /tmp/pwned\\n')\n\
         except OSError as e:\n\
         \x20   print('write', e)\n\
         fd = libc.syscall(428, -100, os.getcwd().encode(), 1 | 0o2000000)\n\
         print('open_tree', fd, ctypes.get_errno())\n\
         if fd >= 0:\n\
         \x20   try:\n\
         \x20       f = os.open('.git/config', os.O_WRONLY | os.O_APPEND, dir_fd=fd)\n\
         \x20       os.write(f, b'[core] fsmonitor = touch /tmp/pwned\\n')\n\
         \x20   except OSError as e:\n\
         \x20       print('write through the clone', e)\n\
         fd = libc.syscall(428, -100, {parent:?}.encode(), 1 | 0o2000000)\n\
         print('open_tree socket', fd, ctypes.get_errno())\n\
         if fd >= 0:\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   s.connect(f'/proc/self/fd/{{fd}}/toold/toold.sock')\n\
         \x20   s.sendall(b'{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"protocol_version\":1}}}}\\n')\n\
         \x20   s.settimeout(3)\n\
         \x20   print('reply', s.recv(4096))\n",
        parent = socket_parent.display().to_string()
    );
    std::fs::write(places.project.join("lift.py"), script).unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, "python3 lift.py").await;
    let printed = output(&result);
    assert!(!printed.contains("protocol_version"), "{result}");
    assert_eq!(
        std::fs::read_to_string(places.project.join(".git/config")).unwrap(),
        "[core]\n",
        "{result}"
    );
}

/// What git reads but a mount cannot cover because it does not exist yet — a `commondir`
/// that would move the repository's config and hooks elsewhere — is removed after the call,
/// and the result says so; a missing `hooks` directory is made (empty) and covered.
#[tokio::test]
async fn git_metadata_made_where_git_would_read_it_is_undone() {
    let Some(git) = require::program(
        "git_metadata_made_where_git_would_read_it_is_undone",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    std::fs::remove_dir_all(places.project.join(".git/hooks")).unwrap();
    // In a script, out of the permission engine's sight.
    std::fs::write(
        places.project.join("redirect.sh"),
        "mkdir -p /tmp/evil-$$ && cp .git/config /tmp/evil-$$/config\n\
         ln -s \"$PWD/.git/objects\" \"$PWD/.git/refs\" /tmp/evil-$$/\n\
         echo /tmp/evil-$$ > .git/commondir\n\
         mkdir -p .git/hooks; echo 'touch /tmp/pwned' > .git/hooks/pre-commit\n",
    )
    .unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, "bash redirect.sh").await;
    assert_eq!(
        result["metadata"]["sandbox"]["removed"],
        json!([places.project.join(".git/commondir")]),
        "{result}"
    );
    assert!(!places.project.join(".git/commondir").exists());
    assert!(places.project.join(".git/hooks").is_dir());
    assert!(!places.project.join(".git/hooks/pre-commit").exists());
}

/// The removal after the call touches only the git directory it looked at: a command that
/// swaps its root for a symlink to another repository cannot make the daemon delete that
/// repository's `commondir`.
#[tokio::test]
async fn undoing_a_commondir_follows_no_symlink() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    let victim = places.outside.join("victim");
    std::fs::create_dir_all(victim.join(".git")).unwrap();
    std::fs::write(victim.join(".git/commondir"), "../main/.git\n").unwrap();
    let script = places.outside.join("swap.sh");
    std::fs::write(
        &script,
        format!(
            "cd /\nmv {project} {project}-moved\nln -s {victim} {project}\n",
            project = places.project.display(),
            victim = victim.display()
        ),
    )
    .unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, &format!("bash {}", script.display())).await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert_eq!(
        result["metadata"]["sandbox"].get("removed"),
        None,
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(victim.join(".git/commondir")).unwrap(),
        "../main/.git\n"
    );
}

/// toold's own config (whose hooks run unsandboxed) and saved sessions, here under `/tmp`
/// where commands may write: read-only to commands, whatever the line looks like.
#[tokio::test]
async fn toolds_own_directories_are_read_only_to_commands() {
    let daemon = TestDaemon::start_with_config(Some("# the user's config\n"));
    let (client, places, session) = sandboxed_on(&daemon).await;
    let config = daemon.root().join("config/toold/config.toml");
    let state = daemon.root().join("state/toold");
    assert!(config.starts_with("/tmp") && state.is_dir());
    let script = places.project.join("plant.sh");
    std::fs::write(
        &script,
        format!(
            "echo '[[hooks.pre_tool_use]]' >> {config}\ntouch {state}/planted\n",
            config = config.display(),
            state = state.display()
        ),
    )
    .unwrap();
    let result = run(&client, &session, "bash plant.sh").await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# the user's config\n"
    );
    assert!(!state.join("planted").exists());
}

/// A config file given with `--config` in a place commands may write, in a directory that is
/// not toold's own, is read-only to them too (its hooks would run unsandboxed at the next
/// start).
#[tokio::test]
async fn a_config_file_in_a_writable_place_stays_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().canonicalize().unwrap().join("settings.toml");
    std::fs::write(&config, "# the user's config\n").unwrap();
    let wrapper = [
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("exec \"$0\" \"$@\" --config '{}'", config.display()),
    ];
    let daemon = TestDaemon::start_under(&wrapper, &[]);
    let (client, _places, session) = sandboxed_on(&daemon).await;
    let result = run(
        &client,
        &session,
        &format!("echo '[[hooks.pre_tool_use]]' >> {}", quoted(&config)),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# the user's config\n"
    );
}

/// toold's config directory that does not exist yet (the user runs on defaults), under a root:
/// a command cannot make it, nor a config in it whose hooks would run unsandboxed at the next
/// reload — however it goes about it.
#[tokio::test]
async fn a_missing_config_directory_under_a_root_cannot_be_made() {
    let places = Places::new();
    let config_home = places.project.join("dot-config");
    let daemon = TestDaemon::start_with_env(&[("XDG_CONFIG_HOME", config_home.to_str().unwrap())]);
    let client = connected(&daemon).await;
    let session = session(&client, &places.project, json!({})).await;
    let config = config_home.join("toold/config.toml");
    for (index, line) in [
        "mkdir -p dot-config/toold && echo '[[hooks.pre_tool_use]]' > dot-config/toold/config.toml",
        "echo '[[hooks.pre_tool_use]]' > dot-config/toold/config.toml",
        "mv dot-config dot-config-old && mkdir -p dot-config/toold && echo x > dot-config/toold/config.toml",
        "rm -rf dot-config/toold && mkdir dot-config/toold && echo x > dot-config/toold/config.toml",
        "ln -s ../elsewhere dot-config/toold/config.toml",
        "cd dot-config && mv toold t && mkdir toold && echo x > toold/config.toml",
    ]
    .iter()
    .enumerate()
    {
        let script = places.project.join(format!("plant-{index}.sh"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let result = run(&client, &session, &format!("bash {}", quoted(&script))).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert!(!config.exists() && !config.is_symlink(), "{line}: {result}");
        assert!(!places.project.join("dot-config-old").exists(), "{line}");
    }
    // The file tools ask before writing there too, whatever the mode allows.
    let edits = client
        .create_session(&places.project, json!({"mode": "accept_edits"}))
        .await;
    let response = client
        .request(
            "tools/execute",
            json!({"session_id": edits, "calls": [{"id": "w", "name": "write_file",
                "arguments": {"path": config.to_str().unwrap(), "content": "[[hooks.pre_tool_use]]\n"}}]}),
        )
        .await
        .unwrap();
    let result = &response["results"][0]["result"];
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(!config.exists());
}

/// toold's config file as a symlink into a root (dotfiles managed with stow): protected by what
/// it resolves to as well as by its name — `edit_file` asks in `accept_edits`, and commands
/// can neither change it nor move it, or its directory, away for a decoy to take its place.
#[tokio::test]
async fn a_config_file_that_is_a_symlink_into_a_root_is_protected_where_it_leads() {
    let places = Places::new();
    let dotfiles = places.project.join("dotfiles");
    std::fs::create_dir(&dotfiles).unwrap();
    let real = dotfiles.join("config.toml");
    std::fs::write(&real, "# the user's config\n").unwrap();
    let config_home = places.outside.join("dot-config");
    std::fs::create_dir_all(config_home.join("toold")).unwrap();
    std::os::unix::fs::symlink(&real, config_home.join("toold/config.toml")).unwrap();
    let daemon = TestDaemon::start_with_env(&[("XDG_CONFIG_HOME", config_home.to_str().unwrap())]);
    let client = connected(&daemon).await;
    let edits = client
        .create_session(&places.project, json!({"mode": "accept_edits"}))
        .await;
    for call in [
        json!({"id": "e", "name": "edit_file", "arguments": {"path": "dotfiles/config.toml",
            "old_string": "# the user's config", "new_string": "[[hooks.pre_tool_use]]"}}),
        json!({"id": "w", "name": "write_file", "arguments": {"path": "dotfiles/config.toml",
            "content": "[[hooks.pre_tool_use]]\n"}}),
    ] {
        let response = client
            .request(
                "tools/execute",
                json!({"session_id": edits, "calls": [call]}),
            )
            .await
            .unwrap();
        let result = &response["results"][0]["result"];
        assert_eq!(result["ok"], json!(false), "{result}");
    }
    let session = session(&client, &places.project, json!({})).await;
    for (index, line) in [
        "echo '[[hooks.pre_tool_use]]' >> dotfiles/config.toml",
        "rm -f dotfiles/config.toml",
        "mv dotfiles dotfiles-old && mkdir dotfiles && echo x > dotfiles/config.toml",
        "python3 -c \"open('dotfiles/config.toml', 'w').write('x')\"",
    ]
    .iter()
    .enumerate()
    {
        let script = places.project.join(format!("plant-{index}.sh"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let result = run(&client, &session, &format!("bash {}", quoted(&script))).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert_eq!(
            std::fs::read_to_string(&real).unwrap(),
            "# the user's config\n",
            "{line}"
        );
    }
}

/// A `.git` file is a command's to write: one that names a directory outside the roots
/// (`gitdir: ANYWHERE`) leads the daemon, preparing the next command's sandbox or cleaning up
/// after it, to make nothing there and remove nothing there.
#[tokio::test]
async fn a_planted_git_file_leads_the_daemon_nowhere() {
    let (_daemon, client, places, session) = sandboxed().await;
    let elsewhere = places.outside.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir_all(places.project.join("nested")).unwrap();
    for (dir, line) in [
        (
            ".",
            format!("echo 'gitdir: {}' > .git", elsewhere.display()),
        ),
        (
            "nested",
            format!("echo 'gitdir: {}' > nested/.git", elsewhere.display()),
        ),
    ] {
        let script = places.project.join("plant.sh");
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let planted = run(&client, &session, "bash plant.sh").await;
        assert_eq!(planted["ok"], json!(true), "{dir}: {planted}");
        // The next command: while it runs, another program makes what the daemon would have
        // removed afterwards.
        let made = elsewhere.join("commondir");
        let line = format!("cd {dir} && sleep 0.6 && true");
        let running = run(&client, &session, &line);
        let make = async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            std::fs::write(&made, "../main/.git\n").unwrap();
        };
        let (result, ()) = tokio::join!(running, make);
        assert_eq!(result["ok"], json!(true), "{dir}: {result}");
        assert!(
            !elsewhere.join("hooks").exists(),
            "{dir}: the daemon made a directory there"
        );
        assert!(
            made.exists(),
            "{dir}: the daemon removed a file there: {result}"
        );
        assert_eq!(
            result["metadata"]["sandbox"].get("removed"),
            None,
            "{result}"
        );
        std::fs::remove_file(&made).unwrap();
        std::fs::remove_file(places.project.join(dir).join(".git")).unwrap();
    }
}

/// The hooks git really runs — the directory `core.hooksPath` names (husky's `.husky/_`), made
/// empty and covered where it is missing — and the files the config includes are protected as
/// `.git/hooks` and `.git/config` are: a sandboxed command cannot plant a hook there, nor can
/// `write_file` in `accept_edits`.
#[tokio::test]
async fn the_hooks_git_runs_are_protected_wherever_the_config_points() {
    let Some(git) = require::program(
        "the_hooks_git_runs_are_protected_wherever_the_config_points",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    let husky = places.project.join(".husky/_");
    std::fs::create_dir_all(&husky).unwrap();
    std::fs::write(husky.join("pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    let config = places.project.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[core]\n\thooksPath = .husky/_\n[include]\n\tpath = ../team.gitconfig\n");
    std::fs::write(&config, text).unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let before = Places::snapshot(&husky);
    for (index, line) in [
        "echo 'touch /tmp/pwned' > .husky/_/pre-commit",
        "echo 'touch /tmp/pwned' > .husky/_/post-checkout && chmod +x .husky/_/post-checkout",
        "rm -rf .husky/_ && mkdir .husky/_ && echo x > .husky/_/pre-commit",
        "mv .husky .husky.old && mkdir -p .husky/_ && echo x > .husky/_/pre-commit",
        "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > team.gitconfig",
    ]
    .iter()
    .enumerate()
    {
        let script = places.project.join(format!("plant-{index}.sh"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let _ = run(&client, &session, &format!("bash {}", quoted(&script))).await;
        assert_eq!(Places::snapshot(&husky), before, "{line}");
        assert!(!places.project.join("team.gitconfig").exists(), "{line}");
        assert!(!places.project.join(".husky.old").exists(), "{line}");
    }
    let edits = client
        .create_session(&places.project, json!({"mode": "accept_edits"}))
        .await;
    for path in [".husky/_/pre-commit", ".husky/_/pre-push", "team.gitconfig"] {
        let response = client
            .request(
                "tools/execute",
                json!({"session_id": edits, "calls": [{"id": "w", "name": "write_file",
                    "arguments": {"path": path, "content": "touch /tmp/pwned\n"}}]}),
            )
            .await
            .unwrap();
        assert_eq!(
            response["results"][0]["result"]["ok"],
            json!(false),
            "{path}: {response}"
        );
    }
    assert_eq!(Places::snapshot(&husky), before);
    // A hooks directory the config names that does not exist yet cannot be made by a command.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace(".husky/_", ".githooks");
    std::fs::write(&config, text).unwrap();
    std::fs::write(
        places.project.join("plant.sh"),
        "mkdir -p .githooks; echo 'touch /tmp/pwned' > .githooks/pre-commit\n",
    )
    .unwrap();
    let _ = run(&client, &session, "bash plant.sh").await;
    assert!(!places.project.join(".githooks/pre-commit").exists());
}

/// A repository a command plants anywhere under the roots, or a nested repository it gives a
/// setting or a hook that runs code, runs nothing in the user's next `git status`: what the
/// command gave it is undone after the call (a new repository's config and hooks set aside, a
/// changed one's config put back) and named in `metadata.sandbox.removed`; a nested
/// repository known before the call is read-only to it, and cannot be moved away.
#[tokio::test]
async fn a_repository_planted_or_changed_by_a_command_runs_nothing_later() {
    let Some(git) = require::program(
        "a_repository_planted_or_changed_by_a_command_runs_nothing_later",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    let nested = places.project.join("vendor/lib");
    std::fs::create_dir_all(&nested).unwrap();
    git_init(&git, &nested);
    let marker = places.outside.join("ran");
    let run_marker = format!("touch {}", marker.display());
    let session = session(&client, &places.project, json!({})).await;
    // Each line in a script, out of the permission engine's sight; then the user's own git in
    // each repository the line made or changed.
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            format!("git init -q planted && git -C planted config core.fsmonitor '{run_marker}'"),
            vec!["planted"],
        ),
        (
            format!(
                "mkdir -p hand/.git/objects hand/.git/refs && echo 'ref: refs/heads/main' > hand/.git/HEAD && \
                 printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = {run_marker}\\n' > hand/.git/config"
            ),
            vec!["hand"],
        ),
        (
            format!(
                "git init -q hooked && printf '#!/bin/sh\\n{run_marker}\\n' > hooked/.git/hooks/pre-commit && \
                 chmod +x hooked/.git/hooks/pre-commit && git -C hooked config alias.st '!{run_marker}'"
            ),
            vec!["hooked"],
        ),
        (
            format!(
                "mkdir -p /tmp/evil && git init -q /tmp/evil && git -C /tmp/evil config core.pager '{run_marker}' && \
                 mkdir -p linked && echo \"gitdir: $(grep -o '[^ ]*/tmp/toold[^ ]*\\|[^ ]*/state/toold/tmp/[^ ]*/tmp' /proc/self/mountinfo | head -1)/evil\" > linked/.git"
            ),
            vec!["linked"],
        ),
        (
            format!("git -C vendor/lib config core.fsmonitor '{run_marker}'"),
            vec!["vendor/lib"],
        ),
        // A hard link to a repository's config made while it could be written (the repository
        // was new), written through in the next call.
        (
            "git init -q twice && ln twice/.git/config twice-config".to_owned(),
            vec!["twice"],
        ),
        (
            format!("printf '[core]\\n\\tfsmonitor = {run_marker}\\n' >> twice-config"),
            vec!["twice"],
        ),
        (
            format!("printf '#!/bin/sh\\n{run_marker}\\n' > vendor/lib/.git/hooks/post-checkout"),
            vec!["vendor/lib"],
        ),
        (
            format!(
                "mv vendor/lib vendor/lib.x; mkdir -p vendor/lib && git init -q vendor/lib && \
                 git -C vendor/lib config core.fsmonitor '{run_marker}'"
            ),
            vec!["vendor/lib"],
        ),
    ];
    for (index, (line, repositories)) in cases.iter().enumerate() {
        let script = places.project.join(format!("plant-{index}.sh"));
        std::fs::write(&script, format!("cd {}\n{line}\n", quoted(&places.project))).unwrap();
        let result = run(&client, &session, &format!("bash {}", quoted(&script))).await;
        for repository in repositories {
            let dir = places.project.join(repository);
            if !dir.exists() {
                continue;
            }
            // The user's git, as a shell prompt runs it, and a commit.
            for args in [
                &["status"][..],
                &["st"],
                &["commit", "--allow-empty", "-qm", "x"],
            ] {
                let _ = std::process::Command::new(&git)
                    .args(args)
                    .current_dir(&dir)
                    .env("GIT_PAGER", "")
                    .env_remove("PAGER")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            assert!(
                !marker.exists(),
                "{line}: git ran what the command planted: {result}"
            );
        }
        assert!(
            !places.project.join("vendor/lib.x").exists(),
            "{line}: {result}"
        );
    }
    // What was undone is reported.
    std::fs::write(
        places.project.join("again.sh"),
        format!("git init -q again && git -C again config core.fsmonitor '{run_marker}'\n"),
    )
    .unwrap();
    let result = run(&client, &session, "bash again.sh").await;
    assert_eq!(
        result["metadata"]["sandbox"]["removed"],
        json!([places.project.join("again/.git/config")]),
        "{result}"
    );
    // A repository made as `cargo new` and `git init` make it keeps its config.
    let result = run(
        &client,
        &session,
        "git init -q clean && git -C clean status --short",
    )
    .await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(places.project.join("clean/.git/config").exists());
}
