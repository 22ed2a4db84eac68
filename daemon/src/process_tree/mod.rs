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
//!
//! The parts: `sweep` finds and kills one call's tree; `known_children` records the children
//! the daemon starts itself; `reap` makes the daemon a subreaper and reaps its orphans;
//! `ancestry` tells a sandboxed command's peer by its ancestry; `run_tag` tags a tree's
//! processes; `proc_fs` reads `/proc`; `hardening` keeps the daemon out of its commands' reach.

mod ancestry;
mod hardening;
mod known_children;
mod proc_fs;
mod reap;
mod run_tag;
mod sweep;

pub(crate) use ancestry::descends_from_a_confined_command;
pub(crate) use hardening::{inherit_no_descriptors, inherited_env, keep_out_of_reach};
pub(crate) use known_children::spawn_known_as;
pub use known_children::{KnownChild, spawn_known};
pub(crate) use proc_fs::is_alive;
pub(crate) use reap::{ensure_subreaper, reap_orphans_as_they_die};
pub(crate) use run_tag::{RUN_TAG_VAR, new_run_tag, tagged_command};
pub(crate) use sweep::{ProcessTree, SweepReport};
