//! Orphans reparented to the daemon: it makes itself their child subreaper, and reaps those
//! that died, never a child it started itself (tokio waits for those).

use std::sync::OnceLock;

use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};

use super::known_children::{KNOWN_CHILDREN, SPAWNING, is_known};
use super::proc_fs::{ProcStat, daemon_children, read_stat, scan_processes};

/// Makes the daemon a child subreaper, once; returns whether it is one. Without it the sweep
/// still works but orphans of a command go to init, where only the tag and group find them.
pub(crate) fn ensure_subreaper() -> bool {
    static SUBREAPER: OnceLock<bool> = OnceLock::new();
    *SUBREAPER.get_or_init(|| match nix::sys::prctl::set_child_subreaper(true) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(%err, "cannot become a child subreaper; orphaned command processes go to init");
            false
        }
    })
}

/// Reaps every zombie child of the daemon that it did not start: orphans reparented to it (a
/// child subreaper) that died, whichever call they came from, and whenever they died (a
/// zombie reparented after the sweep of its call is reaped here, not left to fill the pid
/// space). Never a child the daemon started: tokio waits for those.
pub(crate) fn reap_orphans() {
    let (children, known) = {
        let _no_spawning = SPAWNING.write_unpoisoned();
        (daemon_children(), KNOWN_CHILDREN.lock_unpoisoned().clone())
    };
    let daemon = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let zombies: Vec<i32> = match children {
        Some(children) => children
            .into_iter()
            .filter_map(|pid| i32::try_from(pid).ok().and_then(read_stat))
            .filter(|process| !is_known(&known, process.pid as u32, Some(process.start)))
            .filter(ProcStat::is_zombie)
            .map(|process| process.pid)
            .collect(),
        None => scan_processes()
            .into_iter()
            .filter(|process| {
                process.ppid == daemon
                    && process.is_zombie()
                    && !is_known(&known, process.pid as u32, Some(process.start))
            })
            .map(|process| process.pid)
            .collect(),
    };
    for pid in zombies {
        let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
    }
}

/// Reaps orphans ([`reap_orphans`]) whenever a child of the daemon changes state, for as long
/// as the daemon runs.
pub(crate) async fn reap_orphans_as_they_die() {
    let mut children_changed = match tokio::signal::unix::signal(
        tokio::signal::unix::SignalKind::child(),
    ) {
        Ok(signals) => signals,
        Err(err) => {
            tracing::warn!(%err, "cannot watch SIGCHLD; dead orphans are reaped only by sweeps");
            return;
        }
    };
    while children_changed.recv().await.is_some() {
        let _ = tokio::task::spawn_blocking(reap_orphans).await;
    }
}
