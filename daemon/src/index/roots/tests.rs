//! The indexes of several roots on real directories: an ancestor's index answers for the
//! directories it holds (an ignored one gets its own), the least recently used index goes
//! when the budget or the number of roots is passed, an unused one after `idle_evict`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{ColdReason, IndexConfig, Indexes};

fn tree(files: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for file in files {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x").unwrap();
    }
    (dir, root)
}

/// The files under `root` once its index (or an ancestor's) answers, waiting for the build.
fn files(indexes: &Indexes, root: &Path) -> Vec<String> {
    let started = Instant::now();
    loop {
        let listed = indexes.with_files(root, false, |listing| {
            let mut files = Vec::new();
            listing.walk(&mut |_, _, _| true, |relative, _, _, _| {
                files.push(relative.display().to_string());
                true
            });
            files
        });
        match listed {
            Ok(files) => return files,
            Err(ColdReason::Building) => {}
            Err(reason) => panic!("{}: cold, {}", root.display(), reason.as_str()),
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never ready");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn roots(indexes: &Indexes) -> Vec<PathBuf> {
    indexes.status().into_iter().map(|root| root.root).collect()
}

#[test]
fn an_ancestor_answers_for_the_directories_it_holds() {
    let (_dir, root) = tree(&[".gitignore", "src/a.rs", "src/deep/b.rs", "target/out.rs"]);
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    let indexes = Indexes::default();
    assert_eq!(
        files(&indexes, &root),
        [".gitignore", "src/a.rs", "src/deep/b.rs"]
    );
    assert_eq!(files(&indexes, &root.join("src")), ["a.rs", "deep/b.rs"]);
    assert_eq!(
        roots(&indexes),
        std::slice::from_ref(&root),
        "no index of its own for src"
    );
    // Ignored by the root's walk, listed by a walk that starts there: an index of its own.
    assert_eq!(files(&indexes, &root.join("target")), ["out.rs"]);
    assert_eq!(roots(&indexes), [root.clone(), root.join("target")]);
}

#[test]
fn over_the_budget_the_least_recently_used_goes() {
    let (_first_dir, first) = tree(&["a/1.rs", "a/2.rs", "b/3.rs"]);
    let (_second_dir, second) = tree(&["c/4.rs", "c/5.rs", "d/6.rs"]);
    let probe = Indexes::default();
    files(&probe, &first);
    let one = probe.status()[0].memory_bytes;
    // Room for one of the two lists, not both.
    let indexes = Indexes::new(IndexConfig {
        max_memory_bytes: one * 3 / 2,
        ..IndexConfig::default()
    });
    files(&indexes, &first);
    files(&indexes, &second);
    assert_eq!(
        roots(&indexes),
        std::slice::from_ref(&second),
        "the first was evicted"
    );
    // Alone over the budget: cold, and said so.
    let small = Indexes::new(IndexConfig {
        max_memory_bytes: one / 2,
        ..IndexConfig::default()
    });
    let started = Instant::now();
    loop {
        match small.with_files(&first, false, |_| ()) {
            Err(ColdReason::MemoryBudget) => break,
            Err(ColdReason::Building) => {}
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(small.status()[0].state, "cold");
}

#[test]
fn an_unused_index_goes_after_idle_evict() {
    let (_dir, root) = tree(&["a.rs"]);
    let indexes = Indexes::new(IndexConfig {
        idle_evict: Duration::from_millis(50),
        ..IndexConfig::default()
    });
    files(&indexes, &root);
    assert_eq!(roots(&indexes).len(), 1);
    std::thread::sleep(Duration::from_millis(100));
    indexes.evict_idle(&indexes.config());
    assert!(roots(&indexes).is_empty());
}

#[test]
fn past_the_most_roots_the_least_recently_used_goes() {
    let (_dir, root) = tree(&[]);
    let indexes = Indexes::default();
    for n in 0..=super::MAX_ROOTS {
        let dir = root.join(format!("r{n:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        files(&indexes, &dir);
    }
    let kept = roots(&indexes);
    assert_eq!(kept.len(), super::MAX_ROOTS);
    assert!(!kept.contains(&root.join("r00")), "the first went");
}
