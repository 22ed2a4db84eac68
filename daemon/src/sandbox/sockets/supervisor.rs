//! The daemon's side of a command's socket filter (`filter.rs`): every `connect`, `sendto`
//! with an address, `sendmsg` and `sendmmsg` of the command's processes waits here. The daemon
//! reads the call's arguments from the caller's memory, judges the address, and makes the call
//! itself on a copy of the caller's socket (the same open socket): a program that rewrites its
//! memory or its descriptors after the daemon looked changes nothing, since the kernel never
//! reads them again. A Unix socket is reached only if a process of the command itself serves
//! it, or the config names it (`[sandbox] unix_sockets`); every other address (IP, where the
//! network is on; netlink) is passed as it is.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use nix::libc;
use tokio::io::unix::AsyncFd;
use toold_protocol::sync::LockUnpoisoned;

use super::capabilities;
use super::owners::{self, Bound};
use super::target::Target;

/// The largest address a call may give (`struct sockaddr_storage`).
const MAX_ADDRESS: usize = 128;
/// The most data one emulated send copies; a larger one sends this much (a short send, which a
/// stream socket's writer takes in its stride; no datagram is that large).
const MAX_DATA: usize = 4 * 1024 * 1024;
/// The calls of one command the daemon carries out at a time; the others wait in the kernel.
/// A call may block (a full buffer, a backlog): a command cannot hold more of the daemon's
/// threads than this.
const MAX_IN_FLIGHT: usize = 8;
/// The flags of a send the daemon passes on: the others (`MSG_ZEROCOPY`, which would have the
/// kernel read the daemon's buffer after the call returned) are refused (`EOPNOTSUPP`).
const PASSED_FLAGS: libc::c_int = libc::MSG_DONTWAIT
    | libc::MSG_EOR
    | libc::MSG_MORE
    | libc::MSG_OOB
    | libc::MSG_NOSIGNAL
    | libc::MSG_CONFIRM
    | libc::MSG_DONTROUTE
    | libc::MSG_FASTOPEN;
/// The most control data (`msg_control`) one `sendmsg` may carry.
const MAX_CONTROL: usize = 64 * 1024;
/// The most buffers (`msg_iov`) or messages (`sendmmsg`) one call may give (`UIO_MAXIOV`).
const MAX_VECTORS: usize = 1024;

/// What a command's socket calls are judged by.
#[derive(Debug, Default)]
pub(crate) struct SocketRules {
    /// The sockets the config lets commands reach: each one's device and inode.
    pub(crate) allowed: Vec<(u64, u64)>,
}

/// The supervision of one command's socket calls, for as long as it is held; what it refused.
#[derive(Debug)]
pub(crate) struct Supervisor {
    task: tokio::task::JoinHandle<()>,
    refused: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<InFlight>,
}

impl Drop for Supervisor {
    /// The call is over: no call of its is taken any more, and one still being carried out
    /// (a connect to an address that never answers) is ended, so that no thread of the
    /// daemon's waits on a command that is gone.
    fn drop(&mut self) {
        self.task.abort();
        self.in_flight.end_all();
    }
}

/// The sockets of the calls being carried out (copies, so that ending one never touches a
/// descriptor number reused meanwhile).
#[derive(Debug, Default)]
struct InFlight(Mutex<Vec<(u64, Arc<OwnedFd>)>>);

impl InFlight {
    fn add(&self, id: u64, socket: &OwnedFd) {
        if let Ok(copy) = socket.try_clone() {
            self.0.lock_unpoisoned().push((id, Arc::new(copy)));
        }
    }

    fn remove(&self, id: u64) {
        self.0.lock_unpoisoned().retain(|(call, _)| *call != id);
    }

    fn end_all(&self) {
        for (_, socket) in self.0.lock_unpoisoned().drain(..) {
            // SAFETY: a descriptor this process owns.
            #[allow(unsafe_code)]
            unsafe {
                libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR)
            };
        }
    }
}

impl Supervisor {
    /// The addresses refused so far, each once, as a person reads them.
    pub(crate) fn refused(&self) -> Vec<String> {
        self.refused.lock_unpoisoned().clone()
    }
}

/// Starts deciding the socket calls that wait on `listener`, for the command whose init is
/// `init` (the daemon's pid of it).
pub(crate) fn supervise(
    listener: OwnedFd,
    init: u32,
    rules: Arc<SocketRules>,
) -> io::Result<Supervisor> {
    let refused = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(InFlight::default());
    // SAFETY: the `OwnedFd` stays open, and the same descriptor, for as long as the
    // `AsyncFd` owns it.
    #[allow(unsafe_code)]
    let registered =
        unsafe { AsyncFd::register_with_interest(listener, tokio::io::Interest::READABLE) };
    let listener = Arc::new(registered.map_err(|error| error.into_parts().1)?);
    let task = tokio::spawn(serve(
        listener,
        init,
        rules,
        Arc::clone(&refused),
        Arc::clone(&in_flight),
    ));
    Ok(Supervisor {
        task,
        refused,
        in_flight,
    })
}

async fn serve(
    listener: Arc<AsyncFd<OwnedFd>>,
    init: u32,
    rules: Arc<SocketRules>,
    refused: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<InFlight>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok(mut ready) = listener.readable().await else {
            return;
        };
        // The kernel's read of a call blocks while there is none, and a listener whose
        // processes are all gone is ready too (hung up): read only what is there.
        match waiting(listener.get_ref()) {
            Waiting::Call => {}
            Waiting::Nothing => {
                ready.clear_ready();
                continue;
            }
            Waiting::NoOneLeft => return,
        }
        match receive(listener.get_ref()) {
            Ok(notification) => {
                let (listener, rules, refused, in_flight) = (
                    Arc::clone(&listener),
                    Arc::clone(&rules),
                    Arc::clone(&refused),
                    Arc::clone(&in_flight),
                );
                // A connect or a send may block (a full backlog, a blocking socket): on a
                // thread of its own, the slot held until it is done.
                tokio::task::spawn_blocking(move || {
                    let _slot = slot;
                    let _without_capabilities = capabilities::Lowered::now();
                    let context = Context {
                        init,
                        rules: &rules,
                        refused: &refused,
                        in_flight: &in_flight,
                    };
                    let answer = decide(&notification, &context, listener.get_ref());
                    in_flight.remove(notification.id);
                    respond(listener.get_ref(), notification.id, answer);
                });
            }
            // The call was withdrawn (its thread was killed) between the look and the read.
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {}
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(%error, "cannot read a sandboxed command's socket call");
                return;
            }
        }
    }
}

/// Refuses every call that waits on `listener` (`EACCES`) until no process is left that the
/// filter could stop, blocking the thread: for the start-up probe's shell.
pub(crate) fn refuse_all(listener: &OwnedFd) {
    loop {
        match waiting(listener) {
            Waiting::NoOneLeft => return,
            Waiting::Call => {
                if let Ok(notification) = receive(listener) {
                    respond(listener, notification.id, Some(Err(libc::EACCES)));
                }
            }
            Waiting::Nothing => {
                let mut poll = [libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                // SAFETY: one pollfd on this stack.
                #[allow(unsafe_code)]
                unsafe {
                    libc::poll(poll.as_mut_ptr(), 1, 1000)
                };
            }
        }
    }
}

/// What a look at the listener finds.
enum Waiting {
    Call,
    Nothing,
    /// Hung up: no process is left that the filter could stop.
    NoOneLeft,
}

fn waiting(listener: &OwnedFd) -> Waiting {
    let mut poll = [libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: one pollfd on this stack; no wait.
    #[allow(unsafe_code)]
    let polled = unsafe { libc::poll(poll.as_mut_ptr(), 1, 0) };
    let revents = poll[0].revents;
    if polled > 0 && revents & libc::POLLIN != 0 {
        Waiting::Call
    } else if polled > 0 && revents & (libc::POLLHUP | libc::POLLERR) != 0 {
        Waiting::NoOneLeft
    } else {
        Waiting::Nothing
    }
}

fn receive(listener: &OwnedFd) -> io::Result<libc::seccomp_notif> {
    // SAFETY: the kernel requires the structure zeroed; it writes it whole.
    #[allow(unsafe_code)]
    let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: an ioctl filling a structure of this stack.
    #[allow(unsafe_code)]
    let received = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut notification as *mut libc::seccomp_notif,
        )
    };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(notification)
}

/// Whether the notification `id` is still pending: its thread still waits, so the pid read
/// before names it.
fn still_pending(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: an ioctl reading a value of this stack.
    #[allow(unsafe_code)]
    let valid = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _,
            &id as *const u64,
        )
    };
    valid == 0
}

/// What the waiting call returns: a value, an errno, or nothing (it is gone).
type Answer = Option<Result<i64, i32>>;

fn respond(listener: &OwnedFd, id: u64, answer: Answer) {
    let Some(answer) = answer else { return };
    let (val, error) = match answer {
        Ok(value) => (value, 0),
        Err(errno) => (0, -errno),
    };
    let response = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags: 0,
    };
    // SAFETY: an ioctl reading a structure of this stack. A thread that went away meanwhile
    // (`ENOENT`) needs no answer.
    #[allow(unsafe_code)]
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &response as *const libc::seccomp_notif_resp,
        )
    };
}

/// What every call of a command is decided with.
struct Context<'a> {
    init: u32,
    rules: &'a SocketRules,
    refused: &'a Mutex<Vec<String>>,
    in_flight: &'a InFlight,
}

/// Carries out, or refuses, one waiting call.
fn decide(notification: &libc::seccomp_notif, context: &Context<'_>, listener: &OwnedFd) -> Answer {
    let target = match Target::of(notification.pid) {
        Ok(target) => target,
        Err(_) => return still_pending(listener, notification.id).then_some(Err(libc::ESRCH)),
    };
    let call = Call {
        target: &target,
        init: context.init,
        rules: context.rules,
        refused: context.refused,
        in_flight: context.in_flight,
        id: notification.id,
        pending: &|| still_pending(listener, notification.id),
    };
    let args = notification.data.args;
    let nr = i64::from(notification.data.nr);
    let outcome = match nr {
        libc::SYS_connect => call.connect(args),
        libc::SYS_sendto => call.sendto(args),
        libc::SYS_sendmsg => call.sendmsg(args[0], args[1], args[2]),
        libc::SYS_sendmmsg => call.sendmmsg(args),
        _ => Err(Failure::Errno(libc::ENOSYS)),
    };
    match outcome {
        Ok(value) => Some(Ok(value)),
        Err(Failure::Gone) => None,
        Err(Failure::Errno(errno)) => Some(Err(errno)),
    }
}

/// Why a call did not happen.
enum Failure {
    /// Its thread is gone: no answer.
    Gone,
    /// It fails with this errno.
    Errno(i32),
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure::Errno(error.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// One waiting call and what it is judged by.
struct Call<'a> {
    target: &'a Target,
    init: u32,
    rules: &'a SocketRules,
    refused: &'a Mutex<Vec<String>>,
    in_flight: &'a InFlight,
    /// The notification's id.
    id: u64,
    /// Whether the call still waits: checked after everything was read from its thread and
    /// before anything is done for it.
    pending: &'a dyn Fn() -> bool,
}

/// An address judged and ready to use: the caller's own bytes, or for a Unix socket's file
/// the path of a descriptor of the very socket file that was judged, which the kernel reaches
/// without looking the caller's path up again.
struct Address {
    bytes: Vec<u8>,
    /// Keeps the descriptor the bytes name open.
    _file: Option<OwnedFd>,
}

impl Call<'_> {
    fn connect(&self, args: [u64; 6]) -> Result<i64, Failure> {
        let address = self.read_address(args[1], args[2])?;
        let socket = self.target.descriptor(args[0])?;
        let address = self.judge(address)?;
        self.still_waiting(&socket)?;
        // SAFETY: a socket descriptor and an address buffer of this process.
        #[allow(unsafe_code)]
        let connected = unsafe {
            libc::connect(
                socket.as_raw_fd(),
                address.bytes.as_ptr().cast(),
                address.bytes.len() as libc::socklen_t,
            )
        };
        if connected < 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(0)
    }

    fn sendto(&self, args: [u64; 6]) -> Result<i64, Failure> {
        let address = self.read_address(args[4], args[5])?;
        let len = usize::try_from(args[2]).unwrap_or(usize::MAX).min(MAX_DATA);
        let data = self.target.read(args[1], len)?;
        let socket = self.target.descriptor(args[0])?;
        let flags = Self::passed_flags(args[3])?;
        let address = self.judge(address)?;
        self.still_waiting(&socket)?;
        // SAFETY: a socket descriptor and buffers of this process.
        #[allow(unsafe_code)]
        let sent = unsafe {
            libc::sendto(
                socket.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                flags | libc::MSG_NOSIGNAL,
                address.bytes.as_ptr().cast(),
                address.bytes.len() as libc::socklen_t,
            )
        };
        self.sent(sent, flags)
    }

    fn sendmsg(&self, fd: u64, message: u64, flags: u64) -> Result<i64, Failure> {
        let header: libc::msghdr = self.target.read_value(message)?;
        let address = if header.msg_name.is_null() || header.msg_namelen == 0 {
            None
        } else {
            Some(self.read_address(header.msg_name as u64, u64::from(header.msg_namelen))?)
        };
        let data = self.read_buffers(header.msg_iov as u64, header.msg_iovlen as u64)?;
        let (control, _passed) = self.read_control(&header)?;
        let socket = self.target.descriptor(fd)?;
        let flags = Self::passed_flags(flags)?;
        let address = address.map(|address| self.judge(address)).transpose()?;
        self.still_waiting(&socket)?;
        let mut buffer = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: data.len(),
        };
        // SAFETY: the structure is zeroed, then every pointer set points into this process.
        #[allow(unsafe_code)]
        let mut ours: libc::msghdr = unsafe { std::mem::zeroed() };
        if let Some(address) = &address {
            ours.msg_name = address.bytes.as_ptr().cast_mut().cast();
            ours.msg_namelen = address.bytes.len() as libc::socklen_t;
        }
        ours.msg_iov = &mut buffer;
        ours.msg_iovlen = 1;
        if !control.is_empty() {
            ours.msg_control = control.as_ptr().cast_mut().cast();
            ours.msg_controllen = control.len() as _;
        }
        // SAFETY: a socket descriptor and a message of this process.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &ours, flags | libc::MSG_NOSIGNAL) };
        self.sent(sent, flags)
    }

    /// Each message as `sendmsg`, its length written back to the caller's `msg_len`; how many
    /// were sent (an error only if the first fails).
    fn sendmmsg(&self, args: [u64; 6]) -> Result<i64, Failure> {
        let count = usize::try_from(args[2])
            .unwrap_or(usize::MAX)
            .min(MAX_VECTORS);
        let size = std::mem::size_of::<libc::mmsghdr>() as u64;
        let length_at = std::mem::offset_of!(libc::mmsghdr, msg_len) as u64;
        let mut sent = 0;
        for index in 0..count as u64 {
            let message = args[1] + index * size;
            match self.sendmsg(args[0], message, args[3]) {
                Ok(bytes) => {
                    self.target
                        .write(message + length_at, &(bytes as u32).to_ne_bytes())?;
                    sent += 1;
                }
                Err(failure) if sent == 0 => return Err(failure),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    /// A send's return: its byte count, or its errno (with the `SIGPIPE` the caller would
    /// have got, which the daemon's own send suppressed).
    fn sent(&self, sent: isize, flags: libc::c_int) -> Result<i64, Failure> {
        if sent >= 0 {
            return Ok(sent as i64);
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EPIPE) && flags & libc::MSG_NOSIGNAL == 0 {
            self.target.signal(libc::SIGPIPE);
        }
        Err(error.into())
    }

    /// Whether the call still waits (see `pending`); if so, `socket` is recorded as in flight
    /// until the call is answered.
    fn still_waiting(&self, socket: &OwnedFd) -> Result<(), Failure> {
        if (self.pending)() {
            self.in_flight.add(self.id, socket);
            Ok(())
        } else {
            Err(Failure::Gone)
        }
    }

    /// `flags` of a send as the daemon passes them on, or `EOPNOTSUPP`.
    fn passed_flags(flags: u64) -> Result<libc::c_int, Failure> {
        let flags = flags as libc::c_int;
        if flags & !PASSED_FLAGS != 0 {
            return Err(Failure::Errno(libc::EOPNOTSUPP));
        }
        Ok(flags)
    }

    fn read_address(&self, address: u64, len: u64) -> Result<Vec<u8>, Failure> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > MAX_ADDRESS {
            return Err(Failure::Errno(libc::EINVAL));
        }
        Ok(self.target.read(address, len)?)
    }

    /// The buffers of an `iovec` array, one after the other (a message is the same message
    /// however its bytes were split).
    fn read_buffers(&self, vectors: u64, count: u64) -> Result<Vec<u8>, Failure> {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        if count > MAX_VECTORS {
            return Err(Failure::Errno(libc::EMSGSIZE));
        }
        let mut data = Vec::new();
        for index in 0..count as u64 {
            let vector: libc::iovec = self
                .target
                .read_value(vectors + index * std::mem::size_of::<libc::iovec>() as u64)?;
            let take = vector.iov_len.min(MAX_DATA - data.len());
            data.extend(self.target.read(vector.iov_base as u64, take)?);
            if data.len() == MAX_DATA {
                break;
            }
        }
        Ok(data)
    }

    /// A message's control data, with every descriptor it passes (`SCM_RIGHTS`) replaced by a
    /// copy of the caller's (kept open until sent) and credentials (`SCM_CREDENTIALS`) made
    /// the daemon's own, which the kernel lets it send.
    fn read_control(&self, header: &libc::msghdr) -> Result<(Vec<u8>, Vec<OwnedFd>), Failure> {
        if header.msg_control.is_null() || header.msg_controllen == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        // `usize` with glibc, `u32` with musl.
        #[allow(clippy::unnecessary_cast)]
        let len = header.msg_controllen as usize;
        if len > MAX_CONTROL {
            return Err(Failure::Errno(libc::ENOBUFS));
        }
        let mut control = self.target.read(header.msg_control as u64, len)?;
        let mut passed = Vec::new();
        let header_len = std::mem::size_of::<libc::cmsghdr>();
        let mut at = 0;
        while at + header_len <= control.len() {
            // SAFETY: `header_len` bytes at `at` are within the buffer; a `cmsghdr` is plain
            // integers.
            #[allow(unsafe_code)]
            let message: libc::cmsghdr =
                unsafe { std::ptr::read_unaligned(control[at..].as_ptr().cast()) };
            let message_len = message.cmsg_len as usize;
            if message_len < header_len || at + message_len > control.len() {
                return Err(Failure::Errno(libc::EINVAL));
            }
            let data = at + header_len..at + message_len;
            if message.cmsg_level == libc::SOL_SOCKET && message.cmsg_type == libc::SCM_RIGHTS {
                for slot in control[data].chunks_exact_mut(4) {
                    let fd = i32::from_ne_bytes([slot[0], slot[1], slot[2], slot[3]]);
                    let copy = self.target.descriptor(fd as u64)?;
                    slot.copy_from_slice(&copy.as_raw_fd().to_ne_bytes());
                    passed.push(copy);
                }
            } else if message.cmsg_level == libc::SOL_SOCKET
                && message.cmsg_type == libc::SCM_CREDENTIALS
                && data.len() >= std::mem::size_of::<libc::ucred>()
            {
                let ours = libc::ucred {
                    pid: std::process::id() as libc::pid_t,
                    uid: nix::unistd::getuid().as_raw(),
                    gid: nix::unistd::getgid().as_raw(),
                };
                // SAFETY: `ucred` is plain integers; its bytes are copied whole.
                #[allow(unsafe_code)]
                let bytes: [u8; std::mem::size_of::<libc::ucred>()] =
                    unsafe { std::mem::transmute(ours) };
                control[data.start..data.start + bytes.len()].copy_from_slice(&bytes);
            }
            at += (message_len + std::mem::size_of::<usize>() - 1)
                & !(std::mem::size_of::<usize>() - 1);
        }
        Ok((control, passed))
    }

    /// `bytes` judged: anything but a Unix socket's address is passed as it is; a Unix socket
    /// must be served by the command itself or named by the config.
    fn judge(&self, bytes: Vec<u8>) -> Result<Address, Failure> {
        let family = bytes
            .get(..2)
            .map(|family| libc::sa_family_t::from_ne_bytes([family[0], family[1]]));
        let path = &bytes.get(2..).unwrap_or_default();
        if family != Some(libc::AF_UNIX as libc::sa_family_t) || path.is_empty() {
            return Ok(Address { bytes, _file: None });
        }
        if path[0] == 0 {
            let name = &path[1..];
            // The command's own socket is held while the daemon connects: its name cannot be
            // let go of and taken by a server outside meanwhile.
            if let Ok(Some(held)) = owners::served_by_the_command(Bound::Abstract(name), self.init)
            {
                return Ok(Address {
                    bytes,
                    _file: Some(held),
                });
            }
            self.refuse(format!("@{}", String::from_utf8_lossy(name)));
            return Err(Failure::Errno(libc::EACCES));
        }
        let path = &path[..path
            .iter()
            .position(|byte| *byte == 0)
            .unwrap_or(path.len())];
        let shown = String::from_utf8_lossy(path).into_owned();
        let file = self.target.open_path(path)?;
        let stat = nix::sys::stat::fstat(&file).map_err(io::Error::from)?;
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(Failure::Errno(libc::ECONNREFUSED));
        }
        let identity = (stat.st_dev, stat.st_ino);
        let allowed = self.rules.allowed.contains(&identity)
            || owners::served_by_the_command(
                Bound::File {
                    dev: stat.st_dev,
                    ino: stat.st_ino,
                },
                self.init,
            )
            .is_ok_and(|held| held.is_some());
        if !allowed {
            self.refuse(shown);
            return Err(Failure::Errno(libc::EACCES));
        }
        let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
        let mut bytes = (libc::AF_UNIX as libc::sa_family_t).to_ne_bytes().to_vec();
        bytes.extend_from_slice(by_descriptor.as_bytes());
        bytes.push(0);
        Ok(Address {
            bytes,
            _file: Some(file),
        })
    }

    fn refuse(&self, address: String) {
        tracing::debug!(%address, "refused a sandboxed command's connection to a socket it does not serve");
        let mut refused = self.refused.lock_unpoisoned();
        if !refused.contains(&address) && refused.len() < 16 {
            refused.push(address);
        }
    }
}
