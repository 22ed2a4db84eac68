//! Where the daemon's socket is: the one resolution (docs/protocol.md section 1) that the daemon
//! uses to listen and every client uses to connect, so that the two can never disagree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::unistd::getuid;

/// The environment values the socket path depends on, read once so that resolving stays pure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketEnv {
    /// `$TOOLD_SOCKET`.
    pub toold_socket: Option<OsString>,
    /// `$XDG_RUNTIME_DIR`.
    pub xdg_runtime_dir: Option<OsString>,
    /// The user's uid, as `$UID` in the fallback `/tmp/toold-$UID`.
    pub uid: u32,
}

impl SocketEnv {
    /// The values of this process.
    pub fn from_process() -> Self {
        SocketEnv {
            toold_socket: std::env::var_os("TOOLD_SOCKET"),
            xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR"),
            uid: getuid().as_raw(),
        }
    }
}

/// The socket path, first found of: `--socket`, `$TOOLD_SOCKET`, the config key `socket`,
/// `$XDG_RUNTIME_DIR/toold/toold.sock`, `/tmp/toold-$UID/toold.sock`. The daemon and the client
/// both call it (the client without a config).
///
/// Empty values count as unset, and so does a relative `XDG_RUNTIME_DIR` (the XDG base
/// directory specification says to ignore it): a socket next to wherever the daemon happened
/// to start is never what was meant.
pub fn resolve_socket_path(flag: Option<&Path>, config: Option<&Path>, env: &SocketEnv) -> PathBuf {
    if let Some(path) = given(flag)
        .or_else(|| given(env.toold_socket.as_deref().map(Path::new)))
        .or_else(|| given(config))
    {
        return path.to_path_buf();
    }
    match env.xdg_runtime_dir.as_deref().map(Path::new) {
        Some(runtime_dir) if runtime_dir.is_absolute() => runtime_dir.join("toold/toold.sock"),
        _ => PathBuf::from(format!("/tmp/toold-{}/toold.sock", env.uid)),
    }
}

/// A path source that is set and not empty.
fn given(value: Option<&Path>) -> Option<&Path> {
    value.filter(|path| !path.as_os_str().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(toold_socket: Option<&str>, xdg_runtime_dir: Option<&str>) -> SocketEnv {
        SocketEnv {
            toold_socket: toold_socket.map(OsString::from),
            xdg_runtime_dir: xdg_runtime_dir.map(OsString::from),
            uid: 1000,
        }
    }

    #[test]
    fn resolution_order() {
        let flag = Some(Path::new("/flag.sock"));
        let config = Some(Path::new("/config.sock"));
        let cases: &[(Option<&Path>, Option<&Path>, SocketEnv, &str)] = &[
            (
                flag,
                config,
                env(Some("/env.sock"), Some("/run/user/1000")),
                "/flag.sock",
            ),
            (
                None,
                config,
                env(Some("/env.sock"), Some("/run/user/1000")),
                "/env.sock",
            ),
            (
                None,
                config,
                env(None, Some("/run/user/1000")),
                "/config.sock",
            ),
            (
                None,
                None,
                env(None, Some("/run/user/1000")),
                "/run/user/1000/toold/toold.sock",
            ),
            (None, None, env(None, None), "/tmp/toold-1000/toold.sock"),
            // Empty values are unset; a relative runtime directory is ignored.
            (
                Some(Path::new("")),
                None,
                env(Some(""), Some("")),
                "/tmp/toold-1000/toold.sock",
            ),
            (
                None,
                None,
                env(None, Some("run/user")),
                "/tmp/toold-1000/toold.sock",
            ),
            // An explicit path is taken as given, relative or not.
            (
                Some(Path::new("here.sock")),
                None,
                env(None, None),
                "here.sock",
            ),
        ];
        for (flag, config, env, expected) in cases {
            assert_eq!(
                resolve_socket_path(*flag, *config, env),
                PathBuf::from(expected),
                "flag {flag:?}, config {config:?}, {env:?}"
            );
        }
    }
}
