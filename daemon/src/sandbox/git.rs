//! The repository metadata a confined command must not change: what git reads as configuration
//! or runs as code in the repositories of the session's roots, found before the command starts.

use std::path::{Path, PathBuf};

/// A path under the roots that commands must not change: a git directory is pinned (its
/// `config`, `hooks` and the like are `ReadOnly` entries of their own), a `.git` file is
/// read-only, and what git would read but does not exist yet must not appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GitPath {
    Pinned(PathBuf),
    ReadOnly(PathBuf),
    /// Absent, and to stay so: a mount cannot cover a path that does not exist, so one made
    /// during the call is removed after it (`Confinement::undo_forbidden_creations`).
    MustNotAppear(PathBuf),
}

/// A file that must not appear in a git directory, with that directory's identity when it
/// was looked at: only an entry of that very directory is ever removed, whatever a command
/// did to the path's components meanwhile (a component made a symlink leads elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Forbidden {
    pub(super) path: PathBuf,
    dir_identity: (u64, u64),
}

impl Forbidden {
    pub(super) fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let dir = std::fs::symlink_metadata(path.parent()?).ok()?;
        Some(Self {
            path: path.to_owned(),
            dir_identity: (dir.dev(), dir.ino()),
        })
    }

    /// Removes the entry if it exists in the same directory, through a descriptor of that
    /// directory opened without following any symlink; whether something was removed.
    pub(super) fn remove(&self) -> std::io::Result<bool> {
        use nix::fcntl::{AtFlags, OFlag};
        use nix::sys::stat::fstat;
        use nix::unistd::UnlinkatFlags;
        let (Some(dir_path), Some(name)) = (self.path.parent(), self.path.file_name()) else {
            return Ok(false);
        };
        let dir = match crate::judged_files::open(dir_path, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
            Ok(dir) => dir,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(err) => return Err(err),
        };
        let stat = fstat(&dir)?;
        if (stat.st_dev, stat.st_ino) != self.dir_identity {
            return Ok(false);
        }
        let entry = match nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(entry) => entry,
            Err(nix::errno::Errno::ENOENT) => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        // A directory there (which git cannot read as a file anyway) only if it is empty: its
        // contents would have to be walked by path.
        let how = if entry.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR {
            UnlinkatFlags::RemoveDir
        } else {
            UnlinkatFlags::NoRemoveDir
        };
        nix::unistd::unlinkat(&dir, name, how)?;
        Ok(true)
    }
}

/// What in a git directory git reads as configuration or runs as code: `config`, `hooks/`,
/// `commondir` (which moves `config` and `hooks` elsewhere) and `config.worktree`.
const GIT_DIR_CODE: [&str; 4] = ["config", "hooks", "commondir", "config.worktree"];

/// How many repositories under the roots besides the roots' and the working directory's are
/// kept read-only by mounts.
const MAX_OTHER_REPOSITORIES: usize = 32;

/// How deep submodules' git directories (`modules/NAME/modules/…`) are looked for.
const MAX_MODULE_DEPTH: usize = 4;

/// The repository metadata to protect: the `.git` of each root, and of each directory from
/// the working directory up to the root holding it (the repositories git finds from there);
/// for each, its git directory (followed from a `.git` file), its submodules' and its
/// worktrees' git directories.
///
/// Only git directories inside `writable` (where the command may write) are protected, and
/// only there is anything made or later removed: a `.git` file is the command's to write, and
/// one that names a directory elsewhere (`gitdir: ANYWHERE`) must not lead the daemon, which
/// may write everywhere the user can, to make or remove anything there. What lies outside
/// `writable` the command cannot change anyway.
pub(super) fn git_metadata(
    roots: &[PathBuf],
    cwd: &Path,
    writable: &[PathBuf],
    known: &[PathBuf],
) -> Vec<GitPath> {
    let mut repositories: Vec<PathBuf> = roots.iter().map(|root| root.join(".git")).collect();
    if let Some(root) = roots.iter().find(|root| cwd.starts_with(root)) {
        let mut dir = Some(cwd);
        while let Some(current) = dir.filter(|current| current.starts_with(root)) {
            let git = current.join(".git");
            if !repositories.contains(&git) {
                repositories.push(git);
            }
            dir = current.parent();
        }
    }
    let mut found = Found {
        writable,
        protected: Vec::new(),
    };
    // Every other repository found under the roots (nested, sibling), the nearest to a root
    // first, up to a bound: each costs a few mounts. Beyond it, what a command changes in
    // one is undone after the call.
    let mut others: Vec<&PathBuf> = known
        .iter()
        .filter(|git_dir| !repositories.contains(git_dir))
        .collect();
    others.sort_by_key(|git_dir| git_dir.components().count());
    for git_dir in others.into_iter().take(MAX_OTHER_REPOSITORIES) {
        if std::fs::symlink_metadata(git_dir).is_ok_and(|meta| meta.is_dir()) {
            found.git_dir(git_dir, 0);
        }
    }
    for git in repositories {
        if !found.may_write(&git) {
            continue;
        }
        match std::fs::symlink_metadata(&git) {
            Ok(meta) if meta.is_dir() => found.git_dir(&git, 0),
            Ok(meta) if meta.is_file() => {
                found.protected.push(GitPath::ReadOnly(git.clone()));
                if let Some(target) = git_file_target(&git) {
                    found.git_dir(&target, 0);
                }
            }
            _ => {}
        }
    }
    found.protected
}

/// The metadata found so far, and where the command may write.
struct Found<'a> {
    writable: &'a [PathBuf],
    protected: Vec<GitPath>,
}

/// The git directory a `.git` file names (`gitdir: PATH`, relative to the file's directory).
fn git_file_target(file: &Path) -> Option<PathBuf> {
    use std::io::Read;
    // Its first line is all git reads: a huge file made to hold up the next command is not
    // read whole.
    let mut text = String::new();
    std::fs::File::open(file)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let target = file.parent()?.join(named);
    let target = std::fs::canonicalize(target).ok()?;
    target.is_dir().then_some(target)
}

impl Found<'_> {
    /// Whether `path` lies where the command may write (a canonical path: no symlink in it).
    fn may_write(&self, path: &Path) -> bool {
        self.writable.iter().any(|dir| path.starts_with(dir))
    }

    fn git_dir(&mut self, dir: &Path, depth: usize) {
        if !self.may_write(dir) || self.protected.contains(&GitPath::Pinned(dir.to_owned())) {
            return;
        }
        self.protected.push(GitPath::Pinned(dir.to_owned()));
        for name in GIT_DIR_CODE {
            let path = dir.join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if !meta.is_symlink() => {
                    if meta.is_file() && std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
                        unlink_other_names(&path);
                    }
                    self.protected.push(GitPath::ReadOnly(path));
                }
                // A symlink is replaced by nothing a mount could cover; git follows it, so a
                // command could change what it leads to only where it may write anyway.
                Ok(_) => {}
                // An empty hooks directory changes nothing for git, and can then be covered.
                Err(_) if name == "hooks" && make_empty_dir(dir, name) => {
                    self.protected.push(GitPath::ReadOnly(path));
                }
                Err(_) => self.protected.push(GitPath::MustNotAppear(path)),
            }
        }
        self.named_by_config(dir);
        for worktree in subdirectories(&dir.join("worktrees")) {
            for name in ["commondir", "config.worktree"] {
                let path = worktree.join(name);
                if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_symlink()) {
                    self.protected.push(GitPath::ReadOnly(path));
                }
            }
        }
        if depth < MAX_MODULE_DEPTH {
            self.modules(&dir.join("modules"), depth + 1);
        }
    }

    /// What `dir`'s config names that git runs or reads as config: the hooks directory of
    /// `core.hooksPath` (made empty where it is missing, as `hooks/` is, then covered) and the
    /// files `include.path` names (read-only where they exist; one made during the call is
    /// removed after it).
    fn named_by_config(&mut self, dir: &Path) {
        let work_tree = (dir.file_name() == Some(std::ffi::OsStr::new(".git")))
            .then(|| dir.parent())
            .flatten();
        let named = crate::git_config::named_by(&dir.join("config"), work_tree);
        for hooks in named.hooks_dirs {
            let hooks = crate::paths::resolve_symlinks(&hooks);
            if !self.may_write(&hooks) {
                continue;
            }
            if hooks.is_dir() || crate::judged_files::open_dir_creating(&hooks).is_ok() {
                self.protected.push(GitPath::ReadOnly(hooks));
            }
        }
        for included in named.included {
            let included = crate::paths::resolve_symlinks(&included);
            if !self.may_write(&included) {
                continue;
            }
            match std::fs::symlink_metadata(&included) {
                Ok(meta) if !meta.is_symlink() => {
                    self.protected.push(GitPath::ReadOnly(included));
                }
                Ok(_) => {}
                Err(_) => self.protected.push(GitPath::MustNotAppear(included)),
            }
        }
    }

    /// Submodules' git directories under `modules/`: a name may hold slashes, so a directory
    /// without `HEAD` is looked into.
    fn modules(&mut self, modules: &Path, depth: usize) {
        for entry in subdirectories(modules) {
            if entry.join("HEAD").exists() {
                self.git_dir(&entry, depth);
            } else if depth < MAX_MODULE_DEPTH {
                self.modules(&entry, depth + 1);
            }
        }
    }
}

/// Gives the file `path` an inode of its own (a copy renamed over it): a hard link to a
/// repository's `config` made while it was writable (in a repository a command had just made)
/// would keep it writable through the other name however the path is covered.
fn unlink_other_names(path: &Path) {
    use nix::fcntl::OFlag;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let copied = (|| -> std::io::Result<()> {
        let dir = crate::judged_files::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
        let source = nix::fcntl::openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        let mode = nix::sys::stat::fstat(&source)?.st_mode & 0o7777;
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(source), &mut content)?;
        let temporary = format!(".{}.toold-unlinked", name.to_string_lossy());
        let copy = nix::fcntl::openat(
            &dir,
            temporary.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::from_bits_truncate(mode),
        )?;
        std::io::Write::write_all(&mut std::fs::File::from(copy), &content)?;
        nix::fcntl::renameat(&dir, temporary.as_str(), &dir, name)?;
        Ok(())
    })();
    match copied {
        Ok(()) => {
            tracing::warn!(path = %path.display(), "gave a repository's file other names pointed to an inode of its own")
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot give a repository's file an inode of its own")
        }
    }
}

/// Makes the empty directory `name` in `dir`, reached without following any symlink (a
/// command of another session may have made a component one); whether it was made.
fn make_empty_dir(dir: &Path, name: &str) -> bool {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    crate::judged_files::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY).is_ok_and(|dir| {
        nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(0o755)).is_ok()
    })
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protects_the_git_of_each_root_and_of_the_cwd_s_repository() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let nested = root.join("vendor/lib");
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "").unwrap();
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join(".git"), "gitdir: ../../.git/modules/lib\n").unwrap();
        std::fs::create_dir_all(root.join(".git/modules/lib/modules/deep/x")).unwrap();
        std::fs::write(root.join(".git/modules/lib/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join(".git/modules/lib/config"), "").unwrap();
        std::fs::write(root.join(".git/modules/lib/modules/deep/x/HEAD"), "").unwrap();
        let root = root.canonicalize().unwrap();
        let nested = root.join("vendor/lib");
        let lib = root.join(".git/modules/lib");
        let deep = lib.join("modules/deep/x");
        let protected = git_metadata(
            std::slice::from_ref(&root),
            &nested,
            std::slice::from_ref(&root),
            &[],
        );
        let must_not_appear = |dir: &Path| {
            [
                GitPath::MustNotAppear(dir.join("commondir")),
                GitPath::MustNotAppear(dir.join("config.worktree")),
            ]
        };
        let mut expected = vec![
            GitPath::Pinned(root.join(".git")),
            GitPath::ReadOnly(root.join(".git/config")),
            GitPath::ReadOnly(root.join(".git/hooks")),
        ];
        expected.extend(must_not_appear(&root.join(".git")));
        expected.extend([
            GitPath::Pinned(lib.clone()),
            GitPath::ReadOnly(lib.join("config")),
            // Made empty where it was missing, then covered.
            GitPath::ReadOnly(lib.join("hooks")),
        ]);
        expected.extend(must_not_appear(&lib));
        expected.extend([
            GitPath::Pinned(deep.clone()),
            GitPath::MustNotAppear(deep.join("config")),
            GitPath::ReadOnly(deep.join("hooks")),
        ]);
        expected.extend(must_not_appear(&deep));
        // The submodule's `.git` file, and the git directory it names (already protected).
        expected.push(GitPath::ReadOnly(nested.join(".git")));
        assert_eq!(protected, expected);
    }

    /// A `.git` file is the command's to write: one that names a directory outside where the
    /// command may write leads the daemon to make nothing there, and to mark nothing there
    /// for removal.
    #[test]
    fn a_git_file_naming_a_place_outside_makes_nothing_there() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("root");
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(
            root.join(".git"),
            format!("gitdir: {}\n", elsewhere.display()),
        )
        .unwrap();
        let protected = git_metadata(
            std::slice::from_ref(&root),
            &root,
            std::slice::from_ref(&root),
            &[],
        );
        assert_eq!(protected, vec![GitPath::ReadOnly(root.join(".git"))]);
        assert!(!elsewhere.join("hooks").exists());
    }
}
