//! What `find_files` and `search_code` share: where a search starts, which files it visits
//! (ignore files, hidden files, the glob filter), a parallel walk that stops early, and the
//! order results are shown in.
//!
//! File selection follows ripgrep, with one deliberate difference. `.gitignore`, `.ignore` and
//! `.git/info/exclude` apply whether or not the tree is a git repository (`require_git(false)`),
//! and parent directories' ignore files apply too. A glob filter uses ripgrep's `-g` syntax and
//! matching (gitignore-style: without a `/` it matches the file name at any depth, `*` stays
//! within one component, `**` crosses them, `!` negates), but unlike `rg -g` it never
//! *un-ignores* a file: docs/protocol.md says these tools honour ignore files, so a glob only
//! narrows what the ignore rules let through. Hidden entries (a name starting with `.`) are
//! skipped unless the glob names one, in which case they are walked, except `.git` directories
//! unless the glob names `.git` itself: nobody searching for `.github/**` wants git's object store.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{self, AtomicUsize};

use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, WalkState};
use tokio_util::sync::CancellationToken;
use toold_protocol::ErrorType;

use super::{HiddenPaths, ToolContext, ToolFailure, ToolSuccess};
use crate::index::files::{self, Listing};
pub(crate) use crate::index::files::{ThreadResults, path_order, relative_to, walk_threads};
use crate::index::roots::ColdReason;

/// How many checks [`CancelCheck`] lets pass between two looks at the token.
const CANCEL_CHECK_EVERY: u32 = 64;

/// Where a search starts, after the path argument was resolved and looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A directory (symlinks followed): results are shown relative to it.
    Directory(PathBuf),
    /// A single file (symlinks followed); `shown` is how results name it: the argument as
    /// written, without a leading `./`.
    File { path: PathBuf, shown: String },
}

/// Resolves a path argument (default: the session cwd) and finds out what it is.
/// A missing path is `not_found`; any other failure to look at it is `io_error`; anything but
/// a directory or a regular file is `invalid_arguments`.
pub(crate) fn locate(ctx: &ToolContext, raw: Option<&str>) -> Result<Start, ToolFailure> {
    let raw = raw.unwrap_or(".");
    let resolved = ctx.resolve_path(raw).resolved;
    let metadata = std::fs::metadata(&resolved)
        .map_err(|err| ToolFailure::io(Path::new(raw), "read", &err))?;
    if metadata.is_dir() {
        Ok(Start::Directory(resolved))
    } else if metadata.is_file() {
        Ok(Start::File {
            path: resolved,
            shown: strip_dot_slash(raw).to_owned(),
        })
    } else {
        // A FIFO or a device could block the search forever or never end (`/dev/zero`).
        Err(ToolFailure::invalid_arguments(format!(
            "{raw} is neither a directory nor a regular file"
        )))
    }
}

/// Like [`locate`], for tools that need a directory: a file is refused with a message that
/// says what to do instead.
pub(crate) fn locate_directory(
    ctx: &ToolContext,
    raw: Option<&str>,
    tool: &str,
) -> Result<PathBuf, ToolFailure> {
    match locate(ctx, raw)? {
        Start::Directory(path) => Ok(path),
        Start::File { shown, .. } => Err(ToolFailure::new(
            ErrorType::InvalidArguments,
            format!(
                "{shown} is a file, not a directory; {tool} needs a directory as path \
                 (pass its parent directory, or read the file with read_file)"
            ),
        )),
    }
}

fn strip_dot_slash(mut raw: &str) -> &str {
    while let Some(rest) = raw.strip_prefix("./") {
        raw = rest.trim_start_matches('/');
    }
    if raw.is_empty() { "." } else { raw }
}

/// Which files and directories a walk lets through, beyond the ignore files.
pub(crate) struct FileFilter {
    glob: Override,
    walk_hidden: bool,
    walk_git_dirs: bool,
    /// What deny rules hide (the call's [`ToolContext::hidden`]).
    denied: Option<Arc<dyn HiddenPaths>>,
}

impl FileFilter {
    /// A filter for an optional glob (ripgrep `-g` syntax). A glob that does not parse is
    /// `invalid_arguments`, with the parser's reason.
    pub(crate) fn new(glob: Option<&str>) -> Result<Self, ToolFailure> {
        let Some(glob) = glob else {
            return Ok(Self {
                glob: Override::empty(),
                walk_hidden: false,
                walk_git_dirs: false,
                denied: None,
            });
        };
        // The root only serves to strip absolute paths; we always match relative ones.
        let mut builder = OverrideBuilder::new("");
        builder
            .add(glob)
            .map_err(|err| ToolFailure::invalid_arguments(format!("invalid glob: {err}")))?;
        let compiled = builder
            .build()
            .map_err(|err| ToolFailure::invalid_arguments(format!("invalid glob: {err}")))?;
        Ok(Self {
            glob: compiled,
            walk_hidden: names_hidden(glob),
            walk_git_dirs: glob.split(['/', '{', ',', '}']).any(|part| part == ".git"),
            denied: None,
        })
    }

    /// Also skips what the call's deny rules hide: such a file is never visited, such a
    /// directory never entered (the walk's root included).
    pub(crate) fn hiding(mut self, denied: Option<Arc<dyn HiddenPaths>>) -> Self {
        self.denied = denied;
        self
    }

    /// Whether a deny rule hides the file or directory at `path` (absolute).
    pub(crate) fn denies(&self, path: &Path) -> bool {
        self.denied
            .as_ref()
            .is_some_and(|denied| denied.hides(path))
    }

    /// Whether the file at `relative` (to the walk's root) is selected by the glob.
    pub(crate) fn selects_file(&self, relative: &Path) -> bool {
        // With a positive glob every file it does not match comes back as an ignore match;
        // with a negated one only the files it names do. Either way: selected unless ignored.
        !self.glob.matched(relative, false).is_ignore()
    }

    /// Whether the walk enters `.git` directories (the glob names `.git`).
    pub(crate) fn walks_git_dirs(&self) -> bool {
        self.walk_git_dirs
    }

    /// Whether a directory below the root should not be descended into.
    fn prunes_directory(&self, entry: &DirEntry, relative: &Path) -> bool {
        if !self.walk_git_dirs && entry.file_name() == ".git" {
            return true;
        }
        // Only a negated glob (`!vendor`) can ignore a directory; a positive one never does.
        self.glob.matched(relative, true).is_ignore()
    }
}

/// Whether a glob names a hidden entry: one of its components (or brace alternatives) starts
/// with a `.` that is not just `.` or `..`. `*.rs` does not; `.github/**`, `**/.env` and
/// `{.*,x}` do.
pub(crate) fn names_hidden(glob: &str) -> bool {
    glob.trim_start_matches('!')
        .split(['/', '{', ',', '}'])
        .any(|part| part.starts_with('.') && part != "." && part != "..")
}

/// Walks `root` in parallel and calls a per-thread visitor for every regular file that the
/// ignore rules and `filter` let through, with its absolute path and its path relative to
/// `root`. `make_visitor` is called once per walker thread, so a visitor can keep its own
/// buffers and searcher. A visitor returns [`WalkState::Quit`] to stop the whole walk (when
/// enough was found); the walk also stops when `cancel` fires.
///
/// Symlinks are not followed and only regular files are visited, as in ripgrep.
pub(crate) fn walk_files<'s, B, V>(
    root: &'s Path,
    filter: &'s FileFilter,
    cancel: &'s CancellationToken,
    mut make_visitor: B,
) where
    B: FnMut() -> V,
    V: FnMut(&Path, &Path) -> WalkState + Send + 's,
{
    let walker = files::walker(root, !filter.walk_hidden)
        .threads(walk_threads())
        .build_parallel();
    walker.run(|| {
        let mut visit = make_visitor();
        let mut cancel = CancelCheck::new(cancel);
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            // An unreadable directory or file is skipped, as ripgrep does (it only warns).
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            let Some(file_type) = entry.file_type() else {
                return WalkState::Continue;
            };
            let Some(relative) = relative_to(entry.path(), root) else {
                return WalkState::Continue;
            };
            if file_type.is_dir() {
                if (entry.depth() > 0 && filter.prunes_directory(&entry, relative))
                    || filter.denies(entry.path())
                {
                    return WalkState::Skip;
                }
                return WalkState::Continue;
            }
            if !file_type.is_file() || !filter.selects_file(relative) || filter.denies(entry.path())
            {
                return WalkState::Continue;
            }
            visit(entry.path(), relative)
        })
    });
}

/// Visits, from a warm file list seen from the walk's root, exactly the files [`walk_files`]
/// would visit from that root with `filter` (the list holds what the walk decides with hidden
/// entries shown: this leaves out what `filter` leaves out), with their paths relative to the
/// root and to the list's own root; on the calling thread, in the order paths are shown
/// ([`path_order`]). Stops when `visit` returns [`WalkState::Quit`] or `cancel` fires.
pub(crate) fn walk_listed(
    listing: &Listing<'_>,
    filter: &FileFilter,
    cancel: &CancellationToken,
    mut visit: impl FnMut(&Path, &Path) -> WalkState,
) {
    let root = listing.root();
    if filter.denies(root) {
        return;
    }
    let mut cancel = CancelCheck::new(cancel);
    // Joined onto the root only when deny rules need the absolute path.
    let denied = |relative: &Path| filter.denied.is_some() && filter.denies(&root.join(relative));
    listing.walk(
        &mut |relative, _, hidden| {
            (filter.walk_hidden || !hidden)
                && !filter.glob.matched(relative, true).is_ignore()
                && !denied(relative)
        },
        |relative, in_list, _, hidden| {
            if cancel.is_cancelled() {
                return false;
            }
            if (!filter.walk_hidden && hidden) || !filter.selects_file(relative) || denied(relative)
            {
                return true;
            }
            !matches!(visit(relative, in_list), WalkState::Quit)
        },
    );
}

/// Calls a per-thread visitor, as [`walk_files`] does, for each of `files` (paths relative
/// to `root`, from the warm index), with its absolute and relative path, on the walk's
/// threads (on this one for a few files: threads cost more than they save there). Stops when
/// a visitor returns [`WalkState::Quit`] or `cancel` fires.
pub(crate) fn visit_files<'s, B, V>(
    root: &Path,
    files: &[PathBuf],
    cancel: &CancellationToken,
    mut make_visitor: B,
) where
    B: FnMut() -> V,
    V: FnMut(&Path, &Path) -> WalkState + Send + 's,
{
    /// Fewer files than this are searched on the calling thread.
    const FILES_PER_THREAD: usize = 32;
    let next = AtomicUsize::new(0);
    let quit = std::sync::atomic::AtomicBool::new(false);
    let run = |mut visit: V| {
        let mut check = CancelCheck::new(cancel);
        loop {
            let at = next.fetch_add(1, atomic::Ordering::Relaxed);
            if at >= files.len() || quit.load(atomic::Ordering::Relaxed) || check.is_cancelled() {
                return;
            }
            let relative = &files[at];
            if matches!(visit(&root.join(relative), relative), WalkState::Quit) {
                quit.store(true, atomic::Ordering::Relaxed);
                return;
            }
        }
    };
    let threads = walk_threads()
        .min(files.len().div_ceil(FILES_PER_THREAD))
        .max(1);
    if threads == 1 {
        run(make_visitor());
        return;
    }
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let visit = make_visitor();
            let run = &run;
            scope.spawn(move || run(visit));
        }
    });
}

/// Says in `output`'s metadata how its files were found: `index` is `warm` when from the warm
/// index, `cold` (with `index_reason`) when from a walk.
pub(crate) fn with_index_metadata(output: ToolSuccess, cold: Option<ColdReason>) -> ToolSuccess {
    match cold {
        None => output.with_meta("index", "warm"),
        Some(reason) => output
            .with_meta("index", "cold")
            .with_meta("index_reason", reason.as_str()),
    }
}

/// Looks at a cancellation token only every `CANCEL_CHECK_EVERY` calls (and on the first).
/// The token takes a lock shared by every thread of the walk; looking at it for each file or
/// matching line made the threads contend. Stopping a few dozen files late costs microseconds.
pub(crate) struct CancelCheck<'a> {
    token: &'a CancellationToken,
    countdown: u32,
}

impl<'a> CancelCheck<'a> {
    pub(crate) fn new(token: &'a CancellationToken) -> Self {
        Self {
            token,
            countdown: 0,
        }
    }

    pub(crate) fn token(&self) -> &'a CancellationToken {
        self.token
    }

    pub(crate) fn is_cancelled(&mut self) -> bool {
        if self.countdown == 0 {
            self.countdown = CANCEL_CHECK_EVERY;
            self.token.is_cancelled()
        } else {
            self.countdown -= 1;
            false
        }
    }
}

/// A path relative to the walk's root as the text output shows it: non-UTF-8 bytes replaced,
/// and control characters escaped (`\n`, `\r`, `\t`, `\x1b`), since a newline in a file name
/// would otherwise forge a line of the output. Borrowed for the names that need neither.
pub fn shown_path(relative: &Path) -> Cow<'_, str> {
    let lossy = relative.to_string_lossy();
    if !lossy.chars().any(breaks_a_line) {
        return lossy;
    }
    let mut shown = String::with_capacity(lossy.len() + 8);
    for c in lossy.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            // Every control character is at most U+009F.
            c if c.is_control() => shown.push_str(&format!("\\x{:02x}", u32::from(c))),
            c if breaks_a_line(c) => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// Control characters, and the line and paragraph separators that JSON readers and many
/// languages' line splitting treat as line breaks.
fn breaks_a_line(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// The name exactly ([`crate::paths::exact_text`]: a byte that is not UTF-8 as `\xHH`, a
/// backslash then as `\\`) when `shown` differs from it, for the metadata that gives escaped
/// names exactly.
pub(crate) fn exact_name(relative: &Path, shown: &str) -> Option<String> {
    let exact = crate::paths::exact_text(relative);
    (exact != shown).then(|| exact.into_owned())
}

/// The most results (`max_results`) a call of `find_files` or `search_code` may ask for. With
/// the byte budget ([`Budget`]) it bounds what one call holds.
pub(crate) const MAX_RESULTS: usize = 1_000_000;

/// What a listing may still take, shared by the walk's threads: it counts items (paths,
/// matching lines) and bytes of output, and is full once either passes its maximum (the extra
/// item or byte proves the answer is cut), so that every thread stops.
pub(crate) struct Budget {
    items: AtomicUsize,
    bytes: AtomicUsize,
    max_items: usize,
    max_bytes: usize,
}

impl Budget {
    pub(crate) fn new(max_items: usize, max_bytes: usize) -> Self {
        Self {
            items: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_items,
            max_bytes,
        }
    }

    /// Records `items` and `bytes` more; whether the budget is now full.
    pub(crate) fn take(&self, items: usize, bytes: usize) -> bool {
        let items = self
            .items
            .fetch_add(items, atomic::Ordering::Relaxed)
            .saturating_add(items);
        let bytes = self
            .bytes
            .fetch_add(bytes, atomic::Ordering::Relaxed)
            .saturating_add(bytes);
        items > self.max_items || bytes > self.max_bytes
    }

    pub(crate) fn is_full(&self) -> bool {
        self.take(0, 0)
    }

    pub(crate) fn max_items(&self) -> usize {
        self.max_items
    }

    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_control_characters_are_escaped() {
        assert!(matches!(
            shown_path(Path::new("src/a b.rs")),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            shown_path(Path::new("evil\nx.rs:1:fake")),
            "evil\\nx.rs:1:fake"
        );
        assert_eq!(
            shown_path(Path::new("a\r\t\x1b\u{85}")),
            "a\\r\\t\\x1b\\x85"
        );
        let escaped = shown_path(Path::new("a\nb"));
        assert_eq!(
            exact_name(Path::new("a\nb"), &escaped).as_deref(),
            Some("a\nb")
        );
    }

    #[test]
    fn a_budget_is_full_past_either_maximum() {
        let budget = Budget::new(2, 100);
        assert!(!budget.take(2, 100));
        assert!(budget.take(1, 0));
        let budget = Budget::new(10, 100);
        assert!(!budget.take(1, 60));
        assert!(budget.take(1, 41));
        assert!(budget.is_full());
    }

    #[test]
    fn hidden_is_named_only_by_a_component_starting_with_a_dot() {
        for glob in [
            ".github/**",
            "**/.env",
            ".*",
            "{.*,x}",
            "src/.config",
            "!.x",
        ] {
            assert!(names_hidden(glob), "{glob}");
        }
        for glob in [
            "*.rs",
            "**/*.cpp",
            "./src/*.rs",
            "../x/*",
            "a.b/c",
            "*.d.ts",
        ] {
            assert!(!names_hidden(glob), "{glob}");
        }
    }

    #[test]
    fn paths_sort_component_by_component() {
        let mut paths = vec!["a-b/x", "a/x", "a/b/c", "a.rs", "b"];
        paths.sort_by(|l, r| path_order(l, r));
        assert_eq!(paths, ["a/b/c", "a/x", "a-b/x", "a.rs", "b"]);
    }

    #[test]
    fn relative_paths_are_byte_suffixes_of_the_root() {
        let root = Path::new("/a/b");
        assert_eq!(
            relative_to(Path::new("/a/b/c/d"), root),
            Some(Path::new("c/d"))
        );
        assert_eq!(relative_to(Path::new("/a/b"), root), Some(Path::new("")));
        assert_eq!(relative_to(Path::new("/a/bc"), root), None);
        assert_eq!(
            relative_to(Path::new("/x"), Path::new("/")),
            Some(Path::new("x"))
        );
    }

    #[test]
    fn cancellation_is_seen_on_the_first_check_and_then_every_few() {
        let token = CancellationToken::new();
        let mut check = CancelCheck::new(&token);
        assert!(!check.is_cancelled());
        token.cancel();
        let seen_after = (1..=CANCEL_CHECK_EVERY + 1).find(|_| check.is_cancelled());
        assert_eq!(seen_after, Some(CANCEL_CHECK_EVERY + 1));
        assert!(CancelCheck::new(&token).is_cancelled());
    }

    #[test]
    fn a_leading_dot_slash_is_not_shown() {
        assert_eq!(strip_dot_slash("./src/main.rs"), "src/main.rs");
        assert_eq!(strip_dot_slash("././a"), "a");
        assert_eq!(strip_dot_slash("./"), ".");
        assert_eq!(strip_dot_slash("/abs/x"), "/abs/x");
    }
}
