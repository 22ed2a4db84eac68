//! The seccomp filter of a confined command: `io_uring` refused (its operations would pass the
//! filter by), the kernel's keyrings refused, and, when the network is off, sockets of every
//! family but the local ones (Unix, netlink, the kernel's crypto). Built once per variant, in
//! the daemon; the child only installs it.

use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
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
    cell.get_or_init(|| match build(network, false) {
        Ok(program) => Some(program),
        Err(err) => {
            tracing::error!(%err, "cannot build the commands' seccomp filter");
            None
        }
    })
    .as_ref()
}

/// [`program`] that also hands the daemon every call that can reach a socket's server by
/// its address (`connect`, `sendto` with an address, `sendmsg`, `sendmmsg`:
/// `SECCOMP_RET_USER_NOTIF`), as the kernel's filter type (installed with a listener by the
/// shell, [`super::sockets::filter::install`]).
pub(crate) fn program_with_socket_calls(network: bool) -> Option<&'static [libc::sock_filter]> {
    static WITH_NETWORK: OnceLock<Option<Vec<libc::sock_filter>>> = OnceLock::new();
    static WITHOUT_NETWORK: OnceLock<Option<Vec<libc::sock_filter>>> = OnceLock::new();
    let cell = if network {
        &WITH_NETWORK
    } else {
        &WITHOUT_NETWORK
    };
    cell.get_or_init(|| match build(network, true) {
        Ok(program) => Some(
            program
                .into_iter()
                .map(|instruction| libc::sock_filter {
                    code: instruction.code,
                    jt: instruction.jt,
                    jf: instruction.jf,
                    k: instruction.k,
                })
                .collect(),
        ),
        Err(err) => {
            tracing::error!(%err, "cannot build the commands' seccomp filter");
            None
        }
    })
    .as_deref()
}

fn build(network: bool, socket_calls: bool) -> Result<Program, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|err| err.to_string())?;
    let rules = rules(network)?;
    let filtered: Vec<u32> = rules
        .keys()
        .map(|&call| u32::try_from(call).map_err(|err| err.to_string()))
        .collect::<Result<_, _>>()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|err| err.to_string())?;
    let program: Program = filter
        .try_into()
        .map_err(|err: seccompiler::BackendError| err.to_string())?;
    with_fast_path(program, &filtered, socket_calls)
}

/// The system calls filtered, each with the rules under which it is refused.
fn rules(network: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        // No condition: every call of it.
        rules.insert(call, Vec::new());
    }
    // The kernel's keyrings: the daemon's session keyring (an SSH or Kerberos key, a disk's)
    // would otherwise be the command's to read.
    for call in [libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key] {
        rules.insert(call, Vec::new());
    }
    if !network {
        // Every family but the local ones: IP, and whatever reaches other machines without it
        // or through the kernel's own TCP (raw packets, a VM's host, SMC, Bluetooth, CAN, …).
        let other_than = |family: i32| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
                .map_err(|err| err.to_string())
        };
        let not_local = SeccompRule::new(vec![
            other_than(libc::AF_UNIX)?,
            other_than(libc::AF_NETLINK)?,
            other_than(libc::AF_ALG)?,
        ])
        .map_err(|err| err.to_string())?;
        rules.insert(libc::SYS_socket, vec![not_local]);
    }
    Ok(rules)
}

/// `program` (seccompiler's: the architecture checked, the call's number loaded, then one
/// comparison per filtered call) with a short way out put after the load: a call not filtered
/// is allowed after a handful of comparisons, and the x32 ABI's numbers, which the
/// comparisons would not see, are refused.
///
/// Why: installing a filter, the kernel runs it for every system call number to find those
/// it always allows, and that costs in proportion to the instructions each number passes
/// through; through seccompiler's whole chain it cost some 50 µs a command.
fn with_fast_path(
    program: Program,
    filtered: &[u32],
    socket_calls: bool,
) -> Result<Program, String> {
    /// seccompiler's architecture check (load, compare, kill), then the number's load.
    const LOAD_AT: usize = 3;
    /// The x32 ABI: the call's number with this bit set, under the x86-64 architecture.
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    /// Where `struct seccomp_data` holds the fifth argument (`sendto`'s address), its low word
    /// first on the little-endian architectures the filter is built for.
    const ARG4_LOW: u32 = 16 + 4 * 8;
    let loads_the_number = program.get(LOAD_AT).is_some_and(|load| {
        load.code == (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16 && load.k == 0
    });
    let calls = u8::try_from(filtered.len())
        .ok()
        .filter(|calls| *calls < u8::MAX - 16);
    let (true, Some(calls)) = (loads_the_number, calls) else {
        return Err("unexpected seccomp program layout".to_owned());
    };
    let number = |call: libc::c_long| u32::try_from(call).map_err(|err| err.to_string());
    let jump = |op: u32, k: u32, jt: u8, jf: u8| sock_filter {
        code: (libc::BPF_JMP | op | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = |k: u32| sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let ret = |k: u32| sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    // Laid out (`n` filtered calls): 0 the x32 test; 1..=n one test per filtered call, to
    // seccompiler's comparisons; ALLOW and REFUSE (x32) follow, then seccompiler's
    // comparisons. With the socket calls, four more tests come before ALLOW (`connect`,
    // `sendmsg` and `sendmmsg` to NOTIFY, `sendto` to the look at its address), and after
    // REFUSE the look (the address's two words zero: ALLOW again, else NOTIFY) and NOTIFY.
    // A jump of `j` skips `j` instructions; every jump goes forward.
    let extra: u8 = if socket_calls { 4 } else { 0 };
    let allow = calls + 1 + extra;
    let refuse = allow + 1;
    let look = refuse + 1;
    let allow_after_look = look + 4;
    let notify = allow_after_look + 1;
    let chain = if socket_calls { notify + 1 } else { refuse + 1 };
    let to = |from: u8, target: u8| target - from - 1;
    let mut fast = Vec::with_capacity(usize::from(chain));
    fast.push(jump(libc::BPF_JGE, X32_SYSCALL_BIT, to(0, refuse), 0));
    for (at, &call) in (1..).zip(filtered) {
        fast.push(jump(libc::BPF_JEQ, call, to(at, chain), 0));
    }
    if socket_calls {
        let first = calls + 1;
        for (at, call) in (first..).zip([libc::SYS_connect, libc::SYS_sendmsg, libc::SYS_sendmmsg])
        {
            fast.push(jump(libc::BPF_JEQ, number(call)?, to(at, notify), 0));
        }
        fast.push(jump(
            libc::BPF_JEQ,
            number(libc::SYS_sendto)?,
            to(first + 3, look),
            0,
        ));
    }
    fast.push(ret(libc::SECCOMP_RET_ALLOW));
    fast.push(ret(libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    if socket_calls {
        fast.push(load(ARG4_LOW));
        fast.push(jump(libc::BPF_JEQ, 0, 0, to(look + 1, notify)));
        fast.push(load(ARG4_LOW + 4));
        fast.push(jump(
            libc::BPF_JEQ,
            0,
            to(look + 3, allow_after_look),
            to(look + 3, notify),
        ));
        fast.push(ret(libc::SECCOMP_RET_ALLOW));
        fast.push(ret(libc::SECCOMP_RET_USER_NOTIF));
    }
    let mut program = program;
    program.splice(LOAD_AT + 1..LOAD_AT + 1, fast);
    Ok(program)
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
