//! `toold mcp status` and `toold mcp restart NAME`: the daemon's MCP servers (`mcp/status`,
//! `mcp/restart`), for people or as the JSON the daemon answered; and `toold mcp serve`
//! (`mcp_serve`), toold as an MCP server.

use clap::{Args, Subcommand};
use toold_client::protocol::methods::{McpRestart, McpStatus};
use toold_client::protocol::{McpRestartParams, McpServerStatus, McpStatusParams};

use super::Outcome;
use super::address::DaemonAddress;
use super::listing::connect_plainly;
use super::{render, visible};

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// List the daemon's MCP servers: state, process, tools, quarantined tools and why.
    ///
    /// Exit code: 0 when every server is ready (or none is configured), 1 when one is not.
    ///
    /// Example: toold mcp status --json
    Status(McpStatusArgs),
    /// Stop an MCP server and start it again, with a fresh count of failures (a `failed`
    /// server included).
    ///
    /// Example: toold mcp restart fs
    Restart(McpRestartArgs),
    /// Serve MCP on stdio for an MCP host (Claude Code, Codex, Cursor, …), backed by the
    /// daemon (started if none answers): its tools under the session's rules, hooks,
    /// approvals and sandbox. The session it creates is closed when the host goes.
    ///
    /// Example: toold mcp serve --allow 'run_command(cargo test *)' --deny 'Bash(git push:*)'
    ///
    /// In a host's config: {"command": "toold", "args": ["mcp", "serve"]}
    Serve(super::mcp_serve::McpServeArgs),
}

#[derive(Args, Debug)]
pub struct McpStatusArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print the daemon's `mcp/status` result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct McpRestartArgs {
    /// The server's name, as in `[mcp.servers.NAME]`.
    pub name: String,
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print the server's new status as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn mcp(command: McpCommand) -> anyhow::Result<Outcome> {
    match command {
        McpCommand::Serve(args) => super::mcp_serve::serve(args).await,
        McpCommand::Status(args) => {
            let client = connect_plainly(&args.address, "toold mcp status").await?;
            let status = client.call::<McpStatus>(McpStatusParams {}).await;
            client.close();
            let status = status?;
            if args.json {
                render::print_out(&format!("{}\n", serde_json::to_string_pretty(&status)?));
            } else if status.servers.is_empty() {
                render::print_out("no MCP servers are configured ([mcp.servers.NAME])\n");
            } else {
                let shown: Vec<String> = status.servers.iter().map(describe).collect();
                render::print_out(&visible::block(&shown.join("")));
            }
            let all_ready = status.servers.iter().all(|server| server.state == "ready");
            Ok(if all_ready {
                Outcome::Success
            } else {
                Outcome::Failed
            })
        }
        McpCommand::Restart(args) => {
            let client = connect_plainly(&args.address, "toold mcp restart").await?;
            let restarted = client
                .call::<McpRestart>(McpRestartParams {
                    name: args.name.clone(),
                })
                .await;
            client.close();
            let restarted = restarted?;
            if args.json {
                render::print_out(&format!("{}\n", serde_json::to_string_pretty(&restarted)?));
            } else {
                render::print_out(&visible::block(&describe(&restarted)));
            }
            Ok(Outcome::Success)
        }
    }
}

/// A server in a few lines: `fs: ready (pid 123, stdio, protocol 2025-06-18), 14 tools`, then
/// its quarantined tools and its last error.
fn describe(server: &McpServerStatus) -> String {
    let mut facts = Vec::new();
    if let Some(pid) = server.pid {
        facts.push(format!("pid {pid}"));
    }
    facts.push(server.transport.clone());
    if let Some(version) = &server.protocol_version {
        facts.push(format!("protocol {version}"));
    }
    if server.restarts > 0 {
        facts.push(format!("{} restarts", server.restarts));
    }
    let mut text = format!(
        "{}: {} ({}), {} tools\n",
        server.name,
        server.state,
        facts.join(", "),
        server.tools.len()
    );
    for quarantined in &server.quarantined {
        text.push_str(&format!(
            "  quarantined {}: {}\n",
            quarantined.tool, quarantined.reason
        ));
    }
    if let Some(error) = &server.last_error {
        text.push_str(&format!("  last error: {error}\n"));
    }
    text
}
