//! The file list kept current from the watch, on real directories: after every change of a
//! random churn (creates, deletes, renames of files and directories, atomic saves,
//! `mkdir -p` and a write at once, symlink swaps, mode changes, ignore file edits at every
//! level), with no sleep before the barrier, the list equals a fresh walk's.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use toold_protocol::sync::LockUnpoisoned;

use super::{FileList, Limits};
use crate::index::watch::RootWatch;

fn limits() -> Limits {
    Limits {
        max_bytes: usize::MAX,
        stop: Arc::new(AtomicBool::new(false)),
    }
}

/// Every file and directory of the list, relative to the root, directories marked with a
/// trailing `/`.
fn contents(list: &FileList) -> BTreeSet<String> {
    let seen = std::cell::RefCell::new(BTreeSet::new());
    list.walk(
        |relative, _| {
            seen.borrow_mut().insert(format!("{}/", relative.display()));
            true
        },
        |relative, _| {
            seen.borrow_mut().insert(relative.display().to_string());
            true
        },
    );
    seen.into_inner()
}

/// A fresh list of `root`, and the watch it made.
fn fresh(root: &Path) -> (FileList, Arc<Mutex<RootWatch>>) {
    let watch = Arc::new(Mutex::new(RootWatch::new(root, usize::MAX).unwrap()));
    let list = FileList::build(root, &watch, &limits()).unwrap();
    (list, watch)
}

/// Brings `list` up to date and checks it against a fresh walk.
fn check(list: &mut FileList, watch: &Arc<Mutex<RootWatch>>, what: &str) {
    let changes = watch.lock_unpoisoned().barrier().unwrap();
    assert_eq!(changes.rebuild, None, "{what}: no rebuild asked");
    list.apply(&changes.paths, watch, &limits()).unwrap();
    let (expected, _) = fresh(list.root());
    assert_eq!(contents(list), contents(&expected), "after {what}");
    assert_eq!(list.files(), expected.files(), "{what}: the count");
    assert_eq!(
        list.memory_bytes(),
        expected.memory_bytes(),
        "{what}: the memory"
    );
}

/// A change made to the tree.
type Step = Box<dyn Fn(&Path)>;

/// A small generator, so that a failing sequence can be replayed from its seed.
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("root");
    for (path, text) in [
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib/a.rs", "a\n"),
        ("src/lib/b.rs", "b\n"),
        ("docs/readme.md", "doc\n"),
        (".hidden/x.txt", "x\n"),
        ("target/debug/out.o", "o\n"),
        (".gitignore", "target/\n*.log\n"),
        ("vendor/.ignore", "gen/\n"),
        ("vendor/gen/g.rs", "g\n"),
        ("vendor/keep.rs", "k\n"),
        (".git/info/exclude", "excluded/\n"),
        (".git/HEAD", "ref\n"),
    ] {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    (dir, root)
}

#[test]
fn the_walk_comes_in_the_order_paths_are_shown() {
    let (_dir, root) = tree();
    for path in ["a-b/x", "a/x", "a.rs", "a/b/c", "b", "A", "a0"] {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }
    let (list, _watch) = fresh(&root);
    let mut seen = Vec::new();
    list.walk(
        |_, _| true,
        |relative, _| {
            seen.push(relative.display().to_string());
            true
        },
    );
    let mut sorted = seen.clone();
    sorted.sort_by(|left, right| super::path_order(left, right));
    assert_eq!(seen, sorted);
}

#[test]
fn the_list_is_what_the_walk_decides() {
    let (_dir, root) = tree();
    let (list, watch) = fresh(&root);
    let seen = contents(&list);
    for present in [
        "src/main.rs",
        ".hidden/x.txt",
        ".gitignore",
        "vendor/keep.rs",
        "vendor/.ignore",
    ] {
        assert!(seen.contains(present), "{present} in {seen:?}");
    }
    for absent in ["target/", "target/debug/out.o", "vendor/gen/g.rs", ".git/"] {
        assert!(!seen.contains(absent), "{absent} in {seen:?}");
    }
    assert_eq!(list.git_dirs().count(), 1);
    // Every directory entered is watched, and none besides.
    let entered = seen.iter().filter(|entry| entry.ends_with('/')).count();
    assert_eq!(watch.lock_unpoisoned().watched(), entered + 1);
}

#[test]
fn each_kind_of_change_keeps_the_list_exact() {
    let (dir, root) = tree();
    let (mut list, watch) = fresh(&root);
    let steps: Vec<(&str, Step)> = vec![
        (
            "create",
            Box::new(|root| std::fs::write(root.join("src/new.rs"), "n").unwrap()),
        ),
        (
            "delete",
            Box::new(|root| std::fs::remove_file(root.join("src/new.rs")).unwrap()),
        ),
        (
            "mkdir -p and a write",
            Box::new(|root| {
                std::fs::create_dir_all(root.join("a/b/c")).unwrap();
                std::fs::write(root.join("a/b/c/f"), "x").unwrap();
            }),
        ),
        (
            "rename a directory",
            Box::new(|root| std::fs::rename(root.join("a"), root.join("z")).unwrap()),
        ),
        (
            "move a directory under another",
            Box::new(|root| std::fs::rename(root.join("z"), root.join("src/lib/z")).unwrap()),
        ),
        (
            "atomic save",
            Box::new(|root| {
                std::fs::write(root.join("src/.main.rs.tmp"), "saved").unwrap();
                std::fs::rename(root.join("src/.main.rs.tmp"), root.join("src/main.rs")).unwrap();
            }),
        ),
        (
            "a directory swapped for a symlink",
            Box::new(|root| {
                std::fs::rename(root.join("docs"), root.join("docs.old")).unwrap();
                std::os::unix::fs::symlink(root.join("src"), root.join("docs")).unwrap();
            }),
        ),
        (
            "the symlink swapped back",
            Box::new(|root| {
                std::fs::remove_file(root.join("docs")).unwrap();
                std::fs::rename(root.join("docs.old"), root.join("docs")).unwrap();
            }),
        ),
        (
            "chmod 000",
            Box::new(|root| {
                std::fs::set_permissions(root.join("docs"), PermissionsExt::from_mode(0o000))
                    .unwrap();
            }),
        ),
        (
            "chmod 755",
            Box::new(|root| {
                std::fs::set_permissions(root.join("docs"), PermissionsExt::from_mode(0o755))
                    .unwrap();
            }),
        ),
        (
            "an ignore file edited",
            Box::new(|root| std::fs::write(root.join("vendor/.ignore"), "keep.rs\n").unwrap()),
        ),
        (
            "an ignore file removed",
            Box::new(|root| std::fs::remove_file(root.join("vendor/.ignore")).unwrap()),
        ),
        (
            "the root's .gitignore edited",
            Box::new(|root| std::fs::write(root.join(".gitignore"), "*.md\n").unwrap()),
        ),
        (
            "a nested .gitignore created",
            Box::new(|root| std::fs::write(root.join("src/.gitignore"), "lib/\n").unwrap()),
        ),
        (
            "rm -rf",
            Box::new(|root| std::fs::remove_dir_all(root.join("src")).unwrap()),
        ),
        (
            "a file becomes a directory",
            Box::new(|root| {
                std::fs::remove_file(root.join("vendor/keep.rs")).unwrap();
                std::fs::create_dir(root.join("vendor/keep.rs")).unwrap();
                std::fs::write(root.join("vendor/keep.rs/inner"), "i").unwrap();
            }),
        ),
    ];
    for (what, step) in steps {
        step(&root);
        check(&mut list, &watch, what);
    }
    drop(dir);
}

#[test]
fn a_random_churn_keeps_the_list_exact() {
    let (_dir, root) = tree();
    let (mut list, watch) = fresh(&root);
    let seed = std::env::var("TOOLD_CHURN_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x5eed_u64);
    let mut random = Random(seed);
    let dirs = [
        "", "src", "src/lib", "docs", ".hidden", "vendor", "target", "n1", "n1/n2",
    ];
    let names = ["a.rs", "b.md", ".c", "d.log", "e", "gen"];
    for step in 0..400 {
        let dir = root.join(dirs[random.below(dirs.len())]);
        let name = names[random.below(names.len())];
        let path = dir.join(name);
        let what = match random.below(9) {
            0 | 1 => {
                std::fs::create_dir_all(&dir).unwrap();
                let _ = std::fs::write(&path, "x");
                "create"
            }
            2 => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_dir_all(&path);
                "delete"
            }
            3 => {
                let other = root
                    .join(dirs[random.below(dirs.len())])
                    .join(names[random.below(names.len())]);
                let _ = std::fs::rename(&path, &other);
                "rename"
            }
            4 => {
                let _ = std::fs::create_dir_all(path.join("p/q"));
                let _ = std::fs::write(path.join("p/q/f"), "f");
                "mkdir -p and a write"
            }
            5 => {
                std::fs::create_dir_all(&dir).unwrap();
                let temp = dir.join(".save.tmp");
                std::fs::write(&temp, "saved").unwrap();
                let _ = std::fs::rename(&temp, &path);
                "atomic save"
            }
            6 => {
                std::fs::create_dir_all(&dir).unwrap();
                let patterns = ["", "*.md\n", "gen/\n", "!b.md\n*.md\n", "p/\n", "*.rs\n"];
                let ignore = if random.below(2) == 0 {
                    ".gitignore"
                } else {
                    ".ignore"
                };
                let _ = std::fs::write(dir.join(ignore), patterns[random.below(patterns.len())]);
                "an ignore file edited"
            }
            7 => {
                let link = dir.join("link");
                let _ = std::fs::remove_file(&link);
                let _ = std::fs::remove_dir_all(&link);
                if random.below(2) == 0 {
                    let _ = std::os::unix::fs::symlink(&root, &link);
                } else {
                    let _ = std::fs::create_dir_all(link.join("real"));
                }
                "a symlink swap"
            }
            _ => {
                std::fs::create_dir_all(&dir).unwrap();
                let temp = root.join(format!("moving{step}"));
                let _ = std::fs::create_dir_all(temp.join("inside"));
                let _ = std::fs::write(temp.join("inside/f.rs"), "f");
                let _ = std::fs::rename(&temp, dir.join(format!("moved{step}")));
                "a directory moved in"
            }
        };
        check(
            &mut list,
            &watch,
            &format!("step {step} ({what} at {})", path.display()),
        );
    }
}
