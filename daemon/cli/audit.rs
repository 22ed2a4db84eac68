//! `toold audit`: the audit log read back (what ran, and who allowed it), newest last, and
//! `toold audit verify`, the check of its hash chain. Reads the files directly: no daemon is
//! needed; `verify` also asks a running daemon for the last record it wrote, since lines
//! removed from the end of the file break no link.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;
use toold_client::protocol::AuditHead;
use toold_client::protocol::time::parse_rfc3339;
use toold_client::{Client, ClientError, ClientOptions};

use super::address::DaemonAddress;
use super::{Outcome, render, visible};

/// How long `verify` waits for a daemon to answer before checking the file alone.
const DAEMON_WAIT: Duration = Duration::from_secs(3);

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
    /// Only this session's records.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only records from this time on: RFC 3339 (`2026-12-01T09:00:00Z`) or an age (`30s`,
    /// `10m`, `2h`, `7d`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Print each record as its JSON line; with `verify`, print its report as one JSON
    /// object.
    #[arg(long, global = true)]
    pub json: bool,
    /// The log [default: $XDG_STATE_HOME/toold/audit.jsonl]
    #[arg(long, value_name = "FILE", global = true)]
    pub log: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Check the hash chain over every file of the log and name the first line that was
    /// changed, removed or moved.
    ///
    /// When a daemon answers on the socket and writes this log, the log must also hold the
    /// last record the daemon wrote, as it wrote it: a log that ends before it lost lines at
    /// its end (a break). Without one, only the file's own chain is checked (a note says so).
    ///
    /// With --json, one JSON object goes to stdout: {"log": PATH, "files": [PATH, oldest
    /// first], "records": N (those walked; with a break, until it was seen), "recovered": N (torn lines
    /// covered by `recovered` records), "lost": N (records the daemon could not write, as its
    /// `records_lost` records say), "holds": BOOL, "broken": null or {"file", "line",
    /// "reason"}, "daemon": null or {"socket", "head": null or {"seq", "hash"}} (the
    /// daemon whose last record was checked), "notes": [TEXT] (what is not a break: the
    /// chain starting after rotated-away files, the newest line still being written, the
    /// log found replaced with nothing lost, no daemon to check the end against)}.
    ///
    /// Exit code: 0 when the chain holds, 1 when it is broken.
    Verify(VerifyArgs),
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
}

pub fn audit(args: AuditArgs) -> anyhow::Result<Outcome> {
    let path = match &args.log {
        Some(path) => path.clone(),
        None => toold::audit::default_path()
            .context("no audit log: neither XDG_STATE_HOME nor HOME gives a state directory")?,
    };
    match args.command {
        Some(AuditCommand::Verify(verify_args)) => {
            if toold::audit::read::files(&path).is_empty() {
                return Err(no_log(&path));
            }
            let (daemon, verified, broken) = checked(&path, &verify_args.address);
            if args.json {
                verify_json(&path, &daemon, &verified, broken.as_ref())
            } else {
                verify(&daemon, &verified, broken.as_ref())
            }
        }
        None => list(&path, &args),
    }
}

/// The error for a log that has no file here. The log is read from this machine's files, so
/// over a forwarded socket (`ssh -L`) the daemon's log is on the other machine; a silent empty
/// listing would read as "nothing ran".
fn no_log(path: &std::path::Path) -> anyhow::Error {
    anyhow::anyhow!(
        "no audit log at {} on this machine; the daemon you reach may run elsewhere: run \
         `toold audit` there",
        path.display()
    )
}

/// `verify`'s check: the file's chain, its seal, and against the running daemon. The daemon
/// is asked first and the file read after: records the daemon writes meanwhile come after the
/// head it reported, and that head is in the file however late it is read. Then it is asked
/// again: a record past its new head is one the daemon never wrote (another program appended
/// it, chained or not).
fn checked(
    path: &Path,
    address: &DaemonAddress,
) -> (
    Daemon,
    toold::audit::read::Verified,
    Option<toold::audit::read::Broken>,
) {
    let daemon = daemon_head(path, address);
    let (verified, broken) = toold::audit::read::check_against(path, daemon.head());
    let broken = broken.or_else(|| {
        let later = daemon_head(path, address);
        let head = later.head()?;
        toold::audit::read::written_after(path, head).err()
    });
    (daemon, verified, broken)
}

/// What the running daemon says about the log being verified.
enum Daemon {
    /// A daemon writing this log answered on `socket`; its last record, when it has one.
    Writing {
        socket: PathBuf,
        head: Option<AuditHead>,
    },
    /// No daemon to check the end against, and why (a note).
    Unchecked(String),
}

impl Daemon {
    fn head(&self) -> Option<&AuditHead> {
        match self {
            Daemon::Writing { head, .. } => head.as_ref(),
            Daemon::Unchecked(_) => None,
        }
    }

    /// The note to add, when the end could not be checked against the daemon.
    fn note(&self) -> Option<String> {
        match self {
            Daemon::Writing { socket, head: None } => Some(format!(
                "the daemon on {} reports no last record (it has written none to this log, or \
                 it is older than this toold): only the file's own chain was checked",
                socket.display()
            )),
            Daemon::Writing { .. } => None,
            Daemon::Unchecked(why) => Some(format!(
                "{why}: only the file's own chain was checked (lines removed from its end \
                 cannot be seen without the running daemon's last record)"
            )),
        }
    }
}

/// Asks the daemon on the socket for its audit log's state: its last record, when it writes
/// the log at `path`.
fn daemon_head(path: &Path, address: &DaemonAddress) -> Daemon {
    let socket = match address.socket_path() {
        Ok(socket) => socket,
        Err(err) => return Daemon::Unchecked(format!("no daemon socket: {err:#}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return Daemon::Unchecked(format!("cannot ask the daemon: {err}")),
    };
    let options = ClientOptions::new("toold audit verify")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(&socket);
    let connected = runtime.block_on(async {
        let connected = tokio::time::timeout(DAEMON_WAIT, Client::connect(options)).await;
        connected.map(|connected| {
            connected.map(|(client, _events)| {
                let initialized = client.initialized();
                client.close();
                initialized
            })
        })
    });
    runtime.shutdown_background();
    let initialized = match connected {
        Ok(Ok(initialized)) => initialized,
        Ok(Err(ClientError::Connect { source, .. })) => {
            return Daemon::Unchecked(format!(
                "no daemon answered on {} ({source})",
                socket.display()
            ));
        }
        Ok(Err(err)) => {
            return Daemon::Unchecked(format!(
                "the daemon on {} did not answer: {err}",
                socket.display()
            ));
        }
        Err(_) => {
            return Daemon::Unchecked(format!(
                "the daemon on {} did not answer within {} s",
                socket.display(),
                DAEMON_WAIT.as_secs()
            ));
        }
    };
    let Some(audit) = initialized.audit else {
        return Daemon::Unchecked(format!(
            "the daemon on {} does not report its audit log (older than this toold)",
            socket.display()
        ));
    };
    let writes = audit.path.as_deref().filter(|_| audit.mode != "off");
    match writes {
        Some(written) if same_file(Path::new(written), path) => Daemon::Writing {
            socket,
            head: audit.head,
        },
        Some(written) => Daemon::Unchecked(format!(
            "the daemon on {} writes {written}, not this log",
            socket.display()
        )),
        None => Daemon::Unchecked(format!(
            "the daemon on {} keeps no audit log (audit = \"off\")",
            socket.display()
        )),
    }
}

/// Whether two paths name the same log: by their directories resolved (the file itself may
/// be missing, or replaced, while the daemon runs) and their names.
fn same_file(a: &Path, b: &Path) -> bool {
    let resolved = |path: &Path| {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        Some((
            std::fs::canonicalize(dir).ok()?,
            path.file_name()?.to_owned(),
        ))
    };
    match (resolved(a), resolved(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

fn verify(
    daemon: &Daemon,
    verified: &toold::audit::read::Verified,
    broken: Option<&toold::audit::read::Broken>,
) -> anyhow::Result<Outcome> {
    let Some(broken) = broken else {
        let mut text = format!(
            "the audit log's chain holds: {} records in {} files",
            verified.records, verified.files
        );
        if verified.recovered > 0 {
            text.push_str(&format!(
                ", {} torn lines covered by `recovered` records",
                verified.recovered
            ));
        }
        if verified.lost > 0 {
            text.push_str(&format!(
                "; {} records were lost (the daemon could not write them: see the notes)",
                verified.lost
            ));
        }
        if let Some(head) = daemon.head() {
            text.push_str(&format!(
                "; it holds the last record the running daemon wrote (record {})",
                head.seq
            ));
        }
        text.push('\n');
        for note in verified.notes.iter().cloned().chain(daemon.note()) {
            text.push_str(&format!("  note: {note}\n"));
        }
        render::print_out(&visible::block(&text));
        return Ok(Outcome::Success);
    };
    render::print_out(&visible::block(&format!(
        "the audit log's chain is BROKEN at {}: {}\n",
        broken.place, broken.why
    )));
    Ok(Outcome::Failed)
}

/// `verify --json`: the same check, as one object for a program.
fn verify_json(
    path: &Path,
    daemon: &Daemon,
    verified: &toold::audit::read::Verified,
    broken: Option<&toold::audit::read::Broken>,
) -> anyhow::Result<Outcome> {
    let files = toold::audit::read::files(path);
    let mut notes = verified.notes.clone();
    notes.extend(daemon.note());
    let report = serde_json::json!({
        "log": path.display().to_string(),
        "files": files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>(),
        "records": verified.records,
        "recovered": verified.recovered,
        "lost": verified.lost,
        "holds": broken.is_none(),
        "broken": broken.map(|broken| serde_json::json!({
            "file": broken.file.display().to_string(),
            "line": broken.line,
            "reason": broken.why,
        })),
        "daemon": match daemon {
            Daemon::Writing { socket, head } => serde_json::json!({
                "socket": socket.display().to_string(),
                "head": head,
            }),
            Daemon::Unchecked(_) => Value::Null,
        },
        "notes": notes,
    });
    render::print_out(&format!("{report:#}\n"));
    Ok(if broken.is_none() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

fn list(path: &Path, args: &AuditArgs) -> anyhow::Result<Outcome> {
    let since = args.since.as_deref().map(since).transpose()?;
    if toold::audit::read::files(path).is_empty() {
        return Err(no_log(path));
    }
    let mut out = String::new();
    for line in toold::audit::read::lines(path) {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let Ok(record) = serde_json::from_slice::<Value>(&line.bytes) else {
            if !args.json {
                out.push_str(&format!("{}: (not a record: a torn line)\n", line.place()));
            }
            continue;
        };
        if let Some(session) = &args.session
            && record["session"].as_str() != Some(session.as_str())
        {
            continue;
        }
        if let Some(since) = since {
            let at = record["ts"].as_str().and_then(parse_rfc3339);
            if at.is_none_or(|at| at < since) {
                continue;
            }
        }
        if args.json {
            out.push_str(&String::from_utf8_lossy(&line.bytes));
            out.push('\n');
        } else {
            out.push_str(&visible::line(&for_people(&record)));
            out.push('\n');
        }
        // Long logs stream rather than pile up.
        if out.len() > 64 * 1024 {
            render::print_out(&out);
            out.clear();
        }
    }
    render::print_out(&out);
    Ok(Outcome::Success)
}

/// `--since`: an RFC 3339 time, or an age before now.
fn since(text: &str) -> anyhow::Result<SystemTime> {
    if let Some(at) = parse_rfc3339(text) {
        return Ok(at);
    }
    let unit_at = text.char_indices().last().map_or(0, |(at, _)| at);
    let (number, unit) = text.split_at(unit_at);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<u64>() {
        Ok(count) if seconds > 0 => Ok(SystemTime::now()
            .checked_sub(Duration::from_secs(count.saturating_mul(seconds)))
            .unwrap_or(SystemTime::UNIX_EPOCH)),
        _ => bail!(
            "--since {text:?} is neither an RFC 3339 time (2026-12-01T09:00:00Z) nor an age (30s, 10m, 2h, 7d)"
        ),
    }
}

/// One record on one line: when, which session, what, and who decided.
fn for_people(record: &Value) -> String {
    let text = |name: &str| record[name].as_str().unwrap_or("").to_owned();
    let ts = text("ts");
    let session = text("session");
    match record["kind"].as_str() {
        Some("call_decided") => format!(
            "{ts}  {session}  {} {} {}  → runs  [{}]",
            text("call_id"),
            text("tool"),
            render::compact_json(&record["arguments"]),
            decided_by(&record["decision"])
        ),
        Some("call") => {
            let by = decided_by(&record["decision"]);
            let exit = match record["exit_code"].as_i64() {
                Some(code) => format!(", exit {code}"),
                None => String::new(),
            };
            format!(
                "{ts}  {session}  {} {} {}  → {}  [{by}]  {} ms{exit}",
                text("call_id"),
                text("tool"),
                render::compact_json(&record["arguments"]),
                text("outcome"),
                record["elapsed_ms"]
            )
        }
        Some(kind) => {
            let mut details = record.clone();
            if let Some(details) = details.as_object_mut() {
                for name in ["seq", "ts", "kind", "session", "prev"] {
                    details.remove(name);
                }
            }
            format!(
                "{ts}  {session}  {kind}  {}",
                render::compact_json(&details)
            )
        }
        None => render::compact_json(record),
    }
}

/// Who decided a call, from its record's `decision`: an approver's answer and identity, or the
/// decider and step (with the rule and the answer given).
fn decided_by(decision: &Value) -> String {
    match decision["by"].as_str() {
        Some("approver") => {
            let approver = &decision["approver"];
            format!(
                "{} by {} (pid {}, uid {})",
                decision["answer"].as_str().unwrap_or("answered"),
                approver["client_name"].as_str().unwrap_or("an approver"),
                approver["pid"],
                approver["uid"]
            )
        }
        Some(by) => {
            let mut by = format!("{by}: {}", decision["step"].as_str().unwrap_or(""));
            if let Some(rule) = decision["rule"].as_str() {
                by.push_str(&format!(" {rule}"));
            }
            if let Some(answer) = decision["answer"].as_str() {
                by.push_str(&format!(" ({answer})"));
            }
            by
        }
        None => "not judged".to_owned(),
    }
}
