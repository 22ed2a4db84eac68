//! `toold mcp serve`: an MCP server on stdio for any MCP host, backed by the shared daemon. It
//! starts the daemon when none answers, creates a session (or joins `--session`), and turns
//! the host's `tools/list` and `tools/call` into the daemon's `tools/list` and one-call
//! batches; live output and `tool/progress` into `notifications/progress`; the host's
//! `notifications/cancelled` into a cancel (and no response); the daemon's approvals of its
//! calls into questions to the host's person (`approvals`), when the host can ask them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use anyhow::{Context, bail};
use clap::Args;
use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::json;
use tokio::signal::unix::{SignalKind, signal};
use toold_client::protocol::{SessionCreateParams, SessionMode};
use toold_client::{Client, ClientOptions};

use super::Outcome;
use super::batch_run::{parse_mode, session_cwd};
use super::connect::{ConnectArgs, connect_or_start};

mod approvals;
mod bridge;
mod stdio;

use approvals::Approvals;
use bridge::{Bridge, EventRoutes, bridge_events};

#[derive(Args, Debug)]
pub struct McpServeArgs {
    #[command(flatten)]
    pub daemon: ConnectArgs,
    /// Join this existing session (left as it was when the host goes) instead of creating one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The new session's working directory [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    pub cwd: Option<PathBuf>,
    /// The new session's permission mode: default, accept_edits, plan, dont_ask or bypass.
    #[arg(long, value_name = "MODE", value_parser = parse_mode, conflicts_with = "session")]
    pub mode: Option<SessionMode>,
    /// A rule the new session allows, such as 'run_command(cargo test *)' or Claude Code's
    /// 'Bash(cargo test:*)' (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub allow: Vec<String>,
    /// A rule the new session denies, such as 'run_command(git push *)' or Claude Code's
    /// 'Bash(git push:*)' (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub deny: Vec<String>,
}

/// Serves MCP on stdio until the host closes it; then closes the session it created (a joined
/// one is left as it was).
pub async fn serve(args: McpServeArgs) -> anyhow::Result<Outcome> {
    let daemon = args.daemon.clone();
    tokio::task::spawn_blocking(move || connect_or_start(&daemon).map(drop))
        .await
        .context("the daemon's start was interrupted")??;
    // The pid tells people whose calls they are; the random part keeps another client of a
    // joined session from naming its calls so, and having this host asked about them.
    let call_prefix = format!(
        "mcp{}_{}_",
        std::process::id(),
        approvals::random_hex(8).context("cannot read random bytes")?
    );
    let approvals = Arc::new(Approvals::new(call_prefix));
    let options = ClientOptions::new("toold mcp serve")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(args.daemon.address.socket_path()?)
        .on_approval_or_decline({
            let approvals = Arc::clone(&approvals);
            move |request| {
                let approvals = Arc::clone(&approvals);
                async move { approvals.answer(request).await }
            }
        });
    let (client, events) = Client::connect(options).await?;
    let (session_id, created) = open_session(&client, &args).await?;

    let (connected, link) = tokio::sync::watch::channel(true);
    let bridge = Bridge {
        client: client.clone(),
        session_id: session_id.clone(),
        approvals: Arc::clone(&approvals),
        next_call: AtomicU64::new(1),
        progress: Arc::default(),
        waiting: Arc::default(),
        callable: tokio::sync::Mutex::default(),
        connected: link,
    };
    let routes = EventRoutes {
        progress: Arc::clone(&bridge.progress),
        approvals: Arc::clone(&approvals),
        client: client.clone(),
        daemon: args.daemon.clone(),
        connected: Arc::new(connected),
    };
    bridge_events(events, routes);
    let (host_in, host_out) = stdio::host_stdio();
    let transport = AsyncRwTransport::new_server(host_in, host_out);
    let served = bridge.serve(transport).await;
    // A host that stops its server with a signal (as hosts do when a call is in flight at
    // their exit) gets its session closed all the same.
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
    let outcome = match served {
        Ok(running) => {
            let _ = approvals.host.set(running.peer().clone());
            tokio::select! {
                ended = running.waiting() => {
                    ended.map(drop).context("the MCP session with the host failed")
                }
                _ = terminate.recv() => Ok(()),
                _ = hangup.recv() => Ok(()),
                _ = tokio::signal::ctrl_c() => Ok(()),
            }
        }
        Err(error) => Err(anyhow::anyhow!("the MCP host's handshake failed: {error}")),
    };
    let ended = if created {
        client.session_close(&session_id).await
    } else {
        client.session_detach(&session_id).await
    };
    if let Err(error) = ended {
        // The host is gone; a session left behind expires after its idle TTL.
        eprintln!("toold mcp serve: warning: cannot close or leave session {session_id}: {error}");
    }
    client.close();
    outcome.map(|()| Outcome::Success)
}

/// The session to serve: `--session`'s (attached) or a new one; and whether it is new.
async fn open_session(client: &Client, args: &McpServeArgs) -> anyhow::Result<(String, bool)> {
    if let Some(session_id) = &args.session {
        client
            .session_attach(session_id, None)
            .await
            .with_context(|| {
                format!("cannot join session {session_id}; `toold sessions` lists them")
            })?;
        return Ok((session_id.clone(), false));
    }
    let cwd = session_cwd(args.cwd.as_deref())?;
    // Some hosts start their servers in `/` or the home directory: read-only tools run
    // unasked inside the session's roots, and those roots would hold every secret of the
    // user's. Only a `--cwd` says that is meant.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if args.cwd.is_none() && (cwd == Path::new("/") || home.as_deref() == Some(cwd.as_path())) {
        bail!(
            "the MCP host started `toold mcp serve` in {}, which would make the session's \
             roots (where read-only tools run unasked) all of it; add \"--cwd\", \
             \"/path/to/project\" to its args",
            cwd.display()
        );
    }
    let mut params = SessionCreateParams::new(cwd);
    params.mode = args.mode;
    params.title = Some(format!("toold mcp serve (pid {})", std::process::id()));
    if !args.allow.is_empty() || !args.deny.is_empty() {
        params.rules = Some(serde_json::from_value(
            json!({"allow": args.allow, "deny": args.deny}),
        )?);
    }
    let snapshot = client.session_create(params).await?;
    Ok((snapshot.session_id, true))
}
