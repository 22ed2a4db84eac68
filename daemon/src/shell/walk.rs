//! The walk over the parser's syntax tree: every simple command that would run, nested ones
//! included, with the forms rules match, the paths redirections and options read and write, and
//! what makes the line opaque or unreadable.

use brush_parser::ast::{
    self, AndOrList, Command, CommandPrefixOrSuffixItem, CompoundCommand, CompoundList,
    ExtendedTestExpr, IoFileRedirectKind, IoFileRedirectTarget, IoRedirect, Pipeline,
    SimpleCommand,
};
use brush_parser::word::{
    self, Parameter, ParameterExpr, ParameterTransformOp, WordPiece, WordPieceWithSource,
};
use brush_parser::{Parser, ParserOptions};

use super::guards::{parentheses_balance, parsable};
use super::programs::{self, SHELLS};
use super::wrappers::{PRIVILEGE_WRAPPERS, unwrap};
use super::{CommandLine, FoundCommand, braces, writers};

/// How deep `sh -c` strings, `eval` and substitutions may nest before the line is just opaque.
const MAX_NESTING: usize = 8;

/// Why a line is unreadable when brush-parser panicked on it. It has, on input found by fuzzing
/// (a huge file descriptor number, a huge `~-N`): every call into it is guarded, so that such a
/// line is unreadable instead of a crash of the analysis.
const PARSER_PANICKED: &str = "the shell parser failed on it";

/// Files a redirection may write without being judged against the roots.
/// Builtins whose operands bash takes as variable names (or, for `let`, as arithmetic) and
/// evaluates: a subscript in a name runs the commands in it.
const NAME_TAKING_BUILTINS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "unset",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
    "getopts",
    "wait",
    "let",
    "printf",
    "test",
    "[",
];

const HARMLESS_WRITE_TARGETS: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

/// Walks `line`: its analysis, and how many substitutions the walk saw in it.
pub(super) fn walk(line: &str) -> (CommandLine, usize) {
    let mut analysis = CommandLine::default();
    let mut seen = 0;
    let mut progress = Progress::default();
    Walker {
        out: &mut analysis,
        substitutions_seen: &mut seen,
        progress: &mut progress,
        depth: 0,
        nested: false,
        stdin: Stdin::Inherited,
    }
    .walk_line(line);
    progress.judge_paths(&mut analysis);
    (analysis, seen)
}

/// Where a nested command line comes from.
#[derive(Clone, Copy)]
enum Nested {
    /// The body of a substitution: part of the line's own text.
    Body,
    /// A word's value run as a command line (`sh -c`, `eval`).
    Value,
}

/// What the walk met that changes where paths lead, anywhere in the line, nested lines
/// included: a `cd` in a subshell changes only the subshell, but assuming it changed
/// everything only makes more of the line opaque.
#[derive(Default)]
struct Progress {
    /// A `cd`, `pushd` or `popd` is in the line: relative paths are not where it started.
    directory_changed: bool,
    /// `HOME` is assigned or unset in the line: a `~` is not the home the engine knows.
    home_changed: bool,
    /// A link is made in the line (`ln`, `cp -s`): a path may lead through it, made after the
    /// judgment. How many written paths the linking commands themselves gave.
    links_made: Option<usize>,
}

impl Progress {
    /// Paths are judged from the directory and the home the line starts with. Once the line
    /// changes either, a relative (or `~`) path is opaque wherever it is written: the order of
    /// the text is not the order things run in (a loop body's redirection runs again after the
    /// `cd` at its end; a function's runs where it is called).
    fn judge_paths(&self, analysis: &mut CommandLine) {
        let paths = || analysis.written_paths.iter().chain(&analysis.read_paths);
        let relative = paths().any(|path| !path.starts_with('/') && !path.starts_with('~'));
        let tilde = paths().any(|path| path.starts_with('~'));
        if self.directory_changed && relative {
            let why =
                "a relative path in a line that changes the directory (`cd`, `pushd`, `popd`)";
            analysis.opaque.push(why.to_owned());
        }
        if self.home_changed && tilde {
            analysis
                .opaque
                .push("a `~` path in a line that changes `HOME`".to_owned());
        }
        if let Some(linking) = self.links_made
            && analysis.written_paths.len() + analysis.read_paths.len() > linking
        {
            analysis.opaque.push(
                "a path written or read in a line that makes a link (`ln`, `cp -s`, `cp -l`): \
                 it may lead through the new link"
                    .to_owned(),
            );
        }
    }
}

struct Walker<'a> {
    out: &'a mut CommandLine,
    /// Command and process substitutions found, nested ones included.
    substitutions_seen: &'a mut usize,
    progress: &'a mut Progress,
    depth: usize,
    /// Inside a substitution, `sh -c` string or `eval`.
    nested: bool,
    /// The standard input of the simple command being walked.
    stdin: Stdin,
}

/// Where a simple command's standard input comes from, as far as its own redirections say.
#[derive(Clone, Default)]
enum Stdin {
    /// Its pipeline's or its enclosing command's: not known here.
    #[default]
    Inherited,
    /// A here-string or here-document whose text is known.
    Text(String),
    /// A file, or a here-document or here-string whose text is only known when it runs.
    Unknown,
}

impl Walker<'_> {
    fn opaque(&mut self, why: impl Into<String>) {
        let why = why.into();
        if !self.out.opaque.contains(&why) {
            self.out.opaque.push(why);
        }
    }

    /// Walks a command line nested in another: the body of a substitution (`Nested::Body`),
    /// or a word's value run as a line (`sh -c`, `eval`: `Nested::Value`).
    fn walk_nested(&mut self, line: &str, nested: Nested, why: &str) {
        self.opaque(why);
        if self.depth >= MAX_NESTING {
            self.opaque("commands nested too deep to follow");
            return;
        }
        // Only a body's substitutions are in the text [`substitutions_in`] counts; counting a
        // value's too could make up for ones the parser missed.
        let mut uncounted = 0;
        let substitutions_seen = match nested {
            Nested::Body => &mut *self.substitutions_seen,
            Nested::Value => &mut uncounted,
        };
        let mut inner = Walker {
            out: &mut *self.out,
            substitutions_seen,
            progress: &mut *self.progress,
            depth: self.depth + 1,
            nested: true,
            stdin: Stdin::Inherited,
        };
        inner.walk_line(line);
    }

    fn walk_line(&mut self, line: &str) {
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

    /// Code the line runs that the analysis cannot see ([`CommandLine::hidden_code`]).
    fn hidden_code(&mut self, why: String) {
        self.opaque(why.clone());
        if !self.out.hidden_code.contains(&why) {
            self.out.hidden_code.push(why);
        }
    }

    /// A shell or an interpreter reading its program from its input: shell code from a
    /// here-string or here-document of known text is walked as a nested line; anything else
    /// is code the analysis cannot see.
    fn program_from_input(&mut self, program: programs::FromInput) {
        match &self.stdin {
            Stdin::Text(text) if program.shell_code => {
                let text = text.clone();
                self.walk_nested(
                    &text,
                    Nested::Value,
                    "a command line a shell reads from its input",
                );
            }
            _ => self.hidden_code(program.why),
        }
    }

    fn unreadable(&mut self, why: String) {
        self.opaque(why.clone());
        self.out.unreadable.get_or_insert(why);
    }

    fn walk_list(&mut self, list: &CompoundList) {
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

    /// A `for` loop assigns its variable each value in turn (and `coproc NAME` assigns NAME).
    /// For a variable that bash or the programs it runs may read (a name with a capital
    /// letter, as bash's own and the environment's are, `PATH`, `HOME`, `GIT_DIR`; or a
    /// `*_proxy`), that is an assignment like a bare `NAME=value`, which allow rules must
    /// cover (`for PATH in /tmp/x; do git status; done` is not `git status`). A lowercase loop
    /// variable reaches no program unless the line exports it, which is a command of its own.
    fn loop_variable(&mut self, name: &str, values: &[String]) {
        if rewrites_lookup(name) {
            self.unreadable(REWRITES_LOOKUP.to_owned());
        }
        if name == "HOME" {
            self.progress.home_changed = true;
        }
        let read_by_others =
            name.bytes().any(|byte| byte.is_ascii_uppercase()) || name.ends_with("_proxy");
        if read_by_others {
            let form = if values.is_empty() {
                format!("{name}=")
            } else {
                values
                    .iter()
                    .map(|value| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            self.push_command(vec![form.clone()], vec![form], Vec::new());
        }
    }

    /// A word that bash takes as a variable's name (`printf -v NAME`, `read NAME`, `[[ -v NAME ]]`)
    /// and evaluates: a subscript in it (`a[$(cmd)]`) runs commands, so a name that is computed
    /// or has a subscript is opaque.
    fn variable_name(&mut self, name: &Expanded) {
        let subscripted = name.text.as_deref().is_none_or(|text| text.contains('['));
        if name.dynamic || subscripted {
            self.opaque("a variable name that is computed or subscripted, which bash evaluates");
        }
    }

    /// The words of builtins that name variables, each judged by [`Self::variable_name`]. For
    /// the builtins that take names as operands every operand counts (an option's value too:
    /// rough in the safe direction); for `printf` only `-v`'s value, for `test` the word after
    /// `-v` or `-R`; `let` evaluates each argument as arithmetic.
    fn names_taken(&mut self, name: &str, arguments: &[String], computed: &[bool]) {
        if !NAME_TAKING_BUILTINS.contains(&name) {
            return;
        }
        let word = |index: usize, text: &str| Expanded {
            text: Some(text.to_owned()),
            dynamic: computed.get(index).copied().unwrap_or(true),
            unquoted: Vec::new(),
        };
        // `declare -n r=VALUE` makes VALUE a name that every later `$r` evaluates.
        let nameref = arguments
            .iter()
            .any(|argument| argument.starts_with('-') && argument.contains('n'));
        for (index, argument) in arguments.iter().enumerate() {
            match name {
                "let" => self.walk_arithmetic(argument),
                "printf" => {
                    if argument == "-v" {
                        if let Some(next) = arguments.get(index + 1) {
                            self.variable_name(&word(index + 1, next));
                        }
                    } else if let Some(attached) = argument.strip_prefix("-v") {
                        self.variable_name(&word(index, attached));
                    }
                }
                "test" | "[" => {
                    if (argument == "-v" || argument == "-R")
                        && let Some(next) = arguments.get(index + 1)
                    {
                        self.variable_name(&word(index + 1, next));
                    }
                }
                // The name is what comes before `=`; the value is data.
                _ => match argument.split_once('=') {
                    Some((named, value)) => {
                        self.variable_name(&Expanded {
                            text: Some(named.to_owned()),
                            dynamic: named.contains(['$', '`']),
                            unquoted: Vec::new(),
                        });
                        if nameref {
                            self.variable_name(&word(index, value));
                        }
                    }
                    None => self.variable_name(&word(index, argument)),
                },
            }
        }
    }

    /// Arithmetic evaluates variables recursively, and an array subscript in a variable's value
    /// runs command substitutions: anything but numbers and operators is opaque.
    fn walk_arithmetic(&mut self, expr: &str) {
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

    fn written_path(&mut self, path: Expanded) {
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
    fn read_path(&mut self, path: &Expanded) {
        match &path.text {
            Some(text) if !path.dynamic => {
                self.out.read_paths.push(text.clone());
            }
            _ => self.opaque("a redirection from a computed path"),
        }
    }

    fn walk_substituted_list(&mut self, list: &CompoundList) {
        let mut inner = Walker {
            out: &mut *self.out,
            substitutions_seen: &mut *self.substitutions_seen,
            progress: &mut *self.progress,
            depth: self.depth + 1,
            nested: true,
            stdin: Stdin::Inherited,
        };
        inner.walk_list(list);
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

    /// Records a command and, through its wrappers, every command it runs.
    /// `computed` says, word by word, which are only known when the line runs.
    fn push_layers(&mut self, assignments: &[String], words: &[String], computed: &[bool]) {
        let mut match_forms = Vec::new();
        let mut allow_assignments: Vec<String> = assignments.to_vec();
        let mut privileged_outer: Option<String> = None;
        let mut layer: &[String] = words;
        let mut hops = 0;
        while let Some(first) = layer.first() {
            let position = words.len() - layer.len();
            if computed.get(position).copied().unwrap_or(false) || has_glob(first) {
                // `timeout 5 $cmd`: the wrapper's command is only known when it runs.
                self.opaque("a command name computed at run time");
            }
            if first.chars().any(char::is_whitespace) {
                // `'echo x' y` runs a program named `echo x`, whose form reads as `echo`'s.
                self.opaque("a command name with blanks in it, which a rule would read as words");
            }
            let name = basename(first);
            let joined = layer.join(" ");
            let with_basename = std::iter::once(name.to_owned())
                .chain(layer[1..].iter().cloned())
                .collect::<Vec<_>>()
                .join(" ");
            for form in [joined.clone(), with_basename] {
                if !match_forms.contains(&form) {
                    match_forms.push(form);
                }
            }
            if !allow_assignments.is_empty() {
                match_forms.push(format!("{} {joined}", allow_assignments.join(" ")));
            }
            self.nested_commands(name, layer, &computed[position.min(computed.len())..]);
            let written_before = self.out.written_paths.len();
            for (at, path) in writers::files_written(name, &layer[1..]) {
                let computed_word = computed.get(position + 1 + at).copied().unwrap_or(true);
                self.written_path(Expanded::from_argument(path, computed_word));
            }
            if writers::makes_links(name, &layer[1..]) {
                let linking = self.out.written_paths.len() - written_before;
                self.progress.links_made = Some(self.progress.links_made.unwrap_or(0) + linking);
            }
            self.names_taken(
                name,
                &layer[1..],
                &computed[(position + 1).min(computed.len())..],
            );
            if matches!(name, "cd" | "pushd" | "popd") {
                self.progress.directory_changed = true;
            }
            hops += 1;
            let Some(unwrapped) = unwrap(name, &layer[1..]) else {
                break;
            };
            if hops > MAX_NESTING {
                self.opaque("wrappers nested too deep to follow");
                break;
            }
            if PRIVILEGE_WRAPPERS.contains(&name) && privileged_outer.is_none() {
                privileged_outer = Some(prefixed(&allow_assignments, &joined));
            }
            if let Some(why) = &unwrapped.unknown_option {
                self.opaque(why.clone());
            }
            if unwrapped.arguments_from_input {
                self.opaque(format!(
                    "`{name}`, whose command's arguments come from its input"
                ));
            }
            for path in unwrapped.reads {
                self.read_path(&Expanded::from_argument(path, false));
            }
            for path in unwrapped.writes {
                self.written_path(Expanded::from_argument(path, false));
            }
            allow_assignments.extend(unwrapped.assignments);
            if let Some(split) = unwrapped.split_line {
                // `env -S 'touch P' echo hi` runs `touch P echo hi`: the words that follow are
                // arguments of the split line's command, not a command of their own.
                let line = std::iter::once(split)
                    .chain(unwrapped.command.iter().map(|word| shell_quote(word)))
                    .collect::<Vec<_>>()
                    .join(" ");
                self.walk_nested(&line, Nested::Value, "a command line run by `env -S`");
                layer = &[];
                break;
            }
            layer = unwrapped.command;
        }
        let mut allow_forms = vec![prefixed(&allow_assignments, &layer.join(" "))];
        if layer.is_empty() {
            // A wrapper with nothing to run (`env`, `time`) is itself the command.
            allow_forms = vec![prefixed(assignments, &words.join(" "))];
        }
        // The words themselves, when each is known as written and means only itself: what
        // the list of known-safe commands reads.
        let start = words.len() - layer.len();
        let plain = !layer.is_empty()
            && allow_assignments.is_empty()
            && privileged_outer.is_none()
            && !computed[start.min(computed.len())..].contains(&true)
            && layer.iter().all(|word| is_plain_word(word));
        let plain_words = if plain { layer.to_vec() } else { Vec::new() };
        allow_forms.extend(privileged_outer);
        self.push_command(match_forms, allow_forms, plain_words);
    }

    fn push_command(
        &mut self,
        match_forms: Vec<String>,
        allow_forms: Vec<String>,
        plain_words: Vec<String>,
    ) {
        self.out.commands.push(FoundCommand {
            match_forms,
            allow_forms,
            nested: self.nested,
            plain_words,
        });
    }

    /// Command lines a command runs from its arguments (`sh -c`, `eval`, `find -exec`, an
    /// alias's value, a `trap` action, a `mapfile` callback), and builtins that change what
    /// later commands of the line mean in ways the analysis does not follow.
    fn nested_commands(&mut self, name: &str, words: &[String], computed: &[bool]) {
        let args = &words[1..];
        if words
            .iter()
            .any(|word| word == "HOME" || word.starts_with("HOME="))
        {
            self.progress.home_changed = true;
        }
        if words.iter().any(|word| rewrites_lookup(word)) {
            self.unreadable(REWRITES_LOOKUP.to_owned());
        }
        match name {
            _ if SHELLS.contains(&name) => {
                let shell_args = if name == "busybox" {
                    args.get(1..).unwrap_or_default()
                } else {
                    args
                };
                if let Some(script) = shell_c_script(shell_args) {
                    self.walk_nested(script, Nested::Value, "a command line run by `sh -c`");
                    let at = words
                        .iter()
                        .position(|word| std::ptr::eq(word.as_str(), script));
                    if at.is_some_and(|at| computed.get(at).copied().unwrap_or(true)) {
                        self.hidden_code(format!(
                            "`{name} -c` of a command line computed at run time"
                        ));
                    }
                } else if let Some(program) = programs::reads_program_from_input(name, args) {
                    self.program_from_input(program);
                }
            }
            "eval" => {
                self.walk_nested(&args.join(" "), Nested::Value, "`eval`");
                if computed.iter().skip(1).any(|computed| *computed) {
                    self.hidden_code("`eval` of a command line computed at run time".to_owned());
                }
            }
            "alias" => {
                // With `expand_aliases` on, bash reads an alias's value as part of a later line.
                for value in args.iter().filter_map(|arg| arg.split_once('=')) {
                    self.walk_nested(value.1, Nested::Value, "an alias");
                }
                if args.is_empty() || args.iter().any(|arg| !arg.contains('=')) {
                    self.opaque("`alias`");
                }
            }
            "trap" => {
                let mut rest = args.iter().skip_while(|arg| arg.starts_with('-'));
                if let Some(action) = rest.next() {
                    self.walk_nested(action, Nested::Value, "a `trap` action");
                }
            }
            "mapfile" | "readarray" => {
                let callback = args
                    .iter()
                    .position(|arg| arg == "-C")
                    .and_then(|at| args.get(at + 1));
                if let Some(callback) = callback {
                    self.walk_nested(callback, Nested::Value, "a `mapfile` callback");
                }
            }
            "shopt" if args.iter().any(|arg| changes_parsing(arg)) => {
                self.unreadable("`shopt` changes how bash reads the rest of the line".to_owned());
            }
            "enable" => {
                self.unreadable("`enable`, which turns builtins off or loads new ones".to_owned());
            }
            "hash"
                if args
                    .iter()
                    .any(|arg| arg.starts_with('-') && arg.contains('p')) =>
            {
                self.unreadable(
                    "`hash -p`, which makes a command name run another program".to_owned(),
                );
            }
            _ if let Some(program) = programs::reads_program_from_input(name, args) => {
                self.program_from_input(program);
            }
            "find" => {
                let mut rest = args;
                while let Some(start) = rest
                    .iter()
                    .position(|w| matches!(w.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
                {
                    let payload = &rest[start + 1..];
                    let end = payload
                        .iter()
                        .position(|w| w == ";" || w == "+")
                        .unwrap_or(payload.len());
                    if end > 0 {
                        // find runs it directly: a command like any other, allow rules included.
                        let nested = self.nested;
                        self.push_layers(&[], &payload[..end], &[]);
                        self.nested = nested;
                    }
                    rest = &payload[end.min(payload.len())..];
                }
            }
            _ => {}
        }
    }

    /// Expands a word's quoting and looks inside its substitutions.
    fn expand_word(&mut self, raw: &str) -> Expanded {
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

    fn expand_pieces(&mut self, raw: &str, pieces: &[WordPieceWithSource]) -> Expanded {
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
    fn expand_split_word(&mut self, raw: &str) -> Vec<Expanded> {
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
    fn expand_target(&mut self, raw: &str) -> Expanded {
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

enum Item<'a> {
    Prefix(&'a CommandPrefixOrSuffixItem),
    Name(&'a ast::Word),
    Suffix(&'a CommandPrefixOrSuffixItem),
}

/// A word after quote removal; `dynamic` when its value is only known at run time.
#[derive(Default)]
struct Expanded {
    text: Option<String>,
    dynamic: bool,
    /// The byte ranges of `text` that were unquoted text, where bash still sees syntax
    /// (brace expansion).
    unquoted: Vec<std::ops::Range<usize>>,
}

impl Expanded {
    /// A word only known when the line runs.
    fn unknown() -> Self {
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
    fn from_argument(path: String, computed: bool) -> Self {
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
const COMPUTED: &str = "$?";

/// A word that means only its text to bash once quotes are removed: no glob (which could
/// expand to a symlink out of the roots), brace, tilde or expansion (`computed` marks words
/// whose text is only known when the line runs). A quoted `'*.rs'` is refused too: the word's
/// text no longer says whether it was quoted.
fn is_plain_word(word: &str) -> bool {
    !word.starts_with('~') && !word.contains(['*', '?', '[', '{', '$', '`', '\0'])
}

fn has_glob(name: &str) -> bool {
    name.contains(['*', '?', '['])
}

/// `shopt` options that change how bash parses what follows (`extglob`) or what a command
/// name means (`expand_aliases`).
fn changes_parsing(arg: &str) -> bool {
    matches!(arg, "extglob" | "expand_aliases")
}

/// Why a line that assigns one of bash's lookup tables cannot be read.
const REWRITES_LOOKUP: &str =
    "an assignment to BASH_CMDS or BASH_ALIASES, which changes what a command name runs";

/// An assignment (or `declare` argument) to the tables bash looks command names up in.
fn rewrites_lookup(word: &str) -> bool {
    ["BASH_CMDS", "BASH_ALIASES"]
        .iter()
        .any(|table| word.starts_with(table))
}

/// `word` quoted for bash, so that a nested line keeps it one word.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%".contains(c))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

fn basename(command: &str) -> &str {
    command
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .unwrap_or(command)
}

fn prefixed(assignments: &[String], command: &str) -> String {
    if assignments.is_empty() {
        command.to_owned()
    } else {
        format!("{} {command}", assignments.join(" "))
    }
}

/// The script of `sh [options] -c SCRIPT …`, `-c` possibly combined (`-ec`, `-lc`).
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

fn shell_c_script(args: &[String]) -> Option<&str> {
    let mut index = 0;
    let mut wants_script = false;
    while let Some(arg) = args.get(index) {
        if wants_script {
            return Some(arg);
        }
        if arg == "--" || !arg.starts_with('-') && !arg.starts_with('+') {
            return None;
        }
        if arg.starts_with('-') && !arg.starts_with("--") && arg.contains('c') {
            wants_script = true;
        }
        // `-o option` takes the next word.
        if arg == "-o" || arg == "+o" {
            index += 1;
        }
        index += 1;
    }
    None
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
