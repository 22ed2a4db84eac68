//! The private user + mount namespace of a confined command (with IPC and, where it can be
//! had, PID namespaces and a `/proc` of its own): the daemon socket's directory covered by an
//! empty read-only tmpfs (or the socket itself by `/dev/null`), and the repositories'
//! `.git/config`, `.git/hooks` and `.git` files bound read-only over themselves.
//!
//! The command keeps its own uid (mapped to itself), so files it creates are the user's; it
//! has capabilities in the new namespace only until it execs (its uid is not 0 there), so it
//! cannot unmount what covers the socket, and a namespace it makes itself gets these mounts
//! locked. `/proc/<daemon pid>/root`, the other way to the socket, is closed by the daemon
//! being non-dumpable and by Landlock's ptrace rule.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;

use super::kept_out::{DaemonSocket, local_services};

/// What the child mounts, every path and map line built before the fork.
#[derive(Debug)]
pub(super) struct Mounts {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Directories covered by an empty read-only tmpfs.
    hidden_dirs: Vec<CString>,
    /// Files covered by `/dev/null`.
    hidden_files: Vec<CString>,
    /// Bound over themselves, writable: a mount point cannot be renamed or removed.
    pinned: Vec<CString>,
    /// Bound over themselves read-only, with the flags the kernel keeps locked on their mount.
    read_only: Vec<(CString, libc::c_ulong)>,
    /// A PID namespace too, with a `/proc` of its own ([`Self::with_own_pids`]).
    own_pids: bool,
}

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
        let dir = match crate::confined::open(dir_path, OFlag::O_RDONLY | OFlag::O_DIRECTORY) {
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

/// How deep submodules' git directories (`modules/NAME/modules/…`) are looked for.
const MAX_MODULE_DEPTH: usize = 4;

/// The repository metadata to protect: the `.git` of each root, and of each directory from
/// the working directory up to the root holding it (the repositories git finds from there);
/// for each, its git directory (followed from a `.git` file), its submodules' and its
/// worktrees' git directories.
pub(super) fn git_metadata(roots: &[PathBuf], cwd: &Path) -> Vec<GitPath> {
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
    let mut protected = Vec::new();
    for git in repositories {
        match std::fs::symlink_metadata(&git) {
            Ok(meta) if meta.is_dir() => protect_git_dir(&git, 0, &mut protected),
            Ok(meta) if meta.is_file() => {
                protected.push(GitPath::ReadOnly(git.clone()));
                if let Some(target) = git_file_target(&git) {
                    protect_git_dir(&target, 0, &mut protected);
                }
            }
            _ => {}
        }
    }
    protected
}

/// The git directory a `.git` file names (`gitdir: PATH`, relative to the file's directory).
fn git_file_target(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let target = file.parent()?.join(named);
    let target = std::fs::canonicalize(target).ok()?;
    target.is_dir().then_some(target)
}

fn protect_git_dir(dir: &Path, depth: usize, protected: &mut Vec<GitPath>) {
    if protected.contains(&GitPath::Pinned(dir.to_owned())) {
        return;
    }
    protected.push(GitPath::Pinned(dir.to_owned()));
    for name in GIT_DIR_CODE {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if !meta.is_symlink() => protected.push(GitPath::ReadOnly(path)),
            // A symlink is replaced by nothing a mount could cover; git follows it, so a
            // command could change what it leads to only where it may write anyway.
            Ok(_) => {}
            // An empty hooks directory changes nothing for git, and can then be covered.
            Err(_) if name == "hooks" && make_empty_dir(dir, name) => {
                protected.push(GitPath::ReadOnly(path));
            }
            Err(_) => protected.push(GitPath::MustNotAppear(path)),
        }
    }
    for worktree in subdirectories(&dir.join("worktrees")) {
        for name in ["commondir", "config.worktree"] {
            let path = worktree.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_symlink()) {
                protected.push(GitPath::ReadOnly(path));
            }
        }
    }
    if depth < MAX_MODULE_DEPTH {
        protect_modules(&dir.join("modules"), depth + 1, protected);
    }
}

/// Submodules' git directories under `modules/`: a name may hold slashes, so a directory
/// without `HEAD` is looked into.
fn protect_modules(modules: &Path, depth: usize, protected: &mut Vec<GitPath>) {
    for entry in subdirectories(modules) {
        if entry.join("HEAD").exists() {
            protect_git_dir(&entry, depth, protected);
        } else if depth < MAX_MODULE_DEPTH {
            protect_modules(&entry, depth + 1, protected);
        }
    }
}

/// Makes the empty directory `name` in `dir`, reached without following any symlink (a
/// command of another session may have made a component one); whether it was made.
fn make_empty_dir(dir: &Path, name: &str) -> bool {
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;
    crate::confined::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY).is_ok_and(|dir| {
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

impl Mounts {
    /// `writable`: where the command may write; the socket's covered directory (or file) is
    /// pinned with each of its parents inside one of them, so that none can be renamed away
    /// (the cover would move with it, and a decoy take its place).
    pub(super) fn plan(
        socket: Option<&DaemonSocket>,
        git: &[GitPath],
        writable: &[PathBuf],
    ) -> Self {
        let mut mounts = Self::plan_socket_and_git(socket, git, writable);
        // Services that run code for the user on request (systemd and the session bus in
        // `$XDG_RUNTIME_DIR`, docker, podman, the system bus) are kept from commands as the
        // daemon's socket is: one of them would run a command outside any sandbox. Not a
        // directory that holds a place commands may write.
        let services = local_services();
        let hidden_services: Vec<&Path> = services
            .dirs
            .iter()
            .map(PathBuf::as_path)
            .filter(|dir| !writable.iter().any(|place| place.starts_with(dir)))
            .collect();
        mounts
            .hidden_dirs
            .extend(hidden_services.iter().filter_map(|dir| c_path(dir)));
        mounts
            .hidden_files
            .extend(services.sockets.iter().filter_map(|socket| c_path(socket)));
        // A cover inside another, and a pin at or inside a cover, would only cost a mount:
        // nothing below a cover is seen, and a cover's mount point cannot be renamed.
        let inside = |path: &CString, dir: &CString| {
            let (path, dir) = (
                Path::new(OsStr::from_bytes(path.as_bytes())),
                Path::new(OsStr::from_bytes(dir.as_bytes())),
            );
            path.starts_with(dir)
        };
        let covers = mounts.hidden_dirs.clone();
        mounts.hidden_dirs.retain(|dir| {
            !covers
                .iter()
                .any(|other| other != dir && inside(dir, other))
        });
        mounts.hidden_dirs.dedup();
        let covers = mounts.hidden_dirs.clone();
        mounts
            .pinned
            .retain(|pin| !covers.iter().any(|cover| inside(pin, cover)));
        mounts
            .hidden_files
            .retain(|file| !covers.iter().any(|cover| inside(file, cover)));
        // toold's own directories (its config, whose hooks run unsandboxed, and its saved
        // sessions) where a command could otherwise write them: under a root or `/tmp`. Not
        // those inside a directory covered whole (the socket's, the runtime directory).
        let hidden: Vec<&Path> = socket
            .and_then(|socket| socket.hidden_dir.as_deref())
            .into_iter()
            .chain(hidden_services)
            .collect();
        for dir in crate::paths::daemon_dirs() {
            let exposed = writable.iter().any(|place| dir.starts_with(place))
                && !hidden.iter().any(|covered| dir.starts_with(covered));
            // A config file in a directory not toold's own is bound alone.
            if exposed
                && dir.exists()
                && let Some(c) = c_path(dir)
            {
                mounts.read_only.push((c, locked_flags(dir)));
            }
        }
        mounts
    }

    fn plan_socket_and_git(
        socket: Option<&DaemonSocket>,
        git: &[GitPath],
        writable: &[PathBuf],
    ) -> Self {
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let mut mounts = Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            hidden_dirs: Vec::new(),
            hidden_files: Vec::new(),
            pinned: Vec::new(),
            read_only: Vec::new(),
            own_pids: false,
        };
        if let Some(socket) = socket {
            let covered = match &socket.hidden_dir {
                Some(dir) => {
                    mounts.hidden_dirs.extend(c_path(dir));
                    dir
                }
                None => {
                    mounts.hidden_files.extend(c_path(&socket.path));
                    &socket.path
                }
            };
            // Outermost first: a pin made later inside an earlier one is seen through it.
            let mut parents: Vec<&Path> = covered
                .ancestors()
                .skip(1)
                .filter(|parent| {
                    writable
                        .iter()
                        .any(|dir| parent.starts_with(dir) && parent != dir)
                })
                .collect();
            parents.reverse();
            mounts.pinned.extend(parents.into_iter().filter_map(c_path));
        }
        for path in git {
            match path {
                GitPath::Pinned(dir) => mounts.pinned.extend(c_path(dir)),
                GitPath::ReadOnly(path) => {
                    if let Some(c) = c_path(path) {
                        mounts.read_only.push((c, locked_flags(path)));
                    }
                }
                GitPath::MustNotAppear(_) => {}
            }
        }
        mounts
    }

    /// The command in a PID namespace of its own too: every process it starts ends with it
    /// (the kernel kills them all when the namespace's init exits, see [`crate::spawn`]), it
    /// sees only its own processes in a `/proc` of its own, and the daemon's `/proc/<pid>`
    /// is not there to be opened.
    pub(super) fn with_own_pids(mut self) -> Self {
        self.own_pids = true;
        self
    }

    /// Whether the command gets a PID namespace (and a `/proc`) of its own.
    pub(super) fn has_own_pids(&self) -> bool {
        self.own_pids
    }

    /// The namespaces the child is born in: its user and mount namespace, an IPC namespace of
    /// its own (System V shared memory, semaphores and message queues made by a command go
    /// with it instead of outliving it, shared with every process of the user), and its PID
    /// namespace when it has one.
    pub(super) fn clone_flags(&self) -> libc::c_int {
        let pids = if self.own_pids { libc::CLONE_NEWPID } else { 0 };
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | pids
    }

    /// The uid and gid maps of the user namespace: the daemon's own ids mapped to themselves.
    pub(super) fn id_maps(&self) -> crate::spawn::IdMaps<'_> {
        crate::spawn::IdMaps {
            uid: &self.uid_map,
            gid: &self.gid_map,
        }
    }

    /// In the child, born in the namespaces of [`Self::clone_flags`]: its uid and gid mapped to
    /// themselves (unless `maps_written`: the daemon writes them), then the mounts, which need
    /// no map (the child has every capability in its namespace from its birth). System calls
    /// only.
    #[allow(unsafe_code)]
    pub(super) fn enter(&self, maps_written: bool) -> io::Result<()> {
        // SAFETY: every pointer is to a NUL-terminated string or buffer built before the clone
        // and alive for the call; the calls take nothing else.
        unsafe {
            if !maps_written {
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &self.uid_map)?;
                write_file(c"/proc/self/gid_map", &self.gid_map)?;
            }
            // Nothing mounted here travels back to the daemon's namespace: a mount namespace
            // made with a user namespace of its own gets the parent's shared mounts as slaves.
            // Pins first, with what is mounted below them: a cover mounted before a pin of a
            // directory above it would not be seen through the pin.
            for path in &self.pinned {
                mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)?;
            }
            for file in &self.hidden_files {
                mount(Some(c"/dev/null"), file, None, libc::MS_BIND, None)?;
            }
            for dir in &self.hidden_dirs {
                let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                mount(
                    Some(c"tmpfs"),
                    dir,
                    Some(c"tmpfs"),
                    flags,
                    Some(c"mode=0500,size=4k"),
                )?;
            }
            for (path, locked) in &self.read_only {
                mount(Some(path), path, None, libc::MS_BIND, None)?;
                let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked;
                mount(None, path, None, flags, None)?;
            }
            if self.own_pids {
                // Over the daemon's: the processes of this namespace, by the pids they know.
                let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                mount(Some(c"proc"), c"/proc", Some(c"proc"), flags, None)?;
            }
            // A command run as root keeps root's capabilities in this namespace after its
            // exec: without CAP_SYS_ADMIN it cannot unmount what covers the socket and `.git`,
            // where Landlock (which forbids that too) is missing.
            check(libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0))?;
        }
        Ok(())
    }
}

/// `CAP_SYS_ADMIN` (linux/capability.h), which the libc crate does not name.
const CAP_SYS_ADMIN: libc::c_ulong = 21;

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// The flags of the mount holding `path` that a remount in a user namespace must keep
/// (`nosuid`, `nodev`, `noexec`, the atime ones): the kernel refuses to clear them there.
fn locked_flags(path: &Path) -> libc::c_ulong {
    use nix::sys::statvfs::{FsFlags, statvfs};
    let Ok(stat) = statvfs(path) else { return 0 };
    let flags = stat.flags();
    [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(statvfs_flag, _)| flags.contains(*statvfs_flag))
    .fold(0, |all, (_, mount_flag)| all | mount_flag)
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[allow(unsafe_code)]
unsafe fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let pointer = |text: Option<&CStr>| text.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: the caller passes NUL-terminated strings alive for the call.
    check(unsafe {
        libc::mount(
            pointer(source),
            target.as_ptr(),
            pointer(fstype),
            flags,
            pointer(data).cast(),
        )
    })
}

#[allow(unsafe_code)]
unsafe fn write_file(path: &CStr, contents: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated, `contents` a live buffer of its length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, contents.as_ptr().cast(), contents.len());
        let error = (written != contents.len() as isize).then(io::Error::last_os_error);
        libc::close(fd);
        error.map_or(Ok(()), Err)
    }
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
        let protected = git_metadata(std::slice::from_ref(&root), &nested);
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
}
