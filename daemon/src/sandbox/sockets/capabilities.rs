//! A thread of the daemon without its effective capabilities for as long as it carries out a
//! command's socket call: a daemon run as root (`--allow-root`) must not lend a command its
//! privileges (a netlink message the kernel checks the sender's capabilities for, a
//! privileged socket option in a control message).

use nix::libc;

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`, two of them for 64 capabilities.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const VERSION_3: u32 = 0x2008_0522;

/// This thread's effective capabilities, cleared until dropped (then restored).
pub(super) struct Lowered(Option<[Data; 2]>);

impl Lowered {
    /// Clears this thread's effective capabilities (the permitted ones kept, to restore them);
    /// nothing to do for a thread that has none.
    #[allow(unsafe_code)]
    pub(super) fn now() -> Self {
        let mut header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let mut saved = [Data::default(); 2];
        // SAFETY: the kernel fills the two structures of this stack.
        let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, saved.as_mut_ptr()) };
        if got != 0 || saved.iter().all(|data| data.effective == 0) {
            return Self(None);
        }
        let mut lowered = saved;
        for data in &mut lowered {
            data.effective = 0;
        }
        // SAFETY: as above, read by the kernel; `pid` 0 is this thread alone.
        let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, lowered.as_ptr()) };
        Self((set == 0).then_some(saved))
    }
}

impl Drop for Lowered {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            let mut header = Header {
                version: VERSION_3,
                pid: 0,
            };
            // SAFETY: as in `now`.
            unsafe { libc::syscall(libc::SYS_capset, &mut header, saved.as_ptr()) };
        }
    }
}
