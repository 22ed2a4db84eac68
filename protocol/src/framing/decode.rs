//! The decoding half: framing detection, NDJSON lines, LSP headers and bodies, size limits.

use bytes::{Buf, BytesMut};
use serde_json::value::RawValue;
use tokio_util::codec::Decoder;

use super::{DetectedFraming, Frame, Framing, FramingError, MAX_HEADER_BYTES};

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecodeState {
    Detecting,
    /// A fatal error ended the stream: message boundaries are unknown, so whatever
    /// follows is dropped (and a caller that keeps decoding cannot trip on stale offsets).
    Failed,
    Ndjson {
        /// Bytes of the current line already searched for `\n`, so a line that arrives
        /// in many reads is scanned once.
        scanned: usize,
        /// Dropping the rest of an oversize line, up to its `\n`.
        discarding: bool,
    },
    LspHeaders {
        /// As for NDJSON, within the current header line.
        scanned: usize,
        /// Header lines consumed so far, held to `MAX_HEADER_BYTES`.
        header_bytes: usize,
        content_length: Option<usize>,
        /// Until a header arrives, blank lines are padding between messages, not the
        /// end of the headers.
        seen_header: bool,
    },
    LspBody {
        length: usize,
    },
    LspSkipBody {
        remaining: usize,
    },
}

const LSP_HEADERS_START: DecodeState = DecodeState::LspHeaders {
    scanned: 0,
    header_bytes: 0,
    content_length: None,
    seen_header: false,
};

const NDJSON_START: DecodeState = DecodeState::Ndjson {
    scanned: 0,
    discarding: false,
};

fn start_state(framing: Framing) -> DecodeState {
    match framing {
        Framing::Ndjson => NDJSON_START,
        Framing::Lsp => LSP_HEADERS_START,
    }
}

/// Splits a byte stream into [`Frame`]s, detecting the framing from the first byte.
#[derive(Debug)]
pub struct FrameDecoder {
    max_message_bytes: usize,
    state: DecodeState,
    detected: DetectedFraming,
}

impl FrameDecoder {
    /// A decoder that detects the framing (the daemon's side).
    pub fn new(max_message_bytes: usize) -> Self {
        Self {
            max_message_bytes,
            state: DecodeState::Detecting,
            detected: DetectedFraming::default(),
        }
    }

    /// A decoder for a framing chosen in advance (a client's side).
    pub fn with_framing(framing: Framing, max_message_bytes: usize) -> Self {
        Self {
            max_message_bytes,
            state: start_state(framing),
            detected: DetectedFraming::fixed(framing),
        }
    }

    /// Whether a message has started and not yet ended: bytes of it wait in `buffer` (the
    /// decoder drops blank lines, so whatever is left belongs to the next message, even
    /// whitespace that never ends its line), or the decoder is past its first bytes (LSP headers
    /// read, a body awaited). What a frame deadline measures.
    pub fn is_mid_frame(&self, buffer: &BytesMut) -> bool {
        let pending = || !buffer.is_empty();
        match self.state {
            DecodeState::Failed => false,
            DecodeState::Detecting | DecodeState::Ndjson { .. } => pending(),
            DecodeState::LspHeaders {
                header_bytes,
                seen_header,
                ..
            } => header_bytes > 0 || seen_header || pending(),
            DecodeState::LspBody { .. } | DecodeState::LspSkipBody { .. } => true,
        }
    }

    pub fn framing(&self) -> Option<Framing> {
        self.detected.get()
    }

    /// A handle that shows the framing once detected; give it to
    /// [`FrameEncoder::following`](super::FrameEncoder::following).
    pub fn detected_framing(&self) -> DetectedFraming {
        self.detected.clone()
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    fn decode_ndjson(
        &mut self,
        buf: &mut BytesMut,
        mut scanned: usize,
        mut discarding: bool,
    ) -> Option<Frame> {
        loop {
            if discarding {
                match find_newline(buf) {
                    Some(end) => {
                        buf.advance(end + 1);
                        discarding = false;
                        continue;
                    }
                    None => {
                        buf.clear();
                        self.state = DecodeState::Ndjson {
                            scanned: 0,
                            discarding: true,
                        };
                        return None;
                    }
                }
            }
            match find_newline(&buf[scanned..]) {
                Some(offset) => {
                    let end = scanned + offset;
                    let line = buf.split_to(end + 1);
                    scanned = 0;
                    let content = strip_cr(&line[..end]);
                    if content.len() > self.max_message_bytes {
                        self.state = NDJSON_START;
                        return Some(Frame::TooLarge);
                    }
                    if is_blank(content) {
                        continue;
                    }
                    self.state = NDJSON_START;
                    return Some(parse_frame(content));
                }
                // One byte of slack: a line of exactly the limit may still be waiting
                // for the `\n` of its `\r\n`.
                None if buf.len() > self.max_message_bytes.saturating_add(1) => {
                    buf.clear();
                    self.state = DecodeState::Ndjson {
                        scanned: 0,
                        discarding: true,
                    };
                    return Some(Frame::TooLarge);
                }
                None => {
                    self.state = DecodeState::Ndjson {
                        scanned: buf.len(),
                        discarding: false,
                    };
                    return None;
                }
            }
        }
    }

    /// Reads header lines until the blank line; returns the body length once known.
    fn decode_lsp_headers(
        &mut self,
        buf: &mut BytesMut,
        mut scanned: usize,
        mut header_bytes: usize,
        mut content_length: Option<usize>,
        mut seen_header: bool,
    ) -> Result<Option<usize>, FramingError> {
        loop {
            let Some(offset) = find_newline(&buf[scanned..]) else {
                if header_bytes.saturating_add(buf.len()) > MAX_HEADER_BYTES {
                    return Err(header_section_too_long());
                }
                self.state = DecodeState::LspHeaders {
                    scanned: buf.len(),
                    header_bytes,
                    content_length,
                    seen_header,
                };
                return Ok(None);
            };
            let end = scanned + offset;
            let line = buf.split_to(end + 1);
            scanned = 0;
            let content = strip_cr(&line[..end]);
            if is_blank(content) {
                if seen_header {
                    return match content_length {
                        Some(length) => Ok(Some(length)),
                        None => Err(FramingError::InvalidHeader(
                            "the headers have no Content-Length; send `Content-Length: N` \
                             followed by a blank line and N bytes of JSON"
                                .to_owned(),
                        )),
                    };
                }
                // Blank lines between messages are tolerated, as many LSP peers send them.
                continue;
            }
            header_bytes += line.len();
            if header_bytes > MAX_HEADER_BYTES {
                return Err(header_section_too_long());
            }
            seen_header = true;
            read_header_line(content, &mut content_length)?;
        }
    }
}

fn header_section_too_long() -> FramingError {
    FramingError::InvalidHeader(format!(
        "the header section is longer than {MAX_HEADER_BYTES} bytes"
    ))
}

/// Applies one `Name: value` line; only Content-Length matters, other headers (such as
/// Content-Type) are accepted and ignored.
fn read_header_line(line: &[u8], content_length: &mut Option<usize>) -> Result<(), FramingError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| FramingError::InvalidHeader("a header line is not valid UTF-8".to_owned()))?;
    let Some((name, value)) = text.split_once(':') else {
        return Err(FramingError::InvalidHeader(format!(
            "expected `Name: value`, got {:?}",
            excerpt(text)
        )));
    };
    if !name.trim().eq_ignore_ascii_case("content-length") {
        return Ok(());
    }
    let value = value.trim();
    // `usize::from_str` would also take a leading `+`; the header is plain digits.
    if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(FramingError::InvalidHeader(format!(
            "Content-Length must be a decimal number of bytes, got {:?}",
            excerpt(value)
        )));
    }
    let length: usize = value.parse().map_err(|_| {
        FramingError::InvalidHeader(format!("Content-Length {value} is out of range"))
    })?;
    match *content_length {
        Some(previous) if previous != length => Err(FramingError::InvalidHeader(format!(
            "two Content-Length headers disagree: {previous} and {length}"
        ))),
        Some(_) | None => {
            *content_length = Some(length);
            Ok(())
        }
    }
}

fn excerpt(text: &str) -> String {
    const LIMIT: usize = 60;
    if text.chars().count() > LIMIT {
        let head: String = text.chars().take(LIMIT).collect();
        format!("{head}…")
    } else {
        text.to_owned()
    }
}

/// Skips JSON whitespace and a UTF-8 BOM, then names the framing the next byte chooses;
/// `None` until that byte has arrived.
fn detect_framing(buf: &mut BytesMut) -> Result<Option<Framing>, FramingError> {
    loop {
        let blank = buf
            .iter()
            .take_while(|byte| is_json_whitespace(**byte))
            .count();
        buf.advance(blank);
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first == UTF8_BOM[0] {
            if buf.len() < UTF8_BOM.len() && UTF8_BOM.starts_with(buf) {
                return Ok(None);
            }
            if buf.starts_with(UTF8_BOM) {
                buf.advance(UTF8_BOM.len());
                continue;
            }
        }
        return match first {
            b'{' | b'[' => Ok(Some(Framing::Ndjson)),
            letter if letter.is_ascii_alphabetic() => Ok(Some(Framing::Lsp)),
            byte => Err(FramingError::UnrecognizedFraming { byte }),
        };
    }
}

fn find_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|byte| *byte == b'\n')
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_json_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(|byte| is_json_whitespace(*byte))
}

fn parse_frame(bytes: &[u8]) -> Frame {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => return Frame::ParseError(format!("the message is not valid UTF-8: {err}")),
    };
    match serde_json::from_str::<Box<RawValue>>(text) {
        Ok(value) if nests_within_limit(value.get()) => Frame::Message(value),
        Ok(_) => Frame::ParseError(format!(
            "the message is not valid JSON: it nests deeper than {MAX_NESTING} levels"
        )),
        Err(err) => Frame::ParseError(format!("the message is not valid JSON: {err}")),
    }
}

/// How deep serde_json reads a `Value` (its recursion limit); the reader reads messages into
/// values and types, so a message nested deeper is refused here, as reading it would be.
/// Checking a message's text alone does not apply that limit.
const MAX_NESTING: usize = 127;

/// Whether the arrays and objects of `json` (valid JSON) nest at most [`MAX_NESTING`] deep.
/// A string is skipped whole with `memchr` to its closing quote: most of a large message's bytes
/// are in its strings (a file's content, a command's output).
fn nests_within_limit(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut depth = 0usize;
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        at += 1;
        match byte {
            b'"' => loop {
                // Valid JSON: every string closes, and a backslash escapes the byte after it.
                let rest = bytes.get(at..).unwrap_or_default();
                let Some(offset) = memchr::memchr2(b'"', b'\\', rest) else {
                    return true;
                };
                at += offset + 1;
                if bytes[at - 1] == b'"' {
                    break;
                }
                at += 1;
            },
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

impl FrameDecoder {
    fn decode_frame(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        loop {
            match self.state {
                DecodeState::Failed => {
                    buf.clear();
                    return Ok(None);
                }
                DecodeState::Detecting => match detect_framing(buf)? {
                    Some(framing) => {
                        self.detected.set(framing);
                        self.state = start_state(framing);
                    }
                    None => return Ok(None),
                },
                DecodeState::Ndjson {
                    scanned,
                    discarding,
                } => return Ok(self.decode_ndjson(buf, scanned, discarding)),
                DecodeState::LspHeaders {
                    scanned,
                    header_bytes,
                    content_length,
                    seen_header,
                } => {
                    let Some(length) = self.decode_lsp_headers(
                        buf,
                        scanned,
                        header_bytes,
                        content_length,
                        seen_header,
                    )?
                    else {
                        return Ok(None);
                    };
                    if length > self.max_message_bytes {
                        self.state = DecodeState::LspSkipBody { remaining: length };
                        return Ok(Some(Frame::TooLarge));
                    }
                    self.state = DecodeState::LspBody { length };
                }
                DecodeState::LspBody { length } => {
                    if buf.len() < length {
                        return Ok(None);
                    }
                    let body = buf.split_to(length);
                    self.state = LSP_HEADERS_START;
                    return Ok(Some(parse_frame(&body)));
                }
                DecodeState::LspSkipBody { remaining } => {
                    let skipped = remaining.min(buf.len());
                    buf.advance(skipped);
                    if skipped < remaining {
                        self.state = DecodeState::LspSkipBody {
                            remaining: remaining - skipped,
                        };
                        return Ok(None);
                    }
                    self.state = LSP_HEADERS_START;
                }
            }
        }
    }
}

impl Decoder for FrameDecoder {
    type Item = Frame;
    type Error = FramingError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        let decoded = self.decode_frame(buf);
        if decoded.is_err() {
            self.state = DecodeState::Failed;
            buf.clear();
        }
        decoded
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FramingError> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        match self.state {
            // A last line without its `\n` is still a message.
            DecodeState::Ndjson {
                discarding: false, ..
            } if !is_blank(buf) => {
                let line = buf.split();
                self.state = NDJSON_START;
                Ok(Some(parse_frame(strip_cr(&line))))
            }
            // Anything else left is an incomplete frame from a peer that is gone:
            // nobody is left to tell, so it is dropped rather than reported as an error.
            DecodeState::Detecting
            | DecodeState::Failed
            | DecodeState::Ndjson { .. }
            | DecodeState::LspHeaders { .. }
            | DecodeState::LspBody { .. }
            | DecodeState::LspSkipBody { .. } => {
                buf.clear();
                Ok(None)
            }
        }
    }
}
