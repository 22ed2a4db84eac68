//! The processes of commands and of the daemon: none outlives its call, none reads or traces the
//! daemon or its parser workers, none inherits a descriptor the daemon was given.

use std::time::Duration;

use serde_json::json;
use toold_tests::daemon::{TestDaemon, command_call, no_answers};
use toold_tests::require;

use super::{SECRET, execute_one, session_with, setup, shown};

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
        execute_one(&client, &session, command_call("c", line)).await;
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
    execute_one(&client, &session, command_call("c", &chain)).await;
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
    execute_one(&client, &session, command_call("c", "true")).await;
    let workers = toold_tests::procs::children_running(daemon.pid(), "__shell-parser-worker");
    assert!(!workers.is_empty(), "no parser worker found");
    for pid in std::iter::once(daemon.pid()).chain(workers) {
        for what in ["environ", "mem", "fd", "maps", "auxv"] {
            let line = format!(
                "cat /proc/{pid}/{what} | od -c | head -c 100000; ls -l /proc/{pid}/{what}; \
                 cat /proc/{pid}/{what} | tr '\\0' ' '"
            );
            let response = execute_one(&client, &session, command_call("c", &line)).await;
            let text = shown(&response);
            assert!(!text.contains(SECRET), "{line}: {text}");
            assert!(!text.contains("toold.sock"), "{line}: {text}");
            if what == "environ" {
                assert!(text.contains("Permission denied"), "{line}: {text}");
            }
        }
    }
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
        command_call("c", "ls /proc/self/fd; ls /proc/$$/fd"),
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
    for worker in toold_tests::procs::shell_parser_workers(daemon.pid()) {
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
