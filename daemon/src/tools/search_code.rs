//! The `search_code` builtin tool: searches file contents for a regex with ripgrep's own
//! crates, honouring ignore files and skipping hidden and binary files as ripgrep does
//! (see [`super::walk`] for which files are visited).
//!
//! Output is ripgrep's `-n` format: `path:line:text` for a matching line, and with `context`
//! `path-line-text` for a context line and `--` between groups that are not adjacent (also
//! between files). `path` is relative to the searched directory, or the argument as written
//! when a single file is searched; a file named that way is searched whatever the glob, the
//! ignore files and the hidden rule say, as ripgrep does (binary detection still applies). Files come in sorted order, lines in file order. A line
//! longer than [`MAX_LINE_BYTES`] is cut with a marker saying how much was left out, so that
//! one minified file cannot flood the model. Invalid UTF-8 is replaced, never refused.
//!
//! **Speed.** Like ripgrep: a parallel walk, one `Searcher` (with its read buffer) and one
//! matcher per walker thread, binary files detected by a NUL byte and abandoned. From a warm
//! index ([`crate::index::roots`]) the walk is skipped and only the files its trigram index
//! says can match are read, on the same threads; the answer is the same. Each file's
//! output is built once, straight into its final text; the only sort is of whole files.
//!
//! **Truncation and determinism.** `max_results` counts matching lines. The walk stops once
//! `max_results + 1` matching lines were found (the extra one proves there are more), and a
//! file's search stops once the whole search has enough. The files found are then sorted and
//! the output cut after the `max_results`-th matching line. When nothing was cut the answer is
//! the same on every run; when something was, which files made it in depends on which walker
//! threads got there first, so two runs may differ (`truncated: true` either way). We chose
//! bounded work over a deterministic prefix, which would need every file searched: a cut
//! answer is a sign to narrow the search, as the tool description tells the model.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkState;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use toold_protocol::sync::LockUnpoisoned;
use toold_protocol::{ErrorType, Safety, ToolDefinition};

use crate::index::plan;
use crate::index::roots::Indexes;

use super::walk::{self, Budget, CancelCheck, FileFilter, MAX_RESULTS, Start, ThreadResults};
use super::{
    JudgedArguments, Reads, StopReading, Tool, ToolContext, ToolFailure, ToolFuture, ToolOutcome,
    ToolSuccess, builtin_definition, parse_args,
};

/// How many matching lines a call returns when it does not say.
pub(crate) const DEFAULT_MAX_RESULTS: usize = 500;
/// The most bytes of one line shown; the rest is replaced by a marker.
pub(crate) const MAX_LINE_BYTES: usize = 1000;
/// The most context lines a call may ask for on each side of a match: beyond this the output
/// is mostly context, and `read_file` is the better tool.
pub(crate) const MAX_CONTEXT_LINES: usize = 50;
/// The most memory one walker thread's searcher may take for its buffer. Lines are searched
/// whole, so a file of one 4 GiB line would otherwise be read into memory whole; past this the
/// file is skipped (counted in `skipped`), as ripgrep skips a file it cannot read.
pub(crate) const SEARCH_HEAP_LIMIT: usize = 32 * 1024 * 1024;

pub(crate) struct SearchCode {
    pub indexes: Arc<Indexes>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    context: usize,
    #[serde(default = "default_max_results")]
    max_results: usize,
}

fn default_max_results() -> usize {
    DEFAULT_MAX_RESULTS
}

impl Tool for SearchCode {
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::Path {
            argument: "path",
            reads: Reads::Contents,
            writes: false,
            one_file: false,
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "search_code",
            "Searches file contents for a regular expression (Rust regex syntax, \
            as ripgrep) under a directory, or in one file. Prints `path:line:text` for \
            every matching line, with `path` relative to the searched directory; context \
            lines print as `path-line-text` and `--` separates groups. Files ignored by \
            .gitignore or .ignore, hidden files (unless the glob names them) and binary \
            files are skipped. Lines over 1000 bytes are cut. When more than max_results \
            lines match, an arbitrary subset of files is shown and `truncated` is true: \
            narrow the pattern, path or glob.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Regular expression, e.g. `fn main`, `impl\\s+Tool\\b`."
                    },
                    "path": {
                        "type": "string",
                        "description": "File or directory to search, absolute or relative to the working directory (default: the working directory)."
                    },
                    "glob": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Only search files whose path matches this glob (gitignore-style: `*.rs`, `src/**/*.ts`, `!*.min.js`)."
                    },
                    "case_insensitive": {
                        "type": "boolean",
                        "description": "Match letters in any case (default false)."
                    },
                    "context": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": MAX_CONTEXT_LINES,
                        "description": "Lines of context to show before and after each match (default 0)."
                    },
                    "max_results": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RESULTS,
                        "description": "Most matching lines to return (default 500)."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            Safety::ReadOnly,
        )
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        let indexes = Arc::clone(&self.indexes);
        Box::pin(async move {
            let args: SearchArgs = parse_args(args)?;
            super::blocking(move || search_code(&args, &ctx, &indexes)).await
        })
    }
}

/// What one file contributed: its output text, ready to be concatenated.
struct FileHits {
    shown: String,
    /// The file's name as it is, when `shown` had to escape it.
    exact: Option<String>,
    text: String,
    /// The end offset in `text` of each matching line (after its newline), where the output
    /// may be cut.
    match_ends: Vec<usize>,
}

fn search_code(args: &SearchArgs, ctx: &ToolContext, indexes: &Indexes) -> ToolOutcome {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(&args.pattern)
        .map_err(|err| ToolFailure::invalid_arguments(format!("invalid regex: {err}")))?;
    let filter = FileFilter::new(args.glob.as_deref())?.hiding(ctx.hidden.clone());
    if args.context > MAX_CONTEXT_LINES {
        return Err(ToolFailure::invalid_arguments(format!(
            "context is at most {MAX_CONTEXT_LINES} lines; use read_file to see more"
        )));
    }
    let searcher = SearcherBuilder::new()
        .line_number(true)
        // As ripgrep does for the files it walks: a NUL byte means binary, and the file is
        // abandoned there (matches before it, in text, are kept).
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .before_context(args.context)
        .after_context(args.context)
        .heap_limit(Some(SEARCH_HEAP_LIMIT))
        .build();
    let start = walk::locate(ctx, args.path.as_deref())?;
    let budget = Budget::new(args.max_results, ctx.env.max_read_bytes);
    let skipped = AtomicUsize::new(0);
    // How the files were found: from the warm index (how many it had read), or a cold walk
    // and why; `None` for one file named.
    let mut index = None;
    let mut hits = match start {
        // A file that a deny rule hides is searched no more when named than when walked.
        Start::File { path, .. } if filter.denies(&path) => Vec::new(),
        Start::File { path, shown } => {
            let mut one = FileSearcher {
                searcher,
                matcher,
                cancel: CancelCheck::new(&ctx.cancel),
                shared: Shared {
                    budget: &budget,
                    skipped: &skipped,
                },
            };
            one.search(&path, Path::new(&shown)).into_iter().collect()
        }
        Start::Directory(root) => {
            // From the warm index: the files the walk would visit that can hold a match.
            let plan = plan::plan(&args.pattern, args.case_insensitive);
            let listed =
                indexes.with_contents(&root, filter.walks_git_dirs(), &plan, |list, selector| {
                    let mut files = Vec::new();
                    walk::walk_listed(list, &filter, &ctx.cancel, |relative, in_list| {
                        if selector.is_none_or(|selector| selector.may_match(in_list.as_os_str())) {
                            files.push(relative.to_owned());
                        }
                        WalkState::Continue
                    });
                    files
                });
            let shared = Mutex::new(Vec::new());
            let visitor = || {
                let mut results = ThreadResults::new(&shared);
                let mut this_thread = FileSearcher {
                    searcher: searcher.clone(),
                    matcher: matcher.clone(),
                    cancel: CancelCheck::new(&ctx.cancel),
                    shared: Shared {
                        budget: &budget,
                        skipped: &skipped,
                    },
                };
                move |path: &Path, relative: &Path| {
                    if let Some(file_hits) = this_thread.search(path, relative) {
                        results.local.push(file_hits);
                    }
                    if this_thread.shared.budget.is_full() {
                        WalkState::Quit
                    } else {
                        WalkState::Continue
                    }
                }
            };
            match &listed {
                Ok(files) => walk::visit_files(&root, files, &ctx.cancel, visitor),
                Err(_) => walk::walk_files(&root, &filter, &ctx.cancel, visitor),
            }
            index = Some(listed.as_ref().map(Vec::len).map_err(|reason| *reason));
            shared.into_inner_unpoisoned()
        }
    };
    hits.sort_unstable_by(|left, right| walk::path_order(&left.shown, &right.shown));
    let assembled = assemble(hits, &budget, args.context > 0);
    let skipped = skipped.into_inner();
    if ctx.cancel.is_cancelled() {
        // The registry reports this as `canceled` or `timeout`, keeping what was found.
        return Err(
            ToolFailure::new(ErrorType::Canceled, "the search was stopped")
                .with_content(assembled.content)
                .with_meta("matches", assembled.matches)
                .with_meta("files", assembled.files)
                .with_meta("truncated", true),
        );
    }
    let mut output = ToolSuccess::new(assembled.content)
        .with_meta("matches", assembled.matches)
        .with_meta("files", assembled.files)
        .with_meta("truncated", assembled.truncated);
    if skipped > 0 {
        output = output.with_meta("skipped", skipped);
    }
    if let Some(index) = index {
        output = walk::with_index_metadata(output, index.err());
        if let Ok(read) = index {
            output = output.with_meta("index_files_read", read);
        }
    }
    if !assembled.escaped.is_empty() {
        output = output.with_meta("escaped_paths", assembled.escaped);
    }
    Ok(output)
}

/// What every file's search shares: the answer's budget, and the count of files that could not
/// be searched (unreadable, or a line over [`SEARCH_HEAP_LIMIT`]).
struct Shared<'a> {
    budget: &'a Budget,
    skipped: &'a AtomicUsize,
}

/// One thread's search of files: its own searcher, matcher and cancel check, and what every
/// thread of the search shares.
struct FileSearcher<'a> {
    searcher: Searcher,
    matcher: RegexMatcher,
    cancel: CancelCheck<'a>,
    shared: Shared<'a>,
}

impl FileSearcher<'_> {
    /// Searches one file, shown as `name`; `None` when nothing matched or it could not be
    /// read (skipped and counted, as ripgrep skips it with a warning).
    fn search(&mut self, path: &Path, name: &Path) -> Option<FileHits> {
        let Self {
            searcher,
            matcher,
            cancel,
            shared,
        } = self;
        // Borrowed for the UTF-8 paths that nearly all are: most files match nothing, and their
        // search should cost no allocation.
        let shown = walk::shown_path(name);
        let mut sink = HitSink {
            shown: &shown,
            text: String::new(),
            match_ends: Vec::new(),
            budget: shared.budget,
            cancel,
        };
        // A large file is read only while the call goes on (`StopReading`).
        let searched = std::fs::File::open(path).and_then(|file| {
            let reader = StopReading::new(file, sink.cancel.token());
            searcher.search_reader(&*matcher, reader, &mut sink)
        });
        let HitSink {
            text, match_ends, ..
        } = sink;
        if searched.is_err() {
            shared.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if match_ends.is_empty() {
            return None;
        }
        let exact = match &shown {
            Cow::Owned(shown) => walk::exact_name(name, shown),
            Cow::Borrowed(_) => None,
        };
        Some(FileHits {
            shown: shown.into_owned(),
            exact,
            text,
            match_ends,
        })
    }
}

/// Writes one file's matches and context lines in ripgrep's format, and counts matching lines
/// and bytes into the search-wide budget so that every file stops once the search has enough.
struct HitSink<'a, 'c> {
    shown: &'a str,
    text: String,
    match_ends: Vec<usize>,
    budget: &'a Budget,
    cancel: &'a mut CancelCheck<'c>,
}

impl Sink for HitSink<'_, '_> {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first_line = found.line_number().unwrap_or(0);
        let before = self.text.len();
        let mut lines = 0;
        // Without multi-line search a match is one line; a multi-line one is shown line by line.
        for line in found.lines() {
            write_line(&mut self.text, self.shown, b':', first_line + lines, line);
            self.match_ends.push(self.text.len());
            lines += 1;
        }
        let lines = usize::try_from(lines).unwrap_or(usize::MAX);
        let full = self.budget.take(lines, self.text.len() - before);
        Ok(!full && !self.cancel.is_cancelled())
    }

    fn context(&mut self, _searcher: &Searcher, line: &SinkContext<'_>) -> Result<bool, io::Error> {
        let line_number = line.line_number().unwrap_or(0);
        let before = self.text.len();
        write_line(&mut self.text, self.shown, b'-', line_number, line.bytes());
        Ok(!self.budget.take(0, self.text.len() - before))
    }

    fn context_break(&mut self, _searcher: &Searcher) -> Result<bool, io::Error> {
        self.text.push_str("--\n");
        Ok(!self.budget.take(0, 3))
    }
}

/// Appends `path{sep}line{sep}text\n`, the text without its line ending, cut to
/// [`MAX_LINE_BYTES`] at a character boundary, invalid UTF-8 replaced.
fn write_line(out: &mut String, shown: &str, separator: u8, line_number: u64, line: &[u8]) {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let separator = char::from(separator);
    out.push_str(shown);
    out.push(separator);
    // Writing into a String cannot fail.
    let _ = write!(out, "{line_number}");
    out.push(separator);
    if line.len() <= MAX_LINE_BYTES {
        push_lossy(out, line);
    } else {
        let mut cut = MAX_LINE_BYTES;
        // Back up to the start of a UTF-8 character (at most 3 continuation bytes).
        while cut > MAX_LINE_BYTES - 3 && is_utf8_continuation(line[cut]) {
            cut -= 1;
        }
        push_lossy(out, &line[..cut]);
        let _ = write!(out, " […{} more bytes of this line cut]", line.len() - cut);
    }
    out.push('\n');
}

fn is_utf8_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

fn push_lossy(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// The final output: files in order, cut after the `max_results`-th matching line, or after
/// the last matching line that keeps it within the budget's bytes.
struct Assembled {
    content: String,
    matches: usize,
    files: usize,
    truncated: bool,
    /// Escaped names shown → the names as they are.
    escaped: Map<String, Value>,
}

fn assemble(hits: Vec<FileHits>, budget: &Budget, separate_files: bool) -> Assembled {
    let total: usize = hits.iter().map(|file| file.match_ends.len()).sum();
    let mut content = String::new();
    let mut matches = 0;
    let mut files = 0;
    let mut escaped = Map::new();
    let mut cut = false;
    for file in hits {
        let separator = if separate_files && files > 0 {
            "--\n"
        } else {
            ""
        };
        let room_items = budget.max_items() - matches;
        let room_bytes = budget
            .max_bytes()
            .saturating_sub(content.len() + separator.len());
        let fitting = file
            .match_ends
            .iter()
            .take(room_items)
            .take_while(|&&end| end <= room_bytes)
            .count();
        if fitting == 0 {
            break;
        }
        content.push_str(separator);
        // A whole file that fits keeps its trailing context lines; else the cut is after a
        // matching line.
        let end = if fitting == file.match_ends.len() && file.text.len() <= room_bytes {
            file.text.len()
        } else {
            file.match_ends[fitting - 1]
        };
        cut |= end < file.text.len();
        content.push_str(&file.text[..end]);
        matches += fitting;
        files += 1;
        if let Some(exact) = file.exact {
            escaped.insert(file.shown, Value::from(exact));
        }
        if fitting < file.match_ends.len() {
            break;
        }
    }
    // The lines are newline-terminated as they are built; the answer's last one is not.
    if content.ends_with('\n') {
        content.pop();
    }
    Assembled {
        content,
        matches,
        files,
        truncated: total > matches || cut,
        escaped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_at_a_character_boundary_with_a_marker() {
        let mut line = "é".repeat(MAX_LINE_BYTES);
        line.push('\n');
        let mut out = String::new();
        write_line(&mut out, "a.txt", b':', 7, line.as_bytes());
        let shown = out.strip_prefix("a.txt:7:").unwrap();
        assert!(shown.starts_with(&"é".repeat(MAX_LINE_BYTES / 2)));
        assert!(
            shown.ends_with(" […1000 more bytes of this line cut]\n"),
            "{shown}"
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_and_crlf_dropped() {
        let mut out = String::new();
        write_line(&mut out, "b", b'-', 1, b"a\xffb\r\n");
        assert_eq!(out, "b-1-a\u{fffd}b\n");
    }
}
