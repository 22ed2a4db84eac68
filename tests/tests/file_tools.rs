//! read_file, write_file and edit_file on real files, through the registry's execution boundary.

use std::io::BufRead;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use toold_tests::{Tree, call, error_type_or_ok};

#[tokio::test]
async fn read_file_returns_the_text_and_its_metadata() {
    let tree = Tree::new(&[("src/a.txt", "one\ntwo\nthree")]);
    let result = call(tree.env(), "read_file", json!({"path": "src/a.txt"})).await;
    assert_eq!(error_type_or_ok(&result), "ok");
    assert_eq!(result.content, "one\ntwo\nthree");
    assert_eq!(result.tool, "read_file");
    assert_eq!(result.metadata["call_id"], "call_1");
    assert_eq!(
        result.metadata["path"],
        tree.path("src/a.txt").display().to_string()
    );
    assert_eq!(result.metadata["total_lines"], 3);
    assert_eq!(result.metadata["truncated"], false);
}

#[tokio::test]
async fn read_file_takes_a_window_of_lines() {
    let lines: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    let tree = Tree::new(&[("a.txt", &lines)]);
    let result = call(
        tree.env(),
        "read_file",
        json!({"path": "a.txt", "offset": 3, "limit": 2}),
    )
    .await;
    assert_eq!(result.content, "line 3\nline 4\n");
    assert_eq!(result.metadata["total_lines"], 10);
    assert_eq!(result.metadata["truncated"], false);
    let tail = call(
        tree.env(),
        "read_file",
        json!({"path": "a.txt", "offset": 9}),
    )
    .await;
    assert_eq!(tail.content, "line 9\nline 10\n");
    let past = call(
        tree.env(),
        "read_file",
        json!({"path": "a.txt", "offset": 11}),
    )
    .await;
    assert_eq!(error_type_or_ok(&past), "invalid_arguments");
    assert!(
        past.error.as_deref().unwrap().contains("past the end"),
        "{past:?}"
    );
}

#[tokio::test]
async fn read_file_cuts_at_max_read_bytes_and_says_where_to_go_on() {
    let lines: String = (1..=1000).map(|n| format!("line {n:04}\n")).collect();
    let tree = Tree::new(&[("big.txt", &lines)]);
    let mut env = tree.env();
    env.max_read_bytes = 100;
    let result = call(env.clone(), "read_file", json!({"path": "big.txt"})).await;
    assert_eq!(error_type_or_ok(&result), "ok");
    assert_eq!(result.metadata["truncated"], true);
    assert_eq!(result.metadata["total_lines"], 1000);
    // Ten lines of ten bytes fit exactly; the cut falls on a line boundary.
    assert_eq!(result.content, lines[..100]);
    assert_eq!(result.metadata["next_offset"], 11);

    let one_long_line = "é".repeat(100);
    tree.write("long.txt", &one_long_line);
    let long = call(env, "read_file", json!({"path": "long.txt"})).await;
    assert_eq!(long.metadata["truncated"], true);
    assert_eq!(long.content, "é".repeat(50), "cut at a character boundary");
}

#[tokio::test]
async fn read_file_refuses_missing_files_directories_and_binaries() {
    let tree = Tree::new(&[("dir/x", "x")]);
    std::fs::write(tree.path("blob.bin"), b"ELF\0\x01\x02").unwrap();
    let missing = call(tree.env(), "read_file", json!({"path": "nope.txt"})).await;
    assert_eq!(error_type_or_ok(&missing), "not_found");
    assert!(
        missing
            .error
            .as_deref()
            .unwrap()
            .contains("nope.txt does not exist")
    );
    let dir = call(tree.env(), "read_file", json!({"path": "dir"})).await;
    assert_eq!(error_type_or_ok(&dir), "is_directory");
    let binary = call(tree.env(), "read_file", json!({"path": "blob.bin"})).await;
    assert_eq!(error_type_or_ok(&binary), "binary_file");
    assert!(binary.error.as_deref().unwrap().contains("binary"));
}

#[tokio::test]
async fn read_file_reads_large_files_whole_and_refuses_fifos_and_devices_at_once() {
    // Past the size read on the calling task: the blocking pool reads it, with the same result.
    let lines: String = (1..=20_000).map(|n| format!("line {n:05}\n")).collect();
    let tree = Tree::new(&[("large.txt", &lines)]);
    let large = call(tree.env(), "read_file", json!({"path": "large.txt"})).await;
    assert_eq!(error_type_or_ok(&large), "ok");
    assert_eq!(large.content, lines);
    assert_eq!(large.metadata["total_lines"], 20_000);

    // A FIFO without a writer would block an ordinary open forever; /dev/zero never ends.
    nix::unistd::mkfifo(&tree.path("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let mut env = tree.env();
    env.timeout_ms = 60_000;
    for path in [tree.path("pipe"), "/dev/zero".into()] {
        let started = std::time::Instant::now();
        let refused = call(
            env.clone(),
            "read_file",
            json!({"path": path.display().to_string()}),
        )
        .await;
        assert_eq!(
            error_type_or_ok(&refused),
            "invalid_arguments",
            "{refused:?}"
        );
        assert!(
            refused
                .error
                .as_deref()
                .unwrap()
                .contains("not a regular file"),
            "{refused:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "refused at once"
        );
    }
    // edit_file reads the whole file first: a device would never end.
    let started = std::time::Instant::now();
    let edit = call(
        env,
        "edit_file",
        json!({"path": "/dev/zero", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&edit), "invalid_arguments", "{edit:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused at once"
    );
}

#[tokio::test]
async fn read_file_replaces_invalid_utf8_and_counts_a_last_line_without_newline() {
    let tree = Tree::new(&[]);
    std::fs::write(tree.path("latin1.txt"), b"caf\xe9\nend").unwrap();
    let result = call(tree.env(), "read_file", json!({"path": "latin1.txt"})).await;
    assert_eq!(result.content, "caf\u{fffd}\nend");
    assert_eq!(result.metadata["total_lines"], 2);
    std::fs::write(tree.path("empty.txt"), b"").unwrap();
    let empty = call(tree.env(), "read_file", json!({"path": "empty.txt"})).await;
    assert_eq!(
        (error_type_or_ok(&empty), empty.content.as_str()),
        ("ok".into(), "")
    );
    assert_eq!(empty.metadata["total_lines"], 0);
}

#[tokio::test]
async fn write_file_creates_parents_and_reports_it() {
    let tree = Tree::new(&[]);
    let result = call(
        tree.env(),
        "write_file",
        json!({"path": "a/b/c.txt", "content": "hello"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "ok", "{result:?}");
    assert_eq!(tree.read("a/b/c.txt"), "hello");
    assert_eq!(result.metadata["bytes"], 5);
    assert_eq!(result.metadata["created"], true);
    let again = call(
        tree.env(),
        "write_file",
        json!({"path": "a/b/c.txt", "content": "bye"}),
    )
    .await;
    assert_eq!(again.metadata["created"], false);
    assert_eq!(tree.read("a/b/c.txt"), "bye");
    let leftovers: Vec<_> = std::fs::read_dir(tree.path("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec!["c.txt"], "no temporary file is left behind");
}

#[tokio::test]
async fn write_file_keeps_an_existing_mode_and_gives_new_files_the_umask_mode() {
    let tree = Tree::new(&[("run.sh", "#!/bin/sh\n")]);
    std::fs::set_permissions(tree.path("run.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    let result = call(
        tree.env(),
        "write_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "ok");
    let mode = std::fs::metadata(tree.path("run.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(format!("{mode:o}"), "751");

    call(
        tree.env(),
        "write_file",
        json!({"path": "new.txt", "content": "x"}),
    )
    .await;
    std::fs::File::create(tree.path("reference.txt")).unwrap();
    let mode_of = |name: &str| {
        std::fs::metadata(tree.path(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(
        format!("{:o}", mode_of("new.txt")),
        format!("{:o}", mode_of("reference.txt"))
    );
}

#[tokio::test]
async fn write_file_through_a_symlink_replaces_the_target_and_keeps_the_link() {
    let tree = Tree::new(&[("real/target.txt", "old")]);
    symlink(tree.path("real/target.txt"), tree.path("link.txt")).unwrap();
    let result = call(
        tree.env(),
        "write_file",
        json!({"path": "link.txt", "content": "new"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "ok");
    assert!(
        std::fs::symlink_metadata(tree.path("link.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(tree.read("real/target.txt"), "new");
}

#[tokio::test]
async fn write_file_refuses_a_directory_and_bad_arguments() {
    let tree = Tree::new(&[("dir/x", "x")]);
    let dir = call(
        tree.env(),
        "write_file",
        json!({"path": "dir", "content": "x"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&dir), "is_directory");
    let missing = call(tree.env(), "write_file", json!({"path": "x.txt"})).await;
    assert_eq!(error_type_or_ok(&missing), "invalid_arguments");
    let errors = missing.metadata["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]["message"].as_str().unwrap().contains("content"),
        "{errors:?}"
    );
    let wrong_type = call(
        tree.env(),
        "write_file",
        json!({"path": "x.txt", "content": 5}),
    )
    .await;
    assert_eq!(error_type_or_ok(&wrong_type), "invalid_arguments");
    assert_eq!(wrong_type.metadata["errors"][0]["pointer"], "/content");
}

/// A writer killed at random moments, again and again, never leaves the file torn or empty:
/// each time the file holds one whole version.
#[test]
fn write_file_is_atomic_under_kill_9() {
    let tree = Tree::new(&[]);
    let size = 4 * 1024 * 1024;
    let whole = |fill: char| {
        let mut text = fill.to_string().repeat(size - 5);
        text.push_str("\nEND\n");
        text
    };
    let (version_a, version_b) = (whole('a'), whole('b'));
    std::fs::write(tree.path("target.txt"), &version_a).unwrap();
    let mut seen_b = false;
    for round in 0..25u64 {
        let mut writer = std::process::Command::new(env!("CARGO_BIN_EXE_write-loop"))
            .args([
                tree.root().to_str().unwrap(),
                "target.txt",
                &size.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Let one to three writes complete, then kill at a different moment each round: early
        // in the next write, mid-rename, between writes.
        let mut reports = std::io::BufReader::new(writer.stdout.take().unwrap()).lines();
        for _ in 0..=(round % 3) {
            assert_eq!(reports.next().unwrap().unwrap(), "wrote");
        }
        std::thread::sleep(Duration::from_millis((round * 7) % 40));
        writer.kill().unwrap();
        writer.wait().unwrap();
        let on_disk = std::fs::read_to_string(tree.path("target.txt")).unwrap();
        assert!(
            on_disk == version_a || on_disk == version_b,
            "round {round}: a torn file of {} bytes",
            on_disk.len()
        );
        seen_b |= on_disk == version_b;
    }
    assert!(
        seen_b,
        "the writer never completed a write: the test proved nothing"
    );
}

#[tokio::test]
async fn edit_file_replaces_one_occurrence_and_shows_a_diff() {
    let tree = Tree::new(&[("src/lib.rs", "fn a() {}\nfn b() {}\nfn c() {}\n")]);
    let result = call(
        tree.env(),
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn b() {}", "new_string": "fn beta() {}"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "ok", "{result:?}");
    assert_eq!(
        tree.read("src/lib.rs"),
        "fn a() {}\nfn beta() {}\nfn c() {}\n"
    );
    assert_eq!(result.metadata["replacements"], 1);
    let path = tree.path("src/lib.rs").display().to_string();
    assert_eq!(
        result.content,
        format!(
            "--- {path}\n+++ {path}\n@@ -1,3 +1,3 @@\n fn a() {{}}\n-fn b() {{}}\n+fn beta() {{}}\n fn c() {{}}\n"
        )
    );
}

#[tokio::test]
async fn edit_file_refuses_ambiguous_or_missing_text_and_changes_nothing() {
    let original = "x = 1\nx = 1\nx = 1\n";
    let tree = Tree::new(&[("f.py", original)]);
    let ambiguous = call(
        tree.env(),
        "edit_file",
        json!({"path": "f.py", "old_string": "x = 1", "new_string": "x = 2"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&ambiguous), "not_unique");
    assert_eq!(ambiguous.metadata["matches"], 3);
    assert!(ambiguous.error.as_deref().unwrap().contains("3 places"));
    let absent = call(
        tree.env(),
        "edit_file",
        json!({"path": "f.py", "old_string": "y = 1", "new_string": "y = 2"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&absent), "not_found");
    let no_file = call(
        tree.env(),
        "edit_file",
        json!({"path": "g.py", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&no_file), "not_found");
    assert_eq!(tree.read("f.py"), original);

    let all = call(
        tree.env(),
        "edit_file",
        json!({"path": "f.py", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}),
    )
    .await;
    assert_eq!(error_type_or_ok(&all), "ok");
    assert_eq!(all.metadata["replacements"], 3);
    assert_eq!(tree.read("f.py"), "x = 2\nx = 2\nx = 2\n");
}

#[tokio::test]
async fn edit_file_refuses_edits_that_change_nothing() {
    let tree = Tree::new(&[("f.txt", "abc")]);
    let empty = call(
        tree.env(),
        "edit_file",
        json!({"path": "f.txt", "old_string": "", "new_string": "x"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&empty), "invalid_arguments");
    let same = call(
        tree.env(),
        "edit_file",
        json!({"path": "f.txt", "old_string": "b", "new_string": "b"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&same), "invalid_arguments");
    std::fs::write(tree.path("bin"), b"a\0b").unwrap();
    let binary = call(
        tree.env(),
        "edit_file",
        json!({"path": "bin", "old_string": "a", "new_string": "c"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&binary), "binary_file");
    assert_eq!(tree.read("f.txt"), "abc");
}

#[tokio::test]
async fn edit_file_keeps_the_mode() {
    let tree = Tree::new(&[("run.sh", "echo a\n")]);
    std::fs::set_permissions(tree.path("run.sh"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let result = call(
        tree.env(),
        "edit_file",
        json!({"path": "run.sh", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&result), "ok");
    let mode = std::fs::metadata(tree.path("run.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(format!("{mode:o}"), "700");
}

#[tokio::test]
async fn a_path_through_a_regular_file_is_an_io_error() {
    let tree = Tree::new(&[("a.txt", "x")]);
    let write = call(
        tree.env(),
        "write_file",
        json!({"path": "a.txt/b.txt", "content": "y"}),
    )
    .await;
    assert_eq!(error_type_or_ok(&write), "io_error", "{write:?}");
    assert!(
        write.error.as_deref().unwrap().contains("a.txt"),
        "{write:?}"
    );
    let read = call(tree.env(), "read_file", json!({"path": "a.txt/b.txt"})).await;
    assert_eq!(error_type_or_ok(&read), "io_error", "{read:?}");
    assert!(
        read.error.as_deref().unwrap().contains("Not a directory"),
        "{read:?}"
    );
}
