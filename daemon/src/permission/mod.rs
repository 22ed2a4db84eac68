//! The permission engine (docs/protocol.md section 7): rules, modes and grants in, one decision
//! out.
//!
//! Pure: no IO and no clock. The caller gathers the facts first (paths resolved on disk by
//! `paths`, the command line analysed by `shell`), so that every decision is a table lookup
//! that tests can drive with plain values.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde_json::{Map, Value};
use toold_protocol::{Rules, Safety, SessionMode as Mode};

use crate::paths::{self, ResolvedPath};
use crate::sandbox::hidden::DeniedReads;
use crate::shell::{CommandLine, FoundCommand};
use crate::tools::{HiddenPaths, JudgedArguments, judged_arguments};

use self::escalation::Loosening;

mod claude;
pub mod escalation;
pub mod facts;
mod known_safe;
pub mod lint;
mod prefix_grant;

/// What a PreToolUse hook said about permission, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookVerdict {
    #[default]
    None,
    Allow,
    Ask,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// `permission_denied`, with the reason for the model.
    Deny(String),
    /// `tool_not_allowed`: the mode forbids the tool.
    NotAllowed(String),
    /// Ask an approver; `suggestion` is the rule an `allow_session` answer records.
    Ask {
        reason: String,
        suggestion: String,
    },
}

/// Why a rule string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    #[error("rule {0:?} is empty")]
    Empty(String),
    #[error("rule {0:?} has no tool name before its '('")]
    NoTool(String),
    #[error("rule {0:?} does not end with ')'")]
    Unclosed(String),
    #[error("rule {rule:?} has an invalid glob: {reason}")]
    BadGlob { rule: String, reason: String },
    #[error(
        "rule {0:?} has an unknown ` with …` part: a run_command rule may end with ` with` and \
         a comma-separated list of network, unsandboxed and writable=DIR (absolute or ~/)"
    )]
    BadEscalation(String),
    #[error("rule {rule:?} cannot be honoured: {reason}")]
    Unsupported { rule: String, reason: String },
    #[error(
        "rule {0:?} has a path starting with one '/', which is relative to the file the rule is \
         written in, and this rule is written in none: write //PATH for an absolute path, ~/PATH \
         under your home, or ./PATH under the session's directory"
    )]
    NoAnchor(String),
}

/// One parsed rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// As written (Claude Code's `Bash(npm:*)`, or toold's own form).
    text: String,
    /// As read: toold's form ([`claude`]); the same as `text` for most rules.
    read_as: String,
    tool: String,
    /// Set when `tool` has a `*`: the tool names it covers (`mcp__fs__*`, `mcp__*`, `*`).
    tool_pattern: Option<Wildcard>,
    /// What the tool declares its rules judge; `ByName` for a pattern.
    judged: JudgedArguments,
    specifier: Specifier,
    /// For a `run_command` rule ending ` with …`: the escalations it covers
    /// ([`escalation`]); `None`: calls that stay in their sandbox only.
    escalation: Option<Loosening>,
    /// Where the rule is written: set when a policy is compiled from its sources.
    origin: RuleOrigin,
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
    pub fn key(self) -> &'static str {
        match self {
            RuleList::Allow => "allow",
            RuleList::Ask => "ask",
            RuleList::Deny => "deny",
        }
    }
}

/// The config file's `[permissions]`, with the line each rule is written on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigRules {
    pub rules: Rules,
    /// `sandboxed_commands`: whether a command line the rules leave open runs unasked in a
    /// sandbox that confines it.
    pub sandboxed_commands: SandboxedCommands,
    /// The file the rules were read from.
    pub file: Option<Arc<Path>>,
    /// The 1-based line of each rule of `rules.allow`, `.ask` and `.deny`, in that order
    /// (empty when unknown).
    pub lines: [Vec<u32>; 3],
    /// `[[permissions.project]]`: rules for the sessions of one project only (what an
    /// `allow_always` or `deny_always` answer writes).
    pub projects: Vec<ProjectRules>,
}

/// One `[[permissions.project]]` table: rules that apply to a session whose project (its first
/// root) is `path` or lies under it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectRules {
    /// Absolute, as written (`~/` expanded).
    pub path: PathBuf,
    pub rules: Rules,
    /// As [`ConfigRules::lines`].
    pub lines: [Vec<u32>; 3],
}

impl ProjectRules {
    /// Whether a session whose first root is `project` is one of this table's.
    pub fn covers(&self, project: &Path) -> bool {
        project.starts_with(&self.path)
    }
}

impl From<Rules> for ConfigRules {
    fn from(rules: Rules) -> Self {
        Self {
            rules,
            ..Self::default()
        }
    }
}

impl RuleOrigin {
    /// The origin as the wire names it (`permissions/explain`'s and the audit log's `source`).
    pub fn source(&self) -> toold_protocol::RuleSource {
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

impl ConfigRules {
    /// The rules of the config that apply to a session of `project` (its first root): the
    /// whole file's, then each of its project's tables, with where each rule is written and
    /// the directory a pattern starting with one `/` is relative to (the file's, or the
    /// project's for its table).
    pub fn in_force<'a>(
        &'a self,
        project: Option<&'a Path>,
    ) -> impl Iterator<Item = (&'a Rules, &'a [Vec<u32>; 3], Option<&'a Path>)> + 'a {
        let projects = self
            .projects
            .iter()
            .filter(move |table| project.is_some_and(|project| table.covers(project)))
            .map(|table| (&table.rules, &table.lines, Some(table.path.as_path())));
        let file_dir = self.file.as_deref().and_then(Path::parent);
        std::iter::once((&self.rules, &self.lines, file_dir)).chain(projects)
    }
}

#[derive(Debug, Clone)]
enum Specifier {
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
    pub fn parse_all(
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
    pub fn parse(text: &str, cwd: &Path, home: &Path) -> Result<Self, RuleError> {
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

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The rule as toold reads it, when that differs from how it is written.
    pub fn read_as(&self) -> Option<&str> {
        (self.read_as != self.text).then_some(self.read_as.as_str())
    }

    pub fn origin(&self) -> &RuleOrigin {
        &self.origin
    }

    /// The rule as a decision names it: its text and where it is written.
    fn deciding(&self) -> Option<DecidingRule> {
        Some(DecidingRule {
            text: self.text.clone(),
            read_as: self.read_as().map(str::to_owned),
            origin: self.origin.clone(),
        })
    }

    /// Whether the rule is about calls of `tool`. A pattern with a specifier reads arguments
    /// by name, as strings, so it never covers a tool whose arguments the engine judges as
    /// paths or a command line (a builtin's `path` matched as a string would let `..` or a
    /// symlink through an allow): `*(path=/tmp/*)` covers only tools judged by name, while `*`
    /// alone covers every tool.
    fn covers(&self, tool: &str) -> bool {
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
    pub fn is_pattern(&self) -> bool {
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

/// A glob where only `*` is special and matches anything, `/` and spaces included. A trailing
/// ` *` also matches nothing, so `cargo test *` covers `cargo test`.
#[derive(Debug, Clone)]
struct Wildcard {
    parts: Vec<String>,
    optional_tail: bool,
}

impl Wildcard {
    fn new(pattern: &str) -> Self {
        let optional_tail = pattern.ends_with(" *");
        Self {
            parts: pattern.split('*').map(str::to_owned).collect(),
            optional_tail,
        }
    }

    fn matches(&self, text: &str) -> bool {
        if self.optional_tail {
            let head = &self.parts[..self.parts.len() - 1];
            let without_tail = head.join("*");
            if let Some(stem) = without_tail.strip_suffix(' ')
                && Wildcard::new(stem).matches(text)
            {
                return true;
            }
        }
        wildcard_match(&self.parts, text)
    }
}

/// Matches `text` against literal `parts` separated by `*`s, with the usual greedy-with-backtrack
/// walk: linear in practice, and never exponential.
fn wildcard_match(parts: &[String], text: &str) -> bool {
    let (first, rest) = match parts.split_first() {
        Some(split) => split,
        None => return text.is_empty(),
    };
    let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last.as_str())
}

/// A gitignore-style path glob made absolute: `//x` is `/x`, `~/x` is under home, `/x` under
/// the directory of the file the rule is written in, `x/y` and `./x` under the cwd, and a
/// pattern without `/` matches that name in any directory. As in a gitignore file, a pattern
/// that matches a directory covers everything inside it (`secrets` and `secrets/` cover
/// `secrets/key`), and `dir/**` matches `dir` too.
#[derive(Debug, Clone)]
struct PathGlob {
    /// The absolute glob `anywhere` was compiled from.
    anywhere_text: String,
    /// The glob alone, without what lies inside its matches (for the sandbox, which hides
    /// each match whole).
    anywhere_itself: GlobMatcher,
    /// Matches wherever the path is (for deny and ask).
    anywhere: GlobSet,
    /// Matches only under the cwd (for allows); the same as `anywhere` for anchored patterns.
    under_cwd: GlobSet,
}

impl PathGlob {
    fn new(
        rule: &str,
        pattern: &str,
        cwd: &Path,
        home: &Path,
        anchor: Option<&Path>,
    ) -> Result<Self, RuleError> {
        let pattern = pattern.trim();
        let escaped = |dir: &Path| globset::escape(&dir.to_string_lossy());
        let cwd_glob = escaped(cwd);
        let (anywhere, under_cwd) = if let Some(absolute) = pattern.strip_prefix("//") {
            let glob = format!("/{absolute}");
            (glob.clone(), glob)
        } else if let Some(in_home) = pattern.strip_prefix("~/") {
            let glob = format!("{}/{in_home}", escaped(home));
            (glob.clone(), glob)
        } else if let Some(in_anchor) = pattern.strip_prefix('/') {
            let anchor = anchor.ok_or_else(|| RuleError::NoAnchor(rule.to_owned()))?;
            let glob = format!("{}/{in_anchor}", escaped(anchor));
            (glob.clone(), glob)
        } else {
            let relative = pattern.strip_prefix("./").unwrap_or(pattern);
            let trimmed = relative.trim_end_matches('/');
            if trimmed.contains('/') {
                let glob = format!("{cwd_glob}/{relative}");
                (glob.clone(), glob)
            } else {
                (
                    format!("/**/{relative}"),
                    format!("{cwd_glob}/**/{relative}"),
                )
            }
        };
        // `dir/` is the directory's contents, as `dir/**` (which covers `dir` itself too).
        let contents = |glob: String| match glob.strip_suffix('/') {
            Some(dir) => format!("{}/**", dir.trim_end_matches('/')),
            None => glob,
        };
        let (anywhere, under_cwd) = (contents(anywhere), contents(under_cwd));
        // `dir/**` covers `dir` itself: `{dir,dir/**}`.
        let itself = match anywhere.strip_suffix("/**") {
            Some(dir) => format!("{{{dir},{dir}/**}}"),
            None => anywhere.clone(),
        };
        let anywhere_itself = GlobBuilder::new(&itself)
            .literal_separator(true)
            .build()
            .map_err(|error| bad_glob(rule, &error))?
            .compile_matcher();
        Ok(Self {
            anywhere: compile_path_glob(rule, &anywhere)?,
            under_cwd: compile_path_glob(rule, &under_cwd)?,
            anywhere_itself,
            anywhere_text: anywhere,
        })
    }

    fn matches(&self, path: &Path, scope: Scope) -> bool {
        match scope {
            Scope::Anywhere => self.anywhere.is_match(path),
            Scope::UnderCwd => self.under_cwd.is_match(path),
        }
    }
}

fn bad_glob(rule: &str, error: &globset::Error) -> RuleError {
    RuleError::BadGlob {
        rule: rule.to_owned(),
        reason: error.kind().to_string(),
    }
}

/// A path glob and what lies inside what it matches: `G` and `G/**` (`dir/**` is `dir` and
/// `dir/**`).
fn compile_path_glob(rule: &str, glob: &str) -> Result<GlobSet, RuleError> {
    let (itself, inside) = match glob.strip_suffix("/**") {
        Some(dir) if !dir.is_empty() => (dir.to_owned(), glob.to_owned()),
        _ => (
            glob.to_owned(),
            format!("{}/**", glob.trim_end_matches('/')),
        ),
    };
    let mut set = GlobSetBuilder::new();
    for glob in [itself, inside] {
        set.add(
            GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map_err(|error| bad_glob(rule, &error))?,
        );
    }
    set.build().map_err(|error| bad_glob(rule, &error))
}

#[derive(Clone, Copy)]
enum Scope {
    Anywhere,
    UnderCwd,
}

/// The rules in force for a session: the config's and the session's together, each source's
/// deny applying whatever the others allow.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allow: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// The config's `[permissions] sandboxed_commands`.
    pub sandboxed_commands: SandboxedCommands,
}

/// `[permissions] sandboxed_commands`: what becomes of a `run_command` that no rule, grant or
/// hook decided, when the sandbox that will run it confines it ([`SessionFacts::confined`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SandboxedCommands {
    /// It runs without asking (the `sandboxed` step): the sandbox bounds what it can do.
    #[default]
    Allow,
    /// It asks, as any command the rules leave open.
    Ask,
}

impl Policy {
    /// Compiles every source's rules for a session at `cwd`.
    pub fn compile<'a>(
        sources: impl IntoIterator<Item = &'a Rules>,
        cwd: &Path,
        home: &Path,
    ) -> Result<Self, RuleError> {
        let mut policy = Policy::default();
        for source in sources {
            let parse = |list: &[String]| -> Result<Vec<Rule>, RuleError> {
                let mut rules = Vec::new();
                for text in list {
                    rules.extend(Rule::parse_all(text, cwd, home, None)?);
                }
                Ok(rules)
            };
            policy.allow.extend(parse(&source.allow)?);
            policy.ask.extend(parse(&source.ask)?);
            policy.deny.extend(parse(&source.deny)?);
        }
        Ok(policy)
    }

    /// A session's policy at `cwd`: the config file's rules (those of `project`, the session's
    /// first root, too), then the session's own, each knowing where it is written.
    pub fn for_session(
        config: &ConfigRules,
        session: &Rules,
        cwd: &Path,
        project: Option<&Path>,
        home: &Path,
    ) -> Result<Self, RuleError> {
        let mut policy = Policy {
            sandboxed_commands: config.sandboxed_commands,
            ..Policy::default()
        };
        let sources = config
            .in_force(project)
            .map(|(rules, lines, anchor)| (rules, Some(lines), anchor))
            .chain(std::iter::once((session, None, None)));
        for (rules, lines_of, anchor) in sources {
            let lists = [
                (&rules.allow, &mut policy.allow),
                (&rules.ask, &mut policy.ask),
                (&rules.deny, &mut policy.deny),
            ];
            for (list, (texts, target)) in lists.into_iter().enumerate() {
                for (index, text) in texts.iter().enumerate() {
                    for mut rule in Rule::parse_all(text, cwd, home, anchor)? {
                        if let Some(lines) = lines_of {
                            rule.origin = RuleOrigin::Config {
                                file: config.file.clone(),
                                line: lines[list].get(index).copied(),
                            };
                        }
                        target.push(rule);
                    }
                }
            }
        }
        Ok(policy)
    }
}

impl Policy {
    /// Whether a deny or ask rule keeps something from the tools that read (`read_file`,
    /// `search_code`, `find_files`).
    pub fn restricts_reads(&self) -> bool {
        self.deny.iter().chain(&self.ask).any(|rule| {
            ["read_file", "search_code", "find_files"]
                .into_iter()
                .any(|tool| rule.covers(tool))
        })
    }

    /// What the walks of `tool` (`find_files`, `search_code`) must skip: every file and
    /// directory that a deny rule of `read_file`, `search_code` or `tool` itself covers.
    /// `None` when no rule hides anything, so that the walk pays nothing.
    pub fn hidden_from_walks(&self, tool: &str) -> Option<Arc<dyn HiddenPaths>> {
        let mut hidden = DeniedPaths::default();
        for rule in self
            .deny
            .iter()
            // Besides the walking tool's own, the rules of the tools that show contents
            // (docs/protocol.md section 7, "What else is judged"): a file no model may read
            // is not shown by a search or a listing either.
            .filter(|rule| rule.covers(tool) || rule.judged.only_shows_contents())
        {
            match &rule.specifier {
                Specifier::Path(glob) => hidden.globs.push(glob.clone()),
                Specifier::Any => hidden.everything = true,
                Specifier::Command(_) | Specifier::Argument { .. } => {}
            }
        }
        (hidden.everything || !hidden.globs.is_empty())
            .then(|| Arc::new(hidden) as Arc<dyn HiddenPaths>)
    }
}

impl Policy {
    /// What a sandboxed command cannot read because `read_file`'s deny rules cover it (the
    /// sandbox finds the files, [`crate::sandbox::hidden::DeniedReads`]).
    pub fn denied_reads(&self) -> DeniedReads {
        let mut denied = DeniedReads::default();
        for rule in self.deny.iter().filter(|rule| rule.covers("read_file")) {
            match &rule.specifier {
                Specifier::Path(glob) => {
                    denied.add(&glob.anywhere_text, glob.anywhere_itself.clone());
                }
                Specifier::Any => denied.everything = true,
                Specifier::Command(_) | Specifier::Argument { .. } => {}
            }
        }
        denied
    }
}

/// The paths that deny rules hide from walks.
#[derive(Default)]
struct DeniedPaths {
    globs: Vec<PathGlob>,
    /// A rule without a path (`deny read_file`) hides every file.
    everything: bool,
}

impl HiddenPaths for DeniedPaths {
    fn hides(&self, path: &Path) -> bool {
        self.everything
            || self
                .globs
                .iter()
                .any(|glob| glob.matches(path, Scope::Anywhere))
    }
}

/// A command line with its analysis, its environment, and the files it writes and reads
/// judged.
#[derive(Debug, Clone)]
pub struct CommandFacts {
    pub line: String,
    /// The call's `env` argument as leading `NAME=value` words, sorted by name: they count as
    /// if written before every command of the line (docs/protocol.md section 7).
    pub env: Vec<String>,
    /// The call's `cwd` argument, judged against the roots (`None`: the session's cwd).
    pub cwd: Option<ResolvedPath>,
    pub analysis: Arc<CommandLine>,
    /// What redirections (and options such as `time -o`) write, judged against the roots.
    pub written: Vec<ResolvedPath>,
    /// What redirections (and options such as `xargs -a`) read, judged against `read_file`
    /// deny rules.
    pub read: Vec<ResolvedPath>,
    /// What the call's `escalate` loosens beyond the session's sandbox (`None`: nothing).
    pub escalation: Option<Loosening>,
    /// Set when every command of the line is a known-safe read ([`facts`]'
    /// `known_safe_reads`, whose files are in `read`): whether it reads a tree (a directory's
    /// files, a repository).
    pub known_safe: Option<bool>,
    /// Why the call's escalation cannot be granted at all ([`Step::EscalationRefused`]).
    pub escalation_refused: Option<String>,
}

impl CommandFacts {
    /// `form` with the call's environment in front, as rules see it.
    fn with_env<'a>(&self, form: &'a str) -> std::borrow::Cow<'a, str> {
        if self.env.is_empty() {
            form.into()
        } else if form.is_empty() {
            self.env.join(" ").into()
        } else {
            format!("{} {form}", self.env.join(" ")).into()
        }
    }

    /// Whether `path` lies under a directory the call's escalation makes writable (both its
    /// forms): such a write is the escalation's, which the allow rule must cover.
    fn escalation_writes(&self, path: &ResolvedPath) -> bool {
        self.escalation.as_ref().is_some_and(|loosening| {
            loosening
                .writable
                .iter()
                .any(|dir| path.lexical.starts_with(dir) && path.resolved.starts_with(dir))
        })
    }

    /// Whether `rule`'s ` with …` part lets it cover this call's escalation: a rule without
    /// one covers only calls that stay in their sandbox.
    fn escalation_allowed_by(&self, rule: &Rule) -> bool {
        match (&rule.escalation, &self.escalation) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(rule), Some(call)) => rule.covers(call),
        }
    }

    /// Whether a deny or ask `rule` applies to this call's escalation: one without ` with …`
    /// applies to every call, one with it to calls that loosen what it names.
    fn escalation_restricted_by(&self, rule: &Rule) -> bool {
        match (&rule.escalation, &self.escalation) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(rule), Some(call)) => rule.overlaps(call),
        }
    }

    /// Whether the line writes a path that makes code run later (docs/protocol.md section 7).
    fn writes_code_that_runs(&self) -> bool {
        self.written.iter().any(|path| path.makes_code_run)
    }
}

/// Everything the engine needs about one call, gathered beforehand.
#[derive(Debug, Clone)]
pub struct CallFacts<'a> {
    pub tool: &'a str,
    pub safety: Safety,
    pub system: bool,
    pub arguments: &'a Map<String, Value>,
    /// The call's path arguments, judged (for file tools: `path`, defaulting to the cwd).
    pub paths: &'a [ResolvedPath],
    /// For `run_command`: the analysed command line.
    pub command: Option<&'a CommandFacts>,
    pub hook: HookVerdict,
}

/// The session state a decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts<'a> {
    pub mode: Mode,
    pub policy: &'a Policy,
    pub grants: &'a [String],
    /// Whether the session's commands run in a sandbox that confines them: writes only where
    /// it allows, the network closed, no Unix socket of a service outside, every layer of that
    /// enforced by this kernel.
    pub confined: bool,
}

/// The step of docs/protocol.md section 7 that decided a call, by the names of section 11.11
/// (`permissions/explain`'s `step`), with the few asks section 7 states apart from
/// its numbered steps named on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    SystemTool,
    DenyRule,
    /// The call's `escalate` cannot be granted: `unsandboxed` where the config forbids it
    /// (`allow_unsandboxed`), a `writable` directory that does not exist or whose path holds a
    /// quote, parenthesis, comma or newline.
    EscalationRefused,
    PlanMode,
    AskRule,
    /// A PreToolUse hook answered `ask`.
    HookAsk,
    /// The command line cannot be checked against the rules: it asks in every mode.
    UnreadableCommand,
    BypassMode,
    /// The call writes a path that makes code run later (`.git/config`, `.git/hooks`).
    ProtectedPath,
    AllowRule,
    Grant,
    /// A PreToolUse hook answered `allow`.
    HookAllow,
    /// A command line of read-only commands from the built-in list, reading inside the roots.
    KnownSafe,
    /// A command line no rule, grant or hook decided, run in a sandbox that confines it.
    Sandboxed,
    AcceptEdits,
    ReadOnlyInsideRoots,
    DefaultAsk,
    DontAsk,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::SystemTool => "system_tool",
            Step::DenyRule => "deny_rule",
            Step::EscalationRefused => "escalation_refused",
            Step::PlanMode => "plan_mode",
            Step::AskRule => "ask_rule",
            Step::HookAsk => "hook_ask",
            Step::UnreadableCommand => "unreadable_command",
            Step::BypassMode => "bypass_mode",
            Step::ProtectedPath => "protected_path",
            Step::AllowRule => "allow_rule",
            Step::Grant => "grant",
            Step::HookAllow => "hook_allow",
            Step::KnownSafe => "known_safe",
            Step::Sandboxed => "sandboxed",
            Step::AcceptEdits => "accept_edits",
            Step::ReadOnlyInsideRoots => "read_only_inside_roots",
            Step::DefaultAsk => "default_ask",
            Step::DontAsk => "dont_ask",
        }
    }
}

/// The rule (or grant) that decided a call, and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidingRule {
    pub text: String,
    /// How toold reads it, when that differs from `text` (`Bash(npm:*)`: `run_command(npm *)`).
    pub read_as: Option<String>,
    pub origin: RuleOrigin,
}

/// A decision and why: the step that made it and the rule it rests on. What the pipeline acts
/// on, `permissions/explain` shows and the audit log records is this one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgment {
    pub decision: Decision,
    pub step: Step,
    pub rule: Option<DecidingRule>,
}

impl Judgment {
    fn new(decision: Decision, step: Step) -> Self {
        Self {
            decision,
            step,
            rule: None,
        }
    }

    fn by_rule(decision: Decision, step: Step, rule: &Rule) -> Self {
        Self {
            decision,
            step,
            rule: rule.deciding(),
        }
    }

    fn by_grant(grant: &str) -> Self {
        Self {
            decision: Decision::Allow,
            step: Step::Grant,
            rule: Some(DecidingRule {
                text: grant.to_owned(),
                read_as: None,
                origin: RuleOrigin::Grant,
            }),
        }
    }
}

/// Decides one call: docs/protocol.md section 7's order, first match wins.
pub fn evaluate(call: &CallFacts<'_>, session: &SessionFacts<'_>) -> Judgment {
    if call.system {
        return Judgment::new(Decision::Allow, Step::SystemTool);
    }
    if let Some((rule, reason)) = deny_rule(call, session.policy) {
        return Judgment::by_rule(Decision::Deny(reason), Step::DenyRule, rule);
    }
    if let Some(why) = call
        .command
        .and_then(|command| command.escalation_refused.as_deref())
    {
        return Judgment::new(Decision::Deny(why.to_owned()), Step::EscalationRefused);
    }
    if session.mode == Mode::Plan && call.safety == Safety::SideEffect {
        return Judgment::new(
            Decision::NotAllowed(format!(
                "{} changes things, and the session is in plan mode, where only read-only tools run",
                call.tool
            )),
            Step::PlanMode,
        );
    }
    let judgment = decide_without_deny(call, session);
    match judgment.decision {
        Decision::Ask { reason, .. } if session.mode == Mode::DontAsk => Judgment {
            decision: Decision::Deny(format!(
                "{reason}; the session's mode is dont_ask, so nothing is asked"
            )),
            step: Step::DontAsk,
            rule: judgment.rule,
        },
        _ => judgment,
    }
}

/// Step 1 alone: the reason a deny rule refuses the call, if one does. Approvals that rewrite
/// arguments are checked with this again.
pub fn denied(call: &CallFacts<'_>, policy: &Policy) -> Option<String> {
    deny_rule(call, policy).map(|(_, reason)| reason)
}

/// Step 1: the deny rule that refuses the call, and the reason the model is given.
fn deny_rule<'p>(call: &CallFacts<'_>, policy: &'p Policy) -> Option<(&'p Rule, String)> {
    if call.system {
        return None;
    }
    if let Some(rule) = policy
        .deny
        .iter()
        .find(|rule| matches_restrictive(rule, call))
    {
        return Some((rule, format!("denied by the rule {}", rule.text)));
    }
    // Code the line runs that no rule can look into (`echo rm x | bash`) could be what a deny
    // rule forbids: the rule denies it.
    if let Some(command) = call.command
        && !command.analysis.hidden_code.is_empty()
        && let Some(rule) = policy
            .deny
            .iter()
            .find(|rule| rule.covers(call.tool) && matches!(rule.specifier, Specifier::Command(_)))
    {
        let reason = format!(
            "denied by the rule {}: the command line runs code that cannot be checked against \
             it ({}); run what it would run as a command line of its own",
            rule.text,
            command.analysis.hidden_code.join(", ")
        );
        return Some((rule, reason));
    }
    // A tool that writes a file and shows lines of it (`edit_file`: its diff, and whether the
    // old text is there) reads it: a file no model may read is not edited either.
    let judged = judged_arguments(call.tool);
    if judged.writes()
        && judged.shows_contents()
        && let Some((rule, path)) =
            rule_for_paths(&policy.deny, JudgedArguments::reads_one_file, call.paths)
    {
        let reason = format!(
            "denied by the rule {}: {} reads {} and shows lines of it",
            rule.text,
            call.tool,
            path.lexical.display()
        );
        return Some((rule, reason));
    }
    // What a command line reads (`< file`, `xargs -a file`) is judged as `read_file` would be,
    // and what it writes (`> file`, `time -o file`) as `write_file` and `edit_file` would be.
    let command = call.command?;
    if let Some((rule, path)) =
        rule_for_paths(&policy.deny, JudgedArguments::reads_one_file, &command.read)
    {
        let reason = format!(
            "denied by the rule {}: the command line reads {}",
            rule.text,
            path.lexical.display()
        );
        return Some((rule, reason));
    }
    let (rule, path) = rule_for_paths(&policy.deny, JudgedArguments::writes, &command.written)?;
    let reason = format!(
        "denied by the rule {}: the command line writes {}",
        rule.text,
        path.lexical.display()
    );
    Some((rule, reason))
}

/// The first of `rules` for a tool `of_tools` admits that covers one of `paths` (a rule
/// without a specifier covers any), with the path it covers.
fn rule_for_paths<'r, 'p>(
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

fn decide_without_deny(call: &CallFacts<'_>, session: &SessionFacts<'_>) -> Judgment {
    // What an `allow_session` answer would grant, as the approval shows it; the exact form is
    // what an exact grant is looked up by.
    let suggestion = grant_shown(&session_grant(call)).to_owned();
    let exact = grant_form(call);
    if let Some(rule) = session
        .policy
        .ask
        .iter()
        .find(|rule| matches_restrictive(rule, call))
    {
        let reason = format!("the rule {} asks for approval", rule.text);
        return Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::AskRule, rule);
    }
    if let Some(command) = call.command {
        let asked = rule_for_paths(
            &session.policy.ask,
            JudgedArguments::reads_one_file,
            &command.read,
        )
        .map(|(rule, path)| (rule, "reads", path))
        .or_else(|| {
            rule_for_paths(
                &session.policy.ask,
                JudgedArguments::writes,
                &command.written,
            )
            .map(|(rule, path)| (rule, "writes", path))
        });
        if let Some((rule, verb, path)) = asked {
            let reason = format!(
                "the rule {} asks for approval: the command line {verb} {}",
                rule.text,
                path.lexical.display()
            );
            return Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::AskRule, rule);
        }
    }
    if call.hook == HookVerdict::Ask {
        let reason = "a PreToolUse hook asks for approval".to_owned();
        return Judgment::new(Decision::Ask { reason, suggestion }, Step::HookAsk);
    }
    if let Some(why) = call
        .command
        .and_then(|command| command.analysis.unreadable.as_deref())
    {
        // Deny and ask rules cannot look inside it: asking is the only safe answer, in every
        // mode (bypass too).
        let reason = format!("the command line cannot be checked against the rules: {why}");
        return Judgment::new(
            Decision::Ask { reason, suggestion },
            Step::UnreadableCommand,
        );
    }
    if session.mode == Mode::Bypass {
        return Judgment::new(Decision::Allow, Step::BypassMode);
    }
    if let Some(judgment) = protected_write(call, session, &exact, &suggestion) {
        return judgment;
    }
    // Rules are written for the session's roots: a command that runs elsewhere (`cwd` outside
    // them, lexically or resolved) is another command, whatever its words. Only a grant of
    // exactly that call (which records the directory) or a hook covers it.
    let runs_outside = call
        .command
        .and_then(|command| command.cwd.as_ref())
        .filter(|cwd| !cwd.inside_roots());
    // The session's pattern grants (`git log *`) count as allow rules of their own origin,
    // so that a line is covered by rules and grants together; never in plan mode.
    let granted = match session.mode {
        Mode::Plan => Vec::new(),
        _ => pattern_grants(session.grants),
    };
    if runs_outside.is_none()
        && let Some(rule) = allowing_rule(call, session.policy.allow.iter().chain(&granted))
    {
        let step = match rule.origin {
            RuleOrigin::Grant => Step::Grant,
            _ => Step::AllowRule,
        };
        return Judgment::by_rule(Decision::Allow, step, rule);
    }
    if session.mode != Mode::Plan && session.grants.contains(&exact) {
        return Judgment::by_grant(&exact);
    }
    if call.hook == HookVerdict::Allow {
        return Judgment::new(Decision::Allow, Step::HookAllow);
    }
    if let Some(cwd) = runs_outside {
        let reason = format!(
            "the command would run in {}, outside the session's roots",
            cwd.lexical.display()
        );
        return Judgment::new(Decision::Ask { reason, suggestion }, Step::DefaultAsk);
    }
    if let Some(command) = call.command
        && command.escalation.is_none()
    {
        // The sandbox decides first where it confines; the known-safe list where it does not,
        // or beside a command rule (a listed command runs no script that could sidestep one).
        let sandboxed = (session.confined
            && session.policy.sandboxed_commands == SandboxedCommands::Allow)
            .then(|| sandboxed(session.policy, &exact, suggestion.clone()));
        match sandboxed {
            Some(judgment) if judgment.step == Step::Sandboxed => return judgment,
            // A tree it reads could hold what a rule keeps from the model's reads, which
            // no path of the line names: beside such a rule the list does not decide.
            _ if command
                .known_safe
                .is_some_and(|tree| !tree || !session.policy.restricts_reads()) =>
            {
                return Judgment::new(Decision::Allow, Step::KnownSafe);
            }
            Some(judgment) => return judgment,
            None => {}
        }
    }
    let all_inside = call.paths.iter().all(ResolvedPath::inside_roots);
    if session.mode == Mode::AcceptEdits && judged_arguments(call.tool).writes() && all_inside {
        return Judgment::new(Decision::Allow, Step::AcceptEdits);
    }
    if call.safety == Safety::ReadOnly && all_inside {
        return Judgment::new(Decision::Allow, Step::ReadOnlyInsideRoots);
    }
    let reason = match (call.command, call.safety) {
        (Some(command), _) if command.escalation.is_some() => {
            format!(
                "the command asks to leave its sandbox ({}), and no allow rule or grant covers \
                 {exact}",
                command
                    .escalation
                    .as_ref()
                    .map(Loosening::text)
                    .unwrap_or_default()
            )
        }
        (Some(command), _) if !command.analysis.opaque.is_empty() => {
            format!(
                "no allow rule can cover this command line: it has {}",
                command.analysis.opaque.join(", ")
            )
        }
        (Some(command), _) if command.written.iter().any(|path| !path.inside_roots()) => {
            "the command line writes to a file outside the session roots".to_owned()
        }
        (_, Safety::ReadOnly) => "the path is outside the session roots".to_owned(),
        _ => format!("no allow rule matches {}", canonical_form(call)),
    };
    Judgment::new(Decision::Ask { reason, suggestion }, Step::DefaultAsk)
}

/// A command line the sandbox confines runs unasked, unless a deny or ask rule of `run_command`
/// with a command pattern is in force: such a rule binds the lines it can read, and a command
/// run unasked could sidestep it (a script it wrote and then ran, an interpreter, a function,
/// a word the shell expands), so beside one the sandbox does not decide and the line asks as
/// any the rules leave open. The rule is named, and allow rules are what change it.
fn sandboxed(policy: &Policy, exact: &str, suggestion: String) -> Judgment {
    let binding = policy.deny.iter().chain(&policy.ask).find(|rule| {
        // A rule about escalated calls binds only those, which the sandbox never decides.
        rule.covers("run_command")
            && rule.escalation.is_none()
            && matches!(rule.specifier, Specifier::Command(_))
    });
    match binding {
        Some(rule) => {
            let reason = format!(
                "no allow rule matches {exact}, and beside the rule {} the sandbox does not \
                 decide for commands: one it ran unasked could run what that rule is about \
                 through a script or an interpreter",
                rule.text
            );
            Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::DefaultAsk, rule)
        }
        None => Judgment::new(Decision::Allow, Step::Sandboxed),
    }
}

/// Writing a path that makes code run later (`.git/config`, `.git/hooks/**`) asks in every
/// mode but bypass, whatever allows the call otherwise, unless the session granted this exact
/// call or a file tool's allow rule names the git directory (its pattern says `.git` and
/// matches the path): `allow write_file(**)` does not open `.git/hooks/`.
fn protected_write(
    call: &CallFacts<'_>,
    session: &SessionFacts<'_>,
    exact: &str,
    suggestion: &str,
) -> Option<Judgment> {
    let protected = match call.command {
        Some(command) => command.writes_code_that_runs(),
        None => call.paths.iter().any(|path| path.makes_code_run),
    };
    if !protected {
        return None;
    }
    if session.mode != Mode::Plan && session.grants.iter().any(|g| g == exact) {
        return Some(Judgment::by_grant(exact));
    }
    let named = session.policy.allow.iter().find(|rule| {
        call.command.is_none()
            && rule.covers(call.tool)
            && rule.text.contains(".git")
            && matches!(&rule.specifier, Specifier::Path(glob) if call.paths.iter().all(|path| {
                glob.matches(&path.lexical, Scope::UnderCwd)
                    && glob.matches(&path.resolved, Scope::UnderCwd)
            }))
    });
    if let Some(rule) = named {
        return Some(Judgment::by_rule(Decision::Allow, Step::AllowRule, rule));
    }
    let reason = "the call writes a file that makes code run later (git runs what .git/config \
                  and .git/hooks name; toold trusts its own config and state), which only an \
                  approval or an allow rule naming .git permits"
        .to_owned();
    Some(Judgment::new(
        Decision::Ask {
            reason,
            suggestion: suggestion.to_owned(),
        },
        Step::ProtectedPath,
    ))
}

/// The exact form a session grant records and matches: the command line (followed by the
/// call's `env` as JSON, when it has one) for a tool that takes one (`run_command`), the
/// resolved path for one that takes a path (the file tools), the tool alone otherwise. Paths are written by [`paths::exact_text`], so a grant covers the bytes
/// it was given for and no other file that merely displays the same.
pub fn canonical_form(call: &CallFacts<'_>) -> String {
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
pub fn grant_form(call: &CallFacts<'_>) -> String {
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
pub fn session_grant(call: &CallFacts<'_>) -> String {
    match pattern_grant(call) {
        Some(rule) => format!("{PATTERN_GRANT}{rule}"),
        None => grant_form(call),
    }
}

/// The rule an `allow_always` or `deny_always` answer writes for good: the pattern grant's
/// rule, or the call's exact form when that reads as a rule covering exactly this call (no `*`
/// or glob character in it, no `env`, no `cwd`). `None` when neither covers the call as its
/// text reads: "always" is then not offered.
pub fn always_rule(call: &CallFacts<'_>) -> Option<String> {
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
fn pattern_grants(grants: &[String]) -> Vec<Rule> {
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

/// Deny and ask: the rule matches if any form of the call matches it.
fn matches_restrictive(rule: &Rule, call: &CallFacts<'_>) -> bool {
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
fn allowing_rule<'p>(
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
pub fn command_rules<'p>(
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

/// A value as a shell word: plain when it is safe as it is, single-quoted otherwise, so that
/// a grant of `A='x y' cmd` can never read as another assignment.
pub(crate) fn shell_quoted(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:,+@%".contains(c))
    {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\'', "'\\''"))
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

#[cfg(test)]
mod tests;
