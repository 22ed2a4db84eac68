//! The recheck between the permission check and the tool: a directory of the judged path
//! swapped for a symlink out of the roots redirects no read, write or edit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold_protocol::{ApprovalDecision, Rules, SessionMode};

use super::{Harness, ScriptedApprover, answer, call, rules};

/// Swaps `dir` for a symlink to `outside` (the real directory kept aside as `dir.real`).
fn swap_for_symlink(dir: &std::path::Path, outside: &std::path::Path) {
    let aside = dir.with_extension("real");
    std::fs::rename(dir, &aside).unwrap();
    std::os::unix::fs::symlink(outside, dir).unwrap();
}

/// The window between the permission check and the tool: an approver's answer. A directory of
/// the judged path swapped for a symlink meanwhile must not redirect a read, a write or an
/// edit outside the roots: the tool acts on the path as it was judged and refuses the change.
#[tokio::test]
async fn a_symlink_swapped_in_after_the_check_redirects_nothing() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("old.txt"), "outside before\n").unwrap();
    let calls = [
        call(
            "w",
            "write_file",
            json!({"path": "d/new.txt", "content": "payload"}),
        ),
        call(
            "e",
            "edit_file",
            json!({"path": "d/old.txt", "old_string": "before", "new_string": "after"}),
        ),
        call("r", "read_file", json!({"path": "d/old.txt"})),
    ];
    for call in calls {
        let harness = Harness::new(
            &[("d/old.txt", "inside before\n")],
            rules(&[], &["write_file", "edit_file", "read_file"], &[]),
            SessionMode::Default,
        );
        let approver = ScriptedApprover::answering(vec![answer(ApprovalDecision::AllowOnce)]);
        let (dir, target) = (harness.tree.path("d"), outside.path().to_path_buf());
        *approver.on_request.lock().unwrap() =
            Some(Box::new(move || swap_for_symlink(&dir, &target)));
        harness.approver(approver.clone());
        let results = harness.run(vec![call.clone()]).await;
        assert_eq!(approver.requests().len(), 1, "{}: asked once", call.name);
        let result = &results[0].result;
        assert!(!result.ok, "{}: {result:?}", call.name);
        assert!(
            result
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("changed after it was checked"),
            "{}: {result:?}",
            call.name
        );
        assert!(
            !result.content.contains("outside"),
            "{}: read outside",
            call.name
        );
        assert!(
            !outside.path().join("new.txt").exists(),
            "{}: wrote outside",
            call.name
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("old.txt")).unwrap(),
            "outside before\n",
            "{}: edited outside",
            call.name
        );
    }
}

/// A directory flipping between itself and a symlink out of the roots while writes go into it:
/// not one byte may land outside. `TOOLD_RACE_ITERATIONS` sets the writes (default 2,000; the
/// documented full run is 10,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_racing_a_symlink_swap_never_land_outside_the_roots() {
    use std::sync::atomic::AtomicBool;
    let iterations: usize = std::env::var("TOOLD_RACE_ITERATIONS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(2_000);
    let outside = tempfile::tempdir().unwrap();
    let harness = Harness::new(
        &[("d/keep", "")],
        Rules::default(),
        SessionMode::AcceptEdits,
    );
    let dir = harness.tree.path("d");
    let stop = Arc::new(AtomicBool::new(false));
    // `d` and a symlink to `outside` trade names atomically (RENAME_EXCHANGE), so `d` is never
    // missing: every write meets either the real directory or the link.
    let link = harness.tree.path("d_link");
    std::os::unix::fs::symlink(outside.path(), &link).unwrap();
    let flipper = {
        let (dir, link, stop) = (dir.clone(), link.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &dir,
                    nix::fcntl::AT_FDCWD,
                    &link,
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                flips += 1;
                std::thread::yield_now();
            }
            flips
        })
    };
    let (mut written, mut refused) = (0, 0);
    for index in 0..iterations {
        let path = format!("d/f{index}.txt");
        let results = harness
            .run(vec![call(
                "w",
                "write_file",
                json!({"path": path, "content": "x"}),
            )])
            .await;
        if results[0].result.ok {
            written += 1;
        } else {
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    let landed: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(landed.is_empty(), "written outside the roots: {landed:?}");
    eprintln!("{iterations} writes: {written} inside, {refused} refused, 0 outside; {flips} flips");
    assert!(
        flips > 0 && written > 0,
        "the race ran: {flips} flips, {written} written, {refused} refused"
    );
}
