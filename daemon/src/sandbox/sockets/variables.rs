//! The environment variables that name a service a command could ask to act for it — an
//! agent's, a terminal multiplexer's, a bus's, an editor's or a display's socket: a command
//! inherits one from the daemon only when the socket it names is one the command may reach.

use std::path::{Path, PathBuf};

/// Whether `name=value` (of the daemon's environment) names a service's socket that is not
/// among `reachable` (the sockets commands may reach, where they find them): such a variable
/// is not passed on.
pub(crate) fn names_a_service(name: &[u8], value: &[u8], reachable: &[PathBuf]) -> bool {
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let value = String::from_utf8_lossy(value);
    let socket: Option<PathBuf> = match name {
        "SSH_AUTH_SOCK"
        | "EMACS_SOCKET_NAME"
        | "WEZTERM_UNIX_SOCKET"
        | "SWAYSOCK"
        | "I3SOCK"
        | "NVIM"
        | "NVIM_LISTEN_ADDRESS"
        | "VSCODE_IPC_HOOK_CLI"
        | "VSCODE_IPC_HOOK"
        | "VSCODE_GIT_IPC_HANDLE"
        | "PULSE_SERVER" => Some(PathBuf::from(value.strip_prefix("unix:").unwrap_or(&value))),
        // `PATH,PID,INDEX`; `PATH:PID:1`.
        "TMUX" => value.split(',').next().map(PathBuf::from),
        "GPG_AGENT_INFO" => value.split(':').next().map(PathBuf::from),
        "DOCKER_HOST" | "CONTAINER_HOST" => value
            .strip_prefix("unix://")
            .map(PathBuf::from)
            .or(Some(PathBuf::new())),
        "KITTY_LISTEN_ON" => value.strip_prefix("unix:").map(PathBuf::from),
        // `unix:path=PATH,guid=…` (or `abstract=`, `runtime=yes`, several `;`-separated).
        "DBUS_SESSION_BUS_ADDRESS" => Some(
            value
                .split([',', ';'])
                .find_map(|part| part.strip_prefix("unix:path="))
                .map(PathBuf::from)
                .unwrap_or_default(),
        ),
        // Whose socket cannot be told from the value (a display, a screen or zellij session,
        // a pane): never passed.
        "DISPLAY"
        | "WAYLAND_DISPLAY"
        | "XAUTHORITY"
        | "TMUX_PANE"
        | "STY"
        | "WINDOW"
        | "ZELLIJ"
        | "ZELLIJ_SESSION_NAME"
        | "HYPRLAND_INSTANCE_SIGNATURE"
        | "PIPEWIRE_REMOTE"
        | "KITTY_PID"
        | "KITTY_WINDOW_ID" => Some(PathBuf::new()),
        _ => None,
    };
    socket.is_some_and(|socket| !is_reachable(&socket, reachable))
}

fn is_reachable(socket: &Path, reachable: &[PathBuf]) -> bool {
    !socket.as_os_str().is_empty()
        && reachable.iter().any(|path| {
            path == socket || std::fs::canonicalize(socket).is_ok_and(|resolved| &resolved == path)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_s_variable_passes_only_when_its_socket_is_reachable() {
        let agent = PathBuf::from("/run/user/1000/ssh-agent.socket");
        let reachable = [agent.clone()];
        let names = |name: &str, value: &str| {
            names_a_service(name.as_bytes(), value.as_bytes(), &reachable)
        };
        assert!(!names("SSH_AUTH_SOCK", "/run/user/1000/ssh-agent.socket"));
        assert!(names("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"));
        assert!(names("TMUX", "/tmp/tmux-1000/default,1234,0"));
        assert!(names(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/run/user/1000/bus"
        ));
        assert!(names(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:abstract=/tmp/dbus-x,guid=1"
        ));
        assert!(names("DOCKER_HOST", "unix:///var/run/docker.sock"));
        assert!(names("DISPLAY", ":0"));
        assert!(names("NVIM", "/run/user/1000/nvim.1.0"));
        assert!(!names("PATH", "/usr/bin"));
        assert!(!names("HOME", "/home/u"));
    }
}
