//! The warm index end to end (docs/protocol.md section 11.13): a daemon that indexes and one that
//! does not (`[index] enabled = false`, the cold walk) answer every `find_files` on the same
//! tree identically, through a random churn with a query right after each change (no sleep),
//! ignore edits at every level (a parent of the root, `.git/info/exclude`, the global excludes
//! file under a temporary `HOME`), hidden files and globs naming `.github` and `.git`; and
//! both agree with `rg --files`. An overflowing event queue, a watch limit lower than the
//! tree's directories, a root replaced or turned into a symlink, and a memory budget too small
//! keep the answers identical (cold where needed, said in `metadata.index` and counted in
//! `index/status`), and the index recovers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers, results, wire_error_type_or_ok};
use toold_tests::require;
use toold_tests::{PATIENCE, XorShift};

/// One daemon that indexes and one that walks cold, on the same tree.
struct Pair {
    warm: TestDaemon,
    warm_client: TestClient,
    warm_session: String,
    cold: TestDaemon,
    cold_client: TestClient,
    cold_session: String,
    root: PathBuf,
    /// The daemons' shared `HOME`-like directories are their own; the tree lives here.
    _tree: tempfile::TempDir,
}

/// Config for the indexing daemon.
const WARM: &str =
    "max_read_bytes = 67108864\n[permissions]\nallow = [\"find_files\", \"search_code\"]\n";
const COLD: &str = "max_read_bytes = 67108864\n[permissions]\nallow = [\"find_files\", \"search_code\"]\n[index]\nenabled = false\n";

impl Pair {
    async fn start(warm_config: &str) -> Self {
        let tree = tempfile::tempdir().unwrap();
        let root = tree.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        let warm = TestDaemon::start_with_config(Some(warm_config));
        let cold = TestDaemon::start_with_config(Some(COLD));
        let warm_client = warm.connect(json!({}), no_answers()).await;
        let cold_client = cold.connect(json!({}), no_answers()).await;
        let warm_session = warm_client.create_session(&root, json!({})).await;
        let cold_session = cold_client.create_session(&root, json!({})).await;
        Self {
            warm,
            warm_client,
            warm_session,
            cold,
            cold_client,
            cold_session,
            root,
            _tree: tree,
        }
    }

    /// Both daemons' answer to `find_files`: (warm result, cold result).
    async fn find(&self, arguments: Value) -> (Value, Value) {
        self.call("find_files", arguments).await
    }

    /// Both daemons' answer to a call of `tool`: (warm result, cold result).
    async fn call(&self, tool: &str, arguments: Value) -> (Value, Value) {
        let call = json!([{"id": "f", "name": tool, "arguments": arguments}]);
        let warm = self
            .warm_client
            .execute(&self.warm_session, call.clone())
            .await;
        let cold = self.cold_client.execute(&self.cold_session, call).await;
        (results(&warm)[0].clone(), results(&cold)[0].clone())
    }

    /// Asks both (every path: the answers are never cut) and checks the answers are the
    /// same; returns whether the warm one was warm.
    async fn same(&self, mut arguments: Value, what: &str) -> bool {
        arguments["max_results"] = json!(1_000_000);
        let (warm, cold) = self.find(arguments.clone()).await;
        assert_eq!(
            wire_error_type_or_ok(&warm),
            wire_error_type_or_ok(&cold),
            "{what}: {arguments}"
        );
        if wire_error_type_or_ok(&warm) != "ok" {
            // The directory asked about is gone, or was never there: the same failure.
            assert_eq!(warm["error"], cold["error"], "{what}: {arguments}");
            return false;
        }
        assert_eq!(warm["metadata"]["truncated"], false, "{what}: {arguments}");
        same_lines(text(&warm), text(&cold), &format!("{what}: {arguments}"));
        assert_eq!(
            warm["metadata"]["count"], cold["metadata"]["count"],
            "{what}: {arguments}"
        );
        assert_eq!(cold["metadata"]["index"], "cold");
        assert_eq!(cold["metadata"]["index_reason"], "disabled");
        warm["metadata"]["index"] == "warm"
    }

    /// Asks both to search (every match: the answers are never cut) and checks the answers
    /// are the same; returns the warm result.
    async fn same_search(&self, mut arguments: Value, what: &str) -> Value {
        arguments["max_results"] = json!(1_000_000);
        let (warm, cold) = self.call("search_code", arguments.clone()).await;
        assert_eq!(
            wire_error_type_or_ok(&warm),
            wire_error_type_or_ok(&cold),
            "{what}: {arguments}: {warm}"
        );
        if wire_error_type_or_ok(&warm) != "ok" {
            assert_eq!(warm["error"], cold["error"], "{what}: {arguments}");
            return warm;
        }
        assert_eq!(warm["metadata"]["truncated"], false, "{what}: {arguments}");
        same_lines(text(&warm), text(&cold), &format!("{what}: {arguments}"));
        assert_eq!(
            warm["metadata"]["matches"], cold["metadata"]["matches"],
            "{what}: {arguments}"
        );
        warm
    }

    /// Waits until the warm daemon has read the root's contents: a search for `pattern` (which
    /// few files hold) reads fewer than half the root's files.
    async fn contents_read(&self, pattern: &str) {
        let started = Instant::now();
        loop {
            let warm = self
                .same_search(json!({"pattern": pattern}), "the contents read")
                .await;
            let read = warm["metadata"]["index_files_read"].as_u64();
            let files = self.status().await.and_then(|root| root["files"].as_u64());
            if let (Some(read), Some(files)) = (read, files)
                && read * 2 < files
            {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the contents were never read: {}",
                warm["metadata"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the warm daemon's index of the root is ready.
    async fn ready(&self) {
        let started = Instant::now();
        loop {
            if let Some(root) = self.status().await
                && root["state"] == "ready"
            {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the index never got ready: {:?}",
                self.status().await
            );
            // Each query may start the build: ask once, then wait for it.
            let _ = self.find(json!({"pattern": "*"})).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The warm daemon's `index/status` entry for the root.
    async fn status(&self) -> Option<Value> {
        let status = self
            .warm_client
            .request("index/status", json!({}))
            .await
            .expect("index/status");
        status
            .as_array()
            .expect("an array")
            .iter()
            .find(|root| root["root"] == self.root.display().to_string())
            .cloned()
    }
}

/// A result's text.
fn text(result: &Value) -> &str {
    result["content"].as_str().expect("a text result")
}

/// Fails, showing the first lines that differ, when two listings differ.
fn same_lines(got: &str, expected: &str, what: &str) {
    if got == expected {
        return;
    }
    let got: Vec<&str> = got.lines().collect();
    let expected: Vec<&str> = expected.lines().collect();
    let only_got: Vec<&&str> = got
        .iter()
        .filter(|line| !expected.contains(line))
        .take(10)
        .collect();
    let only_expected: Vec<&&str> = expected
        .iter()
        .filter(|line| !got.contains(line))
        .take(10)
        .collect();
    panic!(
        "{what}: {} lines against {}; only in the first: {only_got:?}; only in the second: \
         {only_expected:?}",
        got.len(),
        expected.len()
    );
}

/// `rg -n` of `pattern` in `root` as toold shows matches (`path:line:text`), sorted: the
/// same set of lines the daemons give, for a search without context.
fn rg_search(rg: &Path, daemon: &TestDaemon, root: &Path, pattern: &str) -> Vec<String> {
    let output = Command::new(rg)
        .args([
            "-n",
            "--no-require-git",
            "--no-config",
            "--no-heading",
            "--with-filename",
            "-e",
            pattern,
        ])
        .current_dir(root)
        .env("HOME", daemon.root().join("home"))
        .env("XDG_CONFIG_HOME", daemon.root().join("config"))
        .output()
        .expect("rg runs");
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim_start_matches("./").to_owned())
        .collect();
    lines.sort();
    lines
}

/// A listing's lines, sorted.
fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// `rg --files` of `root` (ignore files read whether or not it is a git repository, as the
/// walk reads them), with the daemon's `HOME` and config directory so that both read the same
/// global excludes file; sorted as toold sorts.
fn rg_files(rg: &Path, daemon: &TestDaemon, root: &Path) -> String {
    let output = Command::new(rg)
        .args(["--files", "--no-require-git", "--no-config"])
        .current_dir(root)
        .env("HOME", daemon.root().join("home"))
        .env("XDG_CONFIG_HOME", daemon.root().join("config"))
        .output()
        .expect("rg runs");
    let mut paths: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim_start_matches("./").to_owned())
        .collect();
    paths.sort_by(|left, right| {
        let key = |byte: &u8| if *byte == b'/' { 0 } else { *byte };
        left.bytes()
            .map(|b| key(&b))
            .cmp(right.bytes().map(|b| key(&b)))
    });
    paths.join("\n")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn seed_tree(root: &Path) {
    for (path, text) in [
        ("src/main.rs", "fn main() {}\n"),
        ("src/lib/a.rs", "a\n"),
        ("docs/guide.md", "guide\n"),
        (".github/workflows/ci.yml", "on: push\n"),
        (".env", "SECRET=1\n"),
        ("target/out.rs", "built\n"),
        (".gitignore", "target/\n*.log\n"),
        ("vendor/.ignore", "gen/\n"),
        ("vendor/gen/g.rs", "g\n"),
        ("vendor/keep.rs", "k\n"),
        (".git/info/exclude", "\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        ("notes.log", "log\n"),
    ] {
        write(&root.join(path), text);
    }
}

/// The patterns asked after each change: plain, deep, hidden-naming and `.git`-naming globs.
const PATTERNS: [&str; 7] = [
    "*",
    "*.rs",
    "src/**/*.rs",
    ".github/**",
    ".*",
    "**/.git/**",
    "!*.md",
];

/// The directories below the root that queries start from: held by the root's index, hidden,
/// ignored, and nested.
const SUBDIRECTORIES: [&str; 6] = ["src", "vendor", ".github", "target", "n1/n2", "vendor/gen"];

/// The searches asked after each change: literals, a regex, case folds.
const SEARCHES: [&str; 5] = ["saved", "fn main", r"\bx\b|guide", "(?i)SAVED", "ref: refs"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_files_answers_as_a_cold_walk_and_rg_through_a_churn() {
    const TEST: &str = "find_files_answers_as_a_cold_walk_and_rg_through_a_churn";
    let Some(rg) = require::program(TEST, "rg", &[], "apt-get install ripgrep") else {
        return;
    };
    let pair = Pair::start(WARM).await;
    let root = pair.root.clone();
    seed_tree(&root);
    pair.ready().await;

    let dirs = [
        "", "src", "src/lib", "docs", ".github", "vendor", "target", "n1/n2",
    ];
    let names = ["a.rs", "b.md", ".c", "d.log", "e", "gen"];
    let global_excludes = pair.warm.root().join("config/git/ignore");
    let cold_global_excludes = pair.cold.root().join("config/git/ignore");
    let parent_ignore = root.parent().unwrap().join(".ignore");
    let mut random = XorShift(0x1dea);
    let mut warm_answers = 0;
    let mut answers = 0;
    for step in 0..2000 {
        let dir = root.join(dirs[random.below(dirs.len())]);
        let name = names[random.below(names.len())];
        let path = dir.join(name);
        let what = match random.below(12) {
            0..=2 => {
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::write(&path, "x");
                "create"
            }
            3 => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_dir_all(&path);
                "delete"
            }
            4 => {
                let to = root
                    .join(dirs[random.below(dirs.len())])
                    .join(names[random.below(names.len())]);
                let _ = std::fs::rename(&path, &to);
                "rename"
            }
            5 => {
                let _ = std::fs::create_dir_all(path.join("p/q/r"));
                let _ = std::fs::write(path.join("p/q/r/f.rs"), "f");
                "mkdir -p and a write"
            }
            6 => {
                let temp = dir.join(".save.tmp");
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::write(&temp, "saved");
                let _ = std::fs::rename(&temp, &path);
                "atomic save"
            }
            7 => {
                let link = dir.join("link");
                let _ = std::fs::remove_file(&link);
                let _ = std::fs::remove_dir_all(&link);
                if random.below(2) == 0 {
                    let _ = std::os::unix::fs::symlink(root.join("src"), &link);
                } else {
                    let _ = std::fs::create_dir_all(link.join("real"));
                    let _ = std::fs::write(link.join("real/r.rs"), "r");
                }
                "a symlink swap"
            }
            8 => {
                use std::os::unix::fs::PermissionsExt;
                let mode = if random.below(2) == 0 { 0o000 } else { 0o755 };
                let _ = std::fs::set_permissions(&dir, PermissionsExt::from_mode(mode));
                "chmod"
            }
            9 => {
                let patterns = ["", "*.md\n", "gen/\n", "!b.md\n*.md\n", "p/\n", "*.rs\n"];
                let text = patterns[random.below(patterns.len())];
                let file = match random.below(5) {
                    0 => dir.join(".gitignore"),
                    1 => dir.join(".ignore"),
                    2 => root.join(".git/info/exclude"),
                    3 => parent_ignore.clone(),
                    _ => {
                        // The global excludes file of both daemons (each its own HOME).
                        write(&cold_global_excludes, text);
                        global_excludes.clone()
                    }
                };
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::create_dir_all(file.parent().unwrap());
                let _ = std::fs::write(&file, text);
                "an ignore file edited"
            }
            10 => {
                let moving = root.parent().unwrap().join(format!("moving{step}"));
                let _ = std::fs::create_dir_all(moving.join("inside"));
                let _ = std::fs::write(moving.join("inside/m.rs"), "m");
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::rename(&moving, dir.join(format!("moved{step}")));
                "a directory moved in from outside"
            }
            _ => {
                let _ = std::fs::create_dir_all(&dir);
                let _ = std::fs::rename(&dir, root.join(format!("renamed{step}")));
                "a directory renamed"
            }
        };
        let pattern = PATTERNS[random.below(PATTERNS.len())];
        let description = format!("step {step}: {what} at {}", path.display());
        answers += 1;
        if pair.same(json!({"pattern": pattern}), &description).await {
            warm_answers += 1;
        }
        let search = SEARCHES[random.below(SEARCHES.len())];
        pair.same_search(json!({"pattern": search}), &description)
            .await;
        // From a directory below the root: the root's index answers for the directories it
        // holds; an ignored one (`target`, `vendor/gen`) gets its own.
        let below = SUBDIRECTORIES[random.below(SUBDIRECTORIES.len())];
        pair.same(json!({"pattern": pattern, "path": below}), &description)
            .await;
        pair.same_search(json!({"pattern": search, "path": below}), &description)
            .await;
        if step % 25 == 0 {
            let (warm, _) = pair
                .call(
                    "search_code",
                    json!({"pattern": "x", "max_results": 1_000_000}),
                )
                .await;
            assert_eq!(
                sorted_lines(text(&warm)),
                rg_search(&rg, &pair.warm, &root, "x"),
                "{description}: against rg -n"
            );
            let (warm, _) = pair
                .find(json!({"pattern": "*", "max_results": 1_000_000}))
                .await;
            assert_eq!(wire_error_type_or_ok(&warm), "ok", "{warm}");
            same_lines(
                text(&warm),
                &rg_files(&rg, &pair.warm, &root),
                &format!("{description}: against rg"),
            );
        }
    }
    let (warm, _) = pair.find(json!({"pattern": "**/.git/**"})).await;
    assert_eq!(warm["metadata"]["index"], "cold");
    assert_eq!(warm["metadata"]["index_reason"], "git_directories");
    // Most answers came from the index: edits outside what the watch sees rebuild it.
    assert!(
        warm_answers * 2 > answers,
        "{warm_answers} of {answers} answers were warm"
    );
    let status = pair.status().await.expect("the root is listed");
    assert!(status["fallbacks"]["git_directories"].as_u64().unwrap_or(0) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_read_only_candidates_and_answer_as_cold_and_rg() {
    const TEST: &str = "searches_read_only_candidates_and_answer_as_cold_and_rg";
    let Some(rg) = require::program(TEST, "rg", &[], "apt-get install ripgrep") else {
        return;
    };
    let pair = Pair::start(WARM).await;
    let root = pair.root.clone();
    seed_tree(&root);
    for n in 0..200 {
        write(
            &root.join(format!("bulk/f{n}.rs")),
            &format!("fn bulk_{n}() {{ return {n}; }}\n"),
        );
    }
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            "a utf16 needle here\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    std::fs::write(root.join("enc/utf16.txt"), &utf16).unwrap_or_else(|_| {
        std::fs::create_dir_all(root.join("enc")).unwrap();
        std::fs::write(root.join("enc/utf16.txt"), &utf16).unwrap();
    });
    write(&root.join("enc/bom.txt"), "\u{feff}needle after a bom\n");
    std::fs::write(
        root.join("enc/nul-after.txt"),
        b"needle before\n\0 needle after\n",
    )
    .unwrap();
    std::fs::write(root.join("enc/nul-before.txt"), b"\0 needle after a nul\n").unwrap();
    write(
        &root.join("enc/fold.txt"),
        "\u{17f}eek the long s\n\u{212a}elvin sign\n",
    );
    // A file with more distinct trigrams than the index keeps for one: searched always.
    let mut noise = Vec::with_capacity(4 << 20);
    let mut random = XorShift(0x2545_f491_4f6c_dd1d);
    while noise.len() < 4 << 20 {
        noise.push(b'!' + (random.next() % 90) as u8);
        if noise.len() % 100 == 0 {
            noise.push(b'\n');
        }
    }
    noise.extend_from_slice(b"\nneedle in the noise\n");
    std::fs::write(root.join("enc/noise.txt"), &noise).unwrap();
    pair.ready().await;
    pair.contents_read("bulk_17").await;
    let warm = pair
        .same_search(json!({"pattern": "bulk_17\\b"}), "selective")
        .await;
    assert!(
        warm["metadata"]["index_files_read"].as_u64().unwrap() <= 13,
        "a selective search reads its 11 candidates and the 2 files never indexed: {}",
        warm["metadata"]
    );
    for pattern in [
        "needle",
        "(?i)SEEK",
        "(?i)seek",
        "(?i)kelvin",
        "(?i)KELVIN",
        r"return \d+;",
        "utf16 needle",
        "fn main",
        "no such text anywhere",
    ] {
        let warm = pair
            .same_search(json!({"pattern": pattern}), "encodings")
            .await;
        assert_eq!(warm["metadata"]["index"], "warm", "{pattern}");
        assert_eq!(
            sorted_lines(text(&warm)),
            rg_search(&rg, &pair.warm, &root, pattern),
            "{pattern}: against rg -n"
        );
    }
    pair.same_search(json!({"pattern": "seek", "case_insensitive": true}), "flag")
        .await;
    // Changed files are searched whatever the index read: an edit, an atomic save, a new
    // file, each asked at once.
    write(&root.join("bulk/f3.rs"), "fn now_holds_fresh_text() {}\n");
    pair.same_search(json!({"pattern": "fresh_text"}), "an edit")
        .await;
    write(&root.join("bulk/.f4.tmp"), "saved_over_f4\n");
    std::fs::rename(root.join("bulk/.f4.tmp"), root.join("bulk/f4.rs")).unwrap();
    pair.same_search(json!({"pattern": "saved_over_f4"}), "an atomic save")
        .await;
    write(&root.join("bulk/new/deep/g.rs"), "brand_new_file\n");
    let warm = pair
        .same_search(json!({"pattern": "brand_new_file"}), "a new file")
        .await;
    assert_eq!(warm["metadata"]["matches"], 1);
}

/// The changes an adversarial reading of the index found answered stale, each asked at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_changes_a_review_found_stale_are_answered_as_cold() {
    let pair = Pair::start(WARM).await;
    let root = pair.root.clone();
    // A hidden name that a `!` rule shows: a walk skipping hidden entries lists it.
    write(&root.join(".gitignore"), "!.env\n.hid*\n!.hidok\n");
    for path in [
        ".env",
        "a.txt",
        ".hidok/x.txt",
        ".hidden/y.txt",
        "sub/.hidok",
        "sub/d/x.txt",
        "sub/y.txt",
    ] {
        write(&root.join(path), "x\n");
    }
    write(&root.join("a/f.txt"), "alpha\n");
    write(&root.join("b/f.txt"), "bravo\n");
    write(&root.join("sub/c/g.txt"), "charlie\n");
    write(&root.join("rules/ign.txt"), "nothing\n");
    write(&root.join("s/keep.txt"), "k\n");
    write(&root.join("s/drop.txt"), "d\n");
    std::os::unix::fs::symlink("../rules/ign.txt", root.join("s/.gitignore")).unwrap();
    pair.ready().await;
    pair.contents_read("charlie").await;
    let both = |what: &'static str| {
        let pair = &pair;
        async move {
            pair.same(json!({"pattern": "*"}), what).await;
            for pattern in ["x", "bravo", "DELTA", "ECHOTOKEN"] {
                pair.same_search(json!({"pattern": pattern}), what).await;
            }
        }
    };
    both("hidden names a rule shows").await;
    let (warm, _) = pair.find(json!({"pattern": "*", "max_results": 100})).await;
    assert!(text(&warm).lines().any(|line| line == ".env"), "{warm}");
    // A `.git` directory created: its info/exclude applies, and its later edits.
    std::fs::create_dir_all(root.join("sub/.git/info")).unwrap();
    write(&root.join("sub/.git/info/exclude"), "x.txt\n");
    both("a .git directory created").await;
    write(&root.join("sub/.git/info/exclude"), "x.txt\ny.txt\n");
    both("its exclude edited").await;
    // Two directories swapped through a third name: files under old names, other contents.
    std::fs::rename(root.join("a"), root.join("t")).unwrap();
    std::fs::rename(root.join("b"), root.join("a")).unwrap();
    std::fs::rename(root.join("t"), root.join("b")).unwrap();
    both("two directories swapped").await;
    // A file edited while its directory had another name, then the name given back.
    std::fs::rename(root.join("a"), root.join("a2")).unwrap();
    both("a directory renamed").await;
    write(&root.join("a2/f.txt"), "bravo\nDELTA\n");
    both("a file edited under the new name").await;
    std::fs::rename(root.join("a2"), root.join("a")).unwrap();
    both("the name given back").await;
    // A directory ignored, edited unwatched, then shown again.
    write(&root.join("sub/.gitignore"), "c/\n");
    both("a directory ignored").await;
    write(&root.join("sub/c/g.txt"), "charlie\nECHOTOKEN\n");
    std::fs::remove_file(root.join("sub/.gitignore")).unwrap();
    both("edited while ignored, then shown again").await;
    // An ignore file that is a symlink, its target edited.
    write(&root.join("rules/ign.txt"), "drop.txt\n");
    both("a symlinked ignore file's target edited").await;
    let (warm, _) = pair.find(json!({"pattern": "*", "max_results": 100})).await;
    assert!(!text(&warm).contains("s/drop.txt"), "{warm}");
}

/// The changes a second adversarial reading found answered stale: a root's parent moved and
/// another tree made at its path, a `.git` that is a symlink to a git directory elsewhere,
/// a file and an ignore file written through hard links outside the root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_outside_the_watched_tree_are_answered_as_cold() {
    let pair = Pair::start(WARM).await;
    let root = pair.root.clone();
    let outside = root.parent().unwrap().to_owned();
    write(&root.join("old.txt"), "oldtoken\n");
    write(&root.join("sub/keep.txt"), "k\n");
    write(&root.join("sub/drop.txt"), "d\n");
    write(&outside.join("gitstore/info/exclude"), "\n");
    std::os::unix::fs::symlink(outside.join("gitstore"), root.join("sub/.git")).unwrap();
    write(&root.join("a.txt"), "alpha\n");
    std::fs::hard_link(root.join("a.txt"), outside.join("outside-link.txt")).unwrap();
    write(&outside.join("rules.txt"), "nothing\n");
    std::fs::create_dir_all(root.join("s")).unwrap();
    std::fs::hard_link(outside.join("rules.txt"), root.join("s/.gitignore")).unwrap();
    write(&root.join("s/drop.txt"), "d\n");
    pair.ready().await;
    pair.contents_read("oldtoken").await;
    let both = |what: &'static str| {
        let pair = &pair;
        async move {
            pair.same(json!({"pattern": "*"}), what).await;
            pair.same(json!({"pattern": "*", "path": "sub"}), what)
                .await;
            for pattern in ["token", "ZULU"] {
                pair.same_search(json!({"pattern": pattern}), what).await;
            }
        }
    };
    both("ready").await;
    // The git directory's exclude, edited where no watch of the root is.
    write(&outside.join("gitstore/info/exclude"), "drop.txt\n");
    both("a .git symlink's exclude edited").await;
    // Written through a hard link outside the root: no event in the root.
    std::fs::write(outside.join("outside-link.txt"), "ZULU\n").unwrap();
    both("a file written through a hard link").await;
    std::fs::write(outside.join("rules.txt"), "drop.txt\n").unwrap();
    both("an ignore file written through a hard link").await;
    // The parent moved away, another tree made at the root's path.
    let mut moved_name = outside.file_name().unwrap().to_owned();
    moved_name.push("-moved");
    let moved = outside.with_file_name(moved_name);
    std::fs::rename(&outside, &moved).unwrap();
    write(&root.join("new.txt"), "newtoken\n");
    write(&root.join("sub/n.txt"), "n\n");
    both("the parent moved, a new tree at the root's path").await;
    let _ = std::fs::remove_dir_all(&moved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_falls_back_cold_and_the_index_recovers() {
    let pair = Pair::start(WARM).await;
    seed_tree(&pair.root);
    pair.ready().await;
    assert!(pair.same(json!({"pattern": "*.rs"}), "ready").await);
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(16_384);
    // 50,000 creates (or more than the queue holds), queried as they go: each query drains the
    // queue, so no more often than the queue's size (a create is two events).
    let creates = limit.max(50_000) + 100;
    let query_every = limit.max(10_000);
    let flood = pair.root.join("flood");
    std::fs::create_dir_all(&flood).unwrap();
    for n in 0..creates {
        std::fs::write(flood.join(format!("f{n}.rs")), "").unwrap();
        if n % query_every == 0 {
            pair.same(json!({"pattern": "flood/*.rs"}), "while flooding")
                .await;
        }
    }
    pair.same(json!({"pattern": "flood/*.rs"}), "after the flood")
        .await;
    let status = pair.status().await.unwrap();
    assert!(
        status["fallbacks"]["overflow"].as_u64().unwrap_or(0) >= 1,
        "the overflow was answered cold: {status}"
    );
    pair.ready().await;
    assert!(pair.same(json!({"pattern": "flood/*.rs"}), "rebuilt").await);
    assert!(
        pair.status().await.unwrap()["files"].as_u64().unwrap() as usize > creates,
        "every file of the tree, flood and seed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_limit_lower_than_the_tree_answers_cold() {
    let config = format!("{WARM}[index]\nmax_watches = 4\nretry_after = \"1s\"\n");
    let pair = Pair::start(&config).await;
    seed_tree(&pair.root);
    for n in 0..10 {
        write(&pair.root.join(format!("many/d{n}/f.rs")), "f");
    }
    let started = Instant::now();
    loop {
        pair.same(json!({"pattern": "*.rs"}), "over the watch limit")
            .await;
        let status = pair.status().await.unwrap();
        if status["state"] == "cold" {
            assert_eq!(status["reason"], "watch_limit");
            break;
        }
        assert!(started.elapsed() < PATIENCE, "{status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !pair.same(json!({"pattern": "*.rs"}), "cold").await,
        "answered cold"
    );
    // Fewer directories than the limit: after `retry_after` the index is built again.
    std::fs::remove_dir_all(pair.root.join("many")).unwrap();
    std::fs::remove_dir_all(pair.root.join("src/lib")).unwrap();
    std::fs::remove_dir_all(pair.root.join(".github")).unwrap();
    std::fs::remove_dir_all(pair.root.join("vendor")).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    pair.ready().await;
    assert!(pair.same(json!({"pattern": "*"}), "recovered").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_replaced_or_made_a_symlink_is_answered_as_it_now_is() {
    let pair = Pair::start(WARM).await;
    seed_tree(&pair.root);
    pair.ready().await;
    let aside = pair.root.with_file_name("aside");
    let other = pair.root.with_file_name("other");
    write(&other.join("o.rs"), "o");
    // Replaced by another directory.
    std::fs::rename(&pair.root, &aside).unwrap();
    std::fs::create_dir(&pair.root).unwrap();
    write(&pair.root.join("fresh.rs"), "f");
    pair.same(json!({"pattern": "*"}), "replaced").await;
    pair.ready().await;
    assert!(
        pair.same(json!({"pattern": "*"}), "replaced, rebuilt")
            .await
    );
    // Turned into a symlink: the session's root resolves to its target.
    std::fs::remove_dir_all(&pair.root).unwrap();
    std::os::unix::fs::symlink(&aside, &pair.root).unwrap();
    pair.same(json!({"pattern": "*", "path": pair.root}), "a symlink")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_over_the_memory_budget_answers_cold_and_the_oldest_is_evicted() {
    // 1 MiB: one small tree fits, a tree of 20,000 files does not.
    let config = format!("{WARM}[index]\nmax_memory_mib = 1\n");
    let pair = Pair::start(&config).await;
    seed_tree(&pair.root);
    pair.ready().await;
    let big = pair.root.join("big");
    for n in 0..20_000 {
        write(
            &big.join(format!("d{}/file-with-a-long-name-{n}.rs", n % 50)),
            "",
        );
    }
    let started = Instant::now();
    loop {
        pair.same(json!({"pattern": "*.rs"}), "over the budget")
            .await;
        let status = pair.status().await.unwrap();
        if status["state"] == "cold" {
            assert_eq!(status["reason"], "memory_budget", "{status}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{status}");
    }
    assert!(!pair.same(json!({"pattern": "*.rs"}), "cold").await);
    // Two small roots within the budget together are both kept; a third root over it
    // evicts the one used least recently.
    std::fs::remove_dir_all(&big).unwrap();
    let small = pair.root.join("src");
    let (warm, _) = pair.find(json!({"pattern": "*", "path": small})).await;
    assert_eq!(wire_error_type_or_ok(&warm), "ok");
    let roots = pair
        .warm_client
        .request("index/status", json!({}))
        .await
        .unwrap();
    assert!(roots.as_array().unwrap().len() >= 2, "{roots}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_root() {
    let pair = Pair::start(WARM).await;
    seed_tree(&pair.root);
    pair.ready().await;
    let status = pair.status().await.unwrap();
    assert_eq!(status["state"], "ready");
    assert!(status["files"].as_u64().unwrap() >= 8, "{status}");
    assert!(status["memory_bytes"].as_u64().unwrap() > 0);
    assert!(status["last_rebuild"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        status["fallbacks"]["building"].as_u64().map(|n| n >= 1),
        Some(true)
    );
    let output = pair
        .warm
        .command()
        .arg("status")
        .output()
        .expect("toold status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("index"), "{text}");
    assert!(text.contains(&pair.root.display().to_string()), "{text}");
    assert!(text.contains("ready"), "{text}");
}

/// A filesystem mounted inside a root brings files no watch of the root sees, and a mount or
/// unmount changes a directory without an inotify event: a root with a mount inside is
/// answered cold (`mount_inside`), never stale, from the first query after the mount; once the
/// mount is gone the index is built again. The daemon runs in a mount namespace of its own,
/// where the test mounts a tmpfs (through `nsenter`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_inside_a_root_is_answered_cold_never_stale() {
    let test = "a_mount_inside_a_root_is_answered_cold_never_stale";
    let (Some(_), Some(_)) = (
        require::program(test, "unshare", &[], "apt-get install util-linux"),
        require::program(test, "nsenter", &[], "apt-get install util-linux"),
    ) else {
        return;
    };
    if !require::root(test) {
        return;
    }
    let wrapper = ["unshare", "--mount", "--propagation", "private"].map(str::to_owned);
    let daemon = TestDaemon::start_under(&wrapper, &[]);
    let root = daemon.work().join("tree");
    write(&root.join("top.rs"), "t");
    write(&root.join("sub/below.rs"), "b");
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&root, json!({})).await;
    let find = || async {
        let response = client
            .execute(
                &session,
                json!([{"id": "f", "name": "find_files", "arguments": {"pattern": "**/*.rs"}}]),
            )
            .await;
        results(&response)[0].clone()
    };
    let in_daemon_namespace = |script: &str| {
        let status = Command::new("nsenter")
            .args(["-t", &daemon.pid().to_string(), "-m", "sh", "-c", script])
            .status()
            .expect("nsenter");
        assert!(status.success(), "{script}");
    };
    let started = Instant::now();
    while find().await["metadata"]["index"] != "warm" {
        assert!(started.elapsed() < PATIENCE, "never warm");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sub = root.join("sub");
    in_daemon_namespace(&format!(
        "mount -t tmpfs tmpfs '{0}' && echo i > '{0}/inside.rs'",
        sub.display()
    ));
    // The first query after the mount, and every one while it stays.
    for _ in 0..3 {
        let found = find().await;
        assert_eq!(text(&found), "sub/inside.rs\ntop.rs", "{found}");
        assert_eq!(found["metadata"]["index"], "cold", "{found}");
        assert_eq!(found["metadata"]["index_reason"], "mount_inside", "{found}");
    }
    // Unmounted: the directory's own file again, and warm once rebuilt.
    in_daemon_namespace(&format!("umount '{}'", sub.display()));
    let started = Instant::now();
    loop {
        let found = find().await;
        assert_eq!(text(&found), "sub/below.rs\ntop.rs", "{found}");
        if found["metadata"]["index"] == "warm" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never warm again: {found}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
