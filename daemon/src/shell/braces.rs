//! Bash's brace expansion (`{a,b}`, `{1..3}`, `x{,y}`), done on a word after quote removal so
//! that the analysis sees the words bash runs: `{id,}` runs `id`, `git push {--force,x}` passes
//! `--force`.

/// One character of a word after quote removal, and whether bash may treat it as syntax (it
/// came from unquoted text: a quoted or escaped `{` never opens a brace expansion).
pub(super) type Char = (char, bool);

/// More words than this and the expansion is not followed: the line is unreadable.
pub(super) const MAX_WORDS: usize = 256;

/// Why an expansion was not followed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TooMany;

/// The words bash makes of `word` by brace expansion, each with its syntax flags (so that a
/// `~` at the start of one can still be told from a quoted one); `None` when the word has no
/// brace expansion. Empty words are dropped, as bash drops unquoted empty words.
pub(super) fn expand(word: &[Char]) -> Result<Option<Vec<Vec<Char>>>, TooMany> {
    let Some((open, close, body)) = first_expansion(word) else {
        return Ok(None);
    };
    let prefix = &word[..open];
    let suffix = &word[close + 1..];
    let mut words = Vec::new();
    for alternative in body {
        let mut joined = prefix.to_vec();
        joined.extend_from_slice(&alternative);
        joined.extend_from_slice(suffix);
        // The rest of the word (and each alternative) may hold more expansions.
        match expand(&joined)? {
            Some(more) => words.extend(more),
            None => words.push(joined),
        }
        if words.len() > MAX_WORDS {
            return Err(TooMany);
        }
    }
    words.retain(|word| !word.is_empty());
    Ok(Some(words))
}

/// The first `{…}` bash expands: its braces' positions and its alternatives. A brace after `$`
/// is a parameter expansion; a body without a top-level `,` or a `..` sequence is literal.
fn first_expansion(word: &[Char]) -> Option<(usize, usize, Vec<Vec<Char>>)> {
    let mut start = 0;
    while let Some(offset) = word[start..].iter().position(|&c| c == ('{', true)) {
        let open = start + offset;
        start = open + 1;
        if open > 0 && word[open - 1] == ('$', true) {
            continue;
        }
        let Some(close) = matching_close(word, open) else {
            continue;
        };
        let body = &word[open + 1..close];
        let alternatives = split_top_level(body);
        if alternatives.len() > 1 {
            return Some((open, close, alternatives));
        }
        if let Some(sequence) = sequence(body) {
            return Some((open, close, sequence));
        }
    }
    None
}

fn matching_close(word: &[Char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (at, &c) in word.iter().enumerate().skip(open) {
        match c {
            ('{', true) => depth += 1,
            ('}', true) => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// The body split at its unquoted commas outside nested braces.
fn split_top_level(body: &[Char]) -> Vec<Vec<Char>> {
    let mut parts = vec![Vec::new()];
    let mut depth = 0usize;
    for &c in body {
        match c {
            ('{', true) => depth += 1,
            ('}', true) => depth = depth.saturating_sub(1),
            (',', true) if depth == 0 => {
                parts.push(Vec::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// `{1..5}`, `{05..10..2}`, `{a..e}`: the items, each quoted (a sequence makes no syntax).
fn sequence(body: &[Char]) -> Option<Vec<Vec<Char>>> {
    let text: String = body.iter().map(|&(c, _)| c).collect();
    let parts: Vec<&str> = text.split("..").collect();
    let (first, last, step) = match parts.as_slice() {
        [first, last] => (*first, *last, None),
        [first, last, step] => (*first, *last, Some(step.parse::<i64>().ok()?)),
        _ => return None,
    };
    let step = step.map_or(1, i64::unsigned_abs).max(1);
    let quoted = |text: String| text.chars().map(|c| (c, false)).collect::<Vec<Char>>();
    if let (Ok(from), Ok(to)) = (first.parse::<i64>(), last.parse::<i64>()) {
        let padded = |text: &str| text.trim_start_matches('-').starts_with('0') && text.len() > 1;
        let width = if padded(first) || padded(last) {
            first.len().max(last.len())
        } else {
            0
        };
        let count = from.abs_diff(to) / step + 1;
        if count > MAX_WORDS as u64 {
            // Too many to list: still a sequence of numbers, which makes no syntax; one item
            // stands for them all (the analysis only needs their shape).
            return Some(vec![quoted(format!("{from:0width$}"))]);
        }
        let items = (0..count)
            .map(|index| {
                let value = if from <= to {
                    from + (index * step) as i64
                } else {
                    from - (index * step) as i64
                };
                quoted(format!("{value:0width$}"))
            })
            .collect();
        return Some(items);
    }
    let (mut from, mut to) = (first.chars(), last.chars());
    let (Some(from), None, Some(to), None) = (from.next(), from.next(), to.next(), to.next())
    else {
        return None;
    };
    if !from.is_ascii_alphabetic() || !to.is_ascii_alphabetic() {
        return None;
    }
    let (low, high) = (from.min(to) as u8, from.max(to) as u8);
    let mut items: Vec<Vec<Char>> = (low..=high)
        .step_by(step as usize)
        .map(|byte| quoted((byte as char).to_string()))
        .collect();
    if from > to {
        items.reverse();
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unquoted(text: &str) -> Vec<Char> {
        text.chars().map(|c| (c, true)).collect()
    }

    fn words(text: &str) -> Option<Vec<String>> {
        expand(&unquoted(text)).unwrap().map(|words| {
            words
                .iter()
                .map(|w| w.iter().map(|&(c, _)| c).collect())
                .collect()
        })
    }

    #[test]
    fn lists_and_sequences_expand_as_bash_expands_them() {
        assert_eq!(words("{id,}").unwrap(), ["id"]);
        assert_eq!(words("{,id}").unwrap(), ["id"]);
        assert_eq!(words("{--force,x}").unwrap(), ["--force", "x"]);
        assert_eq!(words("a{b,c}d").unwrap(), ["abd", "acd"]);
        assert_eq!(words("{a,b}{c,d}").unwrap(), ["ac", "ad", "bc", "bd"]);
        assert_eq!(words("{a,{b,c}}").unwrap(), ["a", "b", "c"]);
        assert_eq!(words("x{,}").unwrap(), ["x", "x"]);
        assert_eq!(words("{1..3}").unwrap(), ["1", "2", "3"]);
        assert_eq!(words("{3..1}").unwrap(), ["3", "2", "1"]);
        assert_eq!(words("{01..03}").unwrap(), ["01", "02", "03"]);
        assert_eq!(words("{1..7..3}").unwrap(), ["1", "4", "7"]);
        assert_eq!(words("--forc{e..e}").unwrap(), ["--force"]);
        assert_eq!(words("{c..a}").unwrap(), ["c", "b", "a"]);
        assert_eq!(words("{~root,x}/f").unwrap(), ["~root/f", "x/f"]);
    }

    #[test]
    fn literal_braces_stay_literal() {
        for literal in [
            "{}", "{a}", "${a,b}", "{a", "a}", "{a..}", "{1..b}", "plain",
        ] {
            assert_eq!(words(literal), None, "{literal}");
        }
        let quoted: Vec<Char> = "{a,b}".chars().map(|c| (c, false)).collect();
        assert_eq!(expand(&quoted), Ok(None));
        // `{a\,b}`: an escaped comma separates nothing.
        let escaped = vec![
            ('{', true),
            ('a', true),
            (',', false),
            ('b', true),
            ('}', true),
        ];
        assert_eq!(expand(&escaped), Ok(None));
    }

    #[test]
    fn expansions_past_the_limit_are_refused() {
        assert_eq!(
            expand(&unquoted("{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}")),
            Err(TooMany)
        );
    }
}
