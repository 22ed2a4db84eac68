//! An approval request's `preview` (docs/protocol.md section 7): what the call will do, worked
//! out by the code that will do it. A file tool's change comes from the tool itself
//! (`Tool::preview`, on the paths as judged, off the async threads); a command's working
//! directory, simple commands and sandbox from what the pipeline runs it with: the analysis the
//! rules judged and the Env `env_for` gives the allowed call.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use toold_protocol::{CommandSandboxPreview, Escalation, Preview, SandboxMode};

use super::session::SessionState;
use crate::env::Env;
use crate::paths::ResolvedPath;
use crate::permission;
use crate::permission::facts::{AnalysedLine, command_facts};
use crate::tools::run_command::run_directory;
use crate::tools::{JudgedArguments, ResolvedCall, blocking, judged_arguments};

/// A call as it would run if approved as it is: its command line's analysis, the paths as
/// judged, the Env it runs in (its escalation applied), and what the request says it loosens.
pub(super) struct AsItWouldRun<'a> {
    pub(super) resolved: &'a ResolvedCall,
    pub(super) analysed: Option<&'a AnalysedLine>,
    pub(super) judged: &'a [ResolvedPath],
    pub(super) env: &'a Arc<Env>,
    pub(super) escalation: Option<&'a Escalation>,
}

/// The preview of a call asked about in a session whose state is `state`.
pub(super) async fn preview(state: &SessionState, call: AsItWouldRun<'_>) -> Option<Preview> {
    let AsItWouldRun {
        resolved,
        analysed,
        judged,
        env,
        escalation,
    } = call;
    let tool = &resolved.definition().name;
    match judged_arguments(tool) {
        JudgedArguments::CommandLine { cwd, .. } => {
            let facts = command_facts(tool, &resolved.arguments, &state.env, analysed)?;
            // The simple commands as `permissions/explain` lists them: each with the call's
            // `env` in front, as the rules saw it.
            let commands = permission::command_rules(tool, &facts, &state.policy)
                .into_iter()
                .map(|(text, _)| text)
                .collect();
            let requested = resolved.arguments.get(cwd).and_then(Value::as_str);
            Some(Preview::Command {
                cwd: run_directory(env, requested).display().to_string(),
                commands,
                sandbox: sandbox(env, escalation),
            })
        }
        JudgedArguments::Path { .. } | JudgedArguments::ByName => {
            let (resolved, judged, env) = (resolved.clone(), judged.to_vec(), Arc::clone(env));
            blocking(move || resolved.preview(&judged, &env)).await
        }
    }
}

/// The sandbox a command gets in `env`: its mode, its network, where it may write besides its
/// own temp directories (the places `Confinement::prepare` opens for writing).
fn sandbox(env: &Env, escalation: Option<&Escalation>) -> CommandSandboxPreview {
    let sandbox = &env.sandbox;
    let shown = |dirs: &mut dyn Iterator<Item = &std::path::PathBuf>| -> Vec<String> {
        dirs.map(|dir| Path::display(dir).to_string()).collect()
    };
    let writable = match sandbox.settings.mode {
        SandboxMode::Off => Vec::new(),
        SandboxMode::WorkspaceWrite => shown(
            &mut env
                .roots
                .iter()
                .chain(sandbox.writable.iter())
                .chain(sandbox.also_writable.iter()),
        ),
        SandboxMode::ReadOnly => shown(&mut sandbox.also_writable.iter()),
    };
    CommandSandboxPreview {
        mode: sandbox.settings.mode,
        network: sandbox.settings.mode == SandboxMode::Off || sandbox.settings.network,
        writable,
        escalation: escalation.cloned(),
    }
}
