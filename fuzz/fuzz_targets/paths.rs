//! Fuzz target for path judging: arbitrary path arguments resolved against a fixed tree with
//! symlinks (out of the root, relative with `..`, dangling, a loop, a chain).
//!
//! Invariants: no panic; both forms are absolute with no `.` or `..` component; the lexical
//! form equals a reference made by string splitting; a root-judgement is a prefix test on
//! each form; and where the kernel resolves the path (`canonicalize` succeeds, inside the
//! tree) the resolved form is what the kernel says.
#![no_main]

use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toold::paths::{absolute, normalize_lexically, resolve, resolve_symlinks};

struct World {
    _dir: tempfile::TempDir,
    base: PathBuf,
    cwd: PathBuf,
    roots: Vec<PathBuf>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path().canonicalize().expect("it resolves");
        let root = base.join("root");
        let cwd = root.join("a");
        for sub in ["root/a/b/c", "root/d", "outside/x", "home/me"] {
            std::fs::create_dir_all(base.join(sub)).expect("the tree");
        }
        std::fs::write(root.join("file"), "").expect("a file");
        std::fs::write(base.join("outside/secret"), "").expect("a file outside");
        let links = [
            ("root/out", base.join("outside").into_os_string()),
            ("root/a/up", "../d".into()),
            ("root/a/b/deep", "../../../outside/x".into()),
            ("root/dangling", "missing/new.txt".into()),
            ("root/loop1", "loop2".into()),
            ("root/loop2", "loop1".into()),
            ("root/chain", "a/up".into()),
            ("root/self", ".".into()),
            ("home/me/root", base.join("root").into_os_string()),
            ("alias", "root".into()),
        ];
        for (link, target) in links {
            symlink(target, base.join(link)).expect("a symlink");
        }
        // `~` is this tree's home; the fuzzer runs single-threaded, before any read of HOME.
        // SAFETY: no other thread exists yet to read the environment concurrently.
        unsafe { std::env::set_var("HOME", base.join("home/me")) };
        let roots = vec![root, base.join("alias/d")];
        World {
            _dir: dir,
            base,
            cwd,
            roots,
        }
    })
}

/// The lexical form by string splitting: `~`, `~/…` from HOME, relative from the cwd, then
/// `.` dropped and `..` popping (never above `/`).
fn reference_lexical(raw: &str, cwd: &Path, home: &Path) -> PathBuf {
    let joined = if raw == "~" {
        home.to_string_lossy().into_owned()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        format!("{}/{rest}", home.to_string_lossy())
    } else if raw.starts_with('/') {
        raw.to_owned()
    } else {
        format!("{}/{raw}", cwd.to_string_lossy())
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    PathBuf::from(format!("/{}", parts.join("/")))
}

fn assert_plain_absolute(path: &Path, what: &str, raw: &str) {
    assert!(path.is_absolute(), "{what} {path:?} of {raw:?} is relative");
    assert!(
        path.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{what} {path:?} of {raw:?} has a . or .. component"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let world = world();
    let judged = resolve(raw, &world.cwd, &world.roots);
    assert_plain_absolute(&judged.lexical, "the lexical form", raw);
    assert_plain_absolute(&judged.resolved, "the resolved form", raw);

    let home = world.base.join("home/me");
    assert_eq!(
        judged.lexical,
        reference_lexical(raw, &world.cwd, &home),
        "the lexical form of {raw:?}"
    );

    let lexical_roots: Vec<_> = world.roots.iter().map(|r| normalize_lexically(r)).collect();
    let resolved_roots: Vec<_> = world.roots.iter().map(|r| resolve_symlinks(r)).collect();
    assert_eq!(
        judged.lexical_inside_roots,
        lexical_roots.iter().any(|r| judged.lexical.starts_with(r)),
        "{raw:?}: lexical judgement"
    );
    assert_eq!(
        judged.resolved_inside_roots,
        resolved_roots
            .iter()
            .any(|r| judged.resolved.starts_with(r)),
        "{raw:?}: resolved judgement"
    );
    if judged.inside_roots() {
        assert!(
            judged.lexical.starts_with(&world.base) && judged.resolved.starts_with(&world.base)
        );
    }

    // The kernel's answer, where it has one and the walk stays in the tree (never /proc).
    let absolute = absolute(raw, &world.cwd);
    if judged.lexical.starts_with(&world.base)
        && judged.resolved.starts_with(&world.base)
        && !raw.contains('\0')
        && let Ok(kernel) = std::fs::canonicalize(&absolute)
        && kernel.starts_with(&world.base)
    {
        assert_eq!(
            judged.resolved, kernel,
            "{raw:?}: resolved differs from the kernel"
        );
    }
});
