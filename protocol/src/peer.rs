//! The connection layer the daemon and the client share: a bidirectional JSON-RPC 2.0 peer
//! over any byte stream (docs/protocol.md sections 1 and 2).
//!
//! [`Peer::spawn`] starts two tasks per connection:
//! - the **reader** decodes frames, routes responses to our pending requests (by the absence
//!   of `method`, never by id: both sides number from 1), hands notifications to the
//!   [`Handler`] in arrival order, and **spawns** every incoming request, so a handler that
//!   waits for an answer from this same peer (an approval) cannot stall the connection;
//! - the **writer** owns the write half and drains one bounded queue, so a peer that does
//!   not read makes our senders wait (or [`PeerHandle::try_notify`] report full) instead of
//!   growing our memory.
//!
//! The [`PeerHandle`] is the cheap, cloneable face of the connection: outgoing requests
//! ([`PeerHandle::request`]), notifications, pre-rendered JSON, cancellation and close.
//! The [`PeerTask`] resolves with the [`CloseReason`] once the connection has ended.
//!
//! A handler may make the reader wait before the next message
//! ([`Handler::notification_or_wait`]): that is how a client with a bounded queue of events
//! holds the daemon back when its consumer lags.
//!
//! One [`Handler`] is given per connection, so per-connection state (initialized or not, the
//! declared capabilities) lives in it; the handle's [`PeerHandle::connection_id`] names the
//! connection in logs.
//!
//! Choices where docs/protocol.md is silent:
//! - End of input is a disconnect: reading stops, our pending requests fail at once, what was
//!   already queued is still flushed (for at most `flush_timeout`), and answers produced after
//!   that are dropped. Handlers' running futures are not cancelled: they own their work.
//! - [`PeerHandle::close`] also flushes what was queued before it.
//! - A batch's answer keeps the order of its requests; an invalid entry (a nested array
//!   too) gets a `-32600` entry in its place; responses inside a batch are routed like single
//!   ones. Batch entries are answered even if the batch also holds notifications.
//! - A response is never answered. One to no pending request (a late answer to a request we
//!   withdrew) is dropped; an error response with id null (the other side could not read
//!   something we sent) is logged.
//! - A handler that panics answers `-32603`; requests beyond `max_in_flight_requests` are
//!   answered `-32001` without running.
//! - Our request ids are integers from 1, per connection. `$/cancelRequest` is sent only for
//!   a request that was queued; one dropped before that is forgotten silently.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::framing::{DEFAULT_MAX_MESSAGE_BYTES, Framing, FramingError, JsonText};
use crate::rpc::{ErrorObject, Notification, RawRequest, Request};

pub(crate) mod handle;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use handle::{
    OutgoingRequest, PeerClosed, PeerHandle, RequestError, TrySendError, Unsent,
    render_notification,
};

/// A boxed future that can move between threads: what a [`Handler`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How this side chooses the framing.
/// After the end of input, how long the answers to requests already read may take to be
/// queued before the connection closes.
pub const EOF_ANSWER_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerFraming {
    /// The server side: the framing is chosen by the first byte the other side sends, and
    /// nothing is written before that (our output waits in the queue).
    Detect,
    /// The client side: we speak this framing from the first byte.
    Fixed(Framing),
}

/// Per-connection limits and choices.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    pub framing: PeerFraming,
    /// A larger incoming message is answered `-32600` (id null) and the connection closed.
    pub max_message_bytes: usize,
    /// Messages waiting for the writer. Bounded so that a peer that does not read cannot
    /// make us buffer without limit: senders wait for space, `try_*` senders see "full".
    pub outgoing_capacity: usize,
    /// Bytes those messages may hold together, so that large messages (a command's output
    /// events) waiting for a slow reader stay a bounded amount of memory too.
    pub outgoing_bytes: usize,
    /// Incoming requests whose handler has not answered yet. Over it a request is answered
    /// `-32001` (overloaded) at once: refusing, rather than pausing the reader, keeps the
    /// responses to our own requests flowing (pausing could deadlock an approval).
    pub max_in_flight_requests: usize,
    /// How long one message may take to arrive once its first byte has: a peer that sends a
    /// byte now and then (on purpose or not) is answered `-32600` and cut, instead of holding a
    /// connection slot and a buffer forever. `None`: no limit. Idle time between messages is
    /// never limited.
    pub frame_timeout: Option<Duration>,
    /// When the connection ends, how long the writer may take to send what was queued before
    /// (such as the `-32600` for an oversize message) to a peer that may have stopped reading.
    pub flush_timeout: Duration,
}

impl PeerOptions {
    pub const DEFAULT_OUTGOING_CAPACITY: usize = 256;
    pub const DEFAULT_OUTGOING_BYTES: usize = 1024 * 1024;
    pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 1024;
    pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(30);

    /// The daemon's side: detect the framing, answer in it.
    pub fn server() -> Self {
        Self {
            framing: PeerFraming::Detect,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            outgoing_capacity: Self::DEFAULT_OUTGOING_CAPACITY,
            outgoing_bytes: Self::DEFAULT_OUTGOING_BYTES,
            max_in_flight_requests: Self::DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            flush_timeout: Self::DEFAULT_FLUSH_TIMEOUT,
            frame_timeout: Some(Self::DEFAULT_FRAME_TIMEOUT),
        }
    }

    /// A client's side, speaking `framing` from the start. No frame deadline: the daemon is
    /// trusted to finish what it starts sending.
    pub fn client(framing: Framing) -> Self {
        Self {
            framing: PeerFraming::Fixed(framing),
            frame_timeout: None,
            ..Self::server()
        }
    }
}

impl Default for PeerOptions {
    fn default() -> Self {
        Self::server()
    }
}

/// What a handler answers a request with.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The result or the error; the peer wraps it in a response with the request's id.
    Outcome(Result<Value, ErrorObject>),
    /// A complete response rendered elsewhere (jsonrpsee hands out JSON strings), the
    /// request's id already inside; it is sent as it is.
    Rendered(JsonText),
}

impl Reply {
    pub fn result(value: Value) -> Self {
        Self::Outcome(Ok(value))
    }

    pub fn error(error: ErrorObject) -> Self {
        Self::Outcome(Err(error))
    }
}

impl From<Result<Value, ErrorObject>> for Reply {
    fn from(outcome: Result<Value, ErrorObject>) -> Self {
        Self::Outcome(outcome)
    }
}

impl From<JsonText> for Reply {
    fn from(text: JsonText) -> Self {
        Self::Rendered(text)
    }
}

/// Incoming traffic of one connection (the daemon's dispatch, a client's approval and hook
/// handlers). `$/cancelRequest` is an ordinary notification here.
pub trait Handler: Send + Sync + 'static {
    /// An incoming request. Called on the reader, in arrival order, so that what it does before
    /// returning (such as recording an `initialize`) is done before the next message is read;
    /// it must not block. The returned future runs on a task of its own, and its value is sent
    /// back as the response. A panic in either is answered `-32603`.
    fn request(&self, peer: PeerHandle, request: Request) -> BoxFuture<'static, Reply>;

    /// An incoming request with its params still the JSON text that came, called as
    /// [`request`](Self::request) is. A handler that reads params into types of its own
    /// overrides this to read them from the text, never through a `Value`; the default reads
    /// them as a `Value` and calls [`request`](Self::request).
    fn raw_request(&self, peer: PeerHandle, request: RawRequest) -> BoxFuture<'static, Reply> {
        self.request(peer, request.into_request())
    }

    /// An incoming notification, called on the reader in arrival order (so a
    /// `$/cancelRequest` is seen after the request it names). It must not block: spawn
    /// anything slow.
    fn notification(&self, peer: PeerHandle, notification: Notification);

    /// Like [`notification`](Self::notification), but the reader awaits the returned future
    /// before it reads the next message: a handler whose consumer lags (a bounded queue of
    /// events that is full) slows the other side down, through the socket, instead of
    /// dropping notifications or buffering them without limit. While it waits, responses to
    /// our own requests wait too, so the consumer must not wait for one of them before
    /// making room. The default delivers to [`notification`](Self::notification) and never
    /// waits.
    fn notification_or_wait(
        &self,
        peer: PeerHandle,
        notification: Notification,
    ) -> Option<BoxFuture<'static, ()>> {
        self.notification(peer, notification);
        None
    }
}

/// Why a connection ended.
#[derive(Debug, Clone)]
pub enum CloseReason {
    /// The other side closed its end of the stream.
    Eof,
    /// Reading failed (the connection was reset).
    ReadFailed(Arc<io::Error>),
    /// Input after which message boundaries are unknowable: an unrecognized first byte or an
    /// unreadable LSP header (the latter answered `-32600` before closing).
    Framing(Arc<FramingError>),
    /// A message over `max_message_bytes`, answered `-32600` with id null before closing.
    TooLarge,
    /// A message that did not arrive within `frame_timeout` of its first byte, answered
    /// `-32600` with id null before closing.
    FrameTimeout,
    /// Writing failed: the other side is gone or stopped the stream.
    WriteFailed(Arc<io::Error>),
    /// [`PeerHandle::close`] was called.
    ClosedLocally,
    /// The connection's task ended without a reason: it panicked, or the runtime shut down.
    Aborted,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Eof => f.write_str("the peer closed the connection"),
            CloseReason::ReadFailed(err) => write!(f, "reading failed: {err}"),
            CloseReason::Framing(err) => write!(f, "unreadable framing: {err}"),
            CloseReason::TooLarge => f.write_str("the peer sent a message over max_message_bytes"),
            CloseReason::FrameTimeout => {
                f.write_str("a message did not arrive within the frame deadline")
            }
            CloseReason::WriteFailed(err) => write!(f, "writing failed: {err}"),
            CloseReason::ClosedLocally => f.write_str("closed by this side"),
            CloseReason::Aborted => f.write_str("the connection's task was aborted"),
        }
    }
}

/// Resolves with why the connection ended, once the reader has stopped, every pending
/// request has failed and the writer has flushed (or given up). Dropping it leaves the
/// connection running.
#[derive(Debug)]
pub struct PeerTask {
    supervisor: JoinHandle<CloseReason>,
}

impl Future for PeerTask {
    type Output = CloseReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CloseReason> {
        Pin::new(&mut self.supervisor)
            .poll(cx)
            .map(|joined| joined.unwrap_or(CloseReason::Aborted))
    }
}

/// Starts connections.
#[derive(Debug)]
pub struct Peer;

impl Peer {
    /// Runs a peer over `reader` and `writer` (the halves of one stream) on the current tokio
    /// runtime, with `handler` for incoming traffic.
    pub fn spawn<R, W>(
        reader: R,
        writer: W,
        options: PeerOptions,
        handler: Arc<dyn Handler>,
    ) -> (PeerHandle, PeerTask)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let decoder = match options.framing {
            PeerFraming::Detect => crate::framing::FrameDecoder::new(options.max_message_bytes),
            PeerFraming::Fixed(framing) => {
                crate::framing::FrameDecoder::with_framing(framing, options.max_message_bytes)
            }
        };
        let detected = decoder.detected_framing();
        let (handle, queue) = PeerHandle::new(
            options.outgoing_capacity,
            options.outgoing_bytes,
            options.max_in_flight_requests,
            detected.clone(),
        );
        // The reader rings it when the client's first byte has chosen the framing.
        let framing_known = Arc::new(Notify::new());
        let writer_task = tokio::spawn(writer::run(
            writer,
            queue,
            detected,
            Arc::clone(&framing_known),
            handle.clone(),
        ));
        let reader = reader::Reader::new(
            reader,
            decoder,
            framing_known,
            handle.clone(),
            handler,
            &options,
        );
        let supervisor = tokio::spawn(supervise(
            reader,
            writer_task,
            handle.clone(),
            options.flush_timeout,
        ));
        (handle, PeerTask { supervisor })
    }
}

/// Runs the reader until the connection ends for any reason, then closes in order: fail our
/// pending requests at once (no answer can come any more), let the writer flush what was
/// queued before the end (bounded by `flush_timeout`), and only then report the end.
async fn supervise<R>(
    reader: reader::Reader<R>,
    mut writer_task: JoinHandle<()>,
    handle: PeerHandle,
    flush_timeout: Duration,
) -> CloseReason
where
    R: AsyncRead + Unpin + Send + 'static,
{
    // Whatever happens below, even a panic, `closed()` waiters must wake.
    let _wake_closed_waiters = handle.ended_guard();
    let stopping = handle.stopping();
    let read_end = tokio::select! {
        reason = reader.run() => reason,
        // Someone else (a local close, the writer failing) recorded the reason first.
        () = stopping.cancelled() => CloseReason::ClosedLocally,
    };
    if matches!(read_end, CloseReason::Eof) {
        // The other side is done sending, maybe only half (`printf request | toold connect`):
        // it can answer none of our requests any more, but the answers to what it sent (an
        // `initialize` read just before the end) may be moments from being queued. They get
        // `EOF_ANSWER_GRACE`; a long request does not hold a departed client's close longer.
        handle.fail_pending();
        tokio::select! {
            _ = tokio::time::timeout(EOF_ANSWER_GRACE, handle.answered()) => {}
            () = stopping.cancelled() => {}
        }
    }
    handle.begin_close(read_end);
    handle.fail_pending();
    if tokio::time::timeout(flush_timeout, &mut writer_task)
        .await
        .is_err()
    {
        tracing::debug!(
            connection = handle.connection_id(),
            "the peer did not take our last messages in time; dropping them"
        );
        writer_task.abort();
    }
    handle.close_reason()
}
