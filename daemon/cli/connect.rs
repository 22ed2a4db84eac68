//! `toold connect`: a byte-exact bridge between stdio and the daemon's socket, for clients that
//! can only spawn a process. When no daemon answers, it starts `toold serve` in the background
//! (its own session, stdio on /dev/null) and waits until it answers.
//!
//! The bridge knows nothing of framing: bytes go both ways as they come. End of stdin
//! half-closes the socket (the daemon sees the client leave), and what the daemon still sends
//! is copied until it closes; the daemon closing ends the bridge at once.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use super::address::DaemonAddress;

/// How often to try the socket while a daemon we started gets ready.
const START_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Bytes moved per read, each way.
const COPY_BUFFER_BYTES: usize = 64 * 1024;

#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// How long to wait for a daemon this command started to answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub start_timeout: u64,
    /// Pass --allow-root to the daemon this command starts, if it starts one.
    #[arg(long)]
    pub allow_root: bool,
}

/// Connects (starting the daemon if needed) and bridges stdio until either side closes.
pub fn connect(args: &ConnectArgs) -> anyhow::Result<()> {
    bridge(connect_or_start(args)?)
}

/// A connection to the daemon's socket, starting the daemon first when none answers. A socket
/// that is the fallback for a missing `XDG_RUNTIME_DIR` is named on stderr.
pub fn connect_or_start(args: &ConnectArgs) -> anyhow::Result<UnixStream> {
    let socket = args.address.socket_path_noting_fallback()?;
    match UnixStream::connect(&socket) {
        Ok(stream) => Ok(stream),
        Err(error) if nobody_listens(&error) => start_daemon_and_connect(args, &socket),
        Err(error) => Err(cannot_connect(&socket, error)),
    }
}

/// Whether a failed connect means no daemon is there (rather than, say, no permission).
fn nobody_listens(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

fn cannot_connect(socket: &Path, error: io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot connect to the daemon's socket {}: {error}; check the path and its \
         permissions, or choose another socket with --socket",
        socket.display()
    )
}

/// Starts `toold serve` detached from this process and waits until it answers on `socket`.
fn start_daemon_and_connect(args: &ConnectArgs, socket: &Path) -> anyhow::Result<UnixStream> {
    let log = toold::logging::default_log_file();
    // What the log holds before this start: what follows is this daemon's.
    let logged_before = log
        .as_deref()
        .and_then(|log| std::fs::metadata(log).ok())
        .map_or(0, |meta| meta.len());
    let mut child = spawn_detached_daemon(args, socket, log.as_deref())?;
    let timeout = Duration::from_secs(args.start_timeout);
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(error) if nobody_listens(&error) => {}
            Err(error) => return Err(cannot_connect(socket, error)),
        }
        if let Some(status) = child
            .try_wait()
            .context("cannot learn whether the daemon it started is running")?
        {
            // Another `toold connect` may have started a daemon at the same moment: ours then
            // exits, finding theirs serving, and theirs answers.
            if let Ok(stream) = UnixStream::connect(socket) {
                return Ok(stream);
            }
            bail!(
                "the daemon it started (`toold serve --socket {}`) exited ({status}) before it \
                 answered{}",
                socket.display(),
                its_reason(log.as_deref(), logged_before)
            );
        }
        if Instant::now() >= deadline {
            // A daemon that is not ready by now is stuck; leaving it half-started would make
            // the next attempt find a socket that never answers.
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the daemon it started did not answer on {} within {} s, so it was stopped \
                 (allow more time with --start-timeout){}",
                socket.display(),
                timeout.as_secs(),
                its_reason(log.as_deref(), logged_before)
            );
        }
        std::thread::sleep(START_POLL_INTERVAL);
    }
}

/// What the daemon wrote to its log since `offset` (its own reason for stopping, as it said
/// it), its last lines, made visible, for the error; or where to look when there is no log.
fn its_reason(log: Option<&Path>, offset: u64) -> String {
    /// Enough lines for a reason and what led to it, not a screenful of start-up.
    const LAST_LINES: usize = 12;
    let Some(log) = log else {
        return "; run `toold serve` in a terminal to see why".to_owned();
    };
    let written = std::fs::read(log)
        .ok()
        .and_then(|bytes| {
            bytes
                .get(usize::try_from(offset).ok()?..)
                .map(<[u8]>::to_vec)
        })
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&written);
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if lines.is_empty() {
        return format!("; it said nothing in its log {}", log.display());
    }
    let last: Vec<String> = lines[lines.len().saturating_sub(LAST_LINES)..]
        .iter()
        .map(|line| format!("  {}", super::visible::line(line)))
        .collect();
    format!(
        "; it said (in its log {}):\n{}",
        log.display(),
        last.join("\n")
    )
}

/// `toold serve` with the same socket and config, in a session of its own (no controlling
/// terminal, so closing this terminal or a Ctrl-C here does not stop it), stdin and stdout on
/// /dev/null, its log (stderr) in `log`, its working directory `/` so that it does not keep
/// any other directory busy.
fn spawn_detached_daemon(
    args: &ConnectArgs,
    socket: &Path,
    log: Option<&Path>,
) -> anyhow::Result<Child> {
    let program = std::env::current_exe()
        .context("cannot find this program's own path to start `toold serve` with it")?;
    let mut command = Command::new(program);
    command.arg("serve").arg("--socket").arg(absolute(socket)?);
    if let Some(config) = &args.address.config {
        command.arg("--config").arg(absolute(config)?);
    }
    if args.allow_root {
        command.arg("--allow-root");
    }
    if let Some(log) = log {
        command.arg("--log-file").arg(log);
    }
    command
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    start_new_session(&mut command);
    command
        .spawn()
        .context("cannot start `toold serve` in the background")
}

/// The child calls setsid(2) between fork and exec.
#[allow(unsafe_code)]
fn start_new_session(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec; it only calls setsid(2), which
    // is async-signal-safe, allocates nothing and touches no state shared with the parent.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(drop).map_err(io::Error::from));
    }
}

/// `path` made absolute against the current directory, since the daemon runs in `/`.
fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path)
        .with_context(|| format!("cannot make {} an absolute path", path.display()))
}

/// Copies stdin to the socket on a thread of its own and the socket to stdout here.
fn bridge(stream: UnixStream) -> anyhow::Result<()> {
    let to_daemon = stream
        .try_clone()
        .context("cannot share the socket between the two directions of the bridge")?;
    // Not joined: when the daemon closes, the process ends even if stdin is still open.
    std::thread::spawn(move || forward_stdin(to_daemon));
    copy_until_closed(&stream, &mut io::stdout().lock())
}

/// Stdin to the daemon; at end of input (or a failure either side), the socket's write half
/// is closed so the daemon sees the client leave.
fn forward_stdin(mut socket: UnixStream) {
    let mut stdin = io::stdin().lock();
    let mut buffer = vec![0; COPY_BUFFER_BYTES];
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                if socket.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = socket.shutdown(Shutdown::Write);
}

/// The daemon's bytes to `output`, flushed as they come, until the daemon closes or the
/// reader of `output` goes away.
fn copy_until_closed(mut socket: &UnixStream, output: &mut impl Write) -> anyhow::Result<()> {
    let mut buffer = vec![0; COPY_BUFFER_BYTES];
    loop {
        let read = match socket.read(&mut buffer) {
            Ok(0) => return Ok(()),
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            // A reset is the daemon leaving too.
            Err(error) if error.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
            Err(error) => return Err(error).context("cannot read from the daemon's socket"),
        };
        let written = output
            .write_all(&buffer[..read])
            .and_then(|()| output.flush());
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(error) => return Err(error).context("cannot write to stdout"),
        }
    }
}
