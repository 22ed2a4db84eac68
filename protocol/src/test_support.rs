//! Helpers for the round-trip tests of the message types.

use pretty_assertions::assert_eq;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Deserializes `wire` into `T`, checks that serializing it gives `wire` back, and returns it.
#[track_caller]
pub fn assert_round_trip<T: Serialize + DeserializeOwned>(wire: Value) -> T {
    let parsed: T = match serde_json::from_value(wire.clone()) {
        Ok(parsed) => parsed,
        Err(err) => panic!("{wire} does not deserialize: {err}"),
    };
    assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
    parsed
}

/// Checks that `wire` does not deserialize into `T`, with an error mentioning `needle`.
#[track_caller]
pub fn assert_refused<T: DeserializeOwned + std::fmt::Debug>(wire: Value, needle: &str) {
    match serde_json::from_value::<T>(wire.clone()) {
        Ok(parsed) => panic!("{wire} was accepted as {parsed:?}"),
        Err(err) => assert!(
            err.to_string().contains(needle),
            "{wire}: error {err:?} does not mention {needle:?}"
        ),
    }
}
