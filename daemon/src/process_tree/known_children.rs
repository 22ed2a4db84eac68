//! The children the daemon starts itself (call shells, hook programs, parser workers, MCP
//! servers): every one is spawned through [`spawn_known`] and recorded with its start time, so
//! that a sweep never takes it for an orphan and the peer check knows a sandboxed command's
//! shell. Spawning and a sweep's look at `/proc` exclude each other ([`SPAWNING`]).

use std::sync::{Mutex, RwLock};

use nix::errno::Errno;
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};

use super::proc_fs::{daemon_children, start_of};

/// A child the daemon started: its pid and, read right after the spawn, its start time. Once
/// the child has been reaped its pid may name another process (an orphan that waited for it):
/// the start time tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KnownId {
    pid: u32,
    start: Option<u64>,
}

/// Whether the process `pid` (started at `start`, when that could be read) is one of `known`.
pub(super) fn is_known(known: &[KnownId], pid: u32, start: Option<u64>) -> bool {
    known.iter().any(|child| {
        child.pid == pid
            && match (child.start, start) {
                (Some(recorded), Some(now)) => recorded == now,
                // Unreadable on either side: the process is gone, nothing to tell apart.
                _ => true,
            }
    })
}

/// Children the daemon started itself ([`spawn_known`]): call shells, hook programs, parser
/// workers. Any other child is an orphan reparented to the daemon.
pub(super) static KNOWN_CHILDREN: Mutex<Vec<KnownId>> = Mutex::new(Vec::new());

/// Held (shared) while a child is spawned and recorded; a sweep's look at `/proc` holds it
/// alone.
pub(super) static SPAWNING: RwLock<()> = RwLock::new(());

/// The known children that are shells of sandboxed commands: no process of their trees may
/// talk to the daemon
/// ([`descends_from_a_confined_command`](super::descends_from_a_confined_command)).
pub(super) static CONFINED_SHELLS: Mutex<Vec<KnownId>> = Mutex::new(Vec::new());

/// A child recorded by [`spawn_known`]; dropping it forgets the child, which must have been
/// waited for by then (or be about to be, as `kill_on_drop` does).
#[derive(Debug)]
pub struct KnownChild(u32);

impl Drop for KnownChild {
    fn drop(&mut self) {
        KNOWN_CHILDREN
            .lock_unpoisoned()
            .retain(|known| known.pid != self.0);
        CONFINED_SHELLS
            .lock_unpoisoned()
            .retain(|known| known.pid != self.0);
    }
}

/// Spawns a child of the daemon's own and records it, so that sweeps never take it for an
/// orphan of a command: every process the daemon starts goes through here. `pid` reads the
/// spawned child's pid.
pub fn spawn_known<C>(
    spawn: impl FnOnce() -> std::io::Result<C>,
    pid: impl FnOnce(&C) -> Option<u32>,
) -> std::io::Result<(C, Option<KnownChild>)> {
    spawn_known_as(false, spawn, pid)
}

/// [`spawn_known`] for a command's shell; `confined`: it runs sandboxed, and neither it nor
/// anything it starts may connect to the daemon. Recorded before any peer check can look.
pub(crate) fn spawn_known_as<C>(
    confined: bool,
    spawn: impl FnOnce() -> std::io::Result<C>,
    pid: impl FnOnce(&C) -> Option<u32>,
) -> std::io::Result<(C, Option<KnownChild>)> {
    let _spawning = SPAWNING.read_unpoisoned();
    let child = spawn()?;
    let known = pid(&child).map(|pid| {
        let id = KnownId {
            pid,
            start: start_of(pid),
        };
        KNOWN_CHILDREN.lock_unpoisoned().push(id);
        if confined {
            CONFINED_SHELLS.lock_unpoisoned().push(id);
        }
        KnownChild(pid)
    });
    Ok((child, known))
}

/// Whether the daemon has a child process, running or exited and not yet reaped, that is not
/// one of its known children. `WNOWAIT` leaves a dead one for whoever reaps it (tokio for a
/// shell, the sweep for an orphan).
pub(super) fn daemon_has_unknown_children() -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    // ECHILD: none at all. Anything else, even an error, counts as "maybe".
    if matches!(waitid(Id::All, flags), Err(Errno::ECHILD)) {
        return false;
    }
    let known = KNOWN_CHILDREN.lock_unpoisoned().clone();
    let children = daemon_children().map(|children| {
        children
            .into_iter()
            .map(|pid| (pid, start_of(pid)))
            .collect::<Vec<_>>()
    });
    any_unknown(children.as_deref(), &known)
}

/// Whether `children` (pids with their start times) holds one not in `known`; not knowing the
/// children counts as yes.
fn any_unknown(children: Option<&[(u32, Option<u64>)]>, known: &[KnownId]) -> bool {
    children.is_none_or(|children| {
        children
            .iter()
            .any(|(pid, start)| !is_known(known, *pid, *start))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast end of a command looks past the parser workers, and only past them: a child it
    /// does not know, or children it cannot list, take the full sweep.
    #[test]
    fn only_known_children_are_looked_past() {
        let known = [
            KnownId {
                pid: 41,
                start: Some(100),
            },
            KnownId {
                pid: 42,
                start: None,
            },
        ];
        assert!(!any_unknown(Some(&[]), &known));
        assert!(!any_unknown(
            Some(&[(42, Some(5)), (41, Some(100))]),
            &known
        ));
        assert!(any_unknown(Some(&[(41, Some(100)), (7, Some(1))]), &known));
        // Pid 41 reused by a process started later: not the child the daemon started.
        assert!(any_unknown(Some(&[(41, Some(250))]), &known));
        assert!(any_unknown(None, &known));
        assert!(any_unknown(None, &[]));
    }
}
