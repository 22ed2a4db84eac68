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

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;

/// The shell commands run in (`run_command`, and the sandbox's probe). An absolute path: the
/// command's own `PATH` must not choose it.
pub const SHELL: &str = "/bin/bash";

/// What the child does between the clone and the exec, besides its standard steps. Every
/// method runs in the vfork child: system calls only.
pub trait ChildSetup: Sync {
    /// Extra `clone` flags (namespaces the child is born in).
    fn clone_flags(&self) -> libc::c_int {
        0
    }

    /// Before the child enters its working directory (mounts, so that the directory is
    /// looked up through them).
    fn before_chdir(&self) -> io::Result<()> {
        Ok(())
    }

    /// After, just before the exec (Landlock, seccomp).
    fn before_exec(&self) -> io::Result<()> {
        Ok(())
    }
}

/// No setup: a plain spawn.
#[derive(Debug)]
pub struct Plain;

impl ChildSetup for Plain {}

/// A program, its arguments, environment and working directory, as the child needs them.
#[derive(Debug)]
pub struct Launch {
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
    pub fn new<'a>(
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
#[derive(Debug)]
pub struct Spawned {
    pid: u32,
    pidfd: PidFd,
    status: Option<ExitStatus>,
}

/// The child's pidfd, registered with the runtime's reactor on the first asynchronous wait
/// (a blocking wait needs no runtime).
#[derive(Debug)]
enum PidFd {
    Plain(OwnedFd),
    Registered(AsyncFd<OwnedFd>),
    /// Only while being moved from one to the other.
    Gone,
}

impl PidFd {
    fn raw(&self) -> RawFd {
        match self {
            PidFd::Plain(fd) => fd.as_raw_fd(),
            PidFd::Registered(fd) => fd.get_ref().as_raw_fd(),
            PidFd::Gone => -1,
        }
    }
}

/// The child's stack: its steps are a few calls deep, with small frames.
const CHILD_STACK_BYTES: usize = 64 * 1024;

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
}

/// Starts `launch` in a session (and process group) of its own, without a controlling
/// terminal, with stdin, stdout and stderr on the given
/// descriptors, `setup` applied between the clone and the exec. Returns once the child has
/// exec'd; a step that failed is the error (the child is reaped).
#[allow(unsafe_code)]
pub fn spawn(
    launch: &Launch,
    setup: &dyn ChildSetup,
    stdin: &OwnedFd,
    stdout: &OwnedFd,
    stderr: &OwnedFd,
) -> io::Result<Spawned> {
    let (error_read, error_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let args = ChildArgs {
        launch,
        setup,
        stdin: stdin.as_raw_fd(),
        stdout: stdout.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
        error_pipe: error_write.as_raw_fd(),
    };
    // Uninitialized: the child writes before it reads, and zeroing it would cost a page fault
    // per page for nothing.
    let mut stack = Box::<[u8]>::new_uninit_slice(CHILD_STACK_BYTES);
    // Stacks grow down on every architecture Linux runs Rust on; 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | setup.clone_flags();
    let mut pidfd: libc::c_int = -1;
    // SAFETY: every signal is blocked for this thread around the clone, so no handler runs in
    // the child before it resets them; `child_main` keeps to the vfork rules (module docs);
    // `args`, `stack` and `pidfd` outlive the child's use of them (the clone returns only once
    // the child has exec'd or exited).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let pid = libc::clone(
            child_main,
            top as *mut libc::c_void,
            flags | libc::SIGCHLD,
            &args as *const ChildArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    drop(stack);
    drop(error_write);
    // SAFETY: CLONE_PIDFD stored a new descriptor owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut errno = [0u8; 4];
    let read = nix::unistd::read(&error_read, &mut errno)?;
    if read == errno.len() {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(Spawned {
        pid: pid as u32,
        pidfd: PidFd::Plain(pidfd),
        status: None,
    })
}

/// The child: standard steps and `setup`'s, then the exec. Never returns.
#[allow(unsafe_code)]
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent laid out and keeps alive until the exec.
    let args = unsafe { &*(arg as *const ChildArgs) };
    let error = match child_steps(args) {
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

#[allow(unsafe_code)]
fn child_steps(args: &ChildArgs<'_>) -> io::Result<std::convert::Infallible> {
    let check = |result: libc::c_int| {
        if result < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: system calls on descriptors and strings laid out before the clone.
    unsafe {
        // The daemon's handlers must not run here, nor be inherited as ignored.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..=libc::SIGRTMAX() {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        // A session of its own, and so a process group led by the shell: no controlling
        // terminal, so a command cannot type into (`TIOCSTI`) or read from the terminal the
        // daemon was started from.
        check(libc::setsid())?;
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
        args.setup.before_chdir()?;
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
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits for the child to exit and reaps it; the status again on later calls.
    /// Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        if let PidFd::Plain(_) = self.pidfd {
            let PidFd::Plain(fd) = std::mem::replace(&mut self.pidfd, PidFd::Gone) else {
                unreachable!("just matched");
            };
            // SAFETY: the `OwnedFd` stays open, and the same descriptor, for as long as the
            // `AsyncFd` owns it.
            #[allow(unsafe_code)]
            let registered =
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
            self.pidfd = PidFd::Registered(registered.map_err(|error| error.into_parts().1)?);
        }
        loop {
            let PidFd::Registered(fd) = &self.pidfd else {
                return Err(io::Error::other("the child's pidfd was lost"));
            };
            let mut ready = fd.readable().await?;
            if let Some(status) = reap(fd.get_ref().as_raw_fd(), libc::WNOHANG)? {
                self.status = Some(status);
                return Ok(status);
            }
            ready.clear_ready();
        }
    }

    /// Waits for the child to exit, blocking the thread, and reaps it.
    pub fn wait_blocking(&mut self) -> io::Result<ExitStatus> {
        match self.status {
            Some(status) => Ok(status),
            None => {
                let status = reap(self.pidfd.raw(), 0)?
                    .ok_or_else(|| io::Error::other("waitid returned without a child"))?;
                self.status = Some(status);
                Ok(status)
            }
        }
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
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.status.is_none() {
            // SAFETY: signals the process the pidfd names, which cannot have been reused.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    self.pidfd.raw(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
        }
    }
}
