//! The command sandbox (docs/protocol.md section 11.8): what a `run_command` call's processes may
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

mod git;
pub(crate) mod hidden;
pub(crate) mod kept_out;
pub(crate) mod kernel;
mod landlock;
mod namespace;
pub(crate) mod private_tmp;
mod report;
pub(crate) mod repositories;
mod seccomp;
mod settings;
pub(crate) mod sockets;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toold_protocol::{SandboxMode, SandboxSettings};

use self::namespace::{Place, View};
pub(crate) use self::settings::Loosening;
pub(crate) use self::settings::{AllowedSocket, CommandSandbox, OnUnsupported, SandboxConfig};
use crate::spawn::{ChildSetup, Plain};

/// The protections a sandbox is made of, by the names `metadata.sandbox` and the start-up
/// report use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protection {
    /// Writes only where the mode allows (Landlock).
    Filesystem,
    /// Outside the writable directories nothing changes at all: no mode, owner or time
    /// either (everything else mounted read-only).
    UnchangedOutside,
    /// No IP sockets (seccomp, and Landlock's TCP rules where the kernel has them).
    Network,
    /// `io_uring` refused (seccomp): it would bypass the filter.
    IoUring,
    /// The daemon cannot be signalled (Landlock's signal scope).
    Signals,
    /// `.git/config`, `.git/hooks` and `.git` files read-only inside the roots (mount
    /// namespace).
    GitMetadata,
    /// `/tmp` and `/dev/shm` of the session's own (mount namespace).
    PrivateTmp,
    /// Credential stores and what read deny rules name cannot be read (mount namespace).
    HiddenPaths,
    /// The runtime directory's services and the container engines' sockets are covered
    /// (mount namespace).
    LocalServices,
    /// No Unix socket but the command's own servers' and those the config names can be
    /// reached (the daemon decides each connect and send: seccomp's user notification).
    UnixSockets,
    /// Each command in a PID namespace of its own: it sees only its own processes, and all
    /// of them end with it.
    OwnProcesses,
}

impl Protection {
    /// Every protection, in the order reports list them.
    pub(crate) const ALL: [Protection; 11] = [
        Protection::Filesystem,
        Protection::UnchangedOutside,
        Protection::Network,
        Protection::IoUring,
        Protection::Signals,
        Protection::GitMetadata,
        Protection::PrivateTmp,
        Protection::HiddenPaths,
        Protection::LocalServices,
        Protection::UnixSockets,
        Protection::OwnProcesses,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protection::Filesystem => "filesystem",
            Protection::UnchangedOutside => "unchanged_outside",
            Protection::Network => "network",
            Protection::IoUring => "io_uring",
            Protection::Signals => "signals",
            Protection::GitMetadata => "git_metadata",
            Protection::PrivateTmp => "private_tmp",
            Protection::HiddenPaths => "hidden_paths",
            Protection::LocalServices => "local_services",
            Protection::UnixSockets => "unix_sockets",
            Protection::OwnProcesses => "pid_namespace",
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
    /// What is missing, each with why.
    degraded: Vec<(&'static str, String)>,
    /// Where the command may write, for the hint of a likely denial (as the command sees
    /// them).
    writable_shown: Vec<PathBuf>,
    /// Where the command may write on the host (the Landlock rules' directories).
    writable: Vec<PathBuf>,
    /// The command's `TMPDIR`, when the sandbox sets it.
    tmpdir: Option<PathBuf>,
    /// A call's own temp directory, removed when the call ends.
    call_dir: Option<tempfile::TempDir>,
    /// Repository metadata that did not exist and must not after the call.
    must_not_appear: Vec<git::Forbidden>,
    /// What the command cannot read (credential stores, files read deny rules cover).
    hidden: Vec<namespace::Hidden>,
    /// What the command's socket calls are judged by, when the daemon decides them.
    socket_rules: Option<Arc<sockets::supervisor::SocketRules>>,
    /// The sockets of services outside that the command may reach, where it finds them.
    reachable_sockets: Vec<PathBuf>,
    /// The session's repositories, looked at again after the command.
    repositories: Option<Arc<repositories::Guard>>,
}

/// What the child applies, in order.
#[derive(Debug, Default)]
struct ChildPlan {
    namespace: Option<namespace::Mounts>,
    landlock: Option<std::os::fd::OwnedFd>,
    /// What the ruleset lets a command read, for the `/proc` its PID namespace mounts.
    landlock_read_rights: u64,
    seccomp: Option<&'static seccomp::Program>,
    /// The filter that hands the daemon the command's socket calls ([`sockets`]), installed
    /// by the command's init.
    socket_filter: Option<&'static [nix::libc::sock_filter]>,
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
                writable_shown: Vec::new(),
                writable: Vec::new(),
                tmpdir: None,
                call_dir: None,
                must_not_appear: Vec::new(),
                hidden: Vec::new(),
                socket_rules: None,
                reachable_sockets: Vec::new(),
                repositories: None,
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
            match kernel.why_not(protection) {
                None => enforced.push(protection.as_str()),
                Some(why) => degraded.push((protection.as_str(), why)),
            }
        }
        if sandbox.on_unsupported == OnUnsupported::Refuse && !degraded.is_empty() {
            let missing: Vec<String> = degraded
                .iter()
                .map(|(name, why)| format!("{name} ({why})"))
                .collect();
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
                missing.join(", "),
            )));
        }
        let failed = |what: &str| {
            let what = what.to_owned();
            move |err: io::Error| Unbuildable::Failed(format!("cannot {what}: {err}"))
        };
        let writes_roots = settings.mode == SandboxMode::WorkspaceWrite;
        // The temp directories: with a mount namespace, `/tmp` and `/dev/shm` of the session's
        // own (a call's own in `read_only`); without, the host's (and a call's own `TMPDIR` in
        // `read_only`).
        let mut call_dir = None;
        let private = if kernel.namespaces {
            let dir = match (&sandbox.private_dir, writes_roots) {
                (Some(dir), true) => private_tmp::PrivateDirs::of_session(dir),
                _ => {
                    let made = private_tmp::call_dir()
                        .map_err(failed("make the command's private temp directory"))?;
                    let dirs = private_tmp::PrivateDirs::of_call(made.path());
                    call_dir = Some(made);
                    dirs
                }
            }
            .map_err(failed("make the command's private temp directory"))?;
            Some(dir)
        } else {
            None
        };
        let mut writable: Vec<PathBuf> = Vec::new();
        let mut places: Vec<Place> = Vec::new();
        let tmpdir;
        match &private {
            Some(private) => {
                writable.extend([private.tmp.clone(), private.shm.clone()]);
                places.push(Place {
                    source: private.tmp.clone(),
                    target: PathBuf::from("/tmp"),
                    writable: true,
                });
                if Path::new("/dev/shm").is_dir() {
                    places.push(Place {
                        source: private.shm.clone(),
                        target: PathBuf::from("/dev/shm"),
                        writable: true,
                    });
                }
                tmpdir = Some(PathBuf::from("/tmp"));
            }
            None if writes_roots => {
                writable.extend(temp_dirs().iter().cloned());
                tmpdir = None;
            }
            None => {
                let made = private_tmp::call_dir()
                    .map_err(failed("make the command's private temp directory"))?;
                writable.push(made.path().to_owned());
                tmpdir = Some(made.path().to_owned());
                call_dir = Some(made);
            }
        }
        // The roots (canonical) and the working directory as the call names it, shown: a
        // private `/tmp` would hide one that lies under `/tmp`.
        let cwd_place = std::fs::canonicalize(cwd).ok().map(|source| Place {
            source,
            target: cwd.to_owned(),
            writable: false,
        });
        if writes_roots {
            for dir in roots.iter().chain(sandbox.writable.iter()) {
                writable.push(dir.clone());
                if dir.is_dir() {
                    places.push(Place::at_itself(dir.clone(), true));
                }
            }
            if !roots.iter().any(|root| cwd.starts_with(root)) {
                places.extend(cwd_place);
            }
        } else {
            places.extend(
                roots
                    .iter()
                    .map(|root| Place::at_itself(root.clone(), false)),
            );
            places.extend(cwd_place);
        }
        for dir in sandbox.also_writable.iter() {
            writable.push(dir.clone());
            places.push(Place::at_itself(dir.clone(), true));
        }
        // What commands cannot read, and the sockets of services outside they may reach: one
        // that lies under a hidden directory (an agent's in the runtime directory) or the
        // private `/tmp` is shown at its path, through a read-only copy of that directory's
        // skeleton.
        let mut hidden = Vec::new();
        let mut reachable = Vec::new();
        if let Some(private) = &private {
            let mut paths = sandbox.hidden.to_vec();
            if !sandbox.denied_reads.is_empty() {
                paths.extend(
                    sandbox
                        .denied_reads
                        .paths(roots)
                        .map_err(Unbuildable::Failed)?,
                );
            }
            // toold's own directories: its config (MCP servers' secrets), its state (every
            // session's rules and environment, the audit log, the other sessions' `/tmp`).
            make_missing_daemon_dirs(&writable);
            paths.extend(crate::paths::daemon_dirs().iter().cloned());
            hidden = namespace::Hidden::existing(paths);
            reachable = sockets::reachable(&sandbox.unix_sockets);
            let covers = hidden
                .iter()
                .filter(|hidden| hidden.is_dir)
                .map(|hidden| &hidden.path)
                .chain(&kept_out::local_services().dirs);
            let shown = private_tmp::show_sockets(private, covers, &reachable, &places).map_err(
                failed("show the reachable sockets in the command's sandbox"),
            )?;
            hidden.retain(|hidden| !shown.iter().any(|place| place.target == hidden.path));
            places.extend(shown);
        }
        let places = private
            .as_ref()
            .map(|_| private_tmp::arrange(places))
            .transpose()
            .map_err(failed("make the mount points of the command's /tmp"))?
            .unwrap_or_default();
        let writable_shown: Vec<PathBuf> = writable
            .iter()
            .map(|dir| {
                places
                    .iter()
                    .find(|place| &place.source == dir)
                    .map_or_else(|| dir.clone(), |place| place.target.clone())
            })
            .collect();

        // The repositories under the roots: what changed since the last command taken as it
        // is, every one found kept read-only where the kernel allows it, and what the command
        // gives them looked at after it ([`Self::undo_forbidden_creations`]).
        let known_repositories = if writes_roots {
            match sandbox.repositories.before_command(roots) {
                Ok(known) => known,
                Err(why) => {
                    degraded.push(("repositories", why));
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        // After the refusal: looking may make a missing `.git/hooks`.
        let protected_git = if writes_roots && kernel.namespaces {
            git::git_metadata(roots, cwd, &writable, &known_repositories)
        } else {
            Vec::new()
        };
        let namespace = if kernel.namespaces {
            let protected = crate::paths::daemon_files();
            let view = View {
                socket: kept_out::daemon_socket(),
                git: &protected_git,
                places: &places,
                read_only_elsewhere: kernel.read_only_elsewhere,
                writable: &writable,
                hidden: &hidden,
                protected: &protected,
            };
            let mounts = namespace::Mounts::plan(&view).map_err(Unbuildable::Failed)?;
            enforced.push("mount_namespace");
            Some(if kernel.pid_namespace {
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
                git::GitPath::MustNotAppear(path) => git::Forbidden::of(path),
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
        // One filter: with the daemon deciding socket calls, installed first of all by the
        // shell with a listener; else just before the exec.
        let socket_filter = kernel
            .enforces(Protection::UnixSockets)
            .then(|| seccomp::program_with_socket_calls(settings.network))
            .flatten();
        let seccomp = (kernel.seccomp && socket_filter.is_none())
            .then(|| seccomp::program(settings.network))
            .flatten();
        let socket_rules = socket_filter.map(|_| {
            Arc::new(sockets::supervisor::SocketRules {
                allowed: reachable.iter().map(|socket| socket.identity).collect(),
            })
        });
        let reachable_sockets = reachable
            .into_iter()
            .map(|socket| socket.shown_at)
            .collect();
        enforced.push("peer_check");
        Ok(Self {
            settings,
            plan: Some(Arc::new(ChildPlan {
                namespace,
                landlock,
                landlock_read_rights: landlock::read_rights_bits(),
                seccomp,
                socket_filter,
            })),
            enforced,
            degraded,
            writable_shown,
            writable,
            tmpdir,
            call_dir,
            must_not_appear,
            hidden,
            socket_rules,
            reachable_sockets,
            repositories: writes_roots.then(|| Arc::clone(&sandbox.repositories)),
        })
    }

    /// Builds the ruleset of the next command of this sandbox in the background (see
    /// [`landlock::build_ahead`]); a call's own temp directory is its own, so its sandbox is
    /// never asked for again.
    pub(crate) fn build_ahead(&self) {
        let uses_landlock = self
            .plan
            .as_ref()
            .is_some_and(|plan| plan.landlock.is_some());
        if uses_landlock && self.call_dir.is_none() {
            landlock::build_ahead(&self.writable, self.settings.network);
        }
    }

    /// Removes what the command made where git would read it and a mount could not cover it
    /// (`.git/commondir` where there was none: it would move the repository's config and
    /// hooks to a place of the command's choosing), and undoes what it gave any repository
    /// under the roots that runs code (a repository it planted, one it changed where no mount
    /// kept it from: [`repositories`]); returns what was removed, put back or set aside.
    /// Called once the call's processes are gone.
    pub(crate) fn undo_forbidden_creations(&self) -> Vec<PathBuf> {
        let mut removed = self
            .repositories
            .as_ref()
            .map(|guard| guard.after_command())
            .unwrap_or_default();
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

    /// Starts deciding the socket calls of the command `child` (spawned with this
    /// confinement's [`Self::child_setup`]); `None` when the daemon does not decide them here.
    pub(crate) fn supervise(
        &self,
        child: &mut crate::spawn::Spawned,
    ) -> Option<sockets::supervisor::Supervisor> {
        let rules = self.socket_rules.as_ref()?;
        let Some(listener) = child.take_listener() else {
            tracing::error!(
                "a sandboxed command's socket filter has no listener: its socket calls are refused"
            );
            return None;
        };
        match sockets::supervisor::supervise(listener, child.id(), Arc::clone(rules)) {
            Ok(supervisor) => Some(supervisor),
            Err(error) => {
                tracing::error!(%error, "cannot decide a sandboxed command's socket calls");
                None
            }
        }
    }

    /// Whether the command should not inherit the daemon's variable `name=value`: one naming
    /// the socket of a service outside the sandbox that the command may not reach
    /// ([`sockets::names_a_service`]).
    pub(crate) fn withholds_variable(&self, name: &[u8], value: &[u8]) -> bool {
        self.is_confined() && sockets::names_a_service(name, value, &self.reachable_sockets)
    }

    /// Whether the command runs confined (any mode but `off`).
    pub(crate) fn is_confined(&self) -> bool {
        self.plan.is_some()
    }

    /// The command's `TMPDIR`, when the sandbox sets it: `/tmp` when that is the session's
    /// own, else a call's own directory (`read_only` without a mount namespace).
    pub(crate) fn tmpdir(&self) -> Option<&Path> {
        self.tmpdir.as_deref()
    }

    /// What the child applies between its clone and its exec ([`crate::spawn`]).
    pub(crate) fn child_setup(&self) -> &dyn ChildSetup {
        match &self.plan {
            Some(plan) => plan.as_ref(),
            None => &Plain,
        }
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

    fn socket_filter(&self) -> Option<&[nix::libc::sock_filter]> {
        self.socket_filter
    }

    fn kept_descriptor(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.landlock.as_ref().map(AsRawFd::as_raw_fd)
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

/// toold's own directories that do not exist yet where a command could make them (under a
/// root): made now, empty, so that they can be bound read-only like the others. A config
/// directory made by a command would hold a config whose hooks run unsandboxed at the next
/// reload.
fn make_missing_daemon_dirs(writable: &[PathBuf]) {
    for dir in crate::paths::daemon_dirs() {
        if writable.iter().any(|place| dir.starts_with(place))
            && !dir.exists()
            && let Err(err) = crate::judged_files::open_dir_creating(dir)
        {
            tracing::warn!(dir = %dir.display(), %err, "cannot make toold's own directory to protect it");
        }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
        assert_eq!(confinement.denial_hint("Permission denied", &[]), None);
        assert_eq!(
            confinement.metadata(None, &[], &[]),
            json!({"mode": "off", "network": true, "enforced": [], "degraded": []})
        );
    }
}
