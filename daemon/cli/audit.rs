//! `toold audit`: the audit log read back (what ran, and who allowed it), newest last, and
//! `toold audit verify`, the check of its hash chain. Reads the files directly: no daemon is
//! needed.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::Value;
use toold_client::protocol::time::parse_rfc3339;

use super::{Outcome, render, visible};

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
    /// With --json, one JSON object goes to stdout: {"log": PATH, "files": [PATH, oldest
    /// first], "records": N (those walked; with a break, until it was seen), "recovered": N (torn lines
    /// covered by `recovered` records), "holds": BOOL, "broken": null or {"file", "line",
    /// "reason"}, "notes": [TEXT] (what is not a break: the chain starting after rotated-away
    /// files, the newest line still being written)}.
    ///
    /// Exit code: 0 when the chain holds, 1 when it is broken.
    Verify,
}

pub fn audit(args: AuditArgs) -> anyhow::Result<Outcome> {
    let path = match &args.log {
        Some(path) => path.clone(),
        None => toold::audit::default_path()
            .context("no audit log: neither XDG_STATE_HOME nor HOME gives a state directory")?,
    };
    match args.command {
        Some(AuditCommand::Verify) if args.json => verify_json(&path),
        Some(AuditCommand::Verify) => verify(&path),
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

fn verify(path: &std::path::Path) -> anyhow::Result<Outcome> {
    if toold::audit::read::files(path).is_empty() {
        return Err(no_log(path));
    }
    match toold::audit::read::verify(path) {
        Ok(verified) => {
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
            text.push('\n');
            for note in &verified.notes {
                text.push_str(&format!("  note: {note}\n"));
            }
            render::print_out(&visible::block(&text));
            Ok(Outcome::Success)
        }
        Err(broken) => {
            render::print_out(&visible::block(&format!(
                "the audit log's chain is BROKEN at {}: {}\n",
                broken.place, broken.why
            )));
            Ok(Outcome::Failed)
        }
    }
}

/// `verify --json`: the same check, as one object for a program.
fn verify_json(path: &std::path::Path) -> anyhow::Result<Outcome> {
    let files = toold::audit::read::files(path);
    if files.is_empty() {
        return Err(no_log(path));
    }
    let (verified, broken) = toold::audit::read::check(path);
    let report = serde_json::json!({
        "log": path.display().to_string(),
        "files": files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>(),
        "records": verified.records,
        "recovered": verified.recovered,
        "holds": broken.is_none(),
        "broken": broken.as_ref().map(|broken| serde_json::json!({
            "file": broken.file.display().to_string(),
            "line": broken.line,
            "reason": broken.why,
        })),
        "notes": verified.notes,
    });
    render::print_out(&format!("{report:#}\n"));
    Ok(if broken.is_none() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

fn list(path: &std::path::Path, args: &AuditArgs) -> anyhow::Result<Outcome> {
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
        Some("call") => {
            let decision = &record["decision"];
            let by = match decision["by"].as_str() {
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
            };
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
