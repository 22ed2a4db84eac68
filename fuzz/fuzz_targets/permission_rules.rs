//! Fuzz target for the permission rule parser and matcher: arbitrary rule strings compiled into
//! a policy and judged against an arbitrary call.
//!
//! Input: NUL-separated fields `rule \0 tool \0 argument-or-command \0 path`.
//!
//! Invariants: no panic; a rule both allowed and denied never allows (a deny form is always
//! at least as wide as the allow form of the same rule: forms, path scopes, arguments); and
//! `t(a=PATTERN)` allows `{"a": TEXT}` exactly when a reference matcher says PATTERN covers
//! TEXT (`*` matches anything, a trailing ` *` also matches nothing).
#![no_main]

#[path = "parser_panics.rs"]
mod parser_panics;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use toold::Env;
use toold::permission::facts::{AnalysedLine, command_facts, command_line};
use toold::permission::{CallFacts, Decision, HookVerdict, Policy, SessionFacts, Step, evaluate};
use toold_protocol::{Rules, Safety, SessionMode};

/// A session directory with a file and a symlink out of it, made once per process.
fn world() -> &'static (tempfile::TempDir, PathBuf) {
    static WORLD: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let base = dir.path().canonicalize().expect("it resolves");
        let root = base.join("project");
        std::fs::create_dir_all(root.join("src")).expect("the session root");
        std::fs::create_dir_all(base.join("outside")).expect("a directory outside");
        std::fs::write(root.join("src/main.rs"), "").expect("a file");
        std::os::unix::fs::symlink(base.join("outside"), root.join("out")).expect("a symlink");
        (dir, root)
    })
}

/// The reference: only `*` is special, and a pattern ending in ` *` also matches without
/// that tail.
fn reference_match(pattern: &str, text: &str) -> bool {
    if let Some(stem) = pattern.strip_suffix(" *")
        && reference_match(stem, text)
    {
        return true;
    }
    star_match(pattern.as_bytes(), text.as_bytes())
}

/// Classic dynamic programming over bytes: `*` matches any run of bytes.
fn star_match(pattern: &[u8], text: &[u8]) -> bool {
    let mut row = vec![false; text.len() + 1];
    row[0] = true;
    for &p in pattern {
        let mut next = vec![false; text.len() + 1];
        if p == b'*' {
            let mut any = false;
            for (i, slot) in next.iter_mut().enumerate() {
                any |= row[i];
                *slot = any;
            }
        } else {
            for i in 0..text.len() {
                next[i + 1] = row[i] && text[i] == p;
            }
        }
        row = next;
    }
    row[text.len()]
}

fn decide(
    policy: &Policy,
    tool: &str,
    arguments: &Map<String, Value>,
    env: &Env,
    path: Option<&str>,
) -> Decision {
    let paths: Vec<_> = path.map(|raw| env.resolve_path(raw)).into_iter().collect();
    let analysed = command_line(tool, arguments).map(AnalysedLine::here);
    let command = command_facts(tool, arguments, env, analysed.as_ref());
    let call = CallFacts {
        tool,
        // Side effects: no read-only or accept-edits allowance, only the rules can allow.
        safety: Safety::SideEffect,
        system: false,
        arguments,
        paths: &paths,
        command: command.as_ref(),
        hook: HookVerdict::Silent,
    };
    let judgment = evaluate(
        &call,
        &SessionFacts {
            mode: SessionMode::Default,
            policy,
            grants: &[],
            // Judged by the rules alone: what the fuzzing holds is the rules' analysis.
            confined: false,
        },
    );
    // A line of the known-safe list is allowed by the list, whatever the rules: what this
    // target holds is what the rules allow.
    match judgment.step {
        Step::KnownSafe => Decision::Ask {
            reason: "known-safe, not the rules".to_owned(),
            suggestion: String::new(),
        },
        _ => judgment.decision,
    }
}

fuzz_target!(|data: &[u8]| {
    parser_panics::leave_parser_panics_to_toold();
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut fields = text.split('\0');
    let rule = fields.next().unwrap_or_default();
    let tool = fields.next().unwrap_or("run_command");
    let argument = fields.next().unwrap_or_default();
    let path = fields.next();
    let (_, root) = world();
    let env = Env::new(root);
    let home = Path::new("/home/user");

    // The rule as written, in allow and deny at once.
    let both = Rules {
        allow: vec![rule.to_owned()],
        ask: Vec::new(),
        deny: vec![rule.to_owned()],
    };
    if let Ok(policy) = Policy::compile([&both], &env.cwd, home) {
        let mut arguments = Map::new();
        arguments.insert("command".to_owned(), Value::from(argument));
        arguments.insert("text".to_owned(), Value::from(argument));
        if let Some(raw) = path {
            arguments.insert("path".to_owned(), Value::from(raw));
        }
        let decision = decide(&policy, tool, &arguments, &env, path);
        assert!(
            decision != Decision::Allow,
            "the rule {rule:?} in both allow and deny allowed {tool} {arguments:?}"
        );
        // Deny alone must deny whatever allow alone allowed.
        let allow_only = Policy {
            deny: Vec::new(),
            ..policy.clone()
        };
        if decide(&allow_only, tool, &arguments, &env, path) == Decision::Allow {
            assert!(
                matches!(decision, Decision::Deny(_)),
                "{rule:?} allows {tool} {arguments:?} but does not deny it: {decision:?}"
            );
        }
    }

    // The wildcard against the reference matcher, through a named-argument rule.
    let pattern = rule;
    let named = Rules {
        allow: vec![format!("t(a={pattern})")],
        ..Rules::default()
    };
    let policy = Policy::compile([&named], &env.cwd, home).expect("t(a=...) always parses");
    let mut arguments = Map::new();
    arguments.insert("a".to_owned(), Value::from(argument));
    let allowed = decide(&policy, "t", &arguments, &env, None) == Decision::Allow;
    assert_eq!(
        allowed,
        reference_match(pattern, argument),
        "t(a={pattern:?}) against {argument:?}"
    );
});
