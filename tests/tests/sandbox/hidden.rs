//! What a sandboxed command cannot read at all: the credential stores of the user's home (by
//! default; `[sandbox] hidden` changes the list) and what the session's `read_file` deny rules
//! cover — however it goes about it.

use std::path::Path;

use serde_json::json;
use toold_tests::daemon::TestDaemon;

use super::{Places, connected, output, outside_base, quoted, run, sandboxed, sandboxed_on};

/// A home outside `/tmp` (a command's `/tmp` is its session's own) with a secret in each of
/// some credential stores; the secrets all hold `SECRET`.
fn home_with_secrets() -> tempfile::TempDir {
    let home = tempfile::tempdir_in(outside_base()).unwrap();
    for (file, secret) in [
        (".ssh/id_ed25519", "SECRET ssh key"),
        (".aws/credentials", "SECRET aws"),
        (".netrc", "machine example.com password SECRET"),
        (".docker/config.json", "{\"auths\": \"SECRET\"}"),
        (".config/gh/hosts.yml", "oauth_token: SECRET"),
        (".kube/config", "token: SECRET"),
    ] {
        let path = home.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{secret}\n")).unwrap();
    }
    home
}

#[tokio::test]
async fn credential_stores_and_denied_files_cannot_be_read() {
    let home = home_with_secrets();
    let home_path = home.path().canonicalize().unwrap();
    let daemon = TestDaemon::start_with_env(&[("HOME", home_path.to_str().unwrap())]);
    let client = connected(&daemon).await;
    let places = Places::new();
    for (file, secret) in [
        (".env", "TOKEN=SECRET"),
        ("app/.env", "TOKEN=SECRET"),
        ("secrets/deploy.key", "SECRET key"),
    ] {
        let path = places.project.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{secret}\n")).unwrap();
    }
    let session = client
        .create_session(
            &places.project,
            json!({"rules": {"allow": ["run_command"],
                "deny": ["read_file(.env)", "read_file(secrets/**)"]}}),
        )
        .await;
    let home_quoted = quoted(&home_path);
    for line in [
        "cat ~/.ssh/id_ed25519".to_owned(),
        "cat \"$HOME/.aws/credentials\" ~/.netrc ~/.docker/config.json".to_owned(),
        "cat ~/.config/gh/hosts.yml ~/.kube/config".to_owned(),
        format!("cat /proc/self/root{}/.ssh/id_ed25519", home_path.display()),
        format!("ln -s {home_quoted}/.ssh ssh-link && cat ssh-link/*"),
        format!("cp -r {home_quoted}/.ssh stolen && cat stolen/*"),
        format!("tar -C {home_quoted} -cf - .ssh .aws | tar -xOf -"),
        "python3 -c \"import os; print(open(os.path.expanduser('~/.ssh/id_ed25519')).read())\""
            .to_owned(),
        "cat .env app/.env secrets/deploy.key".to_owned(),
        "grep -r SECRET . ; find . -name '*.env' -exec cat {} +".to_owned(),
        "git init -q copy && cp -r secrets copy/ && cat copy/secrets/*".to_owned(),
    ] {
        let result = run(&client, &session, &line).await;
        assert!(!output(&result).contains("SECRET"), "{line}: {result}");
        assert!(
            !result["error"]
                .as_str()
                .unwrap_or_default()
                .contains("SECRET"),
            "{line}: {result}"
        );
    }
    // Nothing was copied out either.
    let result = run(
        &client,
        &session,
        "grep -rl SECRET stolen copy 2>/dev/null; true",
    )
    .await;
    assert_eq!(output(&result), "", "{result}");
    // The result names what was hidden.
    let hidden = result["metadata"]["sandbox"]["hidden"]
        .as_array()
        .unwrap()
        .clone();
    for path in [
        home_path.join(".ssh"),
        places.project.join(".env"),
        places.project.join("app/.env"),
        places.project.join("secrets"),
    ] {
        assert!(hidden.contains(&json!(path)), "{path:?} in {hidden:?}");
    }
    // Nor toold's own state: every session's rules and environment, the audit log, the other
    // sessions' `/tmp`.
    let state = daemon.root().join("state/toold");
    assert!(state.join("sessions").is_dir());
    let result = run(
        &client,
        &session,
        &format!(
            "ls -A {0}; cat {0}/sessions/*.json {0}/audit.jsonl",
            quoted(&state)
        ),
    )
    .await;
    assert!(!output(&result).contains(&session), "{result}");
    // What is not secret stays readable.
    let result = run(
        &client,
        &session,
        "ls ~ && echo fine > notes.txt && cat notes.txt",
    )
    .await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(output(&result).ends_with("fine\n"), "{result}");
}

/// `[sandbox] hidden` replaces the default list: a user who needs `~/.ssh` for `git push` over
/// SSH can show it again, and hide something else instead.
#[tokio::test]
async fn the_config_chooses_what_is_hidden() {
    let home = home_with_secrets();
    let home_path = home.path().canonicalize().unwrap();
    std::fs::write(home_path.join("private.txt"), "SECRET private\n").unwrap();
    let config = "[sandbox]\nhidden = [\"~/private.txt\", \"~/.aws\"]\n";
    let daemon =
        TestDaemon::start_with_config_and_env(config, &[("HOME", home_path.to_str().unwrap())]);
    let (client, _places, session) = sandboxed_on(&daemon).await;
    let shown = run(&client, &session, "cat ~/.ssh/id_ed25519").await;
    assert_eq!(output(&shown), "SECRET ssh key\n", "{shown}");
    for line in ["cat ~/private.txt", "cat ~/.aws/credentials"] {
        let result = run(&client, &session, line).await;
        assert!(!output(&result).contains("SECRET"), "{line}: {result}");
    }
    assert!(Path::new(&home_path).join("private.txt").exists());
}

/// The kernel's keyrings are not the command's: a key in the daemon's session keyring (an SSH
/// or a disk's key put there by a login) cannot be read or added to.
#[tokio::test]
async fn the_keyrings_are_out_of_reach() {
    let (_daemon, client, places, session) = sandboxed().await;
    let script = "import ctypes\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        KEY_SPEC_SESSION_KEYRING = -3\n\
        r = libc.syscall(248, b'user', b'toold-test', b'SECRET', 6, KEY_SPEC_SESSION_KEYRING)\n\
        print('add_key', r, ctypes.get_errno())\n\
        r = libc.syscall(250, 0, KEY_SPEC_SESSION_KEYRING, 0)\n\
        print('keyctl', r, ctypes.get_errno())\n";
    std::fs::write(places.project.join("keys.py"), script).unwrap();
    let result = run(&client, &session, "python3 keys.py").await;
    // x86_64's numbers (add_key 248, keyctl 250); elsewhere the calls fail anyway.
    if cfg!(target_arch = "x86_64") {
        assert_eq!(output(&result), "add_key -1 13\nkeyctl -1 13\n", "{result}");
    }
}
