//! The command sandbox (EXTENSIONS.md section C): what a `run_command` call's processes may
//! write, whether they may use IP networking, and that they cannot reach the daemon.
//!
//! Everything is decided and built in the daemon before the child exists
//! ([`Confinement::prepare`]): the Landlock ruleset (an open descriptor), the seccomp program,
//! the mounts of private namespaces (C strings). The child ([`crate::spawn`]) only applies
//! them between its clone and its exec ([`Confinement::child_setup`]), with system calls
//! alone: no allocation, no lock, nothing that is not async-signal-safe. Layers, in the order
//! the child applies them:
//!
//! - **Namespaces** ([`namespace`]), where user namespaces work: the child is born in a user,
//!   mount, IPC and (where `/proc` can be mounted again) PID namespace of its own, the last
//!   with an init of toold's ([`crate::spawn::init`]); an empty read-only tmpfs covers the daemon socket's
//!   directory, and the repositories' `.git/config`, `.git/hooks` and `.git` files are bound
//!   read-only over themselves (the `.git` directory itself bound over itself too, so that it
//!   cannot be renamed away and replaced).
//! - **Descriptors**: every descriptor above 2 is marked close-on-exec.
//! - **Landlock** ([`landlock`]): read everywhere, write only where the mode allows; TCP when
//!   the network is off; the signal and abstract-socket scopes, so the daemon cannot be
//!   signalled. Landlock also forbids ptrace of processes outside the domain (the daemon).
//! - **seccomp** ([`seccomp`]): `io_uring` always; IP sockets when the network is off.
//!
//! The daemon itself is non-dumpable (`process_tree::keep_out_of_reach`), and every connection
//! to its socket is checked against the running commands' process trees
//! (`process_tree::descends_from_a_confined_command`), whichever tier keeps the socket out.
//! What the kernel offers is probed once ([`kernel`]); what a call asked for and could not get
//! is named in `metadata.sandbox.degraded`, never silently dropped.

pub(crate) mod kept_out;
pub(crate) mod kernel;
mod landlock;
mod namespace;
mod seccomp;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use toold_protocol::{SandboxMode, SandboxSettings};

use crate::spawn::{ChildSetup, Plain};

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
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxConfig {
    /// Every session's sandbox unless it asks for another.
    pub settings: SandboxSettings,
    /// Extra directories commands may write under (absolute).
    pub writable: Vec<PathBuf>,
    pub on_unsupported: OnUnsupported,
    /// Whether a session may ask for a looser sandbox than `settings`.
    pub allow_unsandboxed: bool,
}

impl SandboxConfig {
    /// The sandbox of a session that asked for nothing.
    pub fn for_commands(&self) -> CommandSandbox {
        CommandSandbox {
            settings: self.settings,
            writable: self.writable.clone().into(),
            on_unsupported: self.on_unsupported,
        }
    }

    /// One line for `toold check-config`.
    pub fn summary(&self) -> String {
        let writable = if self.writable.is_empty() {
            String::new()
        } else {
            let dirs: Vec<String> = self
                .writable
                .iter()
                .map(|dir| dir.display().to_string())
                .collect();
            format!(", also writable: {}", dirs.join(", "))
        };
        format!(
            "sandbox: mode {}, network {}{writable}, on_unsupported {}{}",
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

/// The sandbox of one session's commands: its settings and the config's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSandbox {
    pub settings: SandboxSettings,
    pub writable: Arc<[PathBuf]>,
    pub on_unsupported: OnUnsupported,
}

impl Default for CommandSandbox {
    fn default() -> Self {
        SandboxConfig::default().for_commands()
    }
}

/// The protections a sandbox is made of, by the names `metadata.sandbox` and the start-up
/// report use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    /// Writes only where the mode allows (Landlock).
    Filesystem,
    /// No IP sockets (seccomp, and Landlock's TCP rules where the kernel has them).
    Network,
    /// `io_uring` refused (seccomp): it would bypass the filter.
    IoUring,
    /// The daemon cannot be signalled (Landlock's signal scope).
    Signals,
    /// `.git/config`, `.git/hooks` and `.git` files read-only inside the roots (mount
    /// namespace).
    GitMetadata,
}

impl Protection {
    /// Every protection, in the order reports list them.
    pub(crate) const ALL: [Protection; 5] = [
        Protection::Filesystem,
        Protection::Network,
        Protection::IoUring,
        Protection::Signals,
        Protection::GitMetadata,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protection::Filesystem => "filesystem",
            Protection::Network => "network",
            Protection::IoUring => "io_uring",
            Protection::Signals => "signals",
            Protection::GitMetadata => "git_metadata",
        }
    }
}

/// Why a command's sandbox could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unbuildable {
    /// The kernel cannot enforce what the sandbox needs, and the config says
    /// `on_unsupported = "refuse"`: the command must not run.
    #[error("{0}")]
    Unavailable(String),
    /// Building a part failed (the message says which and why).
    #[error("{0}")]
    Failed(String),
}

/// Everything one command's sandbox is, built in the daemon before the child is cloned.
#[derive(Debug)]
pub(crate) struct Confinement {
    settings: SandboxSettings,
    /// `None` with mode `off`.
    plan: Option<Arc<ChildPlan>>,
    enforced: Vec<&'static str>,
    degraded: Vec<&'static str>,
    /// Where the command may write, for the hint of a likely denial.
    writable: Vec<PathBuf>,
    /// `read_only`'s private temp directory, removed when the call ends.
    private_tmp: Option<tempfile::TempDir>,
    /// Repository metadata that did not exist and must not after the call.
    must_not_appear: Vec<namespace::Forbidden>,
}

/// What the child applies, in order.
#[derive(Debug, Default)]
struct ChildPlan {
    namespace: Option<namespace::Mounts>,
    landlock: Option<std::os::fd::OwnedFd>,
    /// What the ruleset lets a command read, for the `/proc` its PID namespace mounts.
    landlock_read_rights: u64,
    seccomp: Option<&'static seccomp::Program>,
}

impl Confinement {
    /// The sandbox for a command of a session with `sandbox`, whose roots are `roots`. Under
    /// `on_unsupported = "refuse"`, a sandbox the kernel cannot fully enforce is refused with
    /// `sandbox_unavailable`, naming what is missing.
    pub(crate) fn prepare(
        sandbox: &CommandSandbox,
        roots: &[PathBuf],
        cwd: &Path,
    ) -> Result<Self, Unbuildable> {
        let settings = sandbox.settings;
        if settings.mode == SandboxMode::Off {
            return Ok(Self {
                settings,
                plan: None,
                enforced: Vec::new(),
                degraded: Vec::new(),
                writable: Vec::new(),
                private_tmp: None,
                must_not_appear: Vec::new(),
            });
        }
        let kernel = kernel::probe();
        let mut enforced = Vec::new();
        let mut degraded = Vec::new();
        // What this session's sandbox needs: the network rule only with the network off, the
        // repository metadata only where the roots are writable.
        let needed = Protection::ALL
            .into_iter()
            .filter(|protection| match protection {
                Protection::Network => !settings.network,
                Protection::GitMetadata => settings.mode == SandboxMode::WorkspaceWrite,
                _ => true,
            });
        for protection in needed {
            if kernel.enforces(protection) {
                enforced.push(protection.as_str());
            } else {
                degraded.push(protection.as_str());
            }
        }
        if sandbox.on_unsupported == OnUnsupported::Refuse && !degraded.is_empty() {
            return Err(Unbuildable::Unavailable(format!(
                "the command did not run: its sandbox (mode {}{}) needs {} which this \
                     kernel cannot enforce, and the config says on_unsupported = \"refuse\"; \
                     `toold status` shows what the kernel offers",
                settings.mode.as_str(),
                if settings.network {
                    ""
                } else {
                    ", network off"
                },
                degraded.join(", "),
            )));
        }

        // After the refusal: looking may make a missing `.git/hooks`.
        let protected_git = if settings.mode == SandboxMode::WorkspaceWrite {
            namespace::git_metadata(roots, cwd)
        } else {
            // Nothing under the roots is writable at all.
            Vec::new()
        };
        let private_tmp = match settings.mode {
            SandboxMode::ReadOnly => Some(
                tempfile::Builder::new()
                    .prefix("toold-call-")
                    .tempdir()
                    .map_err(|err| {
                        Unbuildable::Failed(format!(
                            "cannot create the command's private temp directory: {err}"
                        ))
                    })?,
            ),
            _ => None,
        };
        let writable: Vec<PathBuf> = match &private_tmp {
            Some(dir) => vec![dir.path().to_owned()],
            None => roots
                .iter()
                .cloned()
                .chain(temp_dirs().iter().cloned())
                .chain(sandbox.writable.iter().cloned())
                .collect(),
        };
        let namespace = if kernel.namespaces {
            enforced.push("mount_namespace");
            let mounts =
                namespace::Mounts::plan(kept_out::daemon_socket(), &protected_git, &writable);
            Some(if kernel.pid_namespace {
                enforced.push("pid_namespace");
                mounts.with_own_pids()
            } else {
                mounts
            })
        } else {
            None
        };
        let must_not_appear = protected_git
            .iter()
            .filter_map(|path| match path {
                namespace::GitPath::MustNotAppear(path) => namespace::Forbidden::of(path),
                _ => None,
            })
            .collect();
        let landlock = if kernel.landlock_fs() {
            Some(
                landlock::ruleset_for_a_command(&writable, settings.network).map_err(|err| {
                    Unbuildable::Failed(format!(
                        "cannot build the command's Landlock ruleset: {err}"
                    ))
                })?,
            )
        } else {
            None
        };
        let seccomp = kernel
            .seccomp
            .then(|| seccomp::program(settings.network))
            .flatten();
        enforced.push("peer_check");
        Ok(Self {
            settings,
            plan: Some(Arc::new(ChildPlan {
                namespace,
                landlock,
                landlock_read_rights: landlock::read_rights_bits(),
                seccomp,
            })),
            enforced,
            degraded,
            writable,
            private_tmp,
            must_not_appear,
        })
    }

    /// Builds the ruleset of the next command of this sandbox in the background (see
    /// [`landlock::build_ahead`]); a command's private temp directory is its own, so its
    /// sandbox is never asked for again.
    pub(crate) fn build_ahead(&self) {
        let uses_landlock = self
            .plan
            .as_ref()
            .is_some_and(|plan| plan.landlock.is_some());
        if uses_landlock && self.private_tmp.is_none() {
            landlock::build_ahead(&self.writable, self.settings.network);
        }
    }

    /// Removes what the command made where git would read it and a mount could not cover it
    /// (`.git/commondir` where there was none: it would move the repository's config and
    /// hooks to a place of the command's choosing); returns what was removed. Called once the
    /// call's processes are gone.
    pub(crate) fn undo_forbidden_creations(&self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        for forbidden in &self.must_not_appear {
            match forbidden.remove() {
                Ok(true) => removed.push(forbidden.path.clone()),
                Ok(false) => {}
                Err(err) => tracing::error!(
                    path = %forbidden.path.display(),
                    %err,
                    "cannot remove what a sandboxed command made in a repository's metadata"
                ),
            }
        }
        if !removed.is_empty() {
            tracing::warn!(
                ?removed,
                "removed what a sandboxed command made in a repository's metadata"
            );
        }
        removed
    }

    /// Whether the command runs confined (any mode but `off`).
    pub(crate) fn is_confined(&self) -> bool {
        self.plan.is_some()
    }

    /// The command's `TMPDIR`, when the sandbox gives it a private one.
    pub(crate) fn private_tmp(&self) -> Option<&Path> {
        self.private_tmp.as_ref().map(tempfile::TempDir::path)
    }

    /// What the child applies between its clone and its exec ([`crate::spawn`]).
    pub(crate) fn child_setup(&self) -> &dyn ChildSetup {
        match &self.plan {
            Some(plan) => plan.as_ref(),
            None => &Plain,
        }
    }

    /// `metadata.sandbox` for the call's result; `denial_hint` from [`Self::denial_hint`] when
    /// the command failed, `removed` from [`Self::undo_forbidden_creations`].
    pub(crate) fn metadata(&self, denial_hint: Option<&str>, removed: &[PathBuf]) -> Value {
        let mut metadata = json!({
            "mode": self.settings.mode.as_str(),
            "network": self.settings.network,
            "enforced": self.enforced,
            "degraded": self.degraded,
        });
        if !removed.is_empty() {
            metadata["removed"] = json!(removed);
        }
        if let Some(hint) = denial_hint {
            metadata["likely_denied"] = json!(true);
            metadata["hint"] = json!(hint);
        }
        metadata
    }

    /// A hint for a command that failed with the marks of a denial, naming where it may
    /// write; `None` when the output shows none or the command ran unconfined.
    pub(crate) fn denial_hint(&self, output: &str) -> Option<String> {
        if !self.is_confined() || !looks_denied(output) {
            return None;
        }
        let dirs: Vec<String> = self
            .writable
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        let network = if self.settings.network {
            ""
        } else {
            " IP networking is off for this session's commands."
        };
        Some(format!(
            "the sandbox (mode {}) may have denied this: commands may write only under {}.{network} \
             To allow more, add the directory to [sandbox] writable in the config, or ask the \
             user for a session with a looser sandbox.",
            self.settings.mode.as_str(),
            dirs.join(", ")
        ))
    }
}

/// Applied in the child between its clone and its exec: system calls only; errors are the
/// kernel's.
impl ChildSetup for ChildPlan {
    fn clone_flags(&self) -> nix::libc::c_int {
        self.namespace
            .as_ref()
            .map_or(0, namespace::Mounts::clone_flags)
    }

    fn id_maps(&self) -> Option<crate::spawn::IdMaps<'_>> {
        self.namespace.as_ref().map(namespace::Mounts::id_maps)
    }

    fn enter_namespaces(&self, maps_written: bool) -> io::Result<()> {
        let Some(mounts) = &self.namespace else {
            return Ok(());
        };
        mounts.enter(maps_written)?;
        if mounts.has_own_pids()
            && let Some(ruleset) = &self.landlock
        {
            landlock::allow_beneath(ruleset, c"/proc", self.landlock_read_rights)?;
        }
        Ok(())
    }

    fn before_exec(&self) -> io::Result<()> {
        mark_descriptors_close_on_exec()?;
        if let Some(ruleset) = &self.landlock {
            landlock::restrict_self(ruleset)?;
        }
        if let Some(program) = self.seccomp {
            seccomp::apply(program)?;
        }
        Ok(())
    }
}

/// Every descriptor above 2 closes at exec: the command gets its stdio and nothing else, even
/// a descriptor another thread of the daemon opened without `O_CLOEXEC` at the wrong moment.
#[allow(unsafe_code)]
fn mark_descriptors_close_on_exec() -> io::Result<()> {
    // SAFETY: close_range takes plain integers and touches no memory.
    let marked =
        unsafe { nix::libc::close_range(3, u32::MAX, nix::libc::CLOSE_RANGE_CLOEXEC as i32) };
    if marked == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The temp directories every confined command may write: `/tmp`, `$TMPDIR` when it names
/// another absolute directory, and `/dev/shm`; resolved once (the Landlock rules refuse paths
/// through symlinks).
fn temp_dirs() -> &'static [PathBuf] {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(|| {
        let resolved = |dir: PathBuf| std::fs::canonicalize(&dir).unwrap_or(dir);
        let mut dirs = vec![resolved("/tmp".into()), resolved("/dev/shm".into())];
        if let Some(tmpdir) = std::env::var_os("TMPDIR").map(PathBuf::from)
            && tmpdir.is_absolute()
        {
            let tmpdir = resolved(tmpdir);
            if !dirs.contains(&tmpdir) {
                dirs.push(tmpdir);
            }
        }
        dirs
    })
}

/// Whether a failed command's output carries the marks of a denied write or connect: the
/// messages of `EACCES`, `EPERM` and `EROFS` as libc, Python, Rust and Node print them.
fn looks_denied(output: &str) -> bool {
    const MARKS: [&str; 6] = [
        "Permission denied",
        "Read-only file system",
        "Operation not permitted",
        "EACCES",
        "EROFS",
        "EPERM",
    ];
    MARKS.iter().any(|mark| output.contains(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_recognised_in_the_words_of_common_runtimes() {
        assert!(looks_denied("touch: cannot touch '/x': Permission denied"));
        assert!(looks_denied(
            "OSError: [Errno 30] Read-only file system: '/x'"
        ));
        assert!(looks_denied("Error: EACCES: permission denied, open '/x'"));
        assert!(!looks_denied("error[E0425]: cannot find value `x`"));
    }

    #[test]
    fn mode_off_builds_nothing_and_hints_nothing() {
        let sandbox = CommandSandbox {
            settings: SandboxSettings {
                mode: SandboxMode::Off,
                network: true,
            },
            ..CommandSandbox::default()
        };
        let confinement = Confinement::prepare(&sandbox, &[], Path::new("/")).unwrap();
        assert!(!confinement.is_confined());
        assert_eq!(confinement.denial_hint("Permission denied"), None);
        assert_eq!(
            confinement.metadata(None, &[]),
            json!({"mode": "off", "network": true, "enforced": [], "degraded": []})
        );
    }
}
