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

pub(crate) mod filter;
mod owners;
pub(crate) mod supervisor;
mod target;
