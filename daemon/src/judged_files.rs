//! File access through a path exactly as the permission step judged it.
//!
//! The permission step judges a path's fully resolved form: every symlink followed, so no
//! component of it is a symlink at that moment. A file tool then opens that form with symlinks
//! forbidden anywhere along it (`openat2` with `RESOLVE_NO_SYMLINKS`): if a component was
//! swapped for a symlink after the check (a race to redirect a write outside the roots), the
//! open fails instead of following it. Writes happen inside a directory descriptor opened that
//! way (`openat`/`renameat` relative to it), so no path string is resolved again after the
//! check. On kernels without `openat2` (before 5.6) the same holds by walking the components
//! from `/` with `O_NOFOLLOW`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};

/// Symlinks anywhere along the path, and /proc's magic links, make the open fail.
const RESOLVE: ResolveFlag =
    ResolveFlag::RESOLVE_NO_SYMLINKS.union(ResolveFlag::RESOLVE_NO_MAGICLINKS);

/// The error a tool reports when the path changed under it: a symlink appeared on a path that
/// had none when it was checked.
pub(crate) fn is_changed_path(err: &io::Error) -> bool {
    err.raw_os_error() == Some(Errno::ELOOP as i32)
}

/// Opens the judged path `path` (absolute, fully resolved) with `flags` (`O_CLOEXEC` added).
pub(crate) fn open(path: &Path, flags: OFlag) -> io::Result<OwnedFd> {
    let flags = flags | OFlag::O_CLOEXEC;
    match openat2(AT_FDCWD, path, OpenHow::new().flags(flags).resolve(RESOLVE)) {
        Err(Errno::ENOSYS) => walk_open(path, flags, false),
        opened => opened.map_err(io::Error::from),
    }
}

/// Opens a judged file for reading (`O_NONBLOCK` too, so that a FIFO does not block the open).
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    open(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK).map(File::from)
}

/// Opens the judged directory `path` for use as the base of `*at` calls, creating it and its
/// missing parents (mode 0777 under the umask, as `mkdir -p`), each created or entered without
/// following a symlink.
pub(crate) fn open_dir_creating(path: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
    match open(path, flags) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            walk_open(path, flags | OFlag::O_CLOEXEC, true)
        }
        opened => opened,
    }
}

/// Opens `path` one component at a time from `/`, each with `O_NOFOLLOW`, creating missing
/// directories when `create` is set (the last component too: it is a directory then).
fn walk_open(path: &Path, flags: OFlag, create: bool) -> io::Result<OwnedFd> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(name) => names.push(name),
            // A judged path is absolute and normalized; anything else is not one.
            _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
    if !path.is_absolute() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // `O_PATH` for the way down: it needs only search permission on each directory, as the
    // kernel's own walk does (`O_RDONLY` would need read permission too).
    let directory = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = openat(AT_FDCWD, "/", directory, Mode::empty())?;
    let Some((last, parents)) = names.split_last() else {
        return Ok(openat(AT_FDCWD, "/", flags, Mode::empty())?);
    };
    for name in parents {
        current = enter(&current, name, directory, create)?;
    }
    Ok(enter(&current, last, flags | OFlag::O_NOFOLLOW, create)?)
}

/// Opens `name` in `dir`, first creating it as a directory if it is missing and `create` is set.
/// A symlink there is `ELOOP`, as `openat2` reports it (`O_DIRECTORY` would say `ENOTDIR`).
fn enter(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    flags: OFlag,
    create: bool,
) -> nix::Result<OwnedFd> {
    let opened = open_or_create(dir, name, flags, create);
    if matches!(opened, Err(Errno::ENOTDIR))
        && fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(|stat| {
            SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK
        })
    {
        return Err(Errno::ELOOP);
    }
    opened
}

fn open_or_create(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    flags: OFlag,
    create: bool,
) -> nix::Result<OwnedFd> {
    match openat(dir.as_fd(), name, flags, Mode::empty()) {
        Err(Errno::ENOENT) if create => {
            match mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(err) => return Err(err),
            }
            openat(dir.as_fd(), name, flags, Mode::empty())
        }
        opened => opened,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn opens_a_judged_path_and_refuses_one_with_a_symlink_in_it() {
        let (_dir, root) = temp();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/file"), "x").unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();
        symlink(root.join("real/file"), root.join("file_link")).unwrap();
        assert!(open_read(&root.join("real/file")).is_ok());
        for through_link in [root.join("link/file"), root.join("file_link")] {
            let err = open_read(&through_link).unwrap_err();
            assert!(is_changed_path(&err), "{through_link:?}: {err}");
            let err = walk_open(&through_link, OFlag::O_RDONLY, false).unwrap_err();
            assert!(
                is_changed_path(&err),
                "{through_link:?} (the fallback walk): {err}"
            );
        }
    }

    #[test]
    fn creating_directories_never_follows_a_symlink() {
        let (_dir, root) = temp();
        assert!(open_dir_creating(&root.join("a/b/c")).is_ok());
        assert!(root.join("a/b/c").is_dir());
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), root.join("escape")).unwrap();
        let err = open_dir_creating(&root.join("escape/new")).unwrap_err();
        assert!(is_changed_path(&err), "{err}");
        let err = walk_open(
            &root.join("escape/new"),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            true,
        )
        .unwrap_err();
        assert!(is_changed_path(&err), "the fallback walk: {err}");
        assert!(
            !outside.path().join("new").exists(),
            "nothing created through the link"
        );
    }
}
