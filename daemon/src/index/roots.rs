//! The daemon's warm indexes, one per directory a search starts from: each built in the
//! background on first use, brought up to date at every query (the sync barrier), answered
//! cold whenever it cannot promise a cold walk's answer, and dropped when idle or over the
//! memory budget (least recently used first).
//!
//! A query gets the index only through [`Indexes::with_files`] or [`Indexes::with_contents`],
//! which run the barrier first and hand the query a list that is what a cold walk would find
//! now (from the query's directory, which an ancestor's index may hold), with which files can
//! match once the contents are read; or say why the query must walk cold. Every cold answer is
//! counted by its reason (`index/status`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use toold_protocol::sync::LockUnpoisoned;

use super::contents::{Contents, Selector};
use super::files::{FileList, Limits, Listing, Stopped};
use super::mounts::MountTable;
use super::plan::Query;
use super::watch::{Rebuild, RootWatch};

/// `[index]`: whether roots are indexed, the memory all indexes may take together, how long
/// an unused one is kept, and how long a root that could not be indexed answers cold before
/// it is tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexConfig {
    pub enabled: bool,
    pub max_memory_bytes: usize,
    pub idle_evict: Duration,
    pub retry_after: Duration,
    /// The most directories one root's watch may hold (besides the kernel's own limit).
    pub max_watches: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_memory_bytes: 256 * 1024 * 1024,
            idle_evict: Duration::from_secs(30 * 60),
            retry_after: Duration::from_secs(5 * 60),
            max_watches: default_max_watches(),
        }
    }
}

/// The most directories one root watches by default: 65,536, and never more than half the
/// user's inotify watches (`/proc/sys/fs/inotify/max_user_watches`), which every program of
/// the user shares (editors, file managers): one large tree must not take them all.
fn default_max_watches() -> usize {
    const MOST: usize = 65_536;
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .map_or(MOST, |user| (user / 2).clamp(1, MOST))
}

/// The most roots indexed at once (each holds an inotify instance, of which a user has 128 by
/// default); past it the least recently used is dropped.
const MAX_ROOTS: usize = 32;

/// Why a query walked cold instead of using the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ColdReason {
    /// `[index] enabled = false`.
    Disabled,
    /// The index of the root is being built (first use, or a rebuild).
    Building,
    /// The kernel's event queue overflowed: events were lost; rebuilding.
    Overflow,
    /// The root itself was deleted, moved or replaced; rebuilding.
    RootChanged,
    /// An ignore file outside what the watch sees changed (a parent directory's, a
    /// `.git/info/exclude`, the global excludes file or git's config naming it); rebuilding.
    IgnoreFilesChanged,
    /// A directory could not be watched (the watch limit).
    WatchLimit,
    /// The index would pass `max_memory_mib`.
    MemoryBudget,
    /// The root is on a network or FUSE filesystem, whose changes inotify does not report.
    NetworkFilesystem,
    /// A filesystem is mounted inside the root (or was mounted or unmounted there since the
    /// index was built): its files are not the ones the root's watches see.
    MountInside,
    /// The glob names `.git`, whose directories the index does not hold.
    GitDirectories,
    /// The index failed (an inotify instance refused, a thread not started).
    Error,
}

impl ColdReason {
    /// The reason's name on the wire (`metadata.index_reason`, `index/status`'s fallbacks).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Building => "building",
            Self::Overflow => "overflow",
            Self::RootChanged => "root_changed",
            Self::IgnoreFilesChanged => "ignore_files_changed",
            Self::WatchLimit => "watch_limit",
            Self::MemoryBudget => "memory_budget",
            Self::NetworkFilesystem => "network_filesystem",
            Self::MountInside => "mount_inside",
            Self::GitDirectories => "git_directories",
            Self::Error => "error",
        }
    }
}

/// What one index made of a query.
enum Attempt<R> {
    Answered(R),
    Cold(ColdReason),
    /// An ancestor's index that does not hold the directory asked about (not ready, or the
    /// directory is ignored, or gone).
    NotHeld,
}

/// One root's index as `index/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootStatus {
    pub root: PathBuf,
    /// `building`, `ready` or `cold`.
    pub state: &'static str,
    /// Why it is cold, when it is.
    pub reason: Option<ColdReason>,
    pub files: usize,
    pub memory_bytes: usize,
    pub last_rebuild: Option<SystemTime>,
    pub fallbacks: BTreeMap<ColdReason, u64>,
}

/// Every root's index.
pub struct Indexes {
    config: RwLock<IndexConfig>,
    roots: Mutex<HashMap<PathBuf, Arc<RootIndex>>>,
}

struct RootIndex {
    root: PathBuf,
    inner: Mutex<Inner>,
    /// What the index takes, read without its lock when the budget is checked.
    memory: AtomicUsize,
    /// When a query last asked for it, read without its lock by eviction.
    last_used: Mutex<Instant>,
    /// Set when the index is dropped: a build under way stops.
    stop: Arc<AtomicBool>,
}

struct Inner {
    state: State,
    last_rebuild: Option<SystemTime>,
    fallbacks: BTreeMap<ColdReason, u64>,
}

enum State {
    Building,
    Ready(Box<Warm>),
    Cold {
        reason: ColdReason,
        retry_at: Instant,
    },
}

/// A built index: the watch, the list it keeps current, the ignore files it cannot see, and
/// (once a search asked for it) the trigram index of the files' contents.
struct Warm {
    /// Which build this is: a reading of contents started for one build is never given to
    /// another (whose watch started later, and so may not have seen a change the reading
    /// missed).
    generation: u64,
    /// The root directory's device and inode when it was built.
    root_identity: (u64, u64),
    watch: Arc<Mutex<RootWatch>>,
    list: FileList,
    outside: Outside,
    /// The mount table, none inside the root when it was built.
    mounts: MountTable,
    contents: ContentState,
}

/// The trigram index of a root's contents: read on the first search, in the background, and
/// read again (the overlay merged) once many files changed.
#[derive(Default)]
struct ContentState {
    ready: Option<Contents>,
    /// While it is being read: the files changed meanwhile, which it may have read before
    /// they changed.
    reading: Option<HashSet<OsString>>,
}

impl ContentState {
    fn memory_bytes(&self) -> usize {
        self.ready.as_ref().map_or(0, Contents::memory_bytes)
    }

    /// Counts the file at `relative` as changed.
    fn changed(&mut self, relative: &OsStr) {
        if let Some(contents) = &mut self.ready {
            contents.changed(relative);
        }
        if let Some(changed) = &mut self.reading {
            changed.insert(relative.to_owned());
        }
    }
}

impl Default for Indexes {
    fn default() -> Self {
        Self::new(IndexConfig::default())
    }
}

impl Indexes {
    pub fn new(config: IndexConfig) -> Self {
        Self {
            config: RwLock::new(config),
            roots: Mutex::new(HashMap::new()),
        }
    }

    /// Indexes that are never used: every query walks cold.
    pub(crate) fn disabled() -> Self {
        Self::new(IndexConfig {
            enabled: false,
            ..IndexConfig::default()
        })
    }

    pub(crate) fn config(&self) -> IndexConfig {
        self.config
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Takes a new `[index]` (a reload): indexes kept if still enabled, within the new budget.
    pub(crate) fn reconfigure(&self, config: IndexConfig) {
        let enabled = config.enabled;
        *self
            .config
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        if !enabled {
            self.drop_all();
        } else {
            self.evict(None);
        }
    }

    /// Runs `query` on the files under `root` (the directory a search starts from, resolved)
    /// as a walk from there would find them, brought up to date first; or says why the
    /// caller must walk cold. `names_git`: the query's glob names `.git`, which the index does
    /// not hold. The index of an ancestor that holds `root` as one of its directories
    /// answers, else `root`'s own (built on first use).
    pub fn with_files<R>(
        &self,
        root: &Path,
        names_git: bool,
        query: impl FnOnce(&Listing<'_>) -> R,
    ) -> Result<R, ColdReason> {
        self.with_warm(root, names_git, |_, warm, base| {
            query(&Listing::new(&warm.list, base))
        })
    }

    /// Like [`Self::with_files`], for a search of contents: `query` also gets which files can
    /// hold a match of `plan`, once the trigram index of the root's contents is read (the
    /// first search starts reading it, in the background; until then `None`: every file).
    pub(crate) fn with_contents<R>(
        &self,
        root: &Path,
        names_git: bool,
        plan: &Query,
        query: impl FnOnce(&Listing<'_>, Option<&Selector<'_>>) -> R,
    ) -> Result<R, ColdReason> {
        self.with_warm(root, names_git, |index, warm, base| {
            let needs_reading = match &warm.contents.ready {
                None => true,
                Some(contents) => contents.needs_merge(),
            };
            if needs_reading && warm.contents.reading.is_none() {
                index.start_reading(warm);
            }
            let listing = Listing::new(&warm.list, base);
            match &warm.contents.ready {
                Some(contents) => query(&listing, Some(&contents.selector(plan))),
                None => query(&listing, None),
            }
        })
    }

    fn with_warm<R>(
        &self,
        root: &Path,
        names_git: bool,
        query: impl FnOnce(&Arc<RootIndex>, &mut Warm, &Path) -> R,
    ) -> Result<R, ColdReason> {
        let config = self.config();
        if !config.enabled {
            return Err(ColdReason::Disabled);
        }
        self.evict_idle(&config);
        let mut ancestors: Vec<Arc<RootIndex>> = self
            .roots
            .lock_unpoisoned()
            .values()
            .filter(|index| index.root != root && root.starts_with(&index.root))
            .cloned()
            .collect();
        // The nearest first: the smallest list to walk.
        ancestors.sort_by_key(|index| std::cmp::Reverse(index.root.as_os_str().len()));
        let mut query = Some(query);
        for index in ancestors {
            let Ok(base) = root.strip_prefix(&index.root) else {
                continue;
            };
            match self.attempt(&index, &config, names_git, Some(base), &mut query) {
                Attempt::Answered(answer) => return Ok(answer),
                // Its fallback is counted against the root asked about, below.
                Attempt::Cold(_) | Attempt::NotHeld => {}
            }
        }
        let index = self.root_index(root, &config);
        match self.attempt(&index, &config, names_git, None, &mut query) {
            Attempt::Answered(answer) => Ok(answer),
            Attempt::Cold(reason) => Err(reason),
            Attempt::NotHeld => Err(ColdReason::Error),
        }
    }

    /// Brings `index` up to date and runs the query on it, from `base` (a directory of its
    /// list, relative; `None`: its root). A cold answer is counted as a fallback of the
    /// index's own root only.
    fn attempt<R, Q>(
        &self,
        index: &Arc<RootIndex>,
        config: &IndexConfig,
        names_git: bool,
        base: Option<&Path>,
        query: &mut Option<Q>,
    ) -> Attempt<R>
    where
        Q: FnOnce(&Arc<RootIndex>, &mut Warm, &Path) -> R,
    {
        let own = base.is_none();
        let base = base.unwrap_or(Path::new(""));
        let mut inner = index.inner.lock_unpoisoned();
        let count = |inner: &mut Inner, reason| {
            if own {
                inner.fell_back(reason);
            }
            Attempt::Cold(reason)
        };
        if !own && !matches!(inner.state, State::Ready(_)) {
            return Attempt::NotHeld;
        }
        *index.last_used.lock_unpoisoned() = Instant::now();
        if names_git {
            return count(&mut inner, ColdReason::GitDirectories);
        }
        let limits = index.limits(config);
        let outcome = match &mut inner.state {
            State::Building => Err(ColdReason::Building),
            State::Cold { reason, retry_at } => {
                let reason = *reason;
                // A mount inside the root is not waited out: once it is gone (a read of the
                // mount table, beside the cold walk this query makes anyway) the root is
                // built again.
                let unmounted = reason == ColdReason::MountInside
                    && MountTable::open()
                        .is_ok_and(|mut mounts| mounts.inside(&index.root).is_empty());
                if unmounted || Instant::now() >= *retry_at {
                    index.start_build(&mut inner, config);
                }
                Err(reason)
            }
            State::Ready(warm) => match warm.sync(&limits) {
                Ok(()) => {
                    index.memory.store(warm.memory_bytes(), Ordering::Relaxed);
                    Ok(warm.list.holds_dir(base))
                }
                Err(reason) => {
                    index.memory.store(0, Ordering::Relaxed);
                    match reason {
                        ColdReason::WatchLimit | ColdReason::MemoryBudget => {
                            inner.state = State::Cold {
                                reason,
                                retry_at: Instant::now() + config.retry_after,
                            };
                        }
                        _ => index.start_build(&mut inner, config),
                    }
                    Err(reason)
                }
            },
        };
        match outcome {
            Err(reason) => return count(&mut inner, reason),
            Ok(false) => return Attempt::NotHeld,
            Ok(true) => {}
        }
        drop(inner);
        if self.evict(Some(index)) {
            let mut inner = index.inner.lock_unpoisoned();
            inner.state = State::Cold {
                reason: ColdReason::MemoryBudget,
                retry_at: Instant::now() + config.retry_after,
            };
            index.memory.store(0, Ordering::Relaxed);
            return count(&mut inner, ColdReason::MemoryBudget);
        }
        let mut inner = index.inner.lock_unpoisoned();
        match (&mut inner.state, query.take()) {
            (State::Ready(warm), Some(query)) if warm.list.holds_dir(base) => {
                Attempt::Answered(query(index, warm, base))
            }
            // Taken by a reload or an eviction in between.
            _ => Attempt::Cold(ColdReason::Building),
        }
    }

    /// Every root's index, sorted by root.
    pub(crate) fn status(&self) -> Vec<RootStatus> {
        let roots: Vec<Arc<RootIndex>> = self.roots.lock_unpoisoned().values().cloned().collect();
        let mut status: Vec<RootStatus> = roots.iter().map(|index| index.status()).collect();
        status.sort_by(|left, right| left.root.cmp(&right.root));
        status
    }

    /// Drops the indexes not used for `idle_evict`.
    pub(crate) fn evict_idle(&self, config: &IndexConfig) {
        let now = Instant::now();
        let mut roots = self.roots.lock_unpoisoned();
        roots.retain(|_, index| {
            let idle = now.duration_since(*index.last_used.lock_unpoisoned());
            let keep = idle < config.idle_evict;
            if !keep {
                index.stop.store(true, Ordering::Relaxed);
            }
            keep
        });
    }

    fn drop_all(&self) {
        let mut roots = self.roots.lock_unpoisoned();
        for index in roots.values() {
            index.stop.store(true, Ordering::Relaxed);
        }
        roots.clear();
    }

    /// Drops the least recently used indexes other than `keep` while all of them together
    /// take more than the budget; true when `keep` alone is still over it.
    fn evict(&self, keep: Option<&Arc<RootIndex>>) -> bool {
        let budget = self.config().max_memory_bytes;
        let mut roots = self.roots.lock_unpoisoned();
        let total = |roots: &HashMap<PathBuf, Arc<RootIndex>>| -> usize {
            roots
                .values()
                .map(|index| index.memory.load(Ordering::Relaxed))
                .sum()
        };
        while total(&roots) > budget {
            let oldest = roots
                .values()
                .filter(|index| keep.is_none_or(|keep| !Arc::ptr_eq(index, keep)))
                .filter(|index| index.memory.load(Ordering::Relaxed) > 0)
                .min_by_key(|index| *index.last_used.lock_unpoisoned())
                .map(|index| index.root.clone());
            let Some(oldest) = oldest else {
                return true;
            };
            if let Some(index) = roots.remove(&oldest) {
                index.stop.store(true, Ordering::Relaxed);
            }
        }
        false
    }

    /// The index of `root`, made (and its build started) on first use.
    fn root_index(&self, root: &Path, config: &IndexConfig) -> Arc<RootIndex> {
        let mut roots = self.roots.lock_unpoisoned();
        if let Some(index) = roots.get(root) {
            return Arc::clone(index);
        }
        while roots.len() >= MAX_ROOTS {
            let oldest = roots
                .values()
                .min_by_key(|index| *index.last_used.lock_unpoisoned())
                .map(|index| index.root.clone());
            if let Some(index) = oldest.and_then(|oldest| roots.remove(&oldest)) {
                index.stop.store(true, Ordering::Relaxed);
            }
        }
        let index = Arc::new(RootIndex {
            root: root.to_owned(),
            last_used: Mutex::new(Instant::now()),
            inner: Mutex::new(Inner {
                state: State::Building,
                last_rebuild: None,
                fallbacks: BTreeMap::new(),
            }),
            memory: AtomicUsize::new(0),
            stop: Arc::new(AtomicBool::new(false)),
        });
        roots.insert(root.to_owned(), Arc::clone(&index));
        drop(roots);
        let mut inner = index.inner.lock_unpoisoned();
        index.start_build(&mut inner, config);
        drop(inner);
        index
    }
}

impl Inner {
    fn fell_back(&mut self, reason: ColdReason) -> ColdReason {
        *self.fallbacks.entry(reason).or_default() += 1;
        reason
    }
}

impl RootIndex {
    fn limits(&self, config: &IndexConfig) -> Limits {
        Limits {
            max_bytes: config.max_memory_bytes,
            stop: Arc::clone(&self.stop),
        }
    }

    /// Builds the index on a thread of its own; queries answer cold meanwhile.
    fn start_build(self: &Arc<Self>, inner: &mut Inner, config: &IndexConfig) {
        inner.state = State::Building;
        self.memory.store(0, Ordering::Relaxed);
        let index = Arc::clone(self);
        let limits = self.limits(config);
        let (max_watches, retry_after) = (config.max_watches, config.retry_after);
        let started = std::thread::Builder::new()
            .name("toold-index".to_owned())
            .spawn(move || {
                let built = Warm::build(&index.root, max_watches, &limits);
                let mut inner = index.inner.lock_unpoisoned();
                inner.state = match built {
                    Ok(warm) => {
                        index
                            .memory
                            .store(warm.list.memory_bytes(), Ordering::Relaxed);
                        inner.last_rebuild = Some(SystemTime::now());
                        State::Ready(Box::new(warm))
                    }
                    Err(reason) => State::Cold {
                        reason,
                        retry_at: Instant::now() + retry_after,
                    },
                };
            });
        if let Err(err) = started {
            tracing::warn!(root = %self.root.display(), %err, "cannot start an index build");
            inner.state = State::Cold {
                reason: ColdReason::Error,
                retry_at: Instant::now() + config.retry_after,
            };
        }
    }

    /// Reads the root's contents into a trigram index on a thread of its own; searches read
    /// every file (or use the index read before) meanwhile.
    fn start_reading(self: &Arc<Self>, warm: &mut Warm) {
        let mut files = Vec::new();
        warm.list.walk(
            |_, _| true,
            |relative, _| {
                files.push(relative.as_os_str().to_owned());
                true
            },
        );
        warm.contents.reading = Some(HashSet::new());
        let index = Arc::clone(self);
        let root = warm.list.root().to_owned();
        let generation = warm.generation;
        let started = std::thread::Builder::new()
            .name("toold-index-read".to_owned())
            .spawn(move || {
                let read = Contents::build(&root, files, &index.stop);
                let mut inner = index.inner.lock_unpoisoned();
                let State::Ready(warm) = &mut inner.state else {
                    return;
                };
                if warm.generation != generation {
                    // Rebuilt meanwhile: this reading belongs to a list gone.
                    return;
                }
                let changed = warm.contents.reading.take().unwrap_or_default();
                if let Some(mut contents) = read {
                    for path in &changed {
                        contents.changed(path);
                    }
                    warm.contents.ready = Some(contents);
                    index.memory.store(warm.memory_bytes(), Ordering::Relaxed);
                }
            });
        if let Err(err) = started {
            tracing::warn!(root = %self.root.display(), %err, "cannot start reading an index's contents");
            warm.contents.reading = None;
        }
    }

    fn status(&self) -> RootStatus {
        let inner = self.inner.lock_unpoisoned();
        let (state, reason, files, memory_bytes) = match &inner.state {
            State::Building => ("building", None, 0, 0),
            State::Ready(warm) => ("ready", None, warm.list.files(), warm.memory_bytes()),
            State::Cold { reason, .. } => ("cold", Some(*reason), 0, 0),
        };
        RootStatus {
            root: self.root.clone(),
            state,
            reason,
            files,
            memory_bytes,
            last_rebuild: inner.last_rebuild,
            fallbacks: inner.fallbacks.clone(),
        }
    }
}

impl Warm {
    fn build(root: &Path, max_watches: usize, limits: &Limits) -> Result<Self, ColdReason> {
        if on_network_filesystem(root) {
            return Err(ColdReason::NetworkFilesystem);
        }
        // Opened before the walk: a mount made while it runs shows at the first barrier.
        let mut mounts = MountTable::open().map_err(|err| {
            tracing::warn!(%err, "cannot read the mount table to index a root");
            ColdReason::Error
        })?;
        if let Some(point) = mounts.inside(root).first() {
            tracing::debug!(root = %root.display(), mount = %point.display(), "a root with a mount inside is answered cold");
            return Err(ColdReason::MountInside);
        }
        let watch = RootWatch::new(root, max_watches).map_err(|err| {
            tracing::warn!(root = %root.display(), %err, "cannot watch a root to index it");
            ColdReason::Error
        })?;
        let root_identity = identity(root).ok_or(ColdReason::RootChanged)?;
        let watch = Arc::new(Mutex::new(watch));
        // Read before the walk: a change made while it runs shows at the first barrier.
        let mut outside = Outside::read(root);
        let list = FileList::build(root, &watch, limits).map_err(|stopped| match stopped {
            Stopped::OverBudget => ColdReason::MemoryBudget,
            Stopped::Asked => ColdReason::Error,
        })?;
        outside.add_git_dirs(list.git_dirs());
        outside.add_files(list.linked_ignores());
        if !watch.lock_unpoisoned().complete() {
            return Err(ColdReason::WatchLimit);
        }
        /// Numbers the builds of every root.
        static GENERATION: AtomicU64 = AtomicU64::new(0);
        Ok(Self {
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            root_identity,
            watch,
            list,
            outside,
            mounts,
            contents: ContentState::default(),
        })
    }

    fn memory_bytes(&self) -> usize {
        self.list.memory_bytes() + self.contents.memory_bytes()
    }

    /// The sync barrier: every change the watch holds applied, or why the index cannot be
    /// brought up to date.
    fn sync(&mut self, limits: &Limits) -> Result<(), ColdReason> {
        let changes = self
            .watch
            .lock_unpoisoned()
            .barrier()
            .map_err(|_| ColdReason::Error)?;
        match changes.rebuild {
            Some(Rebuild::Overflow) => return Err(ColdReason::Overflow),
            Some(Rebuild::RootGone) => return Err(ColdReason::RootChanged),
            Some(Rebuild::Unwatched) => return Err(ColdReason::WatchLimit),
            None => {}
        }
        // A parent moved away, and another tree made at the root's path, reaches no watch of
        // the root: the path must still name the directory the index was built of.
        if identity(self.list.root()) != Some(self.root_identity) {
            return Err(ColdReason::RootChanged);
        }
        if self.outside.changed() {
            return Err(ColdReason::IgnoreFilesChanged);
        }
        // Built with no mount inside: any mount or unmount there since changed files no watch
        // reported.
        if self.mounts.changed() && !self.mounts.inside(self.list.root()).is_empty() {
            return Err(ColdReason::MountInside);
        }
        if !changes.paths.is_empty() {
            // A changed path names a file or a directory: either way, a file there may hold
            // other bytes than the trigram index read (a directory moved in brings files the
            // index never read, which it does not know, and so always searches).
            for path in &changes.paths {
                if let Some(relative) = super::files::relative_to(path, self.list.root()) {
                    self.contents.changed(relative.as_os_str());
                }
            }
            self.list
                .apply(&changes.paths, &self.watch, limits)
                .map_err(|stopped| match stopped {
                    Stopped::OverBudget => ColdReason::MemoryBudget,
                    Stopped::Asked => ColdReason::Error,
                })?;
            // A directory walked again (moved, swapped, un-ignored) brings files under old
            // names whose contents the index may have read before they changed.
            for added in self.list.take_added() {
                self.contents.changed(&added);
            }
            self.outside.add_files(self.list.linked_ignores());
            if !self.watch.lock_unpoisoned().complete() {
                return Err(ColdReason::WatchLimit);
            }
            self.outside.add_git_dirs(self.list.git_dirs());
        }
        Ok(())
    }
}

/// A directory's device and inode, its symlink not followed.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(Metadata::is_dir)
        .map(|meta| (meta.dev(), meta.ino()))
}

/// What identifies a file's version: a change of any of these is a change of the file.
type Fingerprint = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn fingerprint(path: &Path) -> Fingerprint {
    std::fs::metadata(path).ok().map(|meta: Metadata| {
        (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        )
    })
}

/// The files that decide what the walk ignores but that no watch of the root sees: the
/// parents' ignore files and `.git/info/exclude`, those of the `.git` directories inside the
/// root (never entered), the global excludes file and git's config files that may name it.
/// Looked at (one `statx` each) at every barrier.
struct Outside {
    files: BTreeMap<PathBuf, Fingerprint>,
}

impl Outside {
    fn read(root: &Path) -> Self {
        let mut paths = Vec::new();
        for dir in root.ancestors() {
            for name in [".gitignore", ".ignore", ".git/info/exclude"] {
                paths.push(dir.join(name));
            }
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|dir| !dir.as_os_str().is_empty())
            .or_else(|| home.as_ref().map(|home| home.join(".config")));
        if let Some(home) = &home {
            paths.push(home.join(".gitconfig"));
        }
        if let Some(xdg) = &xdg {
            paths.push(xdg.join("git/config"));
            paths.push(xdg.join("git/ignore"));
        }
        for variable in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
            if let Some(path) = std::env::var_os(variable).filter(|path| !path.is_empty()) {
                paths.push(PathBuf::from(path));
            }
        }
        paths.push(PathBuf::from("/etc/gitconfig"));
        if let Some(excludes) = ignore::gitignore::gitconfig_excludes_path() {
            paths.push(excludes);
        }
        Self {
            files: paths
                .into_iter()
                .map(|path| {
                    let print = fingerprint(&path);
                    (path, print)
                })
                .collect(),
        }
    }

    /// Also looks at the `info/exclude` of these `.git` directories.
    fn add_git_dirs<'p>(&mut self, git_dirs: impl Iterator<Item = &'p Path>) {
        for git_dir in git_dirs {
            let exclude = git_dir.join("info/exclude");
            if let std::collections::btree_map::Entry::Vacant(vacant) = self.files.entry(exclude) {
                let print = fingerprint(vacant.key());
                vacant.insert(print);
            }
        }
    }

    /// Also looks at these files (ignore files that are symlinks: what they point to).
    fn add_files<'p>(&mut self, files: impl Iterator<Item = &'p Path>) {
        for file in files {
            if let std::collections::btree_map::Entry::Vacant(vacant) =
                self.files.entry(file.to_owned())
            {
                let print = fingerprint(vacant.key());
                vacant.insert(print);
            }
        }
    }

    fn changed(&self) -> bool {
        self.files
            .iter()
            .any(|(path, print)| fingerprint(path) != *print)
    }
}

/// Whether `root` is on a filesystem whose changes inotify may not report: network
/// filesystems (changes made on other machines), FUSE, 9p.
fn on_network_filesystem(root: &Path) -> bool {
    const NETWORK: [u64; 9] = [
        0x6969,      // NFS
        0x6573_5546, // FUSE
        0x517B,      // SMB
        0xFF53_4D42, // CIFS
        0xFE53_4D42, // SMB2
        0x0102_1997, // 9p
        0x00C3_6400, // Ceph
        0x5346_414F, // AFS
        0x0BD0_0BD0, // Lustre
    ];
    rustix::fs::statfs(root).is_ok_and(|stat| NETWORK.contains(&(stat.f_type as u64)))
}

#[cfg(test)]
mod tests;
