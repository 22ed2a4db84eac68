//! The seccomp filter that hands the daemon every system call of a confined command that can
//! reach a socket's server by its address: `connect`, `sendto` with an address, `sendmsg` and
//! `sendmmsg` (whose address is in memory a filter cannot read). The daemon decides each
//! (`supervisor.rs`); everything else passes. Installed by the command's init, whose
//! descendants all inherit it, with a listener the daemon takes from the init.

use std::io;

use nix::libc;

/// `SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV` (Linux 5.19): once the daemon has received a
/// notification, only a fatal signal interrupts the waiting call, so that a call the daemon
/// carried out is never restarted by its caller.
const WAIT_KILLABLE_RECV: libc::c_ulong = 1 << 5;

/// The filter's program for this architecture; `None` where it has none.
pub(crate) fn program() -> Option<&'static [libc::sock_filter]> {
    static PROGRAM: std::sync::OnceLock<Option<Vec<libc::sock_filter>>> =
        std::sync::OnceLock::new();
    PROGRAM.get_or_init(build).as_deref()
}

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn build() -> Option<Vec<libc::sock_filter>> {
    // `struct seccomp_data`: nr at 0, arch at 4, args from 16, eight bytes each (the low word
    // first on these little-endian architectures).
    const NR: u32 = 0;
    const ARCH: u32 = 4;
    const ARG4_LOW: u32 = 16 + 4 * 8;
    const ARG4_HIGH: u32 = ARG4_LOW + 4;
    /// x86-64's x32 ABI numbers its calls with this bit set, which the comparisons below would
    /// not see; aarch64 has no such numbers.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let load = |offset: u32| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    let jump = |op: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ret = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let number = |call: libc::c_long| u32::try_from(call).ok();
    let (connect, sendmsg, sendmmsg, sendto) = (
        number(libc::SYS_connect)?,
        number(libc::SYS_sendmsg)?,
        number(libc::SYS_sendmmsg)?,
        number(libc::SYS_sendto)?,
    );
    // Laid out with the returns last: ALLOW at 12, NOTIFY at 13, ENOSYS at 14, KILL at 15; a
    // jump of N skips N instructions.
    Some(vec![
        /* 0 */ load(ARCH),
        /* 1 */ jump(libc::BPF_JEQ, AUDIT_ARCH, 0, 13),
        /* 2 */ load(NR),
        /* 3 */ jump(libc::BPF_JGE, X32_SYSCALL_BIT, 10, 0),
        /* 4 */ jump(libc::BPF_JEQ, connect, 8, 0),
        /* 5 */ jump(libc::BPF_JEQ, sendmsg, 7, 0),
        /* 6 */ jump(libc::BPF_JEQ, sendmmsg, 6, 0),
        /* 7 */ jump(libc::BPF_JEQ, sendto, 0, 4),
        /* 8 */ load(ARG4_LOW),
        /* 9 */ jump(libc::BPF_JEQ, 0, 0, 3),
        /* 10 */ load(ARG4_HIGH),
        /* 11 */ jump(libc::BPF_JEQ, 0, 0, 1),
        /* 12 */ ret(libc::SECCOMP_RET_ALLOW),
        /* 13 */ ret(libc::SECCOMP_RET_USER_NOTIF),
        /* 14 */ ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        /* 15 */ ret(libc::SECCOMP_RET_KILL_PROCESS),
    ])
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn build() -> Option<Vec<libc::sock_filter>> {
    None
}

/// In the child (the command's init, before it starts the shell): installs `program` with a
/// listener, and returns the listener's descriptor. System calls only.
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
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | flags,
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
