//! `toold status`: whether a daemon answers, and what it says about itself: version, socket,
//! instance, process, sessions, and its uptime (from `initialize`'s `started_at`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use clap::Args;
use serde_json::json;
use toold_client::protocol::InitializeResult;
use toold_client::protocol::index::{IndexRootStatus, IndexStatusParams};
use toold_client::protocol::methods::IndexStatus;
use toold_client::protocol::time::parse_rfc3339;
use toold_client::{Client, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::render;
use super::visible;

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
    /// Each root's warm index (empty from a daemon that does not say).
    indexes: Vec<IndexRootStatus>,
    sessions: usize,
    running: usize,
    /// The daemon's pid, as it says (else from the socket's peer credentials, which over a
    /// forwarded socket name the forwarder).
    pid: Option<i64>,
}

impl Up {
    /// How long the daemon has run, from its `started_at`; `None` from a daemon that does not
    /// say (older than this command). A clock set back since the start counts as zero.
    fn uptime(&self) -> Option<Duration> {
        let started = parse_rfc3339(self.initialized.started_at.as_deref()?)?;
        Some(
            SystemTime::now()
                .duration_since(started)
                .unwrap_or(Duration::ZERO),
        )
    }
}

pub async fn status(args: StatusArgs) -> anyhow::Result<Outcome> {
    let socket = args.address.socket_path()?;
    let options = ClientOptions::new("toold status")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(&socket);
    let up = match Client::connect(options).await {
        Ok((client, _events)) => {
            let sessions = client.session_list().await;
            let indexes = client.call::<IndexStatus>(IndexStatusParams {}).await;
            let initialized = client.initialized();
            let said_pid = initialized.pid.map(i64::from);
            client.close();
            let sessions = sessions?;
            Up {
                initialized,
                // A daemon older than the index does not know the method.
                indexes: indexes.unwrap_or_default(),
                sessions: sessions.len(),
                running: sessions
                    .iter()
                    .filter(|session| !session.running_batches.is_empty())
                    .count(),
                pid: said_pid.or_else(|| daemon_pid(&socket).map(i64::from)),
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
            "started_at": up.initialized.started_at,
            "uptime_seconds": up.uptime().map(|uptime| uptime.as_secs()),
            "pid": up.pid,
            "sandbox": up.initialized.sandbox,
            "audit": up.initialized.audit,
            "log_file": up.initialized.log_file,
            "index": up.indexes,
        });
        render::print_out(&format!("{}\n", serde_json::to_string_pretty(&report)?));
    } else {
        render::print_out(&visible::block(&describe(&socket, &up)));
    }
    Ok(Outcome::Success)
}

fn describe(socket: &Path, up: &Up) -> String {
    let info = &up.initialized;
    let version = info.server_info.version.as_deref().unwrap_or("unknown");
    let uptime = match (up.uptime(), &info.started_at) {
        (Some(uptime), Some(started_at)) => format!(
            "{} (since {})",
            render::duration(uptime.as_secs()),
            started_at
        ),
        (None, Some(started_at)) => format!(
            "unknown: the daemon says it started at {:?}, which is not an RFC 3339 time",
            started_at
        ),
        (_, None) => "not reported by the daemon (older than this toold)".to_owned(),
    };
    let process = up
        .pid
        .map_or_else(|| "unknown".to_owned(), |pid| pid.to_string());
    format!(
        "toold is up\n  socket:    {}\n  version:   {version} (protocol {})\n  instance:  {}\n  \
         pid:       {process}\n  sessions:  {} ({} running a batch)\n  uptime:    {uptime}\n  \
         sandbox:   {}\n  audit:     {}\n  index:     {}\n  log:       {}\n",
        socket.display(),
        info.protocol_version,
        info.instance_id,
        up.sessions,
        up.running,
        describe_sandbox(info.sandbox.as_ref()),
        describe_audit(info.audit.as_ref()),
        describe_indexes(&up.indexes),
        info.log_file
            .as_deref()
            .unwrap_or("its stderr (the journal under systemd)"),
    )
}

/// The warm indexes: how many roots, and each root's state, files and fallbacks.
fn describe_indexes(indexes: &[IndexRootStatus]) -> String {
    if indexes.is_empty() {
        return "no root indexed yet".to_owned();
    }
    let memory: u64 = indexes.iter().map(|root| root.memory_bytes).sum();
    let mut text = format!(
        "{} root{}, {:.1} MiB",
        indexes.len(),
        if indexes.len() == 1 { "" } else { "s" },
        memory as f64 / (1024.0 * 1024.0)
    );
    for root in indexes {
        let state = match &root.reason {
            Some(reason) => format!("{} ({reason})", root.state),
            None => root.state.clone(),
        };
        text.push_str(&format!(
            "\n    {}: {state}, {} files",
            root.root, root.files
        ));
        if !root.fallbacks.is_empty() {
            let fallbacks: Vec<String> = root
                .fallbacks
                .iter()
                .map(|(reason, count)| format!("{reason} {count}"))
                .collect();
            text.push_str(&format!("; cold answers: {}", fallbacks.join(", ")));
        }
    }
    text
}

/// The audit log's state, with what was lost said first.
fn describe_audit(audit: Option<&toold_protocol::AuditStatus>) -> String {
    let Some(audit) = audit else {
        return "not reported by the daemon (older than this toold)".to_owned();
    };
    if audit.mode == "off" {
        return "off (audit = \"off\")".to_owned();
    }
    let path = audit.path.as_deref().unwrap_or("(no path)");
    let mut text = format!(
        "{path} ({}), {} records written since the start",
        audit.mode, audit.written
    );
    if let Some(replaced) = &audit.replaced {
        let found = match replaced.found.as_str() {
            "no_file" => "removed or moved away",
            _ => "replaced by another file",
        };
        let lost = if replaced.ends_with_last_record {
            "it still ended with the daemon's last record"
        } else {
            "it did NOT end with the daemon's last record: lines were removed or changed"
        };
        text.push_str(&format!(
            "\n             REPLACED: the log file was {found} while the daemon ran ({} time{}, \
             last at {}; {lost}); reopened, see record {} (`toold audit verify`)",
            replaced.count,
            if replaced.count == 1 { "" } else { "s" },
            replaced.ts,
            replaced.seq
        ));
    }
    if audit.lost > 0 {
        text.push_str(&format!(
            "\n             FAILING: {} records lost; last error: {}",
            audit.lost,
            audit.last_error.as_deref().unwrap_or("unknown")
        ));
    }
    text
}

/// What the daemon's kernel enforces on commands, in a line or two.
fn describe_sandbox(report: Option<&toold_protocol::SandboxReport>) -> String {
    let Some(report) = report else {
        return "not reported by the daemon (older than this toold)".to_owned();
    };
    let landlock = match report.landlock_abi {
        Some(abi) => format!("Landlock ABI {abi}"),
        None => "no Landlock".to_owned(),
    };
    let degraded = if report.degraded.is_empty() {
        "every protection enforced".to_owned()
    } else {
        format!(
            "NOT enforced here: {} (see [sandbox] on_unsupported)",
            report.degraded.join(", ")
        )
    };
    let processes = match report.processes.as_str() {
        "pid_namespace" => "each command in a PID namespace",
        _ => "no PID namespaces, leftovers swept",
    };
    format!(
        "{landlock}; daemon socket kept out by {}; {processes}\n             {degraded}",
        report.daemon_socket
    )
}

/// The pid at the other end of the socket (SO_PEERCRED).
fn daemon_pid(socket: &Path) -> Option<i32> {
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    let credentials =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    Some(credentials.pid())
}
