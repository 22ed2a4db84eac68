//! `toold sessions`: the daemon's sessions listed (a table for people, or the JSON the daemon
//! answered), and `new` and `close`: sessions made and ended by hand, for a shell (`id=$(toold
//! sessions new --cwd ~/src/app)`, then `toold call --session "$id"`, an MCP host's `toold mcp
//! serve --session "$id"`, `toold watch --session "$id"`, and `toold sessions close "$id"`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;
use toold_client::protocol::rpc::error_code;
use toold_client::protocol::{SessionCreateParams, SessionMode};

use super::Outcome;
use super::address::DaemonAddress;
use super::batch_run::{parse_mode, session_cwd};
use super::listing::connect_plainly;
use super::{render, visible};

#[derive(Args, Debug)]
// `toold sessions --json new` would be unclear: the listing's options go without a subcommand.
#[command(args_conflicts_with_subcommands = true)]
pub struct SessionsArgs {
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print the daemon's `session/list` result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Create a session and print its id on stdout.
    ///
    /// The session outlives this command: it lasts until `toold sessions close ID`, or until
    /// nobody has been attached to it for the daemon's `session_idle_ttl` (seven days unless
    /// configured). `toold watch` started before it follows it.
    ///
    /// Example: id=$(toold sessions new --cwd ~/src/app --mode plan --allow 'run_command(cargo test *)')
    New(NewArgs),
    /// Close sessions, canceling their running calls.
    ///
    /// Every id given is tried; an unknown one is reported on stderr. Exit code: 0 when every
    /// session was closed, 1 when one could not be, 2 when the daemon cannot be reached.
    ///
    /// Example: toold sessions close s_0123456789abcdef
    Close(CloseArgs),
}

#[derive(Args, Debug)]
pub struct NewArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// The session's working directory [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// The session's permission mode: default, accept_edits, plan, dont_ask or bypass.
    #[arg(long, value_name = "MODE", value_parser = parse_mode)]
    pub mode: Option<SessionMode>,
    /// A rule the session allows, such as 'run_command(cargo test *)' or Claude Code's
    /// 'Bash(cargo test:*)' (repeatable).
    #[arg(long, value_name = "RULE")]
    pub allow: Vec<String>,
    /// A rule the session denies, such as 'run_command(git push *)' or Claude Code's
    /// 'Bash(git push:*)' (repeatable).
    #[arg(long, value_name = "RULE")]
    pub deny: Vec<String>,
    /// The session's title, shown by `toold sessions` and `toold watch`.
    #[arg(long, value_name = "TITLE")]
    pub title: Option<String>,
}

#[derive(Args, Debug)]
pub struct CloseArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// The sessions to close (`toold sessions` lists them).
    #[arg(value_name = "ID", required = true)]
    pub session_ids: Vec<String>,
}

pub async fn sessions(args: SessionsArgs) -> anyhow::Result<Outcome> {
    match args.command {
        None => list(&args.address, args.json).await,
        Some(SessionsCommand::New(args)) => new(args).await,
        Some(SessionsCommand::Close(args)) => close(args).await,
    }
}

/// `toold sessions` alone: a table, or `session/list`'s result as JSON.
async fn list(address: &DaemonAddress, json: bool) -> anyhow::Result<Outcome> {
    let client = connect_plainly(address, "toold sessions").await?;
    let sessions = client.session_list().await;
    client.close();
    let sessions = sessions?;
    if json {
        render::print_out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "sessions": sessions }))?
        ));
    } else if sessions.is_empty() {
        render::print_out("no sessions\n");
    } else {
        render::print_out(&render::sessions_table(&sessions));
    }
    Ok(Outcome::Success)
}

async fn new(args: NewArgs) -> anyhow::Result<Outcome> {
    let mut params = SessionCreateParams::new(session_cwd(args.cwd.as_deref())?);
    params.mode = args.mode;
    params.title = args.title;
    if !args.allow.is_empty() || !args.deny.is_empty() {
        params.rules = Some(serde_json::from_value(
            json!({"allow": args.allow, "deny": args.deny}),
        )?);
    }
    let client = connect_plainly(&args.address, "toold sessions new").await?;
    // Leaving the connection detaches it; the session stays (sessions outlive connections).
    let created = client.session_create(params).await;
    client.close();
    let snapshot = created?;
    println!("{}", snapshot.session_id);
    Ok(Outcome::Success)
}

async fn close(args: CloseArgs) -> anyhow::Result<Outcome> {
    let client = connect_plainly(&args.address, "toold sessions close").await?;
    let mut outcome = Outcome::Success;
    // Each id on its own: one that is wrong does not keep the others open.
    for session_id in &args.session_ids {
        match client.session_close(session_id).await {
            Ok(()) => {}
            Err(error) if error.rpc_code() == Some(error_code::UNKNOWN_SESSION) => {
                eprintln!(
                    "toold: no session {}; `toold sessions` lists them",
                    visible::line(session_id)
                );
                outcome = Outcome::Failed;
            }
            Err(error) => {
                eprintln!(
                    "toold: cannot close session {}: {}",
                    visible::line(session_id),
                    visible::line(&error.to_string())
                );
                outcome = Outcome::Failed;
            }
        }
    }
    client.close();
    Ok(outcome)
}
