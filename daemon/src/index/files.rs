//! The file list of a watched root: every directory the cold walk of `find_files` and
//! `search_code` would enter and every file it would visit, as that walk decides, kept current
//! from the root watch's changes.
//!
//! The list is made with hidden entries shown (a query that hides them leaves them out as it
//! goes) and `.git` directories never entered (a query whose glob names `.git` takes the cold
//! walk). Each directory is watched before it is read ([`RootWatch::watch_dir`] from the
//! walker's entry filter, which runs before the walker reads the directory it lets through).
//!
//! **Applying changes.** A changed path either is a directory of the list (deleted, moved,
//! replaced, its mode changed) or names an ignore file or a `.git`: then that directory's
//! whole subtree is taken out and the directory decided again from its parent's listing; or
//! it is anything else, and its parent's own entries are listed again (a walk of depth one,
//! with the same ignore rules as the full walk: the walker reads the parents' ignore files). A
//! directory that appears in a listing and is not in the list yet is walked whole. Every
//! decision is the walker's own, so the list is what a cold walk would find now; which hidden
//! names a `!` rule shows is asked of it too (`Dir::shown_hidden`). The files it reads rules
//! from whose changes no watch reports (symlinked or hard-linked ignore files, a `.git` that
//! leads elsewhere) are handed to the caller to look at ([`FileList::linked_ignores`]).

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ignore::{WalkBuilder, WalkState};
use toold_protocol::sync::LockUnpoisoned;

use super::watch::RootWatch;

/// The walk every file search makes from `start`: ignore files as ripgrep reads them
/// (`.gitignore`, `.ignore`, `.git/info/exclude`, the global excludes file, the parents'
/// too), whether or not the tree is a git repository; symlinks not followed. `skip_hidden`
/// leaves out entries whose name starts with a dot.
pub(crate) fn walker(start: &Path, skip_hidden: bool) -> WalkBuilder {
    let mut builder = WalkBuilder::new(start);
    builder
        .hidden(skip_hidden)
        .require_git(false)
        .follow_links(false);
    builder
}

/// The ignore files the walker reads in each directory: a change to one changes what the
/// walk decides for the directory's whole subtree.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];

/// What one file of the list is reckoned to take (its name's bytes come on top).
const FILE_BYTES: usize = 48;
/// What one directory of the list is reckoned to take (its path's bytes come on top).
const DIR_BYTES: usize = 160;

/// One directory's entries that the walk lets through.
#[derive(Default, Debug)]
struct Dir {
    files: BTreeSet<OsString>,
    subdirs: BTreeSet<OsString>,
    /// The hidden names among them that a walk skipping hidden entries still shows: an
    /// ignore file's `!` rule names them (the walker hides a name only when no rule matched).
    shown_hidden: BTreeSet<OsString>,
}

/// Why a walk of the list stopped short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The list grew past the memory it may take.
    OverBudget,
    /// Asked to stop (the index was dropped).
    Asked,
}

/// Bounds on a walk: the memory the list may take, and a flag that stops it.
#[derive(Clone)]
pub struct Limits {
    pub max_bytes: usize,
    pub stop: Arc<AtomicBool>,
}

/// The files and directories of a root.
#[derive(Debug)]
pub(crate) struct FileList {
    root: PathBuf,
    /// Every directory entered, by its path relative to the root (the root's is empty), as
    /// bytes: hashed and compared as bytes, not component by component as a `Path` is.
    dirs: HashMap<OsString, Dir>,
    files: usize,
    bytes: usize,
    /// The `.git` directories met, whose `info/exclude` the watch cannot see.
    git_dirs: BTreeSet<PathBuf>,
    /// Files the walker reads ignore rules from whose changes the watch does not report under
    /// their name (absolute; see [`read_elsewhere`]).
    linked_ignores: BTreeSet<PathBuf>,
    /// Files put in the list by a walk since [`Self::take_added`] was last called (relative):
    /// their contents may be other than any index of contents read.
    added: Vec<OsString>,
}

/// An entry a walk found, relative to the root.
enum Found {
    Dir(PathBuf),
    File(PathBuf),
    /// A file ignore rules are read from elsewhere (absolute; see [`read_elsewhere`]).
    LinkedIgnore(PathBuf),
}

impl FileList {
    /// Walks `root` whole, watching each directory before it is read.
    pub(crate) fn build(
        root: &Path,
        watch: &Arc<Mutex<RootWatch>>,
        limits: &Limits,
    ) -> Result<Self, Stopped> {
        let mut list = Self {
            root: root.to_owned(),
            dirs: HashMap::new(),
            files: 0,
            bytes: 0,
            git_dirs: BTreeSet::new(),
            linked_ignores: BTreeSet::new(),
            added: Vec::new(),
        };
        list.walk_subtree(Path::new(""), watch, limits)?;
        list.added.clear();
        Ok(list)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// How many files the list holds.
    pub(crate) fn files(&self) -> usize {
        self.files
    }

    /// About how much memory the list takes.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.bytes
    }

    /// The `.git` directories under the root (absolute), whose contents are not watched.
    pub(crate) fn git_dirs(&self) -> impl Iterator<Item = &Path> {
        self.git_dirs.iter().map(PathBuf::as_path)
    }

    /// The files ignore rules are read from that the watch does not see change (absolute).
    pub(crate) fn linked_ignores(&self) -> impl Iterator<Item = &Path> {
        self.linked_ignores.iter().map(PathBuf::as_path)
    }

    /// The files walks put in the list since the last call (relative to the root).
    pub(crate) fn take_added(&mut self) -> Vec<OsString> {
        std::mem::take(&mut self.added)
    }

    /// Whether the walk entered the directory at `relative`.
    pub(crate) fn holds_dir(&self, relative: &Path) -> bool {
        self.dirs.contains_key(relative.as_os_str())
    }

    /// Visits the list as a walk would: from the root down, `enter` saying for each directory
    /// (its path relative to the root, and its name) whether to go in, `visit` getting each
    /// file of an entered directory (its path relative to the root, and its name) and saying
    /// whether to go on. Entries come in the order toold shows paths (component by component,
    /// each by its bytes), so that a listing made from them is sorted already.
    pub(crate) fn walk(
        &self,
        mut enter: impl FnMut(&Path, &OsStr) -> bool,
        mut visit: impl FnMut(&Path, &OsStr) -> bool,
    ) {
        Listing::new(self, Path::new("")).walk(
            &mut |relative, name, _| enter(relative, name),
            |relative, _, name, _| visit(relative, name),
        );
    }

    /// The walk below the directory at `path` (relative to the list's root, as bytes: a name
    /// is pushed and cut off again without `PathBuf::pop`'s parsing of components): its files
    /// and subdirectories merged by name. The callbacks see paths without their first `skip`
    /// bytes (relative to the listing's base), and whether a walk that skips hidden entries
    /// leaves the entry out; `visit` also gets the path from the root.
    fn walk_from(
        &self,
        path: &mut Vec<u8>,
        skip: usize,
        enter: &mut impl FnMut(&Path, &OsStr, bool) -> bool,
        visit: &mut impl FnMut(&Path, &Path, &OsStr, bool) -> bool,
    ) -> bool {
        let Some(dir) = self.dirs.get(OsStr::from_bytes(path)) else {
            return true;
        };
        let length = path.len();
        let mut files = dir.files.iter().peekable();
        let mut subdirs = dir.subdirs.iter().peekable();
        loop {
            let (name, is_dir) = match (files.peek(), subdirs.peek()) {
                (Some(file), Some(subdir)) if file < subdir => (files.next(), false),
                (Some(_), Some(_)) | (None, Some(_)) => (subdirs.next(), true),
                (Some(_), None) => (files.next(), false),
                (None, None) => return true,
            };
            let name = name.expect("peeked").as_os_str();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name.as_bytes());
            let relative = Path::new(OsStr::from_bytes(&path[skip..]));
            let hidden = is_hidden(name) && !dir.shown_hidden.contains(name);
            let go_on = if is_dir {
                !enter(relative, name, hidden) || self.walk_from(path, skip, enter, visit)
            } else {
                visit(relative, Path::new(OsStr::from_bytes(path)), name, hidden)
            };
            path.truncate(length);
            if !go_on {
                return false;
            }
        }
    }

    /// Brings the list up to date with the paths the watch reported changed (absolute).
    /// Directories that appeared are walked, watched first.
    pub(crate) fn apply(
        &mut self,
        changed: &BTreeSet<PathBuf>,
        watch: &Arc<Mutex<RootWatch>>,
        limits: &Limits,
    ) -> Result<(), Stopped> {
        let mut redo = BTreeSet::new();
        let mut relist = BTreeSet::new();
        for path in changed {
            let Some(relative) = relative_to(path, &self.root) else {
                continue;
            };
            let parent = relative.parent().unwrap_or(Path::new(""));
            if self.dirs.contains_key(relative.as_os_str()) {
                redo.insert(relative.to_owned());
            } else if relative.file_name().is_some_and(|name| {
                // A `.git` directory that appears or goes brings or takes its `info/exclude`.
                name == ".git" || is_ignore_file(name)
            }) {
                redo.insert(parent.to_owned());
            } else if !relative.as_os_str().is_empty() {
                relist.insert(parent.to_owned());
            }
        }
        if redo.contains(Path::new("")) {
            // The root's own ignore files or mode changed: everything is decided again.
            self.unwatch_subtree(Path::new(""), watch);
            self.dirs.clear();
            self.files = 0;
            self.bytes = 0;
            self.git_dirs.clear();
            self.linked_ignores.clear();
            return self.walk_subtree(Path::new(""), watch, limits);
        }
        // Outermost first: a directory redone takes its subtree with it.
        let mut taken: Vec<PathBuf> = Vec::new();
        for dir in redo {
            if taken.iter().any(|outer| dir.starts_with(outer)) {
                continue;
            }
            self.unwatch_subtree(&dir, watch);
            self.remove_subtree(&dir);
            relist.insert(dir.parent().unwrap_or(Path::new("")).to_owned());
            taken.push(dir);
        }
        // Shallowest first: a listing may walk a new directory whole, which makes listings
        // below it redundant (they find it already current).
        let mut relist: Vec<PathBuf> = relist.into_iter().collect();
        relist.sort_by_key(|dir| dir.components().count());
        for dir in relist {
            if self.dirs.contains_key(dir.as_os_str()) {
                self.relist(&dir, watch, limits)?;
            }
        }
        Ok(())
    }

    /// Lists `dir`'s own entries again (a walk of depth one): its files are replaced, its
    /// subdirectories gone are taken out, its new ones walked whole.
    fn relist(
        &mut self,
        dir: &Path,
        watch: &Arc<Mutex<RootWatch>>,
        limits: &Limits,
    ) -> Result<(), Stopped> {
        let mut found = Vec::new();
        let git_dirs = Arc::new(Mutex::new(Vec::new()));
        let mut builder = walker(&self.root.join(dir), false);
        builder.max_depth(Some(1));
        builder.filter_entry({
            let git_dirs = Arc::clone(&git_dirs);
            move |entry| {
                if is_git_dir(entry) {
                    git_dirs.lock_unpoisoned().push(entry.path().to_owned());
                    return false;
                }
                true
            }
        });
        for entry in builder.build() {
            let Ok(entry) = entry else { continue };
            if entry.depth() == 0 {
                continue;
            }
            let (Some(kind), Some(relative)) =
                (entry.file_type(), relative_to(entry.path(), &self.root))
            else {
                continue;
            };
            if kind.is_dir() {
                found.push(Found::Dir(relative.to_owned()));
            } else if kind.is_file() {
                found.push(Found::File(relative.to_owned()));
            }
            if !kind.is_dir() {
                self.linked_ignores.extend(read_elsewhere(&entry));
            }
        }
        for git_dir in git_dirs.lock_unpoisoned().drain(..) {
            self.git_dirs.insert(git_dir);
        }
        let mut files = BTreeSet::new();
        let mut subdirs = BTreeSet::new();
        for entry in found {
            match entry {
                Found::File(path) => {
                    files.insert(name_of(&path));
                }
                Found::Dir(path) => {
                    subdirs.insert(name_of(&path));
                }
                Found::LinkedIgnore(_) => {}
            }
        }
        let old = self
            .dirs
            .get_mut(dir.as_os_str())
            .expect("a listed directory is in the list");
        let old_files = std::mem::take(&mut old.files);
        let old_subdirs = std::mem::take(&mut old.subdirs);
        for name in &old_files {
            self.files -= 1;
            self.bytes -= FILE_BYTES + name.len();
        }
        for name in &files {
            self.files += 1;
            self.bytes += FILE_BYTES + name.len();
        }
        for name in files.difference(&old_files) {
            self.added.push(dir.join(name).into_os_string());
        }
        let shown_hidden = self.shown_hidden_in(dir, &files, &subdirs);
        let old = self
            .dirs
            .get_mut(dir.as_os_str())
            .expect("a listed directory is in the list");
        old.files = files;
        old.subdirs = subdirs.clone();
        old.shown_hidden = shown_hidden;
        for gone in old_subdirs.difference(&subdirs) {
            let path = dir.join(gone);
            self.unwatch_subtree(&path, watch);
            self.remove_subtree(&path);
        }
        for name in &subdirs {
            let path = dir.join(name);
            if !self.dirs.contains_key(path.as_os_str()) {
                self.walk_subtree(&path, watch, limits)?;
            }
        }
        self.check(limits)
    }

    /// Walks the directory at `start` (relative; the walk has decided to enter it) and all
    /// below it into the list, watching each directory before it is read.
    fn walk_subtree(
        &mut self,
        start: &Path,
        watch: &Arc<Mutex<RootWatch>>,
        limits: &Limits,
    ) -> Result<(), Stopped> {
        let absolute = self.root.join(start);
        // A directory that cannot be watched is either gone (its parent's watch says so) or
        // past the watch limit (the watch asks for a rebuild at its next barrier).
        let _ = watch.lock_unpoisoned().watch_dir(&absolute);
        let found = Mutex::new(Vec::new());
        let git_dirs = Arc::new(Mutex::new(Vec::new()));
        let root = self.root.as_path();
        let grown = AtomicUsize::new(self.bytes);
        {
            let watch = Arc::clone(watch);
            let git_dirs = Arc::clone(&git_dirs);
            let mut builder = walker(&absolute, false);
            builder.threads(walk_threads());
            builder.filter_entry(move |entry| {
                if is_git_dir(entry) {
                    git_dirs.lock_unpoisoned().push(entry.path().to_owned());
                    return false;
                }
                if entry.file_type().is_some_and(|kind| kind.is_dir()) {
                    let _ = watch.lock_unpoisoned().watch_dir(entry.path());
                }
                true
            });
            builder.build_parallel().run(|| {
                let grown = &grown;
                let mut thread = ThreadResults::new(&found);
                Box::new(move |entry| {
                    if limits.stop.load(Ordering::Relaxed)
                        || grown.load(Ordering::Relaxed) > limits.max_bytes
                    {
                        return WalkState::Quit;
                    }
                    let Ok(entry) = entry else {
                        return WalkState::Continue;
                    };
                    let (Some(kind), Some(relative)) =
                        (entry.file_type(), relative_to(entry.path(), root))
                    else {
                        return WalkState::Continue;
                    };
                    let bytes = relative.as_os_str().len();
                    if kind.is_dir() {
                        grown.fetch_add(DIR_BYTES + bytes, Ordering::Relaxed);
                        thread.local.push(Found::Dir(relative.to_owned()));
                    } else if kind.is_file() {
                        grown.fetch_add(FILE_BYTES + bytes, Ordering::Relaxed);
                        thread.local.push(Found::File(relative.to_owned()));
                    }
                    if !kind.is_dir() {
                        let elsewhere = read_elsewhere(&entry).into_iter();
                        thread.local.extend(elsewhere.map(Found::LinkedIgnore));
                    }
                    WalkState::Continue
                })
            });
        }
        if limits.stop.load(Ordering::Relaxed) {
            return Err(Stopped::Asked);
        }
        if grown.load(Ordering::Relaxed) > limits.max_bytes {
            return Err(Stopped::OverBudget);
        }
        for git_dir in git_dirs.lock_unpoisoned().drain(..) {
            self.git_dirs.insert(git_dir);
        }
        // Directories first, parents before children (the walker's threads found them in any
        // order), so that each entry's directory is there when the entry comes.
        let mut found = found.into_inner_unpoisoned();
        found.sort_by_key(|entry| match entry {
            Found::Dir(path) => (false, path.components().count()),
            Found::File(_) | Found::LinkedIgnore(_) => (true, 0),
        });
        let mut walked = Vec::new();
        for entry in found {
            match entry {
                Found::Dir(path) => {
                    self.bytes += DIR_BYTES + path.as_os_str().len();
                    if let Some(parent) = path.parent()
                        && !path.as_os_str().is_empty()
                        && let Some(dir) = self.dirs.get_mut(parent.as_os_str())
                    {
                        dir.subdirs.insert(name_of(&path));
                    }
                    walked.push(path.clone());
                    self.dirs.entry(path.into_os_string()).or_default();
                }
                Found::LinkedIgnore(path) => {
                    self.linked_ignores.insert(path);
                }
                Found::File(path) => {
                    let parent = path.parent().unwrap_or(Path::new(""));
                    let name = name_of(&path);
                    let bytes = FILE_BYTES + name.len();
                    if let Some(dir) = self.dirs.get_mut(parent.as_os_str())
                        && dir.files.insert(name)
                    {
                        self.files += 1;
                        self.bytes += bytes;
                        self.added.push(path.into_os_string());
                    }
                }
            }
        }
        for dir in walked {
            let Some(entries) = self.dirs.get(dir.as_os_str()) else {
                continue;
            };
            let shown_hidden = self.shown_hidden_in(&dir, &entries.files, &entries.subdirs);
            if let Some(entries) = self.dirs.get_mut(dir.as_os_str()) {
                entries.shown_hidden = shown_hidden;
            }
        }
        self.check(limits)
    }

    /// The hidden names among `dir`'s entries that a walk skipping hidden entries shows (a
    /// `!` rule names them): asked of the walker itself, one level deep, and only where there
    /// are hidden names.
    fn shown_hidden_in(
        &self,
        dir: &Path,
        files: &BTreeSet<OsString>,
        subdirs: &BTreeSet<OsString>,
    ) -> BTreeSet<OsString> {
        let hidden: BTreeSet<&OsStr> = files
            .iter()
            .chain(subdirs)
            .map(OsString::as_os_str)
            .filter(|name| is_hidden(name))
            .collect();
        if hidden.is_empty() {
            return BTreeSet::new();
        }
        let mut builder = walker(&self.root.join(dir), true);
        builder.max_depth(Some(1));
        builder
            .build()
            .filter_map(Result::ok)
            .filter(|entry| entry.depth() == 1 && hidden.contains(entry.file_name()))
            .map(|entry| entry.file_name().to_owned())
            .collect()
    }

    fn check(&self, limits: &Limits) -> Result<(), Stopped> {
        if self.bytes > limits.max_bytes {
            Err(Stopped::OverBudget)
        } else {
            Ok(())
        }
    }

    /// Takes out the directory at `dir` (relative) and everything below it, and its name from
    /// its parent's entries.
    fn remove_subtree(&mut self, dir: &Path) {
        let below: Vec<OsString> = self
            .dirs
            .keys()
            .filter(|path| Path::new(path).starts_with(dir))
            .cloned()
            .collect();
        for path in below {
            if let Some(removed) = self.dirs.remove(&path) {
                self.bytes -= DIR_BYTES + path.len();
                for name in &removed.files {
                    self.files -= 1;
                    self.bytes -= FILE_BYTES + name.len();
                }
            }
        }
        let absolute = self.root.join(dir);
        self.git_dirs
            .retain(|git_dir| !git_dir.starts_with(&absolute));
        self.linked_ignores
            .retain(|linked| !linked.starts_with(&absolute));
        if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name())
            && let Some(parent) = self.dirs.get_mut(parent.as_os_str())
        {
            parent.subdirs.remove(name);
        }
    }

    /// Stops watching the directory at `dir` (relative) and those below it: a directory moved
    /// away keeps its watch, which would report its changes under its old path.
    fn unwatch_subtree(&self, dir: &Path, watch: &Arc<Mutex<RootWatch>>) {
        let mut watch = watch.lock_unpoisoned();
        for path in self
            .dirs
            .keys()
            .filter(|path| Path::new(path).starts_with(dir))
        {
            watch.unwatch(&self.root.join(path));
        }
    }
}

/// A file list seen from one of its directories: what a walk starting there would find (the
/// walk decides the same below a directory whichever ancestor it started from: it reads the
/// parents' ignore files).
pub struct Listing<'l> {
    list: &'l FileList,
    base: &'l Path,
    root: PathBuf,
}

impl<'l> Listing<'l> {
    /// The list seen from `base` (relative to its root; a directory it holds).
    pub(crate) fn new(list: &'l FileList, base: &'l Path) -> Self {
        Self {
            list,
            base,
            root: list.root.join(base),
        }
    }

    /// Where the walk starts (absolute).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// [`FileList::walk`] from the base: `enter` and `visit` get paths relative to it and
    /// whether a walk skipping hidden entries leaves the entry out, and `visit` also the path
    /// relative to the list's root.
    pub(crate) fn walk(
        &self,
        enter: &mut impl FnMut(&Path, &OsStr, bool) -> bool,
        mut visit: impl FnMut(&Path, &Path, &OsStr, bool) -> bool,
    ) {
        let mut path = self.base.as_os_str().as_bytes().to_vec();
        let skip = if path.is_empty() { 0 } else { path.len() + 1 };
        self.list.walk_from(&mut path, skip, enter, &mut visit);
    }
}

/// A walker thread's own results, merged into the shared list once when the thread ends,
/// so that threads never contend on a lock while they walk.
pub(crate) struct ThreadResults<'s, T> {
    shared: &'s Mutex<Vec<T>>,
    pub local: Vec<T>,
}

impl<'s, T> ThreadResults<'s, T> {
    pub(crate) fn new(shared: &'s Mutex<Vec<T>>) -> Self {
        Self {
            shared,
            local: Vec::new(),
        }
    }
}

impl<T> Drop for ThreadResults<'_, T> {
    fn drop(&mut self) {
        // A poisoned lock means another walker thread panicked mid-append; the walk's panic
        // propagates anyway, and appending to a Vec cannot leave it inconsistent.
        let mut shared = self.shared.lock_unpoisoned();
        shared.append(&mut self.local);
    }
}

/// A name the walker leaves out as hidden, unless an ignore rule names it.
pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.as_bytes().first() == Some(&b'.')
}

/// A name the walker reads ignore rules from.
fn is_ignore_file(name: &OsStr) -> bool {
    IGNORE_FILES.iter().any(|file| name == *file)
}

/// The files the walker reads ignore rules from through `entry` whose changes no watch of
/// the root reports under that name: an ignore file that is a symlink or has other hard links
/// (its target, or the inode another name writes), and the `info/exclude` that a `.git` that is
/// not a plain directory leads to (a symlink to a git directory elsewhere, or a worktree's
/// `gitdir:` file). Each is then looked at, through the name, at every barrier.
fn read_elsewhere(entry: &ignore::DirEntry) -> Vec<PathBuf> {
    let name = entry.file_name();
    let Some(kind) = entry.file_type() else {
        return Vec::new();
    };
    let path = entry.path();
    if is_ignore_file(name) {
        let linked = kind.is_symlink()
            || (kind.is_file()
                && entry
                    .metadata()
                    .is_ok_and(|meta| std::os::unix::fs::MetadataExt::nlink(&meta) > 1));
        return if linked {
            vec![path.to_owned()]
        } else {
            Vec::new()
        };
    }
    if name != ".git" || kind.is_dir() {
        return Vec::new();
    }
    let mut read = vec![path.to_owned(), path.join("info/exclude")];
    if kind.is_file()
        && let Ok(text) = std::fs::read_to_string(path)
        && let Some(gitdir) = text.lines().find_map(|line| line.strip_prefix("gitdir:"))
    {
        let gitdir = path.parent().unwrap_or(Path::new("/")).join(gitdir.trim());
        read.push(gitdir.join("info/exclude"));
        read.push(gitdir.join("commondir"));
        if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
            read.push(gitdir.join(common.trim()).join("info/exclude"));
        }
    }
    read
}

/// A `.git` directory: never entered by the list.
fn is_git_dir(entry: &ignore::DirEntry) -> bool {
    entry.depth() > 0
        && entry.file_name() == ".git"
        && entry.file_type().is_some_and(|kind| kind.is_dir())
}

fn name_of(path: &Path) -> OsString {
    path.file_name().unwrap_or_default().to_owned()
}

/// How many threads a walk uses: the machine's parallelism, capped as ripgrep caps it.
pub(crate) fn walk_threads() -> usize {
    /// ripgrep's own ceiling on walker threads: past it, more threads only contend on the disk.
    const MAX_WALK_THREADS: usize = 12;
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_WALK_THREADS)
}

/// The order paths are shown in: component by component, as a tree listing reads
/// (`a/x` before `a-b/x`), which is plain byte order with `/` counted lowest.
pub(crate) fn path_order(left: &str, right: &str) -> std::cmp::Ordering {
    let key = |byte: &u8| if *byte == b'/' { 0 } else { *byte };
    left.as_bytes()
        .iter()
        .map(key)
        .cmp(right.as_bytes().iter().map(key))
}

/// `path` relative to `root`, for a path the walker built by joining names onto `root`: a
/// byte prefix, cheaper than [`Path::strip_prefix`]'s component-by-component comparison, which
/// showed in profiles of a walk where most entries are rejected.
pub(crate) fn relative_to<'p>(path: &'p Path, root: &Path) -> Option<&'p Path> {
    let rest = path
        .as_os_str()
        .as_bytes()
        .strip_prefix(root.as_os_str().as_bytes())?;
    let rest = match rest.strip_prefix(b"/") {
        Some(below) => below,
        // Either the root itself, or a root that ends in `/` (only `/` does, after resolution).
        None if rest.is_empty() || root.as_os_str().as_bytes().ends_with(b"/") => rest,
        // A sibling that merely shares the root's bytes (`/a/bc` for root `/a/b`).
        None => return None,
    };
    Some(Path::new(OsStr::from_bytes(rest)))
}

#[cfg(test)]
mod tests;
