//! The handle to one connection: outgoing requests and their pending table, notifications,
//! pre-rendered JSON, cancellation, close, and the connection's end.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, ready};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{BoxFuture, CloseReason};
use crate::framing::{DetectedFraming, Framing, JsonText, render_notification_as};
use crate::methods::{CANCEL_REQUEST, NotificationMethod, RequestMethod};
use crate::rpc::{ErrorObject, Id, Notification, Request, Response};
use crate::sync::LockUnpoisoned;

/// Numbers connections for logs; process-wide so that two connections never share one.
static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// One message in the writer's queue, holding its share of the queue's byte budget (if it
/// took one) until the writer has framed it.
pub(super) struct Queued {
    pub(super) text: JsonText,
    _budget: Option<OwnedSemaphorePermit>,
}

impl Queued {
    /// A message outside the byte budget: requests and answers queued from code that cannot
    /// wait, all small.
    fn unbudgeted(text: JsonText) -> Self {
        Self {
            text,
            _budget: None,
        }
    }
}

/// A message [`PeerHandle::try_send_text`] could not queue, and why.
#[derive(Debug)]
pub struct Unsent {
    pub reason: TrySendError,
    pub text: JsonText,
}

/// How one of our requests ended.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// The other side answered with an error.
    #[error("the peer answered with an error: {0}")]
    Rpc(ErrorObject),
    /// The connection ended before the answer came (or before the request could be sent).
    #[error("the connection closed before the answer came")]
    Closed,
    /// This side canceled the request ([`PeerHandle::cancel_request`]).
    #[error("the request was canceled by this side")]
    Canceled,
    /// [`PeerHandle::call`] could not serialize the params.
    #[error("cannot serialize the params: {0}")]
    InvalidParams(String),
    /// [`PeerHandle::call`] got a result that is not of the method's result type.
    #[error("the result does not have the expected shape: {0}")]
    InvalidResult(String),
}

/// The connection has ended (or is ending): nothing more can be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the connection is closed")]
pub struct PeerClosed;

/// Why a non-blocking send did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TrySendError {
    /// The outgoing queue is full: the other side is not reading fast enough. Nothing was sent.
    #[error("the outgoing queue is full: the peer is not reading")]
    Full,
    #[error("the connection is closed")]
    Closed,
}

type Completion = Result<Value, RequestError>;

/// One of our requests awaiting its answer.
struct Waiter {
    completion: oneshot::Sender<Completion>,
    /// Whether the request is in the outgoing queue: only then does withdrawing it owe the
    /// other side a `$/cancelRequest`.
    sent: bool,
}

/// Our requests that have no answer yet, by id.
struct PendingTable {
    /// False once the connection has ended: a request registered after that fails at once
    /// instead of waiting for an answer that cannot come.
    open: bool,
    waiters: HashMap<i64, Waiter>,
}

struct Shared {
    connection_id: u64,
    /// The writer's queue. Bounded (`PeerOptions::outgoing_capacity`) so that a peer that
    /// does not read makes senders wait instead of growing our memory.
    outgoing: mpsc::Sender<Queued>,
    /// Bytes the queued messages may hold (`PeerOptions::outgoing_bytes`): with the message
    /// bound alone, 256 large events waiting for a slow reader would hold megabytes.
    outgoing_budget: Arc<Semaphore>,
    outgoing_budget_limit: u32,
    /// A std mutex: every critical section is one map operation, never across an await, so
    /// an async mutex would only add cost. Shared by request futures, the reader (answers)
    /// and the closing path (which fails them all).
    pending: Mutex<PendingTable>,
    /// Atomic so that any clone of the handle, on any task, can number a request without a lock.
    next_request_id: AtomicI64,
    /// Cancelled when the connection starts closing: the reader stops, the writer flushes.
    stopping: CancellationToken,
    /// Cancelled when the connection has fully ended; `closed()` waits for it.
    ended: CancellationToken,
    /// The first reason recorded wins: later ones (the writer failing after a local close)
    /// are consequences of it.
    reason: OnceLock<CloseReason>,
    /// One permit per incoming request being answered, held until its answer is queued:
    /// bounds the requests in flight (`PeerOptions::max_in_flight_requests`), and lets
    /// [`PeerHandle::answered`] know when every answer is on its way.
    in_flight: Arc<Semaphore>,
    in_flight_limit: u32,
    framing: DetectedFraming,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, PendingTable> {
        // Every critical section is a single insert, lookup or removal, so a panic elsewhere
        // cannot leave the table half-updated: a poisoned lock is still consistent.
        self.pending.lock_unpoisoned()
    }
}

/// A cheap, cloneable handle to one connection.
#[derive(Clone)]
pub struct PeerHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for PeerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerHandle")
            .field("connection_id", &self.shared.connection_id)
            .field("framing", &self.shared.framing.get())
            .field("closing", &self.shared.stopping.is_cancelled())
            .finish()
    }
}

/// Renders one of our messages as compact JSON.
pub(super) fn render<T: Serialize + ?Sized>(message: &T) -> JsonText {
    // Our messages hold only `serde_json::Value`s, strings and integers: serde_json fails
    // only on map keys that are not strings (a `Value` map's keys are strings), on a custom
    // `Serialize` that errors (ours do not) or on IO (a `String` cannot fail to grow but by
    // aborting), so this cannot fail.
    JsonText(serde_json::to_string(message).expect("JSON-RPC messages always serialize"))
}

/// Renders a typed notification once, for [`PeerHandle::send_text`] to any number of
/// connections (an event goes to every attached one), without a `Value` in between.
pub fn render_notification<M: NotificationMethod>(
    params: &M::Params,
) -> Result<JsonText, serde_json::Error> {
    render_notification_as(M::METHOD, params)
}

impl PeerHandle {
    pub(super) fn new(
        outgoing_capacity: usize,
        outgoing_bytes: usize,
        max_in_flight_requests: usize,
        framing: DetectedFraming,
    ) -> (Self, mpsc::Receiver<Queued>) {
        // `Semaphore::new` panics over `MAX_PERMITS`, and `acquire_many` takes a `u32`; no
        // real limit reaches either.
        let in_flight_limit = u32::try_from(max_in_flight_requests.min(Semaphore::MAX_PERMITS))
            .unwrap_or(u32::MAX)
            .max(1);
        // `mpsc::channel` panics on 0 and on more than `MAX_PERMITS`; a queue of one still
        // lets the writer work.
        let capacity = outgoing_capacity.clamp(1, Semaphore::MAX_PERMITS);
        let (outgoing, queue) = mpsc::channel(capacity);
        let outgoing_budget_limit = u32::try_from(outgoing_bytes.min(Semaphore::MAX_PERMITS))
            .unwrap_or(u32::MAX)
            .max(1);
        let shared = Shared {
            connection_id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            outgoing,
            outgoing_budget: Arc::new(Semaphore::new(outgoing_budget_limit as usize)),
            outgoing_budget_limit,
            pending: Mutex::new(PendingTable {
                open: true,
                waiters: HashMap::new(),
            }),
            next_request_id: AtomicI64::new(1),
            stopping: CancellationToken::new(),
            ended: CancellationToken::new(),
            reason: OnceLock::new(),
            framing,
            in_flight: Arc::new(Semaphore::new(in_flight_limit as usize)),
            in_flight_limit,
        };
        (
            Self {
                shared: Arc::new(shared),
            },
            queue,
        )
    }

    /// A number for logs, unique in this process.
    pub fn connection_id(&self) -> u64 {
        self.shared.connection_id
    }

    /// The framing of the connection; `None` on the server side until the client's first byte.
    pub fn framing(&self) -> Option<Framing> {
        self.shared.framing.get()
    }

    /// Sends a request and resolves with its answer. The request is registered at once (its
    /// id is known before the first poll) and queued when first polled. Dropping the future
    /// before the answer withdraws the request and tells the other side (`$/cancelRequest`).
    pub fn request(&self, method: impl Into<String>, params: Option<Value>) -> OutgoingRequest {
        OutgoingRequest::start(self.clone(), method.into(), params)
    }

    /// A typed [`request`](Self::request): `call::<ApprovalRequest>(&params)`.
    pub async fn call<M: RequestMethod>(
        &self,
        params: &M::Params,
    ) -> Result<M::Result, RequestError> {
        let params = serde_json::to_value(params)
            .map_err(|err| RequestError::InvalidParams(err.to_string()))?;
        let params = match params {
            Value::Null => None,
            params => Some(params),
        };
        let result = self.request(M::METHOD, params).await?;
        serde_json::from_value(result).map_err(|err| RequestError::InvalidResult(err.to_string()))
    }

    /// Sends a notification, waiting for room in the outgoing queue.
    pub async fn notify(
        &self,
        method: impl Into<String>,
        params: Option<Value>,
    ) -> Result<(), PeerClosed> {
        self.send_text(render(&Notification::new(method, params)))
            .await
    }

    /// Sends a notification if the outgoing queue has room now; a caller that cannot wait
    /// decides what to do with a slow reader.
    pub fn try_notify(
        &self,
        method: impl Into<String>,
        params: Option<Value>,
    ) -> Result<(), TrySendError> {
        self.try_send_text(render(&Notification::new(method, params)))
            .map_err(|unsent| unsent.reason)
    }

    /// Sends one complete message (or batch) already rendered as JSON, such as a response
    /// from jsonrpsee or an event rendered once for many connections. Waits for room in the
    /// queue, counted in messages and in bytes (a message larger than the byte budget waits
    /// until the queue holds nothing else that counts).
    pub async fn send_text(&self, text: JsonText) -> Result<(), PeerClosed> {
        let cost = self.budget_cost(&text);
        let budget = Arc::clone(&self.shared.outgoing_budget)
            .acquire_many_owned(cost)
            .await
            .map_err(|_| PeerClosed)?;
        self.shared
            .outgoing
            .send(Queued {
                text,
                _budget: Some(budget),
            })
            .await
            .map_err(|_| PeerClosed)
    }

    /// [`send_text`](Self::send_text) without waiting; a message that could not be queued is
    /// handed back, so that a caller may send it later without rendering it again.
    pub fn try_send_text(&self, text: JsonText) -> Result<(), Unsent> {
        let cost = self.budget_cost(&text);
        let Ok(budget) = Arc::clone(&self.shared.outgoing_budget).try_acquire_many_owned(cost)
        else {
            return Err(Unsent {
                reason: TrySendError::Full,
                text,
            });
        };
        self.shared
            .outgoing
            .try_send(Queued {
                text,
                _budget: Some(budget),
            })
            .map_err(|err| match err {
                mpsc::error::TrySendError::Full(queued) => Unsent {
                    reason: TrySendError::Full,
                    text: queued.text,
                },
                mpsc::error::TrySendError::Closed(queued) => Unsent {
                    reason: TrySendError::Closed,
                    text: queued.text,
                },
            })
    }

    /// The share of the byte budget a message takes: its length, at most the whole budget.
    fn budget_cost(&self, text: &JsonText) -> u32 {
        u32::try_from(text.0.len())
            .unwrap_or(u32::MAX)
            .clamp(1, self.shared.outgoing_budget_limit)
    }

    /// Withdraws one of our pending requests: its future resolves with
    /// [`RequestError::Canceled`] and the other side gets `$/cancelRequest`. False when it
    /// was already answered (or never existed).
    pub fn cancel_request(&self, id: i64) -> bool {
        match self.withdraw(id) {
            Some(waiter) => {
                // The future may be gone already; then nobody is waiting for this.
                let _ = waiter.completion.send(Err(RequestError::Canceled));
                true
            }
            None => false,
        }
    }

    /// A permit for one more incoming request, if under the in-flight limit.
    pub(super) fn in_flight_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.shared.in_flight).try_acquire_owned().ok()
    }

    /// Waits until every incoming request received so far has its answer queued for writing
    /// (then [`close`](Self::close) sends them all). Requests that arrive meanwhile are
    /// answered as over the in-flight limit.
    pub async fn answered(&self) {
        // The semaphore is never closed, so acquiring cannot fail.
        let _all = self
            .shared
            .in_flight
            .acquire_many(self.shared.in_flight_limit)
            .await;
    }

    /// Our requests still waiting for an answer.
    pub fn pending_requests(&self) -> usize {
        self.shared.pending().waiters.len()
    }

    /// Closes the connection: reading stops, what is already queued is flushed (within the
    /// flush timeout), pending requests fail, and later sends fail.
    pub fn close(&self) {
        self.begin_close(CloseReason::ClosedLocally);
    }

    /// Whether the connection has started closing.
    pub fn is_closed(&self) -> bool {
        self.shared.stopping.is_cancelled()
    }

    /// Waits until the connection has fully ended and says why.
    pub async fn closed(&self) -> CloseReason {
        self.shared.ended.cancelled().await;
        self.close_reason()
    }

    pub(super) fn stopping(&self) -> CancellationToken {
        self.shared.stopping.clone()
    }

    pub(super) fn ended_guard(&self) -> DropGuard {
        self.shared.ended.clone().drop_guard()
    }

    /// Records why the connection ends (the first reason wins) and starts closing.
    pub(super) fn begin_close(&self, reason: CloseReason) {
        if self.shared.reason.set(reason).is_ok() {
            tracing::debug!(
                connection = self.shared.connection_id,
                reason = %self.close_reason(),
                "connection closing"
            );
        }
        self.shared.stopping.cancel();
    }

    pub(super) fn close_reason(&self) -> CloseReason {
        // `begin_close` records a reason before anything reports the end; only a task that
        // died before it (a panic) leaves none.
        self.shared
            .reason
            .get()
            .cloned()
            .unwrap_or(CloseReason::Aborted)
    }

    /// Fails every pending request at once: no answer can arrive any more.
    pub(super) fn fail_pending(&self) {
        let waiters = {
            let mut table = self.shared.pending();
            table.open = false;
            std::mem::take(&mut table.waiters)
        };
        for waiter in waiters.into_values() {
            let _ = waiter.completion.send(Err(RequestError::Closed));
        }
    }

    /// Delivers a response to the request it answers. Answers to requests we no longer wait
    /// for (withdrawn, or never sent) are dropped: the other side may answer a canceled request.
    pub(super) fn complete(&self, response: Response) {
        let waiter = match &response.id {
            Id::Number(id) => self.shared.pending().waiters.remove(id),
            Id::String(_) | Id::Null => None,
        };
        match waiter {
            Some(waiter) => {
                let outcome = response.outcome.map_err(RequestError::Rpc);
                let _ = waiter.completion.send(outcome);
            }
            None => match &response.outcome {
                Err(error) if response.id == Id::Null => tracing::warn!(
                    connection = self.shared.connection_id,
                    %error,
                    "the peer could not read something we sent"
                ),
                Ok(_) | Err(_) => tracing::debug!(
                    connection = self.shared.connection_id,
                    id = %response.id,
                    "dropping an answer to no pending request"
                ),
            },
        }
    }

    /// Removes a pending request; if the other side has it, tells it to stop.
    fn withdraw(&self, id: i64) -> Option<Waiter> {
        let waiter = self.shared.pending().waiters.remove(&id)?;
        if waiter.sent {
            self.send_detached(render(&Notification::new(
                CANCEL_REQUEST,
                Some(json!({ "id": id })),
            )));
        }
        Some(waiter)
    }

    /// Queues a message from code that cannot wait (a `Drop`): now if there is room, else
    /// from a task that waits for room.
    fn send_detached(&self, text: JsonText) {
        match self.shared.outgoing.try_send(Queued::unbudgeted(text)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(text)) => {
                // Outside a runtime (a future dropped after its runtime ended) the connection
                // is gone too, so there is nobody left to tell.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let outgoing = self.shared.outgoing.clone();
                    runtime.spawn(async move {
                        let _ = outgoing.send(text).await;
                    });
                }
            }
        }
    }
}

type ReserveFuture =
    BoxFuture<'static, Result<mpsc::OwnedPermit<Queued>, mpsc::error::SendError<()>>>;

/// One of our requests in flight; resolves with the answer. See [`PeerHandle::request`].
pub struct OutgoingRequest {
    peer: PeerHandle,
    id: i64,
    /// Waiting for room in the outgoing queue, with the rendered request; `None` once queued
    /// (or when the connection had already ended).
    queueing: Option<(ReserveFuture, JsonText)>,
    answer: oneshot::Receiver<Completion>,
    /// Set once the answer is taken, so that dropping the future then withdraws nothing.
    finished: bool,
}

impl fmt::Debug for OutgoingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutgoingRequest")
            .field("connection_id", &self.peer.connection_id())
            .field("id", &self.id)
            .field("queued", &self.queueing.is_none())
            .finish()
    }
}

impl OutgoingRequest {
    fn start(peer: PeerHandle, method: String, params: Option<Value>) -> Self {
        let id = peer.shared.next_request_id.fetch_add(1, Ordering::Relaxed);
        let (completion, answer) = oneshot::channel();
        let registered = {
            let mut table = peer.shared.pending();
            if table.open {
                table.waiters.insert(
                    id,
                    Waiter {
                        completion,
                        sent: false,
                    },
                );
                true
            } else {
                false
            }
        };
        // Unregistered, the completion sender is dropped and the answer reads as `Closed`.
        let queueing = registered.then(|| {
            let reserve: ReserveFuture = Box::pin(peer.shared.outgoing.clone().reserve_owned());
            (reserve, render(&Request::new(id, method, params)))
        });
        Self {
            peer,
            id,
            queueing,
            answer,
            finished: false,
        }
    }

    /// The request's id on the wire (for [`PeerHandle::cancel_request`] and logs).
    pub fn id(&self) -> i64 {
        self.id
    }
}

impl Future for OutgoingRequest {
    type Output = Result<Value, RequestError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some((mut reserve, text)) = this.queueing.take() {
            let reserved = match reserve.as_mut().poll(cx) {
                Poll::Ready(reserved) => reserved,
                Poll::Pending => {
                    this.queueing = Some((reserve, text));
                    return Poll::Pending;
                }
            };
            match reserved {
                Ok(permit) => {
                    let mut table = this.peer.shared.pending();
                    // Withdrawn or failed meanwhile: the answer is already waiting, and the
                    // other side must not get a request nobody waits for.
                    if let Some(waiter) = table.waiters.get_mut(&this.id) {
                        waiter.sent = true;
                        permit.send(Queued::unbudgeted(text));
                    }
                }
                Err(_) => {
                    this.peer.shared.pending().waiters.remove(&this.id);
                    this.finished = true;
                    return Poll::Ready(Err(RequestError::Closed));
                }
            }
        }
        let completion = ready!(Pin::new(&mut this.answer).poll(cx));
        this.finished = true;
        Poll::Ready(completion.unwrap_or(Err(RequestError::Closed)))
    }
}

impl Drop for OutgoingRequest {
    fn drop(&mut self) {
        if !self.finished {
            self.peer.withdraw(self.id);
        }
    }
}
