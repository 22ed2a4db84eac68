//! Runs a program on a kernel that seems to lack some features, for the tests of the command
//! sandbox's lower tiers: a seccomp filter (inherited by the program and all it starts) makes
//! the system calls of each feature named fail as an older or restricted kernel's would.
//!
//! `without-kernel-features [--user-namespaces] [--pid-namespaces] [--landlock] [--mount-api]
//! -- PROGRAM ARGS…`
//!
//! - `--user-namespaces`: `unshare` and `clone` with `CLONE_NEWUSER` fail with `EPERM` (as
//!   where unprivileged user namespaces are turned off), `clone3` with `ENOSYS` (its flags are
//!   in memory a filter cannot read; the C library then falls back to `clone`).
//! - `--pid-namespaces`: the same for `CLONE_NEWPID` alone (as in a container whose `/proc`
//!   cannot be mounted again).
//! - `--landlock`: the Landlock system calls fail with `ENOSYS` (a kernel built without it).
//! - `--mount-api`: `open_tree`, `move_mount` and `mount_setattr` fail with `ENOSYS` (a kernel
//!   before 5.12).
//!
//! It lives with the tests, not in toold: no switch in the daemon can weaken its sandbox.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;

use nix::libc;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut no_user_namespaces = false;
    let mut no_pid_namespaces = false;
    let mut no_landlock = false;
    let mut no_mount_api = false;
    for arg in args.by_ref() {
        match arg.as_str() {
            "--user-namespaces" => no_user_namespaces = true,
            "--pid-namespaces" => no_pid_namespaces = true,
            "--landlock" => no_landlock = true,
            "--mount-api" => no_mount_api = true,
            "--" => break,
            other => fail(&format!("unknown option {other}")),
        }
    }
    let Some(program) = args.next() else {
        fail("no program to run")
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap_or_else(|_| fail("arch"));
    for (refused, flag) in [
        (no_user_namespaces, libc::CLONE_NEWUSER),
        (no_pid_namespaces, libc::CLONE_NEWPID),
    ] {
        if !refused {
            continue;
        }
        let with_flag = || {
            SeccompRule::new(vec![
                SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(flag as u64),
                    flag as u64,
                )
                .unwrap(),
            ])
            .unwrap()
        };
        let rules = BTreeMap::from([
            (libc::SYS_unshare, vec![with_flag()]),
            (libc::SYS_clone, vec![with_flag()]),
        ]);
        install(rules, libc::EPERM, arch);
        install(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            libc::ENOSYS,
            arch,
        );
    }
    if no_landlock {
        let rules = BTreeMap::from([
            (libc::SYS_landlock_create_ruleset, Vec::new()),
            (libc::SYS_landlock_add_rule, Vec::new()),
            (libc::SYS_landlock_restrict_self, Vec::new()),
        ]);
        install(rules, libc::ENOSYS, arch);
    }
    if no_mount_api {
        let rules = BTreeMap::from([
            (libc::SYS_open_tree, Vec::new()),
            (libc::SYS_move_mount, Vec::new()),
            (libc::SYS_mount_setattr, Vec::new()),
        ]);
        install(rules, libc::ENOSYS, arch);
    }
    let error = std::process::Command::new(&program).args(args).exec();
    fail(&format!("cannot run {program}: {error}"));
}

fn install(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32, arch: TargetArch) {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .unwrap_or_else(|error| fail(&format!("filter: {error}")));
    let program: seccompiler::BpfProgram = filter
        .try_into()
        .unwrap_or_else(|error| fail(&format!("filter: {error}")));
    seccompiler::apply_filter(&program).unwrap_or_else(|error| fail(&format!("seccomp: {error}")));
}

fn fail(message: &str) -> ! {
    eprintln!("without-kernel-features: {message}");
    std::process::exit(2);
}
