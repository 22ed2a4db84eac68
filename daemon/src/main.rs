//! The `toold` command: thin glue over the library. `toold serve` runs the daemon;
//! `toold check-config` validates a configuration file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// toold: the per-user daemon that executes AI agents' tool calls.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon on its Unix socket (or on a socket inherited from systemd).
    ///
    /// Example: toold serve --socket /tmp/toold-test/toold.sock
    Serve {
        /// The socket to listen on [default: $TOOLD_SOCKET, the config's `socket`, or
        /// $XDG_RUNTIME_DIR/toold/toold.sock]
        #[arg(long)]
        socket: Option<PathBuf>,
        /// The configuration file [default: $XDG_CONFIG_HOME/toold/config.toml]
        #[arg(long)]
        config: Option<PathBuf>,
        /// Run even as root (a daemon that executes a model's commands as root is rarely wanted).
        #[arg(long)]
        allow_root: bool,
    },
    /// Check a configuration file and say what is wrong with it, key by key.
    ///
    /// Example: toold check-config ~/.config/toold/config.toml
    CheckConfig {
        /// The file to check [default: $XDG_CONFIG_HOME/toold/config.toml]
        path: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { .. } => {
            eprintln!("toold serve: the socket server is being built; see README.md");
            ExitCode::from(2)
        }
        Command::CheckConfig { .. } => {
            eprintln!("toold check-config: the configuration module is being built; see README.md");
            ExitCode::from(2)
        }
    }
}
