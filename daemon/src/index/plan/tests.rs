//! The planner on the patterns the benchmark and the issue name, folds and all: what it
//! narrows to, and that every haystack the regex matches satisfies the plan.

use std::collections::HashSet;

use super::{Query, Trigram, plan, trigrams};

fn satisfied(query: &Query, haystack: &str) -> bool {
    let set: HashSet<Trigram> = trigrams(haystack.as_bytes()).collect();
    query.matches(&|trigram| set.contains(&trigram))
}

fn sound(pattern: &str, case_insensitive: bool, haystacks: &[&str]) {
    let query = plan(pattern, case_insensitive);
    let regex = regex::bytes::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .build()
        .expect("a valid regex");
    for haystack in haystacks {
        if regex.is_match(haystack.as_bytes()) {
            assert!(
                satisfied(&query, haystack),
                "{pattern:?} (case-insensitive: {case_insensitive}) matches {haystack:?}, \
                 but the plan {query:?} excludes it"
            );
        }
    }
}

#[test]
fn a_literal_needs_all_its_trigrams() {
    let query = plan("JS_PUBLIC_API", false);
    assert!(satisfied(&query, "extern JS_PUBLIC_API(bool) f();"));
    assert!(!satisfied(&query, "JS_PUBLIC_AP"));
    assert!(!satisfied(&query, "js_public_api"));
}

#[test]
fn a_regex_needs_the_literals_of_its_parts() {
    let query = plan(r"\bstatic\s+bool\s+\w+\(", false);
    assert!(satisfied(&query, "static  bool f("));
    assert!(!satisfied(&query, "static int f("));
    assert!(!satisfied(&query, "static boo f("), "{query:?}");
    // Short literals alone narrow nothing.
    assert!(plan(r"a\d+b", false).is_all());
    assert!(plan(r"return", false) != Query::All);
    assert!(plan(r".*", false).is_all());
    assert!(
        plan(r"(", false).is_all(),
        "a pattern that does not parse reads every file"
    );
}

#[test]
fn alternations_and_repetitions() {
    let query = plan("(foobar|bazqux)+", false);
    assert!(satisfied(&query, "xx bazqux"));
    assert!(!satisfied(&query, "foo bar baz qux"));
    assert!(plan("(foobar)?x", false).is_all());
    sound(
        "(foobar|bazqux)+end",
        false,
        &["foobarend", "bazquxbazquxend", "end"],
    );
}

#[test]
fn case_folds_beyond_ascii_are_never_excluded() {
    // `(?i)s` matches `ſ` (U+017F) and `(?i)k` matches `K` (U+212A, the Kelvin sign).
    for (pattern, haystack) in [
        ("stack", "ſtack"),
        ("kernel", "Kernel"),
        ("mask", "MAſK"),
        ("kiss", "KIſſ"),
    ] {
        sound(pattern, true, &[haystack]);
        assert!(
            satisfied(&plan(pattern, true), haystack),
            "{pattern} in {haystack}"
        );
    }
    assert!(!satisfied(&plan("kernel", false), "Kernel"));
}

#[test]
fn classes_and_unicode_literals() {
    sound(
        r"caf[eé] (au|du) lait",
        false,
        &["café au lait", "cafe du lait", "café de lait"],
    );
    sound(r"[a-c]{3}xyz", false, &["abcxyz", "ccaxyz"]);
    sound(r"\x{1F600}ok", false, &["\u{1F600}ok"]);
    sound(r"(?i)straße", false, &["STRASSE", "Straße", "STRAẞE"]);
}

#[test]
fn a_word_boundary_keeps_the_literal_it_bounds() {
    let query = plan(r"bulk_17\b", false);
    assert!(!query.is_all(), "{query:?}");
    assert!(!satisfied(&query, "fn bulk_18() {}"));
    assert!(satisfied(&query, "fn bulk_17() {}"));
}
