//! The writer task: the only owner of the write half, draining the bounded outgoing queue in
//! the connection's framing.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio_util::codec::Encoder;

use super::handle::Queued;
use super::{CloseReason, PeerHandle};
use crate::framing::{DetectedFraming, FrameEncoder};

/// How many bytes of queued messages one write may gather. Bounded, so that what the writer
/// holds outside the queue stays small; large enough that a burst of events goes out in a
/// few system calls.
pub(super) const MAX_WRITE_BATCH_BYTES: usize = 16 * 1024;

/// Writes queued messages until the connection starts closing, then flushes what was queued
/// before the close and shuts the write half down. A write error closes the connection.
pub(super) async fn run<W>(
    mut writer: W,
    mut queue: mpsc::Receiver<Queued>,
    framing: DetectedFraming,
    framing_known: Arc<Notify>,
    peer: PeerHandle,
) where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let stopping = peer.stopping();
    // The daemon never writes first: until the client's first byte chooses the framing, our
    // output waits in the queue. `notify_one` keeps a permit, so a detection between the
    // check and the wait is not missed.
    while framing.get().is_none() {
        tokio::select! {
            () = framing_known.notified() => {}
            // Closing right after the first frame (an oversize one) still owes its answer.
            () = stopping.cancelled() => if framing.get().is_none() {
                return;
            },
        }
    }
    let mut encoder = FrameEncoder::following(framing);
    let mut buffer = BytesMut::new();
    loop {
        let next = tokio::select! {
            biased;
            () = stopping.cancelled() => break,
            next = queue.recv() => next,
        };
        // The queue closes only when every sender is gone, and the handle keeps one.
        let Some(text) = next else { break };
        encode(&mut encoder, text, &mut buffer, &peer);
        gather_ready(&mut queue, &mut encoder, &mut buffer, &peer);
        if let Err(err) = write_out(&mut writer, &mut buffer).await {
            peer.begin_close(CloseReason::WriteFailed(Arc::new(err)));
            return;
        }
    }
    // Closing: later sends fail, what was queued before still goes out (the supervisor
    // bounds how long this may take).
    queue.close();
    while let Some(text) = queue.recv().await {
        encode(&mut encoder, text, &mut buffer, &peer);
        gather_ready(&mut queue, &mut encoder, &mut buffer, &peer);
        if write_out(&mut writer, &mut buffer).await.is_err() {
            return;
        }
    }
    // The other side may already be gone; nothing is left to report it to.
    let _ = writer.shutdown().await;
}

/// Moves messages that are already queued into the write buffer, up to a bounded size.
fn gather_ready(
    queue: &mut mpsc::Receiver<Queued>,
    encoder: &mut FrameEncoder,
    buffer: &mut BytesMut,
    peer: &PeerHandle,
) {
    while buffer.len() < MAX_WRITE_BATCH_BYTES {
        match queue.try_recv() {
            Ok(text) => encode(encoder, text, buffer, peer),
            Err(mpsc::error::TryRecvError::Empty | mpsc::error::TryRecvError::Disconnected) => {
                break;
            }
        }
    }
}

/// Frames one message into the buffer; its share of the byte budget is released here, as the
/// buffer's own size is bounded separately.
fn encode(encoder: &mut FrameEncoder, queued: Queued, buffer: &mut BytesMut, peer: &PeerHandle) {
    if let Err(err) = encoder.encode(queued.text, buffer) {
        // Only text rendered elsewhere can fail here (pretty-printed JSON that does not
        // parse); that one message is lost, the connection is not.
        tracing::error!(
            connection = peer.connection_id(),
            error = %err,
            "dropping an outgoing message that cannot be framed"
        );
    }
}

async fn write_out<W: AsyncWrite + Unpin>(
    writer: &mut W,
    buffer: &mut BytesMut,
) -> std::io::Result<()> {
    writer.write_all(buffer).await?;
    buffer.clear();
    if buffer.capacity() > 4 * MAX_WRITE_BATCH_BYTES {
        // One large message must not pin its buffer for the connection's lifetime.
        *buffer = BytesMut::new();
    }
    writer.flush().await
}
