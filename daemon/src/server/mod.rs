//! The socket server: where the daemon listens, who may connect, and the systemd handshakes.

pub mod socket;
pub mod systemd;
