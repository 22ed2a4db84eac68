//! The daemon's configuration (docs/protocol.md section 10): one TOML file, every key with a
//! default, and a bad file refused at start naming the key at fault and why. This file owns
//! the settings, where the file is found and read, and the errors; `read` walks the TOML.

pub mod import;
mod read;
pub mod write;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use toml::de::DeTable;
use toold_protocol::HookEvent;
use toold_protocol::framing::DEFAULT_MAX_MESSAGE_BYTES;

use crate::audit::AuditConfig;
use crate::env::{Env, defaults};
use crate::hooks::ConfiguredHook;
use crate::mcp::McpServerConfig;
use crate::permission::ConfigRules;
use crate::pipeline::{BatchSettings, Limits};
use crate::sandbox::SandboxConfig;

/// How many connections the daemon serves at once unless the config says otherwise.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long a session with nobody attached is kept unless the config says otherwise.
pub(crate) const DEFAULT_SESSION_IDLE_TTL: Duration = Duration::from_secs(7 * DAY_SECS);

/// A config file larger than this is refused unread: no real one comes near it, and a mistaken
/// path (a device, a log file) must not fill memory.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const DAY_SECS: u64 = 24 * 60 * 60;

/// The daemon's settings, each at its default unless the file sets it. Built by
/// [`Config::load`] and its siblings, which have checked every value.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file these settings were read from; `None` when none was (all defaults).
    pub source: Option<PathBuf>,
    /// The socket to listen on (absolute); `--socket` and `TOOLD_SOCKET` come first.
    pub socket: Option<PathBuf>,
    pub max_message_bytes: usize,
    pub max_connections: usize,
    pub max_parallel: usize,
    pub max_stream_bytes: usize,
    pub timeout_ms: u64,
    pub max_command_timeout_ms: u64,
    pub max_output_bytes: usize,
    pub max_read_bytes: usize,
    /// How long a session with nobody attached is kept; `None`: until `session/close`.
    pub session_idle_ttl: Option<Duration>,
    pub approval_timeout_ms: u64,
    pub hook_timeout_ms: u64,
    /// How long one message may take to arrive once its first byte has (slow-drip clients).
    pub frame_timeout_ms: u64,
    pub allow_bypass: bool,
    /// `audit`, `audit_max_bytes`, `audit_keep`.
    pub audit: AuditConfig,
    /// `[index]`.
    pub index: crate::index::roots::IndexConfig,
    /// `[permissions]`, each rule's line known; every rule has been parsed once.
    pub rules: ConfigRules,
    /// `[[hooks.pre_tool_use]]` and `[[hooks.post_tool_use]]`, in file order.
    pub hooks: Vec<ConfiguredHook>,
    /// `[sandbox]`.
    pub sandbox: SandboxConfig,
    /// `[mcp.servers.NAME]`, in file order; those with `enabled = false` left out.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Valid values that are most likely not what was meant (a rule that can never match),
    /// each with its place in the file: `check-config` prints them, the daemon logs them.
    pub warnings: Vec<ConfigError>,
}

impl Default for Config {
    fn default() -> Self {
        let limits = Limits::default();
        Self {
            source: None,
            socket: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_parallel: limits.max_parallel,
            max_stream_bytes: limits.max_stream_bytes,
            timeout_ms: defaults::TIMEOUT_MS,
            max_command_timeout_ms: defaults::MAX_COMMAND_TIMEOUT_MS,
            max_output_bytes: defaults::MAX_OUTPUT_BYTES,
            max_read_bytes: defaults::MAX_READ_BYTES,
            session_idle_ttl: Some(DEFAULT_SESSION_IDLE_TTL),
            approval_timeout_ms: millis(limits.approval_timeout),
            hook_timeout_ms: millis(limits.hook_timeout),
            frame_timeout_ms: millis(toold_protocol::peer::PeerOptions::DEFAULT_FRAME_TIMEOUT),
            allow_bypass: false,
            audit: AuditConfig::default(),
            index: crate::index::roots::IndexConfig::default(),
            rules: ConfigRules::default(),
            hooks: Vec::new(),
            sandbox: SandboxConfig::default(),
            mcp_servers: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl Config {
    /// The daemon's config: `explicit` (`--config`), which must exist; else the default file
    /// ([`default_path`]), where a missing file means every default.
    pub fn load(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        match explicit {
            Some(path) => Self::from_file(path),
            None => match default_path() {
                Some(path) => Self::from_file_or_default(&path),
                None => Ok(Self::default()),
            },
        }
    }

    /// Reads and checks `path`, which must exist.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = read_file(path).map_err(|error| ConfigError::unreadable(path, &error))?;
        Self::from_toml(&text, path)
    }

    /// Reads and checks `path`; a file that does not exist means every default.
    pub fn from_file_or_default(path: &Path) -> Result<Self, ConfigError> {
        match read_file(path) {
            Ok(text) => Self::from_toml(&text, path),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(ConfigError::unreadable(path, &error)),
        }
    }

    /// The `socket` key of a config file that may not check as a whole: what a client reads to
    /// find a daemon whose file is being edited (`toold reload` must reach it to be told what
    /// is wrong). `None` when the file is unreadable, is not TOML, or has no usable key.
    pub fn socket_leniently(explicit: Option<&Path>) -> Option<PathBuf> {
        let path = explicit.map(Path::to_path_buf).or_else(default_path)?;
        let text = read_file(&path).ok()?;
        let document = DeTable::parse(&text).ok()?;
        let value = document.get_ref().get("socket")?;
        let socket = PathBuf::from(value.get_ref().as_str()?);
        socket.is_absolute().then_some(socket)
    }

    /// Checks the text of a config file; `path` is what errors name.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let document = DeTable::parse(text).map_err(|error| ConfigError {
            path: path.to_owned(),
            key: None,
            reason: format!("invalid TOML: {}", error.message()),
            line_column: error.span().map(|span| line_column(text, span.start)),
            more: Vec::new(),
        })?;
        let at = |fault: read::Fault| ConfigError {
            path: path.to_owned(),
            key: Some(fault.key),
            reason: fault.reason,
            line_column: Some(line_column(text, fault.span.start)),
            more: Vec::new(),
        };
        let (mut config, warnings) = read::read_document(document.get_ref()).map_err(|faults| {
            let mut errors = faults.into_iter().map(at);
            let first = errors.next();
            let mut error = first.expect("a refused file has at least one fault");
            error.more = errors.collect();
            error
        })?;
        config.warnings = warnings.into_iter().map(at).collect();
        config.source = Some(path.to_owned());
        // The reader kept each rule's byte offset: a rule is named by its line.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        config.rules.file = Some(Arc::from(absolute));
        let tables = std::iter::once(&mut config.rules.lines).chain(
            config
                .rules
                .projects
                .iter_mut()
                .map(|table| &mut table.lines),
        );
        for offsets in tables.flatten() {
            for offset in offsets {
                let line = line_column(text, *offset as usize).0;
                *offset = u32::try_from(line).unwrap_or(u32::MAX);
            }
        }
        Ok(config)
    }

    /// The batch pipeline's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_parallel: self.max_parallel,
            max_stream_bytes: self.max_stream_bytes,
            approval_timeout: Duration::from_millis(self.approval_timeout_ms),
            hook_timeout: Duration::from_millis(self.hook_timeout_ms),
        }
    }

    /// What batches run under: the config's hooks and limits.
    pub(crate) fn batch_settings(&self) -> BatchSettings {
        BatchSettings {
            hooks: self.hooks.clone(),
            limits: self.limits(),
        }
    }

    /// A new session's Env at `cwd` (absolute), with the config's limits.
    pub fn env_for(&self, cwd: impl Into<PathBuf>) -> Env {
        Env {
            timeout_ms: self.timeout_ms,
            max_command_timeout_ms: self.max_command_timeout_ms,
            max_output_bytes: self.max_output_bytes,
            max_read_bytes: self.max_read_bytes,
            sandbox: self.sandbox.for_commands(),
            ..Env::new(cwd)
        }
    }

    /// Every scalar key with its value as TOML would write it, in the order of section 10.
    fn settings(&self) -> [(&'static str, String); 17] {
        let socket = match &self.socket {
            Some(path) => format!("{:?}", path.display().to_string()),
            None => "(none)".to_owned(),
        };
        [
            ("socket", socket),
            ("max_message_bytes", self.max_message_bytes.to_string()),
            ("max_connections", self.max_connections.to_string()),
            ("max_parallel", self.max_parallel.to_string()),
            ("max_stream_bytes", self.max_stream_bytes.to_string()),
            ("timeout_ms", self.timeout_ms.to_string()),
            (
                "max_command_timeout_ms",
                self.max_command_timeout_ms.to_string(),
            ),
            ("max_output_bytes", self.max_output_bytes.to_string()),
            ("max_read_bytes", self.max_read_bytes.to_string()),
            (
                "session_idle_ttl",
                format!("{:?}", show_duration(self.session_idle_ttl)),
            ),
            ("approval_timeout_ms", self.approval_timeout_ms.to_string()),
            ("hook_timeout_ms", self.hook_timeout_ms.to_string()),
            ("frame_timeout_ms", self.frame_timeout_ms.to_string()),
            ("allow_bypass", self.allow_bypass.to_string()),
            ("audit", format!("{:?}", self.audit.mode.as_str())),
            ("audit_max_bytes", self.audit.max_bytes.to_string()),
            ("audit_keep", self.audit.keep.to_string()),
        ]
    }

    /// A few lines for a person: the settings that differ from their defaults, and how many
    /// rules and hooks there are.
    pub fn summary(&self) -> String {
        let mut lines = Vec::new();
        let defaults = Self::default().settings();
        let changed: Vec<String> = self
            .settings()
            .into_iter()
            .zip(defaults)
            .filter(|((_, value), (_, default))| value != default)
            .map(|((key, value), (_, default))| format!("  {key} = {value} (default {default})"))
            .collect();
        if changed.is_empty() {
            lines.push("every setting has its default".to_owned());
        } else {
            lines.push("settings that differ from their defaults:".to_owned());
            lines.extend(changed);
        }
        let rules = &self.rules.rules;
        lines.push(format!(
            "permission rules: {} allow, {} ask, {} deny; commands the sandbox confines {}",
            rules.allow.len(),
            rules.ask.len(),
            rules.deny.len(),
            match self.rules.sandboxed_commands {
                crate::permission::SandboxedCommands::Allow => "run unasked",
                crate::permission::SandboxedCommands::Ask => "ask",
            }
        ));
        let read_as = std::iter::once(rules)
            .chain(self.rules.projects.iter().map(|table| &table.rules))
            .flat_map(|rules| rules.allow.iter().chain(&rules.ask).chain(&rules.deny))
            .filter_map(|text| {
                crate::permission::shown_read_as(text).map(|read| format!("  {text} → {read}"))
            });
        lines.extend(read_as);
        for table in &self.rules.projects {
            let rules = &table.rules;
            lines.push(format!(
                "rules of the project {}: {} allow, {} ask, {} deny (`toold rules --project` lists them)",
                table.path.display(),
                rules.allow.len(),
                rules.ask.len(),
                rules.deny.len()
            ));
        }
        let count = |event| self.hooks.iter().filter(|hook| hook.event == event).count();
        lines.push(format!(
            "hooks: {} pre_tool_use, {} post_tool_use",
            count(HookEvent::PreToolUse),
            count(HookEvent::PostToolUse)
        ));
        lines.push(self.sandbox.summary());
        if self.mcp_servers.is_empty() {
            lines.push("MCP servers: none".to_owned());
        } else {
            lines.push(format!("MCP servers: {}", self.mcp_servers.len()));
            lines.extend(
                self.mcp_servers
                    .iter()
                    .map(|server| format!("  {}", server.summary())),
            );
        }
        lines.join("\n")
    }
}

/// `toold check-config [PATH]`: loads and checks the config as the daemon would, and says
/// which file it read and what it found there; refused, every fault in file order.
pub fn check_config(path: Option<&Path>) -> Result<String, ConfigError> {
    let config = Config::load(path)?;
    let mut report = report_of(&config);
    for warning in &config.warnings {
        report.push_str(&format!("\nwarning: {warning}"));
    }
    Ok(report)
}

/// `toold check-config --json`: what [`check_config`] finds, as one object for a program:
/// `file` (the file read or looked for; `null` when there is none to look for), `valid`,
/// `errors` and `warnings` (each `{"line", "column", "key", "reason"}`, in file order; `line`,
/// `column` and `key` `null` where the whole file is at fault), and `summary` (the text
/// `check-config` prints for a valid file; `null` for a refused one).
pub fn check_config_json(path: Option<&Path>) -> serde_json::Value {
    let fault = |error: &ConfigError| {
        serde_json::json!({
            "line": error.line_column.map(|(line, _)| line),
            "column": error.line_column.map(|(_, column)| column),
            "key": error.key,
            "reason": error.reason,
        })
    };
    match Config::load(path) {
        Ok(config) => serde_json::json!({
            "file": config
                .source
                .clone()
                .or_else(default_path)
                .map(|file| file.display().to_string()),
            "valid": true,
            "errors": [],
            "warnings": config.warnings.iter().map(fault).collect::<Vec<_>>(),
            "summary": report_of(&config),
        }),
        Err(error) => serde_json::json!({
            "file": error.path.display().to_string(),
            "valid": false,
            "errors": error.all().map(fault).collect::<Vec<_>>(),
            "warnings": [],
            "summary": null,
        }),
    }
}

/// Which file was read (or that none was) and the summary of what it sets.
fn report_of(config: &Config) -> String {
    let heading = match (&config.source, default_path()) {
        (Some(source), _) => format!("{}: valid", source.display()),
        (None, Some(default)) => format!(
            "{}: no such file, so every key has its default",
            default.display()
        ),
        (None, None) => {
            "no config file (neither XDG_CONFIG_HOME nor HOME is set), so every key has its \
             default"
                .to_owned()
        }
    };
    format!("{heading}\n{}", config.summary())
}

/// `$XDG_CONFIG_HOME/toold/config.toml`, else `~/.config/toold/config.toml`; `None` when
/// neither variable gives a directory.
pub fn default_path() -> Option<PathBuf> {
    default_path_in(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`default_path`] from the two variables' values. A relative or empty `XDG_CONFIG_HOME` is
/// ignored, as the XDG base directory specification says.
pub(crate) fn default_path_in(
    xdg_config_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Option<PathBuf> {
    let absolute = |value: &OsStr| Some(PathBuf::from(value)).filter(|path| path.is_absolute());
    let config_dir = xdg_config_home
        .and_then(absolute)
        .or_else(|| home.and_then(absolute).map(|home| home.join(".config")))?;
    Some(config_dir.join("toold").join("config.toml"))
}

/// Why a config file was refused, shown on one line as `PATH:LINE:COLUMN: KEY: REASON` (the
/// line, column and key when they are known): the first fault in file order, then one line for
/// each of the others in `more`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.lines())]
pub struct ConfigError {
    pub path: PathBuf,
    /// The key at fault, as `hooks.pre_tool_use[1].matcher`; `None` when the file as a whole
    /// is (it cannot be read, or is not TOML).
    pub key: Option<String>,
    pub reason: String,
    /// 1-based line and column of the key or value at fault.
    pub line_column: Option<(usize, usize)>,
    /// The file's other faults, in file order after this one (each with an empty `more`): the
    /// whole file is checked, so that one edit can fix every mistake.
    pub more: Vec<ConfigError>,
}

impl ConfigError {
    fn unreadable(path: &Path, error: &io::Error) -> Self {
        let reason = match error.kind() {
            io::ErrorKind::NotFound => "no such file".to_owned(),
            io::ErrorKind::FileTooLarge => {
                let limit = MAX_FILE_BYTES / MIB;
                format!("larger than {limit} MiB, too large for a config file")
            }
            io::ErrorKind::InvalidData => "not UTF-8 text".to_owned(),
            _ => format!("cannot read it: {error}"),
        };
        Self {
            path: path.to_owned(),
            key: None,
            reason,
            line_column: None,
            more: Vec::new(),
        }
    }

    /// This fault and the file's others, in file order.
    pub fn all(&self) -> impl Iterator<Item = &ConfigError> {
        std::iter::once(self).chain(&self.more)
    }

    /// One line per fault.
    fn lines(&self) -> String {
        let lines: Vec<String> = self.all().map(Self::one_line).collect();
        lines.join("\n")
    }

    /// This fault alone, as `PATH:LINE:COLUMN: KEY: REASON`.
    pub fn one_line(&self) -> String {
        let mut line = self.path.display().to_string();
        if let Some((row, column)) = self.line_column {
            line.push_str(&format!(":{row}:{column}"));
        }
        if let Some(key) = &self.key {
            line.push_str(": ");
            line.push_str(key);
        }
        line.push_str(": ");
        line.push_str(&self.reason);
        line
    }
}

/// The file's text, refusing anything over [`MAX_FILE_BYTES`] without reading it all.
fn read_file(path: &Path) -> io::Result<String> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(io::ErrorKind::FileTooLarge.into());
    }
    String::from_utf8(bytes).map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let row = before.matches('\n').count() + 1;
    (row, before[line_start..].chars().count() + 1)
}

/// A duration in the largest unit that shows it exactly; `None` (no expiry) is `"0s"`.
fn show_duration(duration: Option<Duration>) -> String {
    let seconds = duration.map_or(0, |duration| duration.as_secs());
    let (amount, unit) = [(DAY_SECS, "d"), (60 * 60, "h"), (60, "m")]
        .into_iter()
        .find(|(size, _)| seconds != 0 && seconds.is_multiple_of(*size))
        .map_or((seconds, "s"), |(size, unit)| (seconds / size, unit));
    format!("{amount}{unit}")
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_show_in_their_largest_exact_unit() {
        let show = |seconds| show_duration(Some(Duration::from_secs(seconds)));
        assert_eq!(show(604_800), "7d");
        assert_eq!(show(90_000), "25h");
        assert_eq!(show(90), "90s");
        assert_eq!(show(120), "2m");
        assert_eq!(show_duration(None), "0s");
    }

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 9), (2, 3));
        assert_eq!(line_column(text, 100), (3, 1));
    }

    #[test]
    fn the_default_path_follows_xdg() {
        let path = |xdg: Option<&str>, home: Option<&str>| {
            default_path_in(xdg.map(OsStr::new), home.map(OsStr::new))
        };
        assert_eq!(
            path(Some("/x"), Some("/h")),
            Some(PathBuf::from("/x/toold/config.toml"))
        );
        assert_eq!(
            path(Some("relative"), Some("/h")),
            Some(PathBuf::from("/h/.config/toold/config.toml"))
        );
        assert_eq!(
            path(Some(""), Some("/h")),
            Some(PathBuf::from("/h/.config/toold/config.toml"))
        );
        assert_eq!(path(None, None), None);
        assert_eq!(path(None, Some("")), None);
    }
}
