//! One batch from the command line, shared by `toold call` and `toold exec`: connect, create a
//! fresh session (or attach to `--session`), submit `tools/execute`, hand the batch's events to
//! the caller as they arrive, answer approvals, and close the fresh session (or detach) at the
//! end. Ctrl-C cancels the batch, whose results still come back.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio::sync::watch;
use toold_client::protocol::{
    Event, ExecuteParams, ExecuteResult, SessionCreateParams, SessionMode, ToolCall,
};
use toold_client::{Approval, Client, ClientEvent, ClientOptions, Events};

use super::address::DaemonAddress;
use super::approve::{self, ApprovalPolicy};

/// Where the batch runs and who approves it: the options `call` and `exec` share.
#[derive(Args, Debug, Clone)]
pub struct BatchArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Run in this existing session (attached for the batch, detached after) instead of a
    /// fresh one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The fresh session's working directory [default: the current directory].
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    pub cwd: Option<PathBuf>,
    /// The fresh session's permission mode: default, accept_edits, plan, dont_ask or bypass.
    #[arg(long, value_name = "MODE", value_parser = parse_mode, conflicts_with = "session")]
    pub mode: Option<SessionMode>,
    /// Allow every call that asks for approval, once, without asking (needed to allow
    /// anything when not on a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print JSON for programs instead of text for people.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_mode(text: &str) -> Result<SessionMode, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).map_err(|_| {
        format!("unknown mode `{text}`; use default, accept_edits, plan, dont_ask or bypass")
    })
}

/// A fresh session's working directory: `--cwd` made absolute, or the current directory.
pub fn session_cwd(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    match given {
        Some(cwd) => std::path::absolute(cwd)
            .with_context(|| format!("cannot make {} absolute", cwd.display())),
        None => std::env::current_dir()
            .context("cannot read the current directory; choose the session's with --cwd"),
    }
}

/// Runs `calls` as one batch and returns its result; `on_event` sees each of the batch's
/// events, in order, as it arrives.
pub async fn run_batch(
    args: &BatchArgs,
    client_name: &str,
    calls: Vec<ToolCall>,
    mut on_event: impl FnMut(&Event),
) -> anyhow::Result<ExecuteResult> {
    let socket = args.address.socket_path()?;
    let policy = ApprovalPolicy::choose(args.yes);
    // The batch's id, known from its `batch/start`: approvals of other batches (in a session
    // attached with --session) are left to their own approvers.
    let (our_batch, batch_known) = watch::channel(None::<String>);
    let options = ClientOptions::new(client_name)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(socket);
    let prompt_lock = Arc::new(tokio::sync::Mutex::new(()));
    let options = options.on_approval_or_decline(move |request| {
        let mut batch_known = batch_known.clone();
        let prompt_lock = Arc::clone(&prompt_lock);
        async move {
            let ours = batch_known
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|batch| batch.clone());
            // Another batch of a shared session: its own approvers decide.
            if ours.as_deref() != Some(request.batch_id.as_str()) {
                return Approval::Decline(format!(
                    "`toold` approves only its own batch, not {}",
                    request.batch_id
                ));
            }
            approve::decide(policy, request, prompt_lock).await
        }
    });
    let (client, mut events) = Client::connect(options).await?;
    let mut connected = Connected {
        client: &client,
        events: &mut events,
        our_batch: &our_batch,
        on_event: &mut on_event,
    };
    let outcome = run_in_session(args, &mut connected, calls).await;
    client.close();
    outcome
}

/// The connection a batch runs over: the client, its event stream, where the batch's id is
/// told (once its `batch/start` arrives) to the approval answerer, and who sees its events.
struct Connected<'a, F: FnMut(&Event)> {
    client: &'a Client,
    events: &'a mut Events,
    our_batch: &'a watch::Sender<Option<String>>,
    on_event: &'a mut F,
}

async fn run_in_session(
    args: &BatchArgs,
    connected: &mut Connected<'_, impl FnMut(&Event)>,
    calls: Vec<ToolCall>,
) -> anyhow::Result<ExecuteResult> {
    let client = connected.client;
    let (session_id, fresh) = match &args.session {
        Some(session_id) => {
            client
                .session_attach(session_id, None)
                .await
                .with_context(|| {
                    format!("cannot attach to session {session_id}; `toold sessions` lists them")
                })?;
            (session_id.clone(), false)
        }
        None => {
            let cwd = session_cwd(args.cwd.as_deref())?;
            let mut params = SessionCreateParams::new(cwd);
            params.mode = args.mode;
            params.title = Some(format!("toold command line (pid {})", std::process::id()));
            let snapshot = client.session_create(params).await?;
            (snapshot.session_id, true)
        }
    };
    let outcome = execute(connected, &session_id, calls).await;
    let ended = if fresh {
        client.session_close(&session_id).await
    } else {
        client.session_detach(&session_id).await
    };
    if let Err(error) = ended {
        // The results are in; a session left behind expires after its idle TTL.
        eprintln!("toold: warning: cannot close session {session_id}: {error}");
    }
    outcome
}

async fn execute(
    connected: &mut Connected<'_, impl FnMut(&Event)>,
    session_id: &str,
    calls: Vec<ToolCall>,
) -> anyhow::Result<ExecuteResult> {
    let Connected {
        client,
        events,
        our_batch,
        on_event,
    } = connected;
    let client = *client;
    let our_batch = *our_batch;
    let call_ids: Vec<String> = calls.iter().map(|call| call.id.clone()).collect();
    let mut filter = BatchFilter {
        session_id: session_id.to_owned(),
        call_ids,
        batch_id: None,
        done: false,
    };
    let mut execution = client.tools_execute(ExecuteParams {
        session_id: session_id.to_owned(),
        iteration: 0,
        calls,
    });
    let mut events_open = true;
    let mut interrupted = false;
    let outcome = loop {
        tokio::select! {
            outcome = &mut execution => break outcome,
            event = events.recv(), if events_open => match event {
                Some(ClientEvent::Session(event)) => {
                    if filter.accept(&event, our_batch) {
                        on_event(&event);
                    }
                }
                // The execution then fails with the reason.
                Some(ClientEvent::Disconnected { .. }) | None => events_open = false,
                Some(ClientEvent::ToolsListChanged { .. }) => {}
            },
            _ = tokio::signal::ctrl_c(), if !interrupted => {
                interrupted = true;
                eprintln!("toold: interrupted; canceling the batch (Ctrl-C again to leave now)");
                execution.cancel().await?;
                // A second Ctrl-C gets the default behaviour back: the process ends.
                tokio::spawn(async {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        std::process::exit(130);
                    }
                });
            }
        }
    };
    let result = outcome?;
    // The batch's events were all queued before its answer: take the rest.
    while !filter.done {
        match events.try_recv() {
            Some(ClientEvent::Session(event)) => {
                if filter.accept(&event, our_batch) {
                    on_event(&event);
                }
            }
            Some(_) => {}
            None => break,
        }
    }
    Ok(result)
}

/// Picks this batch's events out of everything the attached session sends.
struct BatchFilter {
    session_id: String,
    call_ids: Vec<String>,
    batch_id: Option<String>,
    done: bool,
}

impl BatchFilter {
    fn accept(&mut self, event: &Event, our_batch: &watch::Sender<Option<String>>) -> bool {
        if event.session_id() != self.session_id {
            return false;
        }
        if self.batch_id.is_none()
            && let Event::BatchStart(start) = event
            && start.body.call_ids == self.call_ids
        {
            self.batch_id = Some(start.batch_id.to_string());
            our_batch.send_replace(Some(start.batch_id.to_string()));
        }
        let ours = self.batch_id.as_deref() == Some(event.batch_id());
        if ours && matches!(event, Event::BatchDone(_)) {
            self.done = true;
        }
        ours
    }
}
