//! Codex's settings as toold config: `config.toml`'s sandbox and approval policy
//! ([`config`]), and the `prefix_rule`s of its `.rules` files ([`rules`]), each made a
//! `run_command` rule whose pattern is the prefix's words followed by ` *` (which also matches
//! nothing, so `git push` alone is covered, as in Codex). A rule's `match` and `not_match`
//! examples are its self-tests: each is decided by toold's own engine against the rule made,
//! and a rule that fails one is dropped.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value as Json};
use toml_edit::{DocumentMut, Item};
use toold_protocol::{Safety, SessionMode};

use super::starlark::{self, Call, Value};
use super::{Dropped, Import, ImportedRule, Sourced, Unmapped, comment_text, shown_path};
use crate::permission::{
    CallFacts, CommandFacts, HookVerdict, Policy, Rule, RuleList, SessionFacts, Step, evaluate,
    shell_quoted,
};
use crate::shell::CommandLine;

/// What `config.toml` maps: `sandbox_mode`, `[sandbox_workspace_write]`'s `writable_roots`
/// and `network_access`, and `approval_policy`. A file that is not TOML is an error.
pub fn config(file: &Path, text: &str, home: &Path) -> Result<Import, String> {
    let shown = shown_path(file, home);
    let document: DocumentMut = text
        .parse()
        .map_err(|error| format!("{shown} is not valid TOML: {error}"))?;
    let mut import = Import::default();
    let mut unmapped = Vec::new();
    let origin = |key: &str, value: &dyn std::fmt::Display| {
        comment_text(&format!("{shown}: {key} = {value}"))
    };
    for (key, item) in document.iter() {
        match key {
            "sandbox_mode" => {
                let written = item.as_str();
                let mode = match written {
                    Some("read-only") => Some("read_only"),
                    Some("workspace-write") => Some("workspace_write"),
                    Some("danger-full-access") => Some("off"),
                    _ => None,
                };
                match mode {
                    Some(mode) => {
                        import.sandbox.mode = Some(Sourced {
                            value: mode,
                            origin: origin(key, &item_text(item)),
                        });
                    }
                    None => import.dropped.push(Dropped {
                        source: shown.clone(),
                        entry: format!("sandbox_mode = {}", item_text(item)),
                        why:
                            "expected \"read-only\", \"workspace-write\" or \"danger-full-access\""
                                .to_owned(),
                    }),
                }
            }
            "approval_policy" => approval_policy(&shown, item, &mut import),
            "sandbox_workspace_write" => {
                let Some(table) = item.as_table_like() else {
                    import.dropped.push(Dropped {
                        source: shown.clone(),
                        entry: "sandbox_workspace_write".to_owned(),
                        why: "is not a table".to_owned(),
                    });
                    continue;
                };
                for (inner, value) in table.iter() {
                    let key = format!("sandbox_workspace_write.{inner}");
                    match inner {
                        "network_access" => match value.as_bool() {
                            Some(network) => {
                                import.sandbox.network = Some(Sourced {
                                    value: network,
                                    origin: origin(&key, &network),
                                });
                            }
                            None => import.dropped.push(Dropped {
                                source: shown.clone(),
                                entry: format!("{key} = {}", item_text(value)),
                                why: "is not true or false".to_owned(),
                            }),
                        },
                        "writable_roots" => {
                            writable_roots(&shown, &key, value, &mut import);
                        }
                        _ => unmapped.push(key),
                    }
                }
            }
            _ => unmapped.push(key.to_owned()),
        }
    }
    if !unmapped.is_empty() {
        import.unmapped.push(Unmapped {
            source: shown,
            keys: unmapped,
            why: "not mapped (no toold equivalent, or not about permissions)".to_owned(),
        });
    }
    Ok(import)
}

fn item_text(item: &Item) -> String {
    match item.as_value() {
        Some(value) => value.to_string().trim().to_owned(),
        None => "(a table)".to_owned(),
    }
}

fn approval_policy(shown: &str, item: &Item, import: &mut Import) {
    let written = item_text(item);
    let origin = comment_text(&format!("{shown}: approval_policy = {written}"));
    let value = match item.as_str() {
        Some("untrusted") => "ask",
        Some("on-request" | "on-failure") => "allow",
        Some("never") => {
            import.dropped.push(Dropped {
                source: shown.to_owned(),
                entry: format!("approval_policy = {written}"),
                why: "never asking is a session's mode in toold, chosen when it is created \
                      (`--mode dont_ask`: what would ask is denied); sandboxed commands still \
                      run unasked (sandboxed_commands = \"allow\")"
                    .to_owned(),
            });
            "allow"
        }
        _ => {
            import.dropped.push(Dropped {
                source: shown.to_owned(),
                entry: format!("approval_policy = {written}"),
                why: "expected \"untrusted\", \"on-request\", \"on-failure\" or \"never\""
                    .to_owned(),
            });
            return;
        }
    };
    import.sandboxed_commands = Some(Sourced { value, origin });
}

fn writable_roots(shown: &str, key: &str, item: &Item, import: &mut Import) {
    let Some(roots) = item.as_array() else {
        import.dropped.push(Dropped {
            source: shown.to_owned(),
            entry: format!("{key} = {}", item_text(item)),
            why: "is not an array of directories".to_owned(),
        });
        return;
    };
    for root in roots {
        match root.as_str() {
            Some(dir) if dir.starts_with('/') || dir.starts_with("~/") => {
                import.sandbox.writable.push(Sourced {
                    value: dir.to_owned(),
                    origin: comment_text(&format!("{shown}: {key}")),
                });
            }
            _ => import.dropped.push(Dropped {
                source: shown.to_owned(),
                entry: format!("{key}: {}", root.to_string().trim()),
                why: "[sandbox] writable takes absolute directories (or ~/…)".to_owned(),
            }),
        }
    }
}

/// The `prefix_rule`s of a `.rules` file. A file outside the Starlark subset is an error with
/// its line; a rule toold cannot express exactly, or whose examples toold decides otherwise,
/// is dropped with why. `analyze` reads an example's command line as the daemon does.
pub fn rules(
    file: &Path,
    text: &str,
    home: &Path,
    analyze: &mut dyn FnMut(&str) -> CommandLine,
) -> Result<Import, String> {
    let shown = shown_path(file, home);
    let calls = starlark::parse(text)
        .map_err(|error| format!("{shown}:{}: {}", error.line, error.reason))?;
    let mut import = Import::default();
    for call in calls {
        let source = format!("{shown}:{}", call.line);
        match prefix_rule(&call, home, analyze) {
            Ok((list, rules, justification)) => {
                let origin = match justification {
                    Some(why) => comment_text(&format!("{source}: {why}")),
                    None => source,
                };
                import
                    .rules
                    .extend(rules.into_iter().map(|rule| ImportedRule {
                        list,
                        rule,
                        origin: origin.clone(),
                    }));
            }
            Err(why) => import.dropped.push(Dropped {
                source,
                entry: summary(&call),
                why,
            }),
        }
    }
    Ok(import)
}

/// A call as a one-line summary: its name and pattern.
fn summary(call: &Call) -> String {
    match call.arguments.iter().find(|(key, _)| key == "pattern") {
        Some((_, pattern)) => format!("{}(pattern = {})", call.name, shown_value(pattern)),
        None => format!("{}(…)", call.name),
    }
}

fn shown_value(value: &Value) -> String {
    match value {
        Value::Str(text, _) => format!("{text:?}"),
        Value::List(items, _) => {
            let items: Vec<String> = items.iter().map(shown_value).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// One `prefix_rule(…)`: its list, its toold rules (one per alternative), its justification.
fn prefix_rule(
    call: &Call,
    home: &Path,
    analyze: &mut dyn FnMut(&str) -> CommandLine,
) -> Result<(RuleList, Vec<String>, Option<String>), String> {
    if call.name != "prefix_rule" {
        return Err(format!(
            "toold imports prefix_rule only; {} has no toold equivalent",
            call.name
        ));
    }
    let mut pattern = None;
    let mut list = RuleList::Allow;
    let mut justification = None;
    let mut examples = Vec::new();
    let mut counter_examples = Vec::new();
    for (key, value) in &call.arguments {
        match key.as_str() {
            "pattern" => pattern = Some(alternatives(value)?),
            "decision" => {
                list = match string(value, "decision")? {
                    "allow" => RuleList::Allow,
                    "prompt" => RuleList::Ask,
                    "forbidden" => RuleList::Deny,
                    other => {
                        return Err(format!(
                            "decision {other:?} is not \"allow\", \"prompt\" or \"forbidden\""
                        ));
                    }
                }
            }
            "justification" => justification = Some(string(value, "justification")?.to_owned()),
            "match" => examples = example_lines(value, "match")?,
            "not_match" => counter_examples = example_lines(value, "not_match")?,
            other => return Err(format!("unknown argument {other} of prefix_rule")),
        }
    }
    let pattern = pattern.ok_or("prefix_rule has no pattern")?;
    let mut texts = Vec::new();
    let mut rules = Vec::new();
    for words in &pattern {
        let text = rule_text(words)?;
        let rule = Rule::parse(&text, Path::new("/"), home)
            .map_err(|error| format!("toold cannot read {text}: {error}"))?;
        texts.push(text);
        rules.push(rule);
    }
    for example in &examples {
        let analysis = analyze(example);
        if !rules
            .iter()
            .any(|rule| decides(rule, list, example, &analysis))
        {
            return Err(format!(
                "its match example {example:?} is not decided by {} in toold",
                texts.join(" or ")
            ));
        }
    }
    for example in &counter_examples {
        let analysis = analyze(example);
        if let Some(at) = rules
            .iter()
            .position(|rule| decides(rule, list, example, &analysis))
        {
            return Err(format!(
                "its not_match example {example:?} is decided by {} in toold",
                texts[at]
            ));
        }
    }
    Ok((list, texts, justification))
}

fn string<'v>(value: &'v Value, key: &str) -> Result<&'v str, String> {
    match value {
        Value::Str(text, _) => Ok(text),
        Value::List(..) => Err(format!("{key} is not a string")),
    }
}

/// A pattern's token lists: one per combination of its alternatives.
fn alternatives(pattern: &Value) -> Result<Vec<Vec<String>>, String> {
    let Value::List(tokens, _) = pattern else {
        return Err("pattern is not a list of tokens".to_owned());
    };
    if tokens.is_empty() {
        return Err("pattern is empty".to_owned());
    }
    let mut combinations: Vec<Vec<String>> = vec![Vec::new()];
    for token in tokens {
        let choices: Vec<&str> = match token {
            Value::Str(text, _) => vec![text.as_str()],
            Value::List(items, _) if !items.is_empty() => items
                .iter()
                .map(|item| match item {
                    Value::Str(text, _) => Ok(text.as_str()),
                    Value::List(..) => Err("a pattern's alternatives are strings, not lists"),
                })
                .collect::<Result<_, _>>()?,
            Value::List(..) => return Err("a pattern token has no alternatives".to_owned()),
        };
        combinations = combinations
            .iter()
            .flat_map(|prefix| {
                choices.iter().map(move |choice| {
                    let mut words = prefix.clone();
                    words.push((*choice).to_owned());
                    words
                })
            })
            .collect();
    }
    Ok(combinations)
}

/// `run_command(WORDS *)`, when toold's rules can say exactly these words. Rules match a
/// command's words as written, quotes removed, joined by single spaces (`shell` module's
/// `allow_forms`), where only `*` is special; a word is only exact when it reads the same
/// whatever its quoting was.
pub(crate) fn rule_text(words: &[String]) -> Result<String, String> {
    for (index, word) in words.iter().enumerate() {
        let why = if word.is_empty() {
            Some("is empty, and toold's rules see a command's words joined by spaces".to_owned())
        } else if word.chars().any(char::is_whitespace) {
            Some(
                "holds whitespace, and toold's rules see a command's words joined by spaces (the \
                 rule would match the words split too)"
                    .to_owned(),
            )
        } else if word.contains('*') {
            Some("holds `*`, which toold's rules read as a wildcard".to_owned())
        } else if word.starts_with('~') || word.contains(['?', '[', '{', '$', '`', '\0']) {
            Some(
                "holds a character the shell expands (`~ ? [ { $` or a backquote), and toold's \
                 rules see it the same whether it was quoted or not"
                    .to_owned(),
            )
        } else if index == 0 && word.contains('=') {
            Some("is the command's name but reads as an assignment (`NAME=value`)".to_owned())
        } else if word.chars().any(char::is_control) {
            Some("holds a control character".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!("the token {word:?} {why}"));
        }
    }
    Ok(format!("run_command({} *)", words.join(" ")))
}

/// Examples as command lines: a token list is shell-quoted word by word; a string is read as a
/// line, as the daemon reads a `run_command`.
fn example_lines(value: &Value, key: &str) -> Result<Vec<String>, String> {
    let Value::List(items, _) = value else {
        return Err(format!("{key} is not a list of examples"));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Str(line, _) => Ok(line.clone()),
            Value::List(words, _) => words
                .iter()
                .map(|word| match word {
                    Value::Str(word, _) => Ok(shell_quoted(word)),
                    Value::List(..) => Err(format!("an example of {key} holds a nested list")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|words| words.join(" ")),
        })
        .collect()
}

/// Whether toold's engine, with `rule` alone in `list`, decides `line` by that rule.
pub(crate) fn decides(rule: &Rule, list: RuleList, line: &str, analysis: &CommandLine) -> bool {
    let mut policy = Policy::default();
    let expected = match list {
        RuleList::Allow => {
            policy.allow.push(rule.clone());
            Step::AllowRule
        }
        RuleList::Ask => {
            policy.ask.push(rule.clone());
            Step::AskRule
        }
        RuleList::Deny => {
            policy.deny.push(rule.clone());
            Step::DenyRule
        }
    };
    let command = CommandFacts {
        line: line.to_owned(),
        env: Vec::new(),
        cwd: None,
        analysis: Arc::new(analysis.clone()),
        written: Vec::new(),
        read: Vec::new(),
        escalation: None,
        known_safe: None,
        escalation_refused: None,
    };
    let mut arguments = Map::new();
    arguments.insert("command".to_owned(), Json::String(line.to_owned()));
    let call = CallFacts {
        tool: "run_command",
        safety: Safety::SideEffect,
        system: false,
        arguments: &arguments,
        paths: &[],
        command: Some(&command),
        hook: HookVerdict::Silent,
    };
    let session = SessionFacts {
        mode: SessionMode::Default,
        policy: &policy,
        grants: &[],
        confined: false,
    };
    evaluate(&call, &session).step == expected
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn import_rules(text: &str) -> Import {
        rules(
            Path::new("/home/u/.codex/rules/default.rules"),
            text,
            Path::new("/home/u"),
            &mut crate::shell::analyze,
        )
        .unwrap()
    }

    fn listed(import: &Import) -> Vec<(RuleList, &str)> {
        import
            .rules
            .iter()
            .map(|rule| (rule.list, rule.rule.as_str()))
            .collect()
    }

    #[test]
    fn prefix_rules_become_command_rules_one_per_alternative() {
        let import = import_rules(
            r#"
prefix_rule(pattern = ["git", ["push", "fetch"]], decision = "forbidden",
            justification = "use the UI", match = [["git", "push", "origin"], "git fetch"],
            not_match = ["git pull", ["git", "pushx"]])
prefix_rule(pattern = ["npm", "install"], decision = "prompt")
prefix_rule(pattern = ["cargo", "test"], match = ["cargo test", "cargo test -p x"])
"#,
        );
        assert_eq!(import.dropped, []);
        assert_eq!(
            listed(&import),
            [
                (RuleList::Deny, "run_command(git push *)"),
                (RuleList::Deny, "run_command(git fetch *)"),
                (RuleList::Ask, "run_command(npm install *)"),
                (RuleList::Allow, "run_command(cargo test *)"),
            ]
        );
        assert_eq!(
            import.rules[0].origin,
            "~/.codex/rules/default.rules:2: use the UI"
        );
        assert_eq!(import.rules[3].origin, "~/.codex/rules/default.rules:6");
    }

    #[test]
    fn what_toold_cannot_say_exactly_is_dropped_with_why() {
        let import = import_rules(
            r#"
prefix_rule(pattern = ["echo", "a b"])
prefix_rule(pattern = ["ls", "*.rs"])
prefix_rule(pattern = ["echo", "$HOME"])
prefix_rule(pattern = ["FOO=1"])
prefix_rule(pattern = ["rm"], decision = "forbidden", match = ["rmdir x"])
prefix_rule(pattern = ["git"], not_match = ["git status"])
prefix_rule(pattern = ["git"], decision = "maybe")
prefix_rule(pattern = [])
prefix_rule(pattern = ["x"], when = "now")
host_executable(name = "git", paths = ["/usr/bin/git"])
prefix_rule(pattern = ["ok"])
"#,
        );
        assert_eq!(listed(&import), [(RuleList::Allow, "run_command(ok *)")]);
        let why: Vec<(&str, &str)> = import
            .dropped
            .iter()
            .map(|dropped| (dropped.source.as_str(), dropped.why.as_str()))
            .collect();
        let expected = [
            (2, "holds whitespace"),
            (3, "holds `*`"),
            (4, "the shell expands"),
            (5, "reads as an assignment"),
            (
                6,
                "match example \"rmdir x\" is not decided by run_command(rm *)",
            ),
            (
                7,
                "not_match example \"git status\" is decided by run_command(git *)",
            ),
            (8, "decision \"maybe\""),
            (9, "pattern is empty"),
            (10, "unknown argument when"),
            (11, "prefix_rule only"),
        ];
        assert_eq!(why.len(), expected.len(), "{why:#?}");
        for ((source, why), (line, part)) in why.iter().zip(expected) {
            assert_eq!(*source, format!("~/.codex/rules/default.rules:{line}"));
            assert!(why.contains(part), "line {line}: {why}");
        }
        assert_eq!(
            import.dropped[0].entry,
            "prefix_rule(pattern = [\"echo\", \"a b\"])"
        );
    }

    #[test]
    fn a_file_outside_the_subset_is_an_error_with_its_line() {
        let error = rules(
            Path::new("/r/x.rules"),
            "prefix_rule(pattern = [\"a\"])\nx = 1\n",
            Path::new("/home/u"),
            &mut crate::shell::analyze,
        )
        .unwrap_err();
        assert!(error.starts_with("/r/x.rules:2: "), "{error}");
    }

    #[test]
    fn config_maps_sandbox_and_approvals() {
        let text = r#"
model = "o3"
sandbox_mode = "workspace-write"
approval_policy = "never"
[sandbox_workspace_write]
writable_roots = ["/data", "rel"]
network_access = true
exclude_slash_tmp = true
[profiles.x]
sandbox_mode = "read-only"
"#;
        let import = config(
            Path::new("/home/u/.codex/config.toml"),
            text,
            Path::new("/home/u"),
        )
        .unwrap();
        assert_eq!(
            import.sandbox.mode.as_ref().unwrap().value,
            "workspace_write"
        );
        assert_eq!(
            import.sandbox.mode.as_ref().unwrap().origin,
            "~/.codex/config.toml: sandbox_mode = \"workspace-write\""
        );
        assert!(import.sandbox.network.as_ref().unwrap().value);
        let writable: Vec<_> = import.sandbox.writable.iter().map(|w| &w.value).collect();
        assert_eq!(writable, ["/data"]);
        assert_eq!(import.sandboxed_commands.as_ref().unwrap().value, "allow");
        let dropped: Vec<_> = import.dropped.iter().map(|d| d.entry.as_str()).collect();
        assert_eq!(
            dropped,
            [
                "approval_policy = \"never\"",
                "sandbox_workspace_write.writable_roots: \"rel\""
            ]
        );
        assert!(import.dropped[0].why.contains("--mode dont_ask"));
        assert_eq!(
            import.unmapped[0].keys,
            [
                "model",
                "sandbox_workspace_write.exclude_slash_tmp",
                "profiles"
            ]
        );
        for (policy, value) in [
            ("untrusted", "ask"),
            ("on-request", "allow"),
            ("on-failure", "allow"),
        ] {
            let import = config(
                Path::new("/c.toml"),
                &format!("approval_policy = {policy:?}"),
                Path::new("/home/u"),
            )
            .unwrap();
            assert_eq!(import.sandboxed_commands.unwrap().value, value);
            assert_eq!(import.dropped, []);
        }
        for (mode, value) in [("read-only", "read_only"), ("danger-full-access", "off")] {
            let import = config(
                Path::new("/c.toml"),
                &format!("sandbox_mode = {mode:?}"),
                Path::new("/home/u"),
            )
            .unwrap();
            assert_eq!(import.sandbox.mode.unwrap().value, value);
        }
        assert!(config(Path::new("/c.toml"), "x = ", Path::new("/")).is_err());
    }
}
