//! `toold watch`: follows sessions' events live (calls, their output, results, approvals
//! resolved) and, on a terminal, answers the watched session's approvals (`[y] once / [s]
//! session / [n] deny / [a] abort`, as `toold call` asks, each with its preview: a file tool's
//! diff, a command's directory, commands and sandbox). By default it watches the newest live
//! session and then each session created after it, saying which whenever that changes, and
//! outlives the sessions it watches (Ctrl-C or SIGTERM end it); `--session ID` watches that
//! one only and ends when it closes. It also ends when the daemon goes.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};
use toold_client::protocol::{Event, OutputStream, SessionSnapshot, rpc::error_code};
use toold_client::{Client, ClientError, ClientEvent, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::approve::{self, ApprovalPolicy};
use super::{render, visible};

/// How often the daemon's session list is read: the daemon sends no event when a session is
/// created or closed, so new sessions and the end of the watched one are seen by polling. Half
/// a second is soon enough for a person starting an MCP host, and a `session/list` of a local
/// daemon twice a second costs it nothing that shows.
const POLL_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Watch this session only, and end when it closes [default: the newest live session, then
    /// each session created after it].
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The same as --session ID.
    #[arg(value_name = "ID", conflicts_with = "session")]
    pub session_id: Option<String>,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print each event as one line of JSON (`{"method", "params"}`) instead of text for
    /// people, with a `watch/session` line when it starts watching a session and a
    /// `watch/closed` line when that session closes; approvals are then left to the session's
    /// other approvers.
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
    // Made before connecting: a SIGTERM from then on ends the watch as Ctrl-C does.
    let mut terminated = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let (client, mut events) = Client::connect(options).await?;
    let only = args.session.or(args.session_id);
    let mut watcher = Watcher {
        client: &client,
        json: args.json,
        asks,
        following: only.is_none(),
        current: None,
        known: HashSet::new(),
        announced: false,
    };
    match &only {
        Some(session_id) => {
            let snapshot = client
                .session_attach(session_id, None)
                .await
                .with_context(|| {
                    format!("cannot watch session {session_id}; `toold sessions` lists them")
                })?;
            watcher.now_watching(&snapshot);
        }
        None => {
            let sessions = client.session_list().await?;
            watcher.known = sessions.iter().map(|s| s.session_id.clone()).collect();
            if let Some(session_id) = newest(&sessions) {
                watcher.switch_to(&session_id).await?;
            }
            if watcher.current.is_none() {
                watcher.say("no session yet; waiting for one (Ctrl-C to stop)");
            }
        }
    }
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Made once: a Ctrl-C that comes while an event is shown is not lost.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let outcome = loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(ClientEvent::Session(event))
                    if watcher.current.as_deref() == Some(event.session_id()) =>
                {
                    show(&event, args.json)?;
                }
                // A session left behind on a switch may still have had events on the way.
                Some(ClientEvent::Session(_) | ClientEvent::ToolsListChanged { .. }) => {}
                Some(ClientEvent::Disconnected { .. }) | None => {
                    eprintln!("toold: the daemon closed the connection");
                    break Outcome::Failed;
                }
            },
            _ = poll.tick() => match watcher.poll().await {
                Ok(Watching::On) => {}
                Ok(Watching::Ended) => break Outcome::Success,
                Err(error) => {
                    eprintln!("toold: cannot follow the daemon's sessions: {error}");
                    break Outcome::Failed;
                }
            },
            _ = &mut interrupted => break Outcome::Success,
            _ = terminated.recv() => break Outcome::Success,
        }
    };
    if let Some(session_id) = &watcher.current {
        let _ = client.session_detach(session_id).await;
    }
    client.close();
    Ok(outcome)
}

/// Whether the watch goes on after a look at the daemon's sessions.
enum Watching {
    On,
    /// `--session`'s session was closed.
    Ended,
}

/// Which session is watched, and what the daemon's session list held at the last look.
struct Watcher<'a> {
    client: &'a Client,
    json: bool,
    /// Approvals are asked on this terminal.
    asks: bool,
    /// Following new sessions (no `--session`).
    following: bool,
    /// The session attached to, if any.
    current: Option<String>,
    /// The sessions of the last list: any other in the next list is new.
    known: HashSet<String>,
    /// Whether a session was announced yet (the first line says where approvals are asked).
    announced: bool,
}

impl Watcher<'_> {
    /// Reads the session list: the watched session gone is said (and ends a `--session`
    /// watch); when following, the newest session created since the last look is watched.
    async fn poll(&mut self) -> Result<Watching, ClientError> {
        let sessions = self.client.session_list().await?;
        if let Some(current) = self.current.clone()
            && !sessions.iter().any(|session| session.session_id == current)
        {
            self.current = None;
            self.closed(&current);
            if !self.following {
                return Ok(Watching::Ended);
            }
        }
        if !self.following {
            return Ok(Watching::On);
        }
        let fresh: Vec<SessionSnapshot> = sessions
            .iter()
            .filter(|session| !self.known.contains(&session.session_id))
            .cloned()
            .collect();
        self.known = sessions.into_iter().map(|s| s.session_id).collect();
        if let Some(session_id) = newest(&fresh) {
            self.switch_to(&session_id).await?;
        }
        Ok(Watching::On)
    }

    /// Attaches to `session_id`, then leaves the session watched before (if any): the old one
    /// is kept should the new one be gone already.
    async fn switch_to(&mut self, session_id: &str) -> Result<(), ClientError> {
        match self.client.session_attach(session_id, None).await {
            Ok(snapshot) => {
                if let Some(previous) = self.current.take() {
                    let _ = self.client.session_detach(&previous).await;
                }
                self.now_watching(&snapshot);
                Ok(())
            }
            // Closed between the list and the attach: nothing to watch there.
            Err(error) if error.rpc_code() == Some(error_code::UNKNOWN_SESSION) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Records and says that `snapshot`'s session is watched now.
    fn now_watching(&mut self, snapshot: &SessionSnapshot) {
        self.current = Some(snapshot.session_id.clone());
        if self.json {
            json_line(
                "watch/session",
                serde_json::json!({
                    "session_id": snapshot.session_id,
                    "title": snapshot.title,
                    "cwd": snapshot.cwd,
                    "mode": snapshot.mode,
                }),
            );
            return;
        }
        let title = snapshot.title.as_deref().unwrap_or("untitled");
        let first = !std::mem::replace(&mut self.announced, true);
        eprintln!(
            "toold: watching session {} ({}) in {}{}",
            visible::line(&snapshot.session_id),
            visible::line(title),
            visible::line(&snapshot.cwd.display().to_string()),
            if first && self.asks {
                "; approvals are asked here"
            } else {
                ""
            }
        );
    }

    /// Says that the watched session was closed, and what happens now.
    fn closed(&self, session_id: &str) {
        if self.json {
            json_line(
                "watch/closed",
                serde_json::json!({"session_id": session_id}),
            );
        } else if self.following {
            self.say(&format!(
                "session {} was closed; waiting for the next (Ctrl-C to stop)",
                visible::line(session_id)
            ));
        } else {
            self.say(&format!("session {} was closed", visible::line(session_id)));
        }
    }

    /// A line for people on stderr (none with --json: the JSON lines say it).
    fn say(&self, text: &str) {
        if !self.json {
            eprintln!("toold: {text}");
        }
    }
}

/// The id of the session of `sessions` created last.
fn newest(sessions: &[SessionSnapshot]) -> Option<String> {
    // RFC 3339 times of one clock sort as text; within one second the daemon's session
    // number (`s_<number>_…`, counted up) tells which came later.
    let number = |id: &str| -> u64 {
        id.split('_')
            .nth(1)
            .and_then(|number| number.parse().ok())
            .unwrap_or(0)
    };
    sessions
        .iter()
        .max_by(|a, b| {
            (&a.created_at, number(&a.session_id)).cmp(&(&b.created_at, number(&b.session_id)))
        })
        .map(|session| session.session_id.clone())
}

/// One line of JSON, `{"method", "params"}`, on stdout.
fn json_line(method: &str, params: serde_json::Value) {
    let line = serde_json::json!({"method": method, "params": params});
    render::print_out(&format!("{}\n", render::compact_json(&line)));
}

/// One event: a JSON line, or for people a line per call start, result and approval, and
/// the output as it came.
fn show(event: &Event, json: bool) -> anyhow::Result<()> {
    if json {
        json_line(event.method(), event.params()?);
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
