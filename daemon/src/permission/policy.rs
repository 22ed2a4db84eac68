//! The rules in force for a session: the config file's `[permissions]` (its project tables
//! too) and the session's own, compiled into one policy that knows where each rule is written,
//! and what its deny rules hide from walks and from the sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toold_protocol::Rules;

use crate::sandbox::hidden::DeniedReads;
use crate::tools::HiddenPaths;

use super::patterns::{PathGlob, Scope};
use super::rule_error::RuleError;
use super::rules::{Rule, RuleOrigin, Specifier};

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

impl ConfigRules {
    /// The rules of the config that apply to a session of `project` (its first root): the
    /// whole file's, then each of its project's tables, with where each rule is written and
    /// the directory a pattern starting with one `/` is relative to (the file's, or the
    /// project's for its table).
    pub(crate) fn in_force<'a>(
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
/// hook decided, when the sandbox that will run it confines it
/// ([`SessionFacts::confined`](super::SessionFacts::confined)).
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
    pub(crate) fn for_session(
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
    pub(crate) fn restricts_reads(&self) -> bool {
        self.deny.iter().chain(&self.ask).any(|rule| {
            ["read_file", "search_code", "find_files"]
                .into_iter()
                .any(|tool| rule.covers(tool))
        })
    }

    /// What the walks of `tool` (`find_files`, `search_code`) must skip: every file and
    /// directory that a deny rule of `read_file`, `search_code` or `tool` itself covers.
    /// `None` when no rule hides anything, so that the walk pays nothing.
    pub(crate) fn hidden_from_walks(&self, tool: &str) -> Option<Arc<dyn HiddenPaths>> {
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
    pub(crate) fn denied_reads(&self) -> DeniedReads {
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
