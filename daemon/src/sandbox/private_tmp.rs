//! The `/tmp` and `/dev/shm` of a session's commands: directories of the session's own, shown
//! at those paths in its commands' mount namespace, kept across its calls and removed with it
//! (a call's own in `read_only`, removed when the call ends). The host's `/tmp`, where other
//! programs of the user keep sockets and files, is not reachable from a sandboxed command.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::fcntl::OFlag;

use super::namespace::Place;

/// Where the private directories live: set once at start (toold's state directory's `tmp`),
/// else the temp directory's `toold-<uid>-tmp`.
static BASE: OnceLock<PathBuf> = OnceLock::new();

/// Sets where the sessions' private directories are made (the daemon, at start, before any
/// command); the first call wins.
pub(crate) fn set_base(dir: PathBuf) {
    let _ = BASE.set(dir);
}

/// Where the sessions' private directories are made.
pub(crate) fn base() -> &'static Path {
    BASE.get_or_init(|| {
        std::env::temp_dir().join(format!("toold-{}-tmp", nix::unistd::geteuid().as_raw()))
    })
}

/// The private directory of the session `session_id`.
pub(crate) fn session_dir(session_id: &str) -> PathBuf {
    base().join(session_id)
}

/// Removes a closed session's private directory and everything in it (symlinks are removed,
/// never followed).
pub(crate) fn remove_session_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(dir = %dir.display(), %err, "cannot remove a closed session's /tmp")
        }
    }
}

/// Removes the private directories of sessions that no longer exist (closed while no daemon
/// ran); `keep`: the sessions that do.
pub(crate) fn remove_orphans(keep: &[String]) {
    let Ok(entries) = std::fs::read_dir(base()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_session = name.to_str().is_some_and(|name| name.starts_with("s_"));
        if is_session && !keep.iter().any(|id| name == id.as_str()) {
            remove_session_dir(&entry.path());
        }
    }
}

/// A call's own directory (`read_only`, or a command run without a session), removed when the
/// returned value is dropped.
pub(crate) fn call_dir() -> io::Result<tempfile::TempDir> {
    let base = base();
    make_private(base)?;
    tempfile::Builder::new().prefix("call-").tempdir_in(base)
}

/// The two directories shown at `/tmp` and `/dev/shm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrivateDirs {
    pub tmp: PathBuf,
    pub shm: PathBuf,
}

impl PrivateDirs {
    /// The session's, in `dir`, made if missing.
    pub(crate) fn of_session(dir: &Path) -> io::Result<Self> {
        make_private(base())?;
        Self::made_in(dir)
    }

    /// A call's, in its own directory.
    pub(crate) fn of_call(dir: &Path) -> io::Result<Self> {
        Self::made_in(dir)
    }

    /// A read-only stand-in for the hidden directory `cover`, kept beside the temp
    /// directories, for the sockets inside it that commands may reach.
    fn skeleton_of(&self, cover: &Path) -> io::Result<PathBuf> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        cover.hash(&mut hasher);
        let base = self.tmp.parent().unwrap_or(&self.tmp).join("covers");
        let skeleton = base.join(format!("{:016x}", hasher.finish()));
        if !skeleton.is_dir() {
            crate::judged_files::open_dir_creating(&skeleton)?;
            set_mode(&base, 0o700)?;
        }
        Ok(skeleton)
    }

    fn made_in(dir: &Path) -> io::Result<Self> {
        let dirs = Self {
            tmp: dir.join("tmp"),
            shm: dir.join("shm"),
        };
        make_private(dir)?;
        for made in [&dirs.tmp, &dirs.shm] {
            // World-writable with the sticky bit, as `/tmp` is: a command run as another
            // user inside the namespace (root) and the user's own programs share it.
            if !made.is_dir() {
                crate::judged_files::open_dir_creating(made)?;
                set_mode(made, 0o1777)?;
            }
        }
        Ok(dirs)
    }
}

/// Makes `dir` (and its parents), no symlink followed; the last is the user's alone.
fn make_private(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    crate::judged_files::open_dir_creating(dir)?;
    set_mode(dir, 0o700)
}

fn set_mode(dir: &Path, mode: u32) -> io::Result<()> {
    let fd = crate::judged_files::open(dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
    nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(mode))?;
    Ok(())
}

/// The places that show each reachable socket that a hidden directory (`covers`) or a place
/// shown elsewhere (the private `/tmp`) would hide: the socket file at its path and, for a
/// hidden directory holding one, a read-only skeleton of that directory (empty but for the
/// way to the socket) in its place.
pub(super) fn show_sockets<'a>(
    private: &PrivateDirs,
    covers: impl Iterator<Item = &'a PathBuf>,
    reachable: &[super::sockets::Reachable],
    places: &[Place],
) -> io::Result<Vec<Place>> {
    let covers: Vec<&PathBuf> = covers.collect();
    let mut shown: Vec<Place> = Vec::new();
    for socket in reachable {
        let cover = covers
            .iter()
            .find(|dir| socket.shown_at.starts_with(dir))
            .copied();
        let replaced = places.iter().any(|place| {
            place.source != place.target && socket.shown_at.starts_with(&place.target)
        });
        if cover.is_none() && !replaced {
            continue;
        }
        if let Some(cover) = cover
            && !shown.iter().any(|place| &place.target == cover)
        {
            shown.push(Place {
                source: private.skeleton_of(cover)?,
                target: cover.clone(),
                writable: false,
            });
        }
        shown.push(Place {
            source: socket.file.clone(),
            target: socket.shown_at.clone(),
            writable: false,
        });
    }
    Ok(shown)
}

/// The places of a view in the order they are attached (outermost target first), without
/// those that another place shown at its own path already shows the same way; and for each
/// that lies under a place shown elsewhere (a root under `/tmp`, which the private `/tmp`
/// hides), its mount point made in that place's directory.
pub(super) fn arrange(mut places: Vec<Place>) -> io::Result<Vec<Place>> {
    places.sort_by_key(|place| place.target.components().count());
    let mut arranged: Vec<Place> = Vec::with_capacity(places.len());
    for place in places {
        let holder = arranged
            .iter()
            .filter(|outer| place.target.starts_with(&outer.target))
            .max_by_key(|outer| outer.target.components().count());
        match holder {
            Some(outer) if outer.target == place.target && outer.source == place.source => {
                continue;
            }
            Some(outer)
                if outer.source == outer.target
                    && place.source == place.target
                    && outer.writable == place.writable =>
            {
                continue;
            }
            Some(outer) if outer.source != outer.target => {
                let Ok(inside) = place.target.strip_prefix(&outer.target) else {
                    continue;
                };
                let mount_point = outer.source.join(inside);
                let a_file = std::fs::metadata(&place.source).is_ok_and(|meta| !meta.is_dir());
                if !mount_point.exists() && !a_file {
                    crate::judged_files::open_dir_creating(&mount_point)?;
                } else if !mount_point.exists()
                    && let (Some(parent), Some(name)) =
                        (mount_point.parent(), mount_point.file_name())
                {
                    // A file's (a socket's): an empty file to bind it over.
                    let dir = crate::judged_files::open_dir_creating(parent)?;
                    // Made new (`O_EXCL`), never opened: a FIFO put there would block the open.
                    match nix::fcntl::openat(
                        &dir,
                        name,
                        OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_WRONLY
                            | OFlag::O_NONBLOCK
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        nix::sys::stat::Mode::from_bits_truncate(0o600),
                    ) {
                        Ok(_) | Err(nix::errno::Errno::EEXIST) => {}
                        Err(errno) => return Err(errno.into()),
                    }
                }
            }
            _ => {}
        }
        arranged.push(place);
    }
    Ok(arranged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_attached_outermost_first_and_mount_points_made_under_a_private_tmp() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().canonicalize().unwrap().join("private");
        std::fs::create_dir_all(&private).unwrap();
        let tmp = |rest: &str| PathBuf::from("/tmp").join(rest);
        let places = vec![
            Place::at_itself(tmp("project/sub"), true),
            Place::at_itself(tmp("project"), true),
            Place {
                source: private.clone(),
                target: PathBuf::from("/tmp"),
                writable: true,
            },
            Place::at_itself(PathBuf::from("/home/u/work"), true),
            Place::at_itself(tmp("project/readonly"), false),
        ];
        let arranged = arrange(places).unwrap();
        let targets: Vec<&Path> = arranged
            .iter()
            .map(|place| place.target.as_path())
            .collect();
        assert_eq!(
            targets,
            [
                Path::new("/tmp"),
                Path::new("/tmp/project"),
                Path::new("/home/u/work"),
                Path::new("/tmp/project/readonly"),
            ]
        );
        assert!(
            private.join("project").is_dir(),
            "the mount point of a root under /tmp"
        );
        assert!(!private.join("project/sub").exists());
    }
}
