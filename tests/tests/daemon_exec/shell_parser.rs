//! A shell parser worker that stops answering while it holds a `run_command` line: only that
//! call waits (to the deadline), another client is served meanwhile, the stuck worker is
//! killed, and the next line parses.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold_tests::daemon::{TestDaemon, command_call};
use toold_tests::procs::{send_signal, shell_parser_workers};

use super::{command_session, result_of};

/// A shell parser worker that stops answering (stopped here with SIGSTOP; a line the parser
/// loops on does the same) delays only the call whose line it holds: that call is answered
/// after the 1 s deadline, its line unreadable (it asks; with no approver, denied, and the line
/// is remembered so), another client is served all the while, the stuck worker is killed, and
/// the next line parses.
#[tokio::test]
async fn a_stuck_shell_parser_delays_only_the_call_it_holds() {
    let daemon = TestDaemon::start();
    let (client, session_id) = command_session(&daemon).await;
    let command = |id: &str, line: &str| json!([command_call(id, line)]);
    let warm = client.execute(&session_id, command("warm", "true")).await;
    assert_eq!(result_of(&warm, "warm")["ok"], true, "{warm}");
    let stuck = shell_parser_workers(daemon.pid());
    assert_eq!(stuck.len(), 1, "one worker after one line: {stuck:?}");
    send_signal(stuck[0], nix::sys::signal::Signal::SIGSTOP);

    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let response = client
            .execute(&session_id, command("held", "echo parsed"))
            .await;
        (response, started.elapsed(), client, session_id)
    });
    std::fs::write(daemon.work().join("note.txt"), "served\n").unwrap();
    let (other, other_session) = command_session(&daemon).await;
    let (mut rounds, mut slowest) = (0, Duration::ZERO);
    while !waiting.is_finished() {
        let started = std::time::Instant::now();
        let read = other
            .execute(
                &other_session,
                json!([{"id": "r", "name": "read_file", "arguments": {"path": "note.txt"}}]),
            )
            .await;
        assert_eq!(result_of(&read, "r")["ok"], true, "{read}");
        slowest = slowest.max(started.elapsed());
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (response, waited, client, session_id) = waiting.await.unwrap();
    eprintln!(
        "the held call answered after {waited:?}; the other client served {rounds} times \
         meanwhile, the slowest in {slowest:?}"
    );
    let held = result_of(&response, "held");
    assert_eq!(held["error_type"], "permission_denied", "{held}");
    let error = held["error"].as_str().unwrap();
    assert!(
        error.contains("the shell parser did not finish within 1000 ms")
            && error.ends_with("no approver is attached"),
        "{error}"
    );
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "the held call was answered after {waited:?}"
    );
    assert!(
        rounds >= 10 && slowest < Duration::from_millis(500),
        "the other client was served {rounds} times meanwhile, the slowest in {slowest:?}"
    );

    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while shell_parser_workers(daemon.pid()).contains(&stuck[0]) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stuck worker is still alive"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The line that missed its deadline is remembered as unreadable; another one parses.
    let again = client
        .execute(&session_id, command("again", "echo parsed"))
        .await;
    assert_eq!(
        result_of(&again, "again")["error_type"],
        "permission_denied",
        "{again}"
    );
    let other_line = client
        .execute(&session_id, command("other", "echo parsed too"))
        .await;
    assert_eq!(result_of(&other_line, "other")["ok"], true, "{other_line}");

    // Canceled while its line waits on a stuck worker: the call ends at once, not at the
    // deadline.
    let stuck = shell_parser_workers(daemon.pid());
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    send_signal(stuck[0], nix::sys::signal::Signal::SIGSTOP);
    let client = std::sync::Arc::new(client);
    let running = tokio::spawn({
        let (client, session_id) = (client.clone(), session_id.clone());
        async move {
            client
                .execute(&session_id, command("canceled", "echo never"))
                .await
        }
    });
    // Until the batch is registered there is nothing to cancel.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let started = loop {
        let started = std::time::Instant::now();
        let canceled = client
            .request("tools/cancel", json!({"session_id": session_id}))
            .await
            .expect("tools/cancel");
        if canceled["canceled"] == json!(["canceled"]) {
            break started;
        }
        assert!(std::time::Instant::now() < deadline, "{canceled}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let response = running.await.unwrap();
    let result = result_of(&response, "canceled");
    assert_eq!(result["error_type"], "canceled", "{result}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "the cancel took {:?}",
        started.elapsed()
    );
}
