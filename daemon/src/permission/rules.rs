//! A rule's syntax: the text of an allow, ask or deny rule read into its tool, what its
//! parentheses judge (a command line, a path, an argument) and the escalation its ` with …`
//! part covers, in toold's form or Claude Code's; and where a rule is written.
//!
//! Which calls a rule matches is `matching`'s (only whether a rule is about a tool is decided
//! here), the rules in force for a session `policy`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::tools::{JudgedArguments, judged_arguments};

use super::claude;
use super::escalation::Loosening;
use super::patterns::{PathGlob, Wildcard};
use super::rule_error::RuleError;

/// One parsed rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// As written (Claude Code's `Bash(npm:*)`, or toold's own form).
    pub(super) text: String,
    /// As read: toold's form ([`claude`]); the same as `text` for most rules.
    pub(super) read_as: String,
    pub(super) tool: String,
    /// Set when `tool` has a `*`: the tool names it covers (`mcp__fs__*`, `mcp__*`, `*`).
    pub(super) tool_pattern: Option<Wildcard>,
    /// What the tool declares its rules judge; `ByName` for a pattern.
    pub(super) judged: JudgedArguments,
    pub(super) specifier: Specifier,
    /// For a `run_command` rule ending ` with …`: the escalations it covers
    /// ([`escalation`](super::escalation)); `None`: calls that stay in their sandbox only.
    pub(super) escalation: Option<Loosening>,
    /// Where the rule is written: set when a policy is compiled from its sources.
    pub(super) origin: RuleOrigin,
}

/// Where a rule that decided a call came from (`source` in `permissions/explain` and the audit
/// log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOrigin {
    /// The config file's `[permissions]`: the file and the rule's line, when known.
    Config {
        file: Option<Arc<Path>>,
        line: Option<u32>,
    },
    /// The session's own rules (`session/create`, `session/update`).
    Session,
    /// A grant an `allow_session` answer recorded.
    Grant,
}

/// Which list of rules a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleList {
    Allow,
    Ask,
    Deny,
}

impl RuleList {
    /// Its key in the config (`allow`, `ask`, `deny`).
    pub(crate) fn key(self) -> &'static str {
        match self {
            RuleList::Allow => "allow",
            RuleList::Ask => "ask",
            RuleList::Deny => "deny",
        }
    }
}

impl RuleOrigin {
    /// The origin as the wire names it (`permissions/explain`'s and the audit log's `source`).
    pub(crate) fn source(&self) -> toold_protocol::RuleSource {
        use toold_protocol::RuleSource;
        match self {
            RuleOrigin::Config { file, line } => RuleSource::Config {
                file: file.as_ref().map(|file| file.display().to_string()),
                line: *line,
            },
            RuleOrigin::Session => RuleSource::Session,
            RuleOrigin::Grant => RuleSource::Grant,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Specifier {
    /// `tool`: every call of the tool.
    Any,
    /// `run_command(glob)`: each simple command of the line.
    Command(Wildcard),
    /// `read_file(glob)` and the other file tools: the target path.
    Path(PathGlob),
    /// `tool(arg=glob)`: a top-level string argument.
    Argument { name: String, pattern: Wildcard },
}

impl Rule {
    /// Parses a rule as written, in toold's form or Claude Code's, into the rules it is read
    /// as (`Read(x)` is three: `read_file`, `search_code` and `find_files`), each keeping the
    /// text as written. Path globs are compiled against `cwd`, `home`, and `anchor`: the
    /// directory a pattern starting with one `/` is relative to (that of the file the rule is
    /// written in; `None`, such a pattern is refused).
    pub(crate) fn parse_all(
        text: &str,
        cwd: &Path,
        home: &Path,
        anchor: Option<&Path>,
    ) -> Result<Vec<Self>, RuleError> {
        let full = text.trim();
        if full.is_empty() {
            return Err(RuleError::Empty(text.to_owned()));
        }
        claude::read_as(full)?
            .into_iter()
            .map(|native| {
                let mut rule = Self::parse_native(&native, cwd, home, anchor)?;
                rule.text = full.to_owned();
                Ok(rule)
            })
            .collect()
    }

    /// Parses a rule of toold's own form (what grants and "always" answers record): `tool`,
    /// `tool(specifier)` or `tool(arg=glob)`; path globs are compiled against `cwd` and
    /// `home`, where relative and `~/` patterns start.
    pub(crate) fn parse(text: &str, cwd: &Path, home: &Path) -> Result<Self, RuleError> {
        Self::parse_native(text, cwd, home, None)
    }

    fn parse_native(
        text: &str,
        cwd: &Path,
        home: &Path,
        anchor: Option<&Path>,
    ) -> Result<Self, RuleError> {
        let full = text.trim();
        if full.is_empty() {
            return Err(RuleError::Empty(text.to_owned()));
        }
        let (trimmed, escalation) = split_escalation(full, home)?;
        let Some(open) = trimmed.find('(') else {
            return Ok(Self {
                text: full.to_owned(),
                read_as: full.to_owned(),
                tool: trimmed.to_owned(),
                tool_pattern: tool_pattern(trimmed),
                judged: judged_of_rule(trimmed),
                specifier: Specifier::Any,
                escalation,
                origin: RuleOrigin::Session,
            });
        };
        let tool = trimmed[..open].trim();
        if tool.is_empty() {
            return Err(RuleError::NoTool(text.to_owned()));
        }
        let Some(inner) = trimmed[open + 1..].strip_suffix(')') else {
            return Err(RuleError::Unclosed(text.to_owned()));
        };
        let judged = judged_of_rule(tool);
        // A client's or a server's tool names its arguments as its schema spells them
        // (`filePath`, `file-name`); a builtin's are lowercase, so that `run_command(FOO=1 make)`
        // stays a command.
        let argument = inner.split_once('=').filter(|(name, _)| {
            is_argument_name(name) || judged == JudgedArguments::ByName && is_property_name(name)
        });
        let specifier = match (argument, judged) {
            (Some((name, pattern)), JudgedArguments::CommandLine { line, .. }) if name == line => {
                Specifier::Command(Wildcard::new(pattern))
            }
            (Some((name, pattern)), JudgedArguments::Path { argument, .. }) if name == argument => {
                Specifier::Path(PathGlob::new(text, pattern, cwd, home, anchor)?)
            }
            // A line's leading `NAME=value` is an assignment, not an argument's name.
            (Some((name, pattern)), _)
                if !judged.takes_a_command_line() || name != name.to_ascii_uppercase() =>
            {
                Specifier::Argument {
                    name: name.to_owned(),
                    pattern: Wildcard::new(pattern),
                }
            }
            (_, JudgedArguments::CommandLine { .. }) => Specifier::Command(Wildcard::new(inner)),
            (_, JudgedArguments::Path { .. }) => {
                Specifier::Path(PathGlob::new(text, inner, cwd, home, anchor)?)
            }
            _ if inner.trim().is_empty() => Specifier::Any,
            _ => Specifier::Argument {
                name: String::new(),
                pattern: Wildcard::new(inner),
            },
        };
        Ok(Self {
            text: full.to_owned(),
            read_as: full.to_owned(),
            tool: tool.to_owned(),
            tool_pattern: tool_pattern(tool),
            judged,
            specifier,
            escalation,
            origin: RuleOrigin::Session,
        })
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The rule as toold reads it, when that differs from how it is written.
    pub(crate) fn read_as(&self) -> Option<&str> {
        (self.read_as != self.text).then_some(self.read_as.as_str())
    }

    #[cfg(test)]
    pub(crate) fn origin(&self) -> &RuleOrigin {
        &self.origin
    }

    /// Whether the rule is about calls of `tool`. A pattern with a specifier reads arguments
    /// by name, as strings, so it never covers a tool whose arguments the engine judges as
    /// paths or a command line (a builtin's `path` matched as a string would let `..` or a
    /// symlink through an allow): `*(path=/tmp/*)` covers only tools judged by name, while `*`
    /// alone covers every tool.
    pub(super) fn covers(&self, tool: &str) -> bool {
        match &self.tool_pattern {
            None => self.tool == tool,
            Some(pattern) => {
                pattern.matches(tool)
                    && (matches!(self.specifier, Specifier::Any)
                        || judged_arguments(tool) == JudgedArguments::ByName)
            }
        }
    }

    /// Whether the tool part is a pattern (`mcp__fs__*`) rather than one tool's name.
    pub(crate) fn is_pattern(&self) -> bool {
        self.tool_pattern.is_some()
    }
}

/// A rule's text without its ` with …` part, and the escalation that part covers. Only a tool
/// that takes a command line has one. A text ending in `)` has none (`run_command(echo x) with
/// y)` is a pattern); otherwise the part is what follows the last `) with `, and must parse:
/// a `writable=` directory never holds a `)` (refused in a call's `escalate` and in a rule),
/// so no other split of the text reads as one.
fn split_escalation<'t>(
    text: &'t str,
    home: &Path,
) -> Result<(&'t str, Option<Loosening>), RuleError> {
    if text.ends_with(')') {
        return Ok((text, None));
    }
    let Some(at) = text.rfind(") with ") else {
        return Ok((text, None));
    };
    let head = &text[..=at];
    let tool = head.split('(').next().unwrap_or_default().trim();
    if !judged_of_rule(tool).takes_a_command_line() {
        return Err(RuleError::BadEscalation(text.to_owned()));
    }
    match Loosening::parse(&text[at + ") with ".len()..], home) {
        Some(loosening) => Ok((head, Some(loosening))),
        None => Err(RuleError::BadEscalation(text.to_owned())),
    }
}

/// The pattern of a rule's tool part, if it has a `*` (only `*` is special: it matches any
/// run of characters).
fn tool_pattern(tool: &str) -> Option<Wildcard> {
    tool.contains('*').then(|| Wildcard::new(tool))
}

/// What a rule judges: its tool's declaration; a pattern's arguments are read by name.
fn judged_of_rule(tool: &str) -> JudgedArguments {
    if tool.contains('*') {
        JudgedArguments::ByName
    } else {
        judged_arguments(tool)
    }
}

/// An argument name in `tool(arg=glob)`: lowercase, so `run_command(FOO=1 make)` stays a command.
fn is_argument_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// An argument name of a client's or a server's tool in `tool(arg=glob)`: a letter or `_`, then
/// letters, digits, `_` and `-`, in any case.
fn is_property_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// How toold reads a rule written as `text`, when that differs from how it is written (Claude
/// Code's forms, a closing `:*`): its rules in toold's form, joined by `, `. `None` for a rule
/// read as written, or one that is refused.
pub fn shown_read_as(text: &str) -> Option<String> {
    let text = text.trim();
    let read = claude::read_as(text).ok()?;
    (read.len() != 1 || read[0] != text).then(|| read.join(", "))
}

/// Home for `~/` rule patterns.
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}
