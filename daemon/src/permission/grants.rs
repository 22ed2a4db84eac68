//! The texts grants are recorded as: a call's exact form, an `allow_session` answer's pattern
//! grant, the rule an "always" answer writes, and a session's pattern grants read back as
//! allow rules.
//!
//! An exact form names the bytes it was given for and the call's `env`, `cwd` and escalation,
//! so that a grant never covers a call the approval did not show.

use std::path::Path;

use serde_json::Value;

use crate::paths;
use crate::tools::{JudgedArguments, judged_arguments};

use super::inputs::CallFacts;
use super::matching::allowing_rule;
use super::prefix_grant;
use super::rules::{Rule, RuleOrigin};
use super::shell_word::shell_quoted;

/// The exact form a session grant records and matches: the command line (followed by the
/// call's `env` as JSON, when it has one) for a tool that takes one (`run_command`), the
/// resolved path for one that takes a path (the file tools), the tool alone otherwise. Paths are written by [`paths::exact_text`], so a grant covers the bytes
/// it was given for and no other file that merely displays the same.
pub(crate) fn canonical_form(call: &CallFacts<'_>) -> String {
    if let Some(command) = call.command {
        // A grant for a `cwd` covers that directory only: the same line elsewhere runs
        // elsewhere. `cd DIR && LINE` is what such a call runs.
        let line = match &command.cwd {
            Some(cwd) => format!(
                "cd {} && {}",
                shell_quoted(&paths::exact_text(&cwd.resolved)),
                command.line
            ),
            None => command.line.clone(),
        };
        let form = format!("{}({line})", call.tool);
        // What the call loosens ends the form, as a rule's ` with …` would: a grant of the
        // command in its sandbox does not cover it out of it.
        let loosened = match &command.escalation {
            Some(loosening) => format!(" with {}", loosening.text()),
            None => String::new(),
        };
        if command.env.is_empty() {
            return format!("{form}{loosened}");
        }
        // The call's `env` reaches every command of the line, an assignment written in the
        // line only its own command: `PATH=/x true; git` and `true; git` with `PATH=/x` must
        // not share a grant. The env follows as JSON after the `)` that ends every form
        // without one; a quote inside a JSON string is escaped, so no other split of a form
        // reads as a line and an env.
        let env_name = match judged_arguments(call.tool) {
            JudgedArguments::CommandLine { env, .. } => env,
            _ => return form,
        };
        let env: std::collections::BTreeMap<&String, &serde_json::Value> = call
            .arguments
            .get(env_name)
            .and_then(serde_json::Value::as_object)
            .map(|env| env.iter().collect())
            .unwrap_or_default();
        let env = serde_json::to_string(&env).unwrap_or_default();
        return format!("{form} with env {env}{loosened}");
    }
    match call.paths {
        [only] if judged_arguments(call.tool).takes_a_path() => {
            format!("{}(/{})", call.tool, paths::exact_text(&only.resolved))
        }
        _ => call.tool.to_owned(),
    }
}

/// The form an exact grant records and is looked up by: [`canonical_form`] for a tool whose
/// path or command line the engine judges; for any other (an MCP server's tool, a client's),
/// the tool and its arguments as canonical JSON (object keys sorted, no spaces), so that a
/// grant covers the call the approval showed and not the tool's every call. Arguments over
/// [`MAX_SHOWN_ARGUMENTS`] bytes as JSON are recorded by their SHA-256 instead.
pub(crate) fn grant_form(call: &CallFacts<'_>) -> String {
    if judged_arguments(call.tool) != JudgedArguments::ByName {
        return canonical_form(call);
    }
    let arguments = canonical_json(&Value::Object(call.arguments.clone()));
    if arguments.len() <= MAX_SHOWN_ARGUMENTS {
        format!("{} {arguments}", call.tool)
    } else {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(arguments.as_bytes());
        let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{} with arguments of sha256 {hex}", call.tool)
    }
}

/// The most bytes of a call's arguments an exact grant records as they are.
const MAX_SHOWN_ARGUMENTS: usize = 1024;

/// `value` as compact JSON with every object's keys sorted: one text for equal arguments
/// whatever order they were sent in.
fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(members) => {
                let mut keys: Vec<&String> = members.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|key| (key.clone(), sorted(&members[key])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(value)).unwrap_or_default()
}

/// What marks a grant as a pattern, read as a rule, rather than a call's exact form (which
/// always starts with its tool's name, never with a space).
const PATTERN_GRANT: &str = "pattern ";

/// What an `allow_session` answer grants: for a command line whose every command has a program
/// and subcommand that cannot run other code by their arguments ([`prefix_grant`]), a pattern
/// grant of each (`git log -1` → `run_command(git log *)`); for anything else, the call's exact
/// form ([`canonical_form`]). Grants of several commands are one grant per line.
pub(crate) fn session_grant(call: &CallFacts<'_>) -> String {
    match pattern_grant(call) {
        Some(rule) => format!("{PATTERN_GRANT}{rule}"),
        None => grant_form(call),
    }
}

/// The rule an `allow_always` or `deny_always` answer writes for good: the pattern grant's
/// rule, or the call's exact form when that reads as a rule covering exactly this call (no `*`
/// or glob character in it, no `env`, no `cwd`). `None` when neither covers the call as its
/// text reads: "always" is then not offered.
pub(crate) fn always_rule(call: &CallFacts<'_>) -> Option<String> {
    let text = match pattern_grant(call) {
        Some(rule) => rule,
        None => {
            let exact = canonical_form(call);
            let body = exact.split_once('(').map_or("", |(_, body)| body);
            if body.contains(['*', '?', '[', ']', '{', '}']) {
                return None;
            }
            exact
        }
    };
    let rule = Rule::parse(&text, Path::new("/"), Path::new("/")).ok()?;
    allowing_rule(call, std::iter::once(&rule))?;
    Some(text)
}

/// A grant as the person is shown it (and as a rule would be written): a pattern grant's rule.
pub fn grant_shown(grant: &str) -> &str {
    grant.strip_prefix(PATTERN_GRANT).unwrap_or(grant)
}

/// The rule a pattern grant stands for: one simple command (not nested, nothing opaque or
/// hidden, no `env` or `cwd` argument, which an exact grant records) whose program and
/// subcommand [`prefix_grant::prefix_pattern`] widens, with the call's escalation after it.
fn pattern_grant(call: &CallFacts<'_>) -> Option<String> {
    let command = call.command?;
    let analysis = &command.analysis;
    if !command.env.is_empty()
        || command.cwd.is_some()
        || !analysis.opaque.is_empty()
        || !analysis.hidden_code.is_empty()
        || analysis.unreadable.is_some()
        // A write that makes code run later is granted only exactly (`protected_write`).
        || command.writes_code_that_runs()
    {
        return None;
    }
    let [found] = analysis.commands.as_slice() else {
        return None;
    };
    let [form] = found.allow_forms.as_slice() else {
        return None;
    };
    // The command as written, not past a wrapper or an assignment: `timeout 5 cargo test`
    // and `FOO=1 git log` keep exact grants.
    if found.nested || found.match_forms.first() != Some(form) {
        return None;
    }
    let words: Vec<String> = form.split(' ').map(str::to_owned).collect();
    let pattern = prefix_grant::prefix_pattern(&words)?;
    let loosened = match &command.escalation {
        Some(loosening) => format!(" with {}", loosening.text()),
        None => String::new(),
    };
    Some(format!("{}({pattern}){loosened}", call.tool))
}

/// The session's pattern grants, as allow rules of origin [`RuleOrigin::Grant`].
pub(super) fn pattern_grants(grants: &[String]) -> Vec<Rule> {
    grants
        .iter()
        .filter_map(|grant| grant.strip_prefix(PATTERN_GRANT))
        .filter_map(|text| Rule::parse(text, Path::new("/"), Path::new("/")).ok())
        .map(|mut rule| {
            rule.origin = RuleOrigin::Grant;
            rule
        })
        .collect()
}
