//! The `run_command` builtin tool: runs `bash -c COMMAND`, streams and keeps its output, and
//! makes sure no process it started outlives the call.
//!
//! **The shell is bash**, the dialect the permission engine's parser reads (never `/bin/sh`,
//! which is dash on Debian: where the two disagree, the engine would judge one program and the
//! shell run another). It reads no profile or rc file, and nothing from the environment that
//! would run code or change how it reads the line before the line runs: `BASH_ENV` and `ENV`
//! (files sourced first), exported functions (`BASH_FUNC_*`, which could stand in for any
//! command), `SHELLOPTS`, `BASHOPTS`, `BASH_COMPAT` and `POSIXLY_CORRECT` (options and
//! dialect) are removed, whoever set them (`shell_reads_it`).
//!
//! **The command's processes.** The shell runs in its own process group with stdin on
//! `/dev/null`, the daemon's environment minus `LISTEN_*`, `NOTIFY_SOCKET`, `WATCHDOG_*` and
//! `TOOLD_*`, plus the session's `command_env`, plus the call's `env`, plus `TOOLD_RUN_TAG`
//! ([`RUN_TAG_VAR`]), the per-call tag the process-tree sweep finds escapees by (set last, so
//! a call cannot forge another call's tag). `PWD` is set to
//! the working directory. The shell starts through `crate::spawn` (no copy of the daemon's
//! memory), in the session's sandbox (`crate::sandbox`; `read_only` also gets a `TMPDIR` of
//! the call's own), and is killed if this future is dropped before it was waited for.
//!
//! **Output.** stdout and stderr are read concurrently (`pump`); each read is decoded per
//! stream without splitting characters, sent live to `ctx.live`, and appended to one
//! head-and-tail buffer in arrival order (`capture`), so memory stays bounded whatever the
//! command prints. Metadata: `exit_code` (null when a signal killed the shell), `signal`,
//! `output_bytes` (every byte read, before decoding), `truncated`, and
//! `killed_background_processes` when leftovers were killed (see below). The omission marker
//! counts bytes of decoded text, which equal raw bytes unless invalid UTF-8 was replaced.
//!
//! **Stopping** (cancellation or the deadline): the whole tree gets SIGTERM, `KILL_GRACE`
//! to exit, then SIGKILL (see [`crate::process_tree`]); the output read so far is returned as
//! a failure, whose error type the registry sets.
//!
//! **Leftovers after a normal exit.** A call ends when its shell exits: a background process
//! (`server &`, `setsid daemon &`, a double fork) does not outlive it. Once the shell has
//! exited, the pipes are read until they close or `EXIT_DRAIN` passes (a background process
//! may hold them open forever); then every remaining process of the call — group, descendants,
//! tagged — is killed as on cancellation, the pipes are read for at most `KILL_DRAIN` more,
//! and the result is built from the shell's exit status. So a call never hangs on a background
//! process, and never leaks one. Commands that must keep running belong in a service manager.

mod capture;
mod pump;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::net::unix::pipe;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toold_protocol::{ErrorType, Safety, ToolDefinition};

use self::pump::OutputPump;
use super::{
    JudgedArguments, Tool, ToolContext, ToolFailure, ToolFuture, ToolOutcome, ToolSuccess,
    builtin_definition, parse_args,
};
use crate::env::Env;
use crate::paths;
use crate::process_tree::{self, ProcessTree, RUN_TAG_VAR, SweepReport};
use crate::sandbox::{Confinement, Unbuildable};
use crate::spawn::{self, Launch};

/// SIGTERM to SIGKILL. Stopping must finish well within the registry's `STOP_GRACE` (1 s),
/// which also has to cover the sweeps, [`KILL_DRAIN`] and a loaded machine's scheduling.
const KILL_GRACE: Duration = Duration::from_millis(400);
/// How long the pipes are read after the shell exited before leftovers are killed.
const EXIT_DRAIN: Duration = Duration::from_millis(200);
/// How long the pipes are read after the tree was killed: only a process that escaped the
/// sweep can still hold them open.
const KILL_DRAIN: Duration = Duration::from_millis(100);

const DESCRIPTION: &str = "Run a shell command with bash -c and return its output. \
The command runs in the session's working directory (or `cwd`), with stdin empty (/dev/null): \
interactive programs get no input, so pass everything through arguments or files. \
The content is stdout and stderr together, each in its own order, interleaved as their \
output arrived: lines written to both within moments of each other may appear out of order \
relative to each other; add `2>&1` to the command to get one stream in exactly the order \
written. Long output keeps \
its beginning and end with a marker saying how many bytes were left out in the middle; \
filter it (grep, head, tail) when you only need part of it. A non-zero exit code makes the \
call fail with error_type command_failed, still returning the output; metadata has exit_code, \
signal, output_bytes and truncated. When the command exits, times out or is canceled, every \
process it started is killed, background processes included: do not use it to start servers \
or daemons that must keep running. Give `timeout_ms` for commands that may take long. \
Unless the user turned it off, the command runs in a sandbox: it may write only inside the \
session's directories and its own /tmp, reach no network unless the user allowed it, and read \
no credential store; a failure it caused says so in metadata.sandbox (likely_denied, hint). \
Run commands in the sandbox first. Only when one needs more (a package download or `git push` \
needs the network; a build may need to write a cache outside the project) call it again with \
`escalate` naming exactly that ({\"network\": true}, {\"writable\": [\"DIR\"]}, or, as a last \
resort, {\"unsandboxed\": true}) and a one-sentence `justification` for the user, who is asked \
to approve it.";

pub(crate) struct RunCommand;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Judged and applied by the pipeline, which runs the call in the sandbox it loosens
    /// (`permission::facts::escalation`); nothing for the tool to do.
    #[serde(default, rename = "escalate")]
    _escalate: Option<Value>,
    #[serde(default, rename = "justification")]
    _justification: Option<String>,
}

impl Tool for RunCommand {
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::CommandLine {
            line: "command",
            cwd: "cwd",
            env: "env",
        }
    }

    fn definition(&self) -> ToolDefinition {
        builtin_definition(
            "run_command",
            DESCRIPTION,
            json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The command line, run as bash -c COMMAND."
                    },
                    "cwd": {
                        "type": "string",
                        "minLength": 1,
                        "description": "Working directory, absolute or relative to the session's cwd. Default: the session's cwd."
                    },
                    "timeout_ms": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Stop the command after this many milliseconds (capped by the daemon). Default: the session's timeout."
                    },
                    "env": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Extra environment variables for this command only."
                    },
                    "escalate": {
                        "type": "object",
                        "properties": {
                            "network": {"type": "boolean", "description": "true: IP networking."},
                            "writable": {
                                "type": "array",
                                "items": {"type": "string", "minLength": 1},
                                "minItems": 1,
                                "maxItems": 16,
                                "description": "Existing directories the command must also write under."
                            },
                            "unsandboxed": {"type": "boolean", "description": "true: no sandbox at all; the user's config may forbid it."}
                        },
                        "additionalProperties": false,
                        "description": "What this one command needs beyond the sandbox. The user is asked, shown exactly this and the justification."
                    },
                    "justification": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 500,
                        "description": "With escalate: one sentence telling the user why the command needs it."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            Safety::SideEffect,
        )
    }

    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture {
        Box::pin(run_command(args, ctx))
    }

    fn requested_timeout_ms(&self, args: &Map<String, Value>) -> Option<u64> {
        args.get("timeout_ms").and_then(Value::as_u64)
    }
}

/// Why a running command was stopped from outside.
#[derive(Debug, Clone, Copy)]
pub(super) enum Halt {
    Canceled,
    Timeout,
}

/// Resolves when the call is canceled or its deadline passes (the registry turns the deadline
/// into a cancellation too; watching it here keeps the tool honest when run on its own).
pub(super) async fn halted(cancel: &CancellationToken, deadline: Instant) -> Halt {
    tokio::select! {
        () = cancel.cancelled() => Halt::Canceled,
        () = tokio::time::sleep_until(deadline) => Halt::Timeout,
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn run_command(mut args: Map<String, Value>, ctx: ToolContext) -> ToolOutcome {
    // The registry already turned it into the call's deadline.
    args.remove("timeout_ms");
    let args: Args = parse_args(args)?;
    check_arguments(&args)?;
    let cwd = working_directory(&ctx.env, args.cwd.as_deref())?;

    let confinement =
        Confinement::prepare(&ctx.env.sandbox, &ctx.env.roots, &cwd).map_err(|unbuildable| {
            match unbuildable {
                Unbuildable::Unavailable(why) => {
                    ToolFailure::new(ErrorType::SandboxUnavailable, why)
                }
                Unbuildable::Failed(why) => ToolFailure::new(ErrorType::InternalError, why),
            }
        })?;
    process_tree::ensure_subreaper();
    let tag = process_tree::new_run_tag();
    let cannot_start = |err: io::Error| {
        let sandboxed = if confinement.is_confined() {
            " in its sandbox"
        } else {
            ""
        };
        ToolFailure::new(
            ErrorType::IoError,
            format!("cannot start {BASH}{sandboxed} in {}: {err}", cwd.display()),
        )
    };
    let launch = shell_launch(&args, &cwd, &ctx.env, &tag, &confinement).map_err(cannot_start)?;
    let pipes = ShellPipes::new().map_err(cannot_start)?;
    let (mut child, known) = process_tree::spawn_known_as(
        confinement.is_confined(),
        || {
            spawn::spawn(
                &launch,
                confinement.child_setup(),
                &pipes.stdin,
                &pipes.stdout.1,
                &pipes.stderr.1,
            )
        },
        |child| Some(child.id()),
    )
    .map_err(cannot_start)?;
    // From here every socket call of the command that could reach a server waits for the
    // daemon's decision.
    let sockets = confinement.supervise(&mut child);
    // Known until reaped, which for a PID namespace's init may be after the call.
    child.hold_until_reaped(known);
    confinement.build_ahead();
    let shell_pid = child.id();
    let (stdout, stderr) = pipes.into_readers().map_err(cannot_start)?;
    let mut tree = TreeGuard(Some(ProcessTree::new(shell_pid, &tag)));
    let mut pump = OutputPump::new(
        Some(stdout),
        Some(stderr),
        ctx.env.max_output_bytes,
        ctx.live.clone(),
    );
    let halt_signal = || halted(&ctx.cancel, ctx.deadline);

    // The shell runs.
    let mut status: Option<io::Result<ExitStatus>> = None;
    let mut halt: Option<Halt> = None;
    loop {
        tokio::select! {
            stop = halt_signal() => {
                halt = Some(stop);
                break;
            }
            waited = child.wait() => {
                status = Some(waited);
                break;
            }
            (stream, read) = pump.read(), if pump.is_open() => {
                pump.accept(stream, read, &ctx).await;
            }
        }
    }

    // The shell exited: take what is still in the pipes, but not from a background process
    // that holds them open and keeps writing.
    if halt.is_none() {
        let drain_ends = Instant::now() + EXIT_DRAIN;
        while pump.is_open() {
            tokio::select! {
                stop = halt_signal() => {
                    halt = Some(stop);
                    break;
                }
                () = tokio::time::sleep_until(drain_ends) => break,
                (stream, read) = pump.read() => pump.accept(stream, read, &ctx).await,
            }
        }
    }

    // Kill whatever is left of the tree, reading meanwhile: killed processes may still write,
    // and a writer blocked on a full pipe must not stall its own death.
    // A PID namespace whose init found nothing left after the shell ends with the init.
    if child.namespace_emptied() {
        tree.forget();
    }
    let mut sweep = std::pin::pin!(tree.terminate(KILL_GRACE));
    let mut swept: Option<SweepReport> = None;
    let mut drain_ends: Option<Instant> = None;
    while swept.is_none() || status.is_none() || pump.is_open() {
        tokio::select! {
            report = &mut sweep, if swept.is_none() => {
                swept = Some(report);
                drain_ends = Some(Instant::now() + KILL_DRAIN);
            }
            waited = child.wait(), if status.is_none() => status = Some(waited),
            () = sleep_until_some(drain_ends) => break,
            (stream, read) = pump.read(), if pump.is_open() => {
                pump.accept(stream, read, &ctx).await;
            }
        }
    }
    let swept = swept.unwrap_or_default();

    let output_bytes = pump.total_bytes;
    let (content, truncated) = pump.finish();
    let status = status.and_then(|waited| match waited {
        Ok(status) => Some(status),
        Err(err) => {
            tracing::warn!(%err, "cannot wait for a command's shell");
            None
        }
    });
    let mut metadata = Map::new();
    metadata.insert(
        "exit_code".into(),
        json!(status.and_then(|status| status.code())),
    );
    metadata.insert(
        "signal".into(),
        json!(status.and_then(|status| status.signal())),
    );
    metadata.insert("output_bytes".into(), json!(output_bytes));
    metadata.insert("truncated".into(), json!(truncated));
    if halt.is_none() && swept.signaled > 0 {
        metadata.insert("killed_background_processes".into(), json!(swept.signaled));
    }
    let failed = halt.is_none() && !status.is_some_and(|status| status.success());
    let refused = sockets.map(|sockets| sockets.refused()).unwrap_or_default();
    let denial_hint = failed
        .then(|| confinement.denial_hint(&content, &refused))
        .flatten();
    let removed = confinement.undo_forbidden_creations();
    metadata.insert(
        "sandbox".into(),
        confinement.metadata(denial_hint.as_deref(), &removed, &refused),
    );

    let failure = match (halt, status) {
        (Some(Halt::Canceled), _) => Some((
            ErrorType::Canceled,
            "the command was canceled; all its processes were killed".to_owned(),
        )),
        (Some(Halt::Timeout), _) => Some((
            ErrorType::Timeout,
            "the command timed out; all its processes were killed".to_owned(),
        )),
        (None, Some(status)) if status.success() => None,
        (None, Some(status)) => Some((
            ErrorType::CommandFailed,
            match &denial_hint {
                Some(hint) => format!("{}; {hint}", exit_message(status)),
                None => exit_message(status),
            },
        )),
        (None, None) => Some((
            ErrorType::CommandFailed,
            "the command's exit status could not be read".to_owned(),
        )),
    };
    match failure {
        None => Ok(ToolSuccess { content, metadata }),
        Some((error_type, message)) => Err(ToolFailure {
            error_type,
            message,
            content,
            metadata,
        }),
    }
}

fn exit_message(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("the command exited with code {code}"),
        (None, Some(number)) => {
            let name = nix::sys::signal::Signal::try_from(number)
                .map(|signal| format!(" ({})", signal.as_str()))
                .unwrap_or_default();
            format!("the command was killed by signal {number}{name}")
        }
        (None, None) => format!("the command ended abnormally ({status})"),
    }
}

/// What the schema cannot say: no NUL bytes anywhere (they cannot reach `execve`), and
/// environment names that are names.
fn check_arguments(args: &Args) -> Result<(), ToolFailure> {
    if args.command.contains('\0') {
        return Err(ToolFailure::invalid_arguments(
            "command contains a NUL byte, which no shell can receive",
        ));
    }
    for (name, value) in &args.env {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(ToolFailure::invalid_arguments(format!(
                "env name {name:?} is not a valid variable name (it must be non-empty, without '=' or NUL)"
            )));
        }
        if value.contains('\0') {
            return Err(ToolFailure::invalid_arguments(format!(
                "env value of {name} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

/// The directory a command runs in: the call's `cwd` made absolute against the session's, or
/// the session's; what an approval's preview shows as its `cwd`.
pub(crate) fn run_directory(env: &Env, requested: Option<&str>) -> PathBuf {
    match requested {
        Some(raw) => paths::absolute(raw, &env.cwd),
        None => env.cwd.clone(),
    }
}

/// The call's [`run_directory`], which must be an existing directory.
fn working_directory(env: &Env, requested: Option<&str>) -> Result<PathBuf, ToolFailure> {
    let cwd = run_directory(env, requested);
    match std::fs::metadata(&cwd) {
        Ok(meta) if meta.is_dir() => Ok(cwd),
        Ok(_) => Err(ToolFailure::invalid_arguments(format!(
            "cwd {} is not a directory; give a directory to run the command in",
            cwd.display()
        ))),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Err(ToolFailure::new(
            ErrorType::NotFound,
            format!(
                "the working directory {} does not exist; give an existing directory as cwd",
                cwd.display()
            ),
        )),
        Err(err) => Err(ToolFailure::io(&cwd, "enter", &err)),
    }
}

use crate::spawn::SHELL as BASH;

/// Variables bash reads at start that would run code or change how it reads the line before
/// the line runs; no command gets them, from the daemon, the session or the call.
fn shell_reads_it(name: &[u8]) -> bool {
    name.starts_with(b"BASH_FUNC_")
        || matches!(
            name,
            b"BASH_ENV" | b"ENV" | b"SHELLOPTS" | b"BASHOPTS" | b"BASH_COMPAT" | b"POSIXLY_CORRECT"
        )
}

/// The shell's program, arguments, environment and working directory.
fn shell_launch(
    args: &Args,
    cwd: &Path,
    env: &Env,
    tag: &str,
    confinement: &Confinement,
) -> io::Result<Launch> {
    let passed = |(name, _): &(&String, &String)| !shell_reads_it(name.as_bytes());
    let given = |(name, value): (&String, &String)| (OsString::from(name), OsString::from(value));
    let inherited = process_tree::inherited_env().filter(|(name, value)| {
        !shell_reads_it(name.as_bytes())
            && !confinement.withholds_variable(name.as_bytes(), value.as_bytes())
    });
    // Later entries replace earlier ones.
    let variables = inherited
        .chain([(OsString::from("PWD"), cwd.as_os_str().to_owned())])
        .chain(env.command_env.iter().filter(passed).map(given))
        .chain(args.env.iter().filter(passed).map(given))
        // The temp directory the sandbox gives: the session's own `/tmp`, or a call's own.
        .chain(
            confinement
                .tmpdir()
                .map(|tmp| (OsString::from("TMPDIR"), tmp.as_os_str().to_owned())),
        )
        .chain([(OsString::from(RUN_TAG_VAR), OsString::from(tag))]);
    let shell_args = ["--noprofile", "--norc", "-c"]
        .into_iter()
        .map(OsStr::new)
        .chain([OsStr::new(&args.command)]);
    Launch::new(Path::new(BASH), shell_args, variables, cwd)
}

/// The shell's stdin (`/dev/null`) and the two pipes its output comes through, every
/// descriptor close-on-exec (the child's copies on 0, 1 and 2 are not).
struct ShellPipes {
    stdin: OwnedFd,
    stdout: (OwnedFd, OwnedFd),
    stderr: (OwnedFd, OwnedFd),
}

impl ShellPipes {
    fn new() -> io::Result<Self> {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
        Ok(Self {
            stdin: OwnedFd::from(std::fs::File::open("/dev/null")?),
            stdout: pipe()?,
            stderr: pipe()?,
        })
    }

    /// The read ends, for the runtime; the write ends are closed here, so that the pipes end
    /// when the command's processes have all closed theirs.
    fn into_readers(self) -> io::Result<(pipe::Receiver, pipe::Receiver)> {
        Ok((
            pipe::Receiver::from_owned_fd(self.stdout.0)?,
            pipe::Receiver::from_owned_fd(self.stderr.0)?,
        ))
    }
}

/// Owns the call's process tree until it has been killed: if the tool's future is dropped
/// before that (the registry gave up on it, the runtime shuts down), the kill still happens.
struct TreeGuard(Option<ProcessTree>);

impl TreeGuard {
    /// Nothing of the tree can be left: there is nothing to kill.
    fn forget(&mut self) {
        self.0 = None;
    }

    /// Kills the tree on a blocking thread (the sweep sleeps between rounds). The kill runs to
    /// its end even if this future is dropped. When two system calls show that nothing can be
    /// left (the usual end of a command), that is all, without the thread hand-off.
    async fn terminate(&mut self, grace: Duration) -> SweepReport {
        let Some(mut tree) = self.0.take() else {
            return SweepReport::default();
        };
        if tree.nothing_can_be_left() {
            return SweepReport::default();
        }
        match tokio::task::spawn_blocking(move || tree.terminate(grace)).await {
            Ok(report) => report,
            Err(err) => {
                tracing::error!(%err, "the process-tree sweep failed");
                SweepReport::default()
            }
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        if let Some(mut tree) = self.0.take() {
            let spawned = std::thread::Builder::new()
                .name("toold-tree-kill".into())
                .spawn(move || tree.terminate(KILL_GRACE));
            if let Err(err) = spawned {
                tracing::error!(%err, "cannot start a thread to kill a dropped command's processes");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_compiles_and_refuses_unknown_arguments() {
        let schema = RunCommand.definition().input_schema;
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&json!({"command": "true"})));
        assert!(validator.is_valid(
            &json!({"command": "true", "cwd": "sub", "timeout_ms": 5, "env": {"A": "b"}})
        ));
        assert!(!validator.is_valid(&json!({"command": "true", "shell": "bash"})));
        assert!(!validator.is_valid(&json!({"cwd": "sub"})));
        assert!(!validator.is_valid(&json!({"command": "true", "env": {"A": 1}})));
        assert!(!validator.is_valid(&json!({"command": "true", "timeout_ms": -1})));
    }

    #[test]
    fn names_the_signal_that_killed_a_command() {
        let killed = ExitStatus::from_raw(9);
        assert_eq!(
            exit_message(killed),
            "the command was killed by signal 9 (SIGKILL)"
        );
        let failed = ExitStatus::from_raw(3 << 8);
        assert_eq!(exit_message(failed), "the command exited with code 3");
    }
}
