//! How bash reads a line, where it differs from the words the rules see: POSIX-shell and bash
//! readings, tilde forms, wrapper options, the `env` argument, values bash evaluates as code,
//! and relative paths after a `cd`.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{execute_one, no_effect, setup};
use toold_tests::daemon::command_call;

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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
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
        // The tilde prefix ends at a colon too: `~:m` is `$HOME:m`, beside the home directory.
        format!("echo x > ~:{marker}"),
        format!("echo x >~:{marker}"),
        format!("echo x > ~root:{marker}"),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    let markers = [
        PathBuf::from("/root").join(&marker),
        workspace.project.join(&marker),
        workspace.outside.join(&marker),
        daemon.root().join("home").join(&marker),
        daemon.root().join(format!("home:{marker}")),
        PathBuf::from(format!("/root:{marker}")),
    ];
    no_effect(&client, &session, &workspace, &calls, &markers).await;
    let _ = std::fs::remove_file(PathBuf::from("/root").join(&marker));
    let _ = std::fs::remove_file(format!("/root:{marker}"));
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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
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
        command_call(
            "c",
            &format!("for PATH in {}; do git status; done", bin.display()),
        ),
        command_call(
            "c",
            &format!("for PATH in {}; do true; done; git status", bin.display()),
        ),
        command_call(
            "c",
            &format!("for HOME in {}; do git status; done", home.display()),
        ),
        command_call(
            "c",
            &format!(
                "for XDG_CONFIG_HOME in {}; do git status; done",
                home.display()
            ),
        ),
        command_call(
            "c",
            &format!(
                "coproc PATH {{ true; }}; for PATH in {}; do git status; done",
                bin.display()
            ),
        ),
        command_call(
            "c",
            &format!(
                "for GIT_CONFIG_PARAMETERS in \"'core.fsmonitor'='{touch}'\"; do git status; done"
            ),
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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    no_effect(
        &client,
        &session,
        &workspace,
        &calls,
        &[workspace.outside.join("f")],
    )
    .await;
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
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[p]).await;
}

/// Code a shell or an interpreter reads from its input — a pipe, a redirection, a here-string
/// or here-document — is as hidden from the rules as `bash -c "$x"`: beside `deny
/// run_command(rm *)` it is denied even in bypass mode, and a here-string of known text is
/// looked into. Each runs under real bash; nothing may change.
#[tokio::test]
async fn code_read_from_the_input_hides_nothing_from_a_deny_rule() {
    let Some((_daemon, client, workspace, session)) = setup(
        "code_read_from_the_input_hides_nothing_from_a_deny_rule",
        "bypass",
    )
    .await
    else {
        return;
    };
    let script = workspace.outside.join("cmd");
    std::fs::write(&script, "rm -f keep.txt\n").unwrap();
    let script = script.display();
    let lines = [
        "bash <<< \"rm -f keep.txt\"".to_owned(),
        "bash <<EOF\nrm -f keep.txt\nEOF".to_owned(),
        "echo rm -f keep.txt | bash".to_owned(),
        "printf 'rm -f keep.txt' | sh -s".to_owned(),
        format!("sh -s < {script}"),
        format!("bash /dev/stdin < {script}"),
        "bash /dev/stdin <<< \"$(echo rm -f keep.txt)\"".to_owned(),
        format!("bash -s <<EOF\n$(cat {script})\nEOF"),
        "python3 - <<EOF\nimport os\nos.remove('keep.txt')\nEOF".to_owned(),
        "python3 <<< \"import os; os.remove('keep.txt')\"".to_owned(),
        "echo 'unlink \"keep.txt\"' | perl".to_owned(),
        "x='rm -f keep.txt'; bash -c \"$x\"".to_owned(),
        format!("source /dev/stdin < {script}"),
        "awk -f /dev/stdin <<< 'BEGIN { system(\"rm -f keep.txt\") }'".to_owned(),
        format!("env bash < {script}"),
        format!("cat {script} | timeout 5 bash"),
        format!("eval \"$(cat {script})\""),
        format!("busybox sh -s < {script}"),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[]).await;
    for line in &lines {
        let response = execute_one(&client, &session, command_call("c", line)).await;
        let result = &response["results"][0]["result"];
        assert_eq!(
            result["error_type"], "permission_denied",
            "{line}: {response}"
        );
    }
}
