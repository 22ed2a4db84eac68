//! What this kernel lets the daemon enforce, probed once by trying each layer on a real child
//! (the commands' shell), and the daemon socket commands are kept from.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use toold_protocol::SandboxReport;

use super::git::GitPath;
use super::kept_out::DaemonSocket;
use super::namespace::{Mounts, Place, View};
use super::{ChildPlan, Protection, landlock, seccomp};
use crate::spawn::{self, Launch};

/// The layers that work here, and why each that does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kernel {
    pub landlock_abi: Option<u32>,
    /// A Landlock ruleset could be applied.
    landlock: bool,
    /// A user + mount namespace with the sandbox's mounts could be made.
    pub namespaces: bool,
    /// ... and a PID namespace in it, with its own `/proc`.
    pub pid_namespace: bool,
    /// ... and everything but the places shown made read-only (`open_tree`, `move_mount`,
    /// `mount_setattr`: Linux 5.12).
    pub read_only_elsewhere: bool,
    /// A seccomp filter could be installed.
    pub seccomp: bool,
    /// The shell could install the filter whose listener the daemon decides the command's
    /// socket calls on.
    pub socket_supervisor: bool,
    /// Why each layer that failed did, by the layer's name.
    pub failures: BTreeMap<&'static str, String>,
}

impl Kernel {
    pub(crate) fn landlock_fs(&self) -> bool {
        self.landlock
    }

    /// Landlock's signal and abstract-socket scopes: ABI 6 and later.
    pub(crate) fn landlock_scopes(&self) -> bool {
        self.landlock && self.landlock_abi.is_some_and(|abi| abi >= 6)
    }

    /// Whether this kernel can enforce `protection`: which layer each one rests on.
    pub(crate) fn enforces(&self, protection: Protection) -> bool {
        match protection {
            Protection::Filesystem => self.landlock_fs(),
            Protection::Network | Protection::IoUring => self.seccomp,
            Protection::Signals => self.landlock_scopes(),
            Protection::GitMetadata
            | Protection::PrivateTmp
            | Protection::HiddenPaths
            | Protection::LocalServices => self.namespaces,
            Protection::UnchangedOutside => self.read_only_elsewhere,
            Protection::OwnProcesses => self.pid_namespace,
            Protection::UnixSockets => self.socket_supervisor,
        }
    }

    /// Why this kernel cannot enforce `protection`, in a person's words; `None` when it can.
    pub(crate) fn why_not(&self, protection: Protection) -> Option<String> {
        if self.enforces(protection) {
            return None;
        }
        let layer = match protection {
            Protection::Filesystem => "landlock",
            Protection::Network | Protection::IoUring => "seccomp",
            Protection::Signals if !self.landlock => "landlock",
            Protection::Signals => {
                return Some(format!(
                    "Landlock's signal scope needs ABI 6; this kernel has ABI {}",
                    self.landlock_abi.unwrap_or(0)
                ));
            }
            Protection::GitMetadata
            | Protection::PrivateTmp
            | Protection::HiddenPaths
            | Protection::LocalServices => "mount_namespace",
            Protection::UnchangedOutside if !self.namespaces => "mount_namespace",
            Protection::UnchangedOutside => "read_only_elsewhere",
            Protection::OwnProcesses if !self.namespaces => "mount_namespace",
            Protection::OwnProcesses => "pid_namespace",
            Protection::UnixSockets => "socket_supervisor",
        };
        Some(
            self.failures
                .get(layer)
                .cloned()
                .unwrap_or_else(|| format!("{layer} is not available")),
        )
    }

    /// How commands are kept from the daemon's socket: the first tier that works.
    pub(crate) fn daemon_socket_tier(&self) -> &'static str {
        if self.namespaces {
            "mount_namespace"
        } else {
            "peer_check"
        }
    }

    /// How no process of a command outlives its call: its PID namespace, or the daemon's
    /// sweep of `/proc` alone.
    pub(crate) fn processes_tier(&self) -> &'static str {
        if self.pid_namespace {
            "pid_namespace"
        } else {
            "sweep"
        }
    }

    /// The report of `initialize` and `toold status`.
    pub(crate) fn report(&self) -> SandboxReport {
        let missing: Vec<Protection> = Protection::ALL
            .into_iter()
            .filter(|protection| !self.enforces(*protection))
            .collect();
        SandboxReport {
            landlock_abi: self.landlock_abi,
            fs: self.landlock_fs(),
            network: self.seccomp,
            daemon_socket: self.daemon_socket_tier().to_owned(),
            processes: self.processes_tier().to_owned(),
            degraded: missing
                .iter()
                .map(|protection| protection.as_str().to_owned())
                .collect(),
            why: missing
                .iter()
                .filter_map(|protection| {
                    Some((protection.as_str().to_owned(), self.why_not(*protection)?))
                })
                .collect(),
        }
    }
}

/// What the kernel enforces, probed on first use (the daemon probes at start, before it
/// reports anything).
pub(crate) fn probe() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| {
        let mut failures = BTreeMap::new();
        let mut tried = |layer: &'static str, works: Result<(), String>| match works {
            Ok(()) => true,
            Err(why) => {
                tracing::warn!(layer, %why, "the kernel does not allow this sandbox layer here");
                failures.insert(layer, why);
                false
            }
        };
        let landlock = tried(
            "landlock",
            works_in_a_child(|scratch| {
                Ok(ChildPlan {
                    landlock: Some(
                        landlock::ruleset(&[scratch.to_owned()], false)
                            .map_err(io::Error::other)?,
                    ),
                    ..ChildPlan::default()
                })
            }),
        );
        let namespaces = tried(
            "mount_namespace",
            works_in_a_child(|scratch| namespace_plan(scratch, false, false)),
        );
        let pid_namespace = namespaces
            && tried(
                "pid_namespace",
                works_in_a_child(|scratch| namespace_plan(scratch, true, false)),
            );
        let read_only_elsewhere = namespaces
            && tried(
                "read_only_elsewhere",
                works_in_a_child(|scratch| namespace_plan(scratch, false, true)),
            );
        let seccomp = tried(
            "seccomp",
            works_in_a_child(|_| {
                Ok(ChildPlan {
                    seccomp: Some(
                        seccomp::program(false)
                            .ok_or_else(|| io::Error::other("no filter for this architecture"))?,
                    ),
                    ..ChildPlan::default()
                })
            }),
        );
        let socket_supervisor = tried(
            "socket_supervisor",
            works_in_a_child(|_| {
                Ok(ChildPlan {
                    socket_filter: Some(seccomp::program_with_socket_calls(false).ok_or_else(
                        || io::Error::other("no seccomp filter for this architecture"),
                    )?),
                    ..ChildPlan::default()
                })
            }),
        );
        let kernel = Kernel {
            landlock_abi: landlock::kernel_abi(),
            landlock,
            namespaces,
            pid_namespace,
            read_only_elsewhere,
            seccomp,
            socket_supervisor,
            failures,
        };
        tracing::info!(?kernel, "command sandbox probed");
        kernel
    })
}

/// A namespace with every kind of mount a command's has, on paths in `scratch`: a socket's
/// directory covered, a directory pinned and a file bound read-only, a place shown over
/// another directory; with `own_pids` a PID namespace and its `/proc`; with
/// `read_only_elsewhere` everything else made read-only.
fn namespace_plan(
    scratch: &Path,
    own_pids: bool,
    read_only_elsewhere: bool,
) -> io::Result<ChildPlan> {
    let hidden = scratch.join("hidden");
    let file = scratch.join("file");
    let shown = scratch.join("shown");
    let over = scratch.join("over");
    for dir in [&hidden, &shown, &over] {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&file, "")?;
    let socket = DaemonSocket {
        path: hidden.join("toold.sock"),
        hidden_dir: Some(hidden),
    };
    let git = [GitPath::Pinned(scratch.to_owned()), GitPath::ReadOnly(file)];
    let places = [
        Place::at_itself(scratch.to_owned(), true),
        Place {
            source: shown,
            target: over,
            writable: true,
        },
    ];
    let writable = [scratch.to_owned()];
    let view = View {
        socket: Some(&socket),
        git: &git,
        places: &places,
        read_only_elsewhere,
        writable: &writable,
        hidden: &[],
        protected: &[],
    };
    let mounts = Mounts::plan(&view).map_err(io::Error::other)?;
    Ok(ChildPlan {
        namespace: Some(if own_pids {
            mounts.with_own_pids()
        } else {
            mounts
        }),
        ..ChildPlan::default()
    })
}

/// A scratch directory for the probe where nothing the sandbox hides lies (a `$TMPDIR` inside
/// the runtime directory would put it under a cover): the temp directory, else `/tmp`, else
/// `/var/tmp`.
fn scratch_dir() -> io::Result<tempfile::TempDir> {
    let hidden = &super::kept_out::local_services().dirs;
    let candidates = [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
    ];
    let mut last = io::Error::other("no directory for the sandbox probe");
    for dir in candidates {
        let Ok(resolved) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if hidden.iter().any(|covered| resolved.starts_with(covered)) {
            continue;
        }
        match tempfile::Builder::new()
            .prefix("toold-probe-")
            .tempdir_in(&resolved)
        {
            Ok(scratch) => return Ok(scratch),
            Err(err) => last = err,
        }
    }
    Err(last)
}

/// Whether the commands' shell runs (`bash -c :`) with the layer `plan` makes (given a scratch
/// directory) applied between its clone and its exec, as a command's would be; why not.
fn works_in_a_child(plan: impl FnOnce(&Path) -> io::Result<ChildPlan>) -> Result<(), String> {
    let tried = scratch_dir().and_then(|scratch| {
        let plan = plan(scratch.path())?;
        let args = ["--noprofile", "--norc", "-c", ":"].map(std::ffi::OsStr::new);
        let launch = Launch::new(Path::new(spawn::SHELL), args, [], Path::new("/"))?;
        let null = OwnedFd::from(
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")?,
        );
        let (mut child, _known) = crate::process_tree::spawn_known(
            || spawn::spawn(&launch, &plan, &null, &null, &null),
            |child| Some(child.id()),
        )?;
        // The shell's own socket calls (the C library asks nscd for the user) wait for an
        // answer: every one is refused.
        let refusing = child.take_listener().map(|listener| {
            std::thread::spawn(move || super::sockets::supervisor::refuse_all(&listener))
        });
        let status = child.wait_blocking();
        if let Some(refusing) = refusing {
            let _ = refusing.join();
        }
        status
    });
    match tried {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("the probe's shell failed ({status})")),
        Err(err) => Err(err.to_string()),
    }
}
