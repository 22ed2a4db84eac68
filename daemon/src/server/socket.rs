//! Where the daemon listens and who may connect: a private directory for the socket (whose path
//! `toold_protocol::socket_path` resolves, for the clients too), binding (a stale socket
//! replaced, a live daemon refused), the root check, and the peer's uid (SO_PEERCRED).
//!
//! The socket is protected three times over: its directory is the user's own, mode 0700, so no
//! one else can even reach the socket file; the file is 0600; and every accepted peer's uid is
//! compared with the daemon's before a byte is read.

use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::geteuid;

/// The longest socket path the kernel accepts: `sun_path` is 108 bytes with the closing NUL.
pub(crate) const MAX_SOCKET_PATH_BYTES: usize = 107;

/// The socket file's mode: only its owner may connect.
const SOCKET_MODE: u32 = 0o600;
/// The socket directory's mode when the daemon creates it.
const DIRECTORY_MODE: u32 = 0o700;
/// The mode bits that must be clear on the socket directory: any access by group or others.
const FOREIGN_ACCESS_BITS: u32 = 0o077;

/// Why the daemon cannot listen where it was asked to, or may not run at all. Every message
/// says what was wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error(
        "the socket path {} is {len} bytes long, but a Unix socket path may have at most \
         {MAX_SOCKET_PATH_BYTES}; choose a shorter one with --socket or TOOLD_SOCKET",
        path.display()
    )]
    PathTooLong { path: PathBuf, len: usize },

    #[error(
        "cannot create the socket directory {}: {source}; create it yourself \
         (`mkdir -m 700 {}`) or choose another socket path with --socket",
        dir.display(), dir.display()
    )]
    CreateDirectory { dir: PathBuf, source: io::Error },

    #[error(
        "the socket directory {} exists but is not a directory; remove it or choose another \
         socket path with --socket",
        dir.display()
    )]
    NotADirectory { dir: PathBuf },

    #[error(
        "the socket directory {} belongs to uid {owner}, not to you (uid {uid}), so its owner \
         could replace the socket; remove it or choose another socket path with --socket",
        dir.display()
    )]
    DirectoryNotOwned { dir: PathBuf, owner: u32, uid: u32 },

    #[error(
        "the socket directory {} has mode {mode:04o}, so group or others may reach the socket; \
         run `chmod 700 {}` or choose another socket path with --socket",
        dir.display(), dir.display()
    )]
    DirectoryTooOpen { dir: PathBuf, mode: u32 },

    #[error(
        "{} exists and is not a socket; remove it if it is yours to remove, or choose another \
         socket path with --socket",
        path.display()
    )]
    NotASocket { path: PathBuf },

    #[error(
        "another toold is already serving on {}; stop it first (`systemctl --user stop \
         toold.socket toold.service` if systemd runs it) or choose another socket path with \
         --socket",
        path.display()
    )]
    AlreadyServing { path: PathBuf },

    #[error(
        "toold is running as root and would execute a model's commands as root; run it as your \
         own user, or pass --allow-root if that is really what you want"
    )]
    RunningAsRoot,

    #[error(
        "cannot {action} {}: {source}; check that path, or choose another socket path with \
         --socket",
        path.display()
    )]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },

    #[error(
        "the socket activation variables from systemd (LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES) \
         are malformed: {source}; check toold.socket, or unset them to listen on a path"
    )]
    ActivationEnv { source: io::Error },

    #[error(
        "systemd passed {} socket(s) named {names:?}, none named `toold`; set \
         FileDescriptorName=toold in toold.socket",
        names.len()
    )]
    NoTooldSocket { names: Vec<String> },

    #[error(
        "the socket systemd passed as `toold` (fd {fd}) is {what}, not a listening Unix stream \
         socket; use ListenStream=%t/toold/toold.sock in toold.socket"
    )]
    InheritedNotUnixStream { fd: i32, what: String },

    #[error("cannot {action} the socket inherited from systemd: {source}")]
    Inherited {
        action: &'static str,
        source: io::Error,
    },
}

/// Refuses to run as root unless `allow_root`: the daemon executes whatever commands a model
/// asks for, with its own privileges.
pub fn refuse_root(allow_root: bool) -> Result<(), SocketError> {
    if geteuid().is_root() && !allow_root {
        return Err(SocketError::RunningAsRoot);
    }
    Ok(())
}

/// Listens on `path`: its directory created 0700 (or checked to be the user's own and
/// private), a stale socket file replaced, the socket 0600. Must be called inside a tokio
/// runtime.
///
/// A path that exists and is not a socket is refused, and so is a socket a live daemon answers
/// on ([`SocketError::AlreadyServing`]).
pub fn bind_listener(path: &Path) -> Result<tokio::net::UnixListener, SocketError> {
    let listener = bind_std_listener(path)?;
    tokio::net::UnixListener::from_std(listener).map_err(|source| SocketError::Io {
        action: "register with the runtime the socket",
        path: path.to_path_buf(),
        source,
    })
}

fn bind_std_listener(path: &Path) -> Result<StdUnixListener, SocketError> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(SocketError::PathTooLong {
            path: path.to_path_buf(),
            len,
        });
    }
    let dir = socket_directory(path);
    prepare_directory(dir)?;

    // Two daemons starting at once could both find the old socket stale, and the second would
    // then delete the socket the first just bound. Holding the directory's lock from the
    // staleness check until the new socket listens makes the second one find a live socket.
    // The lock lasts only for this function: a running daemon is found by connecting to it.
    let directory = File::open(dir).map_err(|source| SocketError::Io {
        action: "open the socket directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let _lock =
        Flock::lock(directory, FlockArg::LockExclusive).map_err(|(_, errno)| SocketError::Io {
            action: "lock the socket directory",
            path: dir.to_path_buf(),
            source: errno.into(),
        })?;

    remove_stale_socket(path)?;
    let listener = StdUnixListener::bind(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AddrInUse {
            SocketError::AlreadyServing {
                path: path.to_path_buf(),
            }
        } else {
            SocketError::Io {
                action: "listen on the socket",
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    // chmod right after bind rather than a umask around it: the umask is process-wide, so
    // setting it would race with every other thread creating files (tools writing a user's
    // files would get the wrong modes). The moment between bind and chmod is harmless because
    // the socket sits in a 0700 directory of ours that nobody else can enter.
    if let Err(source) = fs::set_permissions(path, fs::Permissions::from_mode(SOCKET_MODE)) {
        let _ = fs::remove_file(path);
        return Err(SocketError::Io {
            action: "make private (mode 0600) the socket",
            path: path.to_path_buf(),
            source,
        });
    }
    listener
        .set_nonblocking(true)
        .map_err(|source| SocketError::Io {
            action: "make non-blocking the socket",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(listener)
}

/// The socket file a daemon bound, removed when it stops cleanly, so that no dead socket is left
/// behind (as a systemd socket unit removes its own). Only if it is still the same file: a
/// daemon started after this one's socket closed may have bound its own there.
pub(crate) struct BoundSocket {
    path: PathBuf,
    identity: (u64, u64),
}

impl BoundSocket {
    /// The socket file at `path`, as it is now (right after binding it).
    pub(crate) fn of(path: &Path) -> io::Result<Self> {
        let meta = fs::symlink_metadata(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// Removes the file if it is still the one bound.
    pub(crate) fn remove(self) {
        let unchanged = fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.identity);
        if unchanged && let Err(err) = fs::remove_file(&self.path) {
            tracing::warn!(%err, path = %self.path.display(), "cannot remove the socket file");
        }
    }
}

/// The directory the socket lives in; a bare file name lives in the current directory.
fn socket_directory(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Creates the socket directory 0700 if it is missing (with any missing parents, also 0700),
/// then checks that it is a directory of ours that group and others cannot access.
fn prepare_directory(dir: &Path) -> Result<(), SocketError> {
    let metadata = match fs::metadata(dir) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(DIRECTORY_MODE)
                .create(dir)
                .map_err(|source| SocketError::CreateDirectory {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            fs::metadata(dir).map_err(|source| SocketError::CreateDirectory {
                dir: dir.to_path_buf(),
                source,
            })?
        }
        Err(source) => {
            return Err(SocketError::Io {
                action: "inspect the socket directory",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    if !metadata.is_dir() {
        return Err(SocketError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    let uid = geteuid().as_raw();
    // A symlink in a shared directory such as /tmp, planted by someone else, must not steer the
    // socket into a directory of ours they chose, even a private one.
    if let Ok(link) = fs::symlink_metadata(dir)
        && link.file_type().is_symlink()
        && link.uid() != uid
    {
        return Err(SocketError::DirectoryNotOwned {
            dir: dir.to_path_buf(),
            owner: link.uid(),
            uid,
        });
    }
    if metadata.uid() != uid {
        return Err(SocketError::DirectoryNotOwned {
            dir: dir.to_path_buf(),
            owner: metadata.uid(),
            uid,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & FOREIGN_ACCESS_BITS != 0 {
        return Err(SocketError::DirectoryTooOpen {
            dir: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Clears the way for binding: nothing there is fine; a socket nobody answers on (a daemon that
/// died without cleaning up) is removed; a socket that answers, or anything that is not a
/// socket, is refused.
fn remove_stale_socket(path: &Path) -> Result<(), SocketError> {
    let metadata = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(SocketError::Io {
                action: "inspect the socket path",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !metadata.file_type().is_socket() {
        return Err(SocketError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    match StdUnixStream::connect(path) {
        Ok(stream) if listener_is_gone(&stream) => {
            tracing::warn!(
                path = %path.display(),
                "replacing a socket whose daemon is gone (a process it started still held it)"
            );
            remove_socket_file(path)
        }
        Ok(_) => Err(SocketError::AlreadyServing {
            path: path.to_path_buf(),
        }),
        // A listener whose backlog is full is alive, only busy.
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
            Err(SocketError::AlreadyServing {
                path: path.to_path_buf(),
            })
        }
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => remove_socket_file(path),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SocketError::Io {
            action: "check whether a daemon answers on the socket",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Whether the process that made the socket at the other end of `stream` listen has exited:
/// a daemon killed while a child it had just cloned still held a copy of its descriptors
/// (for the moment before the child closes them) leaves a socket that accepts connections
/// nobody will ever read. A listener in a PID namespace this one cannot see (pid 0) counts
/// as alive.
fn listener_is_gone(stream: &StdUnixStream) -> bool {
    let Ok(pid) = peer_pid(stream) else {
        return false;
    };
    pid > 0
        && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH)
}

fn remove_socket_file(path: &Path) -> Result<(), SocketError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SocketError::Io {
            action: "remove the stale socket",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The uid of the process at the other end of a connected Unix socket (SO_PEERCRED: the
/// credentials it had when it connected, which it cannot forge).
pub fn peer_uid(stream: &impl AsFd) -> io::Result<u32> {
    let credentials = getsockopt(stream, PeerCredentials)?;
    Ok(credentials.uid())
}

/// The pid of the process at the other end of a connected Unix socket, as it was when it
/// connected (SO_PEERCRED; 0 when it lives in a PID namespace this one cannot see).
pub(crate) fn peer_pid(stream: &impl AsFd) -> io::Result<i32> {
    Ok(getsockopt(stream, PeerCredentials)?.pid())
}

/// A pidfd of the process at the other end of a connected Unix socket (`SO_PEERPIDFD`, Linux
/// 6.5): it names that process and no other, whatever happens to its pid. `None` where the
/// kernel does not offer it.
#[allow(unsafe_code)]
pub(crate) fn peer_pidfd(stream: &impl AsFd) -> io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::{AsRawFd, FromRawFd};
    const SO_PEERPIDFD: nix::libc::c_int = 77;
    let mut fd: nix::libc::c_int = -1;
    let mut length = std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t;
    // SAFETY: the kernel writes one int into `fd` and its size into `length`.
    let got = unsafe {
        nix::libc::getsockopt(
            stream.as_fd().as_raw_fd(),
            nix::libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut nix::libc::c_int).cast(),
            &mut length,
        )
    };
    if got != 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(nix::libc::ENOPROTOOPT) => Ok(None),
            _ => Err(error),
        };
    }
    // SAFETY: a new descriptor the kernel just made for us.
    Ok(Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
}

/// Whether the process a pidfd names is still alive (signal 0 through the pidfd).
#[allow(unsafe_code)]
pub(crate) fn pidfd_alive(pidfd: &impl AsFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: signal 0 checks existence and permission, and sends nothing.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            0,
            std::ptr::null::<nix::libc::siginfo_t>(),
            0,
        ) == 0
    }
}

/// Whether the peer may talk to this daemon: only the daemon's own user may. A peer whose
/// credentials cannot be read is refused.
pub fn peer_allowed(stream: &impl AsFd) -> bool {
    peer_uid(stream).is_ok_and(|uid| uid == geteuid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_file_name_lives_in_the_current_directory() {
        assert_eq!(socket_directory(Path::new("toold.sock")), Path::new("."));
        assert_eq!(socket_directory(Path::new("/a/b.sock")), Path::new("/a"));
    }
}
