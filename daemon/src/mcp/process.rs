//! An MCP server's process: started directly (never through a shell) with a filtered
//! environment, in a process group of its own and tagged like a command's tree, so that
//! stopping it reaches whatever it started; its stderr kept in a bounded, rotated log file
//! (`<log_dir>/NAME.log`) and its last lines in memory, to quote when it fails.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use toold_protocol::sync::LockUnpoisoned;

use crate::process_tree::{KnownChild, ProcessTree, new_run_tag, spawn_known, tagged_command};

/// The variables of the daemon's environment a server starts with (the MCP SDKs' default set,
/// and the locale, time zone and temporary directory); its table's `env` is added on top.
const INHERITED_VARIABLES: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "TMPDIR",
];

/// How large a server's log grows before it is rotated to `NAME.log.1` (the one before is
/// dropped): two files of this size at most per server.
pub(crate) const MAX_LOG_BYTES: u64 = 1024 * 1024;

/// How many of the last lines of stderr are kept to quote in errors.
const TAIL_LINES: usize = 20;
/// How long one quoted line may be.
const MAX_TAIL_LINE_CHARS: usize = 500;

/// How long a server gets to exit after its stdin closes and SIGTERM, before SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(3);

/// What starting a server needs from its config table.
#[derive(Debug, Clone)]
pub(crate) struct Launch<'a> {
    pub name: &'a str,
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: Option<&'a Path>,
}

/// A running server process.
pub(crate) struct ServerProcess {
    child: Child,
    /// Taken by [`ServerProcess::stop`]; still here when the process is dropped unstopped.
    tree: Option<ProcessTree>,
    _known: Option<KnownChild>,
    /// Taken by the MCP client, which speaks on them.
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    stderr: Arc<StderrLog>,
    stderr_task: JoinHandle<()>,
}

impl ServerProcess {
    /// Starts the server, its stderr going to `<log_dir>/NAME.log`.
    pub(crate) fn spawn(launch: &Launch<'_>, log_dir: &Path) -> io::Result<Self> {
        let log = Arc::new(StderrLog::open(log_dir, launch.name)?);
        let tag = new_run_tag();
        // Tagged like a command's tree: a sweep of a command's tree never takes the server's
        // processes (reparented to the daemon, a child subreaper) for its orphans.
        let env = inherited_variables().chain(
            launch
                .env
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value))),
        );
        let mut command = tagged_command(launch.command, env, &tag);
        command.args(launch.args);
        die_with_the_daemon(&mut command);
        if let Some(cwd) = launch.cwd {
            command.current_dir(cwd);
        }
        let (mut child, known) = spawn_known(|| command.spawn(), Child::id)?;
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the server exited as it started"))?;
        let tree = ProcessTree::new(pid, &tag);
        let stderr = child.stderr.take().map(|stderr| {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                drain(stderr, &log).await;
                log.read_to_end.cancel();
            })
        });
        Ok(Self {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            tree: Some(tree),
            _known: known,
            stderr: log,
            stderr_task: stderr.unwrap_or_else(|| tokio::spawn(async {})),
        })
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Resolves when the server's process has exited.
    pub(crate) async fn exited(&mut self) -> io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }

    /// A handle on the server's stderr that outlives the process (to quote after a crash).
    pub(crate) fn stderr_log(&self) -> Arc<StderrLog> {
        Arc::clone(&self.stderr)
    }

    /// Stops the server and everything it started: its stdin closed, then SIGTERM, then
    /// SIGKILL after [`STOP_GRACE`]; returns once none of them is alive.
    pub(crate) async fn stop(mut self) {
        drop(self.stdin.take());
        drop(self.stdout.take());
        // A server that exits when its input ends is given a moment before any signal.
        let exited = tokio::time::timeout(Duration::from_millis(200), self.child.wait()).await;
        if let Some(mut tree) = self.tree.take() {
            let sweep = tokio::task::spawn_blocking(move || tree.terminate(STOP_GRACE));
            if let Err(err) = sweep.await {
                tracing::warn!(%err, "the sweep of an MCP server's processes failed");
            }
        }
        if exited.is_err() {
            let _ = self.child.wait().await;
        }
        // Its stderr ends with the last process holding it; one that escaped the sweep (a
        // process that dropped the tag) must not hold the stop.
        if tokio::time::timeout(STDERR_AFTER_STOP, &mut self.stderr_task)
            .await
            .is_err()
        {
            self.stderr_task.abort();
        }
    }
}

/// How long a stopped server's stderr is read on before it is left.
const STDERR_AFTER_STOP: Duration = Duration::from_secs(1);

impl Drop for ServerProcess {
    /// A server dropped without [`ServerProcess::stop`] (its supervisor ended from outside):
    /// its process group is killed at once, the sweep being out of reach here.
    fn drop(&mut self) {
        if self.tree.is_none() {
            return;
        }
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.stderr_task.abort();
    }
}

/// Has the kernel SIGKILL the server when the daemon's thread that started it ends: the
/// daemon dying, in practice, as servers are started from the runtime's worker threads, which
/// live as long as the daemon (never start one from a blocking-pool thread, which may end when
/// idle). What the server started sees its stdin close then; an MCP server exits on that.
#[allow(unsafe_code)]
fn die_with_the_daemon(command: &mut tokio::process::Command) {
    let daemon = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec; it makes only the prctl and
    // getppid system calls, both async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // A daemon that died before the request above would never send the signal.
            if nix::unistd::getppid() != daemon {
                return Err(std::io::Error::other("the daemon is gone"));
            }
            Ok(())
        });
    }
}

/// Reads a server's stderr to its end, whatever it writes: bytes, not text (a byte that is not
/// UTF-8 is shown as U+FFFD), each line kept up to [`MAX_LINE_BYTES`] and the rest of a longer
/// one counted and dropped, so that a server writing without newlines never grows the daemon
/// and never blocks on a full pipe.
async fn drain(mut stderr: ChildStderr, log: &StderrLog) {
    let mut buffer = vec![0; 8192];
    let mut line = Line::default();
    loop {
        let read = match stderr.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(path = %log.path.display(), %err, "cannot read an MCP server's stderr any more");
                break;
            }
        };
        let mut chunk = &buffer[..read];
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            line.push(&chunk[..end]);
            log.record(&line.take());
            chunk = &chunk[end + 1..];
        }
        line.push(chunk);
    }
    if !line.is_empty() {
        log.record(&line.take());
    }
}

/// How much of one line of a server's stderr is kept.
const MAX_LINE_BYTES: usize = 16 * 1024;

/// A line of stderr being read: its first [`MAX_LINE_BYTES`] and how many more it had.
#[derive(Default)]
struct Line {
    kept: Vec<u8>,
    dropped: u64,
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.kept.len();
        let taken = room.min(bytes.len());
        self.kept.extend_from_slice(&bytes[..taken]);
        self.dropped += (bytes.len() - taken) as u64;
    }

    fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.dropped == 0
    }

    /// The line as text (lossily decoded, its cut said), emptied for the next.
    fn take(&mut self) -> String {
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!(
                " … ({} more bytes of this line not kept)",
                self.dropped
            ));
        }
        self.kept.clear();
        self.dropped = 0;
        text
    }
}

fn inherited_variables() -> impl Iterator<Item = (OsString, OsString)> {
    crate::process_tree::inherited_env().filter(|(name, _)| {
        name.to_str()
            .is_some_and(|name| INHERITED_VARIABLES.contains(&name))
    })
}

/// A server's stderr: appended to its log file (rotated past [`MAX_LOG_BYTES`]) and its last
/// lines kept.
pub(crate) struct StderrLog {
    path: PathBuf,
    state: Mutex<LogState>,
    /// Fired once the server's stderr has been read to its end (the server and whatever it
    /// started have closed it): its last words are all in.
    pub read_to_end: CancellationToken,
}

struct LogState {
    file: Option<File>,
    written: u64,
    tail: VecDeque<String>,
}

impl StderrLog {
    fn open(dir: &Path, name: &str) -> io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join(format!("{name}.log"));
        let file = open_log(&path)?;
        let written = file.metadata().map(|meta| meta.len()).unwrap_or(0);
        Ok(Self {
            path,
            read_to_end: CancellationToken::new(),
            state: Mutex::new(LogState {
                file: Some(file),
                written,
                tail: VecDeque::new(),
            }),
        })
    }

    /// Appends one line, every configured secret in it redacted ([`crate::secrets`]), to the
    /// file and the tail.
    fn record(&self, line: &str) {
        let line = crate::secrets::current().redact(line).into_owned();
        let line = line.as_str();
        let mut state = self.state.lock_unpoisoned();
        let bytes = line.len() as u64 + 1;
        if state.written + bytes > MAX_LOG_BYTES {
            state.file = None;
            let rotated = self.path.with_extension("log.1");
            let reopened =
                std::fs::rename(&self.path, &rotated).and_then(|()| open_log(&self.path));
            match reopened {
                Ok(file) => {
                    state.file = Some(file);
                    state.written = 0;
                }
                Err(err) => {
                    tracing::warn!(path = %self.path.display(), %err, "cannot rotate an MCP server's log; its stderr is no longer kept on disk");
                }
            }
        }
        if let Some(file) = state.file.as_mut()
            && writeln!(file, "{line}").is_ok()
        {
            state.written += bytes;
        }
        if state.tail.len() == TAIL_LINES {
            state.tail.pop_front();
        }
        let shown: String = line.chars().take(MAX_TAIL_LINE_CHARS).collect();
        state.tail.push_back(shown);
    }

    /// The last lines, oldest first.
    pub(crate) fn tail(&self) -> Vec<String> {
        self.state.lock_unpoisoned().tail.iter().cloned().collect()
    }
}

fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use nix::errno::Errno;
    use nix::sys::signal::kill;
    use nix::unistd::Pid;

    use super::*;

    fn launch<'a>(script: &'a [String], env: &'a BTreeMap<String, String>) -> Launch<'a> {
        Launch {
            name: "test",
            command: "sh",
            args: script,
            env,
            cwd: None,
        }
    }

    fn alive(pid: i32) -> bool {
        kill(Pid::from_raw(pid), None) != Err(Errno::ESRCH)
            && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stderr_is_logged_and_the_environment_is_filtered() {
        let dir = tempfile::tempdir().unwrap();
        let script = vec![
            "-c".to_owned(),
            "echo \"from $EXTRA, home $HOME, cargo ${CARGO_MANIFEST_DIR:-none}\" >&2".to_owned(),
        ];
        let env = BTreeMap::from([("EXTRA".to_owned(), "the table".to_owned())]);
        let mut process = ServerProcess::spawn(&launch(&script, &env), dir.path()).unwrap();
        process.exited().await.unwrap();
        let log = process.stderr_log();
        process.stop().await;
        // Cargo runs tests with CARGO_MANIFEST_DIR set: not one of the variables a server gets.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let home = std::env::var("HOME").unwrap_or_default();
        let expected = format!("from the table, home {home}, cargo none");
        assert_eq!(log.tail(), std::slice::from_ref(&expected));
        let on_disk = std::fs::read_to_string(dir.path().join("test.log")).unwrap();
        assert_eq!(on_disk, format!("{expected}\n"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopping_reaches_what_the_server_started_even_if_it_ignores_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        // The server ignores SIGTERM and leaves a child that does too, in another session.
        let pid_file = dir.path().join("grandchild.pid");
        let script = vec![
            "-c".to_owned(),
            format!(
                "trap '' TERM; setsid sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 60' & \
                 exec sleep 60",
                pid_file.display()
            ),
        ];
        let env = BTreeMap::new();
        let process = ServerProcess::spawn(&launch(&script, &env), dir.path()).unwrap();
        let server_pid = process.pid().unwrap() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the grandchild never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(alive(server_pid) && alive(grandchild));
        let started = Instant::now();
        process.stop().await;
        let took = started.elapsed();
        assert!(!alive(server_pid), "the server survived");
        assert!(!alive(grandchild), "what the server started survived");
        assert!(
            took >= STOP_GRACE && took < STOP_GRACE + Duration::from_secs(5),
            "SIGKILL came after the grace: {took:?}"
        );
    }

    #[test]
    fn the_log_rotates_and_the_tail_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let log = StderrLog::open(dir.path(), "big").unwrap();
        let line = "x".repeat(1000);
        for _ in 0..(MAX_LOG_BYTES / 1001 + 10) {
            log.record(&line);
        }
        let current = std::fs::metadata(dir.path().join("big.log")).unwrap().len();
        let rotated = std::fs::metadata(dir.path().join("big.log.1"))
            .unwrap()
            .len();
        assert!(current <= MAX_LOG_BYTES && rotated <= MAX_LOG_BYTES);
        assert_eq!(current, 10 * 1001);
        assert_eq!(log.tail().len(), TAIL_LINES);
        log.record(&"y".repeat(2000));
        assert_eq!(
            log.tail().last().map(|line| line.chars().count()),
            Some(MAX_TAIL_LINE_CHARS)
        );
    }
}
