//! Where the client subcommands find the daemon: the same socket resolution as `toold serve`
//! (`--socket`, `$TOOLD_SOCKET`, the config's `socket`, the runtime directory).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use clap::Args;

use toold_protocol::{SocketEnv, resolve_socket_path};

use toold::config::Config;

/// The options every subcommand that talks to the daemon takes.
#[derive(Args, Debug, Clone, Default)]
pub struct DaemonAddress {
    /// The daemon's socket [default: $TOOLD_SOCKET, the config's `socket`, or
    /// $XDG_RUNTIME_DIR/toold/toold.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The configuration file whose `socket` key is read [default:
    /// $XDG_CONFIG_HOME/toold/config.toml]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

impl DaemonAddress {
    /// The socket path, resolved in the daemon's order. The config file is read only when
    /// neither `--socket` nor `$TOOLD_SOCKET` names the socket, so a config being edited does
    /// not stop a command that does not need it.
    pub fn socket_path(&self) -> anyhow::Result<PathBuf> {
        self.resolve().map(|(path, _)| path)
    }

    /// As [`Self::socket_path`], and when the socket is the fallback of a process without a
    /// (usable) `XDG_RUNTIME_DIR` (as under many sshds), says so once on stderr: for `toold
    /// connect` and `toold mcp serve`, whose stdout is the protocol, so that whoever reads
    /// their stderr learns which socket (and so which daemon) they reached.
    pub fn socket_path_noting_fallback(&self) -> anyhow::Result<PathBuf> {
        /// Once a process: `toold mcp serve` resolves the socket again on each reconnection.
        static SAID: AtomicBool = AtomicBool::new(false);
        let (path, fallback) = self.resolve()?;
        if let Some(why) = fallback
            && !SAID.swap(true, Ordering::Relaxed)
        {
            // Straight to stderr, not through the log: nothing else may be set up to show it.
            let _ = writeln!(
                std::io::stderr(),
                "toold: {why}; using the socket {}",
                path.display()
            );
        }
        Ok(path)
    }

    /// The socket path, and why it is `/tmp/toold-$UID/toold.sock` when nothing named it and
    /// the runtime directory could not give it.
    fn resolve(&self) -> anyhow::Result<(PathBuf, Option<&'static str>)> {
        let env = SocketEnv::from_process();
        let named_before_config = self
            .socket
            .as_ref()
            .is_some_and(|path| !path.as_os_str().is_empty())
            || env
                .toold_socket
                .as_ref()
                .is_some_and(|path| !path.is_empty());
        if named_before_config {
            return Ok((
                resolve_socket_path(self.socket.as_deref(), None, &env),
                None,
            ));
        }
        let config = Config::load(self.config.as_deref()).context(
            "cannot read the config file to find the daemon's socket; fix it (`toold \
             check-config` says how) or name the socket with --socket",
        )?;
        let path = resolve_socket_path(None, config.socket.as_deref(), &env);
        let named_by_config = config
            .socket
            .as_ref()
            .is_some_and(|path| !path.as_os_str().is_empty());
        // The same test `resolve_socket_path` makes: unset, empty or relative is not used.
        let fallback = match env.xdg_runtime_dir.as_deref().map(std::path::Path::new) {
            _ if named_by_config => None,
            Some(dir) if dir.is_absolute() => None,
            Some(dir) if !dir.as_os_str().is_empty() => {
                Some("XDG_RUNTIME_DIR is not an absolute path")
            }
            _ => Some("no XDG_RUNTIME_DIR"),
        };
        Ok((path, fallback))
    }

    /// As [`Self::socket_path`], but a config file with an error still gives its `socket` key
    /// if that can be read, else the default: for `toold reload`, which must reach the daemon
    /// to be told what is wrong with the file.
    pub fn socket_path_despite_config_errors(&self) -> PathBuf {
        self.socket_path().unwrap_or_else(|_| {
            let socket = Config::socket_leniently(self.config.as_deref());
            resolve_socket_path(None, socket.as_deref(), &SocketEnv::from_process())
        })
    }
}
