//! Gathers what the permission engine judges: path arguments resolved on disk and command lines
//! analysed. The IO lives here so that `evaluate` stays pure.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{CallFacts, CommandFacts, FILE_TOOLS, HookVerdict};
use crate::env::Env;
use crate::paths::{self, ResolvedPath};
use crate::shell::{self, CommandLine};
use crate::tools::ResolvedCall;

/// The judged path arguments of a call: a file tool's `path` (the cwd when absent); for
/// `run_command`, its `cwd` argument when given. Other tools have none.
pub fn judged_paths(tool: &str, arguments: &Map<String, Value>, env: &Env) -> Vec<ResolvedPath> {
    let argument = |name: &str| arguments.get(name).and_then(Value::as_str);
    if FILE_TOOLS.contains(&tool) {
        return vec![env.resolve_path(argument("path").unwrap_or("."))];
    }
    if tool == "run_command" {
        return argument("cwd")
            .map(|cwd| env.resolve_path(cwd))
            .into_iter()
            .collect();
    }
    Vec::new()
}

/// The line of a `run_command` call; other tools have none.
pub fn command_line<'a>(tool: &str, arguments: &'a Map<String, Value>) -> Option<&'a str> {
    if tool != "run_command" {
        return None;
    }
    arguments.get("command").and_then(Value::as_str)
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
    let run_dir = match arguments.get("cwd").and_then(Value::as_str) {
        Some(cwd) => paths::normalize_lexically(&paths::absolute(cwd, &env.cwd)),
        None => env.cwd.clone(),
    };
    let written = analysis
        .written_paths
        .iter()
        .map(|target| paths::resolve(target, Path::new(&run_dir), &env.roots))
        .collect();
    Some(CommandFacts {
        line: line.to_owned(),
        analysis,
        written,
    })
}

/// Gathers the facts of a resolved call and hands them to `judge` (the engine, or one of its
/// parts). `analysed` is the analysis of the call's `run_command` line, when it has one.
pub fn with_facts<T>(
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
pub fn with_facts_and_paths<T>(
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
