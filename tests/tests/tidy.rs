//! The repository's docs check themselves: every source file opens with a line saying what it
//! owns, no doc or comment names a file the repository does not have (the documents a clone
//! lacks among them), and ARCHITECTURE.md's code map names every source file. Each check is a
//! function over the files' text, run on the repository and, to show that it can fail, on a
//! small tree that breaks it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// A file as the checks see it: its path from the repository's root and its text.
struct File {
    path: String,
    text: String,
}

/// Names of files that docs and comments may name though the repository has none: files a
/// user or another program has, not this repository.
const NOT_OURS: [&str; 3] = [
    // The user's config file (the repository's example of one is `config/toold.toml`).
    "config.toml",
    // What an example command writes `toold import codex`'s rules to.
    "codex.toml",
    // Emacs's JSON-RPC library, which toold.el builds on.
    "jsonrpc.el",
];

/// The tracked text files of the repository, or `None` outside a git checkout (a source
/// tarball), where there is nothing to list.
fn tracked_files() -> Option<Vec<File>> {
    let root = repository_root();
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git ls-files");
    if !listed.status.success() {
        return None;
    }
    let files = listed
        .stdout
        .split(|byte| *byte == 0)
        .filter(|name| !name.is_empty())
        .filter_map(|name| {
            let path = String::from_utf8_lossy(name).into_owned();
            // A file listed but deleted in the working tree, or not text, has nothing to check.
            let text = std::fs::read_to_string(root.join(&path)).ok()?;
            Some(File { path, text })
        })
        .collect();
    Some(files)
}

fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
}

/// How a file of this kind starts a comment, for the kinds whose comments are checked.
fn comment_marker(path: &str) -> Option<&'static str> {
    let extension = path.rsplit_once('.').map(|(_, extension)| extension);
    match extension {
        Some("rs" | "js") => Some("//"),
        Some("lua") => Some("--"),
        Some("el") => Some(";"),
        Some("sh" | "py" | "toml" | "service" | "socket") => Some("#"),
        _ if path.ends_with(".ci/run") => Some("#"),
        _ => None,
    }
}

/// What a reader of `file` reads as prose: all of a Markdown file, the comments of code.
fn prose(file: &File) -> Vec<(usize, &str)> {
    let lines = file
        .text
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line));
    if file.path.ends_with(".md") {
        return lines.collect();
    }
    let Some(marker) = comment_marker(&file.path) else {
        return Vec::new();
    };
    lines
        .filter_map(|(number, line)| {
            let at = line.find(marker)?;
            let (before, comment) = (&line[..at], &line[at + marker.len()..]);
            // `//` inside a URL is not a comment; neither is a string that merely holds one.
            (!before.ends_with(':') && before.matches('"').count() % 2 == 0)
                .then_some((number, comment))
        })
        .collect()
}

/// The Rust sources that do not open with a `//!` line, and the other sources (Lua, Emacs
/// Lisp, shell, Python) that do not open with a comment (after a `#!` line).
fn without_header(files: &[File]) -> Vec<String> {
    let mut missing = Vec::new();
    for file in files {
        let first = file
            .text
            .lines()
            .find(|line| !line.starts_with("#!") && !line.trim().is_empty())
            .unwrap_or("");
        let opens_with_header = if file.path.ends_with(".rs") {
            first.starts_with("//!")
        } else if file.path.ends_with(".py") {
            first.starts_with('#') || first.starts_with("\"\"\"")
        } else if file.path.ends_with(".toml") || file.path.ends_with(".md") {
            continue;
        } else if let Some(marker) = comment_marker(&file.path) {
            first.starts_with(marker)
        } else {
            continue;
        };
        if !opens_with_header {
            missing.push(file.path.clone());
        }
    }
    missing
}

/// The kinds of file a doc may name by path and this check holds to the repository.
const NAMED_KINDS: [&str; 7] = ["rs", "md", "sh", "lua", "el", "py", "toml"];

/// Every file name or path (of a kind in `NAMED_KINDS`) that `line` names, without patterns
/// (`tests/*.rs`, `tests/NAME/main.rs`) and addresses (`https://…`).
fn names_in(line: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for word in line.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '`' | '(' | ')' | '[' | ']' | ',' | ';' | '"' | '\'' | '<' | '>' | '|'
            )
    }) {
        if word.contains("://") || word.contains('*') || word.contains("NAME") {
            continue;
        }
        let word = word.trim_end_matches([':', '.', '!', '?']);
        let Some((stem, extension)) = word.rsplit_once('.') else {
            continue;
        };
        if stem.is_empty() || !NAMED_KINDS.contains(&extension) {
            continue;
        }
        if !stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.' | '~' | '$'))
        {
            continue;
        }
        // A path from `/`, `~` or a variable is a file of the user's machine, and one under
        // `target/` is something a build writes, not the repository's.
        if stem.starts_with(['/', '~', '$']) || stem.starts_with("target/") {
            continue;
        }
        names.push(word);
    }
    names
}

/// The places where a doc or comment names a file that no tracked path is or ends with.
fn names_of_missing_files(files: &[File]) -> Vec<String> {
    let paths: BTreeSet<&str> = files.iter().map(|file| file.path.as_str()).collect();
    let exists = |name: &str| {
        let name = name.trim_start_matches("./");
        let name = name.trim_start_matches("../");
        paths.contains(name)
            || paths
                .iter()
                .any(|path| path.ends_with(name) && path[..path.len() - name.len()].ends_with('/'))
    };
    let mut missing = Vec::new();
    for file in files {
        for (number, line) in prose(file) {
            for name in names_in(line) {
                let file_name = name.rsplit('/').next().unwrap_or(name);
                if !exists(name) && !NOT_OURS.contains(&file_name) {
                    missing.push(format!("{}:{number}: {name}", file.path));
                }
            }
        }
    }
    missing
}

/// Whether `path` is a source file the code map must name: the code of the crates, the
/// binaries, the fuzz targets and the editor plugins, not the tests (a crate's `tests.rs`
/// modules and its integration tests, which the map describes by area).
fn is_mapped_source(path: &str) -> bool {
    let code = [".rs", ".lua", ".el"]
        .iter()
        .any(|kind| path.ends_with(kind));
    let file_name = path.rsplit('/').next().unwrap_or(path);
    code && file_name != "tests.rs"
        && !path.contains("/tests/")
        && !path.starts_with("tests/tests/")
        && !path.starts_with("tests/editors/")
        && !path.starts_with("client/examples/")
}

/// A source file's name in the code map: its path from its crate's `src/`, or from its
/// crate's directory when it is outside `src/` (`daemon/cli/main.rs` is `cli/main.rs`).
fn map_name(path: &str) -> (&str, &str) {
    let (crate_dir, rest) = path.split_once('/').unwrap_or(("", path));
    (crate_dir, rest.strip_prefix("src/").unwrap_or(rest))
}

/// The source files that ARCHITECTURE.md's code map does not name: each must stand, in
/// backticks, in the map's section for its crate (a `### ` heading whose first backticked
/// word is the crate's directory, `daemon/`).
fn missing_from_code_map(architecture: &str, files: &[File]) -> Vec<String> {
    let map = architecture
        .split("\n## Code map")
        .nth(1)
        .map(|rest| rest.split("\n## ").next().unwrap_or(rest))
        .unwrap_or("");
    let mut sections: Vec<(&str, BTreeSet<&str>)> = Vec::new();
    for section in map.split("\n### ").skip(1) {
        let mut quoted = section.split('`').skip(1).step_by(2);
        let Some(directory) = quoted.next() else {
            continue;
        };
        sections.push((directory.trim_end_matches('/'), quoted.collect()));
    }
    let mut missing = Vec::new();
    for file in files.iter().filter(|file| is_mapped_source(&file.path)) {
        let (crate_dir, name) = map_name(&file.path);
        let named = sections
            .iter()
            .any(|(directory, words)| *directory == crate_dir && words.contains(name));
        if !named {
            missing.push(file.path.clone());
        }
    }
    missing
}

fn fail_on(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn every_source_file_opens_with_what_it_owns() {
    let Some(files) = tracked_files() else { return };
    fail_on(
        without_header(&files),
        "source files without a `//!` line (or, outside Rust, a first comment) saying what they own",
    );
}

#[test]
fn no_doc_or_comment_names_a_file_the_repository_lacks() {
    let Some(files) = tracked_files() else { return };
    fail_on(
        names_of_missing_files(&files),
        "docs and comments naming a file the repository does not have",
    );
}

#[test]
fn the_code_map_names_every_source_file() {
    let Some(files) = tracked_files() else { return };
    let architecture = std::fs::read_to_string(repository_root().join("ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md");
    fail_on(
        missing_from_code_map(&architecture, &files),
        "source files ARCHITECTURE.md's code map does not name (add an entry under their crate)",
    );
}

/// A small tree that breaks every check, so that each is seen to fail.
fn broken_tree() -> Vec<File> {
    let file = |path: &str, text: &str| File {
        path: path.to_owned(),
        text: text.to_owned(),
    };
    vec![
        file(
            "daemon/src/lib.rs",
            "//! The library.\n// Read DESIGN.md first.\n",
        ),
        file("daemon/src/headless.rs", "use std::fs;\n"),
        file("daemon/src/mapped.rs", "//! Named in the map.\n"),
        file(
            "client/nvim/lua/toold/rpc.lua",
            "local M = {}\n-- see rpc.lua\nreturn M\n",
        ),
        file(
            "README.md",
            "See [the contract](docs/protocol.md) and `daemon/src/mapped.rs`, \
             https://example.invalid/EXTENSIONS.md, `tests/*.rs`.\n",
        ),
    ]
}

#[test]
fn each_check_fails_on_a_tree_that_breaks_it() {
    let files = broken_tree();
    assert_eq!(
        without_header(&files),
        ["daemon/src/headless.rs", "client/nvim/lua/toold/rpc.lua"]
    );
    assert_eq!(
        names_of_missing_files(&files),
        [
            "daemon/src/lib.rs:2: DESIGN.md",
            "README.md:1: docs/protocol.md"
        ]
    );
    let architecture = "# A\n\n## Code map\n\n### `daemon/` (crate)\n\n- `lib.rs`: the map.\n\
                        - `mapped.rs`: named.\n\n### `client/`\n\n- `nvim/lua/toold/init.lua`\n\n\
                        ## Invariants\n\n- `headless.rs` is named here, outside the map.\n";
    assert_eq!(
        missing_from_code_map(architecture, &files),
        ["daemon/src/headless.rs", "client/nvim/lua/toold/rpc.lua"]
    );
}
