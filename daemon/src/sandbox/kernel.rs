//! What this kernel lets the daemon enforce, probed once by trying each layer on a real child
//! (the commands' shell), and the daemon socket commands are kept from.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::OnceLock;

use toold_protocol::SandboxReport;

use super::kept_out::DaemonSocket;
use super::{ChildPlan, Protection, landlock, namespace, seccomp};
use crate::spawn::{self, Launch};

/// The layers that work here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kernel {
    pub landlock_abi: Option<u32>,
    /// A Landlock ruleset could be applied.
    landlock: bool,
    /// A user + mount namespace with the sandbox's mounts could be made.
    pub namespaces: bool,
    /// ... and a PID namespace in it, with its own `/proc`.
    pub pid_namespace: bool,
    /// A seccomp filter could be installed.
    pub seccomp: bool,
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
            Protection::GitMetadata => self.namespaces,
        }
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
        let degraded = Protection::ALL
            .into_iter()
            .filter(|protection| !self.enforces(*protection))
            .map(|protection| protection.as_str().to_owned())
            .collect();
        SandboxReport {
            landlock_abi: self.landlock_abi,
            fs: self.landlock_fs(),
            network: self.seccomp,
            daemon_socket: self.daemon_socket_tier().to_owned(),
            processes: self.processes_tier().to_owned(),
            degraded,
        }
    }
}

/// What the kernel enforces, probed on first use (the daemon probes at start, before it
/// reports anything).
pub(crate) fn probe() -> &'static Kernel {
    static KERNEL: OnceLock<Kernel> = OnceLock::new();
    KERNEL.get_or_init(|| {
        let namespaces = |own_pids: bool| {
            move |scratch: &Path| -> io::Result<ChildPlan> {
                let hidden = scratch.join("hidden");
                let file = scratch.join("file");
                std::fs::create_dir_all(&hidden)?;
                std::fs::write(&file, "")?;
                let socket = DaemonSocket {
                    path: hidden.join("toold.sock"),
                    hidden_dir: Some(hidden),
                };
                let git = [
                    namespace::GitPath::Pinned(scratch.to_owned()),
                    namespace::GitPath::ReadOnly(file),
                ];
                let mounts = namespace::Mounts::plan(Some(&socket), &git, &[]);
                Ok(ChildPlan {
                    namespace: Some(if own_pids {
                        mounts.with_own_pids()
                    } else {
                        mounts
                    }),
                    ..ChildPlan::default()
                })
            }
        };
        let kernel = Kernel {
            landlock_abi: landlock::kernel_abi(),
            landlock: works_in_a_child("landlock", |scratch| {
                Ok(ChildPlan {
                    landlock: Some(
                        landlock::ruleset(&[scratch.to_owned()], false)
                            .map_err(io::Error::other)?,
                    ),
                    ..ChildPlan::default()
                })
            }),
            namespaces: works_in_a_child("user and mount namespaces", namespaces(false)),
            pid_namespace: works_in_a_child("a PID namespace", namespaces(true)),
            seccomp: works_in_a_child("seccomp", |_| {
                Ok(ChildPlan {
                    seccomp: Some(
                        seccomp::program(false)
                            .ok_or_else(|| io::Error::other("no filter for this architecture"))?,
                    ),
                    ..ChildPlan::default()
                })
            }),
        };
        tracing::info!(?kernel, "command sandbox probed");
        kernel
    })
}

/// Whether the commands' shell runs (`bash -c :`) with the layer `plan` makes (given a scratch
/// directory) applied between its clone and its exec, as a command's would be.
fn works_in_a_child(layer: &str, plan: impl FnOnce(&Path) -> io::Result<ChildPlan>) -> bool {
    let tried = tempfile::Builder::new()
        .prefix("toold-probe-")
        .tempdir()
        .and_then(|scratch| {
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
            child.wait_blocking()
        });
    match tried {
        Ok(status) if status.success() => true,
        Ok(status) => {
            tracing::warn!(layer, %status, "the sandbox probe's child failed");
            false
        }
        Err(err) => {
            tracing::warn!(layer, %err, "the kernel does not allow this sandbox layer here");
            false
        }
    }
}
