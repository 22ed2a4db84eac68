//! The `toold` command line: `serve` runs the daemon, `check-config` validates a configuration
//! file, `connect` bridges stdio to the daemon, `completions` prints shell completions. The edge
//! of the program: errors become messages and exit codes here.
//!
//! Exit codes of the subcommands that talk to the daemon: 0 when everything asked for
//! succeeded, 1 when a tool call ended with a failed result (or the daemon is not up, for
//! `status`), 2 on a usage error or when the daemon cannot be reached.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod address;
mod connect;
mod serve;

/// toold: the per-user daemon that executes AI agents' tool calls.
#[derive(Parser)]
#[command(name = "toold", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon on its Unix socket (or on a socket inherited from systemd).
    ///
    /// Logs go to stderr; TOOLD_LOG sets the filter (RUST_LOG syntax, default "info").
    ///
    /// Example: toold serve --socket /tmp/toold-test/toold.sock
    Serve {
        /// The socket to listen on [default: $TOOLD_SOCKET, the config's `socket`, or
        /// $XDG_RUNTIME_DIR/toold/toold.sock]
        #[arg(long)]
        socket: Option<std::path::PathBuf>,
        /// The configuration file [default: $XDG_CONFIG_HOME/toold/config.toml]
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Run even as root (a daemon that executes a model's commands as root is rarely wanted).
        #[arg(long)]
        allow_root: bool,
    },
    /// Check a configuration file and say what is wrong with it, key by key.
    ///
    /// Example: toold check-config ~/.config/toold/config.toml
    CheckConfig {
        /// The file to check [default: $XDG_CONFIG_HOME/toold/config.toml]
        path: Option<std::path::PathBuf>,
    },
    /// Bridge stdin and stdout to the daemon's socket, starting the daemon if none answers.
    ///
    /// Bytes are copied both ways unchanged (NDJSON or Content-Length framing alike) until
    /// either side closes; the end of stdin closes the connection. For editors and agents that
    /// can only spawn a process.
    ///
    /// Example: printf '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}\n' | toold connect
    Connect(connect::ConnectArgs),
    /// Print a completion script for a shell.
    ///
    /// Example: toold completions bash > ~/.local/share/bash-completion/completions/toold
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// What a subcommand that talks to the daemon reports through its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Exit 0: everything asked for succeeded.
    Success,
    /// Exit 1: a call failed, or the daemon is not up.
    Failed,
}

/// Exit 2: the command could not do what was asked (usage, connection, a protocol error).
const EXIT_ERROR: u8 = 2;

/// Runs the `toold` command with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            socket,
            config,
            allow_root,
        } => daemon_side(serve::serve(socket, config, allow_root)),
        Command::CheckConfig { path } => daemon_side(
            crate::config::check_config(path.as_deref())
                .map(|summary| println!("{summary}"))
                .map_err(anyhow::Error::from),
        ),
        Command::Connect(args) => client_side(connect::connect(&args).map(|()| Outcome::Success)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "toold", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    }
}

/// `serve` and `check-config`: 0, or 1 with the error.
fn daemon_side(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toold: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The client subcommands: 0, 1, or 2 with the error.
fn client_side(outcome: anyhow::Result<Outcome>) -> ExitCode {
    match outcome {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("toold: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
