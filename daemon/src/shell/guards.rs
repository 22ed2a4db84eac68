//! The guards before the shell parser: which lines it is not given (too long, brackets nested
//! too deep, too many here-documents, shapes it has taken exponential time on), and how many
//! substitutions a line holds, counted from its text alone.

/// Lines the parser is not given (brush-parser takes exponential time on deeply nested
/// parentheses and array subscripts, and unbounded memory on some here-documents, found by
/// fuzzing): longer than this, nesting brackets deeper than this, or with more here-documents
/// than this. Brackets are counted inside quotes too: a guard that misread quoting would let
/// the slow shapes through. Eight levels cost the parser milliseconds at most; each level more
/// multiplies that by up to ten (`${a[${a[${a[${a[${a[${a[${a[` takes minutes).
pub(super) const MAX_LINE_BYTES: usize = 64 * 1024;
const MAX_BRACKET_DEPTH: usize = 8;
pub(super) const MAX_HERE_DOCUMENTS: usize = 16;

/// How many substitutions bash runs in a line, counted from its text alone, without the
/// parser: `$(…)` (and a `$((` whose parentheses do not close as `))`, which bash reads as a
/// command substitution), backquoted ones, `<(…)` and `>(…)`, outside single quotes, `$'…'`
/// and comments; and a `((` that does not close as `))` (subshells to bash, which the parser
/// never counts as a substitution, so such a line is always unreadable). Rough in the safe
/// direction only (a count too high makes the line ask): a line with a here-document ignores
/// quoting, since quotes in a body quote nothing.
pub(super) fn substitutions_in(line: &str) -> usize {
    #[derive(Clone, Copy, PartialEq)]
    enum Context {
        Plain,
        Single,
        AnsiC,
        Double,
        Comment,
    }
    let honour_quotes = !line.contains("<<");
    let bytes = line.as_bytes();
    let (mut count, mut in_backquotes) = (0, false);
    let mut context = Context::Plain;
    let mut at = 0;
    while at < bytes.len() {
        let (byte, next) = (bytes[at], bytes.get(at + 1).copied());
        match context {
            Context::Single if byte == b'\'' => context = Context::Plain,
            Context::AnsiC if byte == b'\\' => at += 1,
            Context::AnsiC if byte == b'\'' => context = Context::Plain,
            Context::Comment if byte == b'\n' => context = Context::Plain,
            Context::Single | Context::AnsiC | Context::Comment => {}
            Context::Plain | Context::Double => match (byte, next) {
                (b'\\', _) => at += 1,
                // `$$` is the shell's pid; a `(` right after it is a syntax error.
                (b'$', Some(b'$')) => at += 1,
                (b'`', _) => {
                    count += usize::from(!in_backquotes);
                    in_backquotes = !in_backquotes;
                }
                (b'$', Some(b'(')) => {
                    if bytes.get(at + 2) == Some(&b'(') && arithmetic_closes(&bytes[at + 3..]) {
                        // Arithmetic: what is inside is scanned on.
                        at += 2;
                    } else {
                        count += 1;
                        at += 1;
                    }
                }
                (b'<' | b'>', Some(b'(')) if context == Context::Plain => {
                    count += 1;
                    at += 1;
                }
                // `((…) )`: not an arithmetic command to bash but subshells, which the parser
                // has read as arithmetic (and dropped what did not fit).
                (b'(', Some(b'(')) if context == Context::Plain => {
                    count += usize::from(!arithmetic_closes(&bytes[at + 2..]));
                    at += 1;
                }
                (b'$', Some(b'\'')) if honour_quotes && context == Context::Plain => {
                    context = Context::AnsiC;
                    at += 1;
                }
                (b'\'', _) if honour_quotes && context == Context::Plain => {
                    context = Context::Single
                }
                (b'"', _) if honour_quotes => {
                    context = if context == Context::Double {
                        Context::Plain
                    } else {
                        Context::Double
                    };
                }
                (b'#', _) if context == Context::Plain => {
                    let starts_word = at == 0
                        || matches!(
                            bytes[at - 1],
                            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')'
                        );
                    if starts_word {
                        context = Context::Comment;
                    }
                }
                _ => {}
            },
        }
        at += 1;
    }
    count
}

/// Whether every `)` closes a `(` before it, and every `(` is closed.
pub(super) fn parentheses_balance(text: &str) -> bool {
    let mut depth = 0usize;
    for byte in text.bytes() {
        match byte {
            b'(' => depth += 1,
            b')' if depth == 0 => return false,
            b')' => depth -= 1,
            _ => {}
        }
    }
    depth == 0
}

/// Whether an arithmetic expansion's text (after `$((`) closes with `))` at its own level, as
/// bash requires; otherwise bash reads the `$((` as a command substitution of a subshell.
fn arithmetic_closes(rest: &[u8]) -> bool {
    let mut depth = 0usize;
    for (at, &byte) in rest.iter().enumerate() {
        match byte {
            b'(' => depth += 1,
            b')' if depth == 0 => return rest.get(at + 1) == Some(&b')'),
            b')' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// Whether a line may be given to the parser at all; why not.
pub(super) fn parsable(line: &str) -> Result<(), String> {
    if line.len() > MAX_LINE_BYTES {
        return Err(format!("it is longer than {MAX_LINE_BYTES} bytes"));
    }
    if line.contains('\0') {
        return Err("it contains a NUL byte".to_owned());
    }
    // bash marks quoting inside its words with two bytes of its own, CTLESC (0x01) and CTLNUL
    // (0x7f), and takes them in the input for its marks: a word of 0x7f alone is the empty
    // string to bash (`echo hi >& \x7f` opens "" for writing) and the named file to the parser
    // (found by fuzzing). No real line holds either byte.
    if line.contains(['\u{1}', '\u{7f}']) {
        return Err("it contains a byte bash uses to mark quoting (0x01 or 0x7f)".to_owned());
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for byte in line.bytes() {
        match byte {
            b'(' | b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_BRACKET_DEPTH {
        return Err(format!("it nests brackets deeper than {MAX_BRACKET_DEPTH}"));
    }
    // brush-parser reads `( (` as the `((` of arithmetic; to bash it is two subshells, and
    // `( (1>~/9))` runs a command `1` writing `~/9`. Nobody needs the blank there.
    if nested_subshells_spaced(line) {
        return Err("a `( (` that the parser reads as arithmetic and bash as subshells".to_owned());
    }
    // brush-parser keeps `<(…)`/`>(…)` inside `${…}` as text, and bash runs it.
    if process_substitution_in_parameter_expansion(line) {
        return Err("a process substitution inside a parameter expansion".to_owned());
    }
    // brush-parser unwraps a redirection's descriptor number into an integer and panics when
    // it does not fit: no real descriptor has ten digits.
    let bytes = line.as_bytes();
    let mut digits = 0;
    for &byte in bytes {
        if byte.is_ascii_digit() {
            digits += 1;
            continue;
        }
        if digits > 9 && matches!(byte, b'<' | b'>') {
            return Err("a file descriptor number out of range".to_owned());
        }
        digits = 0;
    }
    if line.matches("<<").count() > MAX_HERE_DOCUMENTS {
        return Err(format!(
            "it has more than {MAX_HERE_DOCUMENTS} here-documents"
        ));
    }
    // In a here-document, bash joins a line that ends in a backslash with the next before it
    // compares it with the delimiter (`E\⏎OF` closes `<<EOF`) and before it finds `$\⏎(…)`;
    // the parser reads both as body text, and the lines that follow as body or commands unlike
    // bash. No real here-document needs that (here-strings count too: rough in the safe
    // direction).
    if line.contains("<<") && line.contains("\\\n") {
        return Err("a line continuation in a line with a here-document".to_owned());
    }
    // Here-document delimiters are plain words in real lines; brush-parser fails on others
    // (found by fuzzing): one holding an expansion (`<<x$(`) or leaving a quote open into the
    // next lines (`$(<<c"` … `$[""]"`) sends its memory without bound, an empty one (`<<""`)
    // loops forever when the line ends in a comment (`cat <<"" | wc #`), and so does a blank
    // or missing one (`<<\r x&&`, `<<- #x`), allocating as it goes. A here-document must also
    // end: bash reads an unterminated one to the end of the input, and the parser's memory
    // runs away on some.
    let mut from = 0;
    while let Some(found) = line[from..].find("<<") {
        let at = from + found;
        let after = &line[at + 2..];
        if after.starts_with('<') {
            // `<<<`: a here-string, whose word is an ordinary (expandable) word. Operators are
            // read longest first, so `<<<<<` is a here-string and then a here-document.
            from = at + 3;
            continue;
        }
        from = at + 2;
        // Blanks are spaces and tabs: for the parser, a carriage return is part of the word.
        let rest = after
            .trim_start_matches('-')
            .trim_start_matches([' ', '\t']);
        let Some(delimiter) = here_document_delimiter(rest) else {
            return Err("a here-document delimiter leaves a quote open".to_owned());
        };
        if delimiter.contains(['$', '`']) {
            return Err("a here-document delimiter holds an expansion".to_owned());
        }
        if delimiter.chars().all(|c| matches!(c, '"' | '\'')) || delimiter.starts_with('#') {
            // `#` starts a comment: the here-document has no delimiter at all.
            return Err("a here-document delimiter is empty or blank".to_owned());
        }
        // A here-document whose closing line never comes (inside a substitution especially:
        // `$(r <<- e`) sends the parser's memory without bound; a real one ends.
        let tag: String = delimiter
            .chars()
            .filter(|c| !matches!(c, '"' | '\'' | '\\'))
            .collect();
        let strip_tabs = after.starts_with('-');
        let closes = after.split('\n').skip(1).any(|body_line| {
            let body_line = if strip_tabs {
                body_line.trim_start_matches('\t')
            } else {
                body_line
            };
            body_line == tag
        });
        if !closes {
            return Err(format!("the here-document {tag} has no closing line"));
        }
    }
    Ok(())
}

/// Whether an opening parenthesis is followed, after blanks or newlines, by another (`( (`),
/// anywhere in the line, quotes ignored (rough in the safe direction).
fn nested_subshells_spaced(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.iter().enumerate().any(|(at, &byte)| {
        if byte != b'(' {
            return false;
        }
        let rest = &bytes[at + 1..];
        let blanks = rest
            .iter()
            .take_while(|next| matches!(next, b' ' | b'\t' | b'\n'))
            .count();
        blanks > 0 && rest.get(blanks) == Some(&b'(')
    })
}

/// The here-document delimiter word at the start of `rest`: up to the first whitespace or
/// operator outside quotes. `None` when a quote is still open at the end of its line.
fn here_document_delimiter(rest: &str) -> Option<&str> {
    let mut open_quote = None;
    for (at, c) in rest.char_indices() {
        match open_quote {
            Some(quote) if c == quote => open_quote = None,
            Some(_) if c == '\n' => return None,
            Some(_) => {}
            None if matches!(c, '"' | '\'') => open_quote = Some(c),
            None if c.is_whitespace() || "&|;<>()".contains(c) => return Some(&rest[..at]),
            None => {}
        }
    }
    open_quote.is_none().then_some(rest)
}

/// Whether `<(` or `>(` appears inside a `${…}` (outside single quotes around the expansion).
/// Rough on purpose: a false alarm only makes the line ask.
fn process_substitution_in_parameter_expansion(line: &str) -> bool {
    let bytes = line.as_bytes();
    let (mut depth, mut single_quoted) = (0usize, false);
    let mut index = 0;
    while index < bytes.len() {
        match (bytes[index], bytes.get(index + 1)) {
            (b'\\', _) => index += 1,
            (b'\'', _) if depth == 0 => single_quoted = !single_quoted,
            (b'$', Some(b'{')) if !single_quoted => {
                depth += 1;
                index += 1;
            }
            (b'}', _) if depth > 0 => depth -= 1,
            (b'<' | b'>', Some(b'(')) if depth > 0 => return true,
            _ => {}
        }
        index += 1;
    }
    false
}
