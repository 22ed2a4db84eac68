//! `toold explain TOOL [JSON|-]`: why a call would be allowed, asked or denied, by which rule
//! from which file, and what to add to change it (`permissions/explain`; nothing runs).

use clap::Args;
use serde_json::Value;
use toold_client::protocol::methods::PermissionsExplain;
use toold_client::protocol::{
    ExplainCall, ExplainParams, Explanation, RuleSource, Rules, SessionCreateParams, SessionMode,
};
use toold_client::{Client, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::batch_run::{parse_mode, session_cwd};
use super::call::read_arguments;
use super::{render, visible};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The tool of the call (`toold tools` lists them).
    pub tool: String,
    /// The call's arguments, a JSON object; `-` reads it from stdin [default: {}].
    #[arg(value_name = "JSON|-")]
    pub arguments: Option<String>,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Judge the call in this live session (its rules, grants, mode and hooks).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Otherwise, in a session at this directory [default: the current directory], which is
    /// described to the daemon and not created.
    #[arg(long, value_name = "DIR", conflicts_with = "session")]
    pub cwd: Option<std::path::PathBuf>,
    /// That session's mode: default, accept_edits, plan, dont_ask or bypass.
    #[arg(long, value_name = "MODE", value_parser = parse_mode, conflicts_with = "session")]
    pub mode: Option<SessionMode>,
    /// A session allow rule (repeatable), as `session/create` takes it.
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub allow: Vec<String>,
    /// A session ask rule (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub ask: Vec<String>,
    /// A session deny rule (repeatable).
    #[arg(long, value_name = "RULE", conflicts_with = "session")]
    pub deny: Vec<String>,
    /// Print the `permissions/explain` result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exit 0 when the call would be allowed, 1 otherwise (asked, denied, or not callable).
pub async fn explain(args: ExplainArgs) -> anyhow::Result<Outcome> {
    let arguments = read_arguments(args.arguments.as_deref())?;
    let session = match &args.session {
        Some(_) => None,
        None => {
            let mut described = SessionCreateParams::new(session_cwd(args.cwd.as_deref())?);
            described.mode = args.mode;
            let rules = Rules {
                allow: args.allow.clone(),
                ask: args.ask.clone(),
                deny: args.deny.clone(),
            };
            described.rules = (rules != Rules::default()).then_some(rules);
            Some(described)
        }
    };
    let params = ExplainParams {
        session_id: args.session.clone(),
        session,
        call: ExplainCall {
            name: args.tool.clone(),
            arguments: Some(Value::Object(arguments)),
        },
    };
    let options = ClientOptions::new("toold explain")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(args.address.socket_path()?);
    let (client, _events) = Client::connect(options).await?;
    let explained = client.call::<PermissionsExplain>(params).await;
    client.close();
    let explanation = explained?;
    if args.json {
        render::print_out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&explanation)?
        ));
    } else {
        render::print_out(&visible::block(&for_people(&args.tool, &explanation)));
    }
    Ok(if explanation.decision == "allow" {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// The decision first, then why (the rule and where it is written, the paths, each command),
/// then what to add to change it.
fn for_people(tool: &str, explained: &Explanation) -> String {
    let mut text = match explained.step.as_deref() {
        Some(step) => format!("{}: {tool} ({step})\n", explained.decision),
        None => format!("{}: {tool}\n", explained.decision),
    };
    text.push_str(&format!("  why:     {}\n", explained.reason));
    if let Some(rule) = &explained.rule {
        let from = match &explained.source {
            Some(RuleSource::Config { file, line }) => format!(
                "the config file {}{}",
                file.as_deref().unwrap_or("(unknown)"),
                line.map(|line| format!(":{line}")).unwrap_or_default()
            ),
            Some(RuleSource::Session) => "the session's rules".to_owned(),
            Some(RuleSource::Grant) => "a grant the session recorded".to_owned(),
            None => "unknown".to_owned(),
        };
        text.push_str(&format!("  rule:    {rule}  (from {from})\n"));
        if let Some(read_as) = &explained.rule_read_as {
            text.push_str(&format!("  read as: {read_as}\n"));
        }
    }
    for path in &explained.paths {
        let place = if path.inside_roots {
            "inside the roots"
        } else {
            "outside the roots"
        };
        let what = match path.access.as_deref() {
            Some(access) => format!("{} ({access})", path.argument),
            None => path.argument.clone(),
        };
        let resolved = if path.resolved == path.lexical {
            String::new()
        } else {
            format!(" → {}", path.resolved)
        };
        text.push_str(&format!(
            "  path:    {what} {}{resolved}, {place}\n",
            path.lexical
        ));
    }
    for command in &explained.commands {
        let rule = command
            .rule
            .as_deref()
            .map_or("no allow rule".to_owned(), |rule| {
                format!("allowed by {rule}")
            });
        text.push_str(&format!("  command: {}  ({rule})\n", command.text));
    }
    if let Some(unreadable) = &explained.unreadable {
        text.push_str(&format!("  unreadable: {unreadable}\n"));
    }
    if !explained.hooks.is_empty() {
        text.push_str(&format!(
            "  hooks that would run first: {}\n",
            explained.hooks.join("; ")
        ));
    }
    if let Some(sandbox) = &explained.sandbox {
        text.push_str(&format!("  sandbox: {sandbox}\n"));
    }
    if let Some(server) = &explained.starts_server {
        text.push_str(&format!(
            "  starts: the MCP server {} (lazy, not running yet; explain started nothing, so \
             the tool's arguments were not checked against its schema)\n",
            server
        ));
    }
    let quoted: Vec<String> = explained
        .suggestions
        .iter()
        .map(|rule| format!("'{rule}'"))
        .collect();
    let rule = explained.rule.as_deref().unwrap_or("");
    let change = match (explained.step.as_deref(), quoted.len()) {
        (_, 1) => Some(format!(
            "add the allow rule {} (config [permissions] allow, or --allow)",
            quoted[0]
        )),
        (_, 2..) => Some(format!(
            "add the allow rules {} (config [permissions] allow, or --allow)",
            quoted.join(", ")
        )),
        (Some("deny_rule"), _) => {
            Some("a deny rule wins over every allow: remove or narrow that rule".to_owned())
        }
        (Some("ask_rule"), _) => Some(format!(
            "the ask rule {rule} asks in every mode: narrow or remove it, or answer \"allow for \
             the session\" to grant this exact call"
        )),
        (Some("dont_ask"), _) if !rule.is_empty() => Some(format!(
            "the ask rule {rule} asks, and under dont_ask asking is denying: change the mode or \
             the rule"
        )),
        (Some("unreadable_command"), _) => Some(
            "no rule can be checked inside this line: only an approval runs it (or rewrite it \
             without what cannot be read)"
                .to_owned(),
        ),
        (Some("protected_path"), _) => Some(
            "only an approval, or an allow rule naming .git (such as write_file(.git/hooks/**)), \
             lets it write there"
                .to_owned(),
        ),
        (Some("default_ask" | "dont_ask"), _) => Some(
            "no allow rule can cover this call (see why): only an approval, or a grant of this \
             exact call, runs it"
                .to_owned(),
        ),
        (Some("plan_mode" | "tool_list"), _) => {
            Some("change the session's mode or its allowed_tools".to_owned())
        }
        _ => None,
    };
    if let Some(change) = change {
        text.push_str(&format!("  to change it: {change}\n"));
    }
    text
}
