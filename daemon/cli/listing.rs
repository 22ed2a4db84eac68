//! `toold tools`: what the daemon offers, as a table for people or as the JSON the daemon
//! answered; and the plain connection the asking subcommands share.

use clap::Args;
use toold_client::protocol::ToolsListParams;
use toold_client::{Client, ClientOptions};

use super::Outcome;
use super::address::DaemonAddress;
use super::render;

#[derive(Args, Debug)]
pub struct ToolsArgs {
    #[command(flatten)]
    pub address: DaemonAddress,
    /// List what this session's model may see (its allowed tools, its mode).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print the daemon's `tools/list` result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A connection that answers no requests: these commands only ask.
pub async fn connect_plainly(address: &DaemonAddress, name: &str) -> anyhow::Result<Client> {
    let options = ClientOptions::new(name)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_socket(address.socket_path()?);
    let (client, _events) = Client::connect(options).await?;
    Ok(client)
}

pub async fn tools(args: ToolsArgs) -> anyhow::Result<Outcome> {
    let client = connect_plainly(&args.address, "toold tools").await?;
    let listed = client
        .tools_list(ToolsListParams {
            session_id: args.session.clone(),
            ..ToolsListParams::default()
        })
        .await;
    client.close();
    let listed = listed?;
    if args.json {
        render::print_out(&format!("{}\n", serde_json::to_string_pretty(&listed)?));
    } else {
        render::print_out(&render::tools_table(&listed.tools));
    }
    Ok(Outcome::Success)
}
