//! Fuzz target for JSON-RPC message decoding: arbitrary bytes read as JSON, then every message
//! (or batch entry) classified by `Message::from_value`, and from its text by
//! `Incoming::from_raw`, as the peer's reader does.
//!
//! Invariants: no panic; the `Deserialize` impl and `from_raw` agree with `from_value`; a valid message
//! serializes and decodes back to itself; an invalid one is answered under its own id (or
//! null when the id cannot be read) with a `-32600` response that itself decodes as a response.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use serde_json::value::RawValue;
use toold_protocol::rpc::{Id, Incoming, Message, error_code};

/// The reader's path: the message's text, classified without reading it as a `Value` when it
/// is a well-formed request, gives what `from_value` gives for the same text.
fn check_text(value: &Value) {
    let Ok(text) = serde_json::to_string(value) else {
        return;
    };
    let (Ok(raw), Ok(reread)) = (
        RawValue::from_string(text.clone()),
        serde_json::from_str::<Value>(&text),
    ) else {
        return;
    };
    let from_raw = Incoming::from_raw(&raw).map(|incoming| match incoming {
        Incoming::Request(request) => Message::Request(request.into_request()),
        Incoming::Notification(notification) => Message::Notification(notification),
        Incoming::Response(response) => Message::Response(response),
    });
    assert_eq!(from_raw, Message::from_value(reread), "from_raw disagrees: {text}");
}

fn check(value: Value) {
    check_text(&value);
    let readable_id = match &value {
        Value::Object(object) => object.get("id").and_then(|raw| Id::from_value(raw).ok()),
        _ => None,
    };
    let decoded = Message::from_value(value.clone());
    let via_serde = serde_json::from_value::<Message>(value);
    match (&decoded, &via_serde) {
        (Ok(message), Ok(same)) => assert_eq!(message, same, "Deserialize disagrees"),
        (Err(_), Err(_)) => {}
        _ => panic!("Deserialize disagrees: {decoded:?} vs {via_serde:?}"),
    }
    match decoded {
        Ok(message) => {
            // Through a Value, not text: serde_json's default float parsing may round the last
            // digit, which is not the decoder's concern.
            let text = serde_json::to_string(&message).expect("a message serializes");
            serde_json::from_str::<Value>(&text).expect("its text is JSON");
            let again = serde_json::to_value(&message).expect("a message serializes");
            let again = Message::from_value(again).expect("a serialized message decodes");
            assert_eq!(again, message, "the message does not round-trip: {text}");
        }
        Err(invalid) => {
            assert!(
                invalid.id == Id::Null || Some(&invalid.id) == readable_id.as_ref(),
                "answered under {:?}, not the message's id {readable_id:?}",
                invalid.id
            );
            let response = invalid.to_response();
            let again = serde_json::to_value(&response).expect("a response serializes");
            match Message::from_value(again) {
                Ok(Message::Response(again)) => {
                    assert_eq!(again, response, "the error response does not round-trip");
                    let error = again.outcome.expect_err("an error response");
                    assert_eq!(error.code, error_code::INVALID_REQUEST);
                }
                other => panic!("the error response {response:?} decodes as {other:?}"),
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    match value {
        Value::Array(entries) => entries.into_iter().for_each(check),
        single => check(single),
    }
});
