//! Tests of the framing codec: detection, both framings, bad input, limits, and properties.

use super::*;
use crate::rpc::Message;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};

const LIMIT: usize = 1024;

/// What the decoder produced, a message read as a `Value` and fatal errors rendered as text.
#[derive(Debug, PartialEq)]
enum Out {
    Message(Value),
    Frame(Frame),
    Fatal(String),
}

fn message(value: Value) -> Out {
    Out::Message(value)
}

fn out(frame: Frame) -> Out {
    match frame {
        Frame::Message(text) => Out::Message(value_of(&text)),
        frame => Out::Frame(frame),
    }
}

/// A decoded message's text as a `Value`.
fn value_of(text: &RawValue) -> Value {
    serde_json::from_str(text.get()).expect("the decoder passes JSON only")
}

/// The message `decoded` is, as a `Value`.
fn decoded_value(decoded: Option<Frame>) -> Option<Value> {
    match decoded {
        Some(Frame::Message(text)) => Some(value_of(&text)),
        other => panic!("not a message: {other:?}"),
    }
}

/// Feeds `chunks` to `decoder` one read at a time, then signals end of input, the way
/// `FramedRead` drives it; stops at the first fatal error.
fn run(decoder: &mut FrameDecoder, chunks: &[&[u8]]) -> Vec<Out> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let total: usize = chunks.iter().map(|chunk| chunk.len()).sum();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => out.push(self::out(frame)),
                Ok(None) => break,
                Err(err) => {
                    out.push(Out::Fatal(err.to_string()));
                    return out;
                }
            }
            assert!(
                out.len() <= total + 1,
                "the decoder loops without consuming"
            );
        }
    }
    loop {
        match decoder.decode_eof(&mut buf) {
            Ok(Some(frame)) => out.push(self::out(frame)),
            Ok(None) => break,
            Err(err) => {
                out.push(Out::Fatal(err.to_string()));
                break;
            }
        }
        assert!(
            out.len() <= total + 1,
            "the decoder loops without consuming"
        );
    }
    out
}

fn decode(input: &[u8]) -> Vec<Out> {
    run(&mut FrameDecoder::new(LIMIT), &[input])
}

/// The same input, delivered one byte per read.
fn decode_bytewise(input: &[u8]) -> Vec<Out> {
    let chunks: Vec<&[u8]> = input.chunks(1).collect();
    run(&mut FrameDecoder::new(LIMIT), &chunks)
}

fn lsp(body: &str) -> String {
    format!("Content-Length: {}\r\n\r\n{body}", body.len())
}

fn is_parse_error(out: &Out) -> bool {
    matches!(out, Out::Frame(Frame::ParseError(_)))
}

fn fatal_mentions(out: &Out, needle: &str) -> bool {
    matches!(out, Out::Fatal(text) if text.contains(needle))
}

#[test]
fn ndjson_messages_in_one_read() {
    let input = b"{\"a\":1}\n[1,2]\n{\"b\":\"x\\ny\"}\n";
    let expected = vec![
        message(json!({"a":1})),
        message(json!([1, 2])),
        message(json!({"b":"x\ny"})),
    ];
    assert_eq!(decode(input), expected);
    assert_eq!(decode_bytewise(input), expected);
}

#[test]
fn ndjson_tolerates_crlf_blank_lines_and_a_missing_last_newline() {
    let input = b"\r\n  \n{\"a\":1}\r\n\n\r\n  {\"b\":2}  \r\n\t\n{\"c\":3}";
    let expected = vec![
        message(json!({"a":1})),
        message(json!({"b":2})),
        message(json!({"c":3})),
    ];
    assert_eq!(decode(input), expected);
    assert_eq!(decode_bytewise(input), expected);
}

#[test]
fn a_bom_and_leading_whitespace_are_skipped() {
    let mut decoder = FrameDecoder::new(LIMIT);
    let out = run(&mut decoder, &[b"\xEF", b"\xBB", b"\xBF \n{\"a\":1}\n"]);
    assert_eq!(out, vec![message(json!({"a":1}))]);
    assert_eq!(decoder.framing(), Some(Framing::Ndjson));
    let out = decode(format!("\u{feff}{}", lsp("{}")).as_bytes());
    assert_eq!(out, vec![message(json!({}))]);
}

#[test]
fn unrecognized_first_bytes_are_fatal() {
    for input in [
        &b"\"text\"\n"[..],
        b"42\n",
        b"\x00",
        b"\xEF\xBB\x00",
        b"  <xml/>",
        b"\xff",
    ] {
        let out = decode(input);
        assert_eq!(out.len(), 1, "{input:?}");
        assert!(
            fatal_mentions(&out[0], "unrecognized framing"),
            "{input:?}: {out:?}"
        );
    }
}

#[test]
fn detection_waits_for_a_non_whitespace_byte() {
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut buf = BytesMut::from(&b"  \r\n\xEF\xBB"[..]);
    assert_eq!(decoder.decode(&mut buf).unwrap(), None);
    assert_eq!(decoder.framing(), None);
    let shared = decoder.detected_framing();
    buf.extend_from_slice(b"\xBFContent-Length: 2\r\n\r\n{}");
    assert_eq!(
        decoded_value(decoder.decode(&mut buf).unwrap()),
        Some(json!({}))
    );
    assert_eq!(shared.get(), Some(Framing::Lsp));
}

#[test]
fn lsp_messages_split_and_together() {
    let input = format!(
        "{}{}{}",
        lsp(r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#),
        lsp("[1]"),
        lsp(r#"{"text":"é\n"}"#)
    );
    let expected = vec![
        message(json!({"jsonrpc":"2.0","id":1,"method":"initialize"})),
        message(json!([1])),
        message(json!({"text":"é\n"})),
    ];
    assert_eq!(decode(input.as_bytes()), expected);
    assert_eq!(decode_bytewise(input.as_bytes()), expected);
}

#[test]
fn lsp_headers_are_case_insensitive_and_others_ignored() {
    let input = "content-type: application/vscode-jsonrpc; charset=utf-8\r\n\
                 CONTENT-LENGTH:2\r\n\r\n{}\
                 Content-Length :  3 \r\nX-Anything: yes\r\n\r\n[1]";
    assert_eq!(
        decode(input.as_bytes()),
        vec![message(json!({})), message(json!([1]))]
    );
}

#[test]
fn lsp_accepts_bare_newlines_and_blank_lines_between_messages() {
    let input = "Content-Length: 2\n\n{}\r\n\nContent-Length: 2\r\n\n[]";
    let expected = vec![message(json!({})), message(json!([]))];
    assert_eq!(decode(input.as_bytes()), expected);
    assert_eq!(decode_bytewise(input.as_bytes()), expected);
}

#[test]
fn lsp_missing_or_invalid_content_length_is_fatal() {
    let cases = [
        (
            "Content-Type: application/json\r\n\r\n{}",
            "no Content-Length",
        ),
        ("Content-Length: abc\r\n\r\n{}", "decimal number"),
        ("Content-Length: -2\r\n\r\n{}", "decimal number"),
        ("Content-Length: +2\r\n\r\n{}", "decimal number"),
        ("Content-Length:\r\n\r\n{}", "decimal number"),
        (
            "Content-Length: 99999999999999999999999999\r\n\r\n",
            "out of range",
        ),
        (
            "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "disagree",
        ),
        ("hello world\r\n\r\n", "expected `Name: value`"),
    ];
    for (input, needle) in cases {
        let out = decode(input.as_bytes());
        assert!(
            out.last().is_some_and(|last| fatal_mentions(last, needle)),
            "{input:?}: {out:?}"
        );
    }
}

#[test]
fn decoding_after_a_fatal_error_yields_nothing() {
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut buf = BytesMut::from(&b"Content-Length: 2\r\nX-A: partial"[..]);
    assert_eq!(decoder.decode(&mut buf).unwrap(), None);
    buf.extend_from_slice(b"\r\nno colon here\r\n\r\n{}");
    assert!(matches!(
        decoder.decode(&mut buf),
        Err(FramingError::InvalidHeader(_))
    ));
    buf.extend_from_slice(&lsp("{}").into_bytes());
    assert_eq!(decoder.decode(&mut buf).unwrap(), None);
    assert_eq!(decoder.decode_eof(&mut buf).unwrap(), None);
    assert!(buf.is_empty());
}

#[test]
fn lsp_header_section_is_bounded() {
    let endless = format!("X-Padding: {}", "a".repeat(MAX_HEADER_BYTES));
    let out = decode(endless.as_bytes());
    assert!(fatal_mentions(&out[0], "header section"), "{out:?}");
    let many = "X-A: b\r\n".repeat(MAX_HEADER_BYTES / 8 + 1);
    let out = decode(many.as_bytes());
    assert!(fatal_mentions(&out[0], "header section"), "{out:?}");
}

#[test]
fn oversize_ndjson_is_reported_once_and_skipped() {
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(LIMIT));
    let input = format!("{big}\n{{\"after\":1}}\n");
    let expected = vec![Out::Frame(Frame::TooLarge), message(json!({"after":1}))];
    assert_eq!(decode(input.as_bytes()), expected);
    assert_eq!(decode_bytewise(input.as_bytes()), expected);
}

#[test]
fn oversize_ndjson_is_not_buffered_while_waiting_for_a_newline() {
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(b"{\"pad\":\"");
    let mut reported = 0;
    for _ in 0..100 {
        buf.extend_from_slice(&[b'x'; 100]);
        while let Some(frame) = decoder.decode(&mut buf).unwrap() {
            assert_eq!(frame, Frame::TooLarge);
            reported += 1;
        }
        assert!(buf.len() <= LIMIT + 1, "buffered {} bytes", buf.len());
    }
    assert_eq!(reported, 1);
    buf.extend_from_slice(b"\"}\n{\"ok\":true}\n");
    assert_eq!(
        decoded_value(decoder.decode(&mut buf).unwrap()),
        Some(json!({"ok":true}))
    );
}

#[test]
fn ndjson_limit_counts_the_message_without_its_line_end() {
    let exact = format!("[\"{}\"]", "x".repeat(LIMIT - 4));
    assert_eq!(exact.len(), LIMIT);
    let input = format!("{exact}\r\n{exact}x\n");
    let out = decode_bytewise(input.as_bytes());
    assert!(matches!(out[0], Out::Message(_)), "{out:?}");
    assert!(matches!(out[1], Out::Frame(Frame::TooLarge)), "{out:?}");
}

#[test]
fn oversize_lsp_is_skipped_without_buffering() {
    let body = format!("[\"{}\"]", "x".repeat(LIMIT));
    let input = format!("{}{}", lsp(&body), lsp("{\"after\":1}"));
    let expected = vec![Out::Frame(Frame::TooLarge), message(json!({"after":1}))];
    assert_eq!(decode(input.as_bytes()), expected);
    assert_eq!(decode_bytewise(input.as_bytes()), expected);
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut buf = BytesMut::from(format!("Content-Length: {}\r\n\r\n", 100 * LIMIT).as_bytes());
    assert_eq!(decoder.decode(&mut buf).unwrap(), Some(Frame::TooLarge));
    for _ in 0..99 {
        buf.extend_from_slice(&[b' '; LIMIT]);
        assert_eq!(decoder.decode(&mut buf).unwrap(), None);
        assert!(buf.is_empty());
    }
}

#[test]
fn invalid_utf8_and_json_are_values_and_the_connection_goes_on() {
    let ndjson = b"{\"a\":\"\xff\"}\n{\"a\":\n{nope}\n{\"ok\":1}\n";
    let out = decode(ndjson);
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(matches!(&out[0], Out::Frame(Frame::ParseError(why)) if why.contains("UTF-8")));
    assert!(out[1..3].iter().all(is_parse_error), "{out:?}");
    assert_eq!(out[3], message(json!({"ok":1})));

    let not_utf8 = b"{\"a\":\"\xff\"}";
    let mut lsp_input = format!("Content-Length: {}\r\n\r\n", not_utf8.len()).into_bytes();
    lsp_input.extend_from_slice(not_utf8);
    lsp_input.extend_from_slice(lsp("{oops").as_bytes());
    lsp_input.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    lsp_input.extend_from_slice(lsp("{\"ok\":1}").as_bytes());
    let out = decode(&lsp_input);
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(out[..3].iter().all(is_parse_error), "{out:?}");
    assert_eq!(out[3], message(json!({"ok":1})));
}

#[test]
fn a_later_ndjson_line_that_is_not_json_is_a_parse_error() {
    let out = decode(b"{}\nhello\n\"str\"\n");
    assert_eq!(out[0], message(json!({})));
    assert!(is_parse_error(&out[1]));
    assert_eq!(out[2], message(json!("str")));
}

#[test]
fn deep_nesting_is_a_parse_error_not_a_crash() {
    let deep = format!("{}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let out = run(&mut FrameDecoder::new(1 << 20), &[deep.as_bytes()]);
    assert_eq!(out.len(), 1);
    assert!(is_parse_error(&out[0]), "{out:?}");
}

#[test]
fn an_incomplete_frame_at_eof_is_dropped() {
    assert_eq!(decode(b"Content-Length: 10\r\n\r\n{\"a\""), vec![]);
    assert_eq!(decode(b"Content-Len"), vec![]);
    assert_eq!(decode(b"\xEF\xBB"), vec![]);
    assert_eq!(decode(b"   "), vec![]);
}

#[test]
fn the_encoder_writes_both_framings() {
    let value = json!({"jsonrpc":"2.0","id":1,"result":{"text":"a\nb"}});
    let mut dst = BytesMut::new();
    FrameEncoder::new(Framing::Ndjson)
        .encode(&value, &mut dst)
        .unwrap();
    assert_eq!(
        &dst[..],
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\"a\\nb\"}}\n"
    );
    let mut dst = BytesMut::new();
    FrameEncoder::new(Framing::Lsp)
        .encode(json!([1]), &mut dst)
        .unwrap();
    assert_eq!(&dst[..], b"Content-Length: 3\r\n\r\n[1]");
    let mut dst = BytesMut::new();
    let notification = crate::rpc::Notification::new("batch/done", None);
    FrameEncoder::new(Framing::Ndjson)
        .encode(Message::Notification(notification), &mut dst)
        .unwrap();
    assert_eq!(
        &dst[..],
        b"{\"jsonrpc\":\"2.0\",\"method\":\"batch/done\"}\n"
    );
}

#[test]
fn the_encoder_writes_pre_serialized_text() {
    let mut dst = BytesMut::new();
    let mut encoder = FrameEncoder::new(Framing::Ndjson);
    encoder
        .encode(JsonText("{\"a\":1}".into()), &mut dst)
        .unwrap();
    encoder
        .encode(JsonText("{\n  \"b\": 2\n}".into()), &mut dst)
        .unwrap();
    assert_eq!(&dst[..], b"{\"a\":1}\n{\"b\":2}\n");
    assert!(encoder.encode(JsonText("{\n".into()), &mut dst).is_err());
    let mut dst = BytesMut::new();
    FrameEncoder::new(Framing::Lsp)
        .encode(JsonText("{\n}".into()), &mut dst)
        .unwrap();
    assert_eq!(&dst[..], b"Content-Length: 3\r\n\r\n{\n}");
}

#[test]
fn the_encoder_follows_the_detected_framing() {
    let mut codec = FrameCodec::new(LIMIT);
    let mut dst = BytesMut::new();
    assert!(matches!(
        codec.encode(json!({}), &mut dst),
        Err(FramingError::FramingNotDetected)
    ));
    let mut buf = BytesMut::from(lsp("{\"id\":1}").as_bytes());
    assert_eq!(
        decoded_value(codec.decode(&mut buf).unwrap()),
        Some(json!({"id":1}))
    );
    assert_eq!(codec.framing(), Some(Framing::Lsp));
    codec.encode(json!({"id":1}), &mut dst).unwrap();
    assert_eq!(&dst[..], lsp("{\"id\":1}").as_bytes());
}

#[test]
fn a_failed_serialization_leaves_no_partial_frame() {
    use std::collections::BTreeMap;
    let bad_keys: BTreeMap<Vec<u8>, u8> = BTreeMap::from([(vec![1], 1)]);
    let mut dst = BytesMut::from(&b"earlier\n"[..]);
    let result = FrameEncoder::new(Framing::Ndjson).encode(&bad_keys, &mut dst);
    assert!(matches!(result, Err(FramingError::Serialize(_))));
    assert_eq!(&dst[..], b"earlier\n");
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Eighths are exact in binary, so they survive a text round trip bit for bit.
        (-1_000_000i32..1_000_000).prop_map(|n| Value::from(f64::from(n) / 8.0)),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A top-level message: an object or an array, as the protocol sends.
fn json_message() -> impl Strategy<Value = Value> {
    json_value().prop_map(|value| match value {
        Value::Object(_) | Value::Array(_) => value,
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            json!({"value": value})
        }
    })
}

/// Cuts `bytes` into reads whose sizes cycle through `sizes`.
fn chunk<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut chunks = Vec::new();
    let mut rest = bytes;
    let mut size = sizes.iter().cycle();
    while !rest.is_empty() {
        let take = size.next().copied().unwrap_or(1).clamp(1, rest.len());
        let (head, tail) = rest.split_at(take);
        chunks.push(head);
        rest = tail;
    }
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(
        prefix in prop_oneof![Just(&b""[..]), Just(&b"{}\n"[..]), Just(&b"Content-Length: 4\r\n\r\n"[..])],
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        sizes in prop::collection::vec(1usize..300, 1..8),
        limit in 1usize..512,
    ) {
        let mut input = prefix.to_vec();
        input.extend_from_slice(&bytes);
        run(&mut FrameDecoder::new(limit), &chunk(&input, &sizes));
    }

    #[test]
    fn random_lines_never_panic(
        lines in prop::collection::vec(
            prop_oneof![
                "[ -~]{0,40}",
                "[{}\\[\\]\":, 0-9a-z\\\\]{0,40}",
                "(?i)content-length: ?[0-9+-]{0,4}",
            ],
            0..20,
        ),
        sizes in prop::collection::vec(1usize..64, 1..8),
        crlf in any::<bool>(),
    ) {
        let end = if crlf { "\r\n" } else { "\n" };
        let input = lines.join(end);
        run(&mut FrameDecoder::new(256), &chunk(input.as_bytes(), &sizes));
    }

    #[test]
    fn encoded_values_decode_to_themselves(
        values in prop::collection::vec(json_message(), 0..8),
        sizes in prop::collection::vec(1usize..200, 1..8),
        lsp_framing in any::<bool>(),
    ) {
        let framing = if lsp_framing { Framing::Lsp } else { Framing::Ndjson };
        let mut encoder = FrameEncoder::new(framing);
        let mut wire = BytesMut::new();
        for value in &values {
            encoder.encode(value, &mut wire).unwrap();
        }
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_MESSAGE_BYTES);
        let decoded = run(&mut decoder, &chunk(&wire, &sizes));
        let expected: Vec<Out> = values.into_iter().map(message).collect();
        prop_assert_eq!(decoded, expected);
        if !wire.is_empty() {
            prop_assert_eq!(decoder.framing(), Some(framing));
        }
    }
}

#[test]
fn nesting_is_refused_where_reading_a_value_would_refuse_it() {
    for depth in [126, 127, 128, 129] {
        for (open, close) in [("[", "]"), ("{\"k\":", "}")] {
            let inner = if open == "[" { "" } else { "1" };
            let text = format!("{}{inner}{}", open.repeat(depth), close.repeat(depth));
            // Brackets inside strings do not count, after escaped quotes and backslashes too.
            let text = format!(r#"["[[{{\"","\"[[[[[[[[[[","a\\","\\\"[[[[[[[[[[",{text}]"#);
            let as_value = serde_json::from_str::<Value>(&text).is_ok();
            let out = decode(format!("{text}\n").as_bytes());
            assert_eq!(out.len(), 1, "{depth}");
            assert_eq!(
                matches!(out[0], Out::Message(_)),
                as_value,
                "depth {depth} of {open}: {out:?}"
            );
        }
    }
}
