//! What commands are kept from besides the filesystem's writes: the daemon's socket (recorded
//! once the daemon listens) and the local services that run code for the user on request.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The daemon's socket, which commands must not reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DaemonSocket {
    pub path: PathBuf,
    /// toold's own directory holding the socket, covered whole; `None` when the socket lies
    /// in a shared directory (`--socket /tmp/x.sock`), where only the socket is covered.
    pub hidden_dir: Option<PathBuf>,
}

static DAEMON_SOCKET: OnceLock<DaemonSocket> = OnceLock::new();

/// Records the socket the daemon listens on (once, at start). `own_dir`: the directory holding
/// it is toold's own, and may be covered whole.
pub(crate) fn keep_commands_from(socket: &Path, own_dir: bool) {
    let hidden_dir = own_dir
        .then(|| socket.parent().map(Path::to_path_buf))
        .flatten();
    let _ = DAEMON_SOCKET.set(DaemonSocket {
        path: socket.to_owned(),
        hidden_dir,
    });
}

/// The socket commands are kept from, once the daemon has one.
pub(crate) fn daemon_socket() -> Option<&'static DaemonSocket> {
    DAEMON_SOCKET.get()
}

/// Local services that run code for the user on request, which commands must not reach: the
/// user's runtime directory (`$XDG_RUNTIME_DIR`: systemd's and the session bus's sockets, and
/// often an SSH or GPG agent's) and the system's container engines and bus.
#[derive(Debug, Default)]
pub(crate) struct LocalServices {
    pub dirs: Vec<PathBuf>,
    pub sockets: Vec<PathBuf>,
}

/// The [`LocalServices`] of this machine, found once.
pub(crate) fn local_services() -> &'static LocalServices {
    static SERVICES: OnceLock<LocalServices> = OnceLock::new();
    SERVICES.get_or_init(|| {
        use std::os::unix::fs::FileTypeExt;
        let dirs = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute() && dir != Path::new("/"))
            .and_then(|dir| std::fs::canonicalize(dir).ok())
            .filter(|dir| dir.is_dir())
            .into_iter()
            .collect();
        let mut sockets: Vec<PathBuf> = [
            "/run/docker.sock",
            "/var/run/docker.sock",
            "/run/podman/podman.sock",
            "/run/dbus/system_bus_socket",
        ]
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .filter(|path| std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_socket()))
        .collect();
        sockets.sort();
        sockets.dedup();
        LocalServices { dirs, sockets }
    })
}
