//! The mount points inside a root, from the daemon's `/proc/self/mountinfo`, and whether the
//! mount table changed since last asked: a filesystem mounted inside a root (bind, tmpfs,
//! FUSE, NFS) brings files no watch of the root sees, and a mount or unmount changes what a
//! directory holds without any inotify event. The kernel marks the file `POLLPRI` when the
//! table changes, so asking costs one `poll` with no wait.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The daemon's mount table, open to be polled.
pub(crate) struct MountTable {
    file: File,
}

impl MountTable {
    pub(crate) fn open() -> io::Result<Self> {
        Ok(Self {
            file: File::open("/proc/self/mountinfo")?,
        })
    }

    /// Whether the table changed since the last call (or since it was opened): the kernel's
    /// `POLLPRI`, reset by reading the file again.
    pub(crate) fn changed(&mut self) -> bool {
        let mut polled = [nix::poll::PollFd::new(
            self.file.as_fd(),
            nix::poll::PollFlags::POLLPRI,
        )];
        let ready = nix::poll::poll(&mut polled, nix::poll::PollTimeout::ZERO).unwrap_or(0) > 0
            && polled[0]
                .revents()
                .is_some_and(|events| events.intersects(nix::poll::PollFlags::POLLPRI));
        if ready {
            // Read to the end: what re-arms the notification.
            let _ = self.read();
        }
        ready
    }

    /// The mount points strictly inside `root` (a canonical directory), sorted.
    pub(crate) fn inside(&mut self, root: &Path) -> Vec<PathBuf> {
        let table = self.read().unwrap_or_default();
        let mut inside: Vec<PathBuf> = table
            .lines()
            .filter_map(mount_point)
            .filter(|point| point != root && point.starts_with(root))
            .collect();
        inside.sort();
        inside.dedup();
        inside
    }

    fn read(&mut self) -> io::Result<String> {
        self.file.rewind()?;
        let mut text = String::new();
        self.file.read_to_string(&mut text)?;
        Ok(text)
    }
}

/// A mountinfo line's mount point (its fifth field), its octal escapes (`\040` for a space,
/// `\011`, `\012`, `\134`) undone.
fn mount_point(line: &str) -> Option<PathBuf> {
    let field = line.split(' ').nth(4)?;
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&byte, after)) = rest.split_first() {
        let octal = (byte == b'\\')
            .then(|| after.get(..3))
            .flatten()
            .filter(|digits| digits.iter().all(|digit| (b'0'..=b'7').contains(digit)))
            .and_then(|digits| u8::from_str_radix(std::str::from_utf8(digits).ok()?, 8).ok());
        match octal {
            Some(decoded) => {
                bytes.push(decoded);
                rest = &after[3..];
            }
            None => {
                bytes.push(byte);
                rest = after;
            }
        }
    }
    Some(PathBuf::from(
        <std::ffi::OsString as OsStringExt>::from_vec(bytes),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_read_with_their_escapes_undone() {
        let line = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw";
        assert_eq!(mount_point(line), Some(PathBuf::from("/mnt/a b")));
        assert_eq!(
            mount_point("1 2 0:1 / / rw - tmpfs x rw"),
            Some(PathBuf::from("/"))
        );
    }

    #[test]
    fn the_daemon_s_own_table_is_read() {
        let mut table = MountTable::open().unwrap();
        // `/` holds every mount point but itself.
        let inside = table.inside(Path::new("/"));
        assert!(inside.iter().all(|point| point != Path::new("/")));
    }
}
