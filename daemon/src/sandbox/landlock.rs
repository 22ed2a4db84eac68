//! The Landlock ruleset of a confined command: read everywhere but `/dev`, write only under
//! the writable directories and a few device files, no TCP when the network is off, and the signal and
//! abstract-socket scopes. Built in the daemon; the child only calls `landlock_restrict_self`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};
use toold_protocol::sync::LockUnpoisoned;

/// The newest Landlock ABI whose rights toold asks for; the crate uses what the kernel has
/// of them. ABI 9 adds control of connecting to path Unix sockets, which would deny every
/// socket outside the writable directories (a session bus, an agent's socket): toold keeps
/// its own socket out by a mount namespace or the peer check instead, until it grants those
/// precisely.
const ABI_USED: ABI = ABI::V8;

/// The device files a command may use (read, write, and truncate: `> /dev/null` opens with
/// `O_TRUNC`). Nothing else under `/dev` is readable or writable: not the terminals (a
/// command could read what is typed there, or write to it), not the disks. `/dev/shm` is a
/// temp directory, writable as such; `/dev/stdin` and friends lead to `/proc/self/fd`.
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What "read everywhere" opens once: every entry of `/` but `/dev`, each with whether it is
/// a directory.
fn readable_everywhere() -> &'static [(OwnedFd, bool)] {
    static READABLE: OnceLock<Vec<(OwnedFd, bool)>> = OnceLock::new();
    READABLE.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir("/") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|entry| entry.file_name() != "dev")
            // `/bin -> usr/bin` and the like: what they lead to has a rule of its own.
            .filter(|entry| entry.file_type().is_ok_and(|kind| !kind.is_symlink()))
            .filter_map(|entry| {
                let path = entry.path();
                let fd = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(nix::libc::O_PATH)
                    .open(&path)
                    .ok()?;
                let fd = OwnedFd::from(fd);
                Some((fd, path.is_dir()))
            })
            .collect()
    })
}

/// Rulesets built ahead, one per sandbox recently used (its writable directories and network
/// setting), each for the next command of that sandbox: building one takes about 0.1 ms of
/// `landlock_add_rule` calls, which would otherwise lie on every command's path. A ruleset is
/// used once (a command's init adds the rule of its own `/proc` to it).
static SPARES: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

/// A ruleset built ahead for `key`, with the identity of each writable directory its rules
/// name (in the order of `key`'s).
struct Spare {
    key: SpareKey,
    identities: Vec<Option<Identity>>,
    ruleset: OwnedFd,
}

type SpareKey = (Vec<PathBuf>, bool);

/// A directory's device and inode.
type Identity = (u64, u64);

/// At most this many sandboxes keep a spare (the oldest goes first).
const MAX_SPARES: usize = 16;

/// The spares, locked (a panic while they were held left them whole: each change is one
/// `Vec` operation).
fn spares() -> std::sync::MutexGuard<'static, Vec<Spare>> {
    SPARES.lock_unpoisoned()
}

/// A ruleset for `writable` and `network` ([`ruleset`]): the one built ahead for them when
/// there is one and every writable path still names the directory its rule holds (a rule
/// holds to a directory, wherever it is moved: a root moved aside and made anew would leave
/// the old one writable and the new one not).
pub(super) fn ruleset_for_a_command(
    writable: &[PathBuf],
    network: bool,
) -> Result<OwnedFd, String> {
    let key: SpareKey = (writable.to_vec(), network);
    let spare = {
        let mut spares = spares();
        spares
            .iter()
            .position(|spare| spare.key == key)
            .map(|at| spares.remove(at))
    };
    match spare.filter(|spare| spare.identities == identities(writable)) {
        Some(built_ahead) => Ok(built_ahead.ruleset),
        None => ruleset(writable, network),
    }
}

/// Builds the next command's ruleset for `writable` and `network` in the background. Called
/// once a command runs, not before: on a machine of few cores the build would take a core
/// from the command's own start.
pub(super) fn build_ahead(writable: &[PathBuf], network: bool) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let key: SpareKey = (writable.to_vec(), network);
    runtime.spawn_blocking(move || {
        // Taken before the build: a directory replaced during it fails the check.
        let identities = identities(&key.0);
        let Ok(ruleset) = ruleset(&key.0, key.1) else {
            return;
        };
        let mut spares = spares();
        spares.retain(|spare| spare.key != key);
        if spares.len() >= MAX_SPARES {
            spares.remove(0);
        }
        spares.push(Spare {
            key,
            identities,
            ruleset,
        });
    });
}

/// The identity of each of `dirs`, looked up as [`beneath`] opens them (no symlink followed);
/// `None` for one that cannot be.
fn identities(dirs: &[PathBuf]) -> Vec<Option<Identity>> {
    dirs.iter()
        .map(|dir| {
            let fd = crate::judged_files::open(dir, nix::fcntl::OFlag::O_PATH).ok()?;
            let stat = nix::sys::stat::fstat(&fd).ok()?;
            Some((stat.st_dev, stat.st_ino))
        })
        .collect()
}

/// A Landlock ruleset as an open descriptor, ready for `landlock_restrict_self`.
pub(super) fn ruleset(writable: &[PathBuf], network: bool) -> Result<OwnedFd, String> {
    let every_fs_right = AccessFs::from_all(ABI_USED);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(every_fs_right)
        .map_err(|err| err.to_string())?
        .scope(Scope::from_all(ABI_USED))
        .map_err(|err| err.to_string())?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI_USED))
            .map_err(|err| err.to_string())?;
    }
    let device_rights =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let read = AccessFs::from_read(ABI_USED);
    let mut created = ruleset
        .create()
        .map_err(|err| err.to_string())?
        // Listing `/` itself; what is below it, entry by entry.
        .add_rule(beneath(Path::new("/"), AccessFs::ReadDir.into()).ok_or("cannot open /")?)
        .map_err(|err| err.to_string())?;
    for (fd, is_dir) in readable_everywhere() {
        let rights = if *is_dir {
            read
        } else {
            read & AccessFs::from_file(ABI_USED)
        };
        created = created
            .add_rule(PathBeneath::new(fd.as_fd(), rights))
            .map_err(|err| err.to_string())?;
    }
    let rules = writable
        .iter()
        .filter_map(|dir| beneath(dir, every_fs_right))
        .chain(
            DEVICES
                .iter()
                .filter_map(|device| beneath(Path::new(device), device_rights)),
        );
    for rule in rules {
        created = created.add_rule(rule).map_err(|err| err.to_string())?;
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| "the kernel enforces none of the ruleset's rights".to_owned())
}

/// A rule giving `rights` beneath `path`; `None` when `path` cannot be opened (it does not
/// exist: nothing to grant) or leads through a symlink: the writable places are resolved paths
/// (roots, temp directories, the config's), and a symlink there was put by someone who could
/// write its parent (a command, with a root under `/tmp`) to send the next command's writes
/// elsewhere. Rights a file cannot have (directory ones) are left out for one.
fn beneath(path: &Path, rights: BitFlags<AccessFs>) -> Option<PathBeneath<OwnedFd>> {
    let fd = crate::judged_files::open(path, nix::fcntl::OFlag::O_PATH).ok()?;
    let is_dir = nix::sys::stat::fstat(&fd)
        .is_ok_and(|stat| stat.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR);
    let rights = if is_dir {
        rights
    } else {
        rights & AccessFs::from_file(ABI_USED)
    };
    Some(PathBeneath::new(fd, rights))
}

/// The rights "read everywhere" gives that this kernel enforces, as the bits
/// `landlock_add_rule` takes: for the `/proc` a command's PID namespace mounts, which no rule
/// made in the daemon can name (a rule holds to the inode it was opened on, and a path
/// crossing a mount point is judged by the rules of what is mounted there).
pub(super) fn read_rights_bits() -> u64 {
    let abi = kernel_abi()
        .and_then(|version| i32::try_from(version).ok())
        .map_or(ABI::Unsupported, ABI::from);
    (AccessFs::from_read(ABI_USED) & AccessFs::from_all(abi)).bits()
}

/// `struct landlock_path_beneath_attr` (linux/landlock.h), which is packed.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// In the child, before `restrict_self`: `rights` (from [`read_rights_bits`]) beneath `dir`,
/// added to `ruleset`. System calls only.
#[allow(unsafe_code)]
pub(super) fn allow_beneath(
    ruleset: &OwnedFd,
    dir: &std::ffi::CStr,
    rights: u64,
) -> io::Result<()> {
    use nix::libc;
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    // SAFETY: open of a NUL-terminated path; the rule's attribute lives on this stack for the
    // call; the descriptor opened is closed before returning.
    unsafe {
        let fd = libc::open(
            dir.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: rights,
            parent_fd: fd,
        };
        let added = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0,
        );
        let error = io::Error::last_os_error();
        libc::close(fd);
        if added != 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// In the child: no new privileges (Landlock requires it without `CAP_SYS_ADMIN`), then the
/// ruleset. System calls only.
#[allow(unsafe_code)]
pub(super) fn restrict_self(ruleset: &OwnedFd) -> io::Result<()> {
    use nix::libc;
    // SAFETY: prctl and the Landlock system call take plain integers; the descriptor is open.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Landlock ABI version the kernel offers; `None` without Landlock (not built in, or not
/// enabled at boot).
#[allow(unsafe_code)]
pub(super) fn kernel_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: nix::libc::c_uint = 1;
    // SAFETY: with a null attribute and the version flag, the call only returns a number.
    let version = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).ok().filter(|version| *version > 0)
}
