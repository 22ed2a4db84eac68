//! systemd integration: the listening socket inherited through socket activation (the
//! descriptor named `toold`), and the sd_notify messages `READY=1`, `STATUS=`, `STOPPING=1` and
//! the watchdog's `WATCHDOG=1`. Outside systemd (no `LISTEN_*`, no `NOTIFY_SOCKET`) every
//! function here does nothing.
//!
//! `NOTIFY_SOCKET` stays set for the daemon's whole life (the watchdog and `STOPPING=1` need
//! it), so children must not inherit it: `process_tree::inherited_env` filters it, with
//! `LISTEN_*` and `WATCHDOG_*`, from every command and hook. The unit keeps the default
//! `NotifyAccess=main` as well, so a message from any other process would be ignored anyway.

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener as StdUnixListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::socket::{SockType, getsockopt, sockopt};
use sd_notify::NotifyState;

use crate::server::socket::SocketError;

/// The descriptor name `toold.socket` gives the listening socket (`FileDescriptorName=`).
pub const FD_NAME: &str = "toold";

/// Set by the first look at the inherited descriptors, so that no descriptor is ever adopted
/// twice (two owners would close it twice, the second time maybe someone else's descriptor).
static ACTIVATION_FDS_TAKEN: AtomicBool = AtomicBool::new(false);

/// The listening socket systemd passed, non-blocking; `None` when not socket-activated or when
/// already taken. The descriptor named `toold` is taken, or the only one when systemd gave no
/// names; it must be a listening Unix stream socket.
///
/// The `LISTEN_*` variables are then removed from the environment, but only while the process
/// has a single thread: removing a variable while another thread may read the environment is
/// undefined behaviour. Call this before building a multi-threaded runtime to have them
/// removed; otherwise they stay, which is harmless (`LISTEN_PID` names this process, so no
/// child would take the descriptors, which are close-on-exec anyway, and commands never see
/// the variables).
pub(crate) fn take_inherited_listener() -> Result<Option<StdUnixListener>, SocketError> {
    if ACTIVATION_FDS_TAKEN.swap(true, Ordering::SeqCst) {
        return Ok(None);
    }
    let names_given = addressed_to_this_process() && std::env::var_os("LISTEN_FDNAMES").is_some();
    let fds = listen_fds_unsetting_env_when_alone()
        .map_err(|source| SocketError::ActivationEnv { source })?;
    if fds.is_empty() {
        return Ok(None);
    }
    let fd = choose_toold_fd(&fds, names_given)?;
    let owned = adopt_activation_fd(fd);
    check_listening_unix_stream(&owned, fd)?;
    let listener = StdUnixListener::from(owned);
    // `from(OwnedFd)` checks nothing about the address family: `local_addr` does.
    if listener.local_addr().is_err() {
        return Err(SocketError::InheritedNotUnixStream {
            fd,
            what: "a socket of another address family (not AF_UNIX)".to_owned(),
        });
    }
    listener
        .set_nonblocking(true)
        .map_err(|source| SocketError::Inherited {
            action: "make non-blocking",
            source,
        })?;
    Ok(Some(listener))
}

/// The descriptors systemd passed with their names, and the `LISTEN_*` variables removed when
/// that is sound.
///
/// The variables are read only when `LISTEN_PID` is this process, as sd_listen_fds(3) says:
/// a daemon started by hand from a shell that inherited them (a terminal of a socket-activated
/// service) was passed nothing, whatever they say, and they cannot be malformed for it.
#[allow(unsafe_code)]
fn listen_fds_unsetting_env_when_alone() -> io::Result<Vec<(RawFd, String)>> {
    let fds = if addressed_to_this_process() {
        sd_notify::listen_fds_with_names().map(Iterator::collect)
    } else {
        Ok(Vec::new())
    };
    if is_single_threaded() {
        // SAFETY: `std::env::remove_var`'s precondition: no other thread may read or write the
        // environment meanwhile, which the standard library documents as always met in a
        // single-threaded program. This process has one thread (this one), and only this
        // thread could start another, which it does not do before returning.
        unsafe {
            for variable in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
                std::env::remove_var(variable);
            }
        }
    }
    fds
}

/// Whether `LISTEN_PID` names this process. Anything else (unset, another pid, not a pid at
/// all) means the `LISTEN_*` variables were meant for some other process.
fn addressed_to_this_process() -> bool {
    std::env::var("LISTEN_PID")
        .ok()
        .and_then(|pid| pid.parse::<u32>().ok())
        == Some(std::process::id())
}

/// Whether this process has exactly one thread; `false` when that cannot be known.
fn is_single_threaded() -> bool {
    fs::read_dir("/proc/self/task").is_ok_and(|threads| threads.count() == 1)
}

/// Takes ownership of a descriptor systemd passed.
#[allow(unsafe_code)]
fn adopt_activation_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` came from `sd_notify::listen_fds_with_names`, which returns descriptors only
    // when LISTEN_PID is this process (so the service manager passed them to us) and made each
    // close-on-exec with a successful fcntl (so it is open). Nothing else owns it: descriptors
    // 3 to 3+LISTEN_FDS belong to the program by the sd_listen_fds(3) convention, and
    // ACTIVATION_FDS_TAKEN lets this happen at most once in the process.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Picks the listening socket among the passed descriptors: the one named `toold`, or the only
/// one when systemd gave no names at all.
fn choose_toold_fd(fds: &[(RawFd, String)], names_given: bool) -> Result<RawFd, SocketError> {
    if let Some((fd, _)) = fds.iter().find(|(_, name)| name == FD_NAME) {
        return Ok(*fd);
    }
    match fds {
        [(fd, _)] if !names_given => Ok(*fd),
        _ => Err(SocketError::NoTooldSocket {
            names: fds.iter().map(|(_, name)| name.clone()).collect(),
        }),
    }
}

/// Refuses a descriptor that is not a listening stream socket (a datagram socket, a FIFO, a
/// socket that never called listen), which would fail only at the first accept.
fn check_listening_unix_stream(socket: &OwnedFd, fd: RawFd) -> Result<(), SocketError> {
    let not_stream = |what: String| SocketError::InheritedNotUnixStream { fd, what };
    let socket_type = getsockopt(socket, sockopt::SockType)
        .map_err(|errno| not_stream(format!("not a socket ({errno})")))?;
    if socket_type != SockType::Stream {
        return Err(not_stream(format!("a {socket_type:?} socket")));
    }
    let listening =
        getsockopt(socket, sockopt::AcceptConn).map_err(|errno| SocketError::Inherited {
            action: "inspect",
            source: errno.into(),
        })?;
    if !listening {
        return Err(not_stream(
            "a stream socket that is not listening".to_owned(),
        ));
    }
    Ok(())
}

/// Tells systemd the daemon serves (`READY=1`); a `Type=notify` unit counts as started only
/// then.
pub(crate) fn notify_ready() -> io::Result<()> {
    sd_notify::notify(&[NotifyState::Ready])
}

/// A one-line status shown by `systemctl status` (`STATUS=`). Line breaks become spaces: each
/// line of a notification is an assignment of its own, so a status must not start another.
pub(crate) fn notify_status(status: &str) -> io::Result<()> {
    let one_line = status.replace(['\n', '\r'], " ");
    sd_notify::notify(&[NotifyState::Status(&one_line)])
}

/// Tells systemd the daemon is draining and stopping (`STOPPING=1`).
pub(crate) fn notify_stopping() -> io::Result<()> {
    sd_notify::notify(&[NotifyState::Stopping])
}

/// The watchdog timeout systemd set (`WatchdogSec=`), when there is somewhere to send the
/// pings; `None` outside systemd, without a watchdog, or with a zero timeout.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    std::env::var_os("NOTIFY_SOCKET")?;
    sd_notify::watchdog_enabled().filter(|interval| !interval.is_zero())
}

/// Sends `WATCHDOG=1` every half watchdog interval, from a task on the current tokio runtime:
/// if the runtime stops running tasks, the pings stop and systemd restarts the daemon (a
/// thread of its own would keep pinging for a daemon that no longer serves). Returns the task,
/// or `None` when there is no watchdog. Must be called inside a tokio runtime.
pub(crate) fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let interval = watchdog_interval()?;
    let period = interval / 2;
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        // A late tick pings once, then keeps the period: a burst of pings would say nothing more.
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = sd_notify::notify(&[NotifyState::Watchdog]) {
                tracing::warn!(%error, "cannot send WATCHDOG=1 to systemd");
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(names: &[&str]) -> Vec<(RawFd, String)> {
        (3..)
            .zip(names.iter().map(|name| name.to_string()))
            .collect()
    }

    #[test]
    fn the_fd_named_toold_is_chosen() {
        assert_eq!(
            choose_toold_fd(&fds(&["other", "toold"]), true).ok(),
            Some(4)
        );
        assert_eq!(choose_toold_fd(&fds(&["toold"]), true).ok(), Some(3));
    }

    #[test]
    fn a_single_unnamed_fd_is_chosen() {
        // sd_notify calls descriptors without LISTEN_FDNAMES "unknown".
        assert_eq!(choose_toold_fd(&fds(&["unknown"]), false).ok(), Some(3));
    }

    #[test]
    fn other_names_or_several_unnamed_fds_are_refused() {
        let error = choose_toold_fd(&fds(&["toold.socket"]), true).unwrap_err();
        assert!(
            error.to_string().contains("FileDescriptorName=toold"),
            "{error}"
        );
        assert!(choose_toold_fd(&fds(&["unknown", "unknown"]), false).is_err());
    }
}
