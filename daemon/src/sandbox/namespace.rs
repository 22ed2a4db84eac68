//! The private user + mount namespace of a confined command: the daemon socket's directory
//! covered by an empty read-only tmpfs (or the socket itself by `/dev/null`), and the
//! repositories' `.git/config`, `.git/hooks` and `.git` files bound read-only over themselves.
//!
//! The command keeps its own uid (mapped to itself), so files it creates are the user's; it
//! has capabilities in the new namespace only until it execs (its uid is not 0 there), so it
//! cannot unmount what covers the socket, and a namespace it makes itself gets these mounts
//! locked. `/proc/<daemon pid>/root`, the other way to the socket, is closed by the daemon
//! being non-dumpable and by Landlock's ptrace rule.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;

use super::kernel::DaemonSocket;

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
}

/// A path under the roots that commands must not change: a `.git` directory is pinned (its
/// `config` and `hooks` are `ReadOnly` entries of their own), a `.git` file is read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GitPath {
    Pinned(PathBuf),
    ReadOnly(PathBuf),
}

/// The repository metadata to protect: the `.git` of each root, and of each directory from
/// the working directory up to the root holding it (the repository git finds from there).
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
            Ok(meta) if meta.is_dir() => {
                protected.push(GitPath::Pinned(git.clone()));
                for inside in ["config", "hooks"] {
                    let path = git.join(inside);
                    if std::fs::symlink_metadata(&path).is_ok_and(|meta| !meta.is_symlink()) {
                        protected.push(GitPath::ReadOnly(path));
                    }
                }
            }
            Ok(meta) if meta.is_file() => protected.push(GitPath::ReadOnly(git)),
            _ => {}
        }
    }
    protected
}

impl Mounts {
    pub(super) fn plan(socket: Option<&DaemonSocket>, git: &[GitPath]) -> Self {
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let mut mounts = Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            hidden_dirs: Vec::new(),
            hidden_files: Vec::new(),
            pinned: Vec::new(),
            read_only: Vec::new(),
        };
        if let Some(socket) = socket {
            match &socket.hidden_dir {
                Some(dir) => mounts.hidden_dirs.extend(c_path(dir)),
                None => mounts.hidden_files.extend(c_path(&socket.path)),
            }
        }
        for path in git {
            match path {
                GitPath::Pinned(dir) => mounts.pinned.extend(c_path(dir)),
                GitPath::ReadOnly(path) => {
                    if let Some(c) = c_path(path) {
                        mounts.read_only.push((c, locked_flags(path)));
                    }
                }
            }
        }
        mounts
    }

    /// The namespaces the child is born in.
    pub(super) fn clone_flags(&self) -> libc::c_int {
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS
    }

    /// In the child, born in the namespaces of [`Self::clone_flags`]: its uid and gid mapped to
    /// themselves, then the mounts. System calls only.
    #[allow(unsafe_code)]
    pub(super) fn enter(&self) -> io::Result<()> {
        // SAFETY: every pointer is to a NUL-terminated string or buffer built before the clone
        // and alive for the call; the calls take nothing else.
        unsafe {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
            // Nothing mounted here travels back to the daemon's namespace: a mount namespace
            // made with a user namespace of its own gets the parent's shared mounts as slaves.
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
            for file in &self.hidden_files {
                mount(Some(c"/dev/null"), file, None, libc::MS_BIND, None)?;
            }
            for path in &self.pinned {
                mount(Some(path), path, None, libc::MS_BIND, None)?;
            }
            for (path, locked) in &self.read_only {
                mount(Some(path), path, None, libc::MS_BIND, None)?;
                let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked;
                mount(None, path, None, flags, None)?;
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
        let protected = git_metadata(std::slice::from_ref(&root), &nested);
        assert_eq!(
            protected,
            [
                GitPath::Pinned(root.join(".git")),
                GitPath::ReadOnly(root.join(".git/config")),
                GitPath::ReadOnly(root.join(".git/hooks")),
                GitPath::ReadOnly(nested.join(".git")),
            ]
        );
    }
}
