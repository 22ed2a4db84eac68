//! The small part of Starlark that Codex's `.rules` files are written in: calls of a function
//! with keyword arguments, whose values are string literals and lists of them, with comments
//! and trailing commas. Anything else (an expression, a variable, a `load`, a positional
//! argument) is refused with its line, rather than guessed at: a rule read wrongly would allow
//! or deny the wrong command.

/// A value an argument holds, with the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(String, u32),
    List(Vec<Value>, u32),
}

/// One call at the top level of the file: `name(key = value, …)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub name: String,
    pub line: u32,
    pub arguments: Vec<(String, Value)>,
}

/// Why a file is not in the subset, and the 1-based line where it stops being so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub line: u32,
    pub reason: String,
}

/// Every top-level call of `text`, in order.
pub(crate) fn parse(text: &str) -> Result<Vec<Call>, SyntaxError> {
    let mut parser = Parser {
        chars: text.chars().collect(),
        at: 0,
        line: 1,
    };
    let mut calls = Vec::new();
    loop {
        parser.skip_blank();
        if parser.peek().is_none() {
            return Ok(calls);
        }
        calls.push(parser.call()?);
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    line: u32,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn error<T>(&self, reason: impl Into<String>) -> Result<T, SyntaxError> {
        Err(SyntaxError {
            line: self.line,
            reason: reason.into(),
        })
    }

    /// Whitespace, newlines and `#` comments.
    fn skip_blank(&mut self) {
        while let Some(c) = self.peek() {
            if c == '#' {
                while self.peek().is_some_and(|c| c != '\n') {
                    self.bump();
                }
            } else if c.is_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn expect(&mut self, wanted: char, what: &str) -> Result<(), SyntaxError> {
        self.skip_blank();
        match self.peek() {
            Some(c) if c == wanted => {
                self.bump();
                Ok(())
            }
            Some(c) => self.error(format!("expected {what}, found {c:?}")),
            None => self.error(format!("expected {what}, found the end of the file")),
        }
    }

    fn identifier(&mut self) -> Result<String, SyntaxError> {
        self.skip_blank();
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.bump();
        }
        let name: String = self.chars[start..self.at].iter().collect();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return match self.peek() {
                Some(c) => self.error(format!("expected a name, found {c:?}")),
                None => self.error("expected a name, found the end of the file"),
            };
        }
        Ok(name)
    }

    fn call(&mut self) -> Result<Call, SyntaxError> {
        let line = self.line;
        let name = self.identifier()?;
        self.expect(
            '(',
            &format!("`(` after {name} (only calls such as prefix_rule(…) are read)"),
        )?;
        let mut arguments = Vec::new();
        loop {
            self.skip_blank();
            if self.peek() == Some(')') {
                self.bump();
                break;
            }
            let key = self.identifier()?;
            self.expect(
                '=',
                &format!("`=` after {key} (arguments are given by name)"),
            )?;
            if arguments
                .iter()
                .any(|(seen, _): &(String, Value)| *seen == key)
            {
                return self.error(format!("{key} is given twice"));
            }
            let value = self.value()?;
            arguments.push((key, value));
            self.skip_blank();
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(')') => {}
                Some(c) => return self.error(format!("expected `,` or `)`, found {c:?}")),
                None => return self.error("expected `)`, found the end of the file"),
            }
        }
        Ok(Call {
            name,
            line,
            arguments,
        })
    }

    fn value(&mut self) -> Result<Value, SyntaxError> {
        self.skip_blank();
        let line = self.line;
        match self.peek() {
            Some('"' | '\'') => Ok(Value::Str(self.string()?, line)),
            Some('[') => {
                self.bump();
                let mut items = Vec::new();
                loop {
                    self.skip_blank();
                    if self.peek() == Some(']') {
                        self.bump();
                        return Ok(Value::List(items, line));
                    }
                    items.push(self.value()?);
                    self.skip_blank();
                    match self.peek() {
                        Some(',') => {
                            self.bump();
                        }
                        Some(']') => {}
                        Some(c) => return self.error(format!("expected `,` or `]`, found {c:?}")),
                        None => return self.error("expected `]`, found the end of the file"),
                    }
                }
            }
            Some(c) => self.error(format!(
                "expected a string or a list, found {c:?} (only string literals and lists are read)"
            )),
            None => self.error("expected a value, found the end of the file"),
        }
    }

    /// A string literal in either quote style, on one line, with Starlark's escapes.
    fn string(&mut self) -> Result<String, SyntaxError> {
        let start = self.line;
        let quote = self.bump().expect("a quote was seen");
        if self.peek() == Some(quote) && self.chars.get(self.at + 1) == Some(&quote) {
            return self.error("triple-quoted strings are not read; write the string on one line");
        }
        let mut text = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => {
                    return Err(SyntaxError {
                        line: start,
                        reason: "unterminated string".to_owned(),
                    });
                }
                Some(c) if c == quote => return Ok(text),
                Some('\\') => text.push(self.escape()?),
                Some(c) => text.push(c),
            }
        }
    }

    fn escape(&mut self) -> Result<char, SyntaxError> {
        let simple = match self.bump() {
            Some('n') => '\n',
            Some('t') => '\t',
            Some('r') => '\r',
            Some('0') => '\0',
            Some('a') => '\x07',
            Some('b') => '\x08',
            Some('f') => '\x0c',
            Some('v') => '\x0b',
            Some('\\') => '\\',
            Some('"') => '"',
            Some('\'') => '\'',
            Some('x') => return self.hex_escape(2),
            Some('u') => return self.hex_escape(4),
            Some('U') => return self.hex_escape(8),
            Some(c) => return self.error(format!("unknown escape \\{c} in a string")),
            None => return self.error("unterminated string"),
        };
        Ok(simple)
    }

    fn hex_escape(&mut self, digits: usize) -> Result<char, SyntaxError> {
        let mut code = 0u32;
        for _ in 0..digits {
            match self.bump().and_then(|c| c.to_digit(16)) {
                Some(digit) => code = code * 16 + digit,
                None => return self.error(format!("expected {digits} hex digits in an escape")),
            }
        }
        match char::from_u32(code) {
            Some(c) => Ok(c),
            None => self.error(format!("\\u{{{code:x}}} is not a character")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str, line: u32) -> Value {
        Value::Str(text.to_owned(), line)
    }

    #[test]
    fn calls_with_strings_lists_comments_and_trailing_commas() {
        let text = r#"# a policy
prefix_rule(
    pattern = ["git", ['push', "fetch"]],  # alternatives
    decision = "forbidden",
    justification = "say \"no\"\tto\\ 'it' \x41\u00e9",
)
prefix_rule(pattern=["ls"])
"#;
        let calls = parse(text).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "prefix_rule");
        assert_eq!(calls[0].line, 2);
        assert_eq!(
            calls[0].arguments[0],
            (
                "pattern".to_owned(),
                Value::List(
                    vec![
                        s("git", 3),
                        Value::List(vec![s("push", 3), s("fetch", 3)], 3)
                    ],
                    3
                )
            )
        );
        assert_eq!(calls[0].arguments[1].1, s("forbidden", 4));
        assert_eq!(calls[0].arguments[2].1, s("say \"no\"\tto\\ 'it' Aé", 5));
        assert_eq!(calls[1].line, 7);
        assert_eq!(calls[1].arguments.len(), 1);
        assert_eq!(parse("").unwrap(), []);
        assert_eq!(parse("# only\n\n").unwrap(), []);
    }

    #[test]
    fn anything_else_is_refused_with_its_line() {
        for (text, line, reason) in [
            ("x = 1\n", 1, "expected `(`"),
            ("load(\"a.star\", \"b\")\n", 1, "expected a name"),
            (
                "prefix_rule(pattern = [\"a\"] + [\"b\"])",
                1,
                "expected `,` or `)`",
            ),
            (
                "prefix_rule(\n  pattern = NAME)",
                2,
                "expected a string or a list",
            ),
            (
                "prefix_rule(pattern = \"a\" \"b\")",
                1,
                "expected `,` or `)`",
            ),
            ("prefix_rule(pattern = \"a\n\")", 1, "unterminated string"),
            ("prefix_rule(pattern = \"\\q\")", 1, "unknown escape \\q"),
            ("prefix_rule(pattern = \"\"\"a\"\"\")", 1, "triple-quoted"),
            ("prefix_rule(a = \"x\", a = \"y\")", 1, "a is given twice"),
            ("prefix_rule(pattern = [\"a\"\n", 2, "expected `]`"),
            ("prefix_rule(pattern = [\"a\"],", 1, "expected a name"),
            ("prefix_rule(1 = \"a\")", 1, "expected a name"),
            ("prefix_rule(pattern = \"\\xZZ\")", 1, "hex digits"),
        ] {
            let error = parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error:?}");
            assert!(error.reason.contains(reason), "{text:?}: {error:?}");
        }
    }
}
