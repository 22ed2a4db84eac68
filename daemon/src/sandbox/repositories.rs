//! The repositories under a session's roots, watched between and during its commands: a
//! repository that a command planted (`git init` with `core.fsmonitor`, a `.git` directory or
//! file written anywhere under the roots, a bare repository's `HEAD`, `config` and `objects/`)
//! or whose config or hooks it changed where no mount could keep it from (a nested
//! repository, one renamed away and made anew) must not run code in the user's next `git
//! status`. Every directory of the roots is watched (inotify, as the warm index watches its
//! roots); before a command, what changed meanwhile (the user, a tool the person approved) is
//! taken as it is; after it, every repository a change touched is looked at, and what the
//! command gave it that runs code — a setting git runs (`core.fsmonitor`, `core.hooksPath`,
//! `core.sshCommand`, a pager, an editor, diff, merge and filter drivers, credential helpers,
//! `include`s, shell aliases) or a hook — is undone: the config it had put back (a new
//! repository's set aside as `config.removed-by-toold`), each new hook set aside as
//! `NAME.removed-by-toold`, and reported.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use toold_protocol::sync::LockUnpoisoned;

use crate::index::watch::RootWatch;

/// The most directories of a session's roots watched; past it the roots are not guarded (and
/// the sandbox says so).
const MAX_WATCHES: usize = 65_536;
/// The most of a config file kept to put back.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;
/// What a file set aside is renamed with.
const SET_ASIDE: &str = ".removed-by-toold";

/// A session's guard of the repositories under its roots, shared by its calls.
#[derive(Debug, Default)]
pub struct Guard(Mutex<Option<Watched>>);

impl PartialEq for Guard {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The roots watched, and each repository's code as last seen.
struct Watched {
    roots: Vec<PathBuf>,
    watches: Vec<RootWatch>,
    repositories: BTreeMap<PathBuf, Code>,
    /// Why the roots cannot be guarded, if they cannot.
    unguarded: Option<String>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("roots", &self.roots)
            .field("repositories", &self.repositories.len())
            .finish_non_exhaustive()
    }
}

/// What in a repository runs code: its settings that do, and its hooks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Code {
    /// The git directory's `config` as it was (to put back), when small enough to keep.
    config: Option<Vec<u8>>,
    /// The code-running settings of `config` and `config.worktree` (`key=value`).
    settings: BTreeSet<String>,
    /// Hooks, by path, with their size and modification time.
    hooks: BTreeMap<PathBuf, (u64, i64)>,
}

impl Guard {
    /// Before a command of a session with `roots`: watches them (on first use, or when the
    /// roots changed), takes what changed since the last command as it is, and returns the
    /// git directories of the repositories under the roots (for the sandbox to keep their
    /// config and hooks read-only), or why the roots cannot be guarded.
    pub(crate) fn before_command(&self, roots: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
        let mut watched = self.0.lock_unpoisoned();
        let fresh = watched
            .as_ref()
            .is_none_or(|watched| watched.roots != roots);
        if fresh {
            *watched = Some(Watched::of(roots));
        }
        let Some(watched) = watched.as_mut() else {
            return Ok(Vec::new());
        };
        if !fresh {
            watched.settle(false);
        }
        match &watched.unguarded {
            Some(why) => Err(why.clone()),
            None => Ok(watched.repositories.keys().cloned().collect()),
        }
    }

    /// After a command: undoes what it gave the repositories under the roots that runs code,
    /// and returns what it set aside or put back.
    pub(crate) fn after_command(&self) -> Vec<PathBuf> {
        let mut watched = self.0.lock_unpoisoned();
        match watched.as_mut() {
            Some(watched) if watched.unguarded.is_none() => watched.settle(true),
            _ => Vec::new(),
        }
    }
}

impl Watched {
    fn of(roots: &[PathBuf]) -> Self {
        let mut watched = Self {
            roots: roots.to_vec(),
            watches: Vec::new(),
            repositories: BTreeMap::new(),
            unguarded: None,
        };
        for root in roots {
            match RootWatch::new(root, MAX_WATCHES) {
                Ok(watch) => watched.watches.push(watch),
                Err(err) => {
                    watched.unguarded = Some(format!("cannot watch {}: {err}", root.display()));
                    return watched;
                }
            }
        }
        watched.walk_all();
        watched
    }

    /// Watches and reads every directory of the roots, recording each repository's code.
    fn walk_all(&mut self) {
        self.repositories.clear();
        for index in 0..self.watches.len() {
            let root = self.watches[index].root().to_owned();
            for git_dir in self.walk(index, &root) {
                let code = Code::of(&git_dir);
                self.repositories.insert(git_dir, code);
            }
            if !self.watches[index].complete() {
                self.unguarded = Some(format!(
                    "{} has more than {MAX_WATCHES} directories to watch",
                    root.display()
                ));
                return;
            }
        }
        // The walk's own events are not changes.
        for watch in &mut self.watches {
            let _ = watch.barrier();
        }
    }

    /// Watches `dir` and everything below it (not following symlinks; inside a git directory
    /// only what holds code: the directory itself, `hooks`, `modules` and `worktrees`), and
    /// returns the repositories found there.
    fn walk(&mut self, watch: usize, dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(current) = pending.pop() {
            if self.watches[watch].watch_dir(&current).is_err() {
                continue;
            }
            if let Some(git_dir) = repository_at(&current)
                && !found.contains(&git_dir)
            {
                found.push(git_dir);
            }
            let Ok(entries) = std::fs::read_dir(&current) else {
                continue;
            };
            let in_git_dir = is_git_dir(&current);
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    continue;
                }
                let name = entry.file_name();
                if in_git_dir && !matches!(name.to_str(), Some("hooks" | "modules" | "worktrees")) {
                    continue;
                }
                pending.push(entry.path());
            }
        }
        found
    }

    /// Looks at every repository a change since the last look touched; with `undo`, puts back
    /// what runs code and was not there, and returns what was put back or set aside.
    fn settle(&mut self, undo: bool) -> Vec<PathBuf> {
        let mut touched: BTreeSet<PathBuf> = BTreeSet::new();
        let mut rewalk = false;
        for index in 0..self.watches.len() {
            let changes = match self.watches[index].barrier() {
                Ok(changes) => changes,
                Err(_) => {
                    rewalk = true;
                    continue;
                }
            };
            rewalk |= changes.rebuild.is_some();
            for path in changes.paths {
                if path.is_dir() && !path.is_symlink() {
                    // A directory made (or moved in): watched and read; a repository found
                    // there is new, with no code of its own before.
                    touched.extend(self.walk(index, &path));
                }
                touched.extend(self.repository_holding(&path));
            }
        }
        if rewalk {
            // Events were lost: every repository is looked at, against what it was before
            // (a new one against nothing).
            let known = std::mem::take(&mut self.repositories);
            self.walk_all();
            let now: Vec<PathBuf> = std::mem::take(&mut self.repositories).into_keys().collect();
            touched.extend(now);
            self.repositories = known;
        }
        let mut undone = Vec::new();
        for git_dir in touched {
            let now = Code::of(&git_dir);
            let before = self.repositories.get(&git_dir).cloned();
            if undo {
                undone.extend(undo_new_code(&git_dir, before.as_ref(), &now));
            }
            if git_dir.is_dir() {
                self.repositories
                    .insert(git_dir.clone(), Code::of(&git_dir));
            } else {
                self.repositories.remove(&git_dir);
            }
        }
        if !undone.is_empty() {
            tracing::warn!(
                ?undone,
                "undid what a sandboxed command gave a repository that runs code"
            );
        }
        undone
    }

    /// The git directory a changed `path` belongs to: the repository whose `.git` it is or is
    /// in, or whose working tree holds a `.git` made there.
    fn repository_holding(&self, path: &Path) -> Option<PathBuf> {
        if let Some(git_dir) = path
            .ancestors()
            .find(|dir| self.repositories.contains_key(*dir))
        {
            return Some(git_dir.to_owned());
        }
        let parent = path.parent()?;
        repository_at(parent).or_else(|| repository_at(path))
    }
}

/// The git directory of the repository at `dir`: its `.git` directory, the directory a `.git`
/// file names, or `dir` itself when it is a bare repository (or a git directory).
fn repository_at(dir: &Path) -> Option<PathBuf> {
    let dot_git = dir.join(".git");
    match std::fs::symlink_metadata(&dot_git) {
        Ok(meta) if meta.is_dir() => return Some(dot_git),
        Ok(meta) if meta.is_file() => {
            return crate::paths::named_by_git_file(dir, &dot_git)
                .map(|named| crate::paths::normalize_lexically(&named));
        }
        _ => {}
    }
    is_git_dir(dir).then(|| dir.to_owned())
}

/// Whether git would take `dir` for a git directory: `HEAD`, `objects` and `refs` in it.
fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

impl Code {
    fn of(git_dir: &Path) -> Self {
        let config_path = git_dir.join("config");
        let config = std::fs::File::open(&config_path).ok().and_then(|file| {
            let mut bytes = Vec::new();
            file.take(MAX_CONFIG_BYTES + 1)
                .read_to_end(&mut bytes)
                .ok()?;
            (bytes.len() as u64 <= MAX_CONFIG_BYTES).then_some(bytes)
        });
        let mut settings = BTreeSet::new();
        for name in ["config", "config.worktree"] {
            settings.extend(code_settings(&git_dir.join(name)));
        }
        let mut hooks = BTreeMap::new();
        let mut hook_dirs = vec![git_dir.join("hooks")];
        let work_tree = (git_dir.file_name() == Some(std::ffi::OsStr::new(".git")))
            .then(|| git_dir.parent())
            .flatten();
        hook_dirs.extend(crate::git_config::named_by(&config_path, work_tree).hooks_dirs);
        for dir in hook_dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".sample") || name.ends_with(SET_ASIDE) {
                    continue;
                }
                if let Ok(meta) = entry.metadata()
                    && meta.is_file()
                {
                    hooks.insert(entry.path(), (meta.size(), meta.mtime()));
                }
            }
        }
        Self {
            config,
            settings,
            hooks,
        }
    }
}

/// The settings of the config file `path` that make git run a program (`key=value`, the key
/// as git reads it: lowercase section and name, the subsection as written).
fn code_settings(path: &Path) -> BTreeSet<String> {
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES).read_to_string(&mut text));
    if read.is_err() {
        return BTreeSet::new();
    }
    let mut found = BTreeSet::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.split(']').next().unwrap_or_default();
            let (name, sub) = match header.split_once([' ', '.']) {
                Some((name, sub)) => (name, Some(sub.trim().trim_matches('"'))),
                None => (header, None),
            };
            section = match sub {
                Some(sub) => format!("{}.{sub}", name.to_ascii_lowercase()),
                None => name.to_ascii_lowercase(),
            };
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((key, value)) => (key.trim(), value.trim()),
            None => (line, "true"),
        };
        if key.is_empty() || key.starts_with(['#', ';']) {
            continue;
        }
        let full = format!("{section}.{}", key.to_ascii_lowercase());
        if runs_code(&full, value) {
            found.insert(format!("{full}={value}"));
        }
    }
    found
}

/// Whether git runs a program because of the setting `key` (`section[.subsection].name`,
/// section and name lowercase) with `value`.
fn runs_code(key: &str, value: &str) -> bool {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    let name = rest.rsplit('.').next().unwrap_or(rest);
    match section {
        "core" => matches!(
            name,
            "fsmonitor"
                | "hookspath"
                | "sshcommand"
                | "pager"
                | "editor"
                | "askpass"
                | "gitproxy"
                | "alternaterefscommand"
                | "worktree"
        ),
        "diff" => matches!(name, "external" | "command" | "textconv"),
        "difftool" | "mergetool" => name == "cmd" || name == "path",
        "merge" => name == "driver",
        "filter" => matches!(name, "clean" | "smudge" | "process"),
        "credential" => name == "helper",
        "include" | "includeif" => name == "path",
        "pager" => true,
        "alias" => value.trim_start_matches('"').starts_with('!'),
        "sequence" => name == "editor",
        "gpg" => name == "program",
        "web" => name == "browser",
        "man" => name == "cmd" || name == "path",
        "uploadpack" => name == "packobjectshook",
        "remote" => matches!(name, "uploadpack" | "receivepack" | "vcs"),
        "protocol" => name == "allow",
        _ => false,
    }
}

/// Puts back what a command gave the repository at `git_dir` that runs code: a config that
/// gained such a setting gets its content from `before` back (a new one is set aside); each
/// new or changed hook is set aside. Everything through descriptors opened without following
/// a symlink (the command may have made one). Returns what was put back or set aside.
fn undo_new_code(git_dir: &Path, before: Option<&Code>, now: &Code) -> Vec<PathBuf> {
    let mut undone = Vec::new();
    let empty = Code::default();
    let before = before.unwrap_or(&empty);
    if !now.settings.is_subset(&before.settings) {
        let config = git_dir.join("config");
        let put_back = match &before.config {
            Some(content) => crate::judged_files::open(git_dir, nix::fcntl::OFlag::O_RDONLY)
                .and_then(|dir| write_in(&dir, "config", content))
                .is_ok(),
            None => false,
        };
        if put_back || set_aside(git_dir, "config").is_ok() {
            undone.push(config);
        }
        if set_aside(git_dir, "config.worktree").is_ok() {
            undone.push(git_dir.join("config.worktree"));
        }
    }
    for (hook, seen) in &now.hooks {
        if before.hooks.get(hook) == Some(seen) {
            continue;
        }
        if let (Some(dir), Some(name)) = (hook.parent(), hook.file_name().and_then(|n| n.to_str()))
            && set_aside(dir, name).is_ok()
        {
            undone.push(hook.clone());
        }
    }
    undone
}

/// Renames `dir/name` to `dir/name.removed-by-toold` (replacing an earlier one), through a
/// descriptor of `dir` opened without following a symlink.
fn set_aside(dir: &Path, name: &str) -> std::io::Result<()> {
    let dir = crate::judged_files::open(
        dir,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
    )?;
    nix::fcntl::renameat(&dir, name, &dir, format!("{name}{SET_ASIDE}").as_str())?;
    Ok(())
}

/// Writes `content` as `name` in `dir` (a temporary file renamed over it, mode 0644).
fn write_in(dir: &std::os::fd::OwnedFd, name: &str, content: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::OFlag;
    let temporary = format!(".{name}.toold-{}", std::process::id());
    let fd = nix::fcntl::openat(
        dir,
        temporary.as_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, content)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    nix::fcntl::renameat(dir, temporary.as_str(), dir, name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_that_run_code_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\trepositoryformatversion = 0\n\tFSMonitor = touch x\n\tbare = false\n\
             [alias]\n\tst = status\n\tpwn = !touch x\n\
             [filter \"lfs\"]\n\tsmudge = git-lfs smudge %f\n\
             [diff \"x\"]\n\ttextconv = cat\n[user]\n\tname = me\n\
             [include]\n\tpath = ../other\n",
        )
        .unwrap();
        let found = code_settings(&config);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [
                "alias.pwn=!touch x",
                "core.fsmonitor=touch x",
                "diff.x.textconv=cat",
                "filter.lfs.smudge=git-lfs smudge %f",
                "include.path=../other",
            ]
        );
    }
}
