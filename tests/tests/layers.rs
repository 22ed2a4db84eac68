//! The daemon library's layers (ARCHITECTURE.md, "Layers"), read from its source: every
//! `crate::` path in a module points to its own layer or one below, and no two modules import
//! each other, directly or round a longer cycle, in any crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The daemon library's top-level modules by layer, lowest first; a module may import its own
/// layer and the ones below.
const DAEMON_LAYERS: &[&[&str]] = &[
    &[
        "tools",
        "index",
        "mcp",
        "env",
        "paths",
        "git_config",
        "judged_files",
        "process_tree",
        "secrets",
        "sandbox",
        "spawn",
        "shell",
        "logging",
    ],
    &["permission", "hooks", "approval", "events", "audit"],
    &["pipeline"],
    &["session"],
    &["rpc", "server", "config", "serve"],
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A file's module path below its crate's root (`pipeline::call`; the root is empty).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).expect("under the root");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// A file's code without its comments and its `tests` module, which may use anything.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("a source file");
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    let comment = Regex::new(r"//[^\n]*").expect("a regex");
    comment.replace_all(text, "").into_owned()
}

/// The modules of a crate each module imports, as module paths: `crate::a::b::Item` names
/// the longest module path that exists (`a::b`, else `a`); `super::x` and `use super::{x, y}`
/// name modules beside this one (or the parent, for an item of it). A module's own
/// submodules, which are part of it, are left out both ways.
fn imports(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = sources(root);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|file| module_of(root, file).join("::"))
        .collect();
    let longest = |parts: &[&str]| -> Option<String> {
        (1..=parts.len())
            .rev()
            .map(|len| parts[..len].join("::"))
            .find(|candidate| modules.contains(candidate))
    };
    let crate_path = Regex::new(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)").unwrap();
    let super_path =
        Regex::new(r"\bsuper::(\{[^}]*\}|(?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(root, file);
        let name = module.join("::");
        let code = code_of(file);
        let mut targets = BTreeSet::new();
        for found in crate_path.captures_iter(&code) {
            let parts: Vec<&str> = found[1].split("::").collect();
            targets.extend(longest(&parts));
        }
        // `super` of module `a::b` is `a`, whether `b` is a file of its own or a directory's `mod.rs`.
        let parent: Vec<&str> = module[..module.len().saturating_sub(1)]
            .iter()
            .map(String::as_str)
            .collect();
        for found in super_path.captures_iter(&code) {
            let items = found[1].trim_matches(|c| c == '{' || c == '}');
            for item in items.split(',') {
                let mut parts = parent.clone();
                parts.extend(
                    item.trim()
                        .split("::")
                        .filter(|part| part.chars().next().is_some_and(char::is_lowercase))
                        .filter(|part| *part != "self"),
                );
                match longest(&parts) {
                    Some(target) => {
                        targets.insert(target);
                    }
                    None => {
                        targets.insert(parent.join("::"));
                    }
                }
            }
        }
        let own = |target: &String| {
            target == &name
                || name.is_empty()
                || target.is_empty()
                || target.starts_with(&format!("{name}::"))
                || name.starts_with(&format!("{target}::"))
        };
        graph
            .entry(name.clone())
            .or_default()
            .extend(targets.into_iter().filter(|target| !own(target)));
    }
    graph
}

/// The modules on a cycle of `graph`, one cycle each.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in graph.keys() {
        // A path back to `start` through modules after it in order: each cycle once.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    found.push(path.clone());
                } else if next > start && seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

#[test]
fn the_daemon_library_imports_only_its_own_layer_and_those_below() {
    let layer_of = |module: &str| {
        let top = module.split("::").next().unwrap_or_default();
        DAEMON_LAYERS.iter().position(|layer| layer.contains(&top))
    };
    let graph = imports(&workspace().join("daemon/src"));
    let mut upward = Vec::new();
    for (module, targets) in &graph {
        if module.is_empty() {
            continue;
        }
        let from = layer_of(module)
            .unwrap_or_else(|| panic!("{module} is in no layer: add it to DAEMON_LAYERS"));
        for target in targets {
            let to = layer_of(target)
                .unwrap_or_else(|| panic!("{target} is in no layer: add it to DAEMON_LAYERS"));
            if to > from {
                upward.push(format!("{module} imports {target}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports up the layers: {upward:#?}");
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    for dir in [
        "protocol/src",
        "client/src",
        "daemon/src",
        "daemon/cli",
        "tests/src",
        "bench/src",
    ] {
        let graph = imports(&workspace().join(dir));
        let found = cycles(&graph);
        assert!(found.is_empty(), "import cycles in {dir}: {found:#?}");
    }
}
