//! `toold watch [SESSION]`: follows a session's events live (calls, their output, results,
//! approvals resolved) and, on a terminal, answers its approvals (`[y] once / [s] session /
//! [n] deny / [a] abort`, as `toold call` asks, each with its preview: a file tool's diff, a
//! command's directory, commands and sandbox). Without `SESSION`, the most recently created
//! live session. It ends when the session closes, the daemon goes, or on Ctrl-C.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use toold_client::protocol::{Event, OutputStream, rpc::error_code};
use toold_client::{Client, ClientEvent, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::approve::{self, ApprovalPolicy};
use super::{render, visible};

/// How often the session is asked whether it is still there: the daemon sends no event when a
/// session closes.
const SESSION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The session to watch [default: the most recently created live session].
    pub session: Option<String>,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print each event as one line of JSON (`{"method", "params"}`) instead of text for
    /// people; approvals are then left to the session's other approvers.
    #[arg(long)]
    pub json: bool,
}

pub async fn watch(args: WatchArgs) -> anyhow::Result<Outcome> {
    // Approvals are answered only by a person at a terminal; a watcher without one (or with
    // --json) declares none, so it never stands between a call and its other approvers.
    let asks = !args.json && ApprovalPolicy::choose(false) == ApprovalPolicy::AskOnTerminal;
    let mut options = ClientOptions::new("toold watch")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(args.address.socket_path()?);
    if asks {
        let prompt_lock = Arc::new(tokio::sync::Mutex::new(()));
        options = options.on_approval_or_decline(move |request| {
            let prompt_lock = Arc::clone(&prompt_lock);
            async move { approve::decide(ApprovalPolicy::AskOnTerminal, request, prompt_lock).await }
        });
    }
    let (client, mut events) = Client::connect(options).await?;
    let session_id = match args.session {
        Some(session_id) => session_id,
        None => newest_session(&client).await?,
    };
    let snapshot = client
        .session_attach(&session_id, None)
        .await
        .with_context(|| {
            format!("cannot watch session {session_id}; `toold sessions` lists them")
        })?;
    if !args.json {
        let title = snapshot.title.as_deref().unwrap_or("untitled");
        eprintln!(
            "toold: watching session {session_id} ({}) in {}{}",
            visible::line(title),
            visible::line(&snapshot.cwd.display().to_string()),
            if asks {
                "; approvals are asked here"
            } else {
                ""
            }
        );
    }
    let mut check = tokio::time::interval(SESSION_CHECK_INTERVAL);
    // Made once: a Ctrl-C that comes while an event is shown is not lost.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let outcome = loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(ClientEvent::Session(event)) if event.session_id() == session_id => {
                    show(&event, args.json)?;
                }
                Some(ClientEvent::Session(_) | ClientEvent::ToolsListChanged { .. }) => {}
                Some(ClientEvent::Disconnected { .. }) | None => {
                    eprintln!("toold: the daemon closed the connection");
                    break Outcome::Failed;
                }
            },
            _ = check.tick() => match client.session_get(&session_id).await {
                Ok(_) => {}
                Err(error) if error.rpc_code() == Some(error_code::UNKNOWN_SESSION) => {
                    if !args.json {
                        eprintln!("toold: session {session_id} was closed");
                    }
                    break Outcome::Success;
                }
                Err(error) => {
                    eprintln!("toold: cannot follow session {session_id}: {error}");
                    break Outcome::Failed;
                }
            },
            _ = &mut interrupted => break Outcome::Success,
        }
    };
    let _ = client.session_detach(&session_id).await;
    client.close();
    Ok(outcome)
}

/// The live session created last.
async fn newest_session(client: &Client) -> anyhow::Result<String> {
    let sessions = client.session_list().await?;
    // RFC 3339 times of one clock sort as text; within one second the daemon's session
    // number (`s_<number>_…`, counted up) tells which came later.
    let number = |id: &str| -> u64 {
        id.split('_')
            .nth(1)
            .and_then(|number| number.parse().ok())
            .unwrap_or(0)
    };
    let newest = sessions.into_iter().max_by(|a, b| {
        (&a.created_at, number(&a.session_id)).cmp(&(&b.created_at, number(&b.session_id)))
    });
    match newest {
        Some(session) => Ok(session.session_id),
        None => bail!("no session to watch: the daemon has none (`toold sessions` lists them)"),
    }
}

/// One event: a JSON line, or for people a line per call start, result and approval, and
/// the output as it came.
fn show(event: &Event, json: bool) -> anyhow::Result<()> {
    if json {
        let line = serde_json::json!({"method": event.method(), "params": event.params()?});
        render::print_out(&format!("{}\n", render::compact_json(&line)));
        return Ok(());
    }
    let text = match event {
        Event::CallStart(start) => {
            let arguments = serde_json::to_string(&start.body.call.arguments)?;
            format!(
                "▶ {} {} {}\n",
                visible::line(&start.body.call.id),
                visible::line(&start.body.call.name),
                visible::line(&arguments)
            )
        }
        Event::ArgumentsReplaced(replaced) => {
            let arguments = serde_json::to_string(&replaced.body.call.arguments)?;
            format!(
                "  {} arguments replaced by the {}: {}\n",
                visible::line(&replaced.body.call.id),
                wire_name(&replaced.body.by),
                visible::line(&arguments)
            )
        }
        Event::Output(output) => {
            let data = &output.body.data;
            // Made visible for a terminal, whichever stream it is; byte for byte elsewhere.
            if output.body.stream == OutputStream::Stderr {
                let mut stderr = std::io::stderr().lock();
                let shown = if stderr.is_terminal() {
                    visible::block(data)
                } else {
                    data.into()
                };
                let _ = stderr
                    .write_all(shown.as_bytes())
                    .and_then(|()| stderr.flush());
                return Ok(());
            }
            if std::io::stdout().is_terminal() {
                visible::block(data).into_owned()
            } else {
                data.clone()
            }
        }
        Event::Progress(progress) => format!(
            "  {} progress {}{}{}\n",
            visible::line(&progress.body.call_id),
            progress.body.progress,
            progress
                .body
                .total
                .map(|total| format!(" of {total}"))
                .unwrap_or_default(),
            progress
                .body
                .message
                .as_deref()
                .map(|message| format!(": {}", visible::line(message)))
                .unwrap_or_default()
        ),
        Event::Result(ended) => format!(
            "{} {}\n",
            visible::line(&ended.body.call_id),
            render::status_line(&ended.body.result, ended.body.elapsed_ms)
        ),
        Event::ApprovalResolved(resolved) => format!(
            "  {} approval: {} (by {})\n",
            visible::line(&resolved.body.call_id),
            resolved
                .body
                .decision
                .map(|decision| wire_name(&decision))
                .unwrap_or_else(|| "none".to_owned()),
            wire_name(&resolved.body.by)
        ),
        Event::BatchStart(_) | Event::CallDone(_) | Event::BatchDone(_) => return Ok(()),
    };
    render::print_out(&text);
    Ok(())
}

/// A protocol enum's name on the wire (`allow_once`, `client`, …).
fn wire_name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "?".to_owned(),
    }
}
