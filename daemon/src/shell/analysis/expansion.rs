//! Word expansion as bash does it: quotes removed, `$'…'` decoded, brace expansion followed,
//! and every substitution, parameter expansion and arithmetic inside a word looked into.
//!
//! A word whose value is only known when the line runs is marked `dynamic`, never guessed.

use brush_parser::ParserOptions;
use brush_parser::ast;
use brush_parser::word::{
    self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource,
};

use crate::shell::braces;

use super::{Nested, PARSER_PANICKED, Walker};

impl Walker<'_> {
    /// Expands a word's quoting and looks inside its substitutions.
    pub(super) fn expand_word(&mut self, raw: &str) -> Expanded {
        let unknown = Expanded::unknown();
        match std::panic::catch_unwind(|| word::parse(raw, &ParserOptions::default())) {
            Ok(Ok(pieces)) => self.expand_pieces(raw, &pieces),
            Ok(Err(_)) => {
                self.opaque("a word the parser cannot read");
                unknown
            }
            Err(_) => {
                self.unreadable(PARSER_PANICKED.to_owned());
                unknown
            }
        }
    }

    pub(super) fn expand_pieces(&mut self, raw: &str, pieces: &[WordPieceWithSource]) -> Expanded {
        let mut text = String::new();
        let mut dynamic = false;
        let mut unquoted = Vec::new();
        for piece in pieces {
            match &piece.piece {
                WordPiece::Text(part) => {
                    let start = text.len();
                    text.push_str(part);
                    unquoted.push(start..text.len());
                }
                WordPiece::SingleQuotedText(part) => text.push_str(part),
                WordPiece::AnsiCQuotedText(part) => {
                    if part.contains('\\') {
                        dynamic = true;
                        text.push_str(&ansi_c_decoded(part));
                    } else {
                        text.push_str(part);
                    }
                }
                WordPiece::EscapeSequence(escape) => {
                    text.push_str(escape.strip_prefix('\\').unwrap_or(escape))
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    let inner = self.expand_pieces(raw, inner);
                    dynamic |= inner.dynamic;
                    text.push_str(inner.text.as_deref().unwrap_or("$?"));
                }
                WordPiece::TildeExpansion(_) => {
                    let source = source_of(raw, piece);
                    if source != "~" {
                        // Another user's home (`~root`), `$PWD` (`~+`), `$OLDPWD` (`~-`), the
                        // directory stack (`~1`): where it points is only known when it runs.
                        self.opaque("a `~user`, `~+` or `~-` path");
                        dynamic = true;
                    }
                    let start = text.len();
                    text.push_str(source);
                    unquoted.push(start..text.len());
                }
                WordPiece::ParameterExpansion(expr) => {
                    dynamic = true;
                    if let Some(why) = evaluates_data_as_code(expr) {
                        self.opaque(why);
                    }
                    if matches!(expr, ParameterExpr::AssignDefaultValues { .. }) {
                        // `${CDPATH:=/elsewhere}` changes what later commands do, unseen by
                        // the rules that a bare assignment would have to pass.
                        self.opaque("an assignment inside an expansion (`${x:=value}`)");
                    }
                    let source = source_of(raw, piece);
                    text.push_str(source);
                    // `${x:-$(cmd)}` runs cmd: follow any substitution inside.
                    if let Some(start) = source.find("$(").or_else(|| source.find('`')) {
                        let inner = source[start..]
                            .strip_suffix('}')
                            .unwrap_or(&source[start..]);
                        self.expand_word(inner);
                    }
                }
                WordPiece::CommandSubstitution(line)
                | WordPiece::BackquotedCommandSubstitution(line) => {
                    *self.substitutions_seen += 1;
                    dynamic = true;
                    text.push_str(source_of(raw, piece));
                    self.walk_nested(line, Nested::Body, "a command substitution");
                }
                WordPiece::ArithmeticExpression(expr) => {
                    dynamic = true;
                    text.push_str(source_of(raw, piece));
                    self.walk_arithmetic(&expr.value);
                }
            }
        }
        // Old-style `$[ … ]` arithmetic is not parsed as such; bash still evaluates it.
        if raw.contains("$[") {
            self.opaque("arithmetic on variables or substitutions");
        }
        if let Some(why) = unplaced_tilde(&text, &unquoted) {
            self.opaque(why);
            dynamic = true;
        }
        Expanded {
            text: Some(text),
            dynamic,
            unquoted,
        }
    }

    /// A word bash splits by brace expansion (a command's word, a redirection's target): the
    /// words it makes, each judged as bash will see it. A brace expansion is opaque for allow
    /// rules (the analysis follows it, but it is no form a rule is written for); deny and ask
    /// rules see every word it makes.
    pub(super) fn expand_split_word(&mut self, raw: &str) -> Vec<Expanded> {
        let word = self.expand_word(raw);
        let Some(text) = word.text.as_deref() else {
            return vec![word];
        };
        if !word
            .unquoted
            .iter()
            .any(|range| text[range.clone()].contains('{'))
        {
            return vec![word];
        }
        let chars: Vec<braces::Char> = text
            .char_indices()
            .map(|(at, c)| (c, word.unquoted.iter().any(|range| range.contains(&at))))
            .collect();
        match braces::expand(&chars) {
            Ok(None) => vec![word],
            Ok(Some(words)) => {
                self.opaque("a brace expansion");
                words
                    .into_iter()
                    .map(|chars| {
                        let text: String = chars.iter().map(|&(c, _)| c).collect();
                        let mut dynamic = word.dynamic;
                        // Tilde expansion comes after brace expansion: `{~root,x}/f`.
                        if chars.first() == Some(&('~', true))
                            && text != "~"
                            && !text.starts_with("~/")
                        {
                            self.opaque("a `~user`, `~+` or `~-` path");
                            dynamic = true;
                        }
                        Expanded {
                            text: Some(text),
                            dynamic,
                            unquoted: Vec::new(),
                        }
                    })
                    .collect()
            }
            Err(braces::TooMany) => {
                self.unreadable(format!(
                    "a brace expansion of more than {} words",
                    braces::MAX_WORDS
                ));
                vec![Expanded::unknown()]
            }
        }
    }

    /// A redirection's target: brace expansion to anything but one word is an error in bash
    /// (nothing is opened), and the analysis does not guess which.
    pub(super) fn expand_target(&mut self, raw: &str) -> Expanded {
        let mut words = self.expand_split_word(raw);
        if words.len() != 1 {
            return Expanded::unknown();
        }
        let mut word = words.pop().unwrap_or_else(Expanded::unknown);
        // Bash expands an unquoted glob in a redirection target to the one file it matches
        // (`> l*` writes through the symlink `link`): where it writes is only known then.
        if let Some(text) = &word.text
            && word
                .unquoted
                .iter()
                .any(|range| has_glob(&text[range.clone()]))
        {
            self.opaque("a redirection target with a glob, which bash expands to a file");
            word.dynamic = true;
        }
        word
    }
}

/// A word after quote removal; `dynamic` when its value is only known at run time.
#[derive(Default)]
pub(super) struct Expanded {
    pub(super) text: Option<String>,
    pub(super) dynamic: bool,
    /// The byte ranges of `text` that were unquoted text, where bash still sees syntax
    /// (brace expansion).
    pub(super) unquoted: Vec<std::ops::Range<usize>>,
}

impl Expanded {
    /// A word only known when the line runs.
    pub(super) fn unknown() -> Self {
        Self {
            text: None,
            dynamic: true,
            unquoted: Vec::new(),
        }
    }

    /// A path taken from a command's argument (a wrapper's `-o F`, `tee F`). Bash expanded any
    /// glob in the word, and whether a glob character was quoted is no longer known; an
    /// expansion in it (`$HOME`, kept as written) is only known when it runs: either makes the
    /// path computed, as does `computed` (the word's own flag, where the caller has it).
    pub(super) fn from_argument(path: String, computed: bool) -> Self {
        Self {
            dynamic: computed || has_glob(&path) || path.contains(['$', '`']),
            ..Self::literal(path)
        }
    }

    /// A word known now, all of it quoted.
    fn literal(text: String) -> Self {
        Self {
            text: Some(text),
            ..Self::default()
        }
    }
}

/// Why a parameter expansion makes bash evaluate a variable's *value* as code, if it does:
/// indirection (`${!x}` with `x='a[$(cmd)]'`), prompt expansion (`${x@P}` runs `$(…)` in the
/// value), and arithmetic on names (a subscript `${a[i]}` or a substring offset `${x:i}`, where
/// `i`'s value may hold a subscript that runs commands). Such an expansion is opaque.
fn evaluates_data_as_code(expr: &ParameterExpr) -> Option<&'static str> {
    let (parameter, indirect) = match expr {
        ParameterExpr::Parameter {
            parameter,
            indirect,
        }
        | ParameterExpr::UseDefaultValues {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::AssignDefaultValues {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::IndicateErrorIfNullOrUnset {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::UseAlternativeValue {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::ParameterLength {
            parameter,
            indirect,
        }
        | ParameterExpr::RemoveSmallestSuffixPattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::RemoveLargestSuffixPattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::RemoveSmallestPrefixPattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::RemoveLargestPrefixPattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::UppercaseFirstChar {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::UppercasePattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::LowercaseFirstChar {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::LowercasePattern {
            parameter,
            indirect,
            ..
        }
        | ParameterExpr::ReplaceSubstring {
            parameter,
            indirect,
            ..
        } => (parameter, *indirect),
        ParameterExpr::Substring {
            parameter,
            indirect,
            offset,
            length,
        } => {
            let numeric = |expr: &ast::UnexpandedArithmeticExpr| is_number(&expr.value);
            if !numeric(offset) || length.as_ref().is_some_and(|length| !numeric(length)) {
                return Some("a substring offset that is not a number, which bash evaluates");
            }
            (parameter, *indirect)
        }
        ParameterExpr::Transform {
            parameter,
            indirect,
            op,
        } => {
            if matches!(op, ParameterTransformOp::PromptExpand) {
                return Some("a `${x@P}` expansion, which runs the commands in the value");
            }
            (parameter, *indirect)
        }
        // `${!prefix*}` and `${!array[@]}` list names and keys: no value is evaluated.
        ParameterExpr::VariableNames { .. } | ParameterExpr::MemberKeys { .. } => return None,
    };
    if indirect {
        return Some("an indirect expansion `${!x}`, which evaluates the value as a name");
    }
    match parameter {
        Parameter::NamedWithIndex { index, .. } if !is_number(index) => {
            Some("an array subscript that is not a number, which bash evaluates")
        }
        _ => None,
    }
}

/// Whether arithmetic text is a plain integer (a sign and digits), which evaluates nothing.
fn is_number(text: &str) -> bool {
    let text = text.trim();
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text).trim_start();
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The text of `$'…'` as bash decodes it (`\x72m` is `rm`), so that deny rules see the
/// program that runs; the word stays computed, since a decoder is never sure to agree with
/// bash's in every corner.
fn ansi_c_decoded(quoted: &str) -> String {
    let mut out = String::new();
    let mut chars = quoted.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escape) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut number = |radix: u32, max: usize, first: Option<char>| {
            let mut digits: String = first.into_iter().collect();
            while digits.len() < max
                && let Some(&next) = chars.peek()
                && next.is_digit(radix)
            {
                digits.push(next);
                chars.next();
            }
            u32::from_str_radix(&digits, radix)
                .ok()
                .and_then(char::from_u32)
        };
        let decoded = match escape {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(escape),
            '0'..='7' => number(8, 3, Some(escape)),
            'x' => number(16, 2, None),
            'u' => number(16, 4, None),
            'U' => number(16, 8, None),
            'c' => chars.next().map(|c| ((c as u8) & 0x1f) as char),
            other => {
                out.push('\\');
                Some(other)
            }
        };
        match decoded {
            // A NUL ends the string in bash.
            Some('\0') => break,
            Some(c) => out.push(c),
            None => {}
        }
    }
    out
}

fn source_of<'a>(raw: &'a str, piece: &WordPieceWithSource) -> &'a str {
    raw.get(piece.start_index..piece.end_index).unwrap_or(raw)
}

/// What a word whose value is only known at run time stands as in a command's forms.
pub(super) const COMPUTED: &str = "$?";

pub(super) fn has_glob(name: &str) -> bool {
    name.contains(['*', '?', '['])
}

/// Why bash would expand a `~` in this word to a place the analysis does not see, if it would.
/// `unquoted` are the ranges of `text` that were not quoted. Bash ends a word's leading tilde
/// prefix at the first unquoted `/` *or* `:` (`~:x` is `$HOME:x`, a sibling of the home
/// directory, and `~root:x` is `/root:x`); and in a word shaped like an assignment (`a=~/x`,
/// `a+=~/x`, `a[1]=~/x`; an argument or a redirection target alike) it expands a `~` after the
/// `=` and after each unquoted `:`. The analysis places only `~` and `~/…`.
fn unplaced_tilde(text: &str, unquoted: &[std::ops::Range<usize>]) -> Option<&'static str> {
    let free = |at: usize| unquoted.iter().any(|range| range.contains(&at));
    if text.starts_with('~') && free(0) {
        let end = text
            .char_indices()
            .skip(1)
            .find(|&(at, c)| (c == '/' || c == ':') && free(at))
            .map_or(text.len(), |(at, _)| at);
        if end > 1 {
            return Some("a `~user`, `~+` or `~-` path");
        }
        if text[end..].starts_with(':') {
            return Some("a `~` before a colon, which bash expands to the home directory");
        }
    }
    let equals = text.find('=')?;
    // `NAME=`, `NAME+=`, `NAME[subscript]=` and `NAME[subscript]+=` alike.
    let target = text[..equals].strip_suffix('+').unwrap_or(&text[..equals]);
    let name = match target.split_once('[') {
        Some((name, subscript)) if subscript.ends_with(']') => name,
        _ => target,
    };
    let shaped_like_an_assignment = name
        .chars()
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && (0..name.len()).all(free)
        && free(equals);
    if !shaped_like_an_assignment {
        return None;
    }
    let expanded = text.char_indices().skip(equals + 1).any(|(at, c)| {
        c == '~' && free(at) && (at == equals + 1 || (text[..at].ends_with(':') && free(at - 1)))
    });
    expanded.then_some("a `~` in a word shaped like an assignment, which bash expands")
}
