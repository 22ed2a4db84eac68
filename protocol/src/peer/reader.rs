//! The reader: decodes frames, routes responses to our pending requests, hands
//! notifications to the handler, spawns incoming requests, and answers batches and bad input.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::Decoder;

use super::handle::render;
use super::{BoxFuture, CloseReason, Handler, PeerHandle, PeerOptions, Reply};
use crate::framing::{Frame, FrameDecoder, FramingError, JsonText};
use crate::rpc::{ErrorObject, Id, Incoming, Notification, RawRequest, Response};

/// How much room each read asks for; a frame larger than this arrives over several reads.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// An empty read buffer larger than this is given back, so that a connection that once
/// received a large message does not keep its memory while idle.
const MAX_IDLE_BUFFER_BYTES: usize = 64 * 1024;

/// Whether the connection goes on after a frame.
enum Flow {
    Continue,
    Close(CloseReason),
}

pub(super) struct Reader<R> {
    stream: R,
    decoder: FrameDecoder,
    buffer: BytesMut,
    /// Rung once the client's first byte has chosen the framing, so the writer may start.
    framing_known: Arc<Notify>,
    framing_announced: bool,
    peer: PeerHandle,
    handler: Arc<dyn Handler>,
    max_message_bytes: usize,
    frame_timeout: Option<Duration>,
    /// When the message now arriving sent its first byte (`None` between messages).
    frame_started: Option<Instant>,
}

impl<R: AsyncRead + Unpin + Send + 'static> Reader<R> {
    pub(super) fn new(
        stream: R,
        decoder: FrameDecoder,
        framing_known: Arc<Notify>,
        peer: PeerHandle,
        handler: Arc<dyn Handler>,
        options: &PeerOptions,
    ) -> Self {
        Self {
            stream,
            decoder,
            buffer: BytesMut::new(),
            framing_known,
            framing_announced: false,
            peer,
            handler,
            max_message_bytes: options.max_message_bytes,
            frame_timeout: options.frame_timeout,
            frame_started: None,
        }
    }

    /// Reads until the input ends or becomes unreadable, and says why it stopped.
    pub(super) async fn run(mut self) -> CloseReason {
        loop {
            loop {
                let decoded = self.decoder.decode(&mut self.buffer);
                self.announce_framing();
                match decoded {
                    Ok(Some(frame)) => {
                        // The deadline is per message: the next one's clock starts at its own
                        // first byte (it may already be in the buffer).
                        self.frame_started = None;
                        if let Flow::Close(reason) = self.on_frame(frame).await {
                            return reason;
                        }
                    }
                    Ok(None) => break,
                    Err(err) => return self.on_fatal(err).await,
                }
            }
            if self.buffer.is_empty() && self.buffer.capacity() > MAX_IDLE_BUFFER_BYTES {
                // One large message must not pin its buffer for the connection's lifetime.
                self.buffer = BytesMut::new();
            }
            self.buffer.reserve(READ_CHUNK_BYTES);
            if !self.decoder.is_mid_frame(&self.buffer) {
                self.frame_started = None;
            } else if self.frame_started.is_none() {
                self.frame_started = Some(Instant::now());
            }
            let read = self.stream.read_buf(&mut self.buffer);
            let read = match self.frame_started.zip(self.frame_timeout) {
                Some((started, limit)) => {
                    match tokio::time::timeout_at(started + limit, read).await {
                        Ok(read) => read,
                        Err(_) => return self.on_frame_timeout(limit).await,
                    }
                }
                None => read.await,
            };
            match read {
                Ok(0) => return self.at_eof().await,
                Ok(_) => {}
                Err(err) => return CloseReason::ReadFailed(Arc::new(err)),
            }
        }
    }

    /// A message took longer than the frame deadline to arrive: answered, then closed.
    async fn on_frame_timeout(&mut self, limit: Duration) -> CloseReason {
        self.announce_framing();
        let error = ErrorObject::invalid_request(format!(
            "a message did not arrive within {} ms of its first byte",
            limit.as_millis()
        ));
        self.answer_now(Response::error(Id::Null, error)).await;
        CloseReason::FrameTimeout
    }

    fn announce_framing(&mut self) {
        if !self.framing_announced && self.decoder.framing().is_some() {
            self.framing_announced = true;
            self.framing_known.notify_one();
        }
    }

    /// A last message without its newline still counts; then the input has ended.
    async fn at_eof(&mut self) -> CloseReason {
        loop {
            match self.decoder.decode_eof(&mut self.buffer) {
                Ok(Some(frame)) => match self.on_frame(frame).await {
                    Flow::Continue => {}
                    Flow::Close(reason) => return reason,
                },
                Ok(None) => return CloseReason::Eof,
                Err(err) => return self.on_fatal(err).await,
            }
        }
    }

    async fn on_frame(&mut self, frame: Frame) -> Flow {
        match frame {
            Frame::Message(text) if text.get().starts_with('[') => {
                // Checked as JSON by the decoder: an array of values.
                let entries =
                    serde_json::from_str::<Vec<&RawValue>>(text.get()).unwrap_or_default();
                self.on_batch(&entries).await;
            }
            Frame::Message(text) => self.on_message(&text).await,
            Frame::ParseError(why) => {
                self.answer_now(Response::error(Id::Null, ErrorObject::parse_error(why)))
                    .await;
            }
            Frame::TooLarge => {
                let error = ErrorObject::too_large(self.max_message_bytes);
                self.answer_now(Response::error(Id::Null, error)).await;
                return Flow::Close(CloseReason::TooLarge);
            }
        }
        Flow::Continue
    }

    /// Message boundaries are lost: answer when the framing allows it, then close.
    async fn on_fatal(&mut self, err: FramingError) -> CloseReason {
        match &err {
            FramingError::InvalidHeader(_) => {
                let error = ErrorObject::invalid_request(&err);
                self.answer_now(Response::error(Id::Null, error)).await;
            }
            // No framing was chosen, so there is no way to answer.
            FramingError::UnrecognizedFraming { .. }
            // The decoder reports neither; they belong to the encoding side.
            | FramingError::FramingNotDetected
            | FramingError::Serialize(_)
            | FramingError::Io(_) => {}
        }
        CloseReason::Framing(Arc::new(err))
    }

    async fn on_message(&mut self, text: &RawValue) {
        match Incoming::from_raw(text) {
            Ok(Incoming::Request(request)) => self.on_request(request).await,
            Ok(Incoming::Notification(notification)) => self.on_notification(notification).await,
            Ok(Incoming::Response(response)) => self.peer.complete(response),
            Err(invalid) => self.answer_now(invalid.to_response()).await,
        }
    }

    /// Spawns the handler: the reader never waits for one, or a handler waiting for an
    /// answer from this same peer would wait forever.
    async fn on_request(&mut self, request: RawRequest) {
        match self.in_flight_permit() {
            Some(permit) => {
                let peer = self.peer.clone();
                let answering = answer(peer.clone(), &self.handler, request);
                tokio::spawn(async move {
                    let text = answering.await;
                    // A closed connection cannot take the answer; the handler's work is done.
                    let _ = peer.send_text(text).await;
                    drop(permit);
                });
            }
            None => self.answer_now(overloaded(request.id)).await,
        }
    }

    /// Delivers a notification; when the handler asks to, waits for it before reading on.
    async fn on_notification(&mut self, notification: Notification) {
        let method = notification.method.clone();
        let delivered = catch_unwind(AssertUnwindSafe(|| {
            self.handler
                .notification_or_wait(self.peer.clone(), notification)
        }));
        let wait = match delivered {
            Ok(wait) => wait,
            Err(payload) => {
                tracing::error!(
                    connection = self.peer.connection_id(),
                    method,
                    panic = panic_message(payload.as_ref()),
                    "a notification handler panicked; the notification is dropped"
                );
                None
            }
        };
        // No need to watch for a local close here: the supervisor stops the whole reader.
        if let Some(wait) = wait
            && let Err(payload) = CatchUnwind(wait).await
        {
            tracing::error!(
                connection = self.peer.connection_id(),
                method,
                panic = panic_message(payload.as_ref()),
                "a notification handler panicked while delivering"
            );
        }
    }

    /// Handles every entry (requests spawned, notifications delivered, responses routed)
    /// and answers once, with one array, when every request in it has been answered.
    async fn on_batch(&mut self, entries: &[&RawValue]) {
        if entries.is_empty() {
            let error = ErrorObject::invalid_request("an empty batch: send at least one message");
            self.answer_now(Response::error(Id::Null, error)).await;
            return;
        }
        let mut answers = Vec::new();
        for entry in entries {
            match Incoming::from_raw(entry) {
                Ok(Incoming::Request(request)) => answers.push(self.start_batch_entry(request)),
                Ok(Incoming::Notification(notification)) => {
                    self.on_notification(notification).await
                }
                Ok(Incoming::Response(response)) => self.peer.complete(response),
                Err(invalid) => answers.push(BatchAnswer::Ready(render(&invalid.to_response()))),
            }
        }
        // Notifications and responses get no entry; a batch of only those gets no answer.
        if answers.is_empty() {
            return;
        }
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let mut texts = Vec::with_capacity(answers.len());
            for answer in answers {
                texts.push(answer.finish().await);
            }
            let _ = peer.send_text(join_batch(&texts)).await;
        });
    }

    fn start_batch_entry(&self, request: RawRequest) -> BatchAnswer {
        match self.in_flight_permit() {
            Some(permit) => {
                let id = request.id.clone();
                let answering = answer(self.peer.clone(), &self.handler, request);
                let task = tokio::spawn(async move {
                    let text = answering.await;
                    drop(permit);
                    text
                });
                BatchAnswer::Running { id, task }
            }
            None => BatchAnswer::Ready(render(&overloaded(request.id))),
        }
    }

    /// One permit per incoming request whose answer is not queued yet (held by the peer's
    /// shared state). Bounded so that a flood of requests cannot spawn tasks without limit;
    /// over it a request is refused (`-32001`) and the reader goes on, since pausing it would
    /// also pause the answers to our own requests that a handler may be waiting for.
    fn in_flight_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.peer.in_flight_permit()
    }

    /// Queues an answer from the reader itself (bad input). Waiting for room here is the
    /// backpressure on a peer that sends garbage without reading our answers.
    async fn answer_now(&mut self, response: Response) {
        let _ = self.peer.send_text(render(&response)).await;
    }
}

/// One entry of a batch's answer.
enum BatchAnswer {
    Ready(JsonText),
    Running { id: Id, task: JoinHandle<JsonText> },
}

impl BatchAnswer {
    async fn finish(self) -> JsonText {
        match self {
            BatchAnswer::Ready(text) => text,
            BatchAnswer::Running { id, task } => match task.await {
                Ok(text) => text,
                // Panics are caught inside `answer`; only a runtime shutting down ends up here.
                Err(err) => render(&Response::error(
                    id,
                    ErrorObject::internal_error(format!("the request was not answered: {err}")),
                )),
            },
        }
    }
}

fn join_batch(texts: &[JsonText]) -> JsonText {
    let length = texts.iter().map(|text| text.0.len() + 1).sum::<usize>() + 1;
    let mut joined = String::with_capacity(length);
    joined.push('[');
    for (index, text) in texts.iter().enumerate() {
        if index > 0 {
            joined.push(',');
        }
        joined.push_str(&text.0);
    }
    joined.push(']');
    JsonText(joined)
}

fn overloaded(id: Id) -> Response {
    Response::error(
        id,
        ErrorObject::overloaded("too many requests on this connection are waiting for an answer"),
    )
}

/// Calls the handler for one request, here and now: whatever it does before returning its
/// future happens in the order requests arrived (an `initialize` is recorded before the next
/// request is looked at). The returned future runs the rest; a panic anywhere becomes `-32603`.
fn answer(
    peer: PeerHandle,
    handler: &Arc<dyn Handler>,
    request: RawRequest,
) -> impl Future<Output = JsonText> + Send + 'static {
    let id = request.id.clone();
    let method = request.method.clone();
    let connection = peer.connection_id();
    let started = catch_unwind(AssertUnwindSafe(|| handler.raw_request(peer, request)));
    async move {
        let reply = match started {
            Ok(future) => CatchUnwind(future).await,
            Err(payload) => Err(payload),
        };
        match reply {
            Ok(Reply::Outcome(outcome)) => render(&Response { id, outcome }),
            Ok(Reply::Rendered(text)) => text,
            Err(payload) => {
                tracing::error!(
                    connection,
                    method,
                    panic = panic_message(payload.as_ref()),
                    "a request handler panicked"
                );
                render(&Response::error(
                    id,
                    ErrorObject::internal_error(format!(
                        "the handler of {method:?} failed unexpectedly; the log has details"
                    )),
                ))
            }
        }
    }
}

/// A handler's future with its panics caught, so that every request gets an answer (and a
/// delivery that panics does not end the reader).
struct CatchUnwind<T>(BoxFuture<'static, T>);

impl<T> Future for CatchUnwind<T> {
    type Output = std::thread::Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(Poll::Ready(reply)) => Poll::Ready(Ok(reply)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "a panic without a message"
    }
}
