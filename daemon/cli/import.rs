//! `toold import claude|codex [FILE…]`: another agent's permission settings as toold config
//! (the library's `config::import` maps them): printed as TOML, or merged into the config file
//! with `--write`. The files read, and every entry that could not be mapped with why, go to
//! stderr; a dropped entry makes the exit status 1.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use toold::config::Config;
use toold::config::import::{Import, claude, codex, shown_path};
use toold::config::write;
use toold::shell::isolated::ShellParser;
use toold_client::protocol::ReloadParams;
use toold_client::protocol::methods::ConfigReload;

use super::Outcome;
use super::address::DaemonAddress;
use super::listing::connect_plainly;
use super::{render, visible};

#[derive(Subcommand, Debug)]
pub enum ImportCommand {
    /// Import Claude Code's permission rules (settings.json `permissions.allow`, `ask`, `deny`).
    ///
    /// Default files: ~/.claude/settings.json, and .claude/settings.json and
    /// .claude/settings.local.json under the current directory (those that exist). Rules are
    /// kept as written (toold reads Claude Code's forms); a path anchored at the settings file
    /// (`Edit(/src/**)`) is made absolute (`Edit(//home/me/app/src/**)`). What toold cannot
    /// honour (WebFetch, defaultMode, …) is listed on stderr with why, and the exit status is 1.
    ///
    /// Example: toold import claude --write --project ~/src/app
    Claude(ImportArgs),
    /// Import Codex's sandbox, approval policy and prefix rules.
    ///
    /// Default files: $CODEX_HOME/config.toml and $CODEX_HOME/rules/*.rules ($CODEX_HOME:
    /// ~/.codex). sandbox_mode, [sandbox_workspace_write] writable_roots and network_access
    /// become [sandbox]; approval_policy becomes [permissions] sandboxed_commands; each
    /// prefix_rule becomes run_command rules, checked against its match and not_match examples
    /// by toold's own engine. What cannot be mapped is listed on stderr with why, and the exit
    /// status is 1.
    ///
    /// Example: toold import codex ~/.codex/rules/default.rules > codex.toml
    Codex(ImportArgs),
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The files to read [default: the agent's own, see above]
    pub files: Vec<PathBuf>,
    /// Merge into the config file (--config, default $XDG_CONFIG_HOME/toold/config.toml),
    /// keeping its comments and entries, instead of printing the TOML
    #[arg(long)]
    pub write: bool,
    /// Make the rules those of one project: a [[permissions.project]] table with this path
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// The config file --write merges into, and whose MCP servers imported rules may name
    /// [default: $XDG_CONFIG_HOME/toold/config.toml]
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The socket of the daemon told to read the config again after --write [default:
    /// $TOOLD_SOCKET, the config's `socket`, or $XDG_RUNTIME_DIR/toold/toold.sock]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// Which agent's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    Claude,
    Codex,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
        }
    }
}

pub fn import(command: ImportCommand) -> anyhow::Result<Outcome> {
    let (agent, args) = match command {
        ImportCommand::Claude(args) => (Agent::Claude, args),
        ImportCommand::Codex(args) => (Agent::Codex, args),
    };
    let home = toold::permission::home_dir();
    let files = if args.files.is_empty() {
        let found = default_files(agent, &home)?;
        if found.is_empty() {
            anyhow::bail!(
                "found no {} settings file where they are kept; name the files to read",
                agent.name()
            );
        }
        found
    } else {
        args.files.clone()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    // Examples of Codex rules are read as the daemon reads command lines: in its parser
    // workers, this binary.
    let parser = ShellParser::of_this_binary();
    let mut analyze = |line: &str| runtime.block_on(parser.analyze("toold import", line));
    let mut import = Import::default();
    let mut read = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let file = std::path::absolute(file)
            .and_then(|file| file.canonicalize().or(Ok::<_, std::io::Error>(file)))
            .with_context(|| format!("cannot find {}", file.display()))?;
        let imported = match agent {
            Agent::Claude => claude::settings(&file, &text, &home),
            Agent::Codex => match file.extension().and_then(|ext| ext.to_str()) {
                Some("toml") => codex::config(&file, &text, &home),
                Some("rules") => codex::rules(&file, &text, &home, &mut analyze),
                _ => Err(format!(
                    "{}: a Codex file is its config.toml or a .rules file",
                    file.display()
                )),
            },
        };
        import.extend(imported.map_err(|error| anyhow::anyhow!(error))?);
        read.push(shown_path(&file, &home));
    }
    eprintln!("toold: read {}", visible::line(&read.join(", ")));
    let project = args
        .project
        .as_deref()
        .map(|dir| {
            std::fs::canonicalize(dir)
                .with_context(|| format!("cannot find the project {}", dir.display()))
        })
        .transpose()?;
    if let Some(project) = &project {
        import.scope_to_project(project);
    }
    let config = match &args.config {
        Some(file) => Some(file.clone()),
        None => toold::config::default_path(),
    };
    // Rules about an MCP server's tools stand only where the config runs that server.
    let servers: Vec<String> = match config.as_deref().filter(|file| file.exists()) {
        Some(file) => match Config::load(Some(file)) {
            Ok(loaded) => loaded
                .mcp_servers
                .into_iter()
                .map(|server| server.name)
                .collect(),
            Err(error) if args.write => anyhow::bail!("{error}"),
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    import.drop_unknown_servers(
        &servers.iter().map(String::as_str).collect::<Vec<_>>(),
        &home,
    );
    if args.write {
        let config = config.context("no config file: neither XDG_CONFIG_HOME nor HOME is set")?;
        let merged = write::write_import(&config, project.as_deref(), &import)
            .map_err(|error| anyhow::anyhow!(error))?;
        for replaced in &merged.replaced {
            eprintln!("toold: replaced {}", visible::line(replaced));
        }
        render::print_out(&format!(
            "added {} to {} ({} already there)\n",
            merged.added,
            config.display(),
            merged.present
        ));
        if merged.added > 0 || !merged.replaced.is_empty() {
            let address = DaemonAddress {
                socket: args.socket.clone(),
                config: Some(config.clone()),
            };
            runtime.block_on(reload(&address));
        }
    } else {
        let text = write::render_import(project.as_deref(), &import)
            .map_err(|error| anyhow::anyhow!(error))?;
        render::print_out(&format!(
            "# toold config imported by `toold import {}` from {}\n\
             # (`toold import {} --write` merges it into your config)\n\n{text}",
            agent.name(),
            read.join(", "),
            agent.name()
        ));
    }
    report(&import);
    Ok(if import.dropped.is_empty() {
        Outcome::Success
    } else {
        Outcome::Failed
    })
}

/// The agent's own files that exist.
fn default_files(agent: Agent, home: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    match agent {
        Agent::Claude => {
            let cwd = std::env::current_dir().context("cannot find the current directory")?;
            for file in [
                home.join(".claude/settings.json"),
                cwd.join(".claude/settings.json"),
                cwd.join(".claude/settings.local.json"),
            ] {
                let canonical = file.canonicalize().ok();
                let seen = files
                    .iter()
                    .any(|known: &PathBuf| known.canonicalize().ok() == canonical);
                if file.is_file() && !seen {
                    files.push(file);
                }
            }
        }
        Agent::Codex => {
            let codex_home = std::env::var_os("CODEX_HOME")
                .map(PathBuf::from)
                .filter(|dir| dir.is_absolute())
                .unwrap_or_else(|| home.join(".codex"));
            let config = codex_home.join("config.toml");
            if config.is_file() {
                files.push(config);
            }
            let rules_dir = codex_home.join("rules");
            if let Ok(entries) = std::fs::read_dir(&rules_dir) {
                let mut rules: Vec<PathBuf> = entries
                    .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                    .filter(|path| {
                        path.extension().is_some_and(|ext| ext == "rules") && path.is_file()
                    })
                    .collect();
                rules.sort();
                files.extend(rules);
            }
        }
    }
    Ok(files)
}

/// What was left out, on stderr.
fn report(import: &Import) {
    for unmapped in &import.unmapped {
        eprintln!(
            "toold: {}: {}: {}",
            visible::line(&unmapped.source),
            unmapped.why,
            visible::line(&unmapped.keys.join(", "))
        );
    }
    for dropped in &import.dropped {
        eprintln!(
            "toold: dropped {}: {}: {}",
            visible::line(&dropped.source),
            visible::line(&dropped.entry),
            visible::line(&dropped.why)
        );
    }
    if !import.dropped.is_empty() {
        eprintln!(
            "toold: {} entr{} not imported",
            import.dropped.len(),
            if import.dropped.len() == 1 {
                "y"
            } else {
                "ies"
            }
        );
    }
}

/// Has a running daemon read the file again; one that is not running reads it when it starts.
async fn reload(address: &DaemonAddress) {
    if let Ok(client) = connect_plainly(address, "toold import").await {
        let reloaded = client.call::<ConfigReload>(ReloadParams {}).await;
        client.close();
        match reloaded {
            Ok(result) if !result.needs_restart.is_empty() => eprintln!(
                "toold: the daemon read the file again; not applied until it restarts: {}",
                result.needs_restart.join(", ")
            ),
            Ok(_) => {}
            Err(error) => eprintln!("toold: the daemon did not read the file again: {error}"),
        }
    }
}
