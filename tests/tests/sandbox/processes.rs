//! The processes of sandboxed commands: none outlives its call (with PID namespaces or the
//! sweep alone), each command has a PID namespace of its own, reaches no terminal, and a
//! process or shell in an odd state still ends with its call, or not before it.

use std::os::fd::AsRawFd;
use std::time::Duration;

use serde_json::json;
use toold_tests::daemon::{TestClient, TestDaemon};
use toold_tests::procs::live_processes_with;
use toold_tests::require;

use super::{
    Places, connected, output, run, sandbox_report, sandboxed, sandboxed_on, session, without,
};

/// The escapes a command's processes try — background, `setsid`, a double fork, `env -i`
/// (dropping the call's tag), all at once — leave nothing alive 2 s after the call ends,
/// whether it ended by itself or by its deadline.
#[tokio::test]
async fn no_process_of_a_sandboxed_command_outlives_its_call() {
    let (_daemon, client, _places, session) = sandboxed().await;
    assert_no_survivors(&client, &session, "pid_namespace").await;
}

/// Where PID namespaces cannot be made, the daemon's sweep alone still leaves no survivor.
#[tokio::test]
async fn without_pid_namespaces_the_sweep_leaves_no_survivor() {
    let daemon = TestDaemon::start_under_with_config(&without(&["--pid-namespaces"]), "");
    let report = sandbox_report(&daemon).await;
    assert_eq!(report["processes"], "sweep", "{report}");
    assert_eq!(report["daemon_socket"], "mount_namespace", "{report}");
    // Reported as missing, with why: the sweep ends leftovers, but a command sees the other
    // processes of the user.
    assert_eq!(report["degraded"], json!(["pid_namespace"]), "{report}");
    assert!(report["why"]["pid_namespace"].is_string(), "{report}");
    let (client, _places, session) = sandboxed_on(&daemon).await;
    assert_no_survivors(&client, &session, "sweep").await;
}

async fn assert_no_survivors(client: &TestClient, session: &str, tier: &str) {
    for (round, ending) in ["exit 0", "sleep 30"].iter().enumerate() {
        // Unique to this test process, tier, round and process: the tests of both tiers run
        // at once, and one must not take the other's processes for its own survivors.
        let tier_digit = u8::from(tier == "pid_namespace");
        let marker =
            |index: u32| format!("4000.{:08}{tier_digit}{round}{index}", std::process::id());
        let line = format!(
            "sleep {} & setsid sleep {} & (sleep {} &) ; (env -i setsid sh -c 'sleep {} &' &) ; \
             nohup sleep {} >/dev/null 2>&1 & sleep 0.3; {ending}",
            marker(1),
            marker(2),
            marker(3),
            marker(4),
            marker(5)
        );
        let response = client
            .request(
                "tools/execute",
                json!({"session_id": session, "calls": [{"id": "c", "name": "run_command",
                    "arguments": {"command": line, "timeout_ms": 2000}}]}),
            )
            .await
            .unwrap();
        let result = &response["results"][0]["result"];
        assert_eq!(result["metadata"]["sandbox"]["mode"], "workspace_write");
        let enforced = result["metadata"]["sandbox"]["enforced"]
            .as_array()
            .unwrap();
        assert_eq!(
            enforced.contains(&json!("pid_namespace")),
            tier == "pid_namespace",
            "{result}"
        );
        if round == 1 {
            assert_eq!(result["error_type"], "timeout", "{result}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        for index in 1..=5 {
            assert!(
                live_processes_with(&marker(index)).is_empty(),
                "{} outlived its call ({ending}, {tier})",
                marker(index)
            );
        }
    }
}

/// Each command runs in a PID namespace of its own: its `/proc` shows its own processes
/// alone (not the daemon, not another session's command), under the pids they know; and
/// signals work there as anywhere: the shell is not the namespace's init, so `kill $$`, `kill
/// -9 $$` and a program's signal to itself end it, and its exit code is the call's.
#[tokio::test]
async fn each_command_runs_in_a_pid_namespace_of_its_own() {
    let (daemon, client, _places, own) = sandboxed().await;
    let daemon_pid = daemon.pid().to_string();
    let listed = run(
        &client,
        &own,
        "echo $$; ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; ls /proc/1/ >/dev/null && \
         grep -c . /proc/$$/status >/dev/null && echo readable",
    )
    .await;
    assert_eq!(listed["ok"], json!(true), "{listed}");
    let printed = output(&listed);
    let mut lines = printed.lines();
    assert_eq!(lines.next(), Some("2"), "{listed}");
    let pids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    // The init, the shell, `ls`, `grep` and `tr`: nothing else, the daemon least of all.
    assert!(pids.len() <= 5, "{listed}");
    assert!(!pids.contains(&daemon_pid.as_str()), "{listed}");
    assert_eq!(lines.next(), Some("readable"), "{listed}");

    // Another session's running command is not there either.
    let neighbour = connected(&daemon).await;
    let elsewhere = Places::new();
    let other = session(&neighbour, &elsewhere.project, json!({})).await;
    let sleeper = tokio::spawn(async move {
        run(&neighbour, &other, "exec -a toold-pidns-neighbour sleep 30").await
    });
    let started = std::time::Instant::now();
    while live_processes_with("toold-pidns-neighbour").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the neighbour never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = run(&client, &own, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    assert!(!output(&seen).contains("toold-pidns-neighbour"), "{seen}");
    sleeper.abort();

    for (line, signal) in [
        ("kill $$; echo survived", 15),
        ("kill -9 $$; echo survived", 9),
        (
            "python3 -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'",
            15,
        ),
        ("sh -c 'kill -USR1 $$'", 10),
    ] {
        let result = run(&client, &own, line).await;
        assert_eq!(
            result["metadata"]["signal"],
            json!(signal),
            "{line}: {result}"
        );
        assert!(!output(&result).contains("survived"), "{line}: {result}");
    }
    let result = run(&client, &own, "exit 7").await;
    assert_eq!(result["metadata"]["exit_code"], json!(7), "{result}");
}

/// A command has no controlling terminal (it cannot type into, or read from, the terminal
/// the daemon was started from), and cannot read or write another terminal either.
#[tokio::test]
async fn commands_reach_no_terminal() {
    let (_daemon, client, _places, session) = sandboxed().await;
    // In a session of its own (led by the shell, or by its PID namespace's init, pid 1), with
    // no terminal: tty_nr (field 7 of stat) is 0.
    let stat = run(&client, &session, "cut -d' ' -f6,7 /proc/$$/stat; echo $$").await;
    let printed = output(&stat);
    let mut lines = printed.lines();
    let (session_id, tty) = lines.next().unwrap().split_once(' ').unwrap();
    assert_eq!(tty, "0", "{stat}");
    let shell = lines.next().unwrap();
    assert!(session_id == shell || session_id == "1", "{stat}");
    let tty = run(&client, &session, "exec 3<>/dev/tty && echo opened-tty").await;
    assert_eq!(tty["ok"], json!(false), "{tty}");

    // Another terminal of the same user: neither written nor read.
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    for line in [
        format!("echo injected > {}", slave.display()),
        format!("timeout 2 head -c 1 {}", slave.display()),
    ] {
        let result = run(&client, &session, &line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut buffer = [0u8; 64];
    let read = std::io::Read::read(&mut master, &mut buffer);
    assert!(
        !matches!(read, Ok(n) if n > 0),
        "the terminal got {:?}",
        read.map(|n| String::from_utf8_lossy(&buffer[..n]).into_owned())
    );
}

/// A process whose main thread exits while another thread runs shows as a zombie in /proc;
/// it is still alive, and still dies with its call (double-forked, in a session of its own).
#[tokio::test]
async fn a_process_whose_main_thread_exited_still_dies_with_its_call() {
    let (_daemon, client, places, session) = sandboxed().await;
    let beat = places.project.join("beat");
    let script = format!(
        "import ctypes, os, platform, threading, time\n\
         if os.fork() == 0:\n\
         \x20   os.setsid()\n\
         \x20   if os.fork() == 0:\n\
         \x20       def work():\n\
         \x20           while True:\n\
         \x20               open({beat:?}, 'w').write(str(time.time()))\n\
         \x20               time.sleep(0.05)\n\
         \x20       threading.Thread(target=work).start()\n\
         \x20       time.sleep(0.2)\n\
         \x20       ctypes.CDLL(None).syscall(60 if platform.machine() == 'x86_64' else 93, 0)\n\
         \x20   os._exit(0)\n",
        beat = beat.display().to_string()
    );
    std::fs::write(places.project.join("zombie_leader.py"), script).unwrap();
    let result = run(&client, &session, "python3 zombie_leader.py; sleep 0.5").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(beat.exists(), "the thread never ran: {result}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = std::fs::read_to_string(&beat).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_to_string(&beat).unwrap(),
        before,
        "the thread still runs after its call"
    );
}

/// A shell that makes itself its init's tracee (`PTRACE_TRACEME`) and stops has not ended:
/// the call is not reported as over (nor as stopped); it runs to its deadline.
#[tokio::test]
async fn a_shell_that_stops_as_its_init_s_tracee_has_not_ended() {
    let test = "a_shell_that_stops_as_its_init_s_tracee_has_not_ended";
    if require::program(test, "python3", &[], "apt-get install python3").is_none() {
        return;
    }
    let (_daemon, client, _places, session) = sandboxed().await;
    let line = "exec python3 -c 'import ctypes, os; ctypes.CDLL(None).ptrace(0, 0, 0, 0); \
                os.kill(os.getpid(), 15)'";
    let response = client
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [{"id": "c", "name": "run_command",
                "arguments": {"command": line, "timeout_ms": 1500}}]}),
        )
        .await
        .unwrap();
    let result = &response["results"][0]["result"];
    assert_eq!(result["error_type"], "timeout", "{result}");
}
