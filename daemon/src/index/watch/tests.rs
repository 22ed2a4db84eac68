//! The root watch on real directories: every kind of change the warm index must see shows up
//! at the next barrier, with no sleep in between; an idle tree shows nothing; a lost root, an
//! overflowing queue and a directory that cannot be watched ask for a rebuild.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{Rebuild, RootWatch};

fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().canonicalize().unwrap().join("root");
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    (dir, root)
}

/// Watches every directory under `root`, each before it is read, as the walker does.
fn watch_all(watch: &mut RootWatch, dir: &Path) {
    watch.watch_dir(dir).expect("watched");
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            watch_all(watch, &entry.path());
        }
    }
}

fn watched(root: &Path) -> RootWatch {
    let mut watch = RootWatch::new(root, usize::MAX).unwrap();
    watch_all(&mut watch, root);
    assert!(
        watch.barrier().unwrap().is_empty(),
        "an idle tree shows nothing"
    );
    watch
}

/// A change made to the tree.
type Change = Box<dyn Fn(&Path)>;

#[test]
fn every_change_shows_at_the_next_barrier() {
    let (_dir, root) = tree();
    let mut watch = watched(&root);
    assert_eq!(watch.watched(), 3);
    let cases: Vec<(&str, Change, Vec<&str>)> = vec![
        (
            "create",
            Box::new(|root| std::fs::write(root.join("src/b.rs"), "b").unwrap()),
            vec!["src/b.rs"],
        ),
        (
            "modify",
            Box::new(|root| std::fs::write(root.join("src/a.rs"), "changed").unwrap()),
            vec!["src/a.rs"],
        ),
        (
            "delete",
            Box::new(|root| std::fs::remove_file(root.join("src/b.rs")).unwrap()),
            vec!["src/b.rs"],
        ),
        (
            "atomic save",
            Box::new(|root| {
                std::fs::write(root.join("src/.a.rs.tmp"), "saved").unwrap();
                std::fs::rename(root.join("src/.a.rs.tmp"), root.join("src/a.rs")).unwrap();
            }),
            vec!["src/.a.rs.tmp", "src/a.rs"],
        ),
        (
            "mkdir -p and a write at once",
            Box::new(|root| {
                std::fs::create_dir_all(root.join("x/y/z")).unwrap();
                std::fs::write(root.join("x/y/z/f"), "x").unwrap();
            }),
            vec!["x"],
        ),
        (
            "a directory renamed",
            Box::new(|root| {
                std::fs::rename(root.join("src/deep"), root.join("src/shallow")).unwrap()
            }),
            vec!["src/deep", "src/shallow"],
        ),
        (
            "chmod 000",
            Box::new(|root| {
                std::fs::set_permissions(
                    root.join("src/a.rs"),
                    std::fs::Permissions::from_mode(0o000),
                )
                .unwrap()
            }),
            vec!["src/a.rs"],
        ),
        (
            "a symlink swapped",
            Box::new(|root| {
                std::os::unix::fs::symlink("a.rs", root.join("src/link")).unwrap();
                std::fs::remove_file(root.join("src/link")).unwrap();
                std::os::unix::fs::symlink("/etc", root.join("src/link")).unwrap();
            }),
            vec!["src/link"],
        ),
    ];
    for (what, change, expected) in cases {
        change(&root);
        let changes = watch.barrier().unwrap();
        assert_eq!(changes.rebuild, None, "{what}");
        for path in expected {
            assert!(
                changes.paths.contains(&root.join(path)),
                "{what}: {path} not in {:?}",
                changes.paths
            );
        }
        assert!(watch.barrier().unwrap().is_empty(), "{what}: drained");
    }
}

#[test]
fn a_lost_root_asks_for_a_rebuild() {
    let (dir, root) = tree();
    let mut watch = watched(&root);
    std::fs::rename(&root, dir.path().join("moved")).unwrap();
    assert_eq!(watch.barrier().unwrap().rebuild, Some(Rebuild::RootGone));

    let (dir, root) = tree();
    let mut watch = watched(&root);
    std::fs::remove_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(dir.path(), &root).unwrap();
    assert_eq!(watch.barrier().unwrap().rebuild, Some(Rebuild::RootGone));
}

#[test]
fn a_directory_past_the_watch_limit_asks_for_a_rebuild() {
    let (_dir, root) = tree();
    let mut watch = RootWatch::new(&root, 2).unwrap();
    watch.watch_dir(&root).unwrap();
    watch.watch_dir(&root.join("src")).unwrap();
    assert!(watch.watch_dir(&root.join("src/deep")).is_err());
    assert_eq!(watch.barrier().unwrap().rebuild, Some(Rebuild::Unwatched));
    assert!(watch.barrier().unwrap().is_empty(), "said once");
    // A directory that is gone is no reason to rebuild: its parent's watch reports it.
    let mut watch = watched(&root);
    assert!(watch.watch_dir(&root.join("no-such-dir")).is_err());
    assert!(watch.barrier().unwrap().is_empty());
}

#[test]
fn an_overflowing_queue_asks_for_a_rebuild() {
    let (_dir, root) = tree();
    let mut watch = watched(&root);
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(16_384);
    // Each create and its close make events: past the queue's length the kernel drops them.
    for n in 0..(limit + 100) {
        std::fs::write(root.join(format!("f{n}")), "").unwrap();
    }
    assert_eq!(watch.barrier().unwrap().rebuild, Some(Rebuild::Overflow));
}
