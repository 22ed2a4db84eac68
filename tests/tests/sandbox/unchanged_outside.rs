//! Outside the places a command may write, nothing changes: not a file's contents or name, nor
//! its mode (set-uid included), owner, times or extended attributes — in every mode. Landlock
//! governs writes but not `chmod`, `chown` or `utimes`; the command's mount namespace shows
//! everything but its writable places read-only.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use toold_tests::daemon::TestDaemon;

use super::{Places, connected, quoted, run, sandboxed_on, session, without};

/// What a change to an entry would change: its mode, owner and group, size, and modification
/// and change times (a change of mode, owner, times or attributes moves the change time).
type Seen = (u32, u32, u32, u64, i64, i64, i64, i64);

/// Every entry under `dir`, `dir` included, with what [`Seen`] shows of it.
fn metadata_of(dir: &Path) -> BTreeMap<PathBuf, Seen> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let meta = std::fs::symlink_metadata(&current).unwrap();
        entries.insert(
            current.clone(),
            (
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
            ),
        );
        if meta.is_dir() {
            pending.extend(
                std::fs::read_dir(&current)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path()),
            );
        }
    }
    entries
}

/// What an attacker's program would try on a file and a directory outside: each line in a
/// script, out of the permission engine's sight, so that only the sandbox stands in the way.
fn attempts(file: &Path, dir: &Path, program: &Path) -> Vec<String> {
    let (file, dir, program) = (quoted(file), quoted(dir), quoted(program));
    vec![
        format!("chmod 777 {file}"),
        format!("chmod u+s,g+s {program}"),
        format!("chmod 000 {dir}"),
        format!("chown 1:1 {file}"),
        format!("chgrp 1 {file}"),
        format!("touch {file}"),
        format!("touch -a -d 2001-01-01 {file}"),
        format!("touch -m -d 2001-01-01 {dir}"),
        format!("python3 -c \"import os; os.utime({file}, (0, 0))\""),
        format!("python3 -c \"import os; os.setxattr({file}, 'user.planted', b'x')\""),
        format!("truncate -s 0 {file}"),
        format!("mv {file} {file}.moved"),
        format!("ln {file} {dir}/hard"),
        format!("ln -s {file} {dir}/soft"),
        format!("mkfifo {dir}/fifo"),
        format!("rm -f {file}"),
        format!("rmdir {dir}"),
    ]
}

#[tokio::test]
async fn nothing_outside_the_writable_places_changes_in_any_mode() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let file = places.outside.join("keep.txt");
    let dir = places.outside.join("dir");
    let program = places.outside.join("program");
    std::fs::write(&program, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let before = metadata_of(&places.outside);
    for mode in ["workspace_write", "read_only"] {
        let session = session(&client, &places.project, json!({"mode": mode})).await;
        for (index, line) in attempts(&file, &dir, &program).iter().enumerate() {
            let script = places.project.join(format!("{mode}-{index}.sh"));
            std::fs::write(&script, format!("{line}\n")).unwrap();
            let result = run(&client, &session, &format!("bash {}", quoted(&script))).await;
            assert_eq!(result["ok"], json!(false), "{mode}: {line}: {result}");
            assert_eq!(
                metadata_of(&places.outside),
                before,
                "{mode}: {line}: {result}"
            );
        }
    }
    // The root itself in `read_only`: the same holds there.
    let root_file = places.project.join("keep.txt");
    let inside_before = metadata_of(&root_file);
    let read_only = session(&client, &places.project, json!({"mode": "read_only"})).await;
    for line in ["chmod 777 keep.txt", "touch -d 2001-01-01 keep.txt"] {
        let result = run(&client, &read_only, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    assert_eq!(metadata_of(&root_file), inside_before);
    // Inside the root, in `workspace_write`, the same lines work.
    let writable = session(&client, &places.project, json!({})).await;
    let result = run(&client, &writable, "chmod 600 keep.txt && touch keep.txt").await;
    assert_eq!(result["ok"], json!(true), "{result}");
}

/// Where the mount API is missing (a kernel before 5.12), what Landlock cannot stop is not
/// stopped, and every result says so: `unchanged_outside` is degraded, with why.
#[tokio::test]
async fn without_the_mount_api_the_report_says_what_is_missing() {
    let daemon = TestDaemon::start_under_with_config(&without(&["--mount-api"]), "");
    let (client, places, session) = sandboxed_on(&daemon).await;
    let result = run(&client, &session, "echo x > inside.txt").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    let sandbox = &result["metadata"]["sandbox"];
    assert_eq!(
        sandbox["degraded"],
        json!(["unchanged_outside"]),
        "{result}"
    );
    let why = sandbox["why"]["unchanged_outside"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("not implemented"), "{result}");
    // The other layers still hold: a write outside is refused, a private `/tmp` is given.
    let outside = places.outside.join("new");
    let result = run(&client, &session, &format!("echo x > {}", quoted(&outside))).await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(!outside.exists());
}

/// A file system the host mounts while a command runs (a disk plugged in, an automount) does
/// not appear in the command's view writable: its mounts are private.
#[tokio::test]
async fn a_mount_made_while_a_command_runs_does_not_reach_it() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let mount_point = places.outside.join("mnt");
    std::fs::create_dir(&mount_point).unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let line = format!(
        "sleep 0.8; touch {}/planted; ls -A {}",
        quoted(&mount_point),
        quoted(&mount_point)
    );
    let running = run(&client, &session, &line);
    let mount = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&mount_point)
            .status()
            .unwrap();
        assert!(mounted.success());
    };
    let (result, ()) = tokio::join!(running, mount);
    let planted = mount_point.join("planted").exists();
    let _ = std::process::Command::new("umount")
        .arg(&mount_point)
        .status();
    assert!(!planted, "{result}");
    assert!(!mount_point.join("planted").exists(), "{result}");
}
