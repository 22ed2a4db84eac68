//! PreToolUse and PostToolUse hooks (docs/protocol.md section 8): programs from the config and
//! connections that declared `hooks`, all of an event's hooks in parallel, the strictest answer
//! winning. Fail-closed: a PreToolUse hook that errors, times out, answers junk or disappears
//! blocks the call. PostToolUse failures are logged and change nothing.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toold_protocol::{
    HookEvent, HookProgramInput, PostToolUseAnswer, PostToolUseParams, PreToolUseAnswer,
    PreToolUseDecision, PreToolUseParams,
};

use crate::process_tree::{self, ProcessTree};

/// The most of a hook program's stdout or stderr that is kept; the rest is read and dropped.
const MAX_HOOK_OUTPUT: usize = 1024 * 1024;

/// How long a hook program's process tree gets to exit after SIGTERM.
const HOOK_KILL_GRACE: Duration = Duration::from_millis(200);

/// A hook program from the config.
#[derive(Debug, Clone)]
pub struct ConfiguredHook {
    pub event: HookEvent,
    /// Which tools it applies to; `None` is every tool.
    pub matcher: Option<Regex>,
    /// argv, run without a shell.
    pub command: Vec<String>,
    /// `None`: the config's `hook_timeout_ms`.
    pub timeout: Option<Duration>,
}

impl ConfiguredHook {
    /// Whether `other` is the same hook (a matcher is compared by its pattern).
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        self.event == other.event
            && self.command == other.command
            && self.timeout == other.timeout
            && self.matcher.as_ref().map(Regex::as_str) == other.matcher.as_ref().map(Regex::as_str)
    }

    fn applies_to(&self, event: HookEvent, tool: &str) -> bool {
        self.event == event
            && self
                .matcher
                .as_ref()
                .is_none_or(|matcher| matcher.is_match(tool))
    }

    fn name(&self) -> String {
        self.command.first().cloned().unwrap_or_default()
    }
}

/// A boxed hook future; dropping it withdraws the request.
pub type HookFuture<T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'static>>;

/// A connection that declared `hooks`; the error is why its answer is unusable.
pub trait ClientHooks: Send + Sync {
    /// Whether it declared this event.
    fn handles(&self, event: HookEvent) -> bool;
    /// Who it is, for a person: `client NAME (connection N)`.
    fn describe(&self) -> String;
    fn pre_tool_use(&self, params: PreToolUseParams) -> HookFuture<PreToolUseAnswer>;
    fn post_tool_use(&self, params: PostToolUseParams) -> HookFuture<PostToolUseAnswer>;
}

/// Every hook of a session for one event.
pub(crate) struct HookSet<'a> {
    pub configured: &'a [ConfiguredHook],
    pub clients: &'a [Arc<dyn ClientHooks>],
    /// The config's `hook_timeout_ms`: client hooks, and programs without their own timeout.
    pub timeout: Duration,
    /// The session's working directory, which hook programs are told (they run in
    /// [`working_dir`]).
    pub cwd: &'a Path,
}

/// The PreToolUse verdict: the strictest decision, its reason, and replacement arguments.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreHookVerdict {
    pub decision: PreToolUseDecision,
    pub reason: Option<String>,
    /// From the first hook (config order, then connections) that replaced them.
    pub arguments: Option<Map<String, Value>>,
}

impl PreHookVerdict {
    fn proceed() -> Self {
        Self {
            decision: PreToolUseDecision::Continue,
            reason: None,
            arguments: None,
        }
    }
}

impl HookSet<'_> {
    /// Whether any hook would run for `event` on `tool`.
    pub(crate) fn any_for(&self, event: HookEvent, tool: &str) -> bool {
        self.configured
            .iter()
            .any(|hook| hook.applies_to(event, tool))
            || self.clients.iter().any(|client| client.handles(event))
    }

    /// The hooks that would run for a call of `tool`, each as `EVENT: WHO` (a program's
    /// command line, or a connection), configured ones first.
    pub(crate) fn names_for(&self, tool: &str) -> Vec<String> {
        let mut names = Vec::new();
        for event in [HookEvent::PreToolUse, HookEvent::PostToolUse] {
            names.extend(
                self.configured
                    .iter()
                    .filter(|hook| hook.applies_to(event, tool))
                    .map(|hook| format!("{}: {}", event.as_str(), hook.command.join(" "))),
            );
            names.extend(
                self.clients
                    .iter()
                    .filter(|client| client.handles(event))
                    .map(|client| format!("{}: {}", event.as_str(), client.describe())),
            );
        }
        names
    }

    /// Runs every PreToolUse hook for the call in parallel; a failure is a `block` naming it.
    pub(crate) async fn pre_tool_use(&self, params: &PreToolUseParams) -> PreHookVerdict {
        strictest(self.fan_out::<PreToolUse>(params, &params.call.name).await)
    }

    /// Runs every PostToolUse hook in parallel and joins their `additional_context`s; failures
    /// are logged and otherwise ignored.
    pub(crate) async fn post_tool_use(&self, params: &PostToolUseParams) -> Option<String> {
        let tool = params.call.name.as_str();
        let mut texts = Vec::new();
        for (_, name, answer) in self.fan_out::<PostToolUse>(params, tool).await {
            match answer {
                Ok(answer) => texts.extend(answer.additional_context),
                Err(why) => {
                    tracing::warn!(hook = %name, tool, %why, "a PostToolUse hook failed; the result stands")
                }
            }
        }
        texts.retain(|text| !text.is_empty());
        (!texts.is_empty()).then(|| texts.join("\n"))
    }

    /// Runs every hook of event `E` that applies to `tool` in parallel: the config's programs,
    /// then the clients'. Each answer with its hook's place in that order and its name, in
    /// that order.
    async fn fan_out<E: HookKind>(
        &self,
        params: &E::Params,
        tool: &str,
    ) -> Vec<(usize, String, Result<E::Answer, String>)> {
        let mut answers = tokio::task::JoinSet::new();
        for (order, hook) in self
            .configured
            .iter()
            .filter(|hook| hook.applies_to(E::EVENT, tool))
            .enumerate()
        {
            let hook = hook.clone();
            let input = HookProgramInput {
                event: E::EVENT,
                cwd: crate::paths::exact_text(self.cwd).into_owned(),
                params: params.clone(),
            };
            let timeout = hook.timeout.unwrap_or(self.timeout);
            answers.spawn(async move {
                let answer = run_program(&hook.command, &input, timeout)
                    .await
                    .and_then(E::program_answer);
                (order, format!("hook program {}", hook.name()), answer)
            });
        }
        let offset = self.configured.len();
        for (order, client) in self
            .clients
            .iter()
            .filter(|client| client.handles(E::EVENT))
            .enumerate()
        {
            let request = E::ask(client.as_ref(), params.clone());
            let timeout = self.timeout;
            answers.spawn(async move {
                let answer = tokio::time::timeout(timeout, request)
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!("no answer within {} ms", timeout.as_millis()))
                    });
                (offset + order, "a client's hook".to_owned(), answer)
            });
        }
        let mut collected = Vec::new();
        while let Some(joined) = answers.join_next().await {
            collected.push(joined.unwrap_or_else(|err| {
                (
                    usize::MAX,
                    "a hook".to_owned(),
                    Err(format!("it failed internally: {err}")),
                )
            }));
        }
        collected.sort_by_key(|(order, _, _)| *order);
        collected
    }
}

/// A hook event as [`HookSet::fan_out`] runs it: what its hooks are given, what they answer,
/// how a program's output reads as an answer, how a client is asked.
trait HookKind {
    const EVENT: HookEvent;
    type Params: Serialize + Clone + Send + Sync + 'static;
    type Answer: Send + 'static;
    fn program_answer(output: ProgramOutput) -> Result<Self::Answer, String>;
    fn ask(client: &dyn ClientHooks, params: Self::Params) -> HookFuture<Self::Answer>;
}

enum PreToolUse {}

impl HookKind for PreToolUse {
    const EVENT: HookEvent = HookEvent::PreToolUse;
    type Params = PreToolUseParams;
    type Answer = PreToolUseAnswer;

    fn program_answer(output: ProgramOutput) -> Result<PreToolUseAnswer, String> {
        match output {
            ProgramOutput::Json(json) => parse_pre_answer(&json),
            ProgramOutput::Empty => Ok(PreToolUseAnswer::new(PreToolUseDecision::Continue)),
            ProgramOutput::Blocked(reason) => {
                let mut answer = PreToolUseAnswer::new(PreToolUseDecision::Block);
                answer.reason = Some(reason);
                Ok(answer)
            }
        }
    }

    fn ask(client: &dyn ClientHooks, params: PreToolUseParams) -> HookFuture<PreToolUseAnswer> {
        client.pre_tool_use(params)
    }
}

enum PostToolUse {}

impl HookKind for PostToolUse {
    const EVENT: HookEvent = HookEvent::PostToolUse;
    type Params = PostToolUseParams;
    type Answer = PostToolUseAnswer;

    fn program_answer(output: ProgramOutput) -> Result<PostToolUseAnswer, String> {
        match output {
            ProgramOutput::Json(json) => serde_json::from_str::<PostToolUseAnswer>(&json)
                .map_err(|err| format!("its answer is not a PostToolUse answer: {err}")),
            ProgramOutput::Empty => Ok(PostToolUseAnswer::default()),
            ProgramOutput::Blocked(reason) => Err(format!("it exited with 2: {reason}")),
        }
    }

    fn ask(client: &dyn ClientHooks, params: PostToolUseParams) -> HookFuture<PostToolUseAnswer> {
        client.post_tool_use(params)
    }
}

/// The strictest of the answers, failures counting as `block`: `block` > `ask` > `allow` >
/// `continue`. Reasons of the winning decision are joined.
fn strictest(answers: Vec<(usize, String, Result<PreToolUseAnswer, String>)>) -> PreHookVerdict {
    let mut verdict = PreHookVerdict::proceed();
    let mut reasons: Vec<String> = Vec::new();
    for (_, name, answer) in answers {
        let answer = answer.unwrap_or_else(|why| {
            let mut blocked = PreToolUseAnswer::new(PreToolUseDecision::Block);
            blocked.reason = Some(format!("{name} failed: {why}"));
            blocked
        });
        if verdict.arguments.is_none() && answer.decision != PreToolUseDecision::Block {
            verdict.arguments = answer.arguments;
        }
        if answer.decision > verdict.decision {
            verdict.decision = answer.decision;
            reasons.clear();
        }
        if answer.decision == verdict.decision {
            reasons.extend(answer.reason);
        }
    }
    verdict.reason = (!reasons.is_empty()).then(|| reasons.join("; "));
    verdict
}

fn parse_pre_answer(json: &str) -> Result<PreToolUseAnswer, String> {
    serde_json::from_str(json)
        .map_err(|err| format!("its answer is not a PreToolUse decision: {err}"))
}

/// What a hook program said, when it said something usable.
enum ProgramOutput {
    /// Exit 0 with output: a JSON decision to parse.
    Json(String),
    /// Exit 0 with nothing (whitespace) on stdout.
    Empty,
    /// Exit 2: block, with stderr as the reason.
    Blocked(String),
}

/// Where hook programs run: a directory of toold's own, set once at start
/// ([`run_hooks_in`]).
static WORKING_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes `dir` (empty, the user's alone) the directory every hook program runs in: one no
/// session can write (toold's state directory's `hooks`, which the sandbox and the file tools
/// protect), so that nothing a session wrote is found there — a `NAME.py` that `python3 -m
/// NAME` would load, a `./program`. The first call wins; the daemon makes it at start.
pub(crate) fn run_hooks_in(dir: PathBuf) -> std::io::Result<()> {
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir)?;
    }
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let _ = WORKING_DIR.set(dir);
    Ok(())
}

/// Where hook programs run: [`run_hooks_in`]'s directory, else `/`.
pub(crate) fn working_dir() -> &'static Path {
    WORKING_DIR.get().map_or(Path::new("/"), PathBuf::as_path)
}

/// Runs a hook program: the input as JSON on stdin, in its own process group, in
/// [`working_dir`], with the daemon's environment (never a session's `command_env`), with a
/// deadline after which its whole process tree is killed. Any exit but 0 and 2 is an error.
async fn run_program<P: Serialize>(
    argv: &[String],
    input: &HookProgramInput<P>,
    timeout: Duration,
) -> Result<ProgramOutput, String> {
    let (program, args) = argv.split_first().ok_or("the hook has an empty command")?;
    let stdin_json =
        serde_json::to_vec(input).map_err(|err| format!("cannot encode its input: {err}"))?;
    let tag = process_tree::new_run_tag();
    let mut command = process_tree::tagged_command(program, process_tree::inherited_env(), &tag);
    command.args(args).current_dir(working_dir());
    let (mut child, _known) =
        process_tree::spawn_known(|| command.spawn(), tokio::process::Child::id)
            .map_err(|err| format!("cannot start {program}: {err}"))?;
    let tree = child.id().map(|pid| ProcessTree::new(pid, &tag));
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let exchange = async {
        // A program that exits without reading its input is fine: ignore a broken pipe.
        if let Some(mut stdin) = stdin.take() {
            let _ = stdin.write_all(&stdin_json).await;
        }
        let (out, err, status) = tokio::join!(
            read_capped(stdout.as_mut()),
            read_capped(stderr.as_mut()),
            child.wait()
        );
        (out, err, status)
    };
    let outcome = tokio::time::timeout(timeout, exchange).await;
    // Whatever happened, nothing the hook started may outlive it.
    if let Some(mut tree) = tree {
        let _ = tokio::task::spawn_blocking(move || tree.terminate(HOOK_KILL_GRACE)).await;
    }
    let (stdout, stderr, status) = outcome
        .map_err(|_| format!("no answer within {} ms; it was killed", timeout.as_millis()))?;
    let status = status.map_err(|err| format!("cannot wait for it: {err}"))?;
    let stderr = String::from_utf8_lossy(&stderr.kept).trim().to_owned();
    // An answer past the cap is never read by its prefix: what follows the cut (a `block`
    // after a megabyte of padding) could be the decision.
    if stdout.over_cap && status.code() != Some(2) {
        return Err(format!(
            "its output passed the cap of {} bytes; a hook's answer must fit in it",
            MAX_HOOK_OUTPUT
        ));
    }
    match status.code() {
        Some(0) => {
            let stdout = String::from_utf8_lossy(&stdout.kept).trim().to_owned();
            Ok(if stdout.is_empty() {
                ProgramOutput::Empty
            } else {
                ProgramOutput::Json(stdout)
            })
        }
        Some(2) => Ok(ProgramOutput::Blocked(if stderr.is_empty() {
            "blocked by a hook".to_owned()
        } else {
            stderr
        })),
        Some(code) => Err(format!("it exited with {code}{}", describe_stderr(&stderr))),
        None => Err(format!(
            "it was killed by a signal{}",
            describe_stderr(&stderr)
        )),
    }
}

fn describe_stderr(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// What a hook program wrote to one pipe: at most `MAX_HOOK_OUTPUT` bytes, and whether it wrote
/// more (the pipe is still drained to its end, so that the program never blocks on it).
struct CappedOutput {
    kept: Vec<u8>,
    over_cap: bool,
}

/// Reads a pipe to its end, keeping at most `MAX_HOOK_OUTPUT` bytes.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(pipe: Option<&mut R>) -> CappedOutput {
    let mut output = CappedOutput {
        kept: Vec::new(),
        over_cap: false,
    };
    let Some(pipe) = pipe else { return output };
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => return output,
            Ok(read) => {
                let room = MAX_HOOK_OUTPUT.saturating_sub(output.kept.len());
                output.over_cap |= read > room;
                output.kept.extend_from_slice(&buffer[..read.min(room)]);
            }
        }
    }
}
