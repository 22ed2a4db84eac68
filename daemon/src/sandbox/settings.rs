//! What a sandbox is asked to be: the config's `[sandbox]` (`SandboxConfig`) and a session's
//! (`CommandSandbox`, in its Env), which `Confinement::prepare` builds one command's from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toold_protocol::SandboxSettings;

use super::{Protection, hidden, repositories};

/// What to do when the kernel cannot enforce part of what a session's sandbox asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnsupported {
    /// Run with what can be enforced, and say what was not (`metadata.sandbox.degraded`).
    #[default]
    Warn,
    /// Do not run: the result is `sandbox_unavailable`.
    Refuse,
}

/// `[sandbox]` of the config.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    /// Every session's sandbox unless it asks for another.
    pub settings: SandboxSettings,
    /// Extra directories commands may write under (absolute).
    pub writable: Vec<PathBuf>,
    /// What commands cannot read at all (absolute): credential stores by default
    /// ([`hidden::default_paths`]).
    pub hidden: Vec<PathBuf>,
    /// The Unix sockets of services outside the sandbox that commands may reach.
    pub unix_sockets: Vec<AllowedSocket>,
    pub on_unsupported: OnUnsupported,
    /// Whether a session may ask for a looser sandbox than `settings`.
    pub allow_unsandboxed: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            settings: SandboxSettings::default(),
            writable: Vec::new(),
            hidden: hidden::default_paths(),
            unix_sockets: Vec::new(),
            on_unsupported: OnUnsupported::default(),
            allow_unsandboxed: false,
        }
    }
}

impl SandboxConfig {
    /// The sandbox of a session that asked for nothing.
    pub(crate) fn for_commands(&self) -> CommandSandbox {
        CommandSandbox {
            settings: self.settings,
            writable: self.writable.clone().into(),
            hidden: self.hidden.clone().into(),
            unix_sockets: self.unix_sockets.clone().into(),
            repositories: Arc::default(),
            denied_reads: Arc::default(),
            on_unsupported: self.on_unsupported,
            private_dir: None,
            also_writable: Arc::default(),
            allow_unsandboxed: self.allow_unsandboxed,
        }
    }

    /// One line for `toold check-config`.
    pub(crate) fn summary(&self) -> String {
        let list = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|dir| dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let writable = if self.writable.is_empty() {
            String::new()
        } else {
            format!(", also writable: {}", list(&self.writable))
        };
        let hidden = if self.hidden == hidden::default_paths() {
            String::new()
        } else if self.hidden.is_empty() {
            ", nothing hidden".to_owned()
        } else {
            format!(", hidden: {}", list(&self.hidden))
        };
        let sockets = if self.unix_sockets.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = self.unix_sockets.iter().map(ToString::to_string).collect();
            format!(", reachable sockets: {}", names.join(", "))
        };
        format!(
            "sandbox: mode {}, network {}{writable}{hidden}{sockets}, on_unsupported {}{}",
            self.settings.mode.as_str(),
            if self.settings.network { "on" } else { "off" },
            match self.on_unsupported {
                OnUnsupported::Warn => "warn",
                OnUnsupported::Refuse => "refuse",
            },
            if self.allow_unsandboxed {
                ", sessions may loosen it"
            } else {
                ""
            }
        )
    }
}

/// A Unix socket of a service outside the sandbox that commands may reach (`[sandbox]
/// unix_sockets`), as the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedSocket {
    Path(PathBuf),
    /// `$NAME`: the socket the daemon's environment variable names (`$SSH_AUTH_SOCK`), looked
    /// up when a command starts.
    Variable(String),
}

impl AllowedSocket {
    /// The socket's path now; `None` for a variable that is unset or not an absolute path.
    pub(crate) fn path(&self) -> Option<PathBuf> {
        match self {
            AllowedSocket::Path(path) => Some(path.clone()),
            AllowedSocket::Variable(name) => std::env::var_os(name)
                .map(PathBuf::from)
                .filter(|path| path.is_absolute()),
        }
    }
}

impl std::fmt::Display for AllowedSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowedSocket::Path(path) => write!(f, "{}", path.display()),
            AllowedSocket::Variable(name) => write!(f, "${name}"),
        }
    }
}

/// What an escalation loosens of a sandbox for one command (`run_command`'s `escalate`, judged
/// by the permission engine, `crate::permission::escalation`), or what a rule's ` with …` covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Loosening {
    pub network: bool,
    /// Directories the command may also write under, absolute and normalized.
    pub writable: Vec<PathBuf>,
    pub unsandboxed: bool,
}

/// The sandbox of one session's commands: its settings and the config's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSandbox {
    pub settings: SandboxSettings,
    pub writable: Arc<[PathBuf]>,
    /// Paths commands cannot read: the config's `hidden`.
    pub hidden: Arc<[PathBuf]>,
    /// What the session's `read_file` deny rules cover, hidden from its commands too.
    pub denied_reads: Arc<hidden::DeniedReads>,
    /// The Unix sockets outside the sandbox that its commands may reach.
    pub unix_sockets: Arc<[AllowedSocket]>,
    /// The repositories under the session's roots, watched across its commands.
    pub repositories: Arc<repositories::Guard>,
    pub on_unsupported: OnUnsupported,
    /// The session's own directory for its commands' `/tmp` and `/dev/shm`, kept across its
    /// calls ([`private_tmp`]); `None`: each call gets one of its own.
    pub private_dir: Option<Arc<Path>>,
    /// Directories one command may also write under, in either mode: what an approved
    /// `escalate` of `writable` loosens ([`Self::escalated`]).
    pub also_writable: Arc<[PathBuf]>,
    /// The config's `allow_unsandboxed`: whether a command may ask to run with no sandbox.
    pub allow_unsandboxed: bool,
}

impl Default for CommandSandbox {
    fn default() -> Self {
        SandboxConfig::default().for_commands()
    }
}

impl CommandSandbox {
    /// This sandbox with what an approved escalation loosens, for one command: the network,
    /// more directories to write under, or no sandbox at all.
    pub(crate) fn escalated(&self, loosening: &Loosening) -> Self {
        let mut sandbox = self.clone();
        if loosening.unsandboxed {
            sandbox.settings.mode = toold_protocol::SandboxMode::Off;
        }
        if loosening.network {
            sandbox.settings.network = true;
        }
        if !loosening.writable.is_empty() {
            let mut dirs = self.also_writable.to_vec();
            dirs.extend(loosening.writable.iter().cloned());
            sandbox.also_writable = dirs.into();
        }
        sandbox
    }

    /// Whether this sandbox confines a command enough to run it unasked (the permission
    /// engine's `sandboxed` step): its mode writes at most the roots, the network is closed,
    /// and this kernel enforces every layer of it but one, Landlock's signal scope, which the
    /// PID namespace makes redundant (a command cannot name a process outside its namespace).
    /// A command with the network could send the workspace anywhere; one that reached a
    /// service's socket (a tmux server, the session bus) could have it run a command outside
    /// every layer; one that could read the credential stores could show them to the model;
    /// one that could plant a setting in `.git/config` could have the user's next `git status`
    /// run it.
    ///
    /// Nor where it lets commands write outside `roots` (`[sandbox] writable`: a cache where a
    /// command could plant code that runs later outside the sandbox) or reach a service
    /// (`[sandbox] unix_sockets`: an SSH agent signs for it).
    pub(crate) fn confines_commands(&self, roots: &[PathBuf]) -> bool {
        if self.settings.mode == toold_protocol::SandboxMode::Off
            || self.settings.network
            || !self.unix_sockets.is_empty()
            || self
                .writable
                .iter()
                .any(|dir| !roots.iter().any(|root| dir.starts_with(root)))
        {
            return false;
        }
        let kernel = super::kernel::probe();
        Protection::ALL
            .into_iter()
            .filter(|protection| match protection {
                Protection::Signals => false,
                Protection::GitMetadata => {
                    self.settings.mode == toold_protocol::SandboxMode::WorkspaceWrite
                }
                _ => true,
            })
            .all(|protection| kernel.enforces(protection))
    }
}
