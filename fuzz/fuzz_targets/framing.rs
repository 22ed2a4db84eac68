//! Fuzz target for the framing decoder: arbitrary bytes, split into arbitrary chunks, through
//! `FrameDecoder` as a `Framed` stream drives it.
//!
//! Invariants: no panic; after a `decode` that returns `Ok(None)` the buffer holds no more than
//! the size limit allows (the message limit plus one byte of `\r` slack, or the header limit);
//! and the frames, in order, and the error that ends the stream, are the same whether the
//! bytes arrive in one read or in many.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;
use toold_protocol::framing::{Frame, FrameDecoder, Framing, MAX_HEADER_BYTES};

/// What a stream decoded to: its frames, then the error that ended it, if any.
#[derive(Debug, PartialEq)]
struct Decoded {
    frames: Vec<Frame>,
    error: Option<String>,
}

fn new_decoder(mode: u8, max: usize) -> FrameDecoder {
    match mode % 3 {
        0 => FrameDecoder::new(max),
        1 => FrameDecoder::with_framing(Framing::Ndjson, max),
        _ => FrameDecoder::with_framing(Framing::Lsp, max),
    }
}

/// Feeds `chunks` one read at a time, decoding after each until the decoder wants more, then
/// ends the input.
fn decode_stream<'a>(mut decoder: FrameDecoder, chunks: impl Iterator<Item = &'a [u8]>) -> Decoded {
    let max = decoder.max_message_bytes();
    let held_limit = max.saturating_add(1).max(MAX_HEADER_BYTES);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(err) => {
                    assert!(buf.is_empty(), "a failed decoder keeps {} bytes", buf.len());
                    return Decoded {
                        frames,
                        error: Some(err.to_string()),
                    };
                }
            }
        }
        assert!(
            buf.len() <= held_limit,
            "the decoder holds {} bytes waiting for more, over the limit {held_limit}",
            buf.len()
        );
    }
    loop {
        match decoder.decode_eof(&mut buf) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => break,
            Err(err) => {
                return Decoded {
                    frames,
                    error: Some(err.to_string()),
                };
            }
        }
    }
    assert!(buf.is_empty(), "decode_eof left {} bytes", buf.len());
    Decoded {
        frames,
        error: None,
    }
}

fuzz_target!(|data: &[u8]| {
    // Two bytes of set-up: the framing (detected or fixed) and the size limit, small so that
    // the fuzzer reaches it; a third seeds the chunk sizes.
    let [mode, limit, seed, stream @ ..] = data else {
        return;
    };
    let max = usize::from(*limit) * 4 + 1;
    let whole = decode_stream(new_decoder(*mode, max), std::iter::once(stream));

    let mut sizes = seed.wrapping_mul(31) | 1;
    let mut rest = stream;
    let chunks = std::iter::from_fn(|| {
        if rest.is_empty() {
            return None;
        }
        sizes = sizes.wrapping_mul(73).wrapping_add(41);
        let take = usize::from(sizes % 17 + 1).min(rest.len());
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        Some(chunk)
    });
    let split = decode_stream(new_decoder(*mode, max), chunks);
    assert_eq!(whole, split, "one read and many reads decode differently");

    let byte_at_a_time = decode_stream(new_decoder(*mode, max), stream.chunks(1));
    assert_eq!(
        whole, byte_at_a_time,
        "one read and byte reads decode differently"
    );
});
