//! `toold rules`: every permission rule in force for a project, with where it comes from (the
//! config file and line, a project's table there, a live session's own rules, its grants);
//! `toold rules remove RULE` takes a rule out of the config file (what "always" answers wrote,
//! or any other) and has the daemon read the file again.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use toold::config::Config;
use toold::config::write;
use toold::permission::{ConfigRules, grant_shown};
use toold_client::protocol::methods::ConfigReload;
use toold_client::protocol::{ReloadParams, Rules};

use super::Outcome;
use super::address::DaemonAddress;
use super::listing::connect_plainly;
use super::{render, visible};

#[derive(Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    pub command: Option<RulesCommand>,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// The project whose rules to list [default: the current directory]
    #[arg(long, value_name = "DIR", global = true)]
    pub project: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum RulesCommand {
    /// Remove a rule from the config file: from the project's tables with --project, else
    /// from every place the file holds it; then the daemon reads the file again.
    ///
    /// Example: toold rules remove 'run_command(git log *)' --project ~/src/app
    Remove {
        /// The rule, as `toold rules` lists it.
        rule: String,
    },
}

pub async fn rules(args: RulesArgs) -> anyhow::Result<Outcome> {
    let file = match &args.address.config {
        Some(file) => file.clone(),
        None => toold::config::default_path().ok_or_else(|| {
            anyhow::anyhow!("no config file: neither XDG_CONFIG_HOME nor HOME is set")
        })?,
    };
    match args.command {
        Some(RulesCommand::Remove { rule }) => {
            let project = args.project.as_deref().map(absolute).transpose()?;
            remove(&args.address, &file, project.as_deref(), &rule).await
        }
        None => {
            let project = absolute(args.project.as_deref().unwrap_or(Path::new(".")))?;
            list(&args.address, &file, &project).await
        }
    }
}

fn absolute(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::canonicalize(dir)
        .map_err(|error| anyhow::anyhow!("cannot find the project {}: {error}", dir.display()))
}

async fn list(address: &DaemonAddress, file: &Path, project: &Path) -> anyhow::Result<Outcome> {
    let mut lines = Vec::new();
    if file.exists() {
        let config = Config::load(Some(file)).map_err(|error| anyhow::anyhow!("{error}"))?;
        config_rules(&config.rules, project, &mut lines);
    }
    if lines.is_empty() {
        lines.push(format!(
            "no rule in {} applies to {}",
            file.display(),
            project.display()
        ));
    }
    match connect_plainly(address, "toold rules").await {
        Ok(client) => {
            let sessions = client.session_list().await;
            client.close();
            for session in sessions? {
                if !session
                    .roots
                    .first()
                    .is_some_and(|root| root.starts_with(project))
                {
                    continue;
                }
                let id = &session.session_id;
                session_rules(&session.rules, &format!("session {id}"), &mut lines);
                for grant in &session.grants {
                    lines.push(format!(
                        "allow  {}  (a grant of session {id})",
                        grant_shown(grant)
                    ));
                }
            }
        }
        Err(_) => lines.push(
            "(the daemon is not running: no session's rules or grants are in force)".to_owned(),
        ),
    }
    render::print_out(&visible::block(&format!("{}\n", lines.join("\n"))));
    Ok(Outcome::Success)
}

/// The config's rules that apply to `project`, each with its file and line.
fn config_rules(rules: &ConfigRules, project: &Path, lines: &mut Vec<String>) {
    let file = rules.file.as_ref().map_or_else(
        || "the config".to_owned(),
        |file| file.display().to_string(),
    );
    let mut add = |texts: &Rules, at: &[Vec<u32>; 3], scope: &str| {
        for (list, (texts, at)) in [&texts.allow, &texts.ask, &texts.deny]
            .into_iter()
            .zip(at)
            .enumerate()
        {
            let name = ["allow", "ask  ", "deny "][list];
            for (index, text) in texts.iter().enumerate() {
                let line = at
                    .get(index)
                    .map_or(String::new(), |line| format!(":{line}"));
                lines.push(format!("{name}  {}  ({file}{line}{scope})", as_read(text)));
            }
        }
    };
    add(&rules.rules, &rules.lines, "");
    for table in rules.projects.iter().filter(|table| table.covers(project)) {
        add(
            &table.rules,
            &table.lines,
            &format!(", project {}", table.path.display()),
        );
    }
}

fn session_rules(rules: &Rules, source: &str, lines: &mut Vec<String>) {
    for (name, texts) in [
        ("allow", &rules.allow),
        ("ask  ", &rules.ask),
        ("deny ", &rules.deny),
    ] {
        for text in texts {
            lines.push(format!("{name}  {}  ({source})", as_read(text)));
        }
    }
}

/// A rule as written, and how toold reads it when that differs (`Bash(npm:*) → run_command(npm *)`).
fn as_read(text: &str) -> String {
    match toold::permission::shown_read_as(text) {
        Some(read_as) => format!("{text} → {read_as}"),
        None => text.to_owned(),
    }
}

async fn remove(
    address: &DaemonAddress,
    file: &Path,
    project: Option<&Path>,
    rule: &str,
) -> anyhow::Result<Outcome> {
    let removed = write::remove_rule(file, project, rule).map_err(|why| anyhow::anyhow!(why))?;
    if removed == 0 {
        eprintln!(
            "toold: {} holds no rule {}{}",
            file.display(),
            visible::line(rule),
            project.map_or(String::new(), |dir| format!(" for {}", dir.display()))
        );
        return Ok(Outcome::Failed);
    }
    render::print_out(&format!(
        "removed {} from {}\n",
        visible::line(rule),
        file.display()
    ));
    // The daemon drops it at once; one that is not running reads the file when it starts.
    if let Ok(client) = connect_plainly(address, "toold rules").await {
        let reloaded = client.call::<ConfigReload>(ReloadParams {}).await;
        client.close();
        if let Err(error) = reloaded {
            eprintln!("toold: the daemon did not read the file again: {error}");
            return Ok(Outcome::Failed);
        }
    }
    Ok(Outcome::Success)
}
