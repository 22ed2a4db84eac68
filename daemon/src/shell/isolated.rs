//! The shell parser behind a process boundary: the daemon analyses untrusted command lines in
//! child processes it can kill, never on its own threads.
//!
//! brush-parser has taken exponential time and unbounded memory on lines found by fuzzing
//! (docs/reliability.md, "Fuzzing"). The guards in `guards::parsable` stop the shapes known so
//! far; this boundary bounds the ones not known yet. Each worker is the `toold` binary itself,
//! started with [`WORKER_ARGUMENT`]: it caps its own address space, dies with the daemon, and
//! answers one line at a time over its stdin/stdout. The daemon gives each line a deadline; a
//! worker that misses it, crashes or answers nonsense is killed, and the line is *unreadable*
//! (it asks in every mode), which is how the permission engine treats any line it cannot read.
//!
//! Workers are kept between lines (a round trip costs tens of microseconds more than the parse
//! itself, mostly wake-ups; starting a worker costs milliseconds), at most [`MAX_WORKERS`] at a
//! time, and at most [`MAX_WORKERS_PER_OWNER`] for one owner (a client's process, however many
//! connections and sessions it opens): a client whose lines each hold a worker for the whole
//! deadline slows itself, not the others. A line that missed
//! its deadline, or killed its worker, is remembered (by a keyed hash) and answered unreadable
//! at once when it comes again, without a worker. A worker is the daemon's child but no command's: it is registered with
//! `process_tree`, so that the fast end of a command still applies.
//!
//! Wire format: the worker first says it is ready (`READY`); then, both ways, a 4-byte
//! little-endian length and that many bytes: the request is the line (UTF-8), the answer the
//! [`CommandLine`] as JSON.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;
use toold_protocol::sync::LockUnpoisoned;

use super::guards::MAX_LINE_BYTES;
use super::{CommandLine, analyze};
use crate::process_tree;

/// The first argument that makes the `toold` binary a parser worker instead of a command line.
pub const WORKER_ARGUMENT: &str = "__shell-parser-worker";

/// How many workers may parse at once; more lines wait for one.
pub const MAX_WORKERS: usize = 4;

/// How many workers one owner (a client's process) may hold at once; its other lines wait for
/// one of its own, not in the queue every client shares.
pub(crate) const MAX_WORKERS_PER_OWNER: usize = MAX_WORKERS / 2;

/// How many unreadable lines (deadline missed, worker killed) are remembered; the oldest is
/// forgotten first.
const REMEMBERED_LINES: usize = 4096;

/// How long a line may take. A real line parses in microseconds (a 64 KiB script in
/// milliseconds); the slow shapes found by fuzzing take minutes to hours.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);

/// How long a worker may take to start: an exec, which a loaded machine can make slow. Not
/// part of any line's deadline.
const STARTUP_DEADLINE: Duration = Duration::from_secs(10);

/// What a worker says once, when it is ready for lines.
const READY: [u8; 1] = [b'R'];

/// The address space a worker gives itself: a parse that needs more is a parser bug, and the
/// worker aborts instead of taking the machine's memory.
const WORKER_ADDRESS_SPACE: u64 = 1 << 30;

/// The largest answer the daemon reads: an analysis of a 64 KiB line is far smaller.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Analyses command lines in killable worker processes.
pub struct ShellParser {
    program: PathBuf,
    deadline: Duration,
    idle: Mutex<Vec<Worker>>,
    running: Semaphore,
    /// Each owner's own share of the workers, while it has lines in flight.
    owners: Mutex<HashMap<String, Arc<Semaphore>>>,
    remembered: Mutex<Remembered>,
}

/// Lines that were unreadable for want of time or a worker, by a hash keyed per daemon (so no
/// one can craft a readable line that collides with one remembered), with their reasons.
struct Remembered {
    keys: std::hash::RandomState,
    reasons: HashMap<u64, String>,
    order: VecDeque<u64>,
}

impl Remembered {
    fn key(&self, line: &str) -> u64 {
        self.keys.hash_one(line)
    }

    fn remember(&mut self, key: u64, reason: &str) {
        if self.reasons.insert(key, reason.to_owned()).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > REMEMBERED_LINES {
            if let Some(oldest) = self.order.pop_front() {
                self.reasons.remove(&oldest);
            }
        }
    }
}

/// An owner's share of the workers, given back (and forgotten when no one else of the owner
/// waits) when the line is done or its caller goes away.
struct OwnerShare<'a> {
    parser: &'a ShellParser,
    owner: &'a str,
    semaphore: Arc<Semaphore>,
}

impl Drop for OwnerShare<'_> {
    fn drop(&mut self) {
        let mut owners = self.parser.owners.lock_unpoisoned();
        // The map's reference and this one: nobody else of this owner holds or waits.
        if Arc::strong_count(&self.semaphore) == 2 {
            owners.remove(self.owner);
        }
    }
}

impl ShellParser {
    /// Workers run `program` (the `toold` binary) with [`WORKER_ARGUMENT`].
    pub fn new(program: impl Into<PathBuf>, deadline: Duration) -> Self {
        Self {
            program: program.into(),
            deadline,
            idle: Mutex::new(Vec::new()),
            running: Semaphore::new(MAX_WORKERS),
            owners: Mutex::new(HashMap::new()),
            remembered: Mutex::new(Remembered {
                keys: std::hash::RandomState::new(),
                reasons: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    /// The daemon's own parser: workers run the executable of this very process
    /// (`/proc/self/exe` stays valid when the file on disk is replaced by an upgrade).
    pub fn of_this_binary() -> Self {
        Self::new("/proc/self/exe", DEFAULT_DEADLINE)
    }

    /// Analyses a line for `owner` (a client's process); a line the worker cannot analyse in time,
    /// or at all, is unreadable, and is remembered as such.
    pub async fn analyze(&self, owner: &str, line: &str) -> CommandLine {
        if line.len() > MAX_LINE_BYTES {
            // Not worth a round trip: the worker would say the same.
            return analyze(line);
        }
        let key = self.remembered.lock_unpoisoned().key(line);
        if let Some(known) = self.remembered_unreadable(key) {
            return known;
        }
        let share = OwnerShare {
            parser: self,
            owner,
            semaphore: Arc::clone(
                self.owners
                    .lock_unpoisoned()
                    .entry(owner.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(MAX_WORKERS_PER_OWNER))),
            ),
        };
        let _own_permit = share
            .semaphore
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let _permit = self
            .running
            .acquire()
            .await
            .expect("the semaphore is never closed");
        // The same line may have missed its deadline while this one waited for a worker.
        if let Some(known) = self.remembered_unreadable(key) {
            return known;
        }
        // A pooled worker may have died while idle (killed by hand, or by the OOM killer): its
        // failure says nothing about the line, which gets one more try on a fresh worker.
        let pooled = self.idle.lock_unpoisoned().pop();
        let asked = match pooled {
            Some(worker) => match self.ask(worker, line).await {
                Asked::Failed(err) => {
                    tracing::debug!(%err, "a pooled shell parser worker failed; starting another");
                    self.ask_fresh(line).await
                }
                asked => asked,
            },
            None => self.ask_fresh(line).await,
        };
        let reason = match asked {
            Asked::Answered(analysis) => return analysis,
            Asked::Failed(err) => {
                tracing::warn!(%err, bytes = line.len(), "the shell parser worker failed on a command line");
                format!("the shell parser failed on it ({err})")
            }
            Asked::Late => {
                let limit = self.deadline.as_millis();
                tracing::warn!(
                    bytes = line.len(),
                    limit_ms = limit,
                    "the shell parser worker missed its deadline and was killed"
                );
                format!("the shell parser did not finish within {limit} ms")
            }
        };
        self.remembered.lock_unpoisoned().remember(key, &reason);
        CommandLine::unreadable(reason)
    }

    /// The answer for a line remembered as unreadable, if it is.
    fn remembered_unreadable(&self, key: u64) -> Option<CommandLine> {
        let remembered = self.remembered.lock_unpoisoned();
        let reason = remembered.reasons.get(&key)?;
        Some(CommandLine::unreadable(format!(
            "{reason} (when it came before)"
        )))
    }

    async fn ask_fresh(&self, line: &str) -> Asked {
        match Worker::start(&self.program).await {
            Ok(worker) => self.ask(worker, line).await,
            Err(err) => {
                tracing::error!(%err, program = %self.program.display(), "cannot start a shell parser worker");
                Asked::Failed(std::io::Error::other(format!("it could not start: {err}")))
            }
        }
    }

    /// One line to one worker, within the deadline; the worker goes back to the pool only
    /// after a good answer (dropping it kills it).
    async fn ask(&self, mut worker: Worker, line: &str) -> Asked {
        match tokio::time::timeout(self.deadline, worker.analyze(line)).await {
            Ok(Ok(analysis)) => {
                self.idle.lock_unpoisoned().push(worker);
                Asked::Answered(analysis)
            }
            Ok(Err(err)) => Asked::Failed(err),
            Err(_) => Asked::Late,
        }
    }
}

/// How one worker did with one line.
enum Asked {
    Answered(CommandLine),
    Failed(std::io::Error),
    Late,
}

/// One worker process and its pipes.
struct Worker {
    // Kept for `kill_on_drop`; dropped before `_known`, so the worker is killed before the
    // daemon forgets it.
    _child: Child,
    _known: Option<process_tree::KnownChild>,
    stdin: ChildStdin,
    stdout: ChildStdout,
    buffer: Vec<u8>,
}

impl Worker {
    /// Starts a worker and waits until it is ready, so that its start (an exec, slow on a
    /// loaded machine) never counts against a line's deadline.
    async fn start(program: &Path) -> std::io::Result<Self> {
        let mut command = Command::new(program);
        command
            .arg0("toold-shell-parser")
            .arg(WORKER_ARGUMENT)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // A worker is the daemon's child but no command's: sweeps must know it.
        let (mut child, known) =
            process_tree::spawn_known(|| command.spawn(), tokio::process::Child::id)?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut worker = Self {
            _child: child,
            _known: known,
            stdin,
            stdout,
            buffer: Vec::new(),
        };
        let mut ready = [0u8; 1];
        match tokio::time::timeout(STARTUP_DEADLINE, worker.stdout.read_exact(&mut ready)).await {
            Ok(Ok(_)) if ready == READY => {}
            Ok(Ok(_)) => return Err(std::io::Error::other("it said something else than ready")),
            Ok(Err(err)) => return Err(err),
            Err(_) => return Err(std::io::Error::other("it was not ready in time")),
        }
        Ok(worker)
    }

    async fn analyze(&mut self, line: &str) -> std::io::Result<CommandLine> {
        let length = u32::try_from(line.len()).map_err(std::io::Error::other)?;
        self.buffer.clear();
        self.buffer.extend_from_slice(&length.to_le_bytes());
        self.buffer.extend_from_slice(line.as_bytes());
        self.stdin.write_all(&self.buffer).await?;
        let mut header = [0u8; 4];
        self.stdout.read_exact(&mut header).await.map_err(|err| {
            if err.kind() == std::io::ErrorKind::UnexpectedEof {
                std::io::Error::other("the parser process ended without answering")
            } else {
                err
            }
        })?;
        let length = u32::from_le_bytes(header) as usize;
        if length > MAX_ANSWER_BYTES {
            return Err(std::io::Error::other(format!(
                "an answer of {length} bytes"
            )));
        }
        self.buffer.resize(length, 0);
        self.stdout.read_exact(&mut self.buffer).await?;
        serde_json::from_slice(&self.buffer).map_err(std::io::Error::other)
    }
}

/// The worker's side: limits itself, then answers lines until its stdin closes.
pub fn worker_main() -> ExitCode {
    if let Err(err) = limit_this_process() {
        eprintln!("toold shell parser: {err}");
        return ExitCode::FAILURE;
    }
    // Panics inside the parser are caught and make the line unreadable; they need no report.
    std::panic::set_hook(Box::new(|_| {}));
    let mut output = std::io::stdout().lock();
    if let Err(err) = output.write_all(&READY).and_then(|()| output.flush()) {
        eprintln!("toold shell parser: {err}");
        return ExitCode::FAILURE;
    }
    match serve(std::io::stdin().lock(), output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toold shell parser: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Caps the address space, turns core dumps off, keeps commands from reading or tracing it (it
/// holds the daemon's environment), and asks for SIGKILL when the daemon dies (a worker stuck
/// in a parse would not see its stdin close).
fn limit_this_process() -> nix::Result<()> {
    nix::sys::prctl::set_dumpable(false)?;
    use nix::sys::resource::{Resource, setrlimit};
    setrlimit(
        Resource::RLIMIT_AS,
        WORKER_ADDRESS_SPACE,
        WORKER_ADDRESS_SPACE,
    )?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
}

/// Answers requests until a clean end of input.
fn serve(mut input: impl Read, mut output: impl Write) -> std::io::Result<()> {
    let mut request = Vec::new();
    loop {
        let mut header = [0u8; 4];
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(err),
        }
        let length = u32::from_le_bytes(header) as usize;
        if length > MAX_LINE_BYTES {
            return Err(std::io::Error::other(format!(
                "a request of {length} bytes"
            )));
        }
        request.resize(length, 0);
        input.read_exact(&mut request)?;
        let line = std::str::from_utf8(&request).map_err(std::io::Error::other)?;
        let answer = serde_json::to_vec(&analyze(line)).map_err(std::io::Error::other)?;
        let length = u32::try_from(answer.len()).map_err(std::io::Error::other)?;
        output.write_all(&length.to_le_bytes())?;
        output.write_all(&answer)?;
        output.flush()?;
    }
}
