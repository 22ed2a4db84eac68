//! The daemon's own hardening against the commands it runs: it is non-dumpable, passes on no
//! descriptor it inherited, and gives its children its environment only without its own
//! settings, its service manager's handshakes and the configured secrets.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The daemon's environment as the processes it spawns inherit it: without the socket
/// activation and watchdog handshakes meant for the daemon (`LISTEN_*`, `NOTIFY_SOCKET`,
/// `WATCHDOG_*`), without the daemon's own settings (`TOOLD_*`) and without the secrets the
/// config names ([`crate::secrets`]: an MCP server's `bearer_token_env`, or any variable
/// holding a configured secret's value).
pub(crate) fn inherited_env() -> impl Iterator<Item = (OsString, OsString)> {
    let secrets = crate::secrets::current();
    std::env::vars_os()
        .filter(move |(name, value)| is_inherited(name) && !secrets.withhold(name, value))
}

fn is_inherited(name: &OsStr) -> bool {
    let name = name.as_bytes();
    !(name.starts_with(b"LISTEN_")
        || name == b"NOTIFY_SOCKET"
        || name.starts_with(b"WATCHDOG_")
        || name.starts_with(b"TOOLD_"))
}

/// Makes this process non-dumpable: processes of the same uid (every command the daemon runs)
/// can then no longer read its `/proc/PID/environ`, `mem` or `fd`, nor ptrace it; root keeps
/// that power. Children get it back when they exec, so commands are unaffected.
pub(crate) fn keep_out_of_reach() {
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(%err, "cannot make the process non-dumpable; commands of the same uid can read its memory");
    }
}

/// Marks every descriptor this process inherited above 2 close-on-exec, so that no command,
/// parser worker or hook the daemon starts gets one: whatever started the daemon may have left
/// it a pipe or a socket (a listening socket passed by systemd included) that a command could
/// write to or accept on. Descriptors the daemon opens itself are close-on-exec already.
#[allow(unsafe_code)]
pub(crate) fn inherit_no_descriptors() {
    // SAFETY: close_range takes plain integers and touches no memory of ours.
    let marked =
        unsafe { nix::libc::close_range(3, u32::MAX, nix::libc::CLOSE_RANGE_CLOEXEC as i32) };
    if marked != 0 {
        let err = std::io::Error::last_os_error();
        tracing::warn!(%err, "cannot mark inherited descriptors close-on-exec; commands may inherit them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_the_daemons_own_variables() {
        for name in [
            "LISTEN_FDS",
            "LISTEN_PID",
            "LISTEN_FDNAMES",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
            "WATCHDOG_PID",
            "TOOLD_SOCKET",
            "TOOLD_RUN_TAG",
        ] {
            assert!(!is_inherited(OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "LISTEN", "NOTIFY_SOCKETS_X", "MY_TOOLD_X"] {
            assert!(is_inherited(OsStr::new(name)), "{name}");
        }
    }
}
