//! Text from the daemon or the model made safe to show a person: control characters, escape
//! sequences and invisible Unicode (format, bidi and zero-width characters) written as visible
//! escapes, so that nothing a call carries can move the cursor, clear the screen, restyle, or
//! reorder what the terminal shows, least of all an approval prompt.

use std::borrow::Cow;

/// Written before each prompt: ends any string sequence (OSC, DCS, APC) a terminal may still
/// be collecting and resets every style (colours, concealed text), so that the prompt looks
/// as toold draws it whatever was on the terminal before.
pub const RESET_BEFORE_PROMPT: &str = "\x1b\\\x1b[0m";

/// Blanks shown as they are; a longer run is shown as `⟨N blanks⟩`, so that padding cannot
/// push a command's start off the screen or fake the start of a line where the terminal wraps.
/// Any blank counts: spaces, ideographic and other Unicode spaces, the braille blank.
const BLANK_RUN_SHOWN: usize = 8;

fn is_blank(c: char) -> bool {
    (c.is_whitespace() && !c.is_control()) || c == '\u{2800}'
}

/// One field on one line (an id, a reason, a title, a path, JSON): every control character,
/// newlines and tabs included, is escaped, and long runs of blanks are counted.
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, Shape::Line)
}

/// Text that keeps its lines (a file's content, a command's output, an error): newlines and
/// tabs stay, every other control character and invisible character is escaped.
pub fn block(text: &str) -> Cow<'_, str> {
    escape(text, Shape::Block)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Line,
    Block,
}

fn escape(text: &str, shape: Shape) -> Cow<'_, str> {
    let needs_work = text.chars().any(|c| is_hidden(c, shape))
        || (shape == Shape::Line && has_long_blank_run(text));
    if !needs_work {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 16);
    let mut blanks = String::new();
    for c in text.chars() {
        if shape == Shape::Line && is_blank(c) && !is_hidden(c, shape) {
            blanks.push(c);
            continue;
        }
        push_blanks(&mut shown, &mut blanks);
        if is_hidden(c, shape) {
            push_escaped(&mut shown, c);
        } else {
            shown.push(c);
        }
    }
    push_blanks(&mut shown, &mut blanks);
    Cow::Owned(shown)
}

fn has_long_blank_run(text: &str) -> bool {
    let mut run = 0;
    text.chars().any(|c| {
        run = if is_blank(c) { run + 1 } else { 0 };
        run > BLANK_RUN_SHOWN
    })
}

fn push_blanks(shown: &mut String, blanks: &mut String) {
    let count = blanks.chars().count();
    if count > BLANK_RUN_SHOWN {
        shown.push_str(&format!("⟨{count} blanks⟩"));
    } else {
        shown.push_str(blanks);
    }
    blanks.clear();
}

fn push_escaped(shown: &mut String, c: char) {
    match c {
        '\n' => shown.push_str("\\n"),
        '\r' => shown.push_str("\\r"),
        '\t' => shown.push_str("\\t"),
        '\x1b' => shown.push_str("\\e"),
        c if u32::from(c) <= 0xff => shown.push_str(&format!("\\x{:02x}", u32::from(c))),
        c => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
    }
}

/// Whether `c` would act on the terminal or hide itself instead of showing: C0 and C1
/// controls and DEL (all of them in a line; all but newline and tab in a block), and the
/// Unicode characters that draw nothing yet change or hide what is drawn — bidi embeddings,
/// overrides, isolates and marks, zero-width spaces and joiners, invisible operators, fillers,
/// variation selectors, line and paragraph separators, interlinear annotations and tags.
fn is_hidden(c: char, shape: Shape) -> bool {
    if c.is_control() {
        return shape == Shape::Line || !matches!(c, '\n' | '\t');
    }
    matches!(c,
        '\u{00ad}'
        | '\u{034f}'
        | '\u{0600}'..='\u{0605}'
        | '\u{061c}'
        | '\u{06dd}'
        | '\u{070f}'
        | '\u{0890}'..='\u{0891}'
        | '\u{08e2}'
        | '\u{115f}'..='\u{1160}'
        | '\u{17b4}'..='\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{3164}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{feff}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fffb}'
        | '\u{110bd}'
        | '\u{110cd}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(line("rm -rf build"), Cow::Borrowed(_)));
        assert!(matches!(block("a\n\tb\n"), Cow::Borrowed(_)));
        assert!(matches!(line("naïve ✓ 日本"), Cow::Borrowed(_)));
    }

    #[test]
    fn controls_and_escape_sequences_are_shown() {
        assert_eq!(
            line("rm -rf victim #\x1b[2J\x1b[H\rls -la"),
            "rm -rf victim #\\e[2J\\e[H\\rls -la"
        );
        assert_eq!(line("a\nb\tc\x7f\u{9b}"), "a\\nb\\tc\\x7f\\x9b");
        assert_eq!(block("a\nb\tc\r\x1b]0;t\x07"), "a\nb\tc\\r\\e]0;t\\x07");
    }

    #[test]
    fn invisible_unicode_is_shown() {
        assert_eq!(line("rm \u{202e}fl.txt"), "rm \\u{202e}fl.txt");
        assert_eq!(line("vic\u{200b}tim"), "vic\\u{200b}tim");
        assert_eq!(
            block("\u{2066}x\u{2069}\u{feff}"),
            "\\u{2066}x\\u{2069}\\u{feff}"
        );
        assert_eq!(line("a\u{e0041}"), "a\\u{e0041}");
        assert_eq!(line("a\u{2028}b"), "a\\u{2028}b");
    }

    #[test]
    fn long_blank_runs_are_counted_in_a_line() {
        let padded = format!("rm -rf victim #{}ls -la", " ".repeat(300));
        assert_eq!(line(&padded), "rm -rf victim #⟨300 blanks⟩ls -la");
        assert_eq!(line("a        b"), "a        b");
        assert_eq!(line(&" ".repeat(9)), "⟨9 blanks⟩");
        // Any blank: ideographic, em and no-break spaces, the braille blank.
        let padded = format!("rm -rf ~ #{}x", "\u{3000}\u{2003}\u{a0}\u{2800}".repeat(50));
        assert_eq!(line(&padded), "rm -rf ~ #⟨200 blanks⟩x");
        assert_eq!(line("a\u{3000}b"), "a\u{3000}b");
        // A block keeps its indentation.
        let indented = format!("{}x", " ".repeat(20));
        assert_eq!(block(&indented), indented);
    }
}
