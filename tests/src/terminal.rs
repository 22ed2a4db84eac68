//! A command run on a pseudo-terminal that is its controlling terminal (`/dev/tty`), with the
//! raw bytes it writes there collected as they come, for tests of what a person sees.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which standard streams are the terminal; the others are pipes (stdin an empty one).
#[derive(Debug, Clone, Copy)]
pub struct OnTerminal {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl OnTerminal {
    /// stdin and stderr on the terminal, stdout a pipe: a person running `toold call > file`.
    pub const STDIN_AND_STDERR: Self = Self {
        stdin: true,
        stdout: false,
        stderr: true,
    };
    /// Every stream on the terminal.
    pub const ALL: Self = Self {
        stdin: true,
        stdout: true,
        stderr: true,
    };
    /// Only the controlling terminal: every stream a pipe.
    pub const NONE: Self = Self {
        stdin: false,
        stdout: false,
        stderr: false,
    };
}

pub struct Terminal {
    master: std::fs::File,
    screen: Arc<Mutex<Vec<u8>>>,
    child: Child,
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

/// What the command left: its exit, what its stdout and stderr pipes got (empty for streams on
/// the terminal), and the terminal's raw bytes.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub screen: String,
}

impl Terminal {
    /// The historical wiring of the CLI tests: stdin and stderr on the terminal.
    pub fn spawn(command: Command) -> Self {
        Self::spawn_with(command, OnTerminal::STDIN_AND_STDERR)
    }

    #[allow(unsafe_code)]
    pub fn spawn_with(mut command: Command, wiring: OnTerminal) -> Self {
        let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
        let on_terminal = |wanted: bool, piped: Stdio| {
            if wanted {
                Stdio::from(pty.slave.try_clone().expect("a terminal fd"))
            } else {
                piped
            }
        };
        command
            .stdin(on_terminal(wiring.stdin, Stdio::null()))
            .stdout(on_terminal(wiring.stdout, Stdio::piped()))
            .stderr(on_terminal(wiring.stderr, Stdio::piped()));
        let slave = pty.slave;
        let slave_fd = std::os::fd::AsRawFd::as_raw_fd(&slave);
        // SAFETY: setsid and ioctl are async-signal-safe; the closure allocates nothing. The
        // child becomes a session leader (unless the command already made it one) whose
        // controlling terminal is the pseudo-terminal, as a login shell's children are.
        unsafe {
            command.pre_exec(move || {
                let _already_a_leader = nix::libc::setsid();
                if nix::libc::ioctl(slave_fd, nix::libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().expect("start the command on the terminal");
        // Our copies of the terminal's slave side go, so reading ends when the child exits.
        drop(command);
        drop(slave);
        let stdout = child.stdout.take().map(read_all_on_a_thread);
        let stderr = child.stderr.take().map(read_all_on_a_thread);
        let master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().expect("a second master fd");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let shown = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            // EIO once every slave fd is closed.
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                shown
                    .lock()
                    .expect("screen")
                    .extend_from_slice(&buffer[..read]);
            }
        });
        Self {
            master,
            screen,
            child,
            stdout,
            stderr,
        }
    }

    /// The terminal's bytes so far, as text (invalid UTF-8 replaced).
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().expect("screen")).into_owned()
    }

    pub fn wait_for(&self, wanted: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.screen().contains(wanted) {
            assert!(
                Instant::now() < deadline,
                "{wanted:?} did not appear on the terminal within 60 s; it shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The command's process id, to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the command is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("wait for the command")
            .is_none()
    }

    pub fn type_line(&mut self, line: &str) {
        self.master
            .write_all(format!("{line}\n").as_bytes())
            .expect("type on the terminal");
    }

    /// Waits up to 60 s for the command to end; what it left.
    pub fn finish(mut self) -> Finished {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the command") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "the command did not finish within 60 s; the terminal shows:\n{}",
                    self.screen()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let collected = |reader: Option<std::thread::JoinHandle<Vec<u8>>>| {
            reader.map_or_else(String::new, |reader| {
                String::from_utf8_lossy(&reader.join().expect("pipe reader")).into_owned()
            })
        };
        let stdout = collected(self.stdout.take());
        let stderr = collected(self.stderr.take());
        // What the child wrote last may still be on its way through the terminal.
        std::thread::sleep(Duration::from_millis(100));
        Finished {
            status,
            stdout,
            stderr,
            screen: self.screen(),
        }
    }

    /// [`Terminal::finish`] on a blocking thread, for async tests: the runtime's threads keep
    /// serving while the command ends.
    pub async fn finish_async(self) -> Finished {
        tokio::task::spawn_blocking(move || self.finish())
            .await
            .expect("the terminal's command finished")
    }
}

pub fn read_all_on_a_thread(
    mut source: impl Read + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = source.read_to_end(&mut bytes);
        bytes
    })
}
