//! `permissions/explain` (docs/protocol.md section 11.11): a call judged as steps 2 and 4 of the
//! pipeline judge it, on a session's state as it is, with nothing run, nobody asked, no event
//! and no hook: the same resolution and the same `permission::evaluate`, read out.

use std::sync::Arc;

use toold_protocol::{ErrorType, ExplainedCommand, ExplainedPath, Explanation, ToolCall};

use super::Pipeline;
use super::call::analyse;
use super::session::{Hidden, SessionState};
use crate::hooks::ClientHooks;
use crate::paths::{self, ResolvedPath};
use crate::permission::{self, Decision, HookVerdict, Judgment, Step};
use crate::tools::{JudgedArguments, Registry, Tool, judged_arguments};

/// The session a call is explained in: its state, its connections' hooks, and who asks the
/// parser workers (`parser_owner`, whose share of them the analysis draws on).
#[derive(Clone, Copy)]
pub(crate) struct ExplainedIn<'a> {
    pub state: &'a SessionState,
    pub client_hooks: &'a [Arc<dyn ClientHooks>],
    pub parser_owner: &'a str,
}

/// Explains `call` in `session`. `unstarted`: when the call names a tool of a lazy MCP server
/// that has not started, the server's name and a stand-in for the tool
/// ([`crate::mcp::servers::McpServers::unstarted_tool`]), judged in its place.
pub(crate) async fn explain(
    pipeline: &Pipeline,
    session: ExplainedIn<'_>,
    call: &ToolCall,
    unstarted: Option<(String, Arc<dyn Tool>)>,
) -> Explanation {
    let (starts_server, stand_in) = unstarted.unzip();
    let mut explanation = explain_resolved(pipeline, session, call, stand_in).await;
    explanation.starts_server = starts_server;
    explanation
}

async fn explain_resolved(
    pipeline: &Pipeline,
    session: ExplainedIn<'_>,
    call: &ToolCall,
    stand_in: Option<Arc<dyn Tool>>,
) -> Explanation {
    let ExplainedIn {
        state,
        client_hooks,
        parser_owner,
    } = session;
    let settings = pipeline.settings();
    let hooks = settings
        .hook_set(client_hooks, &state.env.cwd)
        .names_for(&call.name);
    // Step 2, as the pipeline's `step_resolve`.
    let resolved = match stand_in {
        Some(tool) => Registry::resolve_unregistered(call, tool),
        None => pipeline.registry.resolve(call),
    };
    let resolved = match resolved {
        Ok(resolved) => resolved,
        Err(failure) => {
            let decision = match failure.error_type {
                Some(ErrorType::UnknownTool) => "unknown_tool",
                _ => "invalid_arguments",
            };
            return unjudged(decision, None, failure.error.unwrap_or_default(), hooks);
        }
    };
    let definition = resolved.definition();
    if let Some(hidden) = state.hidden_by(definition) {
        let reason = match hidden {
            Hidden::PlanMode => format!(
                "{} changes things, and the session is in plan mode, where only read-only \
                 tools run",
                call.name
            ),
            Hidden::ToolList => format!("{} is not in the session's allowed_tools", call.name),
        };
        return unjudged("tool_not_allowed", Some(hidden.step()), reason, hooks);
    }
    let analysed = analyse(pipeline, parser_owner, &resolved.arguments, &call.name).await;
    let ((judgment, (commands, redirections, allow_rules)), judged) = state.judge_and_inspect(
        &resolved,
        analysed.as_ref(),
        HookVerdict::Silent,
        |facts, _| {
            let Some(command) = facts.command else {
                let rule = permission::canonical_form(facts);
                // A file tool's exact form is also a rule (`//` starts an absolute path);
                // writing a protected path needs a rule naming `.git`, not this one.
                let usable = !facts.paths.iter().any(|path| path.makes_code_run);
                return (
                    Vec::new(),
                    Vec::new(),
                    usable.then_some(vec![rule]).unwrap_or_default(),
                );
            };
            let covered = permission::command_rules(facts.tool, command, &state.policy);
            // One rule for each command no allow rule covers, when rules can cover the line
            // at all (nothing opaque, nothing written outside the roots, run inside them).
            let coverable = command.analysis.opaque.is_empty()
                && command.analysis.unreadable.is_none()
                && command.written.iter().all(ResolvedPath::inside_roots)
                && command.cwd.as_ref().is_none_or(ResolvedPath::inside_roots);
            let rules = if coverable {
                covered
                    .iter()
                    .filter(|(_, rule)| rule.is_none())
                    .map(|(text, _)| format!("{}({text})", facts.tool))
                    .collect()
            } else {
                Vec::new()
            };
            let commands = covered
                .into_iter()
                .map(|(text, rule)| ExplainedCommand {
                    text,
                    rule: rule.map(|rule| rule.text().to_owned()),
                })
                .collect();
            let reads = command.read.iter().map(|path| ("read", path));
            let writes = command.written.iter().map(|path| ("write", path));
            let redirections = reads
                .chain(writes)
                .map(|(access, path)| explained("command", path, Some(access)))
                .collect();
            (commands, redirections, rules)
        },
    );
    let argument_name = match judged_arguments(&call.name) {
        JudgedArguments::Path { argument, .. } => argument,
        JudgedArguments::CommandLine { cwd, .. } => cwd,
        JudgedArguments::ByName => "",
    };
    let mut paths: Vec<ExplainedPath> = judged
        .iter()
        .map(|path| explained(argument_name, path, None))
        .collect();
    paths.extend(redirections);
    let sandbox = judged_arguments(&call.name)
        .takes_a_command_line()
        .then(|| state.env.sandbox.settings.mode.as_str().to_owned());
    let unreadable = analysed.and_then(|analysed| analysed.analysis.unreadable.clone());
    let Judgment {
        decision,
        step,
        rule,
    } = judgment;
    // Allow rules change only what no rule, grant or mode decided: a default ask (and the
    // denial dont_ask makes of it). An ask rule, an unreadable line, a protected path win
    // over every allow rule.
    let allow_rules_help = step == Step::DefaultAsk || step == Step::DontAsk && rule.is_none();
    let suggestions = if allow_rules_help {
        allow_rules
    } else {
        Vec::new()
    };
    let (decision, reason) = match decision {
        Decision::Allow => ("allow", allowed_because(step)),
        Decision::Ask { reason, .. } => ("ask", reason),
        Decision::Deny(reason) => ("deny", reason),
        Decision::NotAllowed(reason) => ("tool_not_allowed", reason),
    };
    Explanation {
        decision: decision.to_owned(),
        step: Some(step.as_str().to_owned()),
        reason,
        source: rule.as_ref().map(|rule| rule.origin.source()),
        rule_read_as: rule.as_ref().and_then(|rule| rule.read_as.clone()),
        rule: rule.map(|rule| rule.text),
        suggestions,
        paths,
        commands,
        unreadable,
        hooks,
        sandbox,
        starts_server: None,
    }
}

/// Why an allow was reached: the step in words.
fn allowed_because(step: Step) -> String {
    match step {
        Step::SystemTool => "a system tool skips rules and modes",
        Step::BypassMode => "the session's mode is bypass",
        Step::AllowRule => "an allow rule covers the call",
        Step::Grant => "a grant the session recorded covers the call",
        Step::KnownSafe => {
            "every command of the line is a read-only command on toold's known-safe list, used \
             only with options that cannot write, run other programs or reach the network, and \
             reading only inside the roots"
        }
        Step::HookAllow => "a PreToolUse hook allowed the call",
        Step::AcceptEdits => "the session's mode is accept_edits and the file is inside its roots",
        Step::ReadOnlyInsideRoots => "the tool is read-only and its paths are inside the roots",
        Step::Sandboxed => {
            "no rule decided the command line, and the sandbox confines it: it may write only \
             inside the writable places, reaches no network and no service outside \
             ([permissions] sandboxed_commands = \"allow\")"
        }
        _ => "allowed",
    }
    .to_owned()
}

/// A decision made before any rule was looked at (step 2, or the tool's visibility).
fn unjudged(decision: &str, step: Option<&str>, reason: String, hooks: Vec<String>) -> Explanation {
    Explanation {
        decision: decision.to_owned(),
        step: step.map(str::to_owned),
        reason,
        rule: None,
        rule_read_as: None,
        source: None,
        suggestions: Vec::new(),
        paths: Vec::new(),
        commands: Vec::new(),
        unreadable: None,
        hooks,
        sandbox: None,
        starts_server: None,
    }
}

fn explained(argument: &str, path: &ResolvedPath, access: Option<&str>) -> ExplainedPath {
    ExplainedPath {
        argument: argument.to_owned(),
        lexical: paths::exact_text(&path.lexical).into_owned(),
        resolved: paths::exact_text(&path.resolved).into_owned(),
        inside_roots: path.inside_roots(),
        access: access.map(str::to_owned),
    }
}
