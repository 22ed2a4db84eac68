//! Reading a config file's TOML tree key by key: each key's type and bounds, rules and hooks
//! turned into what the daemon uses, and every refusal located by its key path.
//!
//! The tree is walked by hand rather than through serde derive so that every error names its
//! full key path (`hooks.pre_tool_use[1].matcher`) and points at the key or value at fault,
//! unknown keys are refused at every level, and each key's checks sit beside it.

mod field;
mod mcp;

use crate::permission::ProjectRules;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use toml::de::{DeTable, DeValue};
use toold_protocol::{HookEvent, SandboxMode};

use self::field::{Bounds, Field, Unit, fields};
use super::{Config, DAY_SECS, GIB, KIB, MIB, show_duration};
use crate::audit::AuditMode;
use crate::hooks::ConfiguredHook;
use crate::index::roots::IndexConfig;
use crate::permission::{ConfigRules, Rule, SandboxedCommands, home_dir, lint};
use crate::sandbox::{AllowedSocket, OnUnsupported, SandboxConfig};

/// The longest socket path the kernel takes: `sun_path` is 108 bytes with its final NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;

const DAY_MS: u64 = DAY_SECS * 1000;

const MESSAGE_BYTES: Bounds = Bounds {
    min: KIB,
    max: GIB,
    unit: Unit::Bytes,
};
const OUTPUT_BYTES: Bounds = Bounds {
    min: 1,
    max: crate::env::defaults::SIZE_LIMIT_CEILING,
    unit: Unit::Bytes,
};
/// 0 is allowed: a call then streams no live output, only its one `truncated` event.
const STREAM_BYTES: Bounds = Bounds {
    min: 0,
    max: GIB,
    unit: Unit::Bytes,
};
const CONNECTIONS: Bounds = Bounds {
    min: 1,
    max: 65_536,
    unit: Unit::Count,
};
const PARALLEL: Bounds = Bounds {
    min: 1,
    max: 1024,
    unit: Unit::Count,
};
const TIMEOUT_MS: Bounds = Bounds {
    min: 1,
    max: DAY_MS,
    unit: Unit::Millis,
};
/// `session_idle_ttl` beyond this is refused; 0 turns expiry off.
const MAX_SESSION_IDLE_TTL: Duration = Duration::from_secs(365 * DAY_SECS);

/// A log file smaller than this would rotate at nearly every batch.
const AUDIT_BYTES: Bounds = Bounds {
    min: 64 * KIB,
    max: 1024 * GIB,
    unit: Unit::Bytes,
};
const AUDIT_KEEP: Bounds = Bounds {
    min: 1,
    max: 1000,
    unit: Unit::Count,
};

/// A refused key or value, before its byte offset becomes a line and column.
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) key: String,
    pub(super) span: Range<usize>,
    pub(super) reason: String,
}

/// The keys of the top level, for "unknown key" errors.
const TOP_LEVEL_KEYS: [&str; 22] = [
    "socket",
    "max_message_bytes",
    "max_connections",
    "max_parallel",
    "max_stream_bytes",
    "timeout_ms",
    "max_command_timeout_ms",
    "max_output_bytes",
    "max_read_bytes",
    "session_idle_ttl",
    "approval_timeout_ms",
    "hook_timeout_ms",
    "frame_timeout_ms",
    "allow_bypass",
    "audit",
    "audit_max_bytes",
    "audit_keep",
    "permissions",
    "hooks",
    "sandbox",
    "index",
    "mcp",
];

/// What the walk finds besides the settings: the faults, which refuse the file, and the
/// warnings, values that are valid but most likely not what was meant.
#[derive(Default)]
pub(super) struct Findings {
    pub(super) faults: Vec<Fault>,
    pub(super) warnings: Vec<Fault>,
}

impl Findings {
    /// Runs the check of one key (or one item of a list); its fault is kept and the walk goes
    /// on to the next, so that one run reports every mistake in the file, not one per edit.
    fn check(&mut self, check: impl FnOnce(&mut Self) -> Result<(), Fault>) {
        if let Err(fault) = check(self) {
            self.faults.push(fault);
        }
    }
}

/// The settings a parsed file gives, every key checked, and the warnings; or every fault, in
/// file order. A key at fault is left at its default and the walk goes on past it.
pub(super) fn read_document(document: &DeTable<'_>) -> Result<(Config, Vec<Fault>), Vec<Fault>> {
    let mut config = Config::default();
    let mut found = Findings::default();
    // Every `[mcp.servers.NAME]`, enabled or not: the servers rules may name.
    let mut mcp_names = Vec::new();
    for field in fields(document, None) {
        found.check(|found| {
            match field.name {
                "socket" => config.socket = Some(socket(&field)?),
                "max_message_bytes" => config.max_message_bytes = field.size(MESSAGE_BYTES)?,
                "max_connections" => config.max_connections = field.size(CONNECTIONS)?,
                "max_parallel" => config.max_parallel = field.size(PARALLEL)?,
                "max_stream_bytes" => config.max_stream_bytes = field.size(STREAM_BYTES)?,
                "timeout_ms" => config.timeout_ms = field.integer(TIMEOUT_MS)?,
                "max_command_timeout_ms" => {
                    config.max_command_timeout_ms = field.integer(TIMEOUT_MS)?
                }
                "max_output_bytes" => config.max_output_bytes = field.size(OUTPUT_BYTES)?,
                "max_read_bytes" => config.max_read_bytes = field.size(OUTPUT_BYTES)?,
                "session_idle_ttl" => config.session_idle_ttl = idle_ttl(&field)?,
                "approval_timeout_ms" => config.approval_timeout_ms = field.integer(TIMEOUT_MS)?,
                "hook_timeout_ms" => config.hook_timeout_ms = field.integer(TIMEOUT_MS)?,
                "frame_timeout_ms" => config.frame_timeout_ms = field.integer(TIMEOUT_MS)?,
                "allow_bypass" => config.allow_bypass = field.boolean()?,
                "audit" => config.audit.mode = audit_mode(&field)?,
                "audit_max_bytes" => {
                    config.audit.max_bytes = field.size(AUDIT_BYTES)? as u64;
                }
                "audit_keep" => config.audit.keep = field.size(AUDIT_KEEP)?,
                "permissions" => config.rules = permissions(&field, found)?,
                "hooks" => config.hooks = hooks(&field, found)?,
                "sandbox" => config.sandbox = sandbox(&field, found)?,
                "index" => config.index = index(&field, found)?,
                "mcp" => config.mcp_servers = mcp::mcp(&field, &mut mcp_names, found)?,
                _ => return Err(field.unknown(&TOP_LEVEL_KEYS)),
            }
            Ok(())
        });
    }
    rules_name_configured_servers(&config.rules, &mcp_names, &mut found.faults);
    if found.faults.is_empty() {
        Ok((config, found.warnings))
    } else {
        // Each table's own faults (a missing `command`) come after its keys': file order is
        // the order of the key or value each points at.
        found.faults.sort_by_key(|fault| fault.span.start);
        Err(found.faults)
    }
}

/// A rule about an MCP server's tools (`mcp__S`, `mcp__S__T`) names a server of this file,
/// enabled or not: no other server registers such tools, so it would never match.
fn rules_name_configured_servers(rules: &ConfigRules, servers: &[String], faults: &mut Vec<Fault>) {
    let home = home_dir();
    let servers: Vec<&str> = servers.iter().map(String::as_str).collect();
    let tables = std::iter::once(("permissions", &rules.rules, &rules.lines)).chain(
        rules
            .projects
            .iter()
            .map(|table| ("permissions.project", &table.rules, &table.lines)),
    );
    for (table, list, lines) in tables {
        for (index, (key, texts)) in [
            ("allow", &list.allow),
            ("ask", &list.ask),
            ("deny", &list.deny),
        ]
        .into_iter()
        .enumerate()
        {
            for (at, (text, offset)) in texts.iter().zip(&lines[index]).enumerate() {
                if let Some(reason) = lint::names_an_unknown_server(text, &servers, &home) {
                    let start = *offset as usize;
                    faults.push(Fault {
                        key: format!("{table}.{key}[{at}]"),
                        span: start..start + 1,
                        reason: format!("{text:?} can never match: {reason}"),
                    });
                }
            }
        }
    }
}

fn socket(field: &Field<'_, '_>) -> Result<PathBuf, Fault> {
    let path = PathBuf::from(field.string()?);
    if !path.is_absolute() {
        return Err(field.fault(format!("must be an absolute path, got {path:?}")));
    }
    if path.file_name().is_none() {
        return Err(field.fault(format!("must name a file, got {path:?}")));
    }
    if path.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
        return Err(field.fault(format!(
            "is longer than {MAX_SOCKET_PATH_BYTES} bytes, the most a Unix socket path may have"
        )));
    }
    Ok(path)
}

/// `session_idle_ttl`: whole seconds, or a string such as `"90s"`, `"30m"`, `"24h"`, `"7d"`;
/// zero turns expiry off.
fn idle_ttl(field: &Field<'_, '_>) -> Result<Option<Duration>, Fault> {
    let unbounded = Bounds {
        min: 0,
        max: u64::MAX,
        unit: Unit::Count,
    };
    let ttl = match field.value.get_ref() {
        DeValue::Integer(_) => Duration::from_secs(field.integer(unbounded)?),
        DeValue::String(text) => parse_duration(text).map_err(|reason| field.fault(reason))?,
        _ => return Err(field.wrong_type("a duration (\"90s\", \"30m\", \"24h\", \"7d\")")),
    };
    if ttl > MAX_SESSION_IDLE_TTL {
        return Err(field.fault(format!(
            "must be at most {}, got {}; 0 keeps sessions until they are closed",
            show_duration(Some(MAX_SESSION_IDLE_TTL)),
            show_duration(Some(ttl))
        )));
    }
    Ok(Some(ttl).filter(|ttl| !ttl.is_zero()))
}

/// The memory all warm indexes may take together, in MiB.
const INDEX_MEMORY_MIB: Bounds = Bounds {
    min: 1,
    max: 1024 * 1024,
    unit: Unit::Count,
};
/// The most directories one root's watch may hold.
const INDEX_WATCHES: Bounds = Bounds {
    min: 1,
    max: 1 << 24,
    unit: Unit::Count,
};

/// `[index]`: the warm index of the roots searched (docs/protocol.md section 11.13).
fn index(field: &Field<'_, '_>, found: &mut Findings) -> Result<IndexConfig, Fault> {
    let mut index = IndexConfig::default();
    for entry in field.entries()? {
        found.check(|_| {
            match entry.name {
                "enabled" => index.enabled = entry.boolean()?,
                "max_memory_mib" => {
                    index.max_memory_bytes = entry.size(INDEX_MEMORY_MIB)? * MIB as usize;
                }
                "idle_evict" => index.idle_evict = positive_duration(&entry)?,
                "retry_after" => index.retry_after = positive_duration(&entry)?,
                "max_watches" => index.max_watches = entry.size(INDEX_WATCHES)?,
                _ => {
                    return Err(entry.unknown(&[
                        "enabled",
                        "max_memory_mib",
                        "idle_evict",
                        "retry_after",
                        "max_watches",
                    ]));
                }
            }
            Ok(())
        });
    }
    Ok(index)
}

/// A duration of at least a second: whole seconds, or a string such as `"90s"`, `"30m"`.
fn positive_duration(field: &Field<'_, '_>) -> Result<Duration, Fault> {
    let unbounded = Bounds {
        min: 1,
        max: 365 * DAY_SECS,
        unit: Unit::Count,
    };
    let duration = match field.value.get_ref() {
        DeValue::Integer(_) => Duration::from_secs(field.integer(unbounded)?),
        DeValue::String(text) => parse_duration(text).map_err(|reason| field.fault(reason))?,
        _ => return Err(field.wrong_type("a duration (\"90s\", \"30m\", \"24h\", \"7d\")")),
    };
    if duration.is_zero() {
        return Err(field.fault("must be at least 1s".to_owned()));
    }
    Ok(duration)
}

/// A whole number followed by one unit: `s`, `m`, `h` or `d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let malformed = || {
        format!(
            "invalid duration {text:?}: expected a whole number and a unit (s, m, h or d), \
             as in \"90s\", \"30m\", \"24h\", \"7d\""
        )
    };
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(malformed)?;
    let (number, unit) = text.split_at(digits_end);
    let seconds_per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => DAY_SECS,
        _ => return Err(malformed()),
    };
    let number: u64 = number.parse().map_err(|_| malformed())?;
    let seconds = number
        .checked_mul(seconds_per_unit)
        .ok_or_else(|| format!("duration {text:?} is too long"))?;
    Ok(Duration::from_secs(seconds))
}

/// `[permissions]`; a rule that can never match (`permission::lint`), or names no builtin
/// tool, is a warning: the config is read before any client registers its tools.
/// Each rule's line is left as its byte offset in `lines`, which the caller, holding the text,
/// turns into a line number.
fn permissions(field: &Field<'_, '_>, found: &mut Findings) -> Result<ConfigRules, Fault> {
    let home = home_dir();
    let builtins: Vec<_> = crate::tools::builtins()
        .iter()
        .map(|tool| tool.definition())
        .collect();
    let against = RuleChecks {
        builtins: &builtins,
        home: &home,
    };
    let mut rules = ConfigRules::default();
    for list in field.entries()? {
        found.check(|found| {
            let (target, lines) = match list.name {
                "allow" => (&mut rules.rules.allow, &mut rules.lines[0]),
                "ask" => (&mut rules.rules.ask, &mut rules.lines[1]),
                "deny" => (&mut rules.rules.deny, &mut rules.lines[2]),
                "sandboxed_commands" => {
                    rules.sandboxed_commands = match list.string()? {
                        "allow" => SandboxedCommands::Allow,
                        "ask" => SandboxedCommands::Ask,
                        other => {
                            return Err(list.fault(format!(
                                "unknown value {other:?}: expected \"allow\" or \"ask\""
                            )));
                        }
                    };
                    return Ok(());
                }
                "project" => {
                    for table in list.elements("an array of tables ([[permissions.project]])")? {
                        found.check(|found| {
                            let project = project_rules(&table, &against, found)?;
                            rules.projects.push(project);
                            Ok(())
                        });
                    }
                    return Ok(());
                }
                _ => {
                    return Err(list.unknown(&[
                        "allow",
                        "ask",
                        "deny",
                        "sandboxed_commands",
                        "project",
                    ]));
                }
            };
            rule_list(&list, target, lines, &against, found)?;
            for (index, (text, offset)) in target.iter().zip(lines.iter()).enumerate() {
                if let Some(warning) = lint::relative_to_its_file(text, &home) {
                    let start = *offset as usize;
                    found.warnings.push(Fault {
                        key: format!("permissions.{}[{index}]", list.name),
                        span: start..start + 1,
                        reason: warning,
                    });
                }
            }
            Ok(())
        });
    }
    Ok(rules)
}

/// One `[[permissions.project]]`: `path` (absolute or `~/`) and its `allow`, `ask`, `deny`.
fn project_rules(
    table: &Field<'_, '_>,
    against: &RuleChecks<'_>,
    found: &mut Findings,
) -> Result<ProjectRules, Fault> {
    let mut project = ProjectRules::default();
    let mut path = None;
    // A `path` given but refused is reported as itself, not again as missing.
    let mut path_given = false;
    for list in table.entries()? {
        found.check(|found| {
            let (target, lines) = match list.name {
                "path" => {
                    path_given = true;
                    let text = list.string()?;
                    let absolute = match text.strip_prefix("~/") {
                        Some(in_home) => against.home.join(in_home),
                        None => PathBuf::from(text),
                    };
                    if !absolute.is_absolute() {
                        return Err(list.fault(format!(
                            "must be an absolute path or start with ~/, got {text:?}"
                        )));
                    }
                    path = Some(crate::paths::normalize_lexically(&absolute));
                    return Ok(());
                }
                "allow" => (&mut project.rules.allow, &mut project.lines[0]),
                "ask" => (&mut project.rules.ask, &mut project.lines[1]),
                "deny" => (&mut project.rules.deny, &mut project.lines[2]),
                _ => return Err(list.unknown(&["path", "allow", "ask", "deny"])),
            };
            rule_list(&list, target, lines, against, found)
        });
    }
    match path {
        Some(path) => project.path = path,
        None if path_given => {}
        None => return Err(table.fault("a [[permissions.project]] needs its path".to_owned())),
    }
    Ok(project)
}

/// What every rule of the file is checked against: the builtin tools it may name, and the home
/// directory its `~/` stands for.
struct RuleChecks<'a> {
    builtins: &'a [toold_protocol::ToolDefinition],
    home: &'a Path,
}

/// A list of rule strings, each checked, with its byte offset kept in `lines`. A rule refused
/// is left out and the next one checked.
fn rule_list(
    list: &Field<'_, '_>,
    target: &mut Vec<String>,
    lines: &mut Vec<u32>,
    against: &RuleChecks<'_>,
    found: &mut Findings,
) -> Result<(), Fault> {
    let RuleChecks { builtins, home } = *against;
    for item in list.elements("an array of rule strings")? {
        found.check(|found| {
            let text = item.string()?;
            // Syntax errors do not depend on the cwd or the file's directory: rules are
            // compiled again per session.
            Rule::parse_all(text, Path::new("/"), home, Some(Path::new("/")))
                .map_err(|error| item.fault(format!("invalid rule: {error}")))?;
            // A rule that can never match is refused, as in a session: a deny rule that reads
            // as protecting something and protects nothing is worse than none.
            if let Some(reason) = lint::never_matches(text, builtins, None, home) {
                return Err(item.fault(format!("{text:?} can never match: {reason}")));
            }
            if let Some(reason) = lint::names_an_unknown_tool(text, builtins, home) {
                found.warnings.push(item.fault(reason));
            }
            target.push(text.to_owned());
            lines.push(u32::try_from(item.value.span().start).unwrap_or(u32::MAX));
            Ok(())
        });
    }
    Ok(())
}

/// `audit`: how much of each call's arguments the audit log keeps, or no log.
fn audit_mode(field: &Field<'_, '_>) -> Result<AuditMode, Fault> {
    match field.string()? {
        "full" => Ok(AuditMode::Full),
        "digest" => Ok(AuditMode::Digest),
        "off" => Ok(AuditMode::Off),
        other => Err(field.fault(format!(
            "unknown audit mode {other:?}: expected \"digest\", \"full\" or \"off\""
        ))),
    }
}

/// `[sandbox]`: the mode and network of every session's commands unless a session tightens
/// them, the extra writable directories, and what to do where the kernel cannot enforce them.
fn sandbox(field: &Field<'_, '_>, found: &mut Findings) -> Result<SandboxConfig, Fault> {
    let mut sandbox = SandboxConfig::default();
    for entry in field.entries()? {
        found.check(|found| {
        match entry.name {
            "mode" => {
                sandbox.settings.mode = match entry.string()? {
                    "off" => SandboxMode::Off,
                    "read_only" => SandboxMode::ReadOnly,
                    "workspace_write" => SandboxMode::WorkspaceWrite,
                    other => {
                        return Err(entry.fault(format!(
                            "unknown mode {other:?}: expected \"workspace_write\", \"read_only\" or \"off\""
                        )));
                    }
                }
            }
            "network" => sandbox.settings.network = entry.boolean()?,
            "writable" => {
                for item in entry.elements("an array of directory paths")? {
                    found.check(|found| {
                    let path = item.absolute_path()?;
                    if !path.is_dir() {
                        found.warnings.push(item.fault(format!(
                            "{} is not an existing directory: commands cannot write there until it is",
                            path.display()
                        )));
                    }
                    // Resolved here, once: commands get no write rule through a symlink.
                    sandbox
                        .writable
                        .push(std::fs::canonicalize(&path).unwrap_or(path));
                    Ok(())
                    });
                }
            }
            "unix_sockets" => {
                for item in entry.elements("an array of socket paths or $VARIABLES")? {
                    found.check(|_| {
                    let text = item.string()?;
                    sandbox.unix_sockets.push(match text.strip_prefix('$') {
                        Some(name) if is_variable_name(name) => {
                            AllowedSocket::Variable(name.to_owned())
                        }
                        Some(_) => {
                            return Err(item.fault(format!(
                                "{text:?} is not a variable name: write $NAME, as $SSH_AUTH_SOCK"
                            )));
                        }
                        None => AllowedSocket::Path(item.absolute_path()?),
                    });
                    Ok(())
                    });
                }
            }
            "hidden" => {
                // The list replaces the default one: `hidden = []` hides nothing.
                sandbox.hidden.clear();
                for item in entry.elements("an array of paths")? {
                    found.check(|_| {
                        sandbox.hidden.push(item.absolute_path()?);
                        Ok(())
                    });
                }
            }
            "on_unsupported" => {
                sandbox.on_unsupported = match entry.string()? {
                    "warn" => OnUnsupported::Warn,
                    "refuse" => OnUnsupported::Refuse,
                    other => {
                        return Err(entry.fault(format!(
                            "unknown value {other:?}: expected \"warn\" or \"refuse\""
                        )));
                    }
                }
            }
            "allow_unsandboxed" => sandbox.allow_unsandboxed = entry.boolean()?,
            _ => {
                return Err(entry.unknown(&[
                    "mode",
                    "network",
                    "writable",
                    "unix_sockets",
                    "hidden",
                    "on_unsupported",
                    "allow_unsandboxed",
                ]));
            }
        }
        Ok(())
        });
    }
    Ok(sandbox)
}

fn hooks(field: &Field<'_, '_>, found: &mut Findings) -> Result<Vec<ConfiguredHook>, Fault> {
    let mut hooks = Vec::new();
    for list in field.entries()? {
        found.check(|found| {
            let event = match list.name {
                "pre_tool_use" => HookEvent::PreToolUse,
                "post_tool_use" => HookEvent::PostToolUse,
                _ => return Err(list.unknown(&["pre_tool_use", "post_tool_use"])),
            };
            for item in list.elements("an array of hook tables ([[hooks.pre_tool_use]])")? {
                found.check(|found| {
                    hooks.push(hook(event, &item, found)?);
                    Ok(())
                });
            }
            Ok(())
        });
    }
    Ok(hooks)
}

fn hook(
    event: HookEvent,
    field: &Field<'_, '_>,
    found: &mut Findings,
) -> Result<ConfiguredHook, Fault> {
    let mut hook = ConfiguredHook {
        event,
        matcher: None,
        command: Vec::new(),
        timeout: None,
    };
    // A `command` given but refused is reported as itself, not again as missing.
    let mut command_given = false;
    for entry in field.entries()? {
        found.check(|_| {
            match entry.name {
                "matcher" => hook.matcher = Some(matcher(&entry)?),
                "command" => {
                    command_given = true;
                    hook.command = command(&entry)?;
                }
                "timeout_ms" => {
                    hook.timeout = Some(Duration::from_millis(entry.integer(TIMEOUT_MS)?));
                }
                _ => return Err(entry.unknown(&["matcher", "command", "timeout_ms"])),
            }
            Ok(())
        });
    }
    if !command_given {
        return Err(field.fault(
            "missing `command`, the program to run and its arguments, as in \
             command = [\"/path/to/program\", \"--flag\"]"
                .to_owned(),
        ));
    }
    Ok(hook)
}

/// The matcher must match the whole tool name: `read` does not select `read_file`, and
/// `run_command|write_file` selects exactly those two.
fn matcher(field: &Field<'_, '_>) -> Result<Regex, Fault> {
    let pattern = field.string()?;
    if pattern.is_empty() {
        return Err(field.fault(
            "is empty, which matches no tool; leave `matcher` out to match every tool".to_owned(),
        ));
    }
    // `mcp__fs__*` written as a rule's tool pattern reads, as a regex, "names ending in
    // underscores": a hook that would never run. A `*` after a name's character is refused,
    // with the regex meant.
    if let Some(at) = glob_star(pattern) {
        let meant = format!("{}.*{}", &pattern[..at], &pattern[at + 1..]);
        return Err(field.fault(format!(
            "{pattern:?} is a regular expression matched against the whole tool name, where \
             `*` repeats the character before it (so it matches no tool of that name's \
             prefix): write {meant:?} to match every tool whose name starts so"
        )));
    }
    Regex::new(&format!("^(?:{pattern})$")).map_err(|error| {
        let hint = if pattern == "*" {
            "; leave `matcher` out to match every tool"
        } else {
            ""
        };
        field.fault(format!("invalid regex: {}{hint}", regex_reason(&error)))
    })
}

/// Where `pattern` has a `*` right after a character of a tool name (a letter, digit, `_`
/// or `-`, unescaped): a glob's star in a regex.
fn glob_star(pattern: &str) -> Option<usize> {
    let bytes = pattern.as_bytes();
    (1..bytes.len()).find(|&at| {
        bytes[at] == b'*'
            && (bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'_' | b'-'))
            && (at < 2 || bytes[at - 2] != b'\\')
    })
}

/// regex's own message spans several lines (the pattern, a caret, the error); its last line
/// says what is wrong.
fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    match text.lines().rev().find(|line| !line.trim().is_empty()) {
        Some(last) => last.trim().trim_start_matches("error: ").to_owned(),
        None => text,
    }
}

fn command(field: &Field<'_, '_>) -> Result<Vec<String>, Fault> {
    let argv = field
        .elements("an array of strings (the program and its arguments, run without a shell)")?
        .map(|item| item.string().map(str::to_owned))
        .collect::<Result<Vec<_>, _>>()?;
    match argv.first() {
        None => Err(field.fault("is empty; it needs at least the program to run".to_owned())),
        Some(program) if program.is_empty() => {
            Err(field.fault("starts with an empty program name".to_owned()))
        }
        Some(_) => Ok(argv),
    }
}

/// A shell variable's name: a letter or `_`, then letters, digits and `_`.
fn is_variable_name(name: &str) -> bool {
    let mut characters = name.chars();
    characters
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && characters.all(|rest| rest.is_ascii_alphanumeric() || rest == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_each_unit() {
        for (text, seconds) in [
            ("0s", 0),
            ("90s", 90),
            ("30m", 1800),
            ("24h", 86_400),
            ("7d", 604_800),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(seconds)),
                "{text}"
            );
        }
        for text in ["", "90", "s", "1.5h", "-1s", "1 h", "1w", "1h30m", "1H"] {
            assert!(parse_duration(text).is_err(), "{text:?} was accepted");
        }
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("999999999999999999d").is_err());
    }
}
