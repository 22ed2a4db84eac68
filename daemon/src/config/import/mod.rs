//! `toold import`: another agent's permission settings read as toold config — Claude Code's
//! `settings.json` ([`claude`]), Codex's `config.toml` and `.rules` files ([`codex`]) — each
//! piece with where it came from, and every piece that cannot be mapped with why. Pure: the
//! command line reads the files and prints; `config::write` puts the result in a config.

pub mod claude;
pub mod codex;
pub mod starlark;

use std::path::Path;

use crate::permission::RuleList;

/// What one or more files import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    /// Rules, in file order.
    pub rules: Vec<ImportedRule>,
    pub sandbox: SandboxImport,
    /// `[permissions] sandboxed_commands`: `"allow"` or `"ask"`.
    pub sandboxed_commands: Option<Sourced<&'static str>>,
    /// What could not be mapped, and why: the import is incomplete.
    pub dropped: Vec<Dropped>,
    /// Keys that are not permission settings (or have nothing to do with them in toold),
    /// named so that nothing is skipped silently; not a loss of any permission.
    pub unmapped: Vec<Unmapped>,
}

/// A rule for one of `[permissions]`' lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedRule {
    pub list: RuleList,
    pub rule: String,
    /// Where it came from, for the comment beside it (`~/.claude/settings.json`).
    pub origin: String,
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced<T> {
    pub value: T,
    pub origin: String,
}

/// `[sandbox]` keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxImport {
    /// `"read_only"`, `"workspace_write"` or `"off"`.
    pub mode: Option<Sourced<&'static str>>,
    pub network: Option<Sourced<bool>>,
    /// Directories, absolute or `~/`.
    pub writable: Vec<Sourced<String>>,
}

impl SandboxImport {
    pub(crate) fn is_empty(&self) -> bool {
        self.mode.is_none() && self.network.is_none() && self.writable.is_empty()
    }
}

/// An entry that was not imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The file (and line, where known).
    pub source: String,
    /// The entry as written.
    pub entry: String,
    pub why: String,
}

/// Keys of a file that were read and left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    pub source: String,
    pub keys: Vec<String>,
    /// Why they are left: "not permission settings", "not mapped".
    pub why: String,
}

impl Import {
    /// Adds what another file imported after this one's.
    pub fn extend(&mut self, other: Import) {
        self.rules.extend(other.rules);
        self.dropped.extend(other.dropped);
        self.unmapped.extend(other.unmapped);
        if other.sandboxed_commands.is_some() {
            self.sandboxed_commands = other.sandboxed_commands;
        }
        if other.sandbox.mode.is_some() {
            self.sandbox.mode = other.sandbox.mode;
        }
        if other.sandbox.network.is_some() {
            self.sandbox.network = other.sandbox.network;
        }
        self.sandbox.writable.extend(other.sandbox.writable);
    }

    /// For `--project`: only rules can be one project's; the sandbox and `sandboxed_commands`
    /// are the whole config's, so they are dropped rather than widened to every project.
    pub fn scope_to_project(&mut self, project: &Path) {
        let why = format!(
            "[sandbox] and sandboxed_commands apply to every session, not to {} alone; import \
             without --project to set them",
            project.display()
        );
        let mut drop = |origin: String, entry: String| {
            self.dropped.push(Dropped {
                source: origin,
                entry,
                why: why.clone(),
            });
        };
        if let Some(setting) = self.sandboxed_commands.take() {
            drop(
                setting.origin,
                format!("sandboxed_commands = {:?}", setting.value),
            );
        }
        let sandbox = std::mem::take(&mut self.sandbox);
        if let Some(mode) = sandbox.mode {
            drop(mode.origin, format!("[sandbox] mode = {:?}", mode.value));
        }
        if let Some(network) = sandbox.network {
            drop(
                network.origin,
                format!("[sandbox] network = {}", network.value),
            );
        }
        for dir in sandbox.writable {
            drop(dir.origin, format!("[sandbox] writable {:?}", dir.value));
        }
    }
}

impl Import {
    /// Drops the rules that name the tools of an MCP server `servers` (the config's) lacks:
    /// toold refuses a config with such a rule, since no other server registers those tools.
    pub fn drop_unknown_servers(&mut self, servers: &[&str], home: &Path) {
        let (known, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut self.rules)
            .into_iter()
            .partition(|rule| {
                crate::permission::lint::names_an_unknown_server(&rule.rule, servers, home)
                    .is_none()
            });
        self.rules = known;
        for rule in unknown {
            let why = crate::permission::lint::names_an_unknown_server(&rule.rule, servers, home)
                .unwrap_or_default();
            self.dropped.push(Dropped {
                source: rule.origin,
                entry: format!("{}: {:?}", rule.list.key(), rule.rule),
                why,
            });
        }
    }
}

/// A file as a comment names it: under `~/` when it is in `home`.
pub fn shown_path(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) if home != Path::new("/") => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}

/// Text made safe for a one-line TOML comment: control characters (a newline would end the
/// comment and start a key) become spaces.
pub(crate) fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_of_a_server_the_config_lacks_are_dropped() {
        let rule = |text: &str| ImportedRule {
            list: RuleList::Allow,
            rule: text.to_owned(),
            origin: "~/s.json".to_owned(),
        };
        let mut import = Import {
            rules: vec![
                rule("mcp__github"),
                rule("mcp__fs__read"),
                rule("Bash(ls:*)"),
            ],
            ..Import::default()
        };
        import.drop_unknown_servers(&["fs"], Path::new("/home/u"));
        let kept: Vec<_> = import.rules.iter().map(|rule| rule.rule.as_str()).collect();
        assert_eq!(kept, ["mcp__fs__read", "Bash(ls:*)"]);
        assert_eq!(import.dropped.len(), 1);
        assert_eq!(import.dropped[0].entry, "allow: \"mcp__github\"");
        assert!(import.dropped[0].why.contains("[mcp.servers.github]"));
        assert_eq!(
            shown_path(Path::new("/home/u/x"), Path::new("/home/u")),
            "~/x"
        );
        assert_eq!(comment_text("a\nb"), "a b");
    }
}
