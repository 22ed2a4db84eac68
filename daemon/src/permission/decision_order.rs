//! The order of docs/protocol.md section 7: the steps a call goes through, first match wins,
//! from the system tools and the deny rules down to the mode's default.
//!
//! Each step reads the call's facts and the session's policy only: no IO and no clock.

use toold_protocol::{Safety, SessionMode as Mode};

use crate::paths::ResolvedPath;
use crate::tools::{JudgedArguments, judged_arguments};

use super::escalation::Loosening;
use super::grants::{canonical_form, grant_form, grant_shown, pattern_grants, session_grant};
use super::inputs::{CallFacts, HookVerdict, SessionFacts};
use super::judgment::{Decision, Judgment, Step};
use super::matching::{allowing_rule, matches_restrictive, rule_for_paths};
use super::patterns::Scope;
use super::policy::{Policy, SandboxedCommands};
use super::rules::{Rule, RuleOrigin, Specifier};

/// Decides one call: docs/protocol.md section 7's order, first match wins.
pub fn evaluate(call: &CallFacts<'_>, session: &SessionFacts<'_>) -> Judgment {
    if call.system {
        return Judgment::new(Decision::Allow, Step::SystemTool);
    }
    if let Some((rule, reason)) = deny_rule(call, session.policy) {
        return Judgment::by_rule(Decision::Deny(reason), Step::DenyRule, rule);
    }
    if let Some(why) = call
        .command
        .and_then(|command| command.escalation_refused.as_deref())
    {
        return Judgment::new(Decision::Deny(why.to_owned()), Step::EscalationRefused);
    }
    if session.mode == Mode::Plan && call.safety == Safety::SideEffect {
        return Judgment::new(
            Decision::NotAllowed(format!(
                "{} changes things, and the session is in plan mode, where only read-only tools run",
                call.tool
            )),
            Step::PlanMode,
        );
    }
    let judgment = decide_without_deny(call, session);
    match judgment.decision {
        Decision::Ask { reason, .. } if session.mode == Mode::DontAsk => Judgment {
            decision: Decision::Deny(format!(
                "{reason}; the session's mode is dont_ask, so nothing is asked"
            )),
            step: Step::DontAsk,
            rule: judgment.rule,
        },
        _ => judgment,
    }
}

/// Step 1 alone: the reason a deny rule refuses the call, if one does. Approvals that rewrite
/// arguments are checked with this again.
pub fn denied(call: &CallFacts<'_>, policy: &Policy) -> Option<String> {
    deny_rule(call, policy).map(|(_, reason)| reason)
}

/// Step 1: the deny rule that refuses the call, and the reason the model is given.
fn deny_rule<'p>(call: &CallFacts<'_>, policy: &'p Policy) -> Option<(&'p Rule, String)> {
    if call.system {
        return None;
    }
    if let Some(rule) = policy
        .deny
        .iter()
        .find(|rule| matches_restrictive(rule, call))
    {
        return Some((rule, format!("denied by the rule {}", rule.text)));
    }
    // Code the line runs that no rule can look into (`echo rm x | bash`) could be what a deny
    // rule forbids: the rule denies it.
    if let Some(command) = call.command
        && !command.analysis.hidden_code.is_empty()
        && let Some(rule) = policy
            .deny
            .iter()
            .find(|rule| rule.covers(call.tool) && matches!(rule.specifier, Specifier::Command(_)))
    {
        let reason = format!(
            "denied by the rule {}: the command line runs code that cannot be checked against \
             it ({}); run what it would run as a command line of its own",
            rule.text,
            command.analysis.hidden_code.join(", ")
        );
        return Some((rule, reason));
    }
    // A tool that writes a file and shows lines of it (`edit_file`: its diff, and whether the
    // old text is there) reads it: a file no model may read is not edited either.
    let judged = judged_arguments(call.tool);
    if judged.writes()
        && judged.shows_contents()
        && let Some((rule, path)) =
            rule_for_paths(&policy.deny, JudgedArguments::reads_one_file, call.paths)
    {
        let reason = format!(
            "denied by the rule {}: {} reads {} and shows lines of it",
            rule.text,
            call.tool,
            path.lexical.display()
        );
        return Some((rule, reason));
    }
    // What a command line reads (`< file`, `xargs -a file`) is judged as `read_file` would be,
    // and what it writes (`> file`, `time -o file`) as `write_file` and `edit_file` would be.
    let command = call.command?;
    if let Some((rule, path)) =
        rule_for_paths(&policy.deny, JudgedArguments::reads_one_file, &command.read)
    {
        let reason = format!(
            "denied by the rule {}: the command line reads {}",
            rule.text,
            path.lexical.display()
        );
        return Some((rule, reason));
    }
    let (rule, path) = rule_for_paths(&policy.deny, JudgedArguments::writes, &command.written)?;
    let reason = format!(
        "denied by the rule {}: the command line writes {}",
        rule.text,
        path.lexical.display()
    );
    Some((rule, reason))
}

fn decide_without_deny(call: &CallFacts<'_>, session: &SessionFacts<'_>) -> Judgment {
    // What an `allow_session` answer would grant, as the approval shows it; the exact form is
    // what an exact grant is looked up by.
    let suggestion = grant_shown(&session_grant(call)).to_owned();
    let exact = grant_form(call);
    if let Some(rule) = session
        .policy
        .ask
        .iter()
        .find(|rule| matches_restrictive(rule, call))
    {
        let reason = format!("the rule {} asks for approval", rule.text);
        return Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::AskRule, rule);
    }
    if let Some(command) = call.command {
        let asked = rule_for_paths(
            &session.policy.ask,
            JudgedArguments::reads_one_file,
            &command.read,
        )
        .map(|(rule, path)| (rule, "reads", path))
        .or_else(|| {
            rule_for_paths(
                &session.policy.ask,
                JudgedArguments::writes,
                &command.written,
            )
            .map(|(rule, path)| (rule, "writes", path))
        });
        if let Some((rule, verb, path)) = asked {
            let reason = format!(
                "the rule {} asks for approval: the command line {verb} {}",
                rule.text,
                path.lexical.display()
            );
            return Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::AskRule, rule);
        }
    }
    if call.hook == HookVerdict::Ask {
        let reason = "a PreToolUse hook asks for approval".to_owned();
        return Judgment::new(Decision::Ask { reason, suggestion }, Step::HookAsk);
    }
    if let Some(why) = call
        .command
        .and_then(|command| command.analysis.unreadable.as_deref())
    {
        // Deny and ask rules cannot look inside it: asking is the only safe answer, in every
        // mode (bypass too).
        let reason = format!("the command line cannot be checked against the rules: {why}");
        return Judgment::new(
            Decision::Ask { reason, suggestion },
            Step::UnreadableCommand,
        );
    }
    if session.mode == Mode::Bypass {
        return Judgment::new(Decision::Allow, Step::BypassMode);
    }
    if let Some(judgment) = protected_write(call, session, &exact, &suggestion) {
        return judgment;
    }
    // Rules are written for the session's roots: a command that runs elsewhere (`cwd` outside
    // them, lexically or resolved) is another command, whatever its words. Only a grant of
    // exactly that call (which records the directory) or a hook covers it.
    let runs_outside = call
        .command
        .and_then(|command| command.cwd.as_ref())
        .filter(|cwd| !cwd.inside_roots());
    // The session's pattern grants (`git log *`) count as allow rules of their own origin,
    // so that a line is covered by rules and grants together; never in plan mode.
    let granted = match session.mode {
        Mode::Plan => Vec::new(),
        _ => pattern_grants(session.grants),
    };
    if runs_outside.is_none()
        && let Some(rule) = allowing_rule(call, session.policy.allow.iter().chain(&granted))
    {
        let step = match rule.origin {
            RuleOrigin::Grant => Step::Grant,
            _ => Step::AllowRule,
        };
        return Judgment::by_rule(Decision::Allow, step, rule);
    }
    if session.mode != Mode::Plan && session.grants.contains(&exact) {
        return Judgment::by_grant(&exact);
    }
    if call.hook == HookVerdict::Allow {
        return Judgment::new(Decision::Allow, Step::HookAllow);
    }
    if let Some(cwd) = runs_outside {
        let reason = format!(
            "the command would run in {}, outside the session's roots",
            cwd.lexical.display()
        );
        return Judgment::new(Decision::Ask { reason, suggestion }, Step::DefaultAsk);
    }
    if let Some(command) = call.command
        && command.escalation.is_none()
    {
        // The sandbox decides first where it confines; the known-safe list where it does not,
        // or beside a command rule (a listed command runs no script that could sidestep one).
        let sandboxed = (session.confined
            && session.policy.sandboxed_commands == SandboxedCommands::Allow)
            .then(|| sandboxed(session.policy, &exact, suggestion.clone()));
        match sandboxed {
            Some(judgment) if judgment.step == Step::Sandboxed => return judgment,
            // A tree it reads could hold what a rule keeps from the model's reads, which
            // no path of the line names: beside such a rule the list does not decide.
            _ if command
                .known_safe
                .is_some_and(|tree| !tree || !session.policy.restricts_reads()) =>
            {
                return Judgment::new(Decision::Allow, Step::KnownSafe);
            }
            Some(judgment) => return judgment,
            None => {}
        }
    }
    let all_inside = call.paths.iter().all(ResolvedPath::inside_roots);
    if session.mode == Mode::AcceptEdits && judged_arguments(call.tool).writes() && all_inside {
        return Judgment::new(Decision::Allow, Step::AcceptEdits);
    }
    if call.safety == Safety::ReadOnly && all_inside {
        return Judgment::new(Decision::Allow, Step::ReadOnlyInsideRoots);
    }
    let reason = match (call.command, call.safety) {
        (Some(command), _) if command.escalation.is_some() => {
            format!(
                "the command asks to leave its sandbox ({}), and no allow rule or grant covers \
                 {exact}",
                command
                    .escalation
                    .as_ref()
                    .map(Loosening::text)
                    .unwrap_or_default()
            )
        }
        (Some(command), _) if !command.analysis.opaque.is_empty() => {
            format!(
                "no allow rule can cover this command line: it has {}",
                command.analysis.opaque.join(", ")
            )
        }
        (Some(command), _) if command.written.iter().any(|path| !path.inside_roots()) => {
            "the command line writes to a file outside the session roots".to_owned()
        }
        (_, Safety::ReadOnly) => "the path is outside the session roots".to_owned(),
        _ => format!("no allow rule matches {}", canonical_form(call)),
    };
    Judgment::new(Decision::Ask { reason, suggestion }, Step::DefaultAsk)
}

/// A command line the sandbox confines runs unasked, unless a deny or ask rule of `run_command`
/// with a command pattern is in force: such a rule binds the lines it can read, and a command
/// run unasked could sidestep it (a script it wrote and then ran, an interpreter, a function,
/// a word the shell expands), so beside one the sandbox does not decide and the line asks as
/// any the rules leave open. The rule is named, and allow rules are what change it.
fn sandboxed(policy: &Policy, exact: &str, suggestion: String) -> Judgment {
    let binding = policy.deny.iter().chain(&policy.ask).find(|rule| {
        // A rule about escalated calls binds only those, which the sandbox never decides.
        rule.covers("run_command")
            && rule.escalation.is_none()
            && matches!(rule.specifier, Specifier::Command(_))
    });
    match binding {
        Some(rule) => {
            let reason = format!(
                "no allow rule matches {exact}, and beside the rule {} the sandbox does not \
                 decide for commands: one it ran unasked could run what that rule is about \
                 through a script or an interpreter",
                rule.text
            );
            Judgment::by_rule(Decision::Ask { reason, suggestion }, Step::DefaultAsk, rule)
        }
        None => Judgment::new(Decision::Allow, Step::Sandboxed),
    }
}

/// Writing a path that makes code run later (`.git/config`, `.git/hooks/**`) asks in every
/// mode but bypass, whatever allows the call otherwise, unless the session granted this exact
/// call or a file tool's allow rule names the git directory (its pattern says `.git` and
/// matches the path): `allow write_file(**)` does not open `.git/hooks/`.
fn protected_write(
    call: &CallFacts<'_>,
    session: &SessionFacts<'_>,
    exact: &str,
    suggestion: &str,
) -> Option<Judgment> {
    let protected = match call.command {
        Some(command) => command.writes_code_that_runs(),
        None => call.paths.iter().any(|path| path.makes_code_run),
    };
    if !protected {
        return None;
    }
    if session.mode != Mode::Plan && session.grants.iter().any(|g| g == exact) {
        return Some(Judgment::by_grant(exact));
    }
    let named = session.policy.allow.iter().find(|rule| {
        call.command.is_none()
            && rule.covers(call.tool)
            && rule.text.contains(".git")
            && matches!(&rule.specifier, Specifier::Path(glob) if call.paths.iter().all(|path| {
                glob.matches(&path.lexical, Scope::UnderCwd)
                    && glob.matches(&path.resolved, Scope::UnderCwd)
            }))
    });
    if let Some(rule) = named {
        return Some(Judgment::by_rule(Decision::Allow, Step::AllowRule, rule));
    }
    let reason = "the call writes a file that makes code run later (git runs what .git/config \
                  and .git/hooks name; toold trusts its own config and state), which only an \
                  approval or an allow rule naming .git permits"
        .to_owned();
    Some(Judgment::new(
        Decision::Ask {
            reason,
            suggestion: suggestion.to_owned(),
        },
        Step::ProtectedPath,
    ))
}
