//! The trigram index against the files themselves: every file whose searched bytes the regex
//! matches is a candidate (random files and patterns, folds included); what the searcher never
//! reads (after a NUL) narrows, what it transcodes is always a candidate.

use super::super::plan::plan;
use super::{
    TrigramIndexBuilder, Unindexable, intersection, read_varint, searched_bytes, union,
    write_varint,
};

#[test]
fn varints_and_set_operations() {
    for value in [0, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
        let mut bytes = Vec::new();
        write_varint(&mut bytes, value);
        assert_eq!(read_varint(&bytes), (value, bytes.len()));
    }
    assert_eq!(union(&[1, 3, 5], &[2, 3, 6]), [1, 2, 3, 5, 6]);
    assert_eq!(intersection(&[1, 3, 5, 7], &[3, 4, 7]), [3, 7]);
    assert_eq!(union(&[], &[4]), [4]);
}

#[test]
fn what_the_searcher_reads_is_what_is_indexed() {
    let mut builder = TrigramIndexBuilder::new();
    let plain = builder.add(b"fn main() { JS_PUBLIC_API(x); }").unwrap();
    let after_nul = builder.add(b"header\0JS_PUBLIC_API").unwrap();
    let utf16 = builder.add(b"\xFF\xFEJ\0S\0_\0");
    assert_eq!(utf16, Err(Unindexable::Transcoded));
    let index = builder.build();
    let candidates = index.candidates(&plan("JS_PUBLIC_API", false));
    // The searcher abandons a file at its first NUL: what follows never matches.
    assert_eq!(candidates, [plain, 2]);
    assert!(!candidates.contains(&after_nul));
    assert_eq!(index.candidates(&plan("header", false)), [after_nul, 2]);
    assert_eq!(
        index.candidates(&plan("x", false)),
        [0, 1, 2],
        "no trigram: every file"
    );
}

/// A small deterministic generator (no dependency, the same files every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below
    }
}

#[test]
fn no_file_holding_a_match_is_ever_excluded() {
    let pieces = [
        "a", "b", "ab", "abc", "k", "K", "\u{212A}", "s", "S", "ſ", "st", "ack", "foo", "bar",
        "\n", " ", "é", "É", "x", "_", "(", "\0",
    ];
    let mut rng = Lcg(7);
    let files: Vec<String> = (0..300)
        .map(|_| {
            (0..rng.next(40))
                .map(|_| pieces[rng.next(pieces.len())])
                .collect()
        })
        .collect();
    let mut builder = TrigramIndexBuilder::new();
    for file in &files {
        let _ = builder.add(file.as_bytes());
    }
    let index = builder.build();
    let patterns = [
        "abc",
        "kack",
        "stack",
        "foo|bar",
        "(foo)+bar",
        "f[aeo]o",
        "ab.c",
        "a\\s+b",
        "éx",
        "[kK]ack",
        "s?tack",
        "(?:abc){2}",
        "foo\\nbar",
        "bar$",
        "^foo",
        "\\bab",
    ];
    for pattern in patterns {
        for case_insensitive in [false, true] {
            let regex = regex::bytes::RegexBuilder::new(pattern)
                .case_insensitive(case_insensitive)
                .build()
                .unwrap();
            let candidates = index.candidates(&plan(pattern, case_insensitive));
            for (id, file) in files.iter().enumerate() {
                let searched = searched_bytes(file.as_bytes());
                if regex.is_match(searched) {
                    assert!(
                        candidates.binary_search(&(id as u32)).is_ok(),
                        "{pattern:?} (case-insensitive: {case_insensitive}) matches file {id} \
                         {file:?}, which the index excludes"
                    );
                }
            }
        }
    }
}
