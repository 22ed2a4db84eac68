//! End-to-end tests of the `run_command` builtin: real shells, real pipes, real `/proc`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toold::tools::{LiveUpdate, OutputStream};
use toold::{Env, Registry};
use toold_protocol::{ErrorType, ToolCall, ToolResult};
use toold_tests::alone_in_a_process;
use toold_tests::procs::{live_processes_with, zombie_children};

fn env_in(dir: &Path) -> Env {
    Env::new(dir)
}

/// Runs one `run_command` call through the registry's execution boundary.
async fn run(env: Env, arguments: Value) -> ToolResult {
    run_with(env, arguments, CancellationToken::new(), None).await
}

async fn run_with(
    env: Env,
    arguments: Value,
    cancel: CancellationToken,
    output: Option<mpsc::Sender<LiveUpdate>>,
) -> ToolResult {
    let call = ToolCall::new("call_1", "run_command", arguments);
    Registry::with_builtins()
        .execute(&call, Arc::new(env), cancel, output)
        .await
}

fn meta<'a>(result: &'a ToolResult, key: &str) -> &'a Value {
    result
        .metadata
        .get(key)
        .unwrap_or_else(|| panic!("no metadata {key} in {result:?}"))
}

/// `count` strings no other process on the machine has on its command line: `sleep` accepts
/// each as a duration, and the tests find each process by it. Each call draws a new set, so
/// that tests sharing this process (`cargo test` runs them as its threads) never find each
/// other's; the fixed widths keep every (pid, set, index) a different string.
fn fresh_markers(count: u32) -> Vec<String> {
    static SETS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let set = SETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (0..count)
        .map(|index| format!("3000.{:010}{set:04}{index:03}", std::process::id()))
        .collect()
}

/// Polls until `done` holds, for at most `limit`.
async fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the live output has shown `text`, keeping what arrived.
async fn wait_for_output(chunks: &mut mpsc::Receiver<LiveUpdate>, seen: &mut String, text: &str) {
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        while !seen.contains(text) {
            match chunks.recv().await {
                Some(LiveUpdate::Output(chunk)) => seen.push_str(&chunk.text),
                Some(LiveUpdate::Progress(progress)) => {
                    panic!("run_command reports no progress: {progress:?}")
                }
                None => break,
            }
        }
    })
    .await;
    assert!(
        waited.is_ok() && seen.contains(text),
        "never saw {text:?} in {seen:?}"
    );
}

fn assert_error(result: &ToolResult, expected: ErrorType) {
    assert!(!result.ok, "{result:?}");
    assert_eq!(result.error_type.as_ref(), Some(&expected), "{result:?}");
}

#[tokio::test]
async fn stdout_and_stderr_interleave_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c"}),
    )
    .await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.content, "a\nb\nc\n");
    assert_eq!(meta(&result, "exit_code"), &json!(0));
    assert_eq!(meta(&result, "signal"), &Value::Null);
    assert_eq!(meta(&result, "output_bytes"), &json!(6));
    assert_eq!(meta(&result, "truncated"), &json!(false));
    assert_eq!(meta(&result, "call_id"), &json!("call_1"));
}

/// Writes made within moments of each other to both streams are read from two pipes, in
/// whatever order the reads return; `2>&1`, as the tool's description says, makes them one
/// stream in exactly the order written.
#[tokio::test]
async fn two_streams_in_one_keep_the_order_written() {
    let dir = tempfile::tempdir().unwrap();
    let line = "{ echo 1; echo 2 >&2; echo 3; echo 4 >&2; } 2>&1";
    for _ in 0..20 {
        let result = run(env_in(dir.path()), json!({"command": line})).await;
        assert_eq!(result.content, "1\n2\n3\n4\n", "{result:?}");
    }
    let description = Registry::with_builtins()
        .get("run_command")
        .map(|definition| definition.description.clone())
        .unwrap_or_default();
    assert!(
        description.contains("may appear out of order") && description.contains("2>&1"),
        "{description}"
    );
}

#[tokio::test]
async fn a_nonzero_exit_is_command_failed_with_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert_error(&result, ErrorType::CommandFailed);
    assert!(
        result.error.as_deref().unwrap().contains("code 3"),
        "{result:?}"
    );
    assert!(result.content.contains("out\n") && result.content.contains("err\n"));
    assert_eq!(meta(&result, "exit_code"), &json!(3));
    assert_eq!(meta(&result, "signal"), &Value::Null);
}

#[tokio::test]
async fn a_shell_killed_by_a_signal_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(env_in(dir.path()), json!({"command": "kill -KILL $$"})).await;
    assert_error(&result, ErrorType::CommandFailed);
    assert!(
        result.error.as_deref().unwrap().contains("signal 9"),
        "{result:?}"
    );
    assert_eq!(meta(&result, "exit_code"), &Value::Null);
    assert_eq!(meta(&result, "signal"), &json!(9));
}

/// The daemon's own variables are set in a child test process (setting them here would need
/// `unsafe` `set_var`, and would reach every test sharing the process); that child runs the
/// command and checks what it sees.
#[test]
fn commands_do_not_inherit_the_daemons_variables() {
    let daemon_variables = [
        ("TOOLD_SECRET", "hunter2"),
        ("NOTIFY_SOCKET", "/run/systemd/notify"),
        ("LISTEN_FDS", "3"),
        ("LISTEN_PID", "1"),
        ("WATCHDOG_USEC", "1000"),
        ("KEPT_FROM_DAEMON", "kept"),
    ];
    if !alone_in_a_process(
        "commands_do_not_inherit_the_daemons_variables",
        &daemon_variables,
    ) {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // 100 of 100: no run may see them, whatever else happens between runs.
    for run_number in 0..100 {
        let result = runtime.block_on(run(env_in(dir.path()), json!({"command": "env"})));
        assert!(result.ok, "{result:?}");
        let names: Vec<&str> = result
            .content
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name))
            .collect();
        for hidden in [
            "TOOLD_SECRET",
            "TOOLD_TEST_ALONE",
            "NOTIFY_SOCKET",
            "LISTEN_FDS",
            "LISTEN_PID",
            "WATCHDOG_USEC",
        ] {
            assert!(
                !names.contains(&hidden),
                "run {run_number}: {hidden} leaked:\n{}",
                result.content
            );
        }
        assert!(result.content.contains("KEPT_FROM_DAEMON=kept\n"));
        // The one TOOLD_ variable a command sees is the tag the daemon sets on purpose.
        assert!(names.contains(&"TOOLD_RUN_TAG"));
    }
}

#[tokio::test]
async fn session_and_call_variables_reach_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_in(dir.path());
    env.command_env
        .insert("FROM_SESSION".into(), "session".into());
    env.command_env
        .insert("OVERRIDDEN".into(), "by the session".into());
    let result = run(
        env,
        json!({
            "command": "echo \"$FROM_SESSION/$FROM_CALL/$OVERRIDDEN\"",
            "env": {"FROM_CALL": "call", "OVERRIDDEN": "by the call"}
        }),
    )
    .await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.content, "session/call/by the call\n");
}

#[tokio::test]
async fn a_bad_variable_name_is_invalid_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "true", "env": {"A=B": "c"}}),
    )
    .await;
    assert_error(&result, ErrorType::InvalidArguments);
}

#[tokio::test]
async fn cwd_is_taken_relative_to_the_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let real = dir.path().join("sub").canonicalize().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "pwd -P; echo \"$PWD\"", "cwd": "sub"}),
    )
    .await;
    assert!(result.ok, "{result:?}");
    let expected = format!("{}\n{}\n", real.display(), dir.path().join("sub").display());
    assert_eq!(result.content, expected);

    let default = run(env_in(dir.path()), json!({"command": "pwd -P"})).await;
    assert_eq!(
        default.content,
        format!("{}\n", dir.path().canonicalize().unwrap().display())
    );
}

#[tokio::test]
async fn a_missing_cwd_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "true", "cwd": "no/such/dir"}),
    )
    .await;
    assert_error(&result, ErrorType::NotFound);
    assert!(
        result.error.as_deref().unwrap().contains("no/such/dir"),
        "{result:?}"
    );
}

#[tokio::test]
async fn stdin_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let result = run(
        env_in(dir.path()),
        json!({"command": "cat; echo \"cat read $(wc -c) bytes\"", "timeout_ms": 20_000}),
    )
    .await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.content, "cat read 0 bytes\n");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn long_output_keeps_head_and_tail_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_in(dir.path());
    env.max_output_bytes = 1000;
    let result = run(env, json!({"command": "seq 1 100000"})).await;
    assert!(result.ok, "{result:?}");
    let total: usize = (1..=100_000).map(|n: u32| n.to_string().len() + 1).sum();
    assert_eq!(meta(&result, "output_bytes"), &json!(total));
    assert_eq!(meta(&result, "truncated"), &json!(true));
    let marker = format!("\n[… {} bytes of output omitted …]\n", total - 1000);
    assert!(marker.len() < 100);
    assert!(
        result.content.starts_with("1\n2\n3\n"),
        "{}",
        result.content
    );
    assert!(
        result.content.ends_with("99999\n100000\n"),
        "{}",
        result.content
    );
    assert!(result.content.contains(&marker), "{}", result.content);
    assert_eq!(result.content.len(), 1000 + marker.len());
}

#[tokio::test]
async fn invalid_utf8_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(
        env_in(dir.path()),
        json!({"command": "printf 'a\\377b\\342\\202\\254\\n'"}),
    )
    .await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.content, "a\u{FFFD}b€\n");
    assert_eq!(meta(&result, "output_bytes"), &json!(7));
}

#[tokio::test]
async fn output_arrives_live_per_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (sender, mut chunks) = mpsc::channel(1024);
    let result = run_with(
        env_in(dir.path()),
        json!({"command": "echo one; echo two >&2; printf '\\342\\202'; sleep 0.1; printf '\\254\\n'"}),
        CancellationToken::new(),
        Some(sender),
    )
    .await;
    assert!(result.ok, "{result:?}");
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut stdout_chunks = 0;
    while let Ok(update) = chunks.try_recv() {
        let LiveUpdate::Output(chunk) = update else {
            panic!("run_command reports no progress: {update:?}");
        };
        match chunk.stream {
            OutputStream::Stdout => {
                stdout_chunks += 1;
                stdout.push_str(&chunk.text);
            }
            OutputStream::Stderr => stderr.push_str(&chunk.text),
        }
    }
    assert_eq!(stdout, "one\n€\n");
    assert_eq!(stderr, "two\n");
    // The euro sign was written in two pieces but arrives whole: at least one chunk before it.
    assert!(stdout_chunks >= 2, "{stdout_chunks}");
}

/// Printing a gigabyte grows the process by a few MiB at most: the output is kept as head
/// and tail, never whole. Measured alone in a process, whose peak no other test shares.
#[test]
fn memory_stays_bounded_whatever_the_command_prints() {
    if !alone_in_a_process("memory_stays_bounded_whatever_the_command_prints", &[]) {
        return;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(printing_a_gigabyte_grows_the_process_by_a_few_mib());
}

async fn printing_a_gigabyte_grows_the_process_by_a_few_mib() {
    fn peak_rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|line| line.starts_with("VmHWM:"))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let before = peak_rss_kib();
    let result = run(
        env_in(dir.path()),
        json!({"command": "head -c 1000000000 /dev/zero"}),
    )
    .await;
    let after = peak_rss_kib();
    assert!(result.ok, "{:?}", result.error);
    assert_eq!(meta(&result, "output_bytes"), &json!(1_000_000_000u64));
    assert_eq!(meta(&result, "truncated"), &json!(true));
    assert!(result.content.len() < toold::env::defaults::MAX_OUTPUT_BYTES + 100);
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(grown_mib < 64, "peak RSS grew by {grown_mib} MiB");
}

#[tokio::test]
async fn the_deadline_stops_the_command_and_keeps_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let result = run(
        env_in(dir.path()),
        json!({"command": "echo started; sleep 30", "timeout_ms": 300}),
    )
    .await;
    assert_error(&result, ErrorType::Timeout);
    assert_eq!(result.content, "started\n");
    assert_eq!(meta(&result, "timeout_ms"), &json!(300));
    assert_eq!(meta(&result, "output_bytes"), &json!(8));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn cancellation_stops_the_command_and_keeps_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let (sender, mut chunks) = mpsc::channel(64);
    let call = tokio::spawn(run_with(
        env_in(dir.path()),
        json!({"command": "echo started; sleep 30"}),
        cancel.clone(),
        Some(sender),
    ));
    let mut seen = String::new();
    wait_for_output(&mut chunks, &mut seen, "started").await;
    cancel.cancel();
    let result = call.await.unwrap();
    assert_error(&result, ErrorType::Canceled);
    assert_eq!(result.content, "started\n");
}

/// A command whose processes leave the shell's group or ancestry in every usual way (setsid,
/// a double fork, both, a cleared environment), plus one that ignores SIGTERM; and the markers
/// that find each of them.
fn escaping_tree_command() -> (String, Vec<String>) {
    let markers = fresh_markers(6);
    let command = format!(
        "setsid sleep {m1} & \
         (sleep {m2} &) ; \
         (setsid sh -c 'sleep {m3}' &) ; \
         env -i /usr/bin/setsid /usr/bin/sleep {m4} & \
         sh -c 'trap \"\" TERM; sleep {m5}' & \
         echo ready; sleep {m6}",
        m1 = markers[0],
        m2 = markers[1],
        m3 = markers[2],
        m4 = markers[3],
        m5 = markers[4],
        m6 = markers[5],
    );
    (command, markers)
}

/// Runs the escaping tree and waits until every process of it runs; then cancels it, or lets
/// the `timeout_ms` deadline stop it. Returns the result and the markers.
async fn run_escaping_tree(timeout_ms: Option<u64>) -> (ToolResult, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (command, markers) = escaping_tree_command();
    let mut arguments = json!({ "command": command });
    if let Some(timeout_ms) = timeout_ms {
        arguments["timeout_ms"] = json!(timeout_ms);
    }
    let cancel = CancellationToken::new();
    let (sender, mut chunks) = mpsc::channel(64);
    let call = tokio::spawn(run_with(
        env_in(dir.path()),
        arguments,
        cancel.clone(),
        Some(sender),
    ));
    let mut seen = String::new();
    wait_for_output(&mut chunks, &mut seen, "ready").await;
    let all_started = eventually(Duration::from_secs(10), || {
        markers
            .iter()
            .all(|marker| !live_processes_with(marker).is_empty())
    })
    .await;
    assert!(all_started, "the tree never started whole");
    if timeout_ms.is_none() {
        cancel.cancel();
    }
    (call.await.unwrap(), markers)
}

/// Within a few seconds, no process with any of the markers is alive (zombies are dead).
async fn assert_all_die(markers: &[String]) {
    let all_dead = eventually(Duration::from_secs(3), || {
        markers
            .iter()
            .all(|marker| live_processes_with(marker).is_empty())
    })
    .await;
    let alive: Vec<(&String, Vec<u32>)> = markers
        .iter()
        .map(|marker| (marker, live_processes_with(marker)))
        .filter(|(_, pids)| !pids.is_empty())
        .collect();
    assert!(all_dead, "still alive: {alive:?}");
    // The test process is the subreaper the orphans went to: they must have been reaped.
    let our_zombies = || zombie_children(std::process::id());
    let reaped = eventually(Duration::from_secs(3), || our_zombies().is_empty()).await;
    assert!(reaped, "zombies left behind: {:?}", our_zombies());
}

#[tokio::test]
async fn cancellation_kills_the_whole_process_tree() {
    let (result, markers) = run_escaping_tree(None).await;
    assert_error(&result, ErrorType::Canceled);
    assert!(result.content.contains("ready"), "{result:?}");
    assert_all_die(&markers).await;
}

#[tokio::test]
async fn the_deadline_kills_the_whole_process_tree() {
    // Long enough for the tree to start on a loaded machine, short enough to keep the test fast.
    let (result, markers) = run_escaping_tree(Some(3_000)).await;
    assert_error(&result, ErrorType::Timeout);
    assert!(result.content.contains("ready"), "{result:?}");
    assert_all_die(&markers).await;
}

#[tokio::test]
async fn background_leftovers_die_when_the_shell_exits() {
    let dir = tempfile::tempdir().unwrap();
    let markers = fresh_markers(3);
    // One leftover detached from the pipes, one holding stdout open, one in a new session
    // holding it too: the call must neither hang nor leak any of them.
    let command = format!(
        "setsid sleep {} >/dev/null 2>&1 & sleep {} & setsid sleep {} & echo done",
        markers[0], markers[1], markers[2]
    );
    let started = Instant::now();
    let result = run(env_in(dir.path()), json!({ "command": command })).await;
    assert!(result.ok, "{result:?}");
    assert_eq!(result.content, "done\n");
    assert!(started.elapsed() < Duration::from_secs(10));
    let killed = meta(&result, "killed_background_processes")
        .as_u64()
        .unwrap();
    assert!(killed >= 1, "{result:?}");
    assert_all_die(&markers).await;
}

/// Fifty descendants, left in every usual way (background jobs, `setsid`, double forks, both),
/// then the deadline: two seconds later none of them is alive.
#[tokio::test]
async fn fifty_descendants_of_a_timed_out_command_all_die() {
    let dir = tempfile::tempdir().unwrap();
    let markers = fresh_markers(50);
    let mut command = String::new();
    for (index, marker) in markers.iter().enumerate() {
        command.push_str(&match index % 4 {
            0 => format!("sleep {marker} & "),
            1 => format!("setsid sleep {marker} & "),
            2 => format!("(sleep {marker} &) ; "),
            _ => format!("(setsid sh -c 'sleep {marker}' &) ; "),
        });
    }
    command.push_str("echo ready; sleep 600");
    let (sender, mut chunks) = mpsc::channel(64);
    let call = tokio::spawn(run_with(
        env_in(dir.path()),
        json!({"command": command, "timeout_ms": 3000}),
        CancellationToken::new(),
        Some(sender),
    ));
    let mut seen = String::new();
    wait_for_output(&mut chunks, &mut seen, "ready").await;
    let all_started = eventually(Duration::from_secs(10), || {
        markers
            .iter()
            .all(|marker| !live_processes_with(marker).is_empty())
    })
    .await;
    assert!(all_started, "the fifty never all started");
    let result = call.await.unwrap();
    assert_error(&result, ErrorType::Timeout);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alive: Vec<&String> = markers
        .iter()
        .filter(|marker| !live_processes_with(marker).is_empty())
        .collect();
    assert!(alive.is_empty(), "alive 2 s after the timeout: {alive:?}");
}

/// Processes that leave the group, drop the tag (`env -i`) and lose their parent before the
/// shell ends are reparented to the daemon: each escape is tried, and none is alive after
/// the call, whether it ended by itself or by its deadline.
#[tokio::test]
async fn orphans_that_dropped_group_tag_and_parent_die_with_their_call() {
    let dir = tempfile::tempdir().unwrap();
    let markers = fresh_markers(5);
    let command = format!(
        "env -i setsid sh -c 'sleep {} &'; \
         env -i setsid -f sleep {}; \
         (env -i setsid sleep {} &); \
         env -i TOOLD_RUN_TAG=forged setsid sh -c '(sleep {} &) &'; \
         env -i sh -c 'setsid sleep {} & exit'; \
         sleep 0.3; echo done",
        markers[0], markers[1], markers[2], markers[3], markers[4]
    );
    let result = run(env_in(dir.path()), json!({ "command": command })).await;
    assert!(result.ok, "{result:?}");
    assert_all_die(&markers).await;

    let markers = fresh_markers(2);
    let command = format!(
        "env -i setsid sh -c 'sleep {} &'; (env -i setsid sleep {} &); echo ready; sleep 600",
        markers[0], markers[1]
    );
    let result = run(
        env_in(dir.path()),
        json!({ "command": command, "timeout_ms": 1500 }),
    )
    .await;
    assert_error(&result, ErrorType::Timeout);
    assert_all_die(&markers).await;
}
