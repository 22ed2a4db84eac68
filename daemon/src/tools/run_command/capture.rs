//! What `run_command` keeps of a command's output: bytes decoded to UTF-8 per stream without
//! splitting characters, and the head and tail of the whole in bounded memory.

/// Decodes one stream's bytes to UTF-8 as they arrive. Invalid bytes become U+FFFD; a
/// character split across two reads is carried over (at most 3 bytes) and never split.
#[derive(Debug, Default)]
pub(super) struct Utf8Decoder {
    carried: Vec<u8>,
}

impl Utf8Decoder {
    /// The text of `bytes`, minus an incomplete character at the end, which waits for the next.
    pub(super) fn decode(&mut self, bytes: &[u8]) -> String {
        let joined;
        let mut rest: &[u8] = if self.carried.is_empty() {
            bytes
        } else {
            self.carried.extend_from_slice(bytes);
            joined = std::mem::take(&mut self.carried);
            &joined
        };
        let mut text = String::with_capacity(rest.len());
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    return text;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    // `valid` is exactly the prefix `from_utf8` vouched for: no replacement here.
                    text.push_str(&String::from_utf8_lossy(valid));
                    match err.error_len() {
                        Some(invalid) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[invalid..];
                        }
                        None => {
                            self.carried = after.to_vec();
                            return text;
                        }
                    }
                }
            }
        }
    }

    /// The stream ended: an incomplete character left over is invalid.
    pub(super) fn finish(&mut self) -> String {
        let carried = std::mem::take(&mut self.carried);
        String::from_utf8_lossy(&carried).into_owned()
    }
}

/// The head and the tail of a text too long to keep whole, in memory bounded by `limit`.
///
/// The head takes the first half of the limit; once it is full, the tail keeps the last
/// `limit - head` bytes. So a text of at most `limit` bytes is kept whole, and a longer one
/// becomes head, a marker line saying how many bytes were left out, and tail.
#[derive(Debug)]
pub(super) struct HeadTail {
    limit: usize,
    head: String,
    head_full: bool,
    /// The last bytes seen after the head; may start inside a character until [`finish`].
    ///
    /// [`finish`]: HeadTail::finish
    tail: Vec<u8>,
    total: u64,
}

impl HeadTail {
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit,
            head: String::new(),
            head_full: false,
            tail: Vec::new(),
            total: 0,
        }
    }

    pub(super) fn push(&mut self, text: &str) {
        self.total += text.len() as u64;
        let mut rest = text;
        if !self.head_full {
            let room = self.limit / 2 - self.head.len();
            if rest.len() <= room {
                self.head.push_str(rest);
                return;
            }
            let cut = floor_char_boundary(rest, room);
            self.head.push_str(&rest[..cut]);
            rest = &rest[cut..];
            self.head_full = true;
        }
        let tail_limit = self.limit - self.head.len();
        let bytes = rest.as_bytes();
        if bytes.len() >= tail_limit {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - tail_limit..]);
        } else {
            self.tail.extend_from_slice(bytes);
            if self.tail.len() > tail_limit {
                self.tail.drain(..self.tail.len() - tail_limit);
            }
        }
    }

    /// The kept text, and whether anything was left out.
    pub(super) fn finish(self) -> (String, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        if kept == self.total {
            // Nothing was dropped, so the tail starts where the head's last character ended.
            let mut text = self.head;
            text.push_str(&String::from_utf8_lossy(&self.tail));
            return (text, false);
        }
        // The tail was cut by bytes: start it at the first whole character.
        let start = self
            .tail
            .iter()
            .position(|byte| !is_continuation_byte(*byte))
            .unwrap_or(self.tail.len());
        let tail = String::from_utf8_lossy(&self.tail[start..]);
        let omitted = self.total - self.head.len() as u64 - tail.len() as u64;
        let mut text = self.head;
        text.push_str(&format!("\n[… {omitted} bytes of output omitted …]\n"));
        text.push_str(&tail);
        (text, true)
    }
}

fn is_continuation_byte(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// The largest char boundary of `text` at or below `index`.
fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut cut = index.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn decode_in_pieces(pieces: &[&[u8]]) -> String {
        let mut decoder = Utf8Decoder::default();
        let mut text: String = pieces.iter().map(|piece| decoder.decode(piece)).collect();
        text.push_str(&decoder.finish());
        text
    }

    #[test]
    fn carries_a_character_split_across_reads() {
        let euro = "€".as_bytes();
        let mut decoder = Utf8Decoder::default();
        assert_eq!(decoder.decode(&[b'a', euro[0]]), "a");
        assert_eq!(decoder.decode(&euro[1..2]), "");
        assert_eq!(decoder.decode(&[euro[2], b'b']), "€b");
        assert_eq!(decoder.finish(), "");
    }

    #[test]
    fn replaces_invalid_bytes_as_lossy_decoding_does() {
        let cases: &[&[u8]] = &[
            b"ok\xff\xfeok",
            b"\xe2\x82",
            b"a\xe2\x82b",
            b"\xf0\x9f\x98\x80\xc3",
            b"\xed\xa0\x80",
        ];
        for bytes in cases {
            let expected = String::from_utf8_lossy(bytes);
            for split in 0..=bytes.len() {
                let (first, second) = bytes.split_at(split);
                assert_eq!(
                    decode_in_pieces(&[first, second]),
                    expected,
                    "{bytes:?} @ {split}"
                );
            }
            let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(decode_in_pieces(&one_by_one), expected);
        }
    }

    fn keep(limit: usize, pieces: &[&str]) -> (String, bool) {
        let mut kept = HeadTail::new(limit);
        for piece in pieces {
            kept.push(piece);
        }
        kept.finish()
    }

    #[test]
    fn keeps_text_up_to_the_limit_whole() {
        let text = "0123456789".repeat(10);
        for limit in [100, 101, 1000] {
            assert_eq!(keep(limit, &[&text]), (text.clone(), false));
            let pieces: Vec<String> = text.chars().map(String::from).collect();
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            assert_eq!(keep(limit, &pieces), (text.clone(), false));
        }
    }

    #[test]
    fn keeps_multibyte_text_at_the_limit_whole() {
        // 3-byte characters against an odd head budget: the head ends early, the tail makes up.
        let text = "€".repeat(10);
        assert_eq!(keep(30, &[&text]), (text.clone(), false));
        assert_eq!(keep(30, &["€"; 10]), (text, false));
    }

    #[test]
    fn cuts_the_middle_with_a_marker() {
        let text: String = (0..1000).map(|n| format!("{n}\n")).collect();
        let (kept, truncated) = keep(100, &[&text]);
        assert!(truncated);
        assert!(kept.starts_with("0\n1\n2\n"));
        assert!(kept.ends_with("998\n999\n"));
        let marker = format!("\n[… {} bytes of output omitted …]\n", text.len() - 100);
        assert!(kept.contains(&marker), "{kept}");
        assert_eq!(kept.len(), 100 + marker.len());
        assert!(marker.len() < 100);
    }

    #[test]
    fn cuts_at_character_boundaries() {
        let text = "€".repeat(100);
        for limit in [0, 1, 2, 7, 10, 31] {
            let (kept, truncated) = keep(limit, &[&text]);
            assert!(truncated);
            let without_marker: String = kept.chars().filter(|c| *c == '€').collect();
            assert!(without_marker.len() <= limit, "limit {limit}: {kept}");
            let omitted = text.len() - without_marker.len();
            assert!(kept.contains(&format!("[… {omitted} bytes")), "{kept}");
        }
    }

    #[test]
    fn same_result_whatever_the_pieces() {
        let text: String = (0..500).map(|n| format!("line {n} ünïcödé\n")).collect();
        let whole = keep(333, &[&text]);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(keep(333, &lines), whole);
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(keep(333, &chars), whole);
    }
}
