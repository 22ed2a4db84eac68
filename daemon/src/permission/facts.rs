//! Gathers what the permission engine judges: path arguments resolved on disk and command lines
//! analysed. The IO lives here so that `evaluate` stays pure.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use toold_protocol::SandboxMode;

use super::escalation::Loosening;
use super::{CallFacts, CommandFacts, HookVerdict};
use crate::env::Env;
use crate::paths::{self, ResolvedPath};
use crate::shell::{self, CommandLine};
use crate::tools::{JudgedArguments, ResolvedCall, judged_arguments};

/// The judged path arguments of a call, as its tool declares them
/// ([`JudgedArguments`]): a file tool's path (the cwd when absent); for a command line, its
/// working directory when given. Other tools have none. The path a file tool writes says
/// whether writing it makes code run ([`paths::makes_code_run`]).
pub(crate) fn judged_paths(
    tool: &str,
    arguments: &Map<String, Value>,
    env: &Env,
) -> Vec<ResolvedPath> {
    let argument = |name: &str| arguments.get(name).and_then(Value::as_str);
    match judged_arguments(tool) {
        JudgedArguments::Path {
            argument: name,
            writes,
            ..
        } => {
            let mut path = env.resolve_path(argument(name).unwrap_or("."));
            if writes {
                path.makes_code_run =
                    paths::makes_code_run(&path, &git_dirs(env)) || in_places_git_runs(&path, env);
            }
            vec![path]
        }
        JudgedArguments::CommandLine { cwd, .. } => argument(cwd)
            .map(|cwd| env.resolve_path(cwd))
            .into_iter()
            .collect(),
        JudgedArguments::ByName => Vec::new(),
    }
}

/// The command line of a call whose tool takes one; other tools have none.
pub fn command_line<'a>(tool: &str, arguments: &'a Map<String, Value>) -> Option<&'a str> {
    match judged_arguments(tool) {
        JudgedArguments::CommandLine { line, .. } => arguments.get(line).and_then(Value::as_str),
        _ => None,
    }
}

/// A `run_command` line and its analysis, made before the call is judged: the daemon analyses
/// lines in its parser workers ([`crate::shell::isolated`]), away from its own threads.
#[derive(Debug, Clone)]
pub struct AnalysedLine {
    pub line: String,
    pub analysis: Arc<CommandLine>,
}

impl AnalysedLine {
    /// Analysed on the calling thread: for tests, benchmarks and fuzzing, never for the
    /// daemon's untrusted lines.
    pub fn here(line: &str) -> Self {
        Self {
            line: line.to_owned(),
            analysis: Arc::new(shell::analyze(line)),
        }
    }
}

/// For `run_command`: the line's analysis, and the files its redirections write judged against
/// the roots from the directory the command runs in. An analysis of another line (or none) makes
/// the line unreadable, so that a missed analysis asks instead of allowing.
pub fn command_facts(
    tool: &str,
    arguments: &Map<String, Value>,
    env: &Env,
    analysed: Option<&AnalysedLine>,
) -> Option<CommandFacts> {
    let line = command_line(tool, arguments)?;
    let analysis = match analysed {
        Some(analysed) if analysed.line == line => analysed.analysis.clone(),
        _ => Arc::new(CommandLine::unreadable(
            "the line was not analysed before it was judged",
        )),
    };
    let JudgedArguments::CommandLine {
        cwd: cwd_name,
        env: env_name,
        ..
    } = judged_arguments(tool)
    else {
        return None;
    };
    let cwd_argument = arguments.get(cwd_name).and_then(Value::as_str);
    let run_dir = run_dir(cwd_argument, env);
    let call_env = call_env(arguments, env_name);
    // `~` is the home of the command's environment, which the session or the call may set.
    let home = call_env
        .get("HOME")
        .or_else(|| env.command_env.get("HOME"))
        .map(String::as_str);
    let judge =
        |target: &String| paths::resolve(&with_home(target, home), Path::new(&run_dir), &env.roots);
    let git_dirs = if analysis.written_paths.is_empty() {
        Vec::new()
    } else {
        git_dirs(env)
    };
    let written: Vec<ResolvedPath> = analysis
        .written_paths
        .iter()
        .map(|target| {
            let mut path = judge(target);
            path.makes_code_run =
                paths::makes_code_run(&path, &git_dirs) || in_places_git_runs(&path, env);
            path
        })
        .collect();
    let mut read: Vec<ResolvedPath> = analysis.read_paths.iter().map(judge).collect();
    // The call's `env` (a `PATH`, a `GIT_CONFIG_*`) could make a listed program another.
    let known_safe = if call_env.is_empty() {
        known_safe_reads(&analysis, &written, &|target| judge(&target.to_owned()))
    } else {
        None
    };
    // What a known-safe command reads is judged as `read_file` would be: a deny rule of the
    // file denies the line.
    let known_safe = known_safe.map(|reads| {
        read.extend(reads.files);
        reads.tree
    });
    let (escalation, escalation_refused) = match escalation(arguments, env, Path::new(&run_dir)) {
        Ok(escalation) => (escalation, None),
        Err(why) => (None, Some(why)),
    };
    Some(CommandFacts {
        line: line.to_owned(),
        env: call_env
            .iter()
            .map(|(name, value)| format!("{name}={}", super::shell_quoted(value)))
            .collect(),
        cwd: cwd_argument.map(|cwd| paths::resolve(cwd, &env.cwd, &env.roots)),
        analysis,
        written,
        read,
        escalation,
        escalation_refused,
        known_safe,
    })
}

/// What the commands of a known-safe line read.
struct KnownSafeReads {
    /// The files and directories they name, judged.
    files: Vec<ResolvedPath>,
    /// Whether one of them reads a tree (a directory's files, a repository): what it shows
    /// could be a file a `read_file` deny rule covers, which no path of the line names.
    tree: bool,
}

/// Programs of the known-safe list that read a directory's files when given one (or the
/// working directory when given none), or a repository's.
const TREE_READERS: [&str; 8] = ["find", "rg", "grep", "egrep", "fgrep", "git", "du", "tree"];

/// When every command of the line is on the built-in list of read-only commands
/// ([`super::known_safe`]) and reads only inside the roots — nothing nested (a substitution),
/// opaque, hidden or written (a redirection), each command's words plain, every file it names
/// inside the roots in both its forms (resolved from where the command runs) — what it reads.
fn known_safe_reads(
    analysis: &CommandLine,
    written: &[ResolvedPath],
    judge: &dyn Fn(&str) -> ResolvedPath,
) -> Option<KnownSafeReads> {
    if analysis.unreadable.is_some()
        || !analysis.opaque.is_empty()
        || !analysis.hidden_code.is_empty()
        || !written.is_empty()
        || analysis.commands.is_empty()
    {
        return None;
    }
    let mut reads = KnownSafeReads {
        files: Vec::new(),
        tree: false,
    };
    for found in &analysis.commands {
        if found.nested {
            return None;
        }
        let named = super::known_safe::known_safe(&found.plain_words)?;
        let program = found
            .plain_words
            .first()
            .map_or("", |word| word.rsplit('/').next().unwrap_or(word));
        let files: Vec<ResolvedPath> = named.iter().map(|path| judge(path)).collect();
        if !files.iter().all(ResolvedPath::inside_roots) {
            return None;
        }
        // `diff DIR DIR` reads the files of both, through any link among them, which no path
        // of the line names.
        if program == "diff" && files.iter().any(|file| file.resolved.is_dir()) {
            return None;
        }
        reads.tree |=
            TREE_READERS.contains(&program) || files.iter().any(|file| file.resolved.is_dir());
        reads.files.extend(files);
    }
    Some(reads)
}

/// The directory a command line runs in: its `cwd` argument from the session's cwd, or that.
fn run_dir(cwd_argument: Option<&str>, env: &Env) -> std::path::PathBuf {
    match cwd_argument {
        Some(cwd) => paths::normalize_lexically(&paths::absolute(cwd, &env.cwd)),
        None => env.cwd.clone(),
    }
}

/// What a call of `tool` loosens of the session's sandbox, as [`command_facts`] judges it:
/// the pipeline runs an allowed call in the sandbox loosened by exactly this.
pub(crate) fn call_escalation(
    tool: &str,
    arguments: &Map<String, Value>,
    env: &Env,
) -> Option<Loosening> {
    let JudgedArguments::CommandLine { cwd, .. } = judged_arguments(tool) else {
        return None;
    };
    let cwd_argument = arguments.get(cwd).and_then(Value::as_str);
    escalation(arguments, env, &run_dir(cwd_argument, env))
        .ok()
        .flatten()
}

/// What a `run_command` call's `escalate` loosens beyond the session's sandbox: `None` when it
/// asks for nothing the sandbox does not already give (no sandbox, the network already on, a
/// directory it may already write). `writable` directories are taken from the directory the
/// command runs in and resolved, so the sandbox opens the directory the approver was shown.
/// An error says why it cannot be granted at all.
pub(crate) fn escalation(
    arguments: &Map<String, Value>,
    env: &Env,
    run_dir: &Path,
) -> Result<Option<Loosening>, String> {
    let Some(asked) = arguments.get(ESCALATE).and_then(Value::as_object) else {
        return Ok(None);
    };
    let sandbox = &env.sandbox;
    if sandbox.settings.mode == SandboxMode::Off {
        return Ok(None);
    }
    let flag = |name: &str| asked.get(name).and_then(Value::as_bool).unwrap_or(false);
    if flag("unsandboxed") {
        if !sandbox.allow_unsandboxed {
            return Err(
                "the command asks to run unsandboxed, which the user's config forbids \
                        ([sandbox] allow_unsandboxed = false): run it inside the sandbox, ask \
                        only for the network or a directory it must write (escalate \
                        {\"network\": true} or {\"writable\": [DIR]}), or ask the user to run it"
                    .to_owned(),
            );
        }
        return Ok(Some(Loosening {
            unsandboxed: true,
            ..Loosening::default()
        }));
    }
    let mut loosening = Loosening {
        network: flag("network") && !sandbox.settings.network,
        ..Loosening::default()
    };
    let dirs = asked.get("writable").and_then(Value::as_array);
    for dir in dirs.into_iter().flatten().filter_map(Value::as_str) {
        let path = paths::resolve(dir, run_dir, &env.roots);
        // The directory is written in grants and rules as ` with writable=DIR`: a name that
        // could read as more of that text is refused, never quoted into ambiguity.
        if paths::exact_text(&path.resolved).contains(['\'', ')', ',', '\n']) {
            return Err(format!(
                "escalate names {dir} as writable, whose path holds a quote, a parenthesis, a \
                 comma or a newline: name a directory without them"
            ));
        }
        if !path.resolved.is_dir() {
            return Err(format!(
                "escalate names {dir} as writable, which is not a directory: name an existing \
                 directory (the parent of one the command makes)"
            ));
        }
        let writable_now = sandbox.settings.mode == SandboxMode::WorkspaceWrite
            && env
                .roots
                .iter()
                .chain(sandbox.writable.iter())
                .any(|place| path.resolved.starts_with(place));
        if !writable_now && !loosening.writable.contains(&path.resolved) {
            loosening.writable.push(path.resolved);
        }
    }
    loosening.writable.sort();
    Ok((!loosening.is_empty()).then_some(loosening))
}

/// `run_command`'s argument that asks to loosen the sandbox.
pub(crate) const ESCALATE: &str = "escalate";

/// Whether `path` (either form) lies where the configs of the session's repositories make
/// git run or read code: the hooks directory `core.hooksPath` names (husky's `.husky/_`), a
/// file `include.path` names ([`crate::git_config`]).
fn in_places_git_runs(path: &paths::ResolvedPath, env: &Env) -> bool {
    let mut dirs: Vec<&Path> = vec![&env.cwd];
    dirs.extend(env.roots.iter().map(|root| root.as_path()));
    let places = crate::git_config::named_for(&dirs);
    [&path.lexical, &path.resolved].into_iter().any(|form| {
        places
            .iter()
            .any(|place| form.starts_with(place) || place.starts_with(form))
    })
}

/// The git directories `.git` files name for the session's repositories.
fn git_dirs(env: &Env) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<&Path> = vec![&env.cwd];
    dirs.extend(env.roots.iter().map(|root| root.as_path()));
    paths::git_dirs_named_by_files(&dirs)
}

/// A `run_command` call's `env` argument, sorted by name (the schema makes every value a
/// string).
fn call_env<'a>(
    arguments: &'a Map<String, Value>,
    env_name: &str,
) -> std::collections::BTreeMap<&'a str, String> {
    arguments
        .get(env_name)
        .and_then(Value::as_object)
        .map(|env| {
            env.iter()
                .map(|(name, value)| {
                    let text = value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned);
                    (name.as_str(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `~` and `~/…` expanded with `home` when the command's environment sets one; as written
/// otherwise (the daemon's own home then applies).
fn with_home(target: &str, home: Option<&str>) -> String {
    match (home, target.strip_prefix('~')) {
        (Some(home), Some(rest)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{home}/{}", rest.trim_start_matches('/'))
        }
        _ => target.to_owned(),
    }
}

/// Gathers the facts of a resolved call and hands them to `judge` (the engine, or one of its
/// parts). `analysed` is the analysis of the call's `run_command` line, when it has one.
pub(crate) fn with_facts<T>(
    env: &Env,
    resolved: &ResolvedCall,
    analysed: Option<&AnalysedLine>,
    hook: HookVerdict,
    judge: impl FnOnce(&CallFacts<'_>) -> T,
) -> T {
    with_facts_and_paths(env, resolved, analysed, hook, judge).0
}

/// [`with_facts`], also handing back the path arguments as they were judged: the tool must act
/// on exactly these, never on a second resolution of the same strings.
pub(crate) fn with_facts_and_paths<T>(
    env: &Env,
    resolved: &ResolvedCall,
    analysed: Option<&AnalysedLine>,
    hook: HookVerdict,
    judge: impl FnOnce(&CallFacts<'_>) -> T,
) -> (T, Vec<ResolvedPath>) {
    let definition = resolved.definition();
    let paths = judged_paths(&definition.name, &resolved.arguments, env);
    let command = command_facts(&definition.name, &resolved.arguments, env, analysed);
    let judged = judge(&CallFacts {
        tool: &definition.name,
        safety: definition.safety,
        system: definition.system,
        arguments: &resolved.arguments,
        paths: &paths,
        command: command.as_ref(),
        hook,
    });
    (judged, paths)
}
