//! Whether a rule matches a call: deny and ask rules any form of it, allow rules the whole of
//! it (for a command line, every command's allow forms, nothing opaque, no write outside the
//! roots), and which allow rule covers each command of a line.

use serde_json::{Map, Value};

use crate::paths::ResolvedPath;
use crate::shell::FoundCommand;
use crate::tools::JudgedArguments;

use super::inputs::{CallFacts, CommandFacts};
use super::patterns::{PathGlob, Scope, Wildcard};
use super::policy::Policy;
use super::rules::{Rule, Specifier};

/// The first of `rules` for a tool `of_tools` admits that covers one of `paths` (a rule
/// without a specifier covers any), with the path it covers.
pub(super) fn rule_for_paths<'r, 'p>(
    rules: &'r [Rule],
    of_tools: fn(JudgedArguments) -> bool,
    paths: &'p [ResolvedPath],
) -> Option<(&'r Rule, &'p ResolvedPath)> {
    let first = paths.first()?;
    rules
        .iter()
        .filter(|rule| of_tools(rule.judged))
        .find_map(|rule| match &rule.specifier {
            Specifier::Path(glob) => paths
                .iter()
                .find(|path| path_matches_anywhere(glob, path))
                .map(|path| (rule, path)),
            Specifier::Any => Some((rule, first)),
            Specifier::Command(_) | Specifier::Argument { .. } => None,
        })
}

/// A deny or ask path glob against both forms of a path.
fn path_matches_anywhere(glob: &PathGlob, path: &ResolvedPath) -> bool {
    glob.matches(&path.lexical, Scope::Anywhere) || glob.matches(&path.resolved, Scope::Anywhere)
}

/// Deny and ask: the rule matches if any form of the call matches it.
pub(super) fn matches_restrictive(rule: &Rule, call: &CallFacts<'_>) -> bool {
    if !rule.covers(call.tool) {
        return false;
    }
    if let Some(command) = call.command
        && !command.escalation_restricted_by(rule)
    {
        return false;
    }
    match &rule.specifier {
        Specifier::Any => true,
        Specifier::Command(pattern) => match call.command {
            Some(command) => {
                command.analysis.commands.iter().any(|found| {
                    found.match_forms.iter().any(|form| {
                        pattern.matches(form)
                            || !command.env.is_empty() && pattern.matches(&command.with_env(form))
                    })
                })
                    // A line the parser cannot read has no commands: match its text as a whole.
                    || pattern.matches(command.line.trim())
            }
            None => false,
        },
        Specifier::Path(glob) => call
            .paths
            .iter()
            .any(|path| path_matches_anywhere(glob, path)),
        Specifier::Argument { name, pattern } => {
            argument_matches(call.arguments, name, pattern, true)
        }
    }
}

/// The allow rule that covers the whole call, if one does (for a command line: the rule of
/// its first command; [`command_rules`] names each command's).
pub(super) fn allowing_rule<'p>(
    call: &CallFacts<'_>,
    allow: impl IntoIterator<Item = &'p Rule>,
) -> Option<&'p Rule> {
    let rules: Vec<&Rule> = allow
        .into_iter()
        .filter(|rule| rule.covers(call.tool))
        .filter(|rule| {
            call.command
                .is_none_or(|command| command.escalation_allowed_by(rule))
        })
        .collect();
    if let Some(rule) = rules
        .iter()
        .find(|rule| matches!(rule.specifier, Specifier::Any))
    {
        return Some(rule);
    }
    if let Some(command) = call.command {
        return command_allowed(command, &rules);
    }
    rules.into_iter().find(|rule| match &rule.specifier {
        Specifier::Any => true,
        Specifier::Command(_) => false,
        // Both forms must match, and an unanchored pattern only under the cwd.
        Specifier::Path(glob) => {
            !call.paths.is_empty()
                && call.paths.iter().all(|path| {
                    glob.matches(&path.lexical, Scope::UnderCwd)
                        && glob.matches(&path.resolved, Scope::UnderCwd)
                })
        }
        Specifier::Argument { name, pattern } => {
            argument_matches(call.arguments, name, pattern, false)
        }
    })
}

/// A command line is allowed when nothing in it is opaque, it writes only inside the roots,
/// and every command's allow forms match allow rules; the rule of its first command.
fn command_allowed<'p>(command: &CommandFacts, rules: &[&'p Rule]) -> Option<&'p Rule> {
    if !command.analysis.opaque.is_empty()
        || command
            .written
            .iter()
            .any(|path| !path.inside_roots() && !command.escalation_writes(path))
    {
        return None;
    }
    let mut covering = command
        .analysis
        .commands
        .iter()
        .map(|found| rule_for_command(command, found, rules));
    let first = covering.next()??;
    covering.all(|rule| rule.is_some()).then_some(first)
}

/// The allow rule that covers one command of a line: every allow form of it matches one of
/// `rules` (the first form's rule is named); none for a command nested in a substitution.
fn rule_for_command<'p>(
    command: &CommandFacts,
    found: &FoundCommand,
    rules: &[&'p Rule],
) -> Option<&'p Rule> {
    if found.nested {
        return None;
    }
    let covering = |form: &String| {
        // The call's `env` counts as leading `NAME=value` words of every command.
        let form = command.with_env(form);
        rules.iter().copied().find(
            |rule| matches!(&rule.specifier, Specifier::Command(pattern) if pattern.matches(&form)),
        )
    };
    let mut forms = found.allow_forms.iter().map(covering);
    let first = forms.next()??;
    forms.all(|rule| rule.is_some()).then_some(first)
}

/// Each simple command of a line (its first form as rules see it), with the allow rule that
/// covers it: what `permissions/explain` lists as `commands`.
pub(crate) fn command_rules<'p>(
    tool: &str,
    command: &CommandFacts,
    policy: &'p Policy,
) -> Vec<(String, Option<&'p Rule>)> {
    let rules: Vec<&Rule> = policy
        .allow
        .iter()
        .filter(|rule| rule.covers(tool) && command.escalation_allowed_by(rule))
        .collect();
    let any = rules
        .iter()
        .copied()
        .find(|rule| matches!(rule.specifier, Specifier::Any));
    command
        .analysis
        .commands
        .iter()
        .map(|found| {
            let text = found
                .allow_forms
                .first()
                .or(found.match_forms.first())
                .map(|form| command.with_env(form).into_owned())
                .unwrap_or_default();
            let rule = any.or_else(|| rule_for_command(command, found, &rules));
            (text, rule)
        })
        .collect()
}

/// `tool(arg=glob)`; an empty name (a bare `tool(glob)` for a tool without a known specifier)
/// matches any top-level string argument for deny and ask, and all of them for allow.
fn argument_matches(
    arguments: &Map<String, Value>,
    name: &str,
    pattern: &Wildcard,
    any: bool,
) -> bool {
    if name.is_empty() {
        let mut strings = arguments.values().filter_map(Value::as_str).peekable();
        if strings.peek().is_none() {
            return false;
        }
        return if any {
            strings.any(|text| pattern.matches(text))
        } else {
            strings.all(|text| pattern.matches(text))
        };
    }
    arguments
        .get(name)
        .and_then(Value::as_str)
        .is_some_and(|text| pattern.matches(text))
}
