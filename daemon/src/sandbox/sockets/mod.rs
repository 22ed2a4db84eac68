//! Which Unix sockets a sandboxed command may reach: those a process of the command itself
//! serves, and those the config names (`[sandbox] unix_sockets`, an SSH agent's for `git push`
//! say). Any other — a tmux or screen server, an SSH agent or `ControlMaster`, X11, a session
//! bus, a container engine, at any path or abstract name — would run a command for it outside
//! every layer of the sandbox. The kernel hands each call that can reach a socket's server to
//! the daemon ([`filter`]), which decides it ([`supervisor`]).
//!
//! Commands also do not inherit the variables that name such services (`SSH_AUTH_SOCK`,
//! `TMUX`, `DBUS_SESSION_BUS_ADDRESS`, `DOCKER_HOST`, …) unless the socket named is one the
//! config lets them reach.

mod capabilities;
pub(crate) mod filter;
mod owners;
pub(crate) mod supervisor;
mod target;
mod variables;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

pub(crate) use self::variables::names_a_service;
use super::AllowedSocket;

/// A socket the config lets commands reach, as found when a command starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reachable {
    /// Where the config (or its variable) names it: where commands find it.
    pub shown_at: PathBuf,
    /// The socket file itself (every symlink followed).
    pub file: PathBuf,
    /// Its device and inode: what the daemon lets commands connect to.
    pub identity: (u64, u64),
}

/// The configured sockets that exist now (a variable unset, or a path that is not a socket,
/// names none); never the daemon's own socket.
pub(crate) fn reachable(entries: &[AllowedSocket]) -> Vec<Reachable> {
    let daemon = super::kept_out::daemon_socket()
        .and_then(|socket| std::fs::metadata(&socket.path).ok())
        .map(|meta| (meta.dev(), meta.ino()));
    let mut found: Vec<Reachable> = Vec::new();
    for entry in entries {
        let Some(shown_at) = entry.path() else {
            continue;
        };
        let Ok(file) = std::fs::canonicalize(&shown_at) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let identity = (meta.dev(), meta.ino());
        if !meta.file_type().is_socket()
            || Some(identity) == daemon
            || found.iter().any(|known| known.shown_at == shown_at)
        {
            continue;
        }
        found.push(Reachable {
            shown_at,
            file,
            identity,
        });
    }
    found
}
