//! Reading `/proc`: the fields of a process's `stat` the sweep needs, every process on the
//! machine, and the daemon's own children. A process is known by its pid *and* its start time,
//! since a pid alone may be reused by another process between two looks.

use std::fs;

/// A process as the sweep knows it: a pid alone can be reused, a pid and start time cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ProcessId {
    pub(super) pid: i32,
    /// Clock ticks after boot (field 22 of `/proc/PID/stat`).
    start: u64,
}

/// The fields of `/proc/PID/stat` the sweep needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcStat {
    pub(super) pid: i32,
    state: u8,
    pub(super) ppid: i32,
    pub(super) pgrp: i32,
    /// Threads of the process (field 20): more than one in a process whose main thread has
    /// exited, which `/proc` then shows as a zombie although it still runs.
    threads: u32,
    pub(super) start: u64,
}

impl ProcStat {
    pub(super) fn id(&self) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start: self.start,
        }
    }

    /// Dead but not yet reaped: it cannot be killed and never runs again. A process whose
    /// main thread exited (`syscall(SYS_exit)`) shows `Z` while its other threads run on: it
    /// is alive, killable, and its children still descend from it.
    pub(super) fn is_zombie(&self) -> bool {
        (self.state == b'Z' || self.state == b'X') && self.threads <= 1
    }
}

/// Whether process `pid` exists and is not a zombie (one whose main thread exited while
/// others run counts as alive).
pub(crate) fn is_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(read_stat)
        .is_some_and(|stat| !stat.is_zombie())
}

/// The start time of process `pid`, when it can be read.
pub(super) fn start_of(pid: u32) -> Option<u64> {
    i32::try_from(pid)
        .ok()
        .and_then(read_stat)
        .map(|stat| stat.start)
}

/// The daemon's children, from `/proc/self/task/*/children`; `None` where the kernel does not
/// offer those files (built without `CONFIG_PROC_CHILDREN`), or one cannot be read.
pub(super) fn daemon_children() -> Option<Vec<u32>> {
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
pub(super) fn scan_processes() -> Vec<ProcStat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        tracing::warn!("cannot read /proc; command processes cannot be swept");
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

pub(super) fn read_stat(pid: i32) -> Option<ProcStat> {
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
}
