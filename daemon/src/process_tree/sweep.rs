//! One call's process tree and its termination: sweeps of `/proc` find its members (its
//! group, its tag, its descendants, orphans that escaped both), signal them (SIGTERM, a grace,
//! then SIGKILL in bounded rounds) and reap the dead among the daemon's orphans.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{Pid, geteuid};
use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};

use super::known_children::{
    KNOWN_CHILDREN, KnownId, SPAWNING, daemon_has_unknown_children, is_known,
};
use super::proc_fs::{ProcStat, ProcessId, daemon_children, read_stat, scan_processes, start_of};
use super::reap::ensure_subreaper;
use super::run_tag::RUN_TAG_VAR;

/// How often the sweep looks again while members still have their SIGTERM grace.
const TERM_POLL: Duration = Duration::from_millis(20);
/// How long the kernel gets to deliver a SIGKILL before the next sweep looks.
const KILL_POLL: Duration = Duration::from_millis(10);
/// How long [`ProcessTree::chase_escaped_chains`] may take at most.
const CHASE_LIMIT: Duration = Duration::from_secs(2);
/// Looks at the daemon's children that must find nothing to kill before the chase ends, and
/// the pause between them: a link of a chain forks its successor within this time.
const CHASE_QUIET_LOOKS: u32 = 3;
const CHASE_PAUSE: Duration = Duration::from_millis(2);
/// SIGKILL rounds before giving up: each round kills everything found, so only a process that
/// forks faster than we sweep (a fork bomb outside the group and without the tag) outlasts it.
const MAX_KILL_ROUNDS: usize = 50;

/// What a call of [`ProcessTree::terminate`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SweepReport {
    /// Processes other than the shell that were sent a signal.
    pub signaled: usize,
    /// Processes still alive when the sweep gave up (0 unless something outran it).
    pub survivors: usize,
}

/// The processes of one call: the shell (leader of its own group), its group, its descendants
/// and every process carrying the call's tag.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    leader_pid: i32,
    /// The shell's start time, read right after spawning it; `None` if that failed, and then
    /// the pid alone identifies it.
    leader_start: Option<u64>,
    /// `TOOLD_RUN_TAG=<tag>`, as it appears between NULs in `/proc/PID/environ`.
    tag_entry: Vec<u8>,
    daemon_pid: i32,
    uid: u32,
    /// Every process found in an earlier sweep: they stay members after losing their parent.
    members: HashSet<ProcessId>,
    /// Processes whose environment was read and lacks the tag. Their environment changes only
    /// when they exec one they built themselves, and a process that never had the tag has no
    /// way to know it, so the answer is kept rather than read again on every sweep.
    untagged: HashSet<ProcessId>,
    /// Whether the shell's pid still names the shell (or nothing), so its group is ours.
    leader_trusted: bool,
}

impl ProcessTree {
    /// The tree of the shell just spawned as `leader_pid` (its own group leader) with `tag`.
    /// The tag counts as a running call's until the tree is dropped.
    pub(crate) fn new(leader_pid: u32, tag: &str) -> Self {
        let tag_entry = format!("{RUN_TAG_VAR}={tag}").into_bytes();
        LIVE_TAGS.lock_unpoisoned().push(tag_entry.clone());
        // Pids fit in i32 (the kernel's pid_max is at most 2^22); a pid that did not would
        // name no process, and the sweep would find nothing under it.
        let leader_pid = i32::try_from(leader_pid).unwrap_or(i32::MAX);
        let leader_start = read_stat(leader_pid).map(|stat| stat.start);
        Self {
            leader_pid,
            leader_start,
            tag_entry,
            daemon_pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            uid: geteuid().as_raw(),
            members: HashSet::new(),
            untagged: HashSet::new(),
            leader_trusted: true,
        }
    }

    /// Kills every process of the call: SIGTERM, up to `grace` for them to exit, then SIGKILL
    /// until a sweep finds none alive (bounded). Blocking: it sleeps between sweeps.
    pub(crate) fn terminate(&mut self, grace: Duration) -> SweepReport {
        if self.nothing_can_be_left() {
            return self.report(&HashSet::new(), 0);
        }
        let mut signaled: HashSet<ProcessId> = HashSet::new();
        let grace_ends = Instant::now() + grace;
        let mut group_signaled = false;
        loop {
            let alive = self.sweep();
            if alive.is_empty() {
                self.chase_escaped_chains(&mut signaled);
                return self.report(&signaled, 0);
            }
            if !group_signaled {
                self.signal_group(Signal::SIGTERM);
                self.signal_group(Signal::SIGCONT);
                group_signaled = true;
            }
            for process in &alive {
                // Each member gets one SIGTERM: a second could re-run a handler it trapped.
                if signaled.insert(*process) {
                    signal(process.pid, Signal::SIGTERM);
                    signal(process.pid, Signal::SIGCONT);
                }
            }
            if Instant::now() >= grace_ends {
                break;
            }
            std::thread::sleep(TERM_POLL);
        }
        for _ in 0..MAX_KILL_ROUNDS {
            let alive = self.sweep();
            if alive.is_empty() {
                self.chase_escaped_chains(&mut signaled);
                return self.report(&signaled, 0);
            }
            self.signal_group(Signal::SIGKILL);
            for process in &alive {
                signaled.insert(*process);
                signal(process.pid, Signal::SIGKILL);
            }
            std::thread::sleep(KILL_POLL);
        }
        let survivors = self.sweep().len();
        tracing::warn!(
            shell = self.leader_pid,
            survivors,
            "processes of a command outlived every SIGKILL round"
        );
        self.report(&signaled, survivors)
    }

    /// Whether no process of the call can still be alive, known from a few system calls
    /// instead of a look at every process on the machine (the common end of a short command).
    /// With the daemon a child subreaper, whatever the shell left behind is in its process
    /// group or was reparented to the daemon: so if the group is empty and the daemon has no
    /// child (living or dead) but its own long-lived ones (the shell parser workers), nothing
    /// is left. Any doubt (another call's shell, a hook, a member seen before, no subreaper, a
    /// kernel that does not list a process's children) takes the full sweep.
    pub(crate) fn nothing_can_be_left(&self) -> bool {
        if !ensure_subreaper() || !self.members.is_empty() {
            return false;
        }
        let group_empty = kill(Pid::from_raw(-self.leader_pid), None) == Err(Errno::ESRCH);
        group_empty && !daemon_has_unknown_children()
    }

    fn report(&self, signaled: &HashSet<ProcessId>, survivors: usize) -> SweepReport {
        SweepReport {
            signaled: signaled
                .iter()
                .filter(|process| process.pid != self.leader_pid)
                .count(),
            survivors,
        }
    }

    /// Kills escaped orphans that keep forking their successor and exiting (a chain of
    /// `( … ) &`): each link lives for well under a millisecond, shorter than a sweep of
    /// `/proc`, so a sweep may always miss the newest. Here only the daemon's own children are
    /// read, which takes microseconds, and every escaped orphan among them is killed at once,
    /// until the daemon has none left (bounded). Zombies among them are reaped as it goes.
    fn chase_escaped_chains(&mut self, signaled: &mut HashSet<ProcessId>) {
        let deadline = Instant::now() + CHASE_LIMIT;
        let mut quiet_looks = 0;
        while quiet_looks < CHASE_QUIET_LOOKS && Instant::now() < deadline {
            let (children, known) = {
                let _no_spawning = SPAWNING.write_unpoisoned();
                (daemon_children(), KNOWN_CHILDREN.lock_unpoisoned().clone())
            };
            // Without the children files the sweeps above are all there is.
            let Some(children) = children else { return };
            let unknown: Vec<u32> = children
                .into_iter()
                .filter(|pid| !is_known(&known, *pid, start_of(*pid)))
                .collect();
            // Every escaped process descends from a child of the daemon it did not start:
            // with none, nothing escaped is left (the common case costs one look).
            if unknown.is_empty() {
                return;
            }
            let mut killed = false;
            for pid in unknown {
                let Some(process) = i32::try_from(pid).ok().and_then(read_stat) else {
                    continue;
                };
                if process.is_zombie() {
                    let _ = waitpid(Pid::from_raw(process.pid), Some(WaitPidFlag::WNOHANG));
                } else if self.is_escaped_orphan(&process, &known) {
                    signal(process.pid, Signal::SIGKILL);
                    signaled.insert(process.id());
                    killed = true;
                }
            }
            if killed {
                quiet_looks = 0;
            } else {
                quiet_looks += 1;
                std::thread::sleep(CHASE_PAUSE);
            }
        }
    }

    /// One look at `/proc`: records the members, reaps the members that are our zombies, and
    /// returns the members still alive.
    fn sweep(&mut self) -> Vec<ProcessId> {
        // No child is spawned while we look: one between its fork and its registration would
        // look like an orphan.
        let (processes, known) = {
            let _no_spawning = SPAWNING.write_unpoisoned();
            (scan_processes(), KNOWN_CHILDREN.lock_unpoisoned().clone())
        };
        let alive = self.collect_members(&processes, &known);
        self.reap_zombies(&processes, &known);
        alive
    }

    fn collect_members(&mut self, processes: &[ProcStat], known: &[KnownId]) -> Vec<ProcessId> {
        self.leader_trusted = match self.leader_start {
            Some(start) => processes
                .iter()
                .find(|process| process.pid == self.leader_pid)
                .is_none_or(|process| process.start == start),
            None => true,
        };
        let mut found: HashSet<ProcessId> = HashSet::new();
        for process in processes {
            if process.pid == self.daemon_pid {
                continue;
            }
            let in_group = self.leader_trusted
                && (process.pid == self.leader_pid || process.pgrp == self.leader_pid);
            if in_group
                || self.members.contains(&process.id())
                || self.carries_tag(process)
                || self.is_escaped_orphan(process, known)
            {
                found.insert(process.id());
            }
        }
        self.add_descendants(processes, &mut found);
        self.members.extend(found.iter().copied());
        processes
            .iter()
            .filter(|process| !process.is_zombie() && found.contains(&process.id()))
            .map(ProcStat::id)
            .collect()
    }

    /// Adds every descendant of a process in `found`: whatever it forked belongs to the call,
    /// tag or not.
    fn add_descendants(&self, processes: &[ProcStat], found: &mut HashSet<ProcessId>) {
        let mut children: HashMap<i32, Vec<ProcessId>> = HashMap::new();
        for process in processes {
            if process.pid != self.daemon_pid {
                children.entry(process.ppid).or_default().push(process.id());
            }
        }
        let mut pending: Vec<i32> = found.iter().map(|process| process.pid).collect();
        while let Some(parent) = pending.pop() {
            for child in children.get(&parent).into_iter().flatten() {
                if found.insert(*child) {
                    pending.push(child.pid);
                }
            }
        }
    }

    /// A living child of the daemon it did not start, and that no other running call claims by
    /// its tag: it was reparented here after escaping a call's group and tag.
    fn is_escaped_orphan(&self, process: &ProcStat, known: &[KnownId]) -> bool {
        if process.ppid != self.daemon_pid
            || process.is_zombie()
            || self.is_the_shell(process)
            || is_known(known, process.pid as u32, Some(process.start))
        {
            return false;
        }
        let Ok(environ) = fs::read(format!("/proc/{}/environ", process.pid)) else {
            // Unreadable (another user's setuid program, or it just exited): still an orphan.
            return true;
        };
        let live = LIVE_TAGS.lock_unpoisoned();
        !environ
            .split(|byte| *byte == 0)
            .any(|entry| entry != self.tag_entry.as_slice() && live.iter().any(|tag| tag == entry))
    }

    fn carries_tag(&mut self, process: &ProcStat) -> bool {
        if process.is_zombie() || self.untagged.contains(&process.id()) {
            return false;
        }
        // Everything that carries the tag was born after the shell that first had it.
        if self.leader_start.is_some_and(|start| process.start < start) {
            return false;
        }
        let path = format!("/proc/{}", process.pid);
        // Only our own user's processes: others cannot carry our tag unless a setuid program
        // passed it on, and their environment is none of our business.
        match fs::metadata(&path) {
            Ok(meta) if meta.uid() == self.uid => {}
            _ => return false,
        }
        let Ok(environ) = fs::read(format!("{path}/environ")) else {
            return false;
        };
        let tagged = environ
            .split(|byte| *byte == 0)
            .any(|entry| entry == self.tag_entry.as_slice());
        if !tagged {
            self.untagged.insert(process.id());
        }
        tagged
    }

    /// Reaps members that died as the daemon's children (orphans reparented to the subreaper),
    /// and orphans that died before any sweep saw them alive (born after the shell, started by
    /// no one the daemon knows). Never the shell, whose status tokio collects, and never a
    /// child the daemon started, which may be another call's shell.
    /// Whether `process` is the call's shell itself, not a process that got its pid after the
    /// shell was reaped.
    fn is_the_shell(&self, process: &ProcStat) -> bool {
        process.pid == self.leader_pid
            && self.leader_start.is_none_or(|start| start == process.start)
    }

    fn reap_zombies(&self, processes: &[ProcStat], known: &[KnownId]) {
        let born_in_this_call = |process: &ProcStat| {
            self.leader_start
                .is_some_and(|start| process.start >= start)
        };
        for process in processes {
            if process.is_zombie()
                && process.ppid == self.daemon_pid
                && !self.is_the_shell(process)
                && !is_known(known, process.pid as u32, Some(process.start))
                && (self.members.contains(&process.id()) || born_in_this_call(process))
            {
                // ECHILD (someone else reaped it) and the like leave nothing to do.
                let _ = waitpid(Pid::from_raw(process.pid), Some(WaitPidFlag::WNOHANG));
            }
        }
    }

    fn signal_group(&self, signal: Signal) {
        if self.leader_trusted {
            // ESRCH (the group is empty) and EPERM leave nothing to do.
            let _ = killpg(Pid::from_raw(self.leader_pid), signal);
        }
    }
}

impl Drop for ProcessTree {
    fn drop(&mut self) {
        let mut live = LIVE_TAGS.lock_unpoisoned();
        if let Some(at) = live.iter().position(|tag| *tag == self.tag_entry) {
            live.swap_remove(at);
        }
    }
}

fn signal(pid: i32, signal: Signal) {
    // ESRCH: it exited since the scan, which is what we want.
    let _ = kill(Pid::from_raw(pid), signal);
}

/// The tags (`TOOLD_RUN_TAG=…` entries) of the calls whose trees are alive.
static LIVE_TAGS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
