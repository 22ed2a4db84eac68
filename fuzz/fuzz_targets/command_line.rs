//! Fuzz target for command-line analysis: an arbitrary line judged under a policy that allows
//! exactly `run_command(echo *)` and `run_command(git status)`.
//!
//! Invariant: an allow never covers more than those rules say. When the line is allowed,
//! - the analysis sees it all (nothing opaque, nothing nested) and every command's allow
//!   forms are `echo …` or `git status`, its writes inside the session root;
//! - independently of the shell parser, a small quote-aware scan of the raw line finds no
//!   command substitution (`$(`, a backquote, a `$((` or `((` that does not close as `))`,
//!   which bash runs as subshells), process substitution (`<(`, `>(`) or `$[` outside single
//!   quotes, `$'…'` and comments. Lines with a here-document (`<<`) skip this
//!   scan: a quoted delimiter makes its body literal, which the scan does not model.
#![no_main]

#[path = "parser_panics.rs"]
mod parser_panics;

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use toold::Env;
use toold::permission::facts::{AnalysedLine, command_facts};
use toold::permission::{CallFacts, Decision, HookVerdict, Policy, SessionFacts, Step, evaluate};
use toold_protocol::{Rules, Safety, SessionMode};

fn world() -> &'static (tempfile::TempDir, PathBuf, Policy) {
    static WORLD: OnceLock<(tempfile::TempDir, PathBuf, Policy)> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir
            .path()
            .canonicalize()
            .expect("it resolves")
            .join("project");
        std::fs::create_dir_all(&root).expect("the session root");
        let rules = Rules {
            allow: vec![
                "run_command(echo *)".to_owned(),
                "run_command(git status)".to_owned(),
            ],
            ..Rules::default()
        };
        let policy = Policy::compile([&rules], &root, &root).expect("the rules parse");
        (dir, root, policy)
    })
}

/// Where the scan is in the line.
#[derive(Clone, Copy, PartialEq)]
enum Quote {
    None,
    Single,
    Double,
    AnsiC,
    Comment,
}

/// Whether the text after `((` or `$((` closes with `))` at its own level: only then is it
/// arithmetic to bash, which otherwise reads subshells.
fn closes_as_arithmetic(rest: &[u8]) -> bool {
    let mut depth = 0usize;
    for (i, &byte) in rest.iter().enumerate() {
        match byte {
            b'(' => depth += 1,
            b')' if depth == 0 => return rest.get(i + 1) == Some(&b')'),
            b')' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// The first construct outside single quotes, `$'…'` and comments that runs code, if any.
fn active_substitution(line: &str) -> Option<&'static str> {
    let bytes = line.as_bytes();
    let mut state = Quote::None;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let next = bytes.get(i + 1).copied();
        match state {
            Quote::Single => {
                if byte == b'\'' {
                    state = Quote::None;
                }
            }
            Quote::AnsiC => match byte {
                b'\\' => i += 1,
                b'\'' => state = Quote::None,
                _ => {}
            },
            Quote::Comment => {
                if byte == b'\n' {
                    state = Quote::None;
                }
            }
            Quote::None | Quote::Double => {
                match (byte, next) {
                    (b'\\', _) => i += 1,
                    // `$$` is the shell's pid: a `(` right after it starts no substitution
                    // (the shells reject it as a syntax error).
                    (b'$', Some(b'$')) => i += 1,
                    (b'`', _) => return Some("a backquote"),
                    (b'$', Some(b'(')) => {
                        if bytes.get(i + 2) != Some(&b'(') {
                            return Some("$(");
                        }
                        if !closes_as_arithmetic(&bytes[i + 3..]) {
                            return Some("a `$((` that bash runs as a command substitution");
                        }
                        // `$((`: arithmetic; what is inside is scanned on.
                        i += 2;
                    }
                    (b'(', Some(b'(')) if state == Quote::None => {
                        if !closes_as_arithmetic(&bytes[i + 2..]) {
                            return Some("a `((` that bash runs as subshells");
                        }
                        i += 1;
                    }
                    (b'$', Some(b'[')) => return Some("$["),
                    (b'<' | b'>', Some(b'(')) if state == Quote::None => {
                        return Some("a process substitution");
                    }
                    (b'$', Some(b'\'')) if state == Quote::None => {
                        state = Quote::AnsiC;
                        i += 1;
                    }
                    (b'\'', _) if state == Quote::None => state = Quote::Single,
                    (b'"', _) => {
                        state = if state == Quote::Double {
                            Quote::None
                        } else {
                            Quote::Double
                        }
                    }
                    (b'#', _) if state == Quote::None => {
                        let word_start = i == 0
                            || matches!(
                                bytes[i - 1],
                                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')'
                            );
                        if word_start {
                            state = Quote::Comment;
                        }
                    }
                    _ => {}
                }
            }
        }
        i += 1;
    }
    None
}

fuzz_target!(|data: &[u8]| {
    parser_panics::leave_parser_panics_to_toold();
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let (_, root, policy) = world();
    let env = Env::new(root);
    let mut arguments = Map::new();
    arguments.insert("command".to_owned(), Value::from(line));
    let analysed = AnalysedLine::here(line);
    let facts = command_facts("run_command", &arguments, &env, Some(&analysed))
        .expect("run_command has facts");
    let call = CallFacts {
        tool: "run_command",
        safety: Safety::SideEffect,
        system: false,
        arguments: &arguments,
        paths: &[],
        command: Some(&facts),
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
    if judgment.decision != Decision::Allow {
        return;
    }
    let analysis = &facts.analysis;
    if judgment.step == Step::KnownSafe {
        // Allowed by the known-safe list, not the rules: every command plain and visible,
        // nothing written, nothing hidden.
        assert!(
            analysis.opaque.is_empty(),
            "known-safe though opaque: {line:?}"
        );
        assert!(
            analysis.hidden_code.is_empty(),
            "known-safe with hidden code: {line:?}"
        );
        assert!(
            facts.written.is_empty(),
            "known-safe though it writes: {line:?}"
        );
        assert!(
            !analysis.commands.is_empty(),
            "known-safe with no command: {line:?}"
        );
        for command in &analysis.commands {
            assert!(
                !command.nested,
                "known-safe with a nested command: {line:?}"
            );
            assert!(
                !command.plain_words.is_empty(),
                "known-safe though a command's words are not plain: {line:?}"
            );
        }
        return;
    }
    assert!(
        analysis.opaque.is_empty(),
        "allowed though opaque: {line:?}"
    );
    assert!(
        !analysis.commands.is_empty(),
        "allowed with no command: {line:?}"
    );
    for command in &analysis.commands {
        assert!(!command.nested, "allowed with a nested command: {line:?}");
        for form in &command.allow_forms {
            assert!(
                form == "git status" || form == "echo" || form.starts_with("echo "),
                "allowed {line:?}, whose command {form:?} is neither echo nor git status"
            );
        }
    }
    for written in &facts.written {
        assert!(
            written.inside_roots(),
            "allowed {line:?}, which writes {written:?} outside the root"
        );
    }
    if !line.contains("<<")
        && let Some(what) = active_substitution(line)
    {
        panic!("allowed {line:?}, which has {what} that runs code");
    }
});
