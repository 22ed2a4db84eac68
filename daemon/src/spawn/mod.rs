//! Starting a command's shell as `posix_spawn` does — `clone(CLONE_VM | CLONE_VFORK)`, so the
//! daemon's memory is never copied — with room for the sandbox's steps between the clone and
//! the exec, which `posix_spawn` has not.
//!
//! A `fork` of the daemon copies its page tables and makes every thread's next writes fault;
//! on a virtual machine that cost a command 3 ms. Here the child borrows the daemon's memory
//! until it execs, as `posix_spawn`'s does, and the daemon's thread waits meanwhile. The
//! child therefore runs under the rules of a vfork child: it only makes system calls, on
//! memory laid out before the clone (C strings, descriptors, rulesets), never allocates,
//! never returns, and leaves the daemon's memory as it found it. The calling thread blocks
//! every signal around the clone and the child sets every handler back to the default
//! before unblocking them, so no handler of the daemon ever runs in the child.
//!
//! **A PID namespace of its own** (`CLONE_NEWPID` among [`ChildSetup::clone_flags`]): the
//! daemon's child is then an init of toold's, which starts the shell the same way ([`init`]).

pub(crate) mod init;

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use std::sync::atomic::{AtomicI32, Ordering};

use nix::libc;
use tokio::io::unix::AsyncFd;
use toold_protocol::sync::LockUnpoisoned;

/// The shell commands run in (`run_command`, and the sandbox's probe). An absolute path: the
/// command's own `PATH` must not choose it.
pub(crate) const SHELL: &str = "/bin/bash";

/// What the child does between the clone and the exec, besides its standard steps. Every
/// method runs in the vfork child (or the init): system calls only.
pub(crate) trait ChildSetup: Sync {
    /// Extra `clone` flags (namespaces the child is born in). With `CLONE_NEWPID` the shell
    /// gets an init between it and the daemon (module docs).
    fn clone_flags(&self) -> libc::c_int {
        0
    }

    /// The lines of the uid and gid maps of the user namespace the child is born in, if it is
    /// born in one.
    fn id_maps(&self) -> Option<IdMaps<'_>> {
        None
    }

    /// In the process born in the namespaces (the init, when there is one), before the
    /// shell enters its working directory (mounts, so that the directory is looked up
    /// through them). `maps_written`: the daemon writes the [`Self::id_maps`] meanwhile (for
    /// an init, in parallel), else this writes them first.
    fn enter_namespaces(&self, maps_written: bool) -> io::Result<()> {
        let _ = maps_written;
        Ok(())
    }

    /// After, just before the exec (Landlock, seccomp).
    fn before_exec(&self) -> io::Result<()> {
        Ok(())
    }

    /// A seccomp filter with a listener, installed by the shell before anything else: the
    /// daemon gets the listener ([`Spawned::take_listener`]); the command never has it.
    fn socket_filter(&self) -> Option<&[libc::sock_filter]> {
        None
    }

    /// A descriptor of the daemon's that these steps use (the Landlock ruleset): an init
    /// keeps it when it closes the daemon's others.
    fn kept_descriptor(&self) -> Option<RawFd> {
        None
    }
}

/// The uid and gid maps of a user namespace, one line each (`inside outside count`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdMaps<'a> {
    pub uid: &'a [u8],
    pub gid: &'a [u8],
}

/// No setup: a plain spawn.
#[derive(Debug)]
pub(crate) struct Plain;

impl ChildSetup for Plain {}

/// A program, its arguments, environment and working directory, as the child needs them.
#[derive(Debug)]
pub(crate) struct Launch {
    program: CString,
    /// The C strings the pointer arrays below point into.
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
}

// SAFETY: the raw pointers point into `_strings`, owned by the same value and never changed.
#[allow(unsafe_code)]
unsafe impl Send for Launch {}
// SAFETY: as above; nothing is mutated through them.
#[allow(unsafe_code)]
unsafe impl Sync for Launch {}

impl Launch {
    /// `program` (an absolute path) with `args` (after its name) in `cwd`, with `env`: a
    /// later entry of a name replaces an earlier one. A NUL byte anywhere is refused.
    pub(crate) fn new<'a>(
        program: &Path,
        args: impl IntoIterator<Item = &'a OsStr>,
        env: impl IntoIterator<Item = (OsString, OsString)>,
        cwd: &Path,
    ) -> io::Result<Self> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a NUL byte in a command's launch",
                )
            })
        };
        let program_c = c(program.as_os_str().as_bytes())?;
        let mut argv_strings = vec![program_c.clone()];
        for arg in args {
            argv_strings.push(c(arg.as_bytes())?);
        }
        let variables: BTreeMap<OsString, OsString> = env.into_iter().collect();
        let mut env_strings = Vec::with_capacity(variables.len());
        for (name, value) in &variables {
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            env_strings.push(c(&entry)?);
        }
        let argv = argv_strings
            .iter()
            .map(|arg| arg.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let envp = env_strings
            .iter()
            .map(|entry| entry.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        argv_strings.extend(env_strings);
        Ok(Self {
            program: program_c,
            _strings: argv_strings,
            argv,
            envp,
            cwd: c(cwd.as_os_str().as_bytes())?,
        })
    }
}

/// A started child: its pid and a pidfd to wait on. Dropped before it was waited for, it is
/// killed (and reaped by the daemon's orphan reaper once it is no longer a known child).
/// With a PID namespace the child is the shell's init: its pid is the one to signal (its
/// process group is the shell's), and the status waited for is the shell's.
#[derive(Debug)]
pub(crate) struct Spawned {
    pid: u32,
    pidfd: Watched,
    /// The shell's exit status, once known.
    status: Option<ExitStatus>,
    /// The init, until it has been reaped.
    init: Option<init::Init>,
    /// Kept until the child is reaped ([`Spawned::hold_until_reaped`]).
    held: Option<Held>,
    /// The listener of the shell's [`ChildSetup::socket_filter`], until taken.
    listener: Option<OwnedFd>,
}

/// What a caller wants kept until the child is reaped (its registration as a known child).
struct Held(#[allow(dead_code)] Box<dyn Send>);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

/// A descriptor to wait on (a pidfd, a pipe), registered with the runtime's reactor on the
/// first asynchronous wait (a blocking wait needs no runtime).
#[derive(Debug)]
enum Watched {
    Plain(OwnedFd),
    Registered(AsyncFd<OwnedFd>),
    /// Only while being moved from one to the other.
    Gone,
}

impl Watched {
    fn raw(&self) -> RawFd {
        match self {
            Watched::Plain(fd) => fd.as_raw_fd(),
            Watched::Registered(fd) => fd.get_ref().as_raw_fd(),
            Watched::Gone => -1,
        }
    }

    /// Waits until the descriptor is readable, then runs `attempt` (non-blocking) until it
    /// gives a value. Cancel-safe.
    async fn when_readable<T>(
        &mut self,
        mut attempt: impl FnMut(RawFd) -> io::Result<Option<T>>,
    ) -> io::Result<T> {
        if let Watched::Plain(_) = self {
            let Watched::Plain(fd) = std::mem::replace(self, Watched::Gone) else {
                unreachable!("just matched");
            };
            // SAFETY: the `OwnedFd` stays open, and the same descriptor, for as long as the
            // `AsyncFd` owns it.
            #[allow(unsafe_code)]
            let registered =
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
            *self = Watched::Registered(registered.map_err(|error| error.into_parts().1)?);
        }
        loop {
            let Watched::Registered(fd) = self else {
                return Err(io::Error::other("a descriptor waited on was lost"));
            };
            let mut ready = fd.readable().await?;
            if let Some(value) = attempt(fd.get_ref().as_raw_fd())? {
                return Ok(value);
            }
            ready.clear_ready();
        }
    }
}

/// Held while the daemon is dumpable to write a child's uid and gid maps: the daemon is
/// non-dumpable (`process_tree::keep_out_of_reach`), and a non-dumpable process's `/proc`
/// files, which its children share while they share its memory, are root's — an
/// unprivileged daemon could not write their maps otherwise. One writer at a time, so that no
/// writer makes the daemon non-dumpable again under another.
static DUMPABLE_FOR_ID_MAPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `write` with the daemon dumpable (see [`DUMPABLE_FOR_ID_MAPS`]), and non-dumpable
/// again after if it was.
pub(super) fn dumpable_while<T>(write: impl FnOnce() -> T) -> T {
    let _one_writer = DUMPABLE_FOR_ID_MAPS.lock_unpoisoned();
    let was_dumpable = nix::sys::prctl::get_dumpable().unwrap_or(true);
    if !was_dumpable {
        let _ = nix::sys::prctl::set_dumpable(true);
    }
    let written = write();
    if !was_dumpable {
        let _ = nix::sys::prctl::set_dumpable(false);
    }
    written
}

/// The child's stack: its steps are a few calls deep, with small frames.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A stack for a clone child: uninitialized (the child writes before it reads, and zeroing it
/// would cost a page fault per page for nothing), with its 16-byte aligned top (stacks grow
/// down on every architecture Linux runs Rust on).
struct Stack(Box<[std::mem::MaybeUninit<u8>]>);

impl Stack {
    fn new() -> Self {
        Stack(Box::new_uninit_slice(CHILD_STACK_BYTES))
    }

    fn top(&mut self) -> usize {
        (self.0.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15
    }
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stack")
    }
}

/// What the child reads, laid out before the clone.
struct ChildArgs<'a> {
    launch: &'a Launch,
    setup: &'a dyn ChildSetup,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// Where the child writes its errno when a step fails (close-on-exec: closed by a
    /// successful exec).
    error_pipe: RawFd,
    /// For an init: the shell's stack, the pipe it reports the shell's end on, and the one it
    /// is told on that the daemon wrote its id maps (its read end; -1: it writes them itself).
    shell_stack_top: usize,
    report_pipe: RawFd,
    maps_read: RawFd,
    /// Where the shell writes the listener of [`ChildSetup::socket_filter`]: a descriptor of
    /// its parent's table (the daemon's, or the init's), which it shares until then.
    listener_slot: *const AtomicI32,
    /// For an init: its end of the socket it hands that listener to the daemon on (-1: none).
    handoff: RawFd,
}

/// Starts `launch` in a session (and process group) of its own, without a controlling
/// terminal, with stdin, stdout and stderr on the given
/// descriptors, `setup` applied between the clone and the exec. Returns once the child has
/// exec'd; a step that failed is the error (the child is reaped).
#[allow(unsafe_code)]
pub(crate) fn spawn(
    launch: &Launch,
    setup: &dyn ChildSetup,
    stdin: &OwnedFd,
    stdout: &OwnedFd,
    stderr: &OwnedFd,
) -> io::Result<Spawned> {
    let (error_read, error_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let with_init = setup.clone_flags() & libc::CLONE_NEWPID != 0;
    let filtered = setup.socket_filter().is_some();
    // Without an init, the shell writes the listener's descriptor here, in the daemon's own
    // table; with one, in the init's, and the init hands it over on `handoff`.
    let listener_here = AtomicI32::new(-1);
    let handoff = (with_init && filtered)
        .then(|| {
            nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::Datagram,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
        })
        .transpose()?;
    let mut child_stack = Stack::new();
    let mut init = with_init.then(init::Prepared::new).transpose()?;
    let args = ChildArgs {
        launch,
        setup,
        stdin: stdin.as_raw_fd(),
        stdout: stdout.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
        error_pipe: error_write.as_raw_fd(),
        shell_stack_top: init.as_mut().map_or(0, init::Prepared::shell_stack_top),
        report_pipe: init.as_ref().map_or(-1, init::Prepared::report_pipe),
        maps_read: init.as_ref().map_or(-1, init::Prepared::maps_read),
        listener_slot: init.as_ref().map_or(
            &listener_here as *const AtomicI32,
            init::Prepared::listener_slot,
        ),
        handoff: handoff
            .as_ref()
            .map_or(-1, |(_, init_end)| init_end.as_raw_fd()),
    };
    let (entry, top, waits): (extern "C" fn(*mut libc::c_void) -> libc::c_int, usize, _) =
        match init.as_mut() {
            Some(init) => (init::init_main, init.init_stack_top(), 0),
            None => (child_main, child_stack.top(), libc::CLONE_VFORK),
        };
    // A plain spawn's child shares the daemon's descriptor table until its filter's listener
    // is in it ([`become_the_shell`]).
    let files = if filtered && !with_init {
        libc::CLONE_FILES
    } else {
        0
    };
    let flags = libc::CLONE_VM | waits | libc::CLONE_PIDFD | files | setup.clone_flags();
    let mut pidfd: libc::c_int = -1;
    // A plain spawn's child writes its own id maps, making the daemon dumpable meanwhile.
    let _one_map_writer =
        (!with_init && setup.id_maps().is_some()).then(|| DUMPABLE_FOR_ID_MAPS.lock_unpoisoned());
    let mut all: libc::sigset_t;
    let mut previous: libc::sigset_t;
    // SAFETY: every signal is blocked for this thread around the clone, so no handler runs in
    // the child before it resets them; `child_main` and `init_main` keep to the vfork rules
    // (module docs); `args`, the stacks and `pidfd` outlive the child's use of them (the
    // clone returns only once a vfork child has exec'd or exited; an init is waited for on
    // the error pipe below, and its own memory lives in the `Spawned`).
    let pid = unsafe {
        all = std::mem::zeroed();
        previous = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let pid = libc::clone(
            entry,
            top as *mut libc::c_void,
            flags | libc::SIGCHLD,
            &args as *const ChildArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        );
        let clone_error = io::Error::last_os_error();
        if pid < 0 || !with_init {
            libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        }
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    drop(error_write);
    // An init's id maps are written from here while it sets up its signals and mounts.
    let maps_error = match (init.as_mut(), setup.id_maps()) {
        (Some(init), Some(maps)) => init.write_id_maps(pid, maps).err(),
        _ => None,
    };
    // The init's copy alone must hold the report pipe open.
    let init = init.map(init::Prepared::cloned);
    // SAFETY: CLONE_PIDFD stored a new descriptor owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut errno = [0u8; 4];
    // The pipe closes once the shell has exec'd (and, with an init, the init has closed its
    // copy): until then the children run on `args`.
    let read = nix::unistd::read(&error_read, &mut errno);
    if with_init {
        // SAFETY: restores the mask saved above; the init no longer touches `errno`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
    }
    drop(child_stack);
    let listener = if with_init {
        handoff.and_then(|(daemon_end, _)| init::received_listener(&daemon_end))
    } else {
        let fd = listener_here.load(Ordering::Acquire);
        // SAFETY: the shell made it in this process's table, and nobody else knows it.
        #[allow(unsafe_code)]
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    };
    if read? == errno.len() {
        let _ = reap(pidfd.as_raw_fd(), 0);
        let failed = io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
        // An init told its maps could not be written fails with EPERM: the daemon's own
        // error says why. Any other failure is the child's.
        return Err(match maps_error {
            Some(maps_error) if failed.raw_os_error() == Some(libc::EPERM) => maps_error,
            _ => failed,
        });
    }
    Ok(Spawned {
        pid: pid as u32,
        pidfd: Watched::Plain(pidfd),
        status: None,
        init,
        held: None,
        listener,
    })
}

/// The vfork child of a plain spawn: the process steps, the namespaces' if any, then the
/// shell's. Never returns.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent laid out and keeps alive until the exec.
    #[allow(unsafe_code)]
    let args = unsafe { &*(arg as *const ChildArgs) };
    let steps = || -> io::Result<std::convert::Infallible> {
        leave_the_daemon_s_session()?;
        args.setup.enter_namespaces(false)?;
        become_the_shell(args)
    };
    fail(args, steps())
}

/// The shell, the init's vfork child: the shell's steps. Never returns.
extern "C" fn shell_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the daemon laid out and keeps alive until the exec.
    #[allow(unsafe_code)]
    let args = unsafe { &*(arg as *const ChildArgs) };
    fail(args, become_the_shell(args))
}

/// Writes the errno of a failed step to the error pipe and exits.
#[allow(unsafe_code)]
fn fail(args: &ChildArgs<'_>, result: io::Result<std::convert::Infallible>) -> ! {
    let error = match result {
        Ok(never) => match never {},
        Err(error) => error.raw_os_error().unwrap_or(libc::EINVAL),
    };
    // SAFETY: writing four bytes from the stack and exiting without running any of the
    // daemon's exit handlers (they would run on its memory).
    unsafe {
        libc::write(
            args.error_pipe,
            (&error as *const i32).cast(),
            std::mem::size_of::<i32>(),
        );
        libc::_exit(127)
    }
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The first steps of the daemon's child: the daemon's signal handlers gone, and a session
/// (and so a process group) of its own: no controlling terminal, so a command cannot type
/// into (`TIOCSTI`) or read from the terminal the daemon was started from.
#[allow(unsafe_code)]
fn leave_the_daemon_s_session() -> io::Result<()> {
    // SAFETY: sigaction with a zeroed default action, and setsid.
    unsafe {
        // The daemon's handlers must not run here, nor be inherited as ignored.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=libc::SIGRTMAX() {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        check(libc::setsid())
    }
}

/// The shell's steps: its stdio, its working directory, `setup`'s last steps, every signal
/// unblocked, the exec.
#[allow(unsafe_code)]
fn become_the_shell(args: &ChildArgs<'_>) -> io::Result<std::convert::Infallible> {
    // SAFETY: system calls on descriptors and strings laid out before the clone.
    unsafe {
        if let Some(program) = args.setup.socket_filter() {
            // Installed while the descriptor table is the parent's, so that the listener lands
            // there; then the shell's table becomes its own, where the listener (close-on-exec)
            // goes with the exec.
            let listener = crate::sandbox::sockets::filter::install(program)?;
            (*args.listener_slot).store(listener, Ordering::Release);
            check(libc::unshare(libc::CLONE_FILES))?;
        }
        // Copied above 2 first: a descriptor the daemon got as 0, 1 or 2 (started with one of
        // them closed) must not be overwritten before it is copied, nor stay close-on-exec.
        let mut copies = [0; 3];
        for (copy, from) in copies
            .iter_mut()
            .zip([args.stdin, args.stdout, args.stderr])
        {
            *copy = libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 3);
            check(*copy)?;
        }
        for (to, from) in copies.into_iter().enumerate() {
            check(libc::dup2(from, to as libc::c_int))?;
        }
        check(libc::chdir(args.launch.cwd.as_ptr()))?;
        args.setup.before_exec()?;
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(
            args.launch.program.as_ptr(),
            args.launch.argv.as_ptr(),
            args.launch.envp.as_ptr(),
        );
    }
    Err(io::Error::last_os_error())
}

impl Spawned {
    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// The listener of the shell's [`ChildSetup::socket_filter`]; `None` without one, or once
    /// taken.
    pub(crate) fn take_listener(&mut self) -> Option<OwnedFd> {
        self.listener.take()
    }

    /// Keeps `guard` until the daemon's child is reaped, which for an init may be after this
    /// `Spawned` is dropped (see [`Self::namespace_emptied`]).
    pub(crate) fn hold_until_reaped(&mut self, guard: impl Send + 'static) {
        self.held = Some(Held(Box::new(guard)));
    }

    /// Whether the shell's init reported that the shell was the last process of its
    /// namespace: the init is then exiting, and the kernel ends the namespace with it, so
    /// nothing of the command can be left to sweep. Reaping the exiting init is left to the
    /// drop (in the background: the teardown of its namespaces is no part of the call).
    pub(crate) fn namespace_emptied(&self) -> bool {
        self.init
            .as_ref()
            .is_some_and(|init| init.reported_nothing_left())
    }

    /// Waits for the shell to exit (and reaps it, unless an init reports its end); the status
    /// again on later calls. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = match self.init.as_mut() {
            Some(init) => match init.report().await? {
                init::Report::Shell(end) => end.status,
                init::Report::None => self.reap_async().await?,
            },
            None => self.reap_async().await?,
        };
        self.status = Some(status);
        Ok(status)
    }

    /// Waits for the daemon's own child (the shell, or the init) and reaps it.
    async fn reap_async(&mut self) -> io::Result<ExitStatus> {
        let status = self
            .pidfd
            .when_readable(|pidfd| reap(pidfd, libc::WNOHANG))
            .await?;
        self.init = None;
        self.held = None;
        Ok(status)
    }

    /// Waits for the shell to exit, blocking the thread, and reaps the daemon's child (an
    /// init once its namespace is empty: for commands that leave nothing behind, as the
    /// probe's).
    pub(crate) fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let report = match self.init.as_mut() {
            Some(init) => Some(init.report_blocking()?),
            None => None,
        };
        let own = reap(self.pidfd.raw(), 0)?
            .ok_or_else(|| io::Error::other("waitid returned without a child"))?;
        self.init = None;
        self.held = None;
        let status = status_of(report, own);
        self.status = Some(status);
        Ok(status)
    }
}

/// The shell's status: as its init reported it, or the daemon's child's own (the shell's, or
/// an init's that was killed before it could report).
fn status_of(report: Option<init::Report>, own: ExitStatus) -> ExitStatus {
    match report {
        Some(init::Report::Shell(end)) => end.status,
        _ => own,
    }
}

/// `waitid` on `pidfd` with `flags` (`WNOHANG` or 0): the exit status once it exited.
#[allow(unsafe_code)]
fn reap(pidfd: RawFd, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    // SAFETY: `info` is written by the kernel; the pidfd is open.
    let info = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let waited = libc::waitid(
            libc::P_PIDFD,
            pidfd as libc::id_t,
            &mut info,
            libc::WEXITED | flags,
        );
        if waited < 0 {
            return Err(io::Error::last_os_error());
        }
        info
    };
    // SAFETY: filled in by a successful waitid.
    let (pid, code, status) = unsafe { (info.si_pid(), info.si_code, info.si_status()) };
    if pid == 0 {
        return Ok(None);
    }
    let raw = match code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    Ok(Some(ExitStatus::from_raw(raw)))
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let Some(init) = self.init.take() else {
            if self.status.is_none() {
                kill(&self.pidfd);
            }
            return;
        };
        if let Ok(Some(_)) = reap(self.pidfd.raw(), libc::WNOHANG) {
            return;
        }
        // Exiting (its namespace emptied), or left with processes the call's sweep could not
        // end: a SIGKILL ends the init and, with it, its namespace.
        kill(&self.pidfd);
        let pidfd = std::mem::replace(&mut self.pidfd, Watched::Gone);
        init.reap_in_background(pidfd, self.held.take());
    }
}

/// SIGKILL to the process `pidfd` names (which cannot have been reused).
#[allow(unsafe_code)]
fn kill(pidfd: &Watched) {
    // SAFETY: pidfd_send_signal takes plain integers and a null info.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.raw(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}
