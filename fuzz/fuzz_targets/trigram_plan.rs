//! Fuzz target for the warm index's trigram query planner: a random regex (Unicode, case
//! folding on or off) and a random file. Invariant: when the regex matches the file, the file
//! satisfies the plan, and the trigram index built of the file (what the searcher reads of it:
//! up to the first NUL) gives it as a candidate when the regex matches what is read: no file
//! holding a match is ever excluded; no panic on any pattern.
//!
//! Input: one flag byte (bit 0: case-insensitive), the pattern up to the first NUL, the file
//! after it.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use toold::index::plan::{Trigram, plan, trigrams};
use toold::index::trigrams::{TrigramIndexBuilder, searched_bytes};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let case_insensitive = flags & 1 == 1;
    let (pattern, haystack) = match rest.iter().position(|&byte| byte == 0) {
        Some(nul) => (&rest[..nul], &rest[nul + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(pattern) = std::str::from_utf8(pattern) else {
        return;
    };
    let query = plan(pattern, case_insensitive);
    let Ok(regex) = regex::bytes::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(1 << 20)
        .build()
    else {
        return;
    };
    // Through the index, as a search uses it: the file is read up to its first NUL.
    let mut builder = TrigramIndexBuilder::new();
    let _ = builder.add(haystack);
    let index = builder.build();
    let read = searched_bytes(haystack);
    if regex.is_match(read) {
        assert_eq!(
            index.candidates(&query),
            [0],
            "{pattern:?} (case-insensitive: {case_insensitive}) matches {:?}, but the index \
             excludes it under the plan {query:?}",
            String::from_utf8_lossy(read)
        );
    }
    if !regex.is_match(haystack) {
        return;
    }
    let present: HashSet<Trigram> = trigrams(haystack).collect();
    assert!(
        query.matches(&|trigram| present.contains(&trigram)),
        "{pattern:?} (case-insensitive: {case_insensitive}) matches {:?}, but the plan \
         {query:?} excludes it",
        String::from_utf8_lossy(haystack)
    );
});
