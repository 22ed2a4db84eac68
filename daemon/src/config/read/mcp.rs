//! `[mcp.servers.NAME]`: each MCP server's table, every key checked, with the faults that
//! concern the table as a whole (both or neither of `command` and `url`, keys of the other
//! transport) pointed at the table's name.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use toml::de::DeValue;

use super::{Fault, Field, Findings, TIMEOUT_MS};
use crate::mcp::names::is_valid_server_name;
use crate::mcp::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, McpServerConfig, McpTransport, Start,
    ToolFilter, Trust,
};

/// The keys of a server's table.
const SERVER_KEYS: [&str; 14] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "bearer_token_env",
    "trust",
    "start",
    "startup_timeout_ms",
    "tool_timeout_ms",
    "enabled_tools",
    "disabled_tools",
    "enabled",
];

/// The keys only a server started with `command` takes, and those only one reached at `url`.
const STDIO_KEYS: [&str; 3] = ["args", "env", "cwd"];
const HTTP_KEYS: [&str; 2] = ["headers", "bearer_token_env"];

/// `[mcp]`: its only key is `servers`. Servers with `enabled = false` are checked and left out;
/// `names` gets every server's name, enabled or not.
pub(super) fn mcp(
    field: &Field<'_, '_>,
    names: &mut Vec<String>,
    found: &mut Findings,
) -> Result<Vec<McpServerConfig>, Fault> {
    let mut servers = Vec::new();
    for entry in field.entries()? {
        found.check(|found| {
            match entry.name {
                "servers" => {
                    for server_field in entry.entries()? {
                        names.push(server_field.name.to_owned());
                        found.check(|found| {
                            if let Some(server) = server(&server_field, found)? {
                                servers.push(server);
                            }
                            Ok(())
                        });
                    }
                }
                _ => return Err(entry.unknown(&["servers"])),
            }
            Ok(())
        });
    }
    Ok(servers)
}

/// What a server's table gives before the transport is decided.
#[derive(Default)]
struct Given {
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    headers: BTreeMap<String, String>,
    bearer_token_env: Option<String>,
    /// The keys given, for "only with `command`/`url`" faults: (name, its fault if misplaced).
    placed: Vec<(&'static str, Fault)>,
}

/// A server's table, each key checked; the checks of the table as a whole (the tool globs,
/// the transport) only when its keys passed, since a key refused would make them misfire.
fn server(field: &Field<'_, '_>, found: &mut Findings) -> Result<Option<McpServerConfig>, Fault> {
    if !is_valid_server_name(field.name) {
        return Err(field.key_fault(format!(
            "{:?} is not a valid server name: lowercase letters, digits and `-`, starting with \
             a letter or digit, at most 32 (no `_`: tools are named mcp__NAME__TOOL)",
            field.name
        )));
    }
    let mut given = Given::default();
    let mut trust = Trust::default();
    let mut start = Start::default();
    let mut startup_timeout = DEFAULT_STARTUP_TIMEOUT;
    let mut tool_timeout = DEFAULT_TOOL_TIMEOUT;
    let mut enabled_tools = vec!["*".to_owned()];
    let mut disabled_tools = Vec::new();
    let mut tool_lists: Vec<Field<'_, '_>> = Vec::new();
    let mut enabled = true;
    let faults_before = found.faults.len();
    for entry in field.entries()? {
        found.check(|_| {
            let name = match SERVER_KEYS.iter().find(|key| **key == entry.name) {
                Some(name) => *name,
                None => return Err(entry.unknown(&SERVER_KEYS)),
            };
            if STDIO_KEYS.contains(&name) || HTTP_KEYS.contains(&name) {
                given.placed.push((name, entry.key_fault(String::new())));
            }
            match name {
                "command" => {
                    let command = entry.string()?;
                    if command.is_empty() {
                        return Err(entry.fault("is empty; it names the program to run".to_owned()));
                    }
                    given.command = Some(command.to_owned());
                }
                "args" => {
                    given.args = entry
                        .elements("an array of strings")?
                        .map(|item| item.string().map(str::to_owned))
                        .collect::<Result<_, _>>()?;
                }
                "env" => given.env = string_table(&entry, "environment variable")?,
                "cwd" => given.cwd = Some(entry.absolute_path()?),
                "url" => given.url = Some(url(&entry)?),
                "headers" => given.headers = string_table(&entry, "header")?,
                "bearer_token_env" => {
                    let variable = entry.string()?;
                    if !is_variable_name(variable) {
                        return Err(entry.fault(format!(
                            "{variable:?} is not an environment variable name (letters, digits \
                         and `_`, not starting with a digit)"
                        )));
                    }
                    given.bearer_token_env = Some(variable.to_owned());
                }
                "trust" => {
                    trust = match entry.string()? {
                        "untrusted" => Trust::Untrusted,
                        "trusted" => Trust::Trusted,
                        other => {
                            return Err(entry.fault(format!(
                                "unknown value {other:?}: expected \"untrusted\" or \"trusted\""
                            )));
                        }
                    }
                }
                "start" => {
                    start = match entry.string()? {
                        "eager" => Start::Eager,
                        "lazy" => Start::Lazy,
                        other => {
                            return Err(entry.fault(format!(
                                "unknown value {other:?}: expected \"eager\" or \"lazy\""
                            )));
                        }
                    }
                }
                "startup_timeout_ms" => {
                    startup_timeout = Duration::from_millis(entry.integer(TIMEOUT_MS)?);
                }
                "tool_timeout_ms" => {
                    tool_timeout = Duration::from_millis(entry.integer(TIMEOUT_MS)?)
                }
                "enabled_tools" | "disabled_tools" => {
                    let globs = entry
                        .elements("an array of globs on the server's tool names")?
                        .map(|item| {
                            let glob = item.string()?;
                            // Written as toold lists the tools (`mcp__S__T`), a glob must name
                            // this server's, or it would leave out nothing.
                            match crate::mcp::names::server_of(glob) {
                                Some(other) if other != field.name && !other.contains('*') => {
                                    Err(item.fault(format!(
                                        "{glob:?} names the tools of the server {other:?}, not \
                                         of this one ({:?}): write the tool's name as this \
                                         server lists it, or as mcp__{}__NAME",
                                        field.name, field.name
                                    )))
                                }
                                _ => Ok(glob.to_owned()),
                            }
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    if name == "enabled_tools" {
                        enabled_tools = globs;
                    } else {
                        disabled_tools = globs;
                    }
                    tool_lists.push(entry);
                }
                "enabled" => enabled = entry.boolean()?,
                _ => unreachable!("every key of SERVER_KEYS is matched above"),
            }
            Ok(())
        });
    }
    if found.faults.len() > faults_before {
        return Ok(None);
    }
    let tools = ToolFilter::new(&enabled_tools, &disabled_tools).map_err(
        |(in_enabled, index, reason)| {
            let list = if in_enabled {
                "enabled_tools"
            } else {
                "disabled_tools"
            };
            let item = tool_lists
                .iter()
                .filter(|entry| entry.name == list)
                .filter_map(|entry| entry.elements("").ok()?.nth(index))
                .next();
            match item {
                Some(item) => item.fault(format!("invalid glob: {reason}")),
                None => field.fault(format!("{list}: invalid glob: {reason}")),
            }
        },
    )?;
    let transport = transport(field, given)?;
    Ok(enabled.then(|| McpServerConfig {
        name: field.name.to_owned(),
        transport,
        trust,
        start,
        startup_timeout,
        tool_timeout,
        tools,
    }))
}

/// Exactly one of `command` and `url`, and no key of the other transport.
fn transport(field: &Field<'_, '_>, given: Given) -> Result<McpTransport, Fault> {
    let (wrong_keys, this, other) = match (&given.command, &given.url) {
        (Some(_), Some(_)) => {
            return Err(field.key_fault(
                "has both `command` and `url`: a server is either started (command) or \
                 reached over HTTP (url)"
                    .to_owned(),
            ));
        }
        (None, None) => {
            return Err(field.key_fault(
                "has neither `command` (a program to start) nor `url` (a streamable HTTP \
                 endpoint)"
                    .to_owned(),
            ));
        }
        (Some(_), None) => (&HTTP_KEYS[..], "command", "url"),
        (None, Some(_)) => (&STDIO_KEYS[..], "url", "command"),
    };
    if let Some((name, mut fault)) = given
        .placed
        .into_iter()
        .find(|(name, _)| wrong_keys.contains(name))
    {
        fault.reason = format!("`{name}` is for a server with `{other}`; this one has `{this}`");
        return Err(fault);
    }
    Ok(match given.command {
        Some(command) => McpTransport::Stdio {
            command,
            args: given.args,
            env: given.env,
            cwd: given.cwd,
        },
        None => McpTransport::Http {
            url: given.url.unwrap_or_default(),
            headers: given.headers,
            bearer_token_env: given.bearer_token_env,
        },
    })
}

/// A table of strings (`env`, `headers`).
fn string_table(field: &Field<'_, '_>, what: &str) -> Result<BTreeMap<String, String>, Fault> {
    let mut table = BTreeMap::new();
    for entry in field.entries()? {
        let value = match entry.value.get_ref() {
            DeValue::String(text) => text.to_string(),
            _ => return Err(entry.wrong_type(&format!("a string (the {what}'s value)"))),
        };
        if entry.name.is_empty() {
            return Err(entry.key_fault(format!("an empty {what} name")));
        }
        table.insert(entry.name.to_owned(), value);
    }
    Ok(table)
}

/// An `http://` or `https://` URL with a host.
fn url(field: &Field<'_, '_>) -> Result<String, Fault> {
    let text = field.string()?;
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    let host = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
            Ok(text.to_owned())
        }
        _ => Err(field.fault(format!(
            "{text:?} is not an http:// or https:// URL with a host, as in \
             \"http://127.0.0.1:3001/mcp\""
        ))),
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
