//! The sandbox a session gets and what the kernel enforces of it: a session may tighten the
//! config's sandbox and loosen it only when the config allows, `initialize` reports this
//! kernel's tier, and without Landlock `warn` says so and `refuse` does not run.

use serde_json::{Value, json};
use toold_tests::daemon::TestDaemon;

use super::{
    Places, connected, output, quoted, run, sandbox_report, sandboxed_on, session, without,
};

#[tokio::test]
async fn the_session_may_tighten_the_sandbox_and_loosen_it_only_when_the_config_allows() {
    let strict = TestDaemon::start_with_config(Some("[sandbox]\nnetwork = false\n"));
    let client = connected(&strict).await;
    let places = Places::new();
    let tight = client
        .request(
            "session/create",
            json!({"cwd": places.project, "sandbox": {"mode": "read_only"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        tight["sandbox"],
        json!({"mode": "read_only", "network": false})
    );
    for loose in [json!({"mode": "off"}), json!({"network": true})] {
        let refused = client
            .request(
                "session/create",
                json!({"cwd": places.project, "sandbox": loose}),
            )
            .await
            .unwrap_err();
        let text = format!("{refused:?}");
        assert!(
            text.contains("-32602") && text.contains("allow_unsandboxed"),
            "{text}"
        );
        let update = client
            .request(
                "session/update",
                json!({"session_id": tight["session_id"], "sandbox": loose}),
            )
            .await
            .unwrap_err();
        assert!(format!("{update:?}").contains("allow_unsandboxed"));
    }
    // Back to the config's own: allowed.
    let back = client
        .update_session(
            tight["session_id"].as_str().expect("a session id"),
            json!({"sandbox": {}}),
        )
        .await;
    assert_eq!(
        back["sandbox"],
        json!({"mode": "workspace_write", "network": false})
    );

    let lenient = TestDaemon::start_with_config(Some(
        "[sandbox]\nnetwork = false\nallow_unsandboxed = true\n",
    ));
    let client = connected(&lenient).await;
    let off = client
        .request(
            "session/create",
            json!({"cwd": places.project, "sandbox": {"mode": "off", "network": true},
                   "rules": {"allow": ["run_command"]}}),
        )
        .await
        .unwrap();
    assert_eq!(off["sandbox"], json!({"mode": "off", "network": true}));
    let result = run(&client, off["session_id"].as_str().unwrap(), "true").await;
    assert_eq!(
        result["metadata"]["sandbox"],
        json!({"mode": "off", "network": true, "enforced": [], "degraded": []})
    );
}

#[tokio::test]
async fn initialize_reports_what_this_kernel_enforces() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let result = client
        .request("initialize", json!({"protocol_version": 1}))
        .await;
    // Already initialized: a fresh connection asks.
    assert!(result.is_err());
    let report = &sandbox_report(&daemon).await;
    assert_eq!(report["fs"], true, "{report}");
    assert_eq!(report["network"], true, "{report}");
    assert_eq!(report["daemon_socket"], "mount_namespace", "{report}");
    assert_eq!(report["processes"], "pid_namespace", "{report}");
    assert_eq!(report["degraded"], json!([]), "{report}");
    assert!(report["landlock_abi"].as_u64().unwrap() >= 6, "{report}");
}

/// Without Landlock, `warn` runs the command and says what was not enforced (the mount
/// namespace's read-only mounts still keep its writes inside); `refuse` does not run it at all.
#[tokio::test]
async fn without_landlock_warn_says_so_and_refuse_does_not_run() {
    let places = Places::new();
    let marker = places.outside.join("ran");
    let ran = places.project.join("ran");
    let line = format!("echo x > {}; echo x > {}", quoted(&ran), quoted(&marker));

    let warn = TestDaemon::start_under_with_config(&without(&["--landlock"]), "");
    let client = connected(&warn).await;
    let session_id = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session_id, &line).await;
    let sandbox = &result["metadata"]["sandbox"];
    assert_eq!(
        sandbox["degraded"],
        json!(["filesystem", "signals"]),
        "{result}"
    );
    assert!(
        sandbox["why"]["filesystem"]
            .as_str()
            .is_some_and(|why| !why.is_empty()),
        "{result}"
    );
    // Honest: Landlock did not confine it, and the result said so; the read-only mounts
    // still kept the write outside from happening.
    assert!(ran.exists(), "{result}");
    assert!(!marker.exists(), "{result}");
    std::fs::remove_file(&ran).unwrap();
    // The daemon's socket is still out of reach (mount namespace and peer check).
    let reach = run(
        &client,
        &session_id,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')\"",
            warn.socket().display()
        ),
    )
    .await;
    assert_eq!(reach["ok"], json!(false), "{reach}");

    // Without Landlock to forbid unmounting, the namespace's mounts still hold: not even a
    // command run as root keeps the capability to remove them.
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    // In a script, which the permission engine cannot read (a line naming `.git` would not
    // even run): only the sandbox stands in the way.
    std::fs::write(
        places.project.join("unmount.sh"),
        "umount .git/config; umount -l .git/config; umount .git/hooks\n\
         echo x >> .git/config; touch .git/hooks/pre-commit\n",
    )
    .unwrap();
    let session_id = session(&client, &places.project, json!({})).await;
    let unmounted = run(&client, &session_id, "bash unmount.sh").await;
    assert_eq!(unmounted["ok"], json!(false), "{unmounted}");
    assert_eq!(
        std::fs::read_to_string(places.project.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!places.project.join(".git/hooks/pre-commit").exists());

    let refuse = TestDaemon::start_under_with_config(
        &without(&["--landlock"]),
        "[sandbox]\non_unsupported = \"refuse\"\n",
    );
    let client = connected(&refuse).await;
    let session_id = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session_id, &line).await;
    assert_eq!(result["error_type"], "sandbox_unavailable", "{result}");
    let message = result["error"].as_str().unwrap();
    assert!(
        message.contains("filesystem") && message.contains("refuse"),
        "{message}"
    );
    assert!(!ran.exists() && !marker.exists(), "the refused command ran");
    let report = sandbox_report(&refuse).await;
    assert_eq!(report["fs"], false, "{report}");
    assert_eq!(report["landlock_abi"], Value::Null, "{report}");
}

/// Where temp files go does not decide what the sandbox can do: with `$TMPDIR` inside the
/// runtime directory (which commands must not reach), every layer still works, and the
/// runtime directory is still hidden.
#[tokio::test]
async fn a_tmpdir_inside_the_runtime_directory_changes_nothing() {
    let runtime = tempfile::tempdir_in(super::outside_base()).unwrap();
    let runtime_dir = runtime.path().canonicalize().unwrap();
    let tmpdir = runtime_dir.join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    std::fs::write(
        runtime_dir.join("bus"),
        "a service's socket would be here\n",
    )
    .unwrap();
    let daemon = TestDaemon::start_with_env(&[
        ("XDG_RUNTIME_DIR", runtime_dir.to_str().unwrap()),
        ("TMPDIR", tmpdir.to_str().unwrap()),
    ]);
    let report = sandbox_report(&daemon).await;
    assert_eq!(report["degraded"], json!([]), "{report}");
    assert_eq!(report["daemon_socket"], "mount_namespace", "{report}");
    assert_eq!(report["processes"], "pid_namespace", "{report}");
    let (client, _places, session) = sandboxed_on(&daemon).await;
    let result = run(
        &client,
        &session,
        &format!(
            "ls -A {}; cat {}/bus",
            quoted(&runtime_dir),
            quoted(&runtime_dir)
        ),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(
        !output(&result).contains("socket would be here"),
        "{result}"
    );
    let enforced = result["metadata"]["sandbox"]["enforced"]
        .as_array()
        .unwrap();
    for layer in [
        "mount_namespace",
        "pid_namespace",
        "local_services",
        "private_tmp",
    ] {
        assert!(enforced.contains(&json!(layer)), "{layer}: {result}");
    }
}

/// The daemon as an unprivileged user (the tests otherwise run as root, whose capabilities
/// hide what a user's daemon cannot do): every protection is enforced there too — a
/// non-dumpable daemon's children may still have their uid maps written, and its commands'
/// socket calls are still decided.
#[tokio::test]
async fn an_unprivileged_daemon_enforces_every_protection() {
    let test = "an_unprivileged_daemon_enforces_every_protection";
    let Some(setpriv) =
        toold_tests::require::program(test, "setpriv", &[], "apt-get install util-linux")
    else {
        return;
    };
    if !nix::unistd::geteuid().is_root() {
        // Already unprivileged: every other test runs so.
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir_in(super::outside_base()).unwrap();
    let base = dir.path().canonicalize().unwrap();
    let binary = base.join("toold");
    std::fs::copy(toold_tests::daemon::toold_binary(), &binary).unwrap();
    for sub in ["run", "state", "config", "home", "project"] {
        std::fs::create_dir(base.join(sub)).unwrap();
    }
    std::fs::write(
        base.join("project/own.py"),
        "import os, socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('own.sock')\ns.listen(1)\n\
         if os.fork() == 0:\n    c, _ = s.accept(); c.sendall(c.recv(8).upper()); os._exit(0)\n\
         c = socket.socket(socket.AF_UNIX)\nc.connect('own.sock')\nc.sendall(b'own')\nprint(c.recv(8).decode())\n",
    )
    .unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(&base)
        .status()
        .unwrap();
    assert!(chown.success());
    let as_nobody = |args: &[&str]| {
        let mut command = std::process::Command::new(&setpriv);
        command
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
            ])
            .arg(&binary)
            .args(args)
            .current_dir(base.join("project"))
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", base.join("home"))
            .env("XDG_RUNTIME_DIR", base.join("run"))
            .env("XDG_STATE_HOME", base.join("state"))
            .env("XDG_CONFIG_HOME", base.join("config"));
        command
    };
    let mut daemon = as_nobody(&["serve"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let socket = base.join("run/toold/toold.sock");
    for _ in 0..500 {
        if socket.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let call = as_nobody(&[
        "call",
        "--json",
        "--yes",
        "run_command",
        r#"{"command": "python3 own.py"}"#,
    ])
    .output()
    .unwrap();
    let _ = daemon.kill();
    let _ = daemon.wait();
    let printed = String::from_utf8_lossy(&call.stdout);
    let result: Value = serde_json::from_str(&printed)
        .unwrap_or_else(|_| panic!("{printed} {}", String::from_utf8_lossy(&call.stderr)));
    assert_eq!(result["ok"], json!(true), "{result}");
    assert_eq!(result["content"], "OWN\n", "{result}");
    assert_eq!(
        result["metadata"]["sandbox"]["degraded"],
        json!([]),
        "{result}"
    );
}
