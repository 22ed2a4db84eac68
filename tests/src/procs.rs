//! The machine's processes as `/proc` shows them, for the tests that check what is left
//! running: every pid, a process's `stat` fields, parent, command line and environment, the
//! live ones found by command line, variable or parent (a zombie counts as dead), a process's
//! descendants, and signals sent to one.

use std::collections::BTreeSet;

/// Every process `/proc` lists now.
pub fn pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// The fields of `/proc/PID/stat` after the command name (which is in parentheses and free to
/// hold anything): the state is `[0]`, the parent `[1]`, the session `[3]`, utime and stime
/// `[11]` and `[12]`. `None` once the process is gone.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    Some(after_name.split_whitespace().map(str::to_owned).collect())
}

/// A process's state and parent.
fn state_and_parent(pid: u32) -> Option<(String, u32)> {
    let mut fields = stat_fields(pid)?.into_iter();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

fn is_alive(state: &str) -> bool {
    !matches!(state, "Z" | "X")
}

/// Whether a process is alive (a zombie counts as dead).
pub fn process_alive(pid: u32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| is_alive(&state))
}

/// A process's parent.
pub fn parent_of(pid: u32) -> Option<u32> {
    state_and_parent(pid).map(|(_, parent)| parent)
}

/// A process's command line, its arguments joined by spaces (empty once it is gone).
pub fn cmdline(pid: u32) -> String {
    String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default())
        .replace('\0', " ")
}

/// Whether a process's environment holds `variable` (`NAME=value`, exactly).
pub fn environment_holds(pid: u32, variable: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
        environ
            .split(|byte| *byte == 0)
            .any(|held| held == variable.as_bytes())
    })
}

/// The live processes `wanted` accepts.
pub fn live_processes(wanted: impl Fn(u32) -> bool) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| process_alive(*pid) && wanted(*pid))
        .collect()
}

/// The live processes whose command line contains `needle`.
pub fn live_processes_with(needle: &str) -> Vec<u32> {
    live_processes(|pid| cmdline(pid).contains(needle))
}

/// The live processes whose environment holds `variable` (`NAME=value`), with their command
/// lines.
pub fn live_processes_with_variable(variable: &str) -> Vec<(u32, String)> {
    live_processes(|pid| environment_holds(pid, variable))
        .into_iter()
        .map(|pid| (pid, cmdline(pid)))
        .collect()
}

/// The children of `parent` (zombies included) whose command line contains `needle`.
pub fn children_running(parent: u32, needle: &str) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| parent_of(*pid) == Some(parent) && cmdline(*pid).contains(needle))
        .collect()
}

/// Every process descending from `pid` (not `pid` itself).
pub fn descendants(pid: u32) -> BTreeSet<u32> {
    let parents: Vec<(u32, u32)> = pids()
        .into_iter()
        .filter_map(|child| Some((child, parent_of(child)?)))
        .collect();
    let mut found = BTreeSet::from([pid]);
    loop {
        let before = found.len();
        for (child, parent) in &parents {
            if found.contains(parent) {
                found.insert(*child);
            }
        }
        if found.len() == before {
            found.remove(&pid);
            return found;
        }
    }
}

/// The zombie children of `parent`: processes that ended (or orphans reparented to it) that
/// nobody reaped.
pub fn zombie_children(parent: u32) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| {
            state_and_parent(*pid).is_some_and(|(state, ppid)| state == "Z" && ppid == parent)
        })
        .collect()
}

/// The live shell parser workers (`shell::isolated`) whose parent is `parent`.
pub fn shell_parser_workers(parent: u32) -> Vec<u32> {
    live_processes(|pid| {
        parent_of(pid) == Some(parent)
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(b"toold-shell-parser\0"))
    })
}

/// Sends `signal` to `pid`.
pub fn send_signal(pid: u32, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, signal).expect("signal the process");
}
