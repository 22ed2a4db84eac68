//! What a line or a file tool writes: files that make later code run (git's, toold's own),
//! writes against write deny rules, files programs are told to write, and roots resolved once.

use std::path::PathBuf;

use serde_json::{Value, json};
use toold_tests::daemon::{TestDaemon, command_call, no_answers};
use toold_tests::require;

use super::{execute_one, no_effect, session_with, setup};

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
        command_call("c", &format!("echo '{config}' >> .git/config")),
        command_call("c", &format!("echo '{hook}' > .git/hooks/pre-commit")),
        command_call("c", "echo x > ./.git/config.worktree"),
        command_call("c", &format!("echo '{config}' >> .git/conf*")),
        command_call("c", &format!("echo '{config}' >> .gi[t]/config")),
        command_call("c", "echo ../../evil > .git/commondir; git status"),
        command_call("c", "echo x >| .git/hooks/../config"),
        write(".git/config", &config),
        write(".git/hooks/post-checkout", &hook),
        write("./.git/../.git/config", &config),
        write(".git", "gitdir: /tmp\n"),
        // A directory made to look like a repository needs a HEAD.
        write("fake/HEAD", "ref: refs/heads/main\n"),
        command_call("c", "echo 'ref: refs/heads/x' > .git/HEAD"),
        command_call("c", "git status"),
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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[p]).await;
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
        command_call(
            "c",
            &format!("echo '{planted_hook}' >> config/toold/config.toml"),
        ),
        command_call(
            "c",
            &format!("echo '{planted_hook}' >> work/link/config.toml"),
        ),
        command_call("c", "tee -a config/toold/config.toml < work/evil.toml"),
        command_call("c", "cp work/evil.toml config/toold/config.toml"),
        command_call("c", "dd if=work/evil.toml of=config/toold/config.toml"),
        command_call("c", "sed -i 's/^#.*//' config/toold/config.toml"),
        command_call("c", "truncate -s 0 config/toold/config.toml"),
        command_call("c", "rm -rf state/toold"),
        command_call("c", "rm config/toold/config.toml"),
        command_call("c", "mv state/toold/sessions work/moved"),
        command_call("c", "mv config/toold work/moved-config"),
        command_call("c", "echo x > run/toold/planted"),
        // Into a directory above toold's, whose copies land inside it.
        command_call("c", "cp -r work/evil/toold config/"),
        command_call("c", "cp -r work/evil/toold config"),
        command_call("c", "cp -rT work/evil config"),
        command_call("c", "rsync -a work/evil/ config/"),
        command_call("c", "cp -r work/evil/.git work/"),
        // A second name for toold's files, made and used in one line or kept for later.
        command_call("c", "cp -l config/toold/config.toml work/hard"),
        command_call("c", "ln config/toold/config.toml work/hard"),
        command_call(
            "c",
            &format!(
                "cp -s {} work/soft; echo '{planted_hook}' >> work/soft",
                config.display()
            ),
        ),
        command_call(
            "c",
            &format!(
                "ln -s {} work/dir; cat work/evil.toml >> work/dir/config.toml",
                root.join("config/toold").display()
            ),
        ),
        command_call("c", "rm -rf config"),
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
        let response = execute_one(
            &client,
            &session,
            command_call("c", "echo fine > work/fine.txt"),
        )
        .await;
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
    execute_one(&client, &session, command_call("c", "true")).await;
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
        command_call("c", &format!("echo x > {through_link}")),
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
        command_call("c", &format!("echo x > {in_moved_root}")),
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
    for call in [
        write("a.txt".to_owned()),
        command_call("c", "echo x > b.txt"),
    ] {
        let response = execute_one(&client, &session, call.clone()).await;
        assert_eq!(
            response["results"][0]["result"]["ok"], true,
            "{call}: {response}"
        );
    }
    assert!(base.join("real/a.txt").exists() && base.join("real/b.txt").exists());
}
