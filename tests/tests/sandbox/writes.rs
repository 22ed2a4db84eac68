//! What a command of each mode may write: inside the roots and the temp directories only
//! (`workspace_write`), nothing but its private temp directory (`read_only`), what a denied
//! write says, and roots swapped for a symlink or moved aside between commands.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use toold_tests::daemon::TestDaemon;
use toold_tests::require;

use super::{Places, connected, output, outside_base, quoted, run, sandboxed, session};

#[tokio::test]
async fn workspace_write_keeps_every_write_inside_the_roots_and_temp_dirs() {
    let Some(git) = require::program(
        "workspace_write_keeps_every_write_inside_the_roots_and_temp_dirs",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let (_daemon, client, places, session) = sandboxed().await;
    let out = quoted(&places.outside);
    let link = quoted(&places.project.join("link"));
    let before = Places::snapshot(&places.outside);

    let attempts = [
        format!("echo x > {out}/new"),
        format!("echo x >> {out}/keep.txt"),
        format!(": > {out}/keep.txt"),
        format!("truncate -s 0 {out}/keep.txt"),
        format!("mkdir {out}/made"),
        format!("rm {out}/keep.txt"),
        format!("rmdir {out}/dir"),
        format!("mv {out}/keep.txt {out}/moved.txt"),
        format!("mv {out}/keep.txt ./stolen.txt"),
        format!("ln -s /etc/passwd {out}/symlink"),
        format!("echo x > {link}/through-link"),
        format!("rm {link}/keep.txt"),
        format!(
            "python3 -c \"open('{}/py', 'w').write('x')\"",
            places.outside.display()
        ),
        // A background child in its own session, waited for, and one left behind.
        format!("setsid -w bash -c 'echo x > {out}/setsid'"),
        format!("(setsid bash -c 'echo x > {out}/detached' &); sleep 0.5"),
        // Another namespace of its own changes nothing.
        format!("unshare -r bash -c 'echo x > {out}/unshared'"),
    ];
    let mut effects = Vec::new();
    for line in &attempts {
        let result = run(&client, &session, line).await;
        // The detached child's failure is not its shell's: only the effect tells.
        if result["ok"] == json!(true) && !line.contains("detached") {
            effects.push(format!("{line} succeeded: {result}"));
        }
        assert_eq!(result["metadata"]["sandbox"]["mode"], "workspace_write");
    }
    assert!(effects.is_empty(), "{effects:#?}");
    // The detached one had its time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(Places::snapshot(&places.outside), before);

    // Inside the root, in the temp directories and /dev/null: every kind of write works.
    let inside = run(
        &client,
        &session,
        "echo hi > a.txt && mkdir -p sub/deeper && mv a.txt sub/ && : > keep.txt && rm -r sub \
         && f=$(mktemp) && echo x > \"$f\" && rm \"$f\" && echo x > /tmp/toold-sandbox-$$ \
         && rm /tmp/toold-sandbox-$$ && echo x > /dev/shm/toold-sandbox-$$ \
         && rm /dev/shm/toold-sandbox-$$ && echo x > /dev/null && echo done",
    )
    .await;
    assert_eq!(inside["ok"], json!(true), "{inside}");
    assert_eq!(output(&inside), "done\n");
    // Reads anywhere.
    let read = run(
        &client,
        &session,
        &format!("cat {out}/keep.txt /etc/hostname"),
    )
    .await;
    assert_eq!(read["ok"], json!(true), "{read}");
    assert!(output(&read).starts_with("kept\n"), "{read}");
    // A repository made and committed to inside the root.
    let git = git.display();
    let git_line = format!(
        "{git} init -q repo && cd repo && echo x > f && {git} add f && \
         {git} -c user.name=t -c user.email=t@t commit -qm first && {git} log --oneline | wc -l"
    );
    let committed = run(&client, &session, &git_line).await;
    assert_eq!(committed["ok"], json!(true), "{committed}");
    assert_eq!(output(&committed).trim(), "1");
}

#[tokio::test]
async fn a_denied_write_says_so_and_names_where_commands_may_write() {
    let (_daemon, client, places, session) = sandboxed().await;
    let result = run(
        &client,
        &session,
        &format!("echo x > {}/new", quoted(&places.outside)),
    )
    .await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    let sandbox = &result["metadata"]["sandbox"];
    assert_eq!(sandbox["likely_denied"], true, "{result}");
    let hint = sandbox["hint"].as_str().unwrap();
    assert!(
        hint.contains(&places.project.display().to_string()),
        "{hint}"
    );
    assert!(hint.contains("/tmp") && hint.contains("writable"), "{hint}");
    assert!(result["error"].as_str().unwrap().contains(hint), "{result}");
    assert_eq!(sandbox["degraded"], json!([]), "{result}");
    // A failure that is not a denial carries no such claim.
    let plain = run(&client, &session, "exit 3").await;
    assert_eq!(plain["metadata"]["sandbox"].get("likely_denied"), None);
}

/// `read_only`: nothing changes anywhere but the call's own `/tmp` and `/dev/shm`, which go
/// with the call; the host's are never touched.
#[tokio::test]
async fn read_only_allows_no_write_but_its_private_temp_dir() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({"mode": "read_only"})).await;
    let before = Places::snapshot(&places.project);
    for line in [
        "echo x > new.txt",
        "echo x >> keep.txt",
        ": > keep.txt",
        "rm keep.txt",
        "mkdir made",
        "chmod 777 keep.txt",
        "touch -d 2001-01-01 keep.txt",
    ] {
        let result = run(&client, &session, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert_eq!(result["metadata"]["sandbox"]["mode"], "read_only");
    }
    assert_eq!(Places::snapshot(&places.project), before);
    let name = format!("toold-read-only-{}", std::process::id());
    let private = run(
        &client,
        &session,
        &format!(
            "echo x > /tmp/{name} && echo z > /dev/shm/{name} && cat /tmp/{name} && \
             echo y > /dev/null && cat keep.txt && echo $TMPDIR"
        ),
    )
    .await;
    assert_eq!(private["ok"], json!(true), "{private}");
    let printed = output(&private);
    assert_eq!(printed, "x\nkept\n/tmp\n", "{private}");
    for host in ["/tmp", "/dev/shm"] {
        assert!(
            !Path::new(host).join(&name).exists(),
            "written to the host's {host}"
        );
    }
    // Private to the call: gone once it ended.
    let again = run(&client, &session, &format!("cat /tmp/{name}")).await;
    assert_eq!(again["ok"], json!(false), "{again}");
}

/// A small Rust project made and built inside the root, with the user's own toolchain: a
/// build writes only its target directory (and the temp directories).
#[tokio::test]
async fn cargo_new_and_an_offline_build_work_inside_the_root() {
    let Some(cargo) = require::program(
        "cargo_new_and_an_offline_build_work_inside_the_root",
        "cargo",
        &[],
        "install Rust with rustup",
    ) else {
        return;
    };
    let (_daemon, client, _places, session) = sandboxed().await;
    let cargo = cargo.display();
    let result = run(
        &client,
        &session,
        &format!(
            "{cargo} new -q --vcs none hello && cd hello && {cargo} build -q --offline && ./target/debug/hello"
        ),
    )
    .await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert_eq!(output(&result), "Hello, world!\n");
}

/// A root under `/tmp`: a command cannot move it (it is a mount point in the command's view,
/// where `/tmp` is the session's own). Swapped for a symlink to a directory outside by someone
/// else, the commands after it do not run at all (what is shown must be what was planned: no
/// symlink is followed to the root), so the outside stays unchanged.
#[tokio::test]
async fn a_root_swapped_for_a_symlink_sends_no_later_write_outside() {
    let (_daemon, client, places, session) = sandboxed().await;
    let root = quoted(&places.project);
    let moved = format!("'{}.moved'", places.project.display());
    let swap = run(
        &client,
        &session,
        &format!(
            "cd / && mv {root} {moved} && ln -s {} {root}",
            quoted(&places.outside)
        ),
    )
    .await;
    assert_eq!(swap["ok"], json!(false), "{swap}");
    assert!(places.project.is_dir() && !places.project.is_symlink());
    // Done from outside the sandbox, the swap succeeds; what follows must not write there.
    std::fs::rename(
        &places.project,
        format!("{}.moved", places.project.display()),
    )
    .unwrap();
    std::os::unix::fs::symlink(&places.outside, &places.project).unwrap();
    let before = Places::snapshot(&places.outside);
    for attempt in 0..3 {
        let result = run(
            &client,
            &session,
            &format!("echo x > {root}/written-{attempt}; echo y > written-here-{attempt}"),
        )
        .await;
        assert_eq!(result["ok"], json!(false), "{result}");
    }
    assert_eq!(Places::snapshot(&places.outside), before);
    // Put back, so that the project's temp directory is removed whole.
    std::fs::remove_file(&places.project).unwrap();
    std::fs::rename(
        format!("{}.moved", places.project.display()),
        &places.project,
    )
    .unwrap();
}

/// A root moved aside and made anew between two commands of the same sandbox: the next
/// command writes the new directory, and not the old one, wherever it went (a ruleset built
/// ahead holds to the directory it was built for).
#[tokio::test]
async fn a_root_moved_aside_and_made_anew_is_the_one_written() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let base = tempfile::tempdir_in(outside_base()).unwrap();
    let project = base.path().canonicalize().unwrap().join("project");
    let aside = project.with_file_name("aside");
    std::fs::create_dir(&project).unwrap();
    let first = session(&client, &project, json!({})).await;
    let result = run(&client, &first, "touch before").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    std::fs::rename(&project, &aside).unwrap();
    std::fs::create_dir(&project).unwrap();
    let second = session(&client, &project, json!({})).await;
    let result = run(&client, &second, "touch after").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(project.join("after").exists());
    let result = run(
        &client,
        &second,
        &format!("touch {}", quoted(&aside.join("planted"))),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(!aside.join("planted").exists());
}
