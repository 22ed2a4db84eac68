//! The trigram query planner: a regex, parsed as `search_code`'s matcher parses it, becomes a
//! boolean query over trigrams (three consecutive bytes) that every file holding a match
//! satisfies. A file whose trigrams fail the query cannot match and need not be read.
//!
//! Built on regex-syntax's HIR and its literal extraction, as ripgrep's prefilters are: every
//! match starts with one of the extracted prefix literals and ends with one of the suffix
//! literals, so it contains each trigram of one of them; and a match of a concatenation holds
//! a match of each part, of an alternation a match of one branch, of a repetition at least
//! once a match of what is repeated. Each of these facts is a query the file must satisfy;
//! the plan is their conjunction. Anything the planner cannot bound (a literal shorter than
//! three bytes, an infinite literal set, a pattern it cannot parse) is [`Query::All`]: the
//! file is read. Soundness is the only promise: no file holding a match is ever excluded
//! (`fuzz/fuzz_targets/trigram_plan.rs` checks it on random regexes and files).

use regex_syntax::ParserBuilder;
use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
use regex_syntax::hir::{Hir, HirKind};

/// Three consecutive bytes of a file (what the searcher reads of it).
pub type Trigram = [u8; 3];

/// What a file's trigrams must satisfy for it to possibly hold a match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Query {
    /// Every file: nothing narrows the search.
    All,
    /// Files that contain this trigram.
    Trigram(Trigram),
    /// Files that satisfy every part.
    And(Vec<Query>),
    /// Files that satisfy at least one part.
    Or(Vec<Query>),
}

impl Query {
    /// Whether a file whose trigrams are those `has` says it has satisfies the query.
    pub fn matches(&self, has: &impl Fn(Trigram) -> bool) -> bool {
        match self {
            Query::All => true,
            Query::Trigram(trigram) => has(*trigram),
            Query::And(parts) => parts.iter().all(|part| part.matches(has)),
            Query::Or(parts) => parts.iter().any(|part| part.matches(has)),
        }
    }

    #[cfg(test)]
    /// Whether the query narrows nothing.
    pub(crate) fn is_all(&self) -> bool {
        *self == Query::All
    }

    /// `All` parts dropped from a conjunction, nested conjunctions flattened, a conjunction of
    /// one part made that part.
    fn and(parts: Vec<Query>) -> Query {
        let mut flat = Vec::new();
        for part in parts {
            match part {
                Query::All => {}
                Query::And(inner) => flat.extend(inner),
                other => flat.push(other),
            }
        }
        Self::joined(flat, Query::And)
    }

    /// A disjunction with an `All` part is `All`; nested ones flattened; one part is itself.
    fn or(parts: Vec<Query>) -> Query {
        let mut flat = Vec::new();
        for part in parts {
            match part {
                Query::All => return Query::All,
                Query::Or(inner) => flat.extend(inner),
                other => flat.push(other),
            }
        }
        Self::joined(flat, Query::Or)
    }

    /// Flattened parts, deduplicated, joined by `join`; none is `All`, one is itself.
    fn joined(mut parts: Vec<Query>, join: fn(Vec<Query>) -> Query) -> Query {
        parts.sort_by_key(query_order);
        parts.dedup();
        match parts.len() {
            0 => Query::All,
            1 => parts.pop().unwrap_or(Query::All),
            _ => join(parts),
        }
    }
}

/// A stable order for deduplication: trigrams first, by bytes.
fn query_order(query: &Query) -> (u8, Trigram) {
    match query {
        Query::Trigram(trigram) => (0, *trigram),
        Query::All => (1, [0; 3]),
        Query::And(_) => (2, [0; 3]),
        Query::Or(_) => (3, [0; 3]),
    }
}

/// The query every file holding a match of `pattern` satisfies, the pattern read as
/// `search_code` reads it (Unicode, `case_insensitive` as the call asks). `All` when it
/// cannot be narrowed, or the pattern does not parse here.
pub fn plan(pattern: &str, case_insensitive: bool) -> Query {
    let parsed = ParserBuilder::new()
        .case_insensitive(case_insensitive)
        .utf8(false)
        .build()
        .parse(pattern);
    match parsed {
        Ok(hir) => query_of(&hir, MAX_DEPTH),
        Err(_) => Query::All,
    }
}

/// How deep the structural walk goes; below, only the literal extraction of a node counts.
const MAX_DEPTH: usize = 64;

/// What every match of `hir` contains.
fn query_of(hir: &Hir, depth: usize) -> Query {
    let mut parts = vec![
        literals_query(&extract(hir, ExtractKind::Prefix)),
        literals_query(&extract(hir, ExtractKind::Suffix)),
    ];
    if depth > 0 {
        match hir.kind() {
            HirKind::Concat(children) => {
                parts.extend(children.iter().map(|child| query_of(child, depth - 1)));
            }
            HirKind::Alternation(branches) => {
                parts.push(Query::or(
                    branches
                        .iter()
                        .map(|branch| query_of(branch, depth - 1))
                        .collect(),
                ));
            }
            HirKind::Repetition(repetition) if repetition.min >= 1 => {
                parts.push(query_of(&repetition.sub, depth - 1));
            }
            HirKind::Capture(capture) => parts.push(query_of(&capture.sub, depth - 1)),
            _ => {}
        }
    }
    Query::and(parts)
}

fn extract(hir: &Hir, kind: ExtractKind) -> Seq {
    let mut extractor = Extractor::new();
    extractor.kind(kind);
    extractor.extract(hir)
}

/// One of the literals occurs in every match (as its prefix, or its suffix): the disjunction,
/// over the literals, of all their trigrams. `All` when the set is infinite or a literal is
/// shorter than a trigram.
fn literals_query(seq: &Seq) -> Query {
    let Some(literals) = seq.literals() else {
        return Query::All;
    };
    if literals.is_empty() {
        // No literal at all: the expression matches nothing. Every file is still "possible"
        // as far as this fact goes; the searcher finds nothing.
        return Query::All;
    }
    let mut branches = Vec::with_capacity(literals.len());
    for literal in literals {
        let bytes = literal.as_bytes();
        if bytes.len() < 3 {
            return Query::All;
        }
        branches.push(Query::and(
            bytes
                .windows(3)
                .map(|window| Query::Trigram([window[0], window[1], window[2]]))
                .collect(),
        ));
    }
    Query::or(branches)
}

/// Every trigram of `bytes`, in order, repeats included.
pub fn trigrams(bytes: &[u8]) -> impl Iterator<Item = Trigram> + '_ {
    bytes
        .windows(3)
        .map(|window| [window[0], window[1], window[2]])
}

#[cfg(test)]
mod tests;
