//! `toold status`: whether a daemon answers, and what it says about itself: version, socket,
//! instance, sessions. The daemon reports no uptime, so the age of its process (found through
//! the socket's peer credentials and /proc) stands in for it, labelled as such.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use toold_client::protocol::InitializeResult;
use toold_client::{Client, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::render;

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print the status as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a running daemon told us.
struct Up {
    initialized: InitializeResult,
    sessions: usize,
    running: usize,
    process: Option<DaemonProcess>,
}

/// The daemon's process, seen from outside.
struct DaemonProcess {
    pid: i32,
    age: Option<Duration>,
}

pub async fn status(args: StatusArgs) -> anyhow::Result<Outcome> {
    let socket = args.address.socket_path()?;
    let options = ClientOptions::new("toold status")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(&socket);
    let up = match Client::connect(options).await {
        Ok((client, _events)) => {
            let sessions = client.session_list().await;
            let initialized = client.initialized();
            client.close();
            let sessions = sessions?;
            Up {
                initialized,
                sessions: sessions.len(),
                running: sessions
                    .iter()
                    .filter(|session| !session.running_batches.is_empty())
                    .count(),
                process: daemon_process(&socket),
            }
        }
        Err(error) => {
            if args.json {
                let report = json!({"up": false, "socket": socket, "error": error.to_string()});
                render::print_out(&format!("{}\n", serde_json::to_string_pretty(&report)?));
            } else {
                render::print_out(&format!("toold is not running: {error}\n"));
            }
            return Ok(Outcome::Failed);
        }
    };
    if args.json {
        let report = json!({
            "up": true,
            "socket": socket,
            "version": up.initialized.server_info.version,
            "protocol_version": up.initialized.protocol_version,
            "instance_id": up.initialized.instance_id,
            "sessions": up.sessions,
            "sessions_running": up.running,
            "uptime_seconds": null,
            "pid": up.process.as_ref().map(|process| process.pid),
            "process_age_seconds": up.process.as_ref().and_then(|process| process.age).map(|age| age.as_secs()),
        });
        render::print_out(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        render::print_out(&describe(&socket, &up));
    }
    Ok(Outcome::Success)
}

fn describe(socket: &Path, up: &Up) -> String {
    let info = &up.initialized;
    let version = info.server_info.version.as_deref().unwrap_or("unknown");
    let uptime = match &up.process {
        Some(DaemonProcess {
            pid,
            age: Some(age),
        }) => format!(
            "not reported by the daemon; its process (pid {pid}) has run for {}",
            render::duration(age.as_secs())
        ),
        Some(DaemonProcess { pid, age: None }) => {
            format!(
                "not reported by the daemon (pid {pid}); instance {}",
                info.instance_id
            )
        }
        None => format!("not reported by the daemon; instance {}", info.instance_id),
    };
    format!(
        "toold is up\n  socket:    {}\n  version:   {version} (protocol {})\n  instance:  {}\n  \
         sessions:  {} ({} running a batch)\n  uptime:    {uptime}\n",
        socket.display(),
        info.protocol_version,
        info.instance_id,
        up.sessions,
        up.running,
    )
}

/// The pid at the other end of the socket (SO_PEERCRED) and how long it has run.
fn daemon_process(socket: &Path) -> Option<DaemonProcess> {
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let credentials =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    let pid = credentials.pid();
    Some(DaemonProcess {
        pid,
        age: process_age(pid),
    })
}

/// From /proc: the system's uptime less the process's start time (in clock ticks since boot).
fn process_age(pid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may itself hold spaces and parentheses.
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    // Field 22 of the whole line, `starttime`, is the 20th after the name.
    let start_ticks: u64 = after_name.split(' ').nth(19)?.parse().ok()?;
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let ticks_per_second = u64::try_from(ticks_per_second)
        .ok()
        .filter(|&ticks| ticks > 0)?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let system_seconds: f64 = uptime.split(' ').next()?.parse().ok()?;
    let started_seconds = start_ticks as f64 / ticks_per_second as f64;
    Some(Duration::from_secs_f64(
        (system_seconds - started_seconds).max(0.0),
    ))
}
