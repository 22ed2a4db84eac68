//! The walk over the parser's syntax tree: lists, pipelines, compound commands, `[[ … ]]`
//! tests, arithmetic, redirections and simple commands, with the paths redirections read and
//! write recorded and where each simple command's standard input comes from.

use brush_parser::ast::{
    self, AndOrList, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList,
    ExtendedTestExpr, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline,
    SimpleCommand,
};
use brush_parser::word::{self, WordPiece};
use brush_parser::{Parser, ParserOptions};

use crate::shell::guards::{parentheses_balance, parsable};

use super::expansion::{COMPUTED, Expanded, has_glob};
use super::{PARSER_PANICKED, Stdin, Walker};

/// Files a redirection may write without being judged against the roots.
const HARMLESS_WRITE_TARGETS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

impl Walker<'_> {
    pub(super) fn walk_line(&mut self, line: &str) {
        if let Err(why) = parsable(line) {
            self.unreadable(why);
            return;
        }
        let options = ParserOptions::default();
        let parsed =
            std::panic::catch_unwind(|| Parser::new(line.as_bytes(), &options).parse_program());
        match parsed {
            Ok(Ok(program)) => {
                for list in &program.complete_commands {
                    self.walk_list(list);
                }
            }
            Ok(Err(err)) => self.unreadable(format!("the shell parser cannot read it ({err})")),
            Err(_) => self.unreadable(PARSER_PANICKED.to_owned()),
        }
    }

    pub(super) fn walk_list(&mut self, list: &CompoundList) {
        for item in &list.0 {
            self.walk_and_or(&item.0);
        }
    }

    fn walk_and_or(&mut self, list: &AndOrList) {
        self.walk_pipeline(&list.first);
        for next in &list.additional {
            match next {
                ast::AndOr::And(pipeline) | ast::AndOr::Or(pipeline) => {
                    self.walk_pipeline(pipeline)
                }
            }
        }
    }

    fn walk_pipeline(&mut self, pipeline: &Pipeline) {
        for command in &pipeline.seq {
            self.walk_command(command);
        }
    }

    fn walk_command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.walk_simple(simple),
            Command::Compound(compound, redirects) => {
                self.walk_compound(compound);
                for redirect in redirects.iter().flat_map(|list| &list.0) {
                    self.walk_redirect(redirect);
                }
            }
            Command::Function(function) => {
                self.walk_compound(&function.body.0);
                for redirect in function.body.1.iter().flat_map(|list| &list.0) {
                    self.walk_redirect(redirect);
                }
            }
            Command::ExtendedTest(test, redirects) => {
                self.walk_test(&test.expr);
                for redirect in redirects.iter().flat_map(|list| &list.0) {
                    self.walk_redirect(redirect);
                }
            }
        }
    }

    fn walk_compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::Arithmetic(arithmetic) => self.walk_arithmetic(&arithmetic.expr.value),
            CompoundCommand::ArithmeticForClause(clause) => {
                for expr in [&clause.initializer, &clause.condition, &clause.updater]
                    .into_iter()
                    .flatten()
                {
                    self.walk_arithmetic(&expr.value);
                }
                self.walk_list(&clause.body.list);
            }
            CompoundCommand::BraceGroup(group) => self.walk_list(&group.list),
            CompoundCommand::Subshell(subshell) => self.walk_list(&subshell.list),
            CompoundCommand::ForClause(clause) => {
                let values: Vec<String> = clause
                    .values
                    .iter()
                    .flatten()
                    .map(|value| {
                        let expanded = self.expand_word(&value.value);
                        expanded.text.unwrap_or_else(|| COMPUTED.to_owned())
                    })
                    .collect();
                self.loop_variable(&clause.variable_name, &values);
                self.walk_list(&clause.body.list);
            }
            CompoundCommand::CaseClause(clause) => {
                self.expand_word(&clause.value.value);
                for case in &clause.cases {
                    for pattern in &case.patterns {
                        self.expand_word(&pattern.value);
                    }
                    if let Some(body) = &case.cmd {
                        self.walk_list(body);
                    }
                }
            }
            CompoundCommand::IfClause(clause) => {
                self.walk_list(&clause.condition);
                self.walk_list(&clause.then);
                for branch in clause.elses.iter().flatten() {
                    if let Some(condition) = &branch.condition {
                        self.walk_list(condition);
                    }
                    self.walk_list(&branch.body);
                }
            }
            CompoundCommand::WhileClause(clause) | CompoundCommand::UntilClause(clause) => {
                self.walk_list(&clause.0);
                self.walk_list(&clause.1.list);
            }
            CompoundCommand::Coprocess(coprocess) => {
                // `coproc NAME …` assigns the array NAME (its descriptors), like a loop does.
                if let Some(name) = &coprocess.name {
                    self.loop_variable(&name.value, &[]);
                }
                self.walk_command(&coprocess.body)
            }
        }
    }

    fn walk_test(&mut self, expr: &ExtendedTestExpr) {
        match expr {
            ExtendedTestExpr::And(left, right) | ExtendedTestExpr::Or(left, right) => {
                self.walk_test(left);
                self.walk_test(right);
            }
            ExtendedTestExpr::Not(inner) | ExtendedTestExpr::Parenthesized(inner) => {
                self.walk_test(inner)
            }
            ExtendedTestExpr::UnaryTest(predicate, word) => {
                let expanded = self.expand_word(&word.value);
                if matches!(
                    predicate,
                    ast::UnaryPredicate::ShellVariableIsSetAndAssigned
                        | ast::UnaryPredicate::ShellVariableIsSetAndNameRef
                ) {
                    self.variable_name(&expanded);
                }
            }
            ExtendedTestExpr::BinaryTest(predicate, left, right) => {
                self.expand_word(&left.value);
                self.expand_word(&right.value);
                // `[[ a -eq b ]]` evaluates both sides as arithmetic, which can run commands.
                let arithmetic = matches!(
                    predicate,
                    ast::BinaryPredicate::ArithmeticEqualTo
                        | ast::BinaryPredicate::ArithmeticNotEqualTo
                        | ast::BinaryPredicate::ArithmeticLessThan
                        | ast::BinaryPredicate::ArithmeticLessThanOrEqualTo
                        | ast::BinaryPredicate::ArithmeticGreaterThan
                        | ast::BinaryPredicate::ArithmeticGreaterThanOrEqualTo
                );
                if arithmetic {
                    self.walk_arithmetic(&left.value);
                    self.walk_arithmetic(&right.value);
                }
            }
        }
    }

    /// Arithmetic evaluates variables recursively, and an array subscript in a variable's value
    /// runs command substitutions: anything but numbers and operators is opaque.
    pub(super) fn walk_arithmetic(&mut self, expr: &str) {
        // Parentheses that do not balance make bash read `$((…))` and `((…))` as subshells
        // (`$((1>/2) )` runs `1` with its output to `/2`): commands no rule was checked against.
        if !parentheses_balance(expr) {
            self.unreadable("an arithmetic expression that bash runs as commands".to_owned());
        }
        let plain = expr.chars().all(|c| {
            c.is_ascii_digit() || c.is_ascii_whitespace() || "+-*/%()<>=!&|^~?:,".contains(c)
        });
        if !plain {
            self.opaque("arithmetic on variables or substitutions");
        }
        // Any substitution in it still runs: look inside for deny and ask rules.
        if expr.contains("$(") || expr.contains('`') {
            self.expand_word(expr);
        }
    }

    fn walk_redirect(&mut self, redirect: &IoRedirect) {
        match redirect {
            IoRedirect::File(_, kind, target) => match target {
                IoFileRedirectTarget::Filename(word) => {
                    let path = self.expand_target(&word.value);
                    let (reads, writes) = match kind {
                        IoFileRedirectKind::Write
                        | IoFileRedirectKind::Append
                        | IoFileRedirectKind::Clobber
                        | IoFileRedirectKind::DuplicateOutput => (false, true),
                        IoFileRedirectKind::ReadAndWrite => (true, true),
                        IoFileRedirectKind::Read | IoFileRedirectKind::DuplicateInput => {
                            (true, false)
                        }
                    };
                    if reads {
                        self.read_path(&path);
                    }
                    if matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                        self.duplicated_to_file(path);
                    } else if writes {
                        self.written_path(path);
                    }
                }
                IoFileRedirectTarget::Fd(_) => {}
                IoFileRedirectTarget::ProcessSubstitution(_, subshell) => {
                    *self.substitutions_seen += 1;
                    self.opaque("a process substitution");
                    self.walk_substituted_list(&subshell.list);
                }
                IoFileRedirectTarget::Duplicate(word) => {
                    let target = self.expand_target(&word.value);
                    // `>&2` duplicates a descriptor (`>&2-` moves it, `>&-` closes one);
                    // `>&file` writes a file.
                    match &target.text {
                        Some(text)
                            if !target.dynamic
                                && text
                                    .trim_end_matches('-')
                                    .chars()
                                    .all(|c| c.is_ascii_digit()) => {}
                        _ => self.duplicated_to_file(target),
                    }
                }
            },
            IoRedirect::HereDocument(_, heredoc) => {
                if heredoc.requires_expansion {
                    let body = &heredoc.doc.value;
                    match std::panic::catch_unwind(|| {
                        word::parse_heredoc(body, &ParserOptions::default())
                    }) {
                        Ok(Ok(pieces)) => {
                            self.expand_pieces(body, &pieces);
                        }
                        Ok(Err(_)) => self.opaque("a here-document the parser cannot read"),
                        Err(_) => self.unreadable(PARSER_PANICKED.to_owned()),
                    }
                }
            }
            IoRedirect::HereString(_, word) => {
                self.expand_word(&word.value);
            }
            IoRedirect::OutputAndError(word, _) => {
                let path = self.expand_target(&word.value);
                self.written_path(path);
            }
        }
    }

    /// `>&WORD` whose word is not a descriptor: bash turns it into `&>` with the expanded text
    /// as a new word, and expands that word again (`>&'$(id)'` runs `id`; `>&1\'x` writes
    /// `1x`). Only a name the second expansion leaves as it is names the file judged; one
    /// whose value is only known when it runs may hold a substitution no rule looks at.
    fn duplicated_to_file(&mut self, target: Expanded) {
        const UNCHANGED_BY_EXPANSION: &str = "/._-+,:@%=";
        match &target.text {
            Some(text)
                if !target.dynamic
                    && text.chars().all(|c| {
                        c.is_ascii_alphanumeric() || UNCHANGED_BY_EXPANSION.contains(c)
                    }) =>
            {
                self.written_path(target);
            }
            Some(text) if !target.dynamic && !text.contains(['$', '`']) => {
                self.opaque("a `>&` redirection whose file name bash expands a second time");
                self.written_path(Expanded::unknown());
            }
            _ => self.unreadable(
                "a `>&` redirection whose file name bash expands a second time, running the \
                 substitutions it may hold"
                    .to_owned(),
            ),
        }
    }

    pub(super) fn written_path(&mut self, path: Expanded) {
        match path.text {
            Some(text) if !path.dynamic => {
                if !HARMLESS_WRITE_TARGETS.contains(&text.as_str()) {
                    self.out.written_paths.push(text);
                }
            }
            _ => self.opaque("a redirection to a computed path"),
        }
    }

    /// A file the line reads by redirection or by a wrapper's option, judged against `read_file`
    /// deny rules; one whose name is only known when it runs cannot be.
    pub(super) fn read_path(&mut self, path: &Expanded) {
        match &path.text {
            Some(text) if !path.dynamic => {
                self.out.read_paths.push(text.clone());
            }
            _ => self.opaque("a redirection from a computed path"),
        }
    }

    fn walk_simple(&mut self, simple: &SimpleCommand) {
        self.stdin = input_of(simple);
        let mut assignments: Vec<String> = Vec::new();
        let mut words: Vec<Expanded> = Vec::new();
        let items = simple
            .prefix
            .iter()
            .flat_map(|prefix| prefix.0.iter())
            .map(Item::Prefix)
            .chain(simple.word_or_name.iter().map(Item::Name))
            .chain(
                simple
                    .suffix
                    .iter()
                    .flat_map(|suffix| suffix.0.iter())
                    .map(Item::Suffix),
            );
        for item in items {
            match item {
                Item::Name(word) => words.extend(self.expand_split_word(&word.value)),
                Item::Prefix(entry) | Item::Suffix(entry) => match entry {
                    CommandPrefixOrSuffixItem::IoRedirect(redirect) => self.walk_redirect(redirect),
                    CommandPrefixOrSuffixItem::Word(word) => {
                        words.extend(self.expand_split_word(&word.value))
                    }
                    CommandPrefixOrSuffixItem::AssignmentWord(_, word) => {
                        let expanded = self.expand_word(&word.value);
                        if words.is_empty() {
                            assignments.push(expanded.text.unwrap_or_else(|| word.value.clone()));
                        } else {
                            // `declare x=1` and friends: an argument like any other.
                            words.push(expanded);
                        }
                    }
                    CommandPrefixOrSuffixItem::ProcessSubstitution(_, subshell) => {
                        *self.substitutions_seen += 1;
                        self.opaque("a process substitution");
                        self.walk_substituted_list(&subshell.list);
                        words.push(Expanded::unknown());
                    }
                },
            }
        }
        if words.is_empty() {
            if !assignments.is_empty() {
                // A bare assignment runs nothing, but it changes what later commands run
                // (`PATH=/tmp/x; git status`): it must be allowed like a command.
                let form = assignments.join(" ");
                self.push_command(vec![form.clone()], vec![form], Vec::new());
            }
            return;
        }
        match &words[0].text {
            Some(name) if !words[0].dynamic && !has_glob(name) => {}
            _ => self.opaque("a command name computed at run time"),
        }
        let literal: Vec<String> = words
            .iter()
            .map(|word| word.text.clone().unwrap_or_else(|| COMPUTED.to_owned()))
            .collect();
        let computed: Vec<bool> = words.iter().map(|word| word.dynamic).collect();
        self.push_layers(&assignments, &literal, &computed);
        self.stdin = Stdin::Inherited;
    }
}

enum Item<'a> {
    Prefix(&'a CommandPrefixOrSuffixItem),
    Name(&'a ast::Word),
    Suffix(&'a CommandPrefixOrSuffixItem),
}

/// Where a simple command's standard input comes from, by its own redirections (the last one
/// of descriptor 0 wins, as in bash).
fn input_of(simple: &SimpleCommand) -> Stdin {
    let items = simple
        .prefix
        .iter()
        .flat_map(|prefix| prefix.0.iter())
        .chain(simple.suffix.iter().flat_map(|suffix| suffix.0.iter()));
    let mut stdin = Stdin::Inherited;
    for item in items {
        let CommandPrefixOrSuffixItem::IoRedirect(redirect) = item else {
            continue;
        };
        match redirect {
            IoRedirect::HereString(None | Some(0), word) => {
                stdin = match literal_word(&word.value) {
                    Some(text) => Stdin::Text(text + "\n"),
                    None => Stdin::Unknown,
                };
            }
            IoRedirect::HereDocument(None | Some(0), heredoc) => {
                stdin =
                    if heredoc.requires_expansion && heredoc.doc.value.contains(['$', '`', '\\']) {
                        Stdin::Unknown
                    } else {
                        Stdin::Text(heredoc.doc.value.clone())
                    };
            }
            IoRedirect::File(
                None | Some(0),
                IoFileRedirectKind::Read
                | IoFileRedirectKind::ReadAndWrite
                | IoFileRedirectKind::DuplicateInput,
                _,
            ) => {
                stdin = Stdin::Unknown;
            }
            _ => {}
        }
    }
    stdin
}

/// A word's text when it holds no expansion (quotes removed), else `None`.
fn literal_word(raw: &str) -> Option<String> {
    let pieces = std::panic::catch_unwind(|| word::parse(raw, &ParserOptions::default()))
        .ok()?
        .ok()?;
    let mut text = String::new();
    for piece in &pieces {
        match &piece.piece {
            WordPiece::Text(part) | WordPiece::SingleQuotedText(part) => text.push_str(part),
            WordPiece::EscapeSequence(escape) => {
                text.push_str(escape.strip_prefix('\\').unwrap_or(escape));
            }
            WordPiece::DoubleQuotedSequence(inner) => {
                for inner in inner {
                    match &inner.piece {
                        WordPiece::Text(part) => text.push_str(part),
                        WordPiece::EscapeSequence(escape) => {
                            text.push_str(escape.strip_prefix('\\').unwrap_or(escape));
                        }
                        _ => return None,
                    }
                }
            }
            _ => return None,
        }
    }
    Some(text)
}
