//! The framing codec: newline-delimited JSON or the LSP base protocol, detected per
//! connection from the first byte the peer sends (docs/protocol.md section 1).
//!
//! Bad input is a value ([`Frame::ParseError`], [`Frame::TooLarge`]) so the connection can
//! answer it; only input that makes message boundaries unknowable is a [`FramingError`].

use std::io;
use std::sync::{Arc, OnceLock};

use bytes::BytesMut;
use serde_json::value::RawValue;
use tokio_util::codec::{Decoder, Encoder};

mod decode;
mod encode;

pub use decode::FrameDecoder;
pub(crate) use encode::render_notification_as;
pub use encode::{FrameEncoder, JsonText};

/// docs/protocol.md's default `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The most bytes an LSP header section may take; real ones are under 100.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// How messages are delimited on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// One JSON message per line, ended by `\n` (`\r\n` tolerated).
    Ndjson,
    /// `Content-Length: N` headers, a blank line, then N bytes of JSON.
    Lsp,
}

/// The framing a decoder detected, shared with the writer half of the connection so that
/// it answers in the peer's framing. Empty until the first non-whitespace byte arrives.
#[derive(Debug, Clone, Default)]
pub struct DetectedFraming(Arc<OnceLock<Framing>>);

impl DetectedFraming {
    pub fn get(&self) -> Option<Framing> {
        self.0.get().copied()
    }

    fn fixed(framing: Framing) -> Self {
        Self(Arc::new(OnceLock::from(framing)))
    }

    fn set(&self, framing: Framing) {
        // A decoder detects once per connection, so a second set cannot happen; if it
        // did, keeping the first framing is what the writer already relies on.
        let _ = self.0.set(framing);
    }
}

/// One decoded unit of input.
#[derive(Debug, Clone)]
pub enum Frame {
    /// A JSON value, checked and kept as its text: a message, or an array of them (a batch).
    /// The reader reads each message from the text into the types it needs.
    Message(Box<RawValue>),
    /// The frame was not valid UTF-8 or not valid JSON; answer `-32700` with id null.
    /// The decoder has skipped the frame and the next one decodes normally.
    ParseError(String),
    /// The frame was over the size limit; answer `-32600` with id null and close. The
    /// decoder skips the frame without buffering it.
    TooLarge,
}

impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Frame::Message(text), Frame::Message(other)) => text.get() == other.get(),
            (Frame::ParseError(why), Frame::ParseError(other)) => why == other,
            (Frame::TooLarge, Frame::TooLarge) => true,
            _ => false,
        }
    }
}

/// Input after which message boundaries are unknowable, and writer failures.
#[derive(Debug, thiserror::Error)]
pub enum FramingError {
    /// The peer's first byte chooses no framing; close without answering, since there
    /// is no framing to answer in.
    #[error(
        "unrecognized framing: the first byte {byte:#04x} is not `{{`, `[` (newline-delimited JSON) \
         or an ASCII letter (Content-Length headers)"
    )]
    UnrecognizedFraming { byte: u8 },
    /// An LSP header section that cannot be read; answer `-32600` with the reason, then close.
    #[error("invalid message header: {0}")]
    InvalidHeader(String),
    /// The encoder was asked to write before the peer sent anything.
    #[error("the framing is not known yet: the peer has sent nothing")]
    FramingNotDetected,
    #[error("cannot serialize the message: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A decoder and an encoder in one, for a `Framed` stream; the encoder writes in the
/// framing the decoder detected (or was given).
#[derive(Debug)]
pub struct FrameCodec {
    decoder: FrameDecoder,
    encoder: FrameEncoder,
}

impl FrameCodec {
    /// Detects the framing from the peer's first byte.
    pub fn new(max_message_bytes: usize) -> Self {
        let decoder = FrameDecoder::new(max_message_bytes);
        let encoder = FrameEncoder::following(decoder.detected_framing());
        Self { decoder, encoder }
    }

    pub fn with_framing(framing: Framing, max_message_bytes: usize) -> Self {
        Self {
            decoder: FrameDecoder::with_framing(framing, max_message_bytes),
            encoder: FrameEncoder::new(framing),
        }
    }

    pub fn framing(&self) -> Option<Framing> {
        self.decoder.framing()
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FramingError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        self.decoder.decode(buf)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        self.decoder.decode_eof(buf)
    }
}

impl<I> Encoder<I> for FrameCodec
where
    FrameEncoder: Encoder<I, Error = FramingError>,
{
    type Error = FramingError;

    fn encode(&mut self, item: I, dst: &mut BytesMut) -> Result<(), FramingError> {
        self.encoder.encode(item, dst)
    }
}

#[cfg(test)]
mod tests;
