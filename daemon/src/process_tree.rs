//! Killing a command's whole process tree, escapees included, without cgroups.
//!
//! A process group is not enough: a descendant that calls `setsid`, or double-forks and loses
//! its parent, leaves the shell's group or its ancestry. On machines without a writable cgroup
//! v2 we use the technique of Jenkins' ProcessTreeKiller, made sturdier by a child subreaper:
//!
//! - The daemon marks itself a child subreaper (`PR_SET_CHILD_SUBREAPER`, once, lazily when the
//!   first command runs), so orphans of its commands are reparented to the daemon instead of
//!   init and stay visible (as its children, or its zombies) until the daemon reaps them.
//! - Every call's processes carry the environment variable [`RUN_TAG_VAR`] with a value unique to
//!   the call. The daemon sets it deliberately (it is the one `TOOLD_*` variable a command sees);
//!   a command that overrides it or clears its environment (`env -i`) loses the tag, and is then
//!   caught only while it is in the group or a descendant of a process still in the tree.
//! - [`ProcessTree::terminate`] sweeps `/proc`: a process belongs to the call when it is in the
//!   shell's process group, carries the tag (read from `/proc/PID/environ`, same uid only), was
//!   found in an earlier sweep, or descends from any of those (ppid links from `/proc/PID/stat`).
//!   It sends SIGTERM (and SIGCONT, so stopped processes can act on it), waits a grace period
//!   while sweeping again for processes forked meanwhile, then sends SIGKILL in bounded rounds
//!   until a sweep finds nothing alive (zombies are dead).
//! - Processes are identified by pid *and* start time, so a pid reused by an unrelated process
//!   between sweeps is never mistaken for a member; the shell's group is only signalled while
//!   no other process holds the shell's pid. What remains is the kernel-wide race of any
//!   `/proc`-based killer: a member may exit and its pid be reused between one scan and the
//!   `kill` microseconds later.
//! - Every child the daemon starts itself (call shells, hook programs, parser workers) is
//!   started through [`spawn_known`], which records it. Any other living child of the daemon
//!   was reparented to it: an orphan that escaped some call's group and tag (`env -i setsid sh
//!   -c 'sleep 999 &'`). A sweep takes such an orphan as a member unless it carries the tag of
//!   another call still running (that call sweeps it), so nothing outlives the call that made
//!   it. Spawning and the sweep's look at `/proc` exclude each other, so a child between its
//!   fork and its registration is never taken for an orphan.
//! - Once no member is alive, the daemon's own children are watched for a moment more: an
//!   escaped chain whose links fork and exit faster than a sweep of `/proc` is killed there.
//! - Zombies reparented to the daemon are reaped with `waitpid(pid, WNOHANG)`: by the sweeps,
//!   and by [`reap_orphans_as_they_die`] on every SIGCHLD; never a child the daemon started
//!   (the shell, a hook, a worker): tokio owns those and waits for them.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid, waitpid};
use nix::unistd::{Pid, geteuid};
use toold_protocol::sync::{LockUnpoisoned, RwLockUnpoisoned};

/// The environment variable that tags every process of one `run_command` call.
pub const RUN_TAG_VAR: &str = "TOOLD_RUN_TAG";

/// The daemon's environment as the processes it spawns inherit it: without the socket
/// activation and watchdog handshakes meant for the daemon (`LISTEN_*`, `NOTIFY_SOCKET`,
/// `WATCHDOG_*`), without the daemon's own settings (`TOOLD_*`) and without the secrets the
/// config names ([`crate::secrets`]: an MCP server's `bearer_token_env`, or any variable
/// holding a configured secret's value).
pub fn inherited_env() -> impl Iterator<Item = (OsString, OsString)> {
    let secrets = crate::secrets::current();
    std::env::vars_os()
        .filter(move |(name, value)| is_inherited(name) && !secrets.withhold(name, value))
}

fn is_inherited(name: &OsStr) -> bool {
    let name = name.as_bytes();
    !(name.starts_with(b"LISTEN_")
        || name == b"NOTIFY_SOCKET"
        || name.starts_with(b"WATCHDOG_")
        || name.starts_with(b"TOOLD_"))
}

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

/// Makes the daemon a child subreaper, once; returns whether it is one. Without it the sweep
/// still works but orphans of a command go to init, where only the tag and group find them.
pub fn ensure_subreaper() -> bool {
    static SUBREAPER: OnceLock<bool> = OnceLock::new();
    *SUBREAPER.get_or_init(|| match nix::sys::prctl::set_child_subreaper(true) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(%err, "cannot become a child subreaper; orphaned command processes go to init");
            false
        }
    })
}

/// Makes this process non-dumpable: processes of the same uid (every command the daemon runs)
/// can then no longer read its `/proc/PID/environ`, `mem` or `fd`, nor ptrace it; root keeps
/// that power. Children get it back when they exec, so commands are unaffected.
pub fn keep_out_of_reach() {
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%err, "cannot make the process non-dumpable; commands of the same uid can read its memory");
    }
}

/// Marks every descriptor this process inherited above 2 close-on-exec, so that no command,
/// parser worker or hook the daemon starts gets one: whatever started the daemon may have left
/// it a pipe or a socket (a listening socket passed by systemd included) that a command could
/// write to or accept on. Descriptors the daemon opens itself are close-on-exec already.
#[allow(unsafe_code)]
pub fn inherit_no_descriptors() {
    // SAFETY: close_range takes plain integers and touches no memory of ours.
    let marked =
        unsafe { nix::libc::close_range(3, u32::MAX, nix::libc::CLOSE_RANGE_CLOEXEC as i32) };
    if marked != 0 {
        let err = std::io::Error::last_os_error();
        tracing::warn!(%err, "cannot mark inherited descriptors close-on-exec; commands may inherit them");
    }
}

/// A value for [`RUN_TAG_VAR`] unique to one call: unique within the daemon by the counter,
/// across daemons by the pid and the clock.
pub fn new_run_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let serial = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or_default();
    format!("{}-{serial}-{nanos:x}", std::process::id())
}

/// A process as the sweep knows it: a pid alone can be reused, a pid and start time cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProcessId {
    pid: i32,
    /// Clock ticks after boot (field 22 of `/proc/PID/stat`).
    start: u64,
}

/// The fields of `/proc/PID/stat` the sweep needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcStat {
    pid: i32,
    state: u8,
    ppid: i32,
    pgrp: i32,
    /// Threads of the process (field 20): more than one in a process whose main thread has
    /// exited, which `/proc` then shows as a zombie although it still runs.
    threads: u32,
    start: u64,
}

impl ProcStat {
    fn id(&self) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start: self.start,
        }
    }

    /// Dead but not yet reaped: it cannot be killed and never runs again. A process whose
    /// main thread exited (`syscall(SYS_exit)`) shows `Z` while its other threads run on: it
    /// is alive, killable, and its children still descend from it.
    fn is_zombie(&self) -> bool {
        (self.state == b'Z' || self.state == b'X') && self.threads <= 1
    }
}

/// What a call of [`ProcessTree::terminate`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Processes other than the shell that were sent a signal.
    pub signaled: usize,
    /// Processes still alive when the sweep gave up (0 unless something outran it).
    pub survivors: usize,
}

/// The processes of one call: the shell (leader of its own group), its group, its descendants
/// and every process carrying the call's tag.
#[derive(Debug)]
pub struct ProcessTree {
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
    pub fn new(leader_pid: u32, tag: &str) -> Self {
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
    pub fn terminate(&mut self, grace: Duration) -> SweepReport {
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
    pub fn nothing_can_be_left(&self) -> bool {
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

/// A child the daemon started: its pid and, read right after the spawn, its start time. Once
/// the child has been reaped its pid may name another process (an orphan that waited for it):
/// the start time tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KnownId {
    pid: u32,
    start: Option<u64>,
}

/// Whether the process `pid` (started at `start`, when that could be read) is one of `known`.
fn is_known(known: &[KnownId], pid: u32, start: Option<u64>) -> bool {
    known.iter().any(|child| {
        child.pid == pid
            && match (child.start, start) {
                (Some(recorded), Some(now)) => recorded == now,
                // Unreadable on either side: the process is gone, nothing to tell apart.
                _ => true,
            }
    })
}

/// The start time of process `pid`, when it can be read.
fn start_of(pid: u32) -> Option<u64> {
    i32::try_from(pid)
        .ok()
        .and_then(read_stat)
        .map(|stat| stat.start)
}

/// Children the daemon started itself ([`spawn_known`]): call shells, hook programs, parser
/// workers. Any other child is an orphan reparented to the daemon.
static KNOWN_CHILDREN: Mutex<Vec<KnownId>> = Mutex::new(Vec::new());

/// The tags (`TOOLD_RUN_TAG=…` entries) of the calls whose trees are alive.
static LIVE_TAGS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Held (shared) while a child is spawned and recorded; a sweep's look at `/proc` holds it
/// alone.
static SPAWNING: RwLock<()> = RwLock::new(());

/// The known children that are shells of sandboxed commands: no process of their trees may
/// talk to the daemon ([`descends_from_a_confined_command`]).
static CONFINED_SHELLS: Mutex<Vec<KnownId>> = Mutex::new(Vec::new());

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

/// The command for a program the daemon runs beside calls (a hook, an MCP server): started
/// directly (no shell) with `env` only and the tag of its own tree, its stdio piped, in a
/// process group of its own, killed if dropped. The daemon is made a child subreaper first, so
/// that whatever the program leaves behind stays findable by its tree's sweep.
pub fn tagged_command<K, V>(
    program: &str,
    env: impl IntoIterator<Item = (K, V)>,
    tag: &str,
) -> tokio::process::Command
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    ensure_subreaper();
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .envs(env)
        .env(RUN_TAG_VAR, tag)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
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
pub fn spawn_known_as<C>(
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
pub fn descends_from_a_confined_command(pid: i32, peer_alive: impl Fn() -> bool) -> bool {
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

/// Reaps every zombie child of the daemon that it did not start: orphans reparented to it (a
/// child subreaper) that died, whichever call they came from, and whenever they died (a
/// zombie reparented after the sweep of its call is reaped here, not left to fill the pid
/// space). Never a child the daemon started: tokio waits for those.
pub fn reap_orphans() {
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
pub async fn reap_orphans_as_they_die() {
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

/// Whether the daemon has a child process, running or exited and not yet reaped, that is not
/// one of its known children. `WNOWAIT` leaves a dead one for whoever reaps it (tokio for a
/// shell, the sweep for an orphan).
fn daemon_has_unknown_children() -> bool {
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

/// The daemon's children, from `/proc/self/task/*/children`; `None` where the kernel does not
/// offer those files (built without `CONFIG_PROC_CHILDREN`), or one cannot be read.
fn daemon_children() -> Option<Vec<u32>> {
    let mut children = Vec::new();
    for task in fs::read_dir("/proc/self/task").ok()? {
        let listed = fs::read_to_string(task.ok()?.path().join("children")).ok()?;
        children.extend(
            listed
                .split_whitespace()
                .filter_map(|pid| pid.parse::<u32>().ok()),
        );
    }
    Some(children)
}

/// Every process in `/proc` whose stat could be read (a process may exit while we look).
fn scan_processes() -> Vec<ProcStat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        tracing::warn!("cannot read /proc; command processes cannot be swept");
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

fn read_stat(pid: i32) -> Option<ProcStat> {
    // One read into a buffer that holds the fields we parse whatever their width (up to
    // `starttime`, field 22, is well under 2 KiB): `fs::read` would stat the file and grow its
    // buffer over several reads, and the sweep reads every process on the machine.
    let mut buffer = [0u8; 2048];
    let mut file = fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let read = std::io::Read::read(&mut file, &mut buffer).ok()?;
    parse_stat(pid, &buffer[..read])
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid pgrp session … starttime …`. The command
/// name may hold spaces, parentheses and invalid UTF-8, so the fields start after the last `)`.
fn parse_stat(pid: i32, raw: &[u8]) -> Option<ProcStat> {
    let after_comm = raw.iter().rposition(|byte| *byte == b')')?;
    let rest = std::str::from_utf8(raw.get(after_comm + 1..)?).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // Field n of proc(5) is fields[n - 3]: state is field 3, starttime field 22.
    let state = *fields.first()?.as_bytes().first()?;
    Some(ProcStat {
        pid,
        state,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        threads: fields.get(17)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
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

    #[test]
    fn filters_the_daemons_own_variables() {
        for name in [
            "LISTEN_FDS",
            "LISTEN_PID",
            "LISTEN_FDNAMES",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
            "WATCHDOG_PID",
            "TOOLD_SOCKET",
            "TOOLD_RUN_TAG",
        ] {
            assert!(!is_inherited(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "LISTEN", "NOTIFY_SOCKETS_X", "MY_TOOLD_X"] {
            assert!(is_inherited(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn parses_stat_with_a_hostile_command_name() {
        let raw =
            b"4242 (a) b (c) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        let stat = parse_stat(4242, raw).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 4242,
                state: b'S',
                ppid: 1,
                pgrp: 4242,
                threads: 1,
                start: 987654
            }
        );
    }

    /// A process whose main thread exited while others run shows `Z` with its threads
    /// counted: alive. A real zombie has no thread but its dead leader.
    #[test]
    fn a_zombie_leader_with_threads_is_alive() {
        let stat = |state: &str, threads: u32| {
            let raw = format!("7 (x) {state} 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 {threads} 0 5 1 2");
            parse_stat(7, raw.as_bytes()).unwrap()
        };
        assert!(stat("Z", 1).is_zombie());
        assert!(!stat("Z", 2).is_zombie());
        assert!(!stat("S", 1).is_zombie());
    }

    /// The peer check: a peer that is gone when the walk ends is refused, whatever its pid
    /// now names (here init, which no command descends from).
    #[test]
    fn a_peer_gone_by_the_end_of_the_walk_is_refused() {
        assert!(!descends_from_a_confined_command(1, || true));
        assert!(descends_from_a_confined_command(1, || false));
        // A pid no process has: refused.
        assert!(descends_from_a_confined_command(i32::MAX, || true));
    }

    #[test]
    fn refuses_a_truncated_stat() {
        assert_eq!(parse_stat(1, b"1 (init) S 0 1"), None);
        assert_eq!(parse_stat(1, b"garbage"), None);
    }

    #[test]
    fn reads_its_own_stat() {
        let me = read_stat(std::process::id() as i32).unwrap();
        assert!(!me.is_zombie());
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw());
    }

    #[test]
    fn run_tags_are_unique() {
        assert_ne!(new_run_tag(), new_run_tag());
    }
}
