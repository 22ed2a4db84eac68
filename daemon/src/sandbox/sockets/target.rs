//! The thread whose system call the daemon decides: its memory read, its descriptors taken,
//! and a path resolved as it would resolve it — in its own mount namespace, from its own root
//! and working directory (the daemon's view differs: the private `/tmp`, the covers).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::libc;

/// A stopped thread of a confined command, as its notification named it.
#[derive(Debug)]
pub(super) struct Target {
    /// Its thread id, in the daemon's PID namespace.
    tid: libc::pid_t,
    /// Its process's id.
    tgid: libc::pid_t,
    /// Its process, held by a pidfd (taken before the notification was checked still to be
    /// pending, so it is that process and no later one with the same pid).
    pidfd: OwnedFd,
}

impl Target {
    /// The thread `tid` (a notification's `pid`) and its process.
    pub(super) fn of(tid: u32) -> io::Result<Self> {
        let tid =
            libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let tgid = thread_group_of(tid)?;
        // SAFETY: plain integers.
        #[allow(unsafe_code)]
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid, 0) };
        let pidfd = libc::c_int::try_from(pidfd)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(io::Error::last_os_error)?;
        // SAFETY: a new descriptor owned by nobody else.
        #[allow(unsafe_code)]
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        Ok(Self { tid, tgid, pidfd })
    }

    /// `len` bytes of its memory at `address`; `EFAULT` when they cannot all be read.
    pub(super) fn read(&self, address: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buffer = vec![0u8; len];
        if len == 0 {
            return Ok(buffer);
        }
        let local = libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: address as usize as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: the local buffer is `len` bytes of this process; the kernel checks the
        // remote range against the target's memory.
        #[allow(unsafe_code)]
        let read = unsafe { libc::process_vm_readv(self.tid, &local, 1, &remote, 1, 0) };
        if read < 0 {
            return Err(io::Error::last_os_error());
        }
        if read as usize != len {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        Ok(buffer)
    }

    /// Writes `bytes` into its memory at `address` (what the call it waits in would have
    /// written).
    pub(super) fn write(&self, address: u64, bytes: &[u8]) -> io::Result<()> {
        let local = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
        let remote = libc::iovec {
            iov_base: address as usize as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        // SAFETY: the local buffer is `bytes`; the kernel checks the remote range against the
        // target's memory.
        #[allow(unsafe_code)]
        let written = unsafe { libc::process_vm_writev(self.tid, &local, 1, &remote, 1, 0) };
        if written as usize == bytes.len() {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(libc::EFAULT))
        }
    }

    /// Sends `signal` to the thread, as the kernel would have for the call it waits in.
    pub(super) fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain integers.
        #[allow(unsafe_code)]
        unsafe {
            libc::syscall(libc::SYS_tgkill, self.tgid, self.tid, signal);
        }
    }

    /// A plain value of its memory at `address`.
    pub(super) fn read_value<T: Copy>(&self, address: u64) -> io::Result<T> {
        let bytes = self.read(address, std::mem::size_of::<T>())?;
        // SAFETY: `bytes` holds exactly `size_of::<T>()` bytes, and every `T` read here is a
        // C structure of integers, valid for any bytes.
        #[allow(unsafe_code)]
        Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
    }

    /// A copy of its descriptor `fd` (the same open file: a socket connected through the copy
    /// is its socket connected).
    pub(super) fn descriptor(&self, fd: u64) -> io::Result<OwnedFd> {
        let fd =
            libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: plain integers.
        #[allow(unsafe_code)]
        let taken = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.pidfd.as_raw_fd(), fd, 0) };
        let taken = libc::c_int::try_from(taken)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(io::Error::last_os_error)?;
        // SAFETY: a new descriptor owned by nobody else.
        #[allow(unsafe_code)]
        Ok(unsafe { OwnedFd::from_raw_fd(taken) })
    }

    /// `path` opened (`O_PATH`) as the thread would reach it: from its root, or its working
    /// directory for a relative path, in its own mount namespace; symlinks are followed within
    /// its root, never out of it into the daemon's view.
    pub(super) fn open_path(&self, path: &[u8]) -> io::Result<OwnedFd> {
        let proc = PathBuf::from(format!("/proc/{}", self.tid));
        let root = open_plain(&proc.join("root"))?;
        let absolute: Vec<u8> = if path.first() == Some(&b'/') {
            path.to_vec()
        } else {
            match std::fs::read_link(proc.join("cwd")) {
                // A deleted working directory reads as "… (deleted)": not a path to use.
                Ok(cwd)
                    if cwd.is_absolute()
                        && !cwd.as_os_str().as_bytes().ends_with(b" (deleted)") =>
                {
                    let mut joined = cwd.into_os_string().into_vec();
                    joined.push(b'/');
                    joined.extend_from_slice(path);
                    joined
                }
                _ => {
                    let cwd = open_plain(&proc.join("cwd"))?;
                    return open_under(&cwd, path, RESOLVE_BENEATH);
                }
            }
        };
        open_under(&root, &absolute, RESOLVE_IN_ROOT)
    }
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// `struct open_how` (linux/openat2.h).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `path` opened (`O_PATH`, following a last symlink as `connect` does) under `dir`, with
/// `resolve`.
fn open_under(dir: &OwnedFd, path: &[u8], resolve: u64) -> io::Result<OwnedFd> {
    let path = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: resolve | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a NUL-terminated path and a structure alive for the call.
    #[allow(unsafe_code)]
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = libc::c_int::try_from(fd)
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(io::Error::last_os_error)?;
    // SAFETY: a new descriptor owned by nobody else.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A `/proc` magic link opened (it leads into the target's namespace).
fn open_plain(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)?;
    Ok(OwnedFd::from(file))
}

/// The process (thread group) of thread `tid`.
fn thread_group_of(tid: libc::pid_t) -> io::Result<libc::pid_t> {
    let status = std::fs::read(format!("/proc/{tid}/status"))?;
    status
        .split(|byte| *byte == b'\n')
        .find_map(|line| line.strip_prefix(b"Tgid:"))
        .and_then(|value| OsStr::from_bytes(value).to_str())
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}
