//! The seccomp filter of a confined command: `io_uring` refused (its operations would pass the
//! filter by), and, when the network is off, sockets of the IP families, raw packet sockets
//! and `AF_VSOCK`. Built once per
//! variant, in the daemon; the child only installs it.

use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

pub(super) type Program = BpfProgram;

/// The filter for commands with (`network`) or without IP networking; `None` on an
/// architecture the filter cannot be built for.
pub(super) fn program(network: bool) -> Option<&'static Program> {
    static WITH_NETWORK: OnceLock<Option<Program>> = OnceLock::new();
    static WITHOUT_NETWORK: OnceLock<Option<Program>> = OnceLock::new();
    let cell = if network {
        &WITH_NETWORK
    } else {
        &WITHOUT_NETWORK
    };
    cell.get_or_init(|| match build(network) {
        Ok(program) => Some(program),
        Err(err) => {
            tracing::error!(%err, "cannot build the commands' seccomp filter");
            None
        }
    })
    .as_ref()
}

fn build(network: bool) -> Result<Program, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|err| err.to_string())?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        // No condition: every call of it.
        rules.insert(call, Vec::new());
    }
    if !network {
        let family = |value: i32| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value as u64)
                .and_then(|condition| SeccompRule::new(vec![condition]))
                .map_err(|err| err.to_string())
        };
        // IP, and what reaches other machines without it: raw packets and a VM's host.
        rules.insert(
            libc::SYS_socket,
            vec![
                family(libc::AF_INET)?,
                family(libc::AF_INET6)?,
                family(libc::AF_PACKET)?,
                family(libc::AF_VSOCK)?,
            ],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|err| err.to_string())?;
    filter
        .try_into()
        .map_err(|err: seccompiler::BackendError| err.to_string())
}

/// In the child: installs the filter (and no new privileges, which it requires). System calls
/// only.
///
/// `SECCOMP_FILTER_FLAG_SPEC_ALLOW`: without it the kernel also turns on its speculative
/// store bypass mitigation for the process, which slowed every command measurably; the
/// sandbox bounds what a command may do, it is not a boundary against speculation attacks
/// between a command and itself.
#[allow(unsafe_code)]
pub(super) fn apply(program: &Program) -> io::Result<()> {
    const SECCOMP_FILTER_FLAG_SPEC_ALLOW: libc::c_ulong = 1 << 2;
    let filter = libc::sock_fprog {
        len: u16::try_from(program.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        // The same layout as libc's: the kernel's `struct sock_filter`.
        filter: program.as_ptr().cast_mut().cast::<libc::sock_filter>(),
    };
    // SAFETY: prctl takes integers; seccomp reads the program `filter` points to, alive for
    // the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            SECCOMP_FILTER_FLAG_SPEC_ALLOW,
            &filter as *const libc::sock_fprog,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
