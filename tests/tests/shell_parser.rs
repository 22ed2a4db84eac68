//! The shell parser behind its process boundary (`shell::isolated`): workers started from the
//! real `toold` binary analyse lines exactly as the in-process analysis does, a worker that
//! dies is replaced, a line that outlives its deadline is unreadable and its worker killed, a
//! worker that ends or cannot start leaves its line unreadable, no more workers run than the
//! cap, and workers die with their parser and with a daemon killed mid-parse.

use std::time::{Duration, Instant};

use serde_json::json;
use toold::shell;
use toold::shell::isolated::{DEFAULT_DEADLINE, MAX_WORKERS, ShellParser};
use toold_tests::daemon::{TestDaemon, no_answers, toold_binary};
use toold_tests::procs::{process_alive, send_signal, shell_parser_workers};

fn parser(deadline: Duration) -> ShellParser {
    ShellParser::new(toold_binary(), deadline)
}

/// The live parser workers of this process.
fn workers() -> Vec<u32> {
    shell_parser_workers(std::process::id())
}

/// Held by every test that starts workers in this process, from before its parser starts until
/// its end. `cargo test` runs a binary's tests as threads of one process, so the workers counted
/// by this process's pid would otherwise include a neighbour's; the lock runs these tests one
/// at a time (under nextest each test is a process of its own anyway).
static ONE_PARSER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes [`ONE_PARSER_AT_A_TIME`] and waits until the workers of the test before, killed when
/// its parser was dropped, are gone: the test then sees its own workers only.
async fn alone_with_our_workers() -> tokio::sync::MutexGuard<'static, ()> {
    let guard = ONE_PARSER_AT_A_TIME.lock().await;
    wait_for_workers(0).await;
    guard
}

/// Waits (at most 5 s) until this process has `expected` live workers.
async fn wait_for_workers(expected: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while workers().len() != expected {
        assert!(
            Instant::now() < deadline,
            "expected {expected} workers, found {:?}",
            workers()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn workers_analyse_lines_as_the_daemon_s_own_code_does() {
    let _alone = alone_with_our_workers().await;
    let parser = parser(DEFAULT_DEADLINE);
    let long = format!("echo {}", "x".repeat(70 * 1024));
    let lines = [
        "git status",
        "cd src && FOO=1 timeout 30 cargo test 2>&1 | tee ../log; echo \"$(date)\" > out.txt",
        "sh -c 'rm -rf / && eval \"curl x | sh\"'",
        "find . -name '*.o' -exec rm {} +",
        "cat <<EOF\n$(whoami)\nEOF",
        "echo 'unterminated",
        "i 3337333333333>>",
        "echo héllo wörld ✓",
        "",
        long.as_str(),
    ];
    for line in lines {
        assert_eq!(
            parser.analyze("tests", line).await,
            shell::analyze(line),
            "{line:?}"
        );
    }
}

#[tokio::test]
async fn a_worker_that_died_while_idle_is_replaced_without_losing_the_line() {
    let _alone = alone_with_our_workers().await;
    let parser = parser(DEFAULT_DEADLINE);
    assert!(parser.analyze("tests", "true").await.unreadable.is_none());
    let started = workers();
    assert_eq!(started.len(), 1, "{started:?}");
    send_signal(started[0], nix::sys::signal::Signal::SIGKILL);
    wait_for_workers(0).await;
    let analysis = parser.analyze("tests", "git status").await;
    assert_eq!(analysis, shell::analyze("git status"));
    let replaced = workers();
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_workers_run_than_the_cap() {
    let _alone = alone_with_our_workers().await;
    let parser = std::sync::Arc::new(parser(DEFAULT_DEADLINE));
    let tasks: Vec<_> = (0..32)
        .map(|n| {
            let parser = parser.clone();
            tokio::spawn(async move {
                let line = format!("echo {n} | grep {n} && sh -c 'ls -la {n}'");
                let owner = format!("session_{}", n % 8);
                (parser.analyze(&owner, &line).await, shell::analyze(&line))
            })
        })
        .collect();
    let mut most = 0;
    for task in tasks {
        most = most.max(workers().len());
        let (isolated, here) = task.await.unwrap();
        assert_eq!(isolated, here);
    }
    let running = workers().len();
    assert!(
        (1..=MAX_WORKERS).contains(&running) && most <= MAX_WORKERS,
        "{running} workers now, {most} at most, cap {MAX_WORKERS}"
    );
}

#[tokio::test]
async fn workers_end_with_their_parser() {
    let _alone = alone_with_our_workers().await;
    let parser = parser(DEFAULT_DEADLINE);
    parser.analyze("tests", "true").await;
    assert_eq!(workers().len(), 1);
    drop(parser);
    wait_for_workers(0).await;
}

/// The reason a line is unreadable when its worker missed the deadline.
fn late(deadline: Duration) -> String {
    format!(
        "the shell parser did not finish within {} ms",
        deadline.as_millis()
    )
}

/// A worker that stops answering (stopped with SIGSTOP here; a line the parser loops on does
/// the same) costs its line the deadline, no more: the line is unreadable, the worker is
/// killed, and the next line gets a fresh one.
#[tokio::test]
async fn a_worker_that_misses_the_deadline_is_killed_and_its_line_is_unreadable() {
    let _alone = alone_with_our_workers().await;
    let deadline = Duration::from_millis(300);
    let parser = parser(deadline);
    parser.analyze("tests", "true").await;
    let stuck = workers();
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    send_signal(stuck[0], nix::sys::signal::Signal::SIGSTOP);

    let started = Instant::now();
    let analysis = parser.analyze("tests", "git status").await;
    let waited = started.elapsed();
    assert_eq!(analysis.unreadable, Some(late(deadline)));
    assert!(analysis.commands.is_empty(), "{analysis:?}");
    assert!(
        waited >= deadline && waited < deadline + Duration::from_secs(2),
        "answered after {waited:?}"
    );
    wait_for_workers(0).await;

    // The line is remembered: it is unreadable at once, without a worker.
    let started = Instant::now();
    let again = parser.analyze("tests", "git status").await;
    assert!(started.elapsed() < deadline, "{:?}", started.elapsed());
    let reason = again.unreadable.expect("remembered as unreadable");
    assert!(reason.starts_with(&late(deadline)), "{reason}");
    assert!(workers().is_empty());
    // The next line gets a fresh worker.
    assert_eq!(
        parser.analyze("tests", "git log").await,
        shell::analyze("git log")
    );
    assert_eq!(workers().len(), 1);
}

/// Workers die with the daemon, even when it is killed with SIGKILL in the middle of a parse
/// (the worker asked the kernel for SIGKILL when its parent dies).
#[tokio::test]
async fn workers_die_with_a_killed_daemon_even_mid_parse() {
    let mut daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session_id = client
        .create_session(&daemon.work(), json!({"rules": {"allow": ["run_command"]}}))
        .await;
    client
        .request(
            "tools/execute",
            json!({"session_id": session_id, "calls": [
                {"id": "a", "name": "run_command", "arguments": {"command": "true"}}
            ]}),
        )
        .await
        .unwrap();
    let parsers = shell_parser_workers(daemon.pid());
    assert_eq!(parsers.len(), 1, "{parsers:?}");
    // Stopped, the worker cannot notice its stdin closing: only the death signal ends it.
    send_signal(parsers[0], nix::sys::signal::Signal::SIGSTOP);
    daemon.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(parsers[0]) {
        assert!(Instant::now() < deadline, "the worker outlived the daemon");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker that ends without answering (here a program that is no parser at all), or one that
/// cannot start, leaves its line unreadable with the reason.
#[tokio::test]
async fn a_worker_that_ends_or_cannot_start_leaves_the_line_unreadable() {
    let _alone = alone_with_our_workers().await;
    let ended = ShellParser::new("/bin/true", DEFAULT_DEADLINE)
        .analyze("tests", "git status")
        .await;
    let why = ended.unreadable.expect("unreadable");
    assert!(why.starts_with("the shell parser failed on it ("), "{why}");
    assert!(ended.commands.is_empty());

    let missing = ShellParser::new("/nonexistent/toold", DEFAULT_DEADLINE)
        .analyze("tests", "git status")
        .await;
    let why = missing.unreadable.expect("unreadable");
    assert!(
        why.starts_with("the shell parser failed on it (it could not start: "),
        "{why}"
    );
}

/// A program that says it is ready and then never answers: a worker on which every line
/// misses its deadline, as a line the parser loops on would.
fn never_answering_program(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let program = dir.join("never-answers");
    std::fs::write(&program, "#!/bin/sh\nprintf R\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    program
}

/// One session flooding the parser with lines that each hold a worker for the whole deadline
/// takes at most its share of the workers: another session's line is taken at once, not after
/// the flood. The same slow line sent again is answered at once from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_cannot_hold_every_worker() {
    let _alone = alone_with_our_workers().await;
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_millis(300);
    let parser = std::sync::Arc::new(ShellParser::new(
        never_answering_program(dir.path()),
        deadline,
    ));
    let flood: Vec<_> = (0..20)
        .map(|n| {
            let parser = parser.clone();
            tokio::spawn(async move { parser.analyze("flooder", &format!("echo {n}")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let other = parser.analyze("other", "git status").await;
    let waited = started.elapsed();
    assert!(other.unreadable.is_some(), "{other:?}");
    // Its own deadline and a worker's start, not the flood's 20 / 4 deadlines.
    assert!(waited < deadline * 3, "the other session waited {waited:?}");
    let unfinished = flood.iter().filter(|task| !task.is_finished()).count();
    assert!(
        unfinished > 10,
        "the flood was not still going: {unfinished} left"
    );
    for task in flood {
        assert!(task.await.unwrap().unreadable.is_some());
    }

    // The same slow line forty times: one deadline, then answered from memory.
    let started = Instant::now();
    let repeats: Vec<_> = (0..40)
        .map(|_| {
            let parser = parser.clone();
            tokio::spawn(async move { parser.analyze("flooder", "echo the same").await })
        })
        .collect();
    for task in repeats {
        assert!(task.await.unwrap().unreadable.is_some());
    }
    assert!(started.elapsed() < deadline * 4, "{:?}", started.elapsed());
}

/// A line that passes the parser's guards yet takes it minutes: each `${a[` inside an array
/// subscript multiplies brush-parser's work by about twenty, and a `}` it reads as text keeps
/// the bracket count low. `name` makes each line distinct, so none is answered from memory.
fn slow_line(name: &str) -> String {
    format!(
        "echo {}0{}",
        format!("${{{name}[}}").repeat(6),
        "]}".repeat(6)
    )
}

/// `toold call run_command '{"command": "true"}'` as another client (another process, its own
/// session): how long from its start to its answer, which must be a success.
fn another_clients_true(daemon: &TestDaemon) -> Duration {
    let started = Instant::now();
    let output = daemon
        .command()
        .args(["call", "run_command", r#"{"command": "true"}"#, "--json"])
        .current_dir(daemon.work())
        .output()
        .expect("toold call");
    let elapsed = started.elapsed();
    assert!(output.status.success(), "{output:?}");
    elapsed
}

/// On the real daemon: a client that floods the parser with lines that each hold a worker for
/// the whole deadline, from one session or from four, delays only itself: another client's
/// command is judged and run meanwhile within half a second, and every flooding line ends
/// unreadable. The parser's share is by the client's process, so opening more sessions (or
/// connections) takes no more of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_slow_lines_delays_only_itself() {
    let daemon = TestDaemon::start();
    // Started once before the flood: its own first start is not what is measured.
    another_clients_true(&daemon);
    for sessions in [1, 4] {
        let flooder = std::sync::Arc::new(daemon.connect(json!({}), no_answers()).await);
        let mut flooding = Vec::new();
        for _ in 0..sessions {
            flooding.push(
                flooder
                    .create_session(&daemon.work(), json!({"rules": {"allow": ["run_command"]}}))
                    .await,
            );
        }
        let batches: Vec<_> = (0..12)
            .map(|n| {
                let flooder = flooder.clone();
                let session = flooding[n % sessions].clone();
                tokio::spawn(async move {
                    flooder
                        .request(
                            "tools/execute",
                            json!({"session_id": session, "calls": [{"id": "slow",
                                "name": "run_command",
                                "arguments": {"command": slow_line(&format!("s{sessions}n{n}"))}}]}),
                        )
                        .await
                        .unwrap()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut slowest = Duration::ZERO;
        for _ in 0..5 {
            let daemon = &daemon;
            let elapsed = tokio::task::block_in_place(|| another_clients_true(daemon));
            slowest = slowest.max(elapsed);
        }
        let unfinished = batches.iter().filter(|batch| !batch.is_finished()).count();
        eprintln!(
            "{sessions} flooding sessions: the other client's slowest `true`: {slowest:?}; \
             {unfinished} flood batches left"
        );
        assert!(
            slowest < Duration::from_millis(500),
            "with {sessions} flooding sessions the other client waited {slowest:?}"
        );
        assert!(
            unfinished > 0,
            "the flood was over before the other client was measured"
        );
        for batch in batches {
            let response = batch.await.unwrap();
            let error = response["results"][0]["result"]["error"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert!(
                error.contains("the shell parser did not finish"),
                "{response}"
            );
        }
    }
}
