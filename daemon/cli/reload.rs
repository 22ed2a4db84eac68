//! `toold reload`: the daemon rereads its config file (`config/reload`, as SIGHUP does) and
//! says what changed, or why the file was refused and the running config kept.

use clap::Args;
use toold_client::protocol::methods::ConfigReload;
use toold_client::protocol::{ReloadParams, ReloadResult};
use toold_client::{Client, ClientError, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::{render, visible};

#[derive(Args, Debug)]
pub struct ReloadArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// Print the daemon's `config/reload` result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn reload(args: ReloadArgs) -> anyhow::Result<Outcome> {
    let options = ClientOptions::new("toold reload")
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(args.address.socket_path_despite_config_errors());
    let (client, _events) = Client::connect(options).await?;
    let reloaded = client.call::<ConfigReload>(ReloadParams {}).await;
    client.close();
    let result = match reloaded {
        Ok(result) => result,
        // Refused: the file's error, and exit 1 (the daemon was reached and kept its config).
        Err(ClientError::Rpc { message, .. }) => {
            eprintln!("toold: {}", visible::block(&message));
            return Ok(Outcome::Failed);
        }
        Err(err) => return Err(err.into()),
    };
    if args.json {
        render::print_out(&format!("{}\n", serde_json::to_string_pretty(&result)?));
    } else {
        render::print_out(&visible::block(&describe(&result)));
    }
    Ok(Outcome::Success)
}

fn describe(result: &ReloadResult) -> String {
    let mut text = format!(
        "reloaded {}\n",
        result
            .source
            .as_deref()
            .unwrap_or("(no config file: every default)")
    );
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    };
    text.push_str(&format!("  changed:          {}\n", list(&result.changed)));
    for (what, names) in [
        ("MCP started:", &result.mcp_started),
        ("MCP stopped:", &result.mcp_stopped),
        ("MCP restarted:", &result.mcp_restarted),
    ] {
        if !names.is_empty() {
            text.push_str(&format!("  {what:<17} {}\n", names.join(", ")));
        }
    }
    if !result.needs_restart.is_empty() {
        text.push_str(&format!(
            "  not applied until the daemon restarts: {}\n",
            result.needs_restart.join(", ")
        ));
    }
    for warning in &result.warnings {
        text.push_str(&format!("  warning: {warning}\n"));
    }
    text
}
