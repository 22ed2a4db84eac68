//! The tool runtime: the `Tool` trait every tool implements, what a running tool is given,
//! and the six builtin tools.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
pub use toold_protocol::OutputStream;
use toold_protocol::{ErrorType, Safety, ToolDefinition, ToolResult, ToolSource};

use crate::env::Env;
use crate::paths::ResolvedPath;

pub mod edit_file;
pub mod find_files;
pub mod preview;
pub(crate) mod read_file;
pub mod registry;
pub mod run_command;
pub mod search_code;
pub mod walk;
pub mod write_file;
pub(crate) mod write_journal;

pub use registry::{RegisterError, Registry};
pub(crate) use registry::{ResolvedCall, is_valid_tool_name};

/// What a tool returns: its output, or why it failed. The registry turns either into a
/// [`ToolResult`] carrying the tool's name and the call id.
pub type ToolOutcome = Result<ToolSuccess, ToolFailure>;

/// The future a tool's `run` returns. Owned (`'static`) so that the registry can drop it at any
/// point: that is how a tool that ignores cancellation is left behind.
pub type ToolFuture = Pin<Box<dyn Future<Output = ToolOutcome> + Send + 'static>>;

/// A tool, builtin or registered by a client.
pub trait Tool: Send + Sync + 'static {
    /// The definition the registry publishes; its `safety` is the tool's only safety.
    fn definition(&self) -> ToolDefinition;

    /// Runs the tool on arguments already validated against its input schema.
    ///
    /// When `ctx.cancel` fires (cancellation or the deadline), the tool should stop promptly and
    /// return a *failure* carrying whatever partial output it has (the registry replaces its
    /// error type with `timeout` or `canceled`; a success would be taken as the work having
    /// finished after all). The registry waits [`registry::STOP_GRACE`] for it, then leaves the
    /// tool behind.
    fn run(&self, args: Map<String, Value>, ctx: ToolContext) -> ToolFuture;

    /// A timeout the call itself asks for (only `run_command` has one); capped by the registry.
    fn requested_timeout_ms(&self, _args: &Map<String, Value>) -> Option<u64> {
        None
    }

    /// What the permission engine judges of the tool's calls besides its name.
    fn judged_arguments(&self) -> JudgedArguments {
        JudgedArguments::ByName
    }

    /// What a call would change, for its approval request: computed from the files as they
    /// are now by the code [`Tool::run`] changes them with, on the paths as judged (`judged`,
    /// found as [`ToolContext::resolve_path`] finds them), so that what is approved is what
    /// happens. Blocking IO: called off the async threads. `None`: the tool says nothing more
    /// than its arguments.
    fn preview(
        &self,
        _args: &Map<String, Value>,
        _judged: &[ResolvedPath],
        _env: &Env,
    ) -> Option<toold_protocol::Preview> {
        None
    }
}

/// What the permission engine judges of a tool's calls besides its name (docs/protocol.md
/// section 7), as the tool declares it: which argument rules match, and what the engine
/// resolves or analyses before it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgedArguments {
    /// Rules match arguments by name (`tool(name=pattern)`) or all of them as JSON: client
    /// tools, MCP tools.
    ByName,
    /// A path (`argument`; the session's directory when absent), resolved on disk and matched
    /// by path globs (`tool(pattern)`), and what the tool does there.
    Path {
        argument: &'static str,
        reads: Reads,
        /// Writes there: judged also for whether writing there makes code run.
        writes: bool,
        /// Names one file (a directory is no file of it), or a tree to walk.
        one_file: bool,
    },
    /// A shell line (`line`), analysed and matched command by command (`tool(pattern)`), run
    /// in `cwd` (a judged path when given) with `env` added to the environment of every
    /// command of the line.
    CommandLine {
        line: &'static str,
        cwd: &'static str,
        env: &'static str,
    },
}

/// What a tool shows of the files at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    Nothing,
    /// Their names (a listing).
    Names,
    /// Their contents, or lines of them.
    Contents,
}

impl JudgedArguments {
    pub(crate) fn takes_a_path(self) -> bool {
        matches!(self, Self::Path { .. })
    }

    /// Shows the contents of the one file its path names and writes nothing (`read_file`):
    /// what a command line reads is judged by such tools' rules.
    pub(crate) fn reads_one_file(self) -> bool {
        matches!(
            self,
            Self::Path {
                reads: Reads::Contents,
                writes: false,
                one_file: true,
                ..
            }
        )
    }

    /// Shows file contents (`read_file`, `edit_file`, `search_code`).
    pub(crate) fn shows_contents(self) -> bool {
        matches!(
            self,
            Self::Path {
                reads: Reads::Contents,
                ..
            }
        )
    }

    /// Shows file contents and writes nothing (`read_file`, `search_code`): a file such a tool
    /// is denied is hidden from every walk.
    pub(crate) fn only_shows_contents(self) -> bool {
        self.shows_contents() && !self.writes()
    }

    /// Writes at its path (`write_file`, `edit_file`): what a command line writes is judged by
    /// such tools' rules.
    pub(crate) fn writes(self) -> bool {
        matches!(self, Self::Path { writes: true, .. })
    }

    pub(crate) fn takes_a_command_line(self) -> bool {
        matches!(self, Self::CommandLine { .. })
    }
}

/// What the permission engine judges of calls of `tool`: a builtin's declaration
/// ([`Tool::judged_arguments`]); any other tool's arguments by name (client and MCP tools
/// cannot take a builtin's name).
pub(crate) fn judged_arguments(tool: &str) -> JudgedArguments {
    static BUILTINS: std::sync::OnceLock<Vec<(String, JudgedArguments)>> =
        std::sync::OnceLock::new();
    BUILTINS
        .get_or_init(|| {
            builtins()
                .iter()
                .map(|builtin| (builtin.definition().name, builtin.judged_arguments()))
                .collect()
        })
        .iter()
        .find(|(name, _)| name == tool)
        .map_or(JudgedArguments::ByName, |(_, judged)| *judged)
}

/// What the permission step decided that the tool acts on: the path arguments as judged (so
/// that a path is never resolved a second time), and the files its walks must not show.
#[derive(Clone, Default)]
pub(crate) struct Judged {
    pub paths: Arc<[ResolvedPath]>,
    pub hidden: Option<Arc<dyn HiddenPaths>>,
}

/// Files and directories that a walk must skip, as decided outside the tools (the permission
/// engine's deny rules): a hidden directory hides everything below it.
pub trait HiddenPaths: Send + Sync {
    /// Whether `path` (absolute, as the walk reached it) is hidden.
    fn hides(&self, path: &Path) -> bool;
}

/// Everything a running tool is given besides its arguments.
#[derive(Clone)]
pub struct ToolContext {
    pub call_id: String,
    /// The session and batch the call belongs to; `None` when a caller runs a tool outside any
    /// session (tests, benchmarks).
    pub origin: Option<CallOrigin>,
    pub env: Arc<Env>,
    /// The path arguments as the permission step judged them (empty when none did).
    pub judged: Arc<[ResolvedPath]>,
    /// What the walks of `find_files` and `search_code` must not show (deny rules cover it).
    pub hidden: Option<Arc<dyn HiddenPaths>>,
    /// Fires on cancellation and at the deadline.
    pub cancel: CancellationToken,
    /// When the call times out.
    pub deadline: Instant,
    /// Live output and progress, for tools that report as they go (the daemon turns them into
    /// `tool/output` and `tool/progress` events). Sending waits when the receiver lags: memory
    /// stays bounded.
    pub live: Option<mpsc::Sender<LiveUpdate>>,
    /// Rung by [`ToolContext::report_progress`]: progress restarts the call's timeout.
    pub progressed: Arc<Notify>,
}

impl ToolContext {
    /// Reports progress (a `tool/progress` event) and restarts the call's timeout, which
    /// counts from the last progress (a long call that keeps reporting is not cut off).
    /// Waits while the event listener lags, like live output.
    pub(crate) async fn report_progress(&self, progress: Progress) {
        self.progressed.notify_one();
        if let Some(live) = &self.live {
            let _ = live.send(LiveUpdate::Progress(progress)).await;
        }
    }

    /// A path argument resolved: as the permission step judged it, when it did, so that the tool
    /// acts on what was checked and never on a second resolution of the string (which a symlink
    /// swapped in between would redirect); else resolved now.
    pub(crate) fn resolve_path(&self, raw: &str) -> ResolvedPath {
        resolve_judged(&self.judged, &self.env, raw)
    }
}

/// [`ToolContext::resolve_path`] outside a run: an approval's preview finds its file so too.
pub(crate) fn resolve_judged(judged: &[ResolvedPath], env: &Env, raw: &str) -> ResolvedPath {
    judged
        .iter()
        .find(|judged| judged.raw == raw)
        .cloned()
        .unwrap_or_else(|| env.resolve_path(raw))
}

/// Which session and batch a call belongs to: client tools pass it on in `tool/invoke`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOrigin {
    pub session_id: Arc<str>,
    pub batch_id: Arc<str>,
}

/// What a tool reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveUpdate {
    /// Output as it comes (`tool/output`, up to `max_stream_bytes` a call).
    Output(OutputChunk),
    /// Progress (`tool/progress`).
    Progress(Progress),
}

/// A tool's progress: `progress` increases, towards `total` when known.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// One piece of live output, valid UTF-8 (invalid bytes replaced, characters never split).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    pub stream: OutputStream,
    pub text: String,
}

/// A tool's successful output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSuccess {
    pub content: String,
    pub metadata: Map<String, Value>,
}

impl ToolSuccess {
    pub fn new(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            metadata: Map::new(),
        }
    }

    pub(crate) fn with_meta(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }
}

/// Why a tool failed, with any content and metadata it still has to give.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    pub error_type: ErrorType,
    pub message: String,
    pub content: String,
    pub metadata: Map<String, Value>,
}

impl ToolFailure {
    pub fn new(error_type: ErrorType, message: impl Into<String>) -> Self {
        Self {
            error_type,
            message: message.into(),
            content: String::new(),
            metadata: Map::new(),
        }
    }

    pub(crate) fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InvalidArguments, message)
    }

    pub(crate) fn with_meta(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.to_owned(), value.into());
        self
    }

    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = content.into();
        self
    }

    /// An IO error on `path`, typed by its kind so that the model can react.
    pub(crate) fn io(path: &Path, action: &str, err: &io::Error) -> Self {
        let shown = path.display();
        if crate::judged_files::is_changed_path(err) {
            return Self::new(
                ErrorType::IoError,
                format!(
                    "cannot {action} {shown}: the path changed after it was checked (a symlink \
                     appeared on it); nothing was done, check the path again"
                ),
            );
        }
        match err.kind() {
            io::ErrorKind::NotFound => {
                Self::new(ErrorType::NotFound, format!("{shown} does not exist"))
            }
            io::ErrorKind::IsADirectory => Self::new(
                ErrorType::IsDirectory,
                format!("{shown} is a directory; use find_files to list it"),
            ),
            io::ErrorKind::PermissionDenied => Self::new(
                ErrorType::IoError,
                format!("cannot {action} {shown}: permission denied by the OS"),
            ),
            _ => Self::new(
                ErrorType::IoError,
                format!("cannot {action} {shown}: {err}"),
            ),
        }
    }

    /// Turns the failure into the wire result for `tool`.
    pub(crate) fn into_result(self, tool: &str) -> ToolResult {
        let mut result =
            ToolResult::failure(tool, self.error_type, self.message).with_content(self.content);
        result.metadata = self.metadata;
        result
    }
}

/// Decodes validated arguments into a tool's own argument struct. The schema has already
/// checked them, so a failure here is a gap between schema and struct, reported all the same.
pub(crate) fn parse_args<T: DeserializeOwned>(args: Map<String, Value>) -> Result<T, ToolFailure> {
    serde_json::from_value(Value::Object(args))
        .map_err(|err| ToolFailure::invalid_arguments(format!("bad arguments: {err}")))
}

/// Runs blocking filesystem work off the async threads. A panic inside `work` resumes in the
/// caller, so the registry reports it as `internal_error` like any other panic in a tool.
pub(crate) async fn blocking<T, F>(work: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        Err(err) => match err.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            // Blocking tasks cannot be aborted; only a runtime shutting down cancels them.
            Err(_) => panic!("the runtime shut down while the tool was running"),
        },
    }
}

/// A reader that fails once its call is stopped (canceled or past its deadline), so that
/// blocking work reading a large file ends with the call instead of running on unseen. The
/// token is looked at only after the first [`STOP_CHECK_AFTER_BYTES`]: it takes a lock that
/// the walker threads of a search would otherwise contend on for every small file (which the
/// walk's own per-file check covers).
pub(crate) struct StopReading<'a, R> {
    inner: R,
    stop: &'a CancellationToken,
    read: u64,
}

/// Bytes a [`StopReading`] reads before it looks at its token on every read.
pub(crate) const STOP_CHECK_AFTER_BYTES: u64 = 1024 * 1024;

impl<'a, R> StopReading<'a, R> {
    pub(crate) fn new(inner: R, stop: &'a CancellationToken) -> Self {
        Self {
            inner,
            stop,
            read: 0,
        }
    }
}

impl<R: std::io::Read> std::io::Read for StopReading<'_, R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        if self.read >= STOP_CHECK_AFTER_BYTES && self.stop.is_cancelled() {
            return Err(std::io::Error::other("the call was stopped"));
        }
        let read = self.inner.read(buffer)?;
        self.read += read as u64;
        Ok(read)
    }
}

/// The definition of a builtin tool: toold's own, with no timeout of its own, shown to models.
fn builtin_definition(
    name: &str,
    description: &str,
    input_schema: Value,
    safety: Safety,
) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
        safety,
        system: false,
        timeout_ms: None,
        source: ToolSource::Builtin,
    }
}

/// The six builtin tools, searching without a warm index (for their definitions, and
/// callers without a daemon).
pub(crate) fn builtins() -> Vec<Arc<dyn Tool>> {
    builtins_indexed(&Arc::new(crate::index::roots::Indexes::disabled()))
}

/// The six builtin tools, `find_files` and `search_code` using `indexes`.
pub(crate) fn builtins_indexed(indexes: &Arc<crate::index::roots::Indexes>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read_file::ReadFile),
        Arc::new(write_file::WriteFile),
        Arc::new(edit_file::EditFile),
        Arc::new(run_command::RunCommand),
        Arc::new(find_files::FindFiles {
            indexes: Arc::clone(indexes),
        }),
        Arc::new(search_code::SearchCode {
            indexes: Arc::clone(indexes),
        }),
    ]
}
