//! The encoding half: writes values or pre-serialized JSON text in one framing.

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde_json::Value;
use tokio_util::codec::Encoder;

use super::{DetectedFraming, Framing, FramingError};
use crate::rpc::{Message, Version};

/// Already-serialized JSON (such as a response rendered by jsonrpsee) to write as one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(pub String);

/// Writes messages in one framing: fixed, or whatever the connection's decoder detected.
#[derive(Debug, Clone)]
pub struct FrameEncoder {
    framing: DetectedFraming,
}

impl FrameEncoder {
    pub fn new(framing: Framing) -> Self {
        Self {
            framing: DetectedFraming::fixed(framing),
        }
    }

    /// An encoder that writes in the framing `detected` shows; the daemon never writes
    /// first, so it is known by the time there is anything to write.
    pub fn following(detected: DetectedFraming) -> Self {
        Self { framing: detected }
    }

    fn framing(&self) -> Result<Framing, FramingError> {
        self.framing.get().ok_or(FramingError::FramingNotDetected)
    }
}

fn put_lsp_frame(body: &[u8], dst: &mut BytesMut) {
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    dst.reserve(header.len() + body.len());
    dst.put_slice(header.as_bytes());
    dst.put_slice(body);
}

impl<T: Serialize + ?Sized> Encoder<&T> for FrameEncoder {
    type Error = FramingError;

    fn encode(&mut self, item: &T, dst: &mut BytesMut) -> Result<(), FramingError> {
        match self.framing()? {
            Framing::Ndjson => {
                let start = dst.len();
                // Compact serialization escapes every newline inside strings, so the
                // line cannot be split.
                if let Err(err) = serde_json::to_writer(dst.writer(), item) {
                    dst.truncate(start);
                    return Err(err.into());
                }
                dst.put_u8(b'\n');
            }
            Framing::Lsp => put_lsp_frame(&serde_json::to_vec(item)?, dst),
        }
        Ok(())
    }
}

impl Encoder<Value> for FrameEncoder {
    type Error = FramingError;

    fn encode(&mut self, item: Value, dst: &mut BytesMut) -> Result<(), FramingError> {
        self.encode(&item, dst)
    }
}

impl Encoder<Message> for FrameEncoder {
    type Error = FramingError;

    fn encode(&mut self, item: Message, dst: &mut BytesMut) -> Result<(), FramingError> {
        self.encode(&item, dst)
    }
}

impl Encoder<JsonText> for FrameEncoder {
    type Error = FramingError;

    fn encode(&mut self, item: JsonText, dst: &mut BytesMut) -> Result<(), FramingError> {
        match self.framing()? {
            Framing::Ndjson if memchr::memchr2(b'\n', b'\r', item.0.as_bytes()).is_some() => {
                // Pretty-printed text would break the line framing: re-serialize it compactly.
                let value: Value = serde_json::from_str(&item.0)?;
                self.encode(&value, dst)
            }
            Framing::Ndjson => {
                dst.reserve(item.0.len() + 1);
                dst.put_slice(item.0.as_bytes());
                dst.put_u8(b'\n');
                Ok(())
            }
            Framing::Lsp => {
                put_lsp_frame(item.0.as_bytes(), dst);
                Ok(())
            }
        }
    }
}

/// A notification of `method` with `params` as compact JSON, rendered straight from the
/// params (no `Value` in between): what `peer`'s `render_notification` and a session event's
/// rendering share.
pub(crate) fn render_notification_as<P: Serialize + ?Sized>(
    method: &'static str,
    params: &P,
) -> Result<JsonText, serde_json::Error> {
    #[derive(Serialize)]
    struct Wire<'a, P: ?Sized> {
        jsonrpc: Version,
        method: &'static str,
        params: &'a P,
    }
    serde_json::to_string(&Wire {
        jsonrpc: Version,
        method,
        params,
    })
    .map(JsonText)
}
