//! Installing the command's seccomp filter with a listener: the filter
//! (`sandbox::seccomp::program_with_socket_calls`) hands the daemon every system call of a
//! confined command that can reach a socket's server by its address — `connect`, `sendto`
//! with an address, `sendmsg` and `sendmmsg` (whose address is in memory a filter cannot
//! read) — and the daemon decides each (`supervisor.rs`) on the listener. The shell installs
//! it before anything else, while it still shares its parent's descriptor table, so that the
//! listener is the daemon's (`crate::spawn`).

use std::io;

use nix::libc;

/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19): once the daemon has received a
/// notification, only a fatal signal interrupts the waiting call, so that a call the daemon
/// carried out is never restarted by its caller.
const WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;
/// `SECCOMP_FILTER_FLAG_SPEC_ALLOW`: without it the kernel also turns on its speculative
/// store bypass mitigation for the command, which slowed every command measurably (the
/// filter bounds what a command does, not speculation within it).
const SPEC_ALLOW: libc::c_ulong = 1 << 2;

/// In the child (the shell, first of all): installs `program` with a listener, and returns
/// the listener's descriptor. System calls only.
#[allow(unsafe_code)]
pub(crate) fn install(program: &[libc::sock_filter]) -> io::Result<libc::c_int> {
    let filter = libc::sock_fprog {
        len: u16::try_from(program.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: prctl takes integers; seccomp reads the program `filter` points to, alive for
    // the calls.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let install = |flags: libc::c_ulong| {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | SPEC_ALLOW | flags,
                &filter as *const libc::sock_fprog,
            )
        };
        let mut listener = install(WAIT_KILLABLE_RECV);
        if listener < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // Before 5.19.
            listener = install(0);
        }
        if listener < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::c_int::try_from(listener).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
    }
}
