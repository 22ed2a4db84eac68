//! What one call may make the daemon hold, tried as an attacker would: files of one enormous
//! line read, edited and searched under a memory cap, floods of searches with huge answers and
//! counts past their maximum, and file names that would forge lines of a listing. Each test
//! checks the daemon's peak resident set against a stated bound while another session's small
//! reads keep being answered.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, results};

/// The daemon's peak resident set (VmHWM) the tests allow, in MiB: a searcher's buffer is at
/// most 32 MiB (one per concurrent search), a read at most `max_read_bytes` (256 KiB by default), a listing likewise.
const PEAK_RSS_MIB: u64 = 160;

/// The longest another session's `read_file` of a small file may wait while the floods run.
const OTHER_SESSION_LATENCY: Duration = Duration::from_secs(5);

/// The memory cap (RLIMIT_DATA) the daemon runs under: below the 2 GiB line it is asked to read.
const DATA_LIMIT: &str = "--data=536870912";

/// The results of `calls` run in `session`.
async fn execute(client: &TestClient, session: &str, calls: Value) -> Vec<Value> {
    results(&client.execute(session, calls).await)
        .into_iter()
        .cloned()
        .collect()
}

/// Runs `load` while another session reads a small file again and again; returns what `load`
/// returned and the slowest of those reads.
async fn with_another_session<T>(
    daemon: &TestDaemon,
    load: impl std::future::Future<Output = T>,
) -> (T, Duration) {
    std::fs::write(daemon.work().join("small.txt"), "small\n").expect("small.txt");
    let other = daemon.connect(json!({}), no_answers()).await;
    let session = other.create_session(&daemon.work(), json!({})).await;
    let done = tokio_util::sync::CancellationToken::new();
    let reads = {
        let done = done.clone();
        async move {
            let mut slowest = Duration::ZERO;
            while !done.is_cancelled() {
                let started = Instant::now();
                let results = execute(
                    &other,
                    &session,
                    json!([{"id": "r", "name": "read_file", "arguments": {"path": "small.txt"}}]),
                )
                .await;
                assert_eq!(results[0]["content"], "small\n", "{}", results[0]);
                slowest = slowest.max(started.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            slowest
        }
    };
    let load = async {
        let value = load.await;
        done.cancel();
        value
    };
    tokio::join!(load, reads)
}

/// A daemon under the [`DATA_LIMIT`] memory cap, on two CPUs: its worker and walker threads
/// are counted by the CPUs it may run on, and each thread's stack counts against the cap, so
/// the bounds are the same on a machine of two CPUs and one of sixty-four.
fn daemon_under_a_memory_cap() -> TestDaemon {
    // "Cpus_allowed_list:\t0-3,8-11"
    let status = std::fs::read_to_string("/proc/self/status").expect("this process's status");
    let allowed = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("a Cpus_allowed_list line");
    let two: Vec<String> = allowed
        .trim()
        .split(',')
        .flat_map(|range| {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let first: u32 = first.parse().expect("a CPU number");
            first..=last.parse().expect("a CPU number")
        })
        .take(2)
        .map(|cpu| cpu.to_string())
        .collect();
    TestDaemon::start_under(
        &[
            "taskset".to_owned(),
            "--cpu-list".to_owned(),
            two.join(","),
            "prlimit".to_owned(),
            DATA_LIMIT.to_owned(),
        ],
        &[],
    )
}

/// Fails unless another session's slowest read stayed within [`OTHER_SESSION_LATENCY`].
fn assert_other_session_served(slowest: Duration) {
    eprintln!("another session's slowest read: {slowest:?}");
    assert!(
        slowest < OTHER_SESSION_LATENCY,
        "another session's read waited {slowest:?}"
    );
}

fn assert_peak_within_bound(daemon: &TestDaemon, what: &str) {
    let peak_mib = daemon.peak_rss_bytes() / (1024 * 1024);
    eprintln!("{what}: the daemon's peak RSS was {peak_mib} MiB");
    assert!(
        peak_mib < PEAK_RSS_MIB,
        "{what}: the daemon's peak RSS was {peak_mib} MiB, over {PEAK_RSS_MIB} MiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_long_line_is_never_read_whole() {
    let daemon = daemon_under_a_memory_cap();
    // 2 GiB with no newline: 16 KiB of text (no NUL where binary files are told), then a hole.
    let sparse = daemon.work().join("one_line.txt");
    let mut file = std::fs::File::create(&sparse).expect("one_line.txt");
    file.write_all(&[b'a'; 16 * 1024]).expect("its text");
    file.set_len(2 << 30).expect("a 2 GiB hole");
    // 160 MiB of text in one line, no NUL: what the searcher reads line by line.
    let long = daemon.work().join("long_line.txt");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&long).expect("long_line.txt"));
    for _ in 0..160 {
        file.write_all(&[b'x'; 1 << 20]).expect("a MiB of one line");
    }
    file.flush().expect("long_line.txt written");
    drop(file);

    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(&daemon.work(), json!({"mode": "accept_edits"}))
        .await;
    let (results, slowest) = with_another_session(&daemon, async {
        execute(
            &client,
            &session,
            json!([
                {"id": "read", "name": "read_file", "arguments": {"path": "one_line.txt"}},
                {"id": "window", "name": "read_file",
                 "arguments": {"path": "long_line.txt", "offset": 1, "limit": 1}},
                {"id": "search", "name": "search_code",
                 "arguments": {"pattern": "needle", "path": "long_line.txt"}},
                {"id": "search_all", "name": "search_code", "arguments": {"pattern": "needle"}},
                {"id": "edit", "name": "edit_file", "arguments":
                    {"path": "one_line.txt", "old_string": "a", "new_string": "b"}},
                {"id": "edit_long", "name": "edit_file", "arguments":
                    {"path": "long_line.txt", "old_string": "x", "new_string": "y"}},
            ]),
        )
        .await
    })
    .await;
    let read = &results[0];
    assert_eq!(read["ok"], true, "{read}");
    assert_eq!(read["metadata"]["truncated"], true);
    assert_eq!(read["metadata"]["total_lines"], 1);
    assert_eq!(read["content"].as_str().map(str::len), Some(256 * 1024));
    let window = &results[1];
    assert_eq!(window["metadata"]["truncated"], true, "{window}");
    assert_eq!(window["metadata"]["total_lines"], 1, "{window}");
    for search in &results[2..4] {
        assert_eq!(search["ok"], true, "{search}");
        assert_eq!(search["metadata"]["skipped"], 1, "{search}");
    }
    for edit in &results[4..6] {
        assert_eq!(edit["error_type"], "invalid_arguments", "{edit}");
        assert!(
            edit["error"]
                .as_str()
                .unwrap_or("")
                .contains("larger than 16 MiB"),
            "{edit}"
        );
    }
    assert_peak_within_bound(&daemon, "one long line");
    assert_other_session_served(slowest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_and_counts_are_bounded() {
    let daemon = daemon_under_a_memory_cap();
    // 20 files of 10,000 matching lines of 100 bytes: 20 MB of answer for `match`.
    let corpus = daemon.work().join("corpus");
    std::fs::create_dir(&corpus).expect("corpus");
    let line = format!("match {}\n", "y".repeat(93));
    let text = line.repeat(10_000);
    for index in 0..20 {
        std::fs::write(corpus.join(format!("f{index:02}.txt")), &text).expect("a corpus file");
    }
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let searches: Vec<Value> = (0..30)
        .map(|index| {
            json!({"id": format!("s{index}"), "name": "search_code",
                   "arguments": {"pattern": "match", "max_results": 1_000_000, "context": 50}})
        })
        .collect();
    let (results, slowest) = with_another_session(&daemon, async {
        let mut all = Vec::new();
        for _ in 0..3 {
            all.extend(execute(&client, &session, Value::Array(searches.clone())).await);
        }
        all
    })
    .await;
    for result in &results {
        assert_eq!(result["ok"], true, "{}", result["error"]);
        assert_eq!(result["metadata"]["truncated"], true);
        let content = result["content"].as_str().expect("content");
        assert!(content.len() <= 256 * 1024, "{} bytes", content.len());
        assert!(content.contains(":match y"), "{content:.200}");
    }
    assert_peak_within_bound(&daemon, "90 searches of 20 MB answers");
    assert_other_session_served(slowest);

    // Counts past their maximum are refused; the listing is bounded in bytes too.
    let refused = execute(
        &client,
        &session,
        json!([
            {"id": "a", "name": "search_code",
             "arguments": {"pattern": "match", "max_results": 1_000_001}},
            {"id": "b", "name": "find_files",
             "arguments": {"pattern": "*", "max_results": u64::MAX}},
            {"id": "c", "name": "search_code", "arguments": {"pattern": "match", "context": 51}},
        ]),
    )
    .await;
    for result in &refused {
        assert_eq!(result["error_type"], "invalid_arguments", "{result}");
    }
    let small = client
        .create_session(&daemon.work(), json!({"max_read_bytes": 40}))
        .await;
    let listed = execute(
        &client,
        &small,
        json!([{"id": "f", "name": "find_files", "arguments": {"pattern": "*.txt"}}]),
    )
    .await;
    // Which files make a cut listing is whichever the walk found first.
    assert_eq!(listed[0]["metadata"]["truncated"], true, "{}", listed[0]);
    let paths: Vec<&str> = listed[0]["content"]
        .as_str()
        .expect("content")
        .lines()
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths.iter().all(|path| path.starts_with("corpus/f")),
        "{paths:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_names_cannot_forge_lines_of_a_listing() {
    let daemon = TestDaemon::start();
    let names = [
        "evil\nplanted.rs:1:fn forged() {}",
        "cr\rsecond.rs",
        "esc\x1b[2Jname.rs",
        "tab\there.rs",
        "nel\u{85}x.rs",
        "ls\u{2028}sep.rs:1:fn forged() {}",
    ];
    for name in names {
        std::fs::write(daemon.work().join(name), "fn real() {}\n").expect("a hostile name");
    }
    std::fs::write(daemon.work().join("plain.rs"), "fn real() {}\n").expect("plain.rs");
    // Not UTF-8, and a newline: shown replaced and escaped, given exactly in the metadata.
    let raw = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"raw\xff\nX.rs");
    std::fs::write(daemon.work().join(raw), "fn real() {}\n").expect("a name not UTF-8");
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;
    let results = execute(
        &client,
        &session,
        json!([
            {"id": "find", "name": "find_files", "arguments": {"pattern": "*"}},
            {"id": "search", "name": "search_code", "arguments": {"pattern": "fn real"}},
        ]),
    )
    .await;
    let find = &results[0];
    let listed: Vec<&str> = find["content"].as_str().expect("content").lines().collect();
    assert_eq!(listed.len(), names.len() + 2, "one line a file: {listed:?}");
    assert_eq!(find["metadata"]["count"], names.len() + 2);
    let escaped = find["metadata"]["escaped_paths"]
        .as_object()
        .expect("escaped_paths");
    for name in names {
        let shown = escaped
            .iter()
            .find_map(|(shown, exact)| (exact == name).then_some(shown))
            .unwrap_or_else(|| panic!("{name:?} not given exactly: {escaped:?}"));
        assert!(listed.contains(&shown.as_str()), "{shown:?} in {listed:?}");
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
    assert!(listed.contains(&"evil\\nplanted.rs:1:fn forged() {}"));
    assert!(listed.contains(&"esc\\x1b[2Jname.rs"));
    assert!(listed.contains(&"ls\\u{2028}sep.rs:1:fn forged() {}"));
    assert!(listed.contains(&"raw\u{fffd}\\nX.rs"), "{listed:?}");
    assert_eq!(escaped["raw\u{fffd}\\nX.rs"], "raw\\xff\nX.rs");

    let search = &results[1];
    let lines: Vec<&str> = search["content"]
        .as_str()
        .expect("content")
        .lines()
        .collect();
    assert_eq!(lines.len(), names.len() + 2, "{lines:?}");
    assert!(
        lines.iter().all(|line| line.ends_with(":1:fn real() {}")),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|line| line.starts_with("planted.rs")));
    assert_eq!(
        search["metadata"]["escaped_paths"]
            .as_object()
            .map(|escaped| escaped.len()),
        Some(names.len() + 1)
    );
}

/// The daemon's CPU time so far (user and system, every thread), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let fields = toold_tests::procs::stat_fields(pid).expect("the daemon's stat");
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_call_stops_working_and_never_holds_the_exit() {
    let mut daemon = TestDaemon::start();
    // 256 GiB with no newline: counting its lines would take minutes.
    let huge = daemon.work().join("huge.log");
    let mut file = std::fs::File::create(&huge).expect("huge.log");
    file.write_all(&[b'a'; 16 * 1024]).expect("its text");
    file.set_len(256 << 30).expect("a 256 GiB hole");
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(&daemon.work(), json!({"timeout_ms": 300}))
        .await;
    let calls = json!([
        {"id": "read", "name": "read_file", "arguments": {"path": "huge.log"}},
        {"id": "skip", "name": "read_file", "arguments": {"path": "huge.log", "offset": 2}},
    ]);
    let started = Instant::now();
    let results = execute(&client, &session, calls).await;
    for result in &results {
        assert_eq!(result["error_type"], "timeout", "{result}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Nothing goes on reading once the calls were answered.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_ticks(daemon.pid());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spent = cpu_ticks(daemon.pid()) - before;
    assert!(
        spent < 20,
        "the daemon used {spent} ticks of CPU in the second after"
    );

    // A call canceled with the batch stops likewise, and SIGTERM ends the daemon at once.
    let session = client.create_session(&daemon.work(), json!({})).await;
    let pending = {
        let peer = client.peer.clone();
        let session = session.clone();
        tokio::spawn(async move {
            peer.request(
                "tools/execute".to_owned(),
                Some(json!({"session_id": session, "calls": [
                    {"id": "r", "name": "read_file", "arguments": {"path": "huge.log"}}]})),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stopping = Instant::now();
    daemon.send_sigterm();
    let status = daemon.wait_for_exit().await;
    assert!(status.success(), "{status}");
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "the daemon took {:?} to stop",
        stopping.elapsed()
    );
    let _ = pending.await;
}

/// Whatever moment its deadline falls at, an edit's answer says what happened to the file: an
/// answer of `timeout` (or stopped) means the file is as it was, for good; a diff means it was
/// changed. The deadlines spread from before the read to after the diff on any machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_answered_timeout_never_changes_the_file() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    let client = daemon.connect(json!({}), no_answers()).await;
    let before = "a\n".repeat(1 << 19);
    let after = "b\n".repeat(1 << 19);
    let mut outcomes = Vec::new();
    for deadline_ms in [2, 10, 40, 160, 640, 2560] {
        std::fs::write(work.join("edited.txt"), &before).unwrap();
        let session = client
            .create_session(
                &work,
                json!({"mode": "accept_edits", "timeout_ms": deadline_ms}),
            )
            .await;
        let edit = json!([{"id": "e", "name": "edit_file", "arguments": {"path": "edited.txt",
            "old_string": "a", "new_string": "b", "replace_all": true}}]);
        let result = execute(&client, &session, edit).await.remove(0);
        // Long enough for a stopped edit's diff (at most 1 s, then coarser) to have ended.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = std::fs::read_to_string(work.join("edited.txt")).unwrap();
        if result["ok"] == true {
            assert!(
                now == after,
                "{deadline_ms} ms: answered ok, the file unchanged"
            );
        } else {
            assert!(
                result["error_type"] == "timeout" || result["error_type"] == "canceled",
                "{deadline_ms} ms: {result}"
            );
            assert!(
                now == before,
                "{deadline_ms} ms: answered {}, the file changed",
                result["error_type"]
            );
        }
        outcomes.push(format!("{deadline_ms} ms: {}", result["error_type"]));
    }
    eprintln!("{outcomes:?}");
}

/// `edit_file` is bounded by what it would write, not only by what it reads: an edit that
/// would grow the file past 16 MiB is refused before the new text is built, a large diff is
/// cut to `max_read_bytes`, and an edit whose call was stopped never replaces the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_bounded_by_what_it_would_write() {
    let daemon = TestDaemon::start();
    let work = daemon.work();
    std::fs::write(work.join("grow.txt"), "a".repeat(4 << 20)).unwrap();
    std::fs::write(work.join("small.txt"), "a\n".repeat(64 * 1024)).unwrap();
    let lines = "a\n".repeat(8 << 20);
    std::fs::write(work.join("slow.txt"), &lines).unwrap();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client
        .create_session(&work, json!({"mode": "accept_edits"}))
        .await;
    let edit = |path: &str, new: &str| {
        json!([{"id": "e", "name": "edit_file", "arguments": {"path": path,
            "old_string": "a", "new_string": new, "replace_all": true}}])
    };
    let grown = execute(&client, &session, edit("grow.txt", &"B".repeat(64))).await;
    assert_eq!(grown[0]["error_type"], "invalid_arguments", "{}", grown[0]);
    assert!(
        grown[0]["error"]
            .as_str()
            .unwrap()
            .contains("more than the 16 MiB"),
        "{}",
        grown[0]
    );
    assert_eq!(
        std::fs::metadata(work.join("grow.txt")).unwrap().len(),
        4 << 20
    );

    let small = execute(&client, &session, edit("small.txt", "bb")).await;
    assert_eq!(small[0]["ok"], true, "{}", small[0]["error"]);
    let diff = small[0]["content"].as_str().unwrap();
    assert!(
        diff.len() <= 256 * 1024 + 100,
        "{} bytes of diff",
        diff.len()
    );
    assert!(small[0]["metadata"]["diff_bytes_cut"].as_u64().unwrap() > 0);
    assert!(diff.ends_with("read the file to see the rest]\n"));
    assert_peak_within_bound(&daemon, "edits");

    // Stopped by its deadline while it reads and builds the new text: the file stays as it was.
    // The deadline is 1 ms, past before 16 MiB is read on any machine; a longer one could let
    // a fast machine's write land first, answered `timeout` by the diff made after it.
    let hurried = client
        .create_session(&work, json!({"mode": "accept_edits", "timeout_ms": 1}))
        .await;
    let stopped = execute(&client, &hurried, edit("slow.txt", "b")).await;
    assert_eq!(stopped[0]["error_type"], "timeout", "{}", stopped[0]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        std::fs::read_to_string(work.join("slow.txt")).unwrap() == lines,
        "the stopped edit replaced the file afterwards"
    );
    let before = cpu_ticks(daemon.pid());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spent = cpu_ticks(daemon.pid()) - before;
    assert!(
        spent < 20,
        "the daemon used {spent} ticks of CPU in the second after"
    );
}
