//! The socket server: where the daemon listens, who may connect, the systemd handshakes, and
//! the accept loop with its shutdown.

pub mod run;
pub mod socket;
mod stream;
pub mod systemd;
