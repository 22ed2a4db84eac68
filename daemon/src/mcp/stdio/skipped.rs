//! What a line skipped for its length was about: the top-level `id` of a JSON-RPC answer, read
//! as the line's bytes pass and never holding them, so that a call whose answer is over the
//! length limit fails at once instead of waiting for its timeout.

/// The longest id string kept; a call's id (`"toold-N"`) is far shorter.
const LONGEST_ID: usize = 32;

/// A top-level key this reader cares about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Method,
    Other,
}

/// Reads the structure of one JSON object as it passes, piece by piece: strings (with their
/// escapes) and nesting, nothing else. Only what sits directly in the outer object counts, so
/// an `"id"` inside the result, or inside a string, is never taken for the answer's.
#[derive(Default)]
pub(super) struct SkippedLine {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The string being read in the outer object, while short enough to matter.
    string: Vec<u8>,
    string_too_long: bool,
    /// The last string read in the outer object, until `:` makes it a key.
    key: Option<Key>,
    /// The key whose value is being read in the outer object.
    value_of: Option<Key>,
    id: Option<String>,
    has_method: bool,
}

impl SkippedLine {
    /// Reads the next piece of the line.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                    if self.depth == 1 {
                        self.string_ended();
                    }
                    continue;
                }
                if self.depth == 1 {
                    if self.string.len() < LONGEST_ID {
                        self.string.push(byte);
                    } else {
                        self.string_too_long = true;
                    }
                }
                continue;
            }
            match byte {
                b'"' => {
                    self.in_string = true;
                    self.string.clear();
                    self.string_too_long = false;
                }
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b':' if self.depth == 1 => {
                    self.value_of = self.key.take();
                    self.has_method |= self.value_of == Some(Key::Method);
                }
                b',' if self.depth == 1 => {
                    self.key = None;
                    self.value_of = None;
                }
                _ => {}
            }
        }
    }

    fn string_ended(&mut self) {
        match self.value_of.take() {
            Some(Key::Id) if !self.string_too_long => {
                self.id = String::from_utf8(std::mem::take(&mut self.string)).ok();
            }
            Some(_) => {}
            None => {
                self.key = Some(match (self.string_too_long, self.string.as_slice()) {
                    (false, b"id") => Key::Id,
                    (false, b"method") => Key::Method,
                    _ => Key::Other,
                });
            }
        }
    }

    /// The string id of the answer the line was, if it was one (no `method`) and had one; as
    /// written between its quotes.
    pub(super) fn answer_id(&self) -> Option<&str> {
        if self.has_method {
            return None;
        }
        self.id.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer id `line` gives, fed whole and fed a byte at a time.
    fn answer_id(line: &str) -> Option<String> {
        let mut whole = SkippedLine::default();
        whole.feed(line.as_bytes());
        let mut bytewise = SkippedLine::default();
        for byte in line.as_bytes() {
            bytewise.feed(std::slice::from_ref(byte));
        }
        assert_eq!(whole.answer_id(), bytewise.answer_id(), "{line}");
        whole.answer_id().map(str::to_owned)
    }

    #[test]
    fn the_outer_id_of_an_answer_is_read_wherever_it_stands() {
        // After the result (as Node's SDK writes it), before it (as Python's does).
        let first =
            r#"{"result":{"content":[{"type":"text","text":"x"}]},"jsonrpc":"2.0","id":"toold-7"}"#;
        assert_eq!(answer_id(first).as_deref(), Some("toold-7"));
        let last = r#"{"jsonrpc": "2.0", "id" : "toold-8", "error": {"code": 1, "message": "m"}}"#;
        assert_eq!(answer_id(last).as_deref(), Some("toold-8"));
    }

    #[test]
    fn an_id_inside_the_result_or_a_string_is_not_the_answers() {
        let nested = r#"{"result":{"id":"toold-1","items":[{"id":"toold-2"}]},"id":"toold-3"}"#;
        assert_eq!(answer_id(nested).as_deref(), Some("toold-3"));
        let quoted = r#"{"result":{"text":"\"id\":\"toold-1\"}, {"},"id":"toold-4"}"#;
        assert_eq!(answer_id(quoted).as_deref(), Some("toold-4"));
        let in_a_value = r#"{"note":"id","other":"x","id":"toold-5"}"#;
        assert_eq!(answer_id(in_a_value).as_deref(), Some("toold-5"));
        assert_eq!(answer_id(r#"{"result":{"id":"toold-1"}}"#), None);
    }

    #[test]
    fn requests_and_notifications_are_no_answers() {
        let notification =
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}"#;
        assert_eq!(answer_id(notification), None);
        let request = r#"{"jsonrpc":"2.0","id":"toold-9","method":"sampling/createMessage"}"#;
        assert_eq!(answer_id(request), None);
    }

    #[test]
    fn numeric_and_overlong_ids_are_none() {
        assert_eq!(answer_id(r#"{"id":17,"result":{}}"#), None);
        let long = format!(r#"{{"id":"{}","result":{{}}}}"#, "x".repeat(LONGEST_ID + 1));
        assert_eq!(answer_id(&long), None);
    }
}
