//! Whether a peer of the daemon's socket descends from a sandboxed command: its ancestry
//! followed up to the daemon, every link checked against pid reuse, any doubt a refusal.

use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};

use super::known_children::{CONFINED_SHELLS, KNOWN_CHILDREN, SPAWNING, is_known};
use super::proc_fs::read_stat;

/// How far up a peer's ancestry the check looks: deeper chains are refused (no client the
/// user runs is hundreds of processes below init; a chain that deep was built to slow the
/// check down).
const MAX_ANCESTRY: usize = 256;

/// Whether the process `pid` (the peer of a connection to the daemon's socket, from
/// `SO_PEERCRED`) may be part of a sandboxed command, and must not talk to the daemon. With
/// the daemon a child subreaper, every process a command started descends from the daemon: by
/// its shell (a known child), or as an orphan reparented to it (an unknown child). So the
/// peer's ancestry is followed up to the daemon: reached through a sandboxed shell or an
/// orphan, it is a command's; through a hook, a parser worker or an unsandboxed shell, it is
/// not; never reached (the user's own clients), it is not.
///
/// A pid names a process only while it lives. `peer_alive` (the peer's pidfd, taken at
/// accept) says whether the peer still does: checked after the walk, a peer alive then had
/// its pid all along, so the walk looked at the peer and not at a process that got its pid
/// after it exited (a command that connects, exits, and has its pid reused by one of the
/// user's processes). Every parent on the way must have started before its child: one that
/// did not is a reused pid. Any doubt — the peer gone, an unreadable or inconsistent chain, a
/// chain too deep — is a refusal: a connection nobody can vouch for is not served. `pid` 0 (a
/// peer in a PID namespace the daemon cannot see into) is not a command's: every command is
/// visible from the daemon's namespace.
pub(crate) fn descends_from_a_confined_command(pid: i32, peer_alive: impl Fn() -> bool) -> bool {
    if pid == 0 {
        return false;
    }
    let daemon = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut current = pid;
    let mut child_start: Option<u64> = None;
    let verdict = 'walk: {
        for _ in 0..MAX_ANCESTRY {
            if current == daemon {
                // The daemon's own connections (none today) are its own business.
                break 'walk false;
            }
            let Some(stat) = read_stat(current) else {
                break 'walk true;
            };
            if child_start.is_some_and(|child| stat.start > child) {
                // Younger than its child: the pid was reused.
                break 'walk true;
            }
            if stat.ppid == daemon {
                break 'walk is_confined_or_unknown_child(current as u32, stat.start);
            }
            if stat.ppid <= 1 {
                break 'walk false;
            }
            child_start = Some(stat.start);
            current = stat.ppid;
        }
        true
    };
    verdict || !peer_alive()
}

/// Whether the daemon's child `pid` is a sandboxed command's shell, or not a child the daemon
/// started (an orphan of some command). A child being spawned right now is waited for: its
/// registration comes with its spawn.
fn is_confined_or_unknown_child(pid: u32, start: u64) -> bool {
    let verdict = || {
        is_known(&CONFINED_SHELLS.lock_unpoisoned(), pid, Some(start))
            || !is_known(&KNOWN_CHILDREN.lock_unpoisoned(), pid, Some(start))
    };
    if is_known(&KNOWN_CHILDREN.lock_unpoisoned(), pid, Some(start)) {
        return verdict();
    }
    let _no_spawning = SPAWNING.write_unpoisoned();
    verdict()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer check: a peer that is gone when the walk ends is refused, whatever its pid
    /// now names (here init, which no command descends from).
    #[test]
    fn a_peer_gone_by_the_end_of_the_walk_is_refused() {
        assert!(!descends_from_a_confined_command(1, || true));
        assert!(descends_from_a_confined_command(1, || false));
        // A pid no process has: refused.
        assert!(descends_from_a_confined_command(i32::MAX, || true));
    }
}
