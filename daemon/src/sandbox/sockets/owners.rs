//! Whose a Unix socket is: the socket bound to a file, or to an abstract name, looked up in
//! the kernel's table of Unix sockets (`NETLINK_SOCK_DIAG`), and whether a process of a
//! command's own holds it — a server the command started itself, which it may reach.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

/// A socket's address as `connect` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound<'a> {
    /// A file: its device (as `stat` gives it) and inode.
    File { dev: u64, ino: u64 },
    /// An abstract name (without its leading NUL).
    Abstract(&'a [u8]),
}

/// Whether a process of the command whose init is `init` (the daemon's pid of it) holds a
/// socket bound to `bound`: `Some` copy of that socket if one does (held, the socket keeps its
/// name until the copy goes).
pub(super) fn served_by_the_command(bound: Bound<'_>, init: u32) -> io::Result<Option<OwnedFd>> {
    let sockets = sockets_bound_to(bound)?;
    if sockets.is_empty() {
        return Ok(None);
    }
    // Not the init itself: for an instant after its clone it held copies of the daemon's own
    // descriptors.
    for pid in processes_under(init).into_iter().skip(1) {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(link) = std::fs::read_link(entry.path()) else {
                continue;
            };
            let held = link
                .to_str()
                .and_then(|link| link.strip_prefix("socket:["))
                .and_then(|rest| rest.strip_suffix(']'))
                .and_then(|inode| inode.parse::<u32>().ok());
            if held.is_some_and(|inode| sockets.contains(&inode))
                && let Some(copy) = copy_of(pid, &entry.file_name())
            {
                return Ok(Some(copy));
            }
        }
    }
    Ok(None)
}

/// A copy of descriptor `name` (its number) of process `pid`.
fn copy_of(pid: u32, name: &std::ffi::OsStr) -> Option<OwnedFd> {
    let fd: libc::c_int = name.to_str()?.parse().ok()?;
    // SAFETY: plain integers.
    #[allow(unsafe_code)]
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = libc::c_int::try_from(pidfd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a new descriptor owned by nobody else.
    #[allow(unsafe_code)]
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: plain integers.
    #[allow(unsafe_code)]
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    let copy = libc::c_int::try_from(copy).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: as above.
    #[allow(unsafe_code)]
    Some(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// `init` and every process below it (the command's PID namespace: every process of it
/// descends from its init, orphans being reparented to it).
fn processes_under(init: u32) -> Vec<u32> {
    let mut found = vec![init];
    let mut at = 0;
    while at < found.len() {
        let pid = found[at];
        at += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children.split_ascii_whitespace() {
                if let Ok(child) = child.parse::<u32>()
                    && !found.contains(&child)
                {
                    found.push(child);
                }
            }
        }
    }
    found
}

// linux/sock_diag.h, linux/unix_diag.h, linux/netlink.h.
const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// A listening stream socket, and a bound datagram one.
const STATES: u32 = (1 << 10) | (1 << 7);

#[repr(C)]
struct Request {
    // struct nlmsghdr
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
    // struct unix_diag_req
    family: u8,
    protocol: u8,
    pad: u16,
    states: u32,
    ino: u32,
    show: u32,
    cookie: [u32; 2],
}

/// The inodes (in the sockets' own file system) of the Unix sockets bound to `bound`.
fn sockets_bound_to(bound: Bound<'_>) -> io::Result<HashSet<u32>> {
    // SAFETY: plain integers.
    #[allow(unsafe_code)]
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor owned by nobody else.
    #[allow(unsafe_code)]
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let request = Request {
        len: std::mem::size_of::<Request>() as u32,
        kind: SOCK_DIAG_BY_FAMILY,
        flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
        seq: 1,
        pid: 0,
        family: libc::AF_UNIX as u8,
        protocol: 0,
        pad: 0,
        states: STATES,
        ino: 0,
        show: UDIAG_SHOW_NAME | UDIAG_SHOW_VFS,
        cookie: [0; 2],
    };
    // SAFETY: the request lives on this stack for the call.
    #[allow(unsafe_code)]
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            (&request as *const Request).cast(),
            std::mem::size_of::<Request>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = HashSet::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: the buffer is this process's, of the length given.
        #[allow(unsafe_code)]
        let read = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                0,
            )
        };
        if read < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut messages = &buffer[..read as usize];
        while messages.len() >= 16 {
            let len = u32_at(messages, 0) as usize;
            let kind = u16::from_ne_bytes([messages[4], messages[5]]);
            if len < 16 || len > messages.len() {
                return Err(io::Error::other("a malformed answer of the socket table"));
            }
            match kind {
                NLMSG_DONE => return Ok(found),
                NLMSG_ERROR => {
                    let errno = i32::from_ne_bytes(
                        messages
                            .get(16..20)
                            .and_then(|bytes| bytes.try_into().ok())
                            .unwrap_or([0; 4]),
                    );
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                _ => {
                    if let Some(inode) = matching(&messages[16..len], bound) {
                        found.insert(inode);
                    }
                }
            }
            messages = &messages[align(len).min(messages.len())..];
        }
    }
}

/// A `unix_diag_msg` and its attributes: the socket's inode if it is bound to `bound`.
fn matching(message: &[u8], bound: Bound<'_>) -> Option<u32> {
    // struct unix_diag_msg: family, type, state, pad, ino (u32), cookie (2 × u32).
    let inode = u32_at(message, 4);
    let mut attributes = message.get(16..)?;
    while attributes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]);
        if len < 4 || len > attributes.len() {
            return None;
        }
        let payload = &attributes[4..len];
        match (kind, bound) {
            (UNIX_DIAG_VFS, Bound::File { dev, ino }) if payload.len() >= 8 => {
                // The inode as the kernel holds it (32 bits here), the device as the kernel
                // encodes it (major in the high 12 bits, minor in the low 20).
                let (vfs_ino, vfs_dev) = (u32_at(payload, 0), u32_at(payload, 4));
                let (major, minor) = (vfs_dev >> 20, vfs_dev & 0xfffff);
                if u64::from(vfs_ino) == ino & 0xffff_ffff
                    && u64::from(major) == u64::from(libc::major(dev))
                    && u64::from(minor) == u64::from(libc::minor(dev))
                {
                    return Some(inode);
                }
            }
            (UNIX_DIAG_NAME, Bound::Abstract(name))
                if payload.first() == Some(&0) && &payload[1..] == name =>
            {
                return Some(inode);
            }
            _ => {}
        }
        attributes = &attributes[align(len).min(attributes.len())..];
    }
    None
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|four| four.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}
