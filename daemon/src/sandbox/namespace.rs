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

use nix::fcntl::OFlag;
use nix::libc;

use super::git::GitPath;
use super::kept_out::{DaemonSocket, local_services};

/// A directory of the host shown in a command's view: `source` at `target` — the same path for
/// a root or a `writable` directory, the session's private temp directory at `/tmp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    pub source: PathBuf,
    pub target: PathBuf,
    pub writable: bool,
}

impl Place {
    /// A place shown where it is on the host.
    pub(super) fn at_itself(path: PathBuf, writable: bool) -> Self {
        Self {
            source: path.clone(),
            target: path,
            writable,
        }
    }

    fn replaces(&self) -> bool {
        self.source != self.target
    }
}

/// A path a command cannot read, and whether it is a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hidden {
    pub path: PathBuf,
    pub is_dir: bool,
}

impl Hidden {
    /// `paths` that exist, each looked at once.
    pub(super) fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<Self> {
        let mut found: Vec<Self> = paths
            .into_iter()
            .filter_map(|path| {
                let is_dir = std::fs::metadata(&path).ok()?.is_dir();
                Some(Self { path, is_dir })
            })
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found.dedup_by(|a, b| a.path == b.path);
        found
    }
}

/// What a command's mount namespace is planned from (host paths throughout).
#[derive(Debug, Clone, Copy)]
pub(super) struct View<'a> {
    pub socket: Option<&'a DaemonSocket>,
    pub git: &'a [GitPath],
    /// Shown in the view, outermost target first (a place inside another is attached after
    /// it, over it).
    pub places: &'a [Place],
    /// Everything but the places made read-only (`mount_setattr`, Linux 5.12).
    pub read_only_elsewhere: bool,
    /// Where the command may write (the Landlock rules' directories).
    pub writable: &'a [PathBuf],
    /// Covered: directories by an empty read-only tmpfs, anything else by `/dev/null` (they
    /// exist).
    pub hidden: &'a [Hidden],
    /// toold's own files and directories (they exist), bound read-only where the command could
    /// otherwise write them, with their parents pinned.
    pub protected: &'a [PathBuf],
}

impl View<'_> {
    /// The place a host path lies in as the view shows it: the deepest place whose target
    /// holds it.
    fn place_of(&self, path: &Path) -> Option<&Place> {
        self.places
            .iter()
            .filter(|place| path.starts_with(&place.target))
            .max_by_key(|place| place.target.components().count())
    }

    /// Whether the view shows the host's `path` at that path: not inside a place shown over
    /// another directory (`/tmp`), where the host's files are not there to be reached.
    fn shows_host_path(&self, path: &Path) -> bool {
        self.place_of(path).is_none_or(|place| !place.replaces())
    }

    /// Whether `place` lies under another place shown elsewhere (a root under the private
    /// `/tmp`): its target is then a mount point made there, not the host's directory.
    fn under_a_replacing_place(&self, place: &Place) -> bool {
        self.places.iter().any(|outer| {
            outer.replaces() && outer != place && place.target.starts_with(&outer.target)
        })
    }

    /// Whether a command could write `path` where the view shows it.
    fn writable_at(&self, path: &Path) -> bool {
        self.shows_host_path(path) && self.writable.iter().any(|dir| path.starts_with(dir))
    }

    /// `path`'s parents that a command could rename (inside a writable directory, not the
    /// directory itself), outermost first: a pin of each keeps a mount below from being moved
    /// away with its parent, and a decoy from taking its place.
    fn renamable_parents<'p>(&self, path: &'p Path) -> Vec<&'p Path> {
        let mut parents: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .filter(|parent| {
                self.shows_host_path(parent)
                    && self
                        .writable
                        .iter()
                        .chain(self.places.iter().map(|place| &place.target))
                        .any(|dir| parent.starts_with(dir) && parent != dir)
            })
            .collect();
        parents.reverse();
        parents
    }
}

/// The most places one view may show: the child keeps their detached copies on its stack.
pub(super) const MAX_PLACES: usize = 64;

/// A place as the child attaches it.
#[derive(Debug)]
struct PlaceMount {
    source: CString,
    /// The source's device and inode when planned: the child opens the source without
    /// following a symlink anywhere along its path and checks that it is still this
    /// directory, so that what was planned is what is shown, whatever a component became
    /// since (a descriptor opened here would name a mount of the daemon's namespace, which the
    /// child's cannot copy).
    source_identity: (u64, u64),
    target: CString,
    /// A place shown at its own path: its target must be the source itself.
    at_itself: bool,
    writable: bool,
    /// For a remount read-only without `mount_setattr`.
    locked: libc::c_ulong,
}

impl PlaceMount {
    /// `place` of `view` as the child attaches it.
    fn of(place: &Place, view: &View<'_>) -> Result<Self, String> {
        let cannot = |err: io::Error| {
            format!(
                "cannot show {} in the command's sandbox: {err}",
                place.source.display()
            )
        };
        let source = crate::judged_files::open(&place.source, OFlag::O_PATH).map_err(cannot)?;
        let stat = nix::sys::stat::fstat(&source).map_err(|errno| cannot(errno.into()))?;
        let invalid = || cannot(io::Error::from(io::ErrorKind::InvalidInput));
        Ok(Self {
            source: c_path(&place.source).ok_or_else(invalid)?,
            source_identity: (stat.st_dev, stat.st_ino),
            target: c_path(&place.target).ok_or_else(invalid)?,
            // Under a place shown elsewhere (a root under the private `/tmp`) its target is a
            // mount point made there, not the source.
            at_itself: !place.replaces() && !view.under_a_replacing_place(place),
            writable: place.writable,
            // Only a remount without the mount API needs them.
            locked: if view.read_only_elsewhere || place.writable {
                0
            } else {
                locked_flags(&place.source)
            },
        })
    }
}

/// What the child mounts, every path and map line built before the fork.
#[derive(Debug)]
pub(super) struct Mounts {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Attached in order, before everything below.
    places: Vec<PlaceMount>,
    /// Everything outside the places is made read-only, the places copied first.
    read_only_elsewhere: bool,
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

impl Mounts {
    /// The mounts that make `view`; an error names what cannot be planned.
    pub(super) fn plan(view: &View<'_>) -> Result<Self, String> {
        if view.places.len() > MAX_PLACES {
            return Err(format!(
                "a command's sandbox can show at most {MAX_PLACES} directories (roots and \
                 writable directories), not {}",
                view.places.len()
            ));
        }
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let mut mounts = Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            places: view
                .places
                .iter()
                // Without the read-only pass, a writable place shown at its own path needs no
                // mount, unless a place shown elsewhere (the private `/tmp`) covers it.
                .filter(|place| {
                    view.read_only_elsewhere
                        || place.replaces()
                        || !place.writable
                        || view.under_a_replacing_place(place)
                })
                .map(|place| PlaceMount::of(place, view))
                .collect::<Result<_, _>>()?,
            read_only_elsewhere: view.read_only_elsewhere,
            hidden_dirs: Vec::new(),
            hidden_files: Vec::new(),
            pinned: Vec::new(),
            read_only: Vec::new(),
            own_pids: false,
        };
        // The daemon's socket: its directory when toold's own, else the file.
        let mut kept: Vec<&Path> = Vec::new();
        if let Some(socket) = view.socket {
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
            kept.push(covered);
        }
        // Services that run code for the user on request (systemd and the session bus in
        // `$XDG_RUNTIME_DIR`, docker, podman, the system bus) are kept from commands as the
        // daemon's socket is: one of them would run a command outside any sandbox. Not a
        // directory that holds a place commands may write.
        let services = local_services();
        for dir in &services.dirs {
            let holds_a_place = view
                .writable
                .iter()
                .chain(view.places.iter().map(|place| &place.target))
                .any(|place| place.starts_with(dir));
            if !holds_a_place {
                mounts.hidden_dirs.extend(c_path(dir));
            }
        }
        mounts
            .hidden_files
            .extend(services.sockets.iter().filter_map(|socket| c_path(socket)));
        for hidden in view.hidden {
            if hidden.is_dir {
                mounts.hidden_dirs.extend(c_path(&hidden.path));
            } else {
                mounts.hidden_files.extend(c_path(&hidden.path));
            }
        }
        for path in view.git {
            match path {
                GitPath::Pinned(dir) if view.writable_at(dir) => {
                    mounts.pinned.extend(c_path(dir));
                    kept.push(dir);
                }
                GitPath::ReadOnly(path) if view.writable_at(path) => {
                    if let Some(c) = c_path(path) {
                        mounts.read_only.push((c, locked_flags(path)));
                    }
                    kept.push(path);
                }
                GitPath::Pinned(_) | GitPath::ReadOnly(_) | GitPath::MustNotAppear(_) => {}
            }
        }
        // toold's own directories and config file (its hooks run unsandboxed; its saved
        // sessions' rules) where a command could otherwise write them: under a root.
        for path in view.protected {
            if view.writable_at(path)
                && path.exists()
                && let Some(c) = c_path(path)
            {
                mounts.read_only.push((c, locked_flags(path)));
                kept.push(path);
            }
        }
        // Hidden paths under a writable place: their parents pinned too, so that a cover
        // cannot be moved away with its parent and a decoy put where it was.
        kept.extend(
            view.hidden
                .iter()
                .map(|hidden| hidden.path.as_path())
                .filter(|path| view.writable_at(path)),
        );
        // What keeps the daemon's files and socket must stay where it was put: their parents
        // that a command could rename are pinned, outermost first (a pin made later inside an
        // earlier one is seen through it), before the git directories' own pins.
        let mut parents: Vec<CString> = Vec::new();
        for path in kept {
            for parent in view.renamable_parents(path) {
                if let Some(c) = c_path(parent)
                    && !parents.contains(&c)
                {
                    parents.push(c);
                }
            }
        }
        parents.append(&mut mounts.pinned);
        mounts.pinned = parents;
        mounts.drop_the_unseen(view);
        Ok(mounts)
    }

    /// Leaves out what would only cost a mount or fail: a cover inside another, and a pin, a
    /// cover or a read-only bind inside a cover (nothing below a cover is seen, and a cover's
    /// mount point cannot be renamed); and any of them at a host path the view does not show
    /// (under the private `/tmp`, where that path is not there).
    fn drop_the_unseen(&mut self, view: &View<'_>) {
        let as_path = |c: &CString| PathBuf::from(OsStr::from_bytes(c.as_bytes()));
        let shown = |c: &CString| view.shows_host_path(&as_path(c));
        self.hidden_dirs.retain(shown);
        self.hidden_files.retain(shown);
        self.pinned.retain(shown);
        self.read_only.retain(|(c, _)| shown(c));
        let covers: Vec<PathBuf> = self.hidden_dirs.iter().map(as_path).collect();
        let under_a_cover = |c: &CString, own: bool| {
            let path = as_path(c);
            covers
                .iter()
                .any(|cover| path.starts_with(cover) && (!own || &path != cover))
        };
        self.hidden_dirs.retain(|dir| !under_a_cover(dir, true));
        self.hidden_dirs.sort();
        self.hidden_dirs.dedup();
        self.hidden_files.retain(|file| !under_a_cover(file, false));
        self.hidden_files.sort();
        self.hidden_files.dedup();
        self.pinned.retain(|pin| !under_a_cover(pin, false));
        self.read_only
            .retain(|(path, _)| !under_a_cover(path, false));
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
                // A non-dumpable process's `/proc/self` files are root's: an unprivileged
                // user could not write them. The daemon (whose memory this child shares)
                // is made dumpable only while they are written, under the spawn's lock.
                let was_dumpable = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1;
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
                let written = write_file(c"/proc/self/setgroups", b"deny")
                    .and_then(|()| write_file(c"/proc/self/uid_map", &self.uid_map))
                    .and_then(|()| write_file(c"/proc/self/gid_map", &self.gid_map));
                if !was_dumpable {
                    libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                }
                written?;
            }
            // Nothing mounted here travels back to the daemon's namespace: a mount namespace
            // made with a user namespace of its own gets the parent's shared mounts as slaves.
            self.attach_places()?;
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

    /// In the child: the places shown. With `read_only_elsewhere`, each is copied (a detached
    /// tree, `open_tree`) before everything is made read-only (`mount_setattr` on `/`,
    /// recursively), then attached at its target: the copies keep the flags they had, so a
    /// writable place stays writable and nothing read-only before becomes writable. Without
    /// it, a place shown elsewhere is bound there. A place that is not writable is made
    /// read-only once attached. Each target is looked up without following a symlink, and a
    /// place shown at its own path must still be that directory. System calls only: the
    /// copies' descriptors are kept on the stack.
    #[allow(unsafe_code)]
    fn attach_places(&self) -> io::Result<()> {
        // Every source is taken before anything is attached: a place attached first (the
        // private `/tmp`) would hide another's source (a root under `/tmp`).
        let mut sources: [libc::c_int; MAX_PLACES] = [-1; MAX_PLACES];
        let taken = self.take_sources(&mut sources);
        let attached = taken.and_then(|()| self.attach_sources(&sources));
        for fd in sources.iter().filter(|fd| **fd >= 0) {
            // SAFETY: closes a descriptor this process opened.
            unsafe { libc::close(*fd) };
        }
        attached
    }

    /// Opens each place's source, checked to be the planned directory, into `sources`; with
    /// `read_only_elsewhere`, a detached copy of it (`open_tree`). System calls only.
    #[allow(unsafe_code)]
    fn take_sources(&self, sources: &mut [libc::c_int; MAX_PLACES]) -> io::Result<()> {
        for (slot, place) in sources.iter_mut().zip(&self.places) {
            // SAFETY: a NUL-terminated path made before the clone.
            let source = unsafe { open_checked(&place.source, Some(place.source_identity)) }?;
            if !self.read_only_elsewhere {
                *slot = source;
                continue;
            }
            let flags = OPEN_TREE_CLONE
                | libc::AT_RECURSIVE as libc::c_uint
                | libc::AT_EMPTY_PATH as libc::c_uint
                | libc::O_CLOEXEC as libc::c_uint;
            // SAFETY: an open descriptor and an empty NUL-terminated path.
            let copy = unsafe { libc::syscall(libc::SYS_open_tree, source, c"".as_ptr(), flags) };
            let error = io::Error::last_os_error();
            // SAFETY: closes the descriptor just opened.
            unsafe { libc::close(source) };
            if copy < 0 {
                return Err(error);
            }
            *slot = copy as libc::c_int;
        }
        Ok(())
    }

    /// Attaches each source at its place's target: the copies after everything else was made
    /// read-only, or binds of the sources. System calls only.
    #[allow(unsafe_code)]
    fn attach_sources(&self, sources: &[libc::c_int; MAX_PLACES]) -> io::Result<()> {
        // SAFETY: as for `enter`: NUL-terminated strings made before the clone, descriptors
        // this process opened; the structures and buffers passed live on this stack.
        unsafe {
            if self.read_only_elsewhere {
                set_read_only(c"/", true)?;
            }
            for (source, place) in sources.iter().zip(&self.places) {
                let identity = place.at_itself.then_some(place.source_identity);
                let target = open_checked(&place.target, identity)?;
                let attached = if self.read_only_elsewhere {
                    let moved = libc::syscall(
                        libc::SYS_move_mount,
                        *source,
                        c"".as_ptr(),
                        target,
                        c"".as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
                    );
                    if moved == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    }
                } else {
                    let mut source_path = [0u8; 32];
                    let mut target_path = [0u8; 32];
                    mount(
                        Some(proc_fd_path(*source, &mut source_path)),
                        proc_fd_path(target, &mut target_path),
                        None,
                        libc::MS_BIND | libc::MS_REC,
                        None,
                    )
                };
                libc::close(target);
                attached?;
                if !place.writable {
                    if self.read_only_elsewhere {
                        set_read_only(&place.target, true)?;
                    } else {
                        let flags =
                            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | place.locked;
                        mount(None, &place.target, None, flags, None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `open_tree`'s flag for a detached copy (linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `move_mount`'s flags: the source, the target, is the descriptor itself (linux/mount.h).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
/// `mount_setattr`'s read-only attribute (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `openat2`'s: no symlink anywhere on the path (linux/openat2.h).
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

/// `struct mount_attr` (linux/mount.h).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct open_how` (linux/openat2.h).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Makes the mount at `path` read-only and private, with every mount below it when
/// `recursive`: private, so that a mount the host makes later (a disk plugged in, an
/// automount) does not appear in the command's view writable. System calls only.
#[allow(unsafe_code)]
unsafe fn set_read_only(path: &CStr, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: a NUL-terminated path and an attribute structure alive for the call.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// In the child: the directory (or, for a socket's place, the file) `path`, opened (`O_PATH`)
/// without following a symlink anywhere along it; with `identity`, checked to be that very
/// one (`EXDEV` if it is not). System calls only.
#[allow(unsafe_code)]
unsafe fn open_checked(path: &CStr, identity: Option<(u64, u64)>) -> io::Result<libc::c_int> {
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: a NUL-terminated path and a structure alive for the calls; the `stat` buffer
    // is this stack's.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = fd as libc::c_int;
        if let Some((dev, ino)) = identity {
            let mut stat: libc::stat = std::mem::zeroed();
            let same = libc::fstat(fd, &mut stat) == 0 && stat.st_dev == dev && stat.st_ino == ino;
            if !same {
                libc::close(fd);
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
        }
        Ok(fd)
    }
}

/// `/proc/self/fd/FD`, written into `buffer` (no allocation: the child's).
fn proc_fd_path(fd: libc::c_int, buffer: &mut [u8; 32]) -> &CStr {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buffer[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let mut count = 0;
    let mut rest = fd.unsigned_abs();
    loop {
        digits[count] = b'0' + (rest % 10) as u8;
        count += 1;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for (at, digit) in digits[..count].iter().rev().enumerate() {
        buffer[PREFIX.len() + at] = *digit;
    }
    buffer[PREFIX.len() + count] = 0;
    CStr::from_bytes_until_nul(buffer).unwrap_or(c"/proc/self/fd/")
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
