//! MCP servers as shared tool sources (docs/protocol.md section 11.9): each configured server
//! runs once per daemon, shared by every session, its tools going through the same pipeline as
//! the builtins. Here: what the config says of a server (`[mcp.servers.NAME]`, checked by
//! `config`); the names its tools take (`names`); what its `tools/list` becomes in the registry
//! (`listing`); its process (`process`), the framing of its stdio and the calls sent on it
//! (`stdio`), its MCP session (`client`), its supervisor and the daemon's set of servers
//! (`server`), and its tools as the registry runs them (`tool`).

pub mod client;
pub mod listing;
pub mod names;
pub mod process;
pub mod server;
pub mod stdio;
pub mod tool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};

/// How long a server may take to start and answer `initialize` unless its table says.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one call of a server's tool may run unless its table says; progress from the
/// server restarts the count.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// One `[mcp.servers.NAME]` table, every key checked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    /// `NAME`: `[a-z0-9][a-z0-9-]{0,31}` ([`names::is_valid_server_name`]).
    pub name: String,
    pub transport: McpTransport,
    pub trust: Trust,
    pub start: Start,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    /// Which of the server's own tool names are registered: those an `enabled_tools` glob
    /// matches and no `disabled_tools` glob does.
    pub tools: ToolFilter,
}

impl McpServerConfig {
    /// One line for `check-config`: `fs: stdio (npx), untrusted, eager`.
    pub fn summary(&self) -> String {
        let reached = match &self.transport {
            McpTransport::Stdio { command, .. } => format!("stdio ({command})"),
            McpTransport::Http { url, .. } => format!("http ({url})"),
        };
        let trust = match self.trust {
            Trust::Untrusted => "untrusted",
            Trust::Trusted => "trusted",
        };
        let start = match self.start {
            Start::Eager => "eager",
            Start::Lazy => "lazy",
        };
        let mut line = format!("{}: {reached}, {trust}, {start}", self.name);
        if self.tools != ToolFilter::default() {
            line.push_str(&format!(
                ", tools {:?} but not {:?}",
                self.tools.enabled_globs, self.tools.disabled_globs
            ));
        }
        line
    }
}

/// How the daemon reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout, run directly (never through a
    /// shell).
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the filtered environment the server starts with.
        env: BTreeMap<String, String>,
        /// Absolute (a leading `~/` expanded when read); `None`: the daemon's own.
        cwd: Option<PathBuf>,
    },
    /// MCP's streamable HTTP transport.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// The daemon's environment variable that holds the bearer token, read at each start.
        bearer_token_env: Option<String>,
    },
}

impl McpTransport {
    /// `"stdio"` or `"http"`, as `mcp/status` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

/// Whether a server's annotations may lower the risk of its tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trust {
    /// Every tool is `side_effect`, whatever its annotations say.
    #[default]
    Untrusted,
    /// A tool annotated `readOnlyHint: true` is `read_only`.
    Trusted,
}

/// When a server starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// With the daemon, in the background: clients are answered meanwhile.
    #[default]
    Eager,
    /// At its first use: the first `tools/list`, or a call that names one of its tools.
    Lazy,
}

/// The globs of `enabled_tools` and `disabled_tools`, on a server's own tool names.
#[derive(Debug, Clone)]
pub struct ToolFilter {
    enabled: GlobSet,
    disabled: GlobSet,
    /// As written, for `check-config` and logs.
    pub enabled_globs: Vec<String>,
    pub disabled_globs: Vec<String>,
}

impl ToolFilter {
    /// A filter from the two lists; the first glob that does not compile is the error, with its
    /// index in its list.
    pub fn new(enabled: &[String], disabled: &[String]) -> Result<Self, (bool, usize, String)> {
        fn build(globs: &[String], enabled: bool) -> Result<GlobSet, (bool, usize, String)> {
            let mut set = GlobSetBuilder::new();
            for (index, glob) in globs.iter().enumerate() {
                let glob =
                    Glob::new(glob).map_err(|err| (enabled, index, err.kind().to_string()))?;
                set.add(glob);
            }
            set.build()
                .map_err(|err| (enabled, 0, err.kind().to_string()))
        }
        Ok(Self {
            enabled: build(enabled, true)?,
            disabled: build(disabled, false)?,
            enabled_globs: enabled.to_vec(),
            disabled_globs: disabled.to_vec(),
        })
    }

    /// Whether the server's tool `name` is registered.
    pub fn admits(&self, name: &str) -> bool {
        self.enabled.is_match(name) && !self.disabled.is_match(name)
    }
}

impl Default for ToolFilter {
    /// Every tool: `enabled_tools = ["*"]`, `disabled_tools = []`.
    fn default() -> Self {
        Self::new(&["*".to_owned()], &[]).expect("`*` is a valid glob")
    }
}

impl PartialEq for ToolFilter {
    fn eq(&self, other: &Self) -> bool {
        self.enabled_globs == other.enabled_globs && self.disabled_globs == other.disabled_globs
    }
}

impl Eq for ToolFilter {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_filter_admits_every_tool_and_disabled_globs_win() {
        assert!(ToolFilter::default().admits("anything"));
        let filter = ToolFilter::new(
            &["read_*".to_owned(), "list".to_owned()],
            &["read_secret*".to_owned()],
        )
        .unwrap();
        assert!(filter.admits("read_file"));
        assert!(filter.admits("list"));
        assert!(!filter.admits("read_secrets"));
        assert!(!filter.admits("write_file"));
        assert!(!filter.admits("listing"));
        let none = ToolFilter::new(&[], &[]).unwrap();
        assert!(!none.admits("read_file"), "no enabled glob: no tool");
    }

    #[test]
    fn a_bad_glob_is_named_by_its_list_and_index() {
        let error =
            ToolFilter::new(&["ok".to_owned()], &["fine".to_owned(), "[".to_owned()]).unwrap_err();
        assert_eq!((error.0, error.1), (false, 1));
    }
}
