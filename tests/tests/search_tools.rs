//! Behaviour of the `find_files` and `search_code` tools on real fixture trees, called through
//! the registry's execution boundary so that their schemas are exercised too.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toold_protocol::{ErrorType, ToolResult};
use toold_tests::{Tree, call, call_canceled_by};

/// The content of a successful result.
fn ok(result: &ToolResult) -> &str {
    assert!(result.ok, "expected success, got {result:#?}");
    &result.content
}

fn failed(result: &ToolResult, error_type: ErrorType) -> &str {
    assert!(!result.ok, "expected {error_type}, got {result:#?}");
    assert_eq!(result.error_type.as_ref(), Some(&error_type), "{result:#?}");
    result.error.as_deref().unwrap_or_default()
}

async fn find(dir: &Tree, arguments: Value) -> ToolResult {
    call(dir.env(), "find_files", arguments).await
}

async fn search(dir: &Tree, arguments: Value) -> ToolResult {
    call(dir.env(), "search_code", arguments).await
}

// ---------------------------------------------------------------- find_files

#[tokio::test]
async fn find_files_lists_sorted_paths_relative_to_the_directory() {
    let dir = Tree::with_bytes(&[
        ("src/b.rs", b""),
        ("src/a.rs", b""),
        ("a.rs", b""),
        ("a-b/z.rs", b""),
        ("lib/x.txt", b""),
        ("deep/n/m.rs", b""),
    ]);
    let result = find(&dir, json!({"pattern": "*.rs"})).await;
    assert_eq!(
        ok(&result),
        "a-b/z.rs\na.rs\ndeep/n/m.rs\nsrc/a.rs\nsrc/b.rs"
    );
    assert_eq!(result.metadata["count"], json!(5));
    assert_eq!(result.metadata["truncated"], json!(false));
    assert_eq!(result.metadata["call_id"], json!("call_1"));

    let under_src = find(&dir, json!({"pattern": "*.rs", "path": "src"})).await;
    assert_eq!(ok(&under_src), "a.rs\nb.rs");
    let absolute = dir.root().join("./src").display().to_string();
    let under_abs = find(&dir, json!({"pattern": "*.rs", "path": absolute})).await;
    assert_eq!(ok(&under_abs), "a.rs\nb.rs");
}

#[tokio::test]
async fn find_files_globs_follow_ripgrep_semantics() {
    let dir = Tree::with_bytes(&[
        ("src/a.rs", b""),
        ("src/sub/c.rs", b""),
        ("Cargo.toml", b""),
        ("crates/x/Cargo.toml", b""),
    ]);
    let cases = [
        ("src/*.rs", "src/a.rs"),
        ("src/**/*.rs", "src/a.rs\nsrc/sub/c.rs"),
        ("**/*.rs", "src/a.rs\nsrc/sub/c.rs"),
        ("Cargo.toml", "Cargo.toml\ncrates/x/Cargo.toml"),
        ("/Cargo.toml", "Cargo.toml"),
        ("*/Cargo.toml", ""),
        (
            "{*.toml,c.rs}",
            "Cargo.toml\ncrates/x/Cargo.toml\nsrc/sub/c.rs",
        ),
    ];
    for (pattern, expected) in cases {
        let result = find(&dir, json!({"pattern": pattern})).await;
        assert_eq!(ok(&result), expected, "pattern {pattern}");
    }
}

#[tokio::test]
async fn find_files_honours_gitignore_and_ignore_without_a_git_repository() {
    let dir = Tree::with_bytes(&[
        (".gitignore", b"target/\n*.log\n"),
        ("sub/.ignore", b"generated.rs\n"),
        ("target/debug/x.rs", b""),
        ("app.log", b""),
        ("keep.rs", b""),
        ("sub/generated.rs", b""),
        ("sub/written.rs", b""),
    ]);
    assert!(
        !dir.root().join(".git").exists(),
        "the tree must not be a git repository"
    );
    let result = find(&dir, json!({"pattern": "*"})).await;
    assert_eq!(ok(&result), "keep.rs\nsub/written.rs");
}

#[tokio::test]
async fn find_files_skips_hidden_files_unless_the_pattern_names_them() {
    let dir = Tree::with_bytes(&[
        (".env", b""),
        (".github/workflows/ci.yml", b""),
        ("src/.secret.rs", b""),
        ("src/main.rs", b""),
        ("config", b""),
    ]);
    assert_eq!(
        ok(&find(&dir, json!({"pattern": "*.rs"})).await),
        "src/main.rs"
    );
    assert_eq!(ok(&find(&dir, json!({"pattern": "*.yml"})).await), "");
    assert_eq!(
        ok(&find(&dir, json!({"pattern": ".github/**"})).await),
        ".github/workflows/ci.yml"
    );
    assert_eq!(ok(&find(&dir, json!({"pattern": "**/.env"})).await), ".env");
    assert_eq!(
        ok(&find(&dir, json!({"pattern": ".*"})).await),
        ".env\nsrc/.secret.rs"
    );
}

#[tokio::test]
async fn find_files_never_lists_git_internals_unless_named() {
    let dir = Tree::with_bytes(&[(".git/config", b""), (".env", b""), ("config", b"")]);
    let named_hidden = find(&dir, json!({"pattern": "{.env,config}"})).await;
    assert_eq!(ok(&named_hidden), ".env\nconfig");
    let named_git = find(&dir, json!({"pattern": ".git/*"})).await;
    assert_eq!(ok(&named_git), ".git/config");
}

#[tokio::test]
async fn find_files_max_results_truncates_and_stays_sorted() {
    let files: Vec<(String, &[u8])> = (0..40)
        .map(|n| (format!("d{}/f{n:02}.txt", n % 4), &b""[..]))
        .collect();
    let borrowed: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    let dir = Tree::with_bytes(&borrowed);
    let result = find(&dir, json!({"pattern": "*.txt", "max_results": 7})).await;
    let listed: Vec<&str> = ok(&result).lines().collect();
    assert_eq!(listed.len(), 7);
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted);
    assert_eq!(result.metadata["count"], json!(7));
    assert_eq!(result.metadata["truncated"], json!(true));

    let exact = find(&dir, json!({"pattern": "*.txt", "max_results": 40})).await;
    assert_eq!(ok(&exact).lines().count(), 40);
    assert_eq!(exact.metadata["truncated"], json!(false));
}

#[tokio::test]
async fn find_files_refuses_bad_globs_missing_paths_and_files() {
    let dir = Tree::with_bytes(&[("a.rs", b"")]);
    let bad = find(&dir, json!({"pattern": "src/[a"})).await;
    assert!(failed(&bad, ErrorType::InvalidArguments).contains("glob"));

    let missing = find(&dir, json!({"pattern": "*", "path": "nope"})).await;
    assert!(failed(&missing, ErrorType::NotFound).contains("nope"));

    let file = find(&dir, json!({"pattern": "*", "path": "a.rs"})).await;
    assert!(failed(&file, ErrorType::InvalidArguments).contains("a.rs is a file"));

    let no_pattern = find(&dir, json!({"path": "."})).await;
    failed(&no_pattern, ErrorType::InvalidArguments);
    let unknown = find(&dir, json!({"pattern": "*", "recursive": true})).await;
    failed(&unknown, ErrorType::InvalidArguments);
}

// ---------------------------------------------------------------- search_code

#[tokio::test]
async fn search_code_prints_path_line_text_in_file_then_line_order() {
    let dir = Tree::with_bytes(&[
        ("src/b.rs", b"fn b() {}\nfn main() {}\n"),
        ("src/a.rs", b"// nothing\nfn a() {}\n"),
        ("a.txt", b"fn top\n"),
        ("empty.rs", b"no functions here\n"),
    ]);
    let result = search(&dir, json!({"pattern": r"fn \w+"})).await;
    assert_eq!(
        ok(&result),
        "a.txt:1:fn top\nsrc/a.rs:2:fn a() {}\nsrc/b.rs:1:fn b() {}\nsrc/b.rs:2:fn main() {}"
    );
    assert_eq!(result.metadata["matches"], json!(4));
    assert_eq!(result.metadata["files"], json!(3));
    assert_eq!(result.metadata["truncated"], json!(false));

    let under_src = search(&dir, json!({"pattern": "main", "path": "./src"})).await;
    assert_eq!(ok(&under_src), "b.rs:2:fn main() {}");

    let one_file = search(&dir, json!({"pattern": "fn", "path": "./src/b.rs"})).await;
    assert_eq!(
        ok(&one_file),
        "src/b.rs:1:fn b() {}\nsrc/b.rs:2:fn main() {}"
    );

    let nothing = search(&dir, json!({"pattern": "zzz"})).await;
    assert_eq!(ok(&nothing), "");
    assert_eq!(nothing.metadata["matches"], json!(0));
}

#[tokio::test]
async fn search_code_filters_by_glob_and_ignores_case_on_request() {
    let dir = Tree::with_bytes(&[
        ("src/lib.rs", b"struct Tool;\n"),
        ("src/tool.ts", b"class TOOL {}\n"),
        ("docs/tool.md", b"a tool\n"),
    ]);
    let rust_only = search(&dir, json!({"pattern": "Tool", "glob": "*.rs"})).await;
    assert_eq!(ok(&rust_only), "src/lib.rs:1:struct Tool;");
    let any_case = search(&dir, json!({"pattern": "tool", "case_insensitive": true})).await;
    assert_eq!(
        ok(&any_case),
        "docs/tool.md:1:a tool\nsrc/lib.rs:1:struct Tool;\nsrc/tool.ts:1:class TOOL {}"
    );
    let negated = search(
        &dir,
        json!({"pattern": "tool", "case_insensitive": true, "glob": "!*.md"}),
    )
    .await;
    assert_eq!(
        ok(&negated),
        "src/lib.rs:1:struct Tool;\nsrc/tool.ts:1:class TOOL {}"
    );
    let in_dir = search(&dir, json!({"pattern": "(?i)tool", "glob": "src/**"})).await;
    assert_eq!(in_dir.metadata["files"], json!(2));
}

#[tokio::test]
async fn search_code_context_uses_ripgreps_conventions() {
    let text: String = (1..=12).map(|n| format!("line {n}\n")).collect();
    let dir = Tree::with_bytes(&[("a.txt", text.as_bytes()), ("b.txt", b"x\nline 5\n")]);
    let result = search(&dir, json!({"pattern": "^line (2|5|11)$", "context": 1})).await;
    let expected = "\
a.txt-1-line 1
a.txt:2:line 2
a.txt-3-line 3
a.txt-4-line 4
a.txt:5:line 5
a.txt-6-line 6
--
a.txt-10-line 10
a.txt:11:line 11
a.txt-12-line 12
--
b.txt-1-x
b.txt:2:line 5";
    assert_eq!(ok(&result), expected);
    assert_eq!(result.metadata["matches"], json!(4));

    let merged = search(&dir, json!({"pattern": "^line [23]$", "context": 1})).await;
    assert_eq!(
        ok(&merged),
        "a.txt-1-line 1\na.txt:2:line 2\na.txt:3:line 3\na.txt-4-line 4"
    );
}

#[tokio::test]
async fn search_code_max_results_truncates() {
    let many: String = (1..=50).map(|n| format!("hit {n}\n")).collect();
    let dir = Tree::with_bytes(&[("a.txt", many.as_bytes()), ("b.txt", many.as_bytes())]);
    let result = search(&dir, json!({"pattern": "hit", "max_results": 3})).await;
    let lines: Vec<&str> = ok(&result).lines().collect();
    assert_eq!(lines.len(), 3);
    // Whichever files made it in (walker threads race), files come sorted and each file's
    // lines come in order from its first match.
    let mut expected_next = std::collections::BTreeMap::new();
    let mut previous_file = "";
    for line in &lines {
        let (file, rest) = line.split_once(':').unwrap();
        assert!(file >= previous_file, "{lines:?}");
        previous_file = file;
        let next = expected_next.entry(file).or_insert(1);
        assert_eq!(*rest, format!("{next}:hit {next}"));
        *next += 1;
    }
    assert_eq!(result.metadata["matches"], json!(3));
    assert_eq!(result.metadata["truncated"], json!(true));

    let all = search(&dir, json!({"pattern": "hit", "max_results": 100})).await;
    assert_eq!(all.metadata["matches"], json!(100));
    assert_eq!(all.metadata["truncated"], json!(false));
}

#[tokio::test]
async fn search_code_honours_ignore_files_and_hidden_files() {
    let dir = Tree::with_bytes(&[
        (".gitignore", b"build/\n"),
        (".ignore", b"*.gen.rs\n"),
        ("build/out.rs", b"needle\n"),
        ("x.gen.rs", b"needle\n"),
        (".hidden/n.rs", b"needle\n"),
        ("src/n.rs", b"needle\n"),
    ]);
    assert_eq!(
        ok(&search(&dir, json!({"pattern": "needle"})).await),
        "src/n.rs:1:needle"
    );
    let named = search(&dir, json!({"pattern": "needle", "glob": ".hidden/**"})).await;
    assert_eq!(ok(&named), ".hidden/n.rs:1:needle");
}

#[tokio::test]
async fn an_ignored_directory_named_as_path_is_searched_with_the_other_rules_still_applied() {
    // As `rg --no-require-git needle build`: naming a directory searches it even if ignored.
    let dir = Tree::with_bytes(&[
        (".gitignore", b"build/\n*.log\n"),
        ("build/a.rs", b"needle\n"),
        ("build/sub/b.rs", b"needle\n"),
        ("build/x.log", b"needle\n"),
    ]);
    let result = search(&dir, json!({"pattern": "needle", "path": "build"})).await;
    assert_eq!(ok(&result), "a.rs:1:needle\nsub/b.rs:1:needle");
    let listed = find(&dir, json!({"pattern": "*", "path": "build"})).await;
    assert_eq!(ok(&listed), "a.rs\nsub/b.rs");
}

#[tokio::test]
async fn search_code_skips_binary_files_and_cuts_long_lines() {
    let long_line = format!("needle{}\n", "x".repeat(5000));
    let dir = Tree::with_bytes(&[
        ("bin.dat", b"needle\x00\x01\x02 needle\n"),
        ("min.js", long_line.as_bytes()),
        ("latin1.txt", b"caf\xe9 needle\n"),
    ]);
    let result = search(&dir, json!({"pattern": "needle"})).await;
    let content = ok(&result);
    let lines: Vec<&str> = content.lines().collect();
    assert_eq!(lines.len(), 2, "{content}");
    assert_eq!(lines[0], "latin1.txt:1:caf\u{fffd} needle");
    let cut = lines[1].strip_prefix("min.js:1:needle").unwrap();
    assert!(cut.len() < 1100, "{} bytes", cut.len());
    assert!(
        cut.ends_with("[…4006 more bytes of this line cut]"),
        "{cut}"
    );
}

#[tokio::test]
async fn search_code_refuses_bad_regexes_and_missing_paths() {
    let dir = Tree::with_bytes(&[("a.rs", b"x\n")]);
    let bad = search(&dir, json!({"pattern": "fn (main"})).await;
    assert!(failed(&bad, ErrorType::InvalidArguments).contains("regex"));
    let bad_glob = search(&dir, json!({"pattern": "x", "glob": "[z"})).await;
    assert!(failed(&bad_glob, ErrorType::InvalidArguments).contains("glob"));
    let missing = search(&dir, json!({"pattern": "x", "path": "gone/dir"})).await;
    assert!(failed(&missing, ErrorType::NotFound).contains("gone/dir"));
    nix::unistd::mkfifo(&dir.root().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let fifo = search(&dir, json!({"pattern": "x", "path": "pipe"})).await;
    assert!(failed(&fifo, ErrorType::InvalidArguments).contains("neither a directory"));
    let too_much_context = search(&dir, json!({"pattern": "x", "context": 1000})).await;
    failed(&too_much_context, ErrorType::InvalidArguments);
    let as_string = call(dir.env(), "search_code", json!("{\"pattern\": \"x\"}")).await;
    assert_eq!(ok(&as_string), "a.rs:1:x");
}

#[tokio::test]
async fn a_canceled_search_ends_canceled() {
    let dir = Tree::with_bytes(&[("a.rs", b"x\n")]);
    let cancel = CancellationToken::new();
    cancel.cancel();
    for (tool, pattern) in [("search_code", "x"), ("find_files", "*")] {
        let result =
            call_canceled_by(dir.env(), tool, json!({"pattern": pattern}), cancel.clone()).await;
        failed(&result, ErrorType::Canceled);
    }
}
