//! MCP servers as shared tool sources (docs/protocol.md section 11.9): each configured server
//! runs once per daemon, shared by every session, its tools going through the same pipeline as
//! the builtins. Here: what the config says of a server (`[mcp.servers.NAME]`, checked by
//! `config`); the names its tools take (`names`); what its `tools/list` becomes in the registry
//! (`listing`); its process (`process`), the framing of its stdio and the calls sent on it
//! (`stdio`), its MCP session (`client`), its supervisor (`supervisor`), the daemon's set of
//! servers (`servers`), and its tools as the registry runs them (`tool`).

pub mod client;
pub mod listing;
pub(crate) mod names;
pub mod process;
pub mod servers;
pub(crate) mod stdio;
pub mod supervisor;
pub(crate) mod tool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};

/// How long a server may take to start and answer `initialize` unless its table says.
pub(crate) const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one call of a server's tool may run unless its table says; progress from the
/// server restarts the count.
pub(crate) const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

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
    pub(crate) fn summary(&self) -> String {
        let reached = match &self.transport {
            McpTransport::Stdio { command, .. } => format!("stdio ({command})"),
            McpTransport::Http { url, .. } => format!("http ({})", shown_url(url)),
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
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

/// The secrets of these servers' tables ([`crate::secrets`]): each HTTP server's
/// `bearer_token_env` (withheld; its value redacted), its headers' values and its URL's user,
/// password and query values; each value of a stdio server's `env` whose name says it is a
/// secret ([`crate::secrets::names_a_secret`]) or that is shaped like a token
/// ([`looks_like_a_token`]), and the same of a header.
pub(crate) fn secrets_of(configs: &[McpServerConfig]) -> crate::secrets::Secrets {
    let is_secret =
        |name: &str, value: &str| crate::secrets::names_a_secret(name) || looks_like_a_token(value);
    let mut withheld = Vec::new();
    let mut values = Vec::new();
    for config in configs {
        match &config.transport {
            McpTransport::Stdio { env, .. } => values.extend(
                env.iter()
                    .filter(|(name, value)| is_secret(name, value))
                    .map(|(_, value)| value.clone()),
            ),
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                for (_, value) in headers
                    .iter()
                    .filter(|(name, value)| is_secret(name, value))
                {
                    values.push(value.clone());
                    // `Authorization: Bearer TOKEN`: the token alone is secret too.
                    if let Some((_, token)) = value.split_once(' ') {
                        values.push(token.to_owned());
                    }
                }
                withheld.extend(bearer_token_env.iter().cloned());
                values.extend(url_secrets(url));
            }
        }
    }
    crate::secrets::Secrets::new(withheld, values)
}

/// Whether `value` is shaped like a key or a token whatever its name: 16 bytes or more, no
/// whitespace, no `/` (a path or a URL is not), letters and digits both. `NODE_ENV=production`
/// and `ROOT=/home/me/project` are settings; `ghp_…`, `sk-…` and a UUID are not.
fn looks_like_a_token(value: &str) -> bool {
    value.len() >= 16
        && !value.contains(|c: char| c.is_whitespace() || c == '/')
        && value.contains(|c: char| c.is_ascii_alphabetic())
        && value.contains(|c: char| c.is_ascii_digit())
}

/// The user, the password and every query value of `url`, where secrets are put.
fn url_secrets(url: &str) -> Vec<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let userinfo = authority.rsplit_once('@').map(|(userinfo, _)| userinfo);
    let query = rest
        .split_once('?')
        .map(|(_, query)| query.split('#').next().unwrap_or_default());
    userinfo
        .into_iter()
        .flat_map(|userinfo| userinfo.split(':'))
        .chain(
            query
                .into_iter()
                .flat_map(|query| query.split('&'))
                .filter_map(|pair| pair.split_once('=').map(|(_, value)| value)),
        )
        .filter(|secret| !secret.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `url` as errors, `mcp/status` and `check-config` show it (to clients, models and logs):
/// without a user and password before its host, a query or a fragment, where secrets are put.
pub(crate) fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, format!("/{path}")),
        None => (rest, String::new()),
    };
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
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
    pub(crate) fn new(
        enabled: &[String],
        disabled: &[String],
    ) -> Result<Self, (bool, usize, String)> {
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

    /// Whether the tool `name` of server `server` is registered. A glob matches the name as
    /// the server lists it or as toold lists it (`mcp__S__NAME`): `disabled_tools =
    /// ["mcp__fs__delete_file"]`, written as `tools/list` shows the tool, leaves it out too.
    pub fn admits(&self, server: &str, name: &str) -> bool {
        let listed = names::qualified_tool_name(server, name);
        let matched = |set: &GlobSet| set.is_match(name) || set.is_match(&listed);
        matched(&self.enabled) && !matched(&self.disabled)
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
        assert!(ToolFilter::default().admits("fs", "anything"));
        let filter = ToolFilter::new(
            &["read_*".to_owned(), "list".to_owned()],
            &["read_secret*".to_owned()],
        )
        .unwrap();
        assert!(filter.admits("fs", "read_file"));
        assert!(filter.admits("fs", "list"));
        assert!(!filter.admits("fs", "read_secrets"));
        assert!(!filter.admits("fs", "write_file"));
        assert!(!filter.admits("fs", "listing"));
        let none = ToolFilter::new(&[], &[]).unwrap();
        assert!(!none.admits("fs", "read_file"), "no enabled glob: no tool");
        // Written as toold lists the tool.
        let listed = ToolFilter::new(&["*".to_owned()], &["mcp__fs__delete_*".to_owned()]).unwrap();
        assert!(!listed.admits("fs", "delete_file"));
        assert!(listed.admits("fs", "read_file"));
        assert!(
            listed.admits("other", "delete_file"),
            "another server's name is not this one's"
        );
    }

    #[test]
    fn a_shown_url_has_no_secrets() {
        assert_eq!(
            shown_url("http://user:pw@127.0.0.1:3001/mcp?key=s#f"),
            "http://127.0.0.1:3001/mcp"
        );
        assert_eq!(shown_url("http://host"), "http://host");
        assert_eq!(shown_url("https://a@b/c/d"), "https://b/c/d");
    }

    #[test]
    fn the_secrets_of_a_url_are_its_user_password_and_query_values() {
        assert_eq!(
            url_secrets("http://user:pw@127.0.0.1:3001/mcp?api_key=k1&x=&y=v#f"),
            ["user", "pw", "k1", "v"]
        );
        assert!(url_secrets("http://host/p").is_empty());
    }

    #[test]
    fn a_value_is_a_secret_by_its_name_or_its_shape() {
        assert!(looks_like_a_token("ghp_0123456789abcdefABCDEF"));
        assert!(looks_like_a_token("123e4567-e89b-12d3-a456-426614174000"));
        for setting in [
            "production",
            "/home/me/project/src/1",
            "a long sentence of 2 words",
        ] {
            assert!(!looks_like_a_token(setting), "{setting}");
        }
    }

    #[test]
    fn a_bad_glob_is_named_by_its_list_and_index() {
        let error =
            ToolFilter::new(&["ok".to_owned()], &["fine".to_owned(), "[".to_owned()]).unwrap_err();
        assert_eq!((error.0, error.1), (false, 1));
    }
}
