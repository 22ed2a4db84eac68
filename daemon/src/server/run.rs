//! The daemon's accept loop and shutdown. `run(listener, daemon, options, shutdown)` takes a
//! bound listener, so tests start a real server in-process as `toold serve` does.
//!
//! Each accepted connection is checked (same uid, before a byte is read) and handed to a
//! bidirectional peer whose requests go through the method table. On shutdown the loop stops
//! accepting, lets running batches finish within the drain grace, then cancels the rest (every
//! call still gets its result, and connections stay open to receive them), and persists the
//! sessions.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use jsonrpsee::core::server::Methods;
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toold_protocol::peer::{
    BoxFuture, CloseReason, Handler, Peer, PeerHandle, PeerOptions, Reply, RequestError,
};
use toold_protocol::{
    ErrorObject, JsonText, Notification, RawRequest, Request, TrySendError, methods,
};

use super::socket::peer_allowed;
use crate::process_tree;
use crate::rpc::connection::{Connection, Handshake};
use crate::rpc::{Daemon, dispatch, handlers};
use crate::session::client::{Outbound, OutboundError, OutboundFuture, PeerProcess, TrySend};

/// How the server runs.
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    pub max_connections: usize,
    pub max_message_bytes: usize,
    /// How long one message may take to arrive once its first byte has.
    pub frame_timeout: Duration,
    /// How long running batches may go on after a shutdown signal before they are canceled.
    pub drain_grace: Duration,
    /// How often idle sessions are looked for; `None` with no `session_idle_ttl`.
    pub idle_ttl: Option<Duration>,
}

/// Serves until `shutdown` fires, then drains. Returns when every batch has ended and every
/// session is persisted.
pub(crate) async fn run(
    listener: UnixListener,
    daemon: Arc<Daemon>,
    options: ServerOptions,
    shutdown: CancellationToken,
) {
    let methods = dispatch::method_table(Arc::clone(&daemon));
    // The drain's last step: every connection waits until each request it received has its
    // answer queued, then closes, flushing what is queued. Without it the daemon could exit
    // between a batch's end and the write of its `tools/execute` response.
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    let sweeper = options
        .idle_ttl
        .map(|ttl| tokio::spawn(expire_idle_sessions(Arc::clone(&daemon), ttl)));
    // Counted here, at accept, not when a connection's task registers it: a burst of
    // connections accepted before their tasks run must not all fit under the limit.
    let open_connections = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors, typically: wait a little rather than spin.
                tracing::error!(%err, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if !peer_allowed(&stream) {
            tracing::warn!("refused a connection from another user");
            continue;
        }
        let slot = OpenSlot::take(&open_connections);
        let overloaded = slot.open_before >= options.max_connections;
        let shared = Shared {
            daemon: Arc::clone(&daemon),
            methods: methods.clone(),
            max_message_bytes: options.max_message_bytes,
            frame_timeout: options.frame_timeout,
            closing: closing.clone(),
        };
        connections.spawn(serve_connection(slot, stream, shared, overloaded));
    }
    drop(listener);
    drain(&daemon, options.drain_grace).await;
    closing.cancel();
    connections.close();
    // Each connection waits for its answers (bounded) and flushes within the peer's own
    // flush timeout; this bound only guards the exit.
    if tokio::time::timeout(ANSWER_GRACE * 2, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still answering at exit; their clients get no answer");
    }
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
}

/// Stops new batches, waits for running ones up to `grace`, cancels the rest and waits for
/// their results, then persists every session.
async fn drain(daemon: &Daemon, grace: Duration) {
    daemon.shutdown.cancel();
    let running = daemon.sessions.running_batches();
    tracing::info!(
        running,
        grace_ms = grace.as_millis() as u64,
        "shutting down"
    );
    if !wait_for_batches(daemon, grace).await {
        tracing::warn!(
            running = daemon.sessions.running_batches(),
            "canceling the batches still running"
        );
        daemon.sessions.cancel_all();
        // Canceled calls end within the registry's stop grace; this bound only guards the exit.
        wait_for_batches(daemon, Duration::from_secs(10)).await;
    }
    daemon.sessions.persist_all();
}

async fn wait_for_batches(daemon: &Daemon, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while daemon.sessions.running_batches() > 0 {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn expire_idle_sessions(daemon: Arc<Daemon>, ttl: Duration) {
    let every = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
    loop {
        tokio::time::sleep(every).await;
        let audit = &daemon.pipeline.audit;
        for session_id in daemon.sessions.expire_idle(ttl) {
            tracing::info!(session = %session_id, "session expired after its idle time");
            audit.session(&crate::audit::SessionChange::new(
                "session_close",
                &session_id,
                serde_json::json!({"by": "idle_expiry"}),
            ));
        }
        audit.flush();
    }
}

/// How long, after the drain, requests still running may take to answer.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// Who is at the other end of a new connection, as far as the daemon will serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerCheck {
    Served,
    /// A sandboxed command's process, or one nobody can vouch for.
    Refused,
    /// Gone before it could be checked (its pid may name another process by now).
    Gone,
}

/// Whether the peer of a new connection is (or descends from) a sandboxed command: whichever
/// tier keeps commands from the socket, this check backs it (a hard link to the socket made
/// outside the sandbox, a tier the kernel lacks). Refused before a byte is read.
async fn check_peer(stream: &UnixStream) -> PeerCheck {
    use crate::server::socket::{peer_pid, peer_pidfd, pidfd_alive};
    let (Ok(pid), Ok(pidfd)) = (peer_pid(stream), peer_pidfd(stream)) else {
        return PeerCheck::Refused;
    };
    tokio::task::spawn_blocking(move || {
        let confined = process_tree::descends_from_a_confined_command(pid, || true);
        // Looked at after the walk: a peer alive then had its pid all along. Without pidfds
        // (before Linux 6.5) the walk's own checks are all there is.
        if !pidfd.as_ref().is_none_or(pidfd_alive) {
            PeerCheck::Gone
        } else if confined {
            PeerCheck::Refused
        } else {
            PeerCheck::Served
        }
    })
    .await
    .unwrap_or(PeerCheck::Refused)
}

/// One accepted connection in the count of open ones, given back when it is dropped.
struct OpenSlot {
    count: Arc<AtomicUsize>,
    /// How many connections were open when this one was accepted.
    open_before: usize,
}

impl OpenSlot {
    fn take(count: &Arc<AtomicUsize>) -> Self {
        Self {
            open_before: count.fetch_add(1, Ordering::SeqCst),
            count: Arc::clone(count),
        }
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every connection of the accept loop shares.
struct Shared {
    daemon: Arc<Daemon>,
    methods: Methods,
    max_message_bytes: usize,
    frame_timeout: Duration,
    /// Fired at the end of the drain: connections close after flushing.
    closing: CancellationToken,
}

async fn serve_connection(_slot: OpenSlot, stream: UnixStream, shared: Shared, overloaded: bool) {
    let Shared {
        daemon,
        methods,
        max_message_bytes,
        frame_timeout,
        closing,
    } = shared;
    match check_peer(&stream).await {
        PeerCheck::Served => {}
        PeerCheck::Refused => {
            tracing::warn!("refused a connection from a sandboxed command");
            return;
        }
        PeerCheck::Gone => {
            // A client that connected and left at once (`toold status` asking for the pid).
            tracing::debug!("closed a connection whose peer left before it was checked");
            return;
        }
    }
    // Who is at the other end, for the audit log: as the kernel saw it connect.
    let process = PeerProcess {
        pid: super::socket::peer_pid(&stream)
            .ok()
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|&pid| pid > 0),
        uid: super::socket::peer_uid(&stream).ok(),
    };
    let (reader, writer) = match super::stream::split(stream) {
        Ok(halves) => halves,
        Err(err) => {
            tracing::warn!(%err, "cannot register a connection with the runtime");
            return;
        }
    };
    let options = PeerOptions {
        max_message_bytes,
        frame_timeout: Some(frame_timeout),
        ..PeerOptions::server()
    };
    let id = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
    let handler = Arc::new(ConnectionHandler {
        id,
        methods,
        connection: OnceLock::new(),
        overloaded,
        process,
    });
    let (peer, mut task) = Peer::spawn(reader, writer, options, handler.clone());
    // The peer reads from the moment it is spawned: its first request may have set this up.
    let connection = handler.connection(&peer);
    daemon.connection_opened(Arc::clone(&connection));
    tracing::debug!(connection = id, "connection opened");
    let reason = tokio::select! {
        reason = &mut task => reason,
        () = closing.cancelled() => {
            if tokio::time::timeout(ANSWER_GRACE, peer.answered()).await.is_err() {
                tracing::warn!(connection = id, "requests still running at exit; their clients get no answer");
            }
            peer.close();
            task.await
        }
    };
    match reason {
        CloseReason::Eof | CloseReason::ClosedLocally => {
            tracing::debug!(connection = id, %reason, "connection closed")
        }
        // Bad framing, oversize input, IO failures: the client may never see why, so say it here.
        CloseReason::ReadFailed(_)
        | CloseReason::Framing(_)
        | CloseReason::TooLarge
        | CloseReason::FrameTimeout
        | CloseReason::WriteFailed(_)
        | CloseReason::Aborted => tracing::warn!(connection = id, %reason, "connection closed"),
    }
    daemon.connection_closed(&connection);
}

/// Incoming traffic of one connection.
struct ConnectionHandler {
    id: u64,
    methods: Methods,
    /// Made by whichever comes first: the first request, or the accept loop right after
    /// spawning the peer (both have the peer's handle).
    connection: OnceLock<Arc<Connection>>,
    /// Over `max_connections`: every request is answered `-32001`.
    overloaded: bool,
    process: PeerProcess,
}

impl ConnectionHandler {
    fn connection(&self, peer: &PeerHandle) -> Arc<Connection> {
        let connection = self.connection.get_or_init(|| {
            Arc::new(Connection::new(
                self.id,
                Arc::new(PeerOutbound(peer.clone())),
                self.process,
            ))
        });
        Arc::clone(connection)
    }
}

impl Handler for ConnectionHandler {
    fn request(&self, peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply> {
        self.raw_request(peer, request.into())
    }

    /// Every request comes here: its params are read from their text into the method's types.
    fn raw_request(&self, peer: PeerHandle, request: RawRequest) -> BoxFuture<'static, Reply> {
        if self.overloaded {
            return Box::pin(async {
                Reply::error(ErrorObject::overloaded(
                    "the daemon serves its maximum of connections; try again later",
                ))
            });
        }
        let connection = self.connection(&peer);
        // The handshake moves on here, in arrival order: a request written right behind
        // `initialize` waits for it rather than being refused.
        let initializing = request.method == methods::INITIALIZE && connection.begin_handshake();
        if request.method != methods::INITIALIZE && connection.handshake() == Handshake::Awaiting {
            return Box::pin(std::future::ready(Reply::error(
                ErrorObject::not_initialized(&request.method),
            )));
        }
        let methods = self.methods.clone();
        Box::pin(async move {
            let mut request = request;
            if request.method != methods::INITIALIZE && !connection.wait_for_handshake().await {
                return Reply::error(ErrorObject::not_initialized(&request.method));
            }
            let started = std::time::Instant::now();
            let (reply, error_code) = dispatch::call(
                &methods,
                &connection,
                &request.id,
                &request.method,
                request.params.take(),
            )
            .await;
            if initializing {
                connection.end_handshake(error_code.is_none());
            }
            tracing::debug!(
                connection = connection.id(),
                method = %request.method,
                error_code,
                elapsed_us = started.elapsed().as_micros() as u64,
                "request"
            );
            if error_code == Some(toold_protocol::error_code::INTERNAL_ERROR) {
                tracing::error!(connection = connection.id(), method = %request.method, "a request failed inside the daemon (its answer says why)");
            }
            reply
        })
    }

    fn notification(&self, _peer: PeerHandle, notification: Notification) {
        if notification.method == methods::CANCEL_REQUEST
            && let Some(connection) = self.connection.get()
        {
            handlers::cancel_request(connection, notification.params);
        }
    }
}

/// A peer handle as the handlers' [`Outbound`].
struct PeerOutbound(PeerHandle);

impl Outbound for PeerOutbound {
    fn request(
        &self,
        method: &'static str,
        params: Value,
    ) -> OutboundFuture<Result<Value, OutboundError>> {
        let request = self.0.request(method, Some(params));
        Box::pin(async move {
            request.await.map_err(|err| match err {
                RequestError::Rpc(error) => OutboundError::Error(error),
                RequestError::Closed
                | RequestError::Canceled
                | RequestError::InvalidParams(_)
                | RequestError::InvalidResult(_) => OutboundError::Closed,
            })
        })
    }

    fn notify(
        &self,
        method: &'static str,
        params: Value,
    ) -> OutboundFuture<Result<(), OutboundError>> {
        let peer = self.0.clone();
        Box::pin(async move {
            peer.notify(method, Some(params))
                .await
                .map_err(|_| OutboundError::Closed)
        })
    }

    fn send_rendered(&self, text: JsonText) -> OutboundFuture<Result<(), OutboundError>> {
        let peer = self.0.clone();
        Box::pin(async move {
            peer.send_text(text)
                .await
                .map_err(|_| OutboundError::Closed)
        })
    }

    fn try_send_rendered(&self, text: JsonText) -> Result<(), TrySend> {
        self.0
            .try_send_text(text)
            .map_err(|unsent| match unsent.reason {
                TrySendError::Full => TrySend::Full(unsent.text),
                TrySendError::Closed => TrySend::Closed,
            })
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}
