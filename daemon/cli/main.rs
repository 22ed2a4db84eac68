//! The `toold` binary, its command line: `serve` runs the daemon (the library's
//! [`toold::serve`]), `check-config` validates a configuration
//! file, `connect` bridges stdio to the daemon; `call`, `exec`, `tools`, `sessions`,
//! `status`, `reload`, `watch` and `mcp` talk to it through `toold-client`; `import` reads other
//! agents' permission settings as toold config; `completions` prints shell completions. The
//! edge of the program: errors become messages and exit codes here.
//!
//! Exit codes of the subcommands that talk to the daemon: 0 when everything asked for
//! succeeded, 1 when a tool call ended with a failed result (or the daemon is not up, for
//! `status`), 2 on a usage error or when the daemon cannot be reached.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod address;
mod approve;
mod audit;
mod batch_run;
mod call;
mod connect;
mod exec;
mod explain;
mod import;
mod listing;
mod mcp;
mod mcp_serve;
mod preview;
mod reload;
mod render;
mod rules;
mod sessions;
mod status;
mod visible;
mod watch;

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
        /// Log to this file instead of stderr (rotated past 8 MiB to FILE.1); what `toold
        /// connect` and `toold mcp serve` give a daemon they start: $XDG_STATE_HOME/toold/toold.log
        #[arg(long, value_name = "FILE")]
        log_file: Option<std::path::PathBuf>,
    },
    /// Check a configuration file and say what is wrong with it, key by key.
    ///
    /// The whole file is checked: every error is printed, in file order, one line each as
    /// FILE:LINE:COLUMN: KEY: REASON, and the exit status is 1 when there is any. A valid
    /// file gets a summary of what it sets and its warnings (values that are valid but most
    /// likely not what was meant).
    ///
    /// With --json, one JSON object goes to stdout, whatever the outcome:
    /// {"file": PATH or null, "valid": BOOL, "errors": [{"line", "column", "key", "reason"}],
    /// "warnings": [the same], "summary": TEXT or null}; line, column and key are null when
    /// the whole file is at fault (unreadable, not TOML without a position), and summary is
    /// null for a refused file.
    ///
    /// Example: toold check-config ~/.config/toold/config.toml
    CheckConfig {
        /// The file to check [default: $XDG_CONFIG_HOME/toold/config.toml]
        path: Option<std::path::PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Bridge stdin and stdout to the daemon's socket, starting the daemon if none answers.
    ///
    /// Bytes are copied both ways unchanged (NDJSON or Content-Length framing alike) until
    /// either side closes; the end of stdin closes the connection. For editors and agents that
    /// can only spawn a process.
    ///
    /// Example: printf '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol_version":1}}\n' | toold connect
    Connect(connect::ConnectArgs),
    /// Run one tool call in a fresh session and print its result.
    ///
    /// run_command's output is streamed as it comes; then the content goes to stdout and one
    /// status line (✓ or ✗) to stderr; with --json, the result object goes to stdout. A call
    /// that needs approval is asked on the terminal ([y] once / [s] session / [p] always in
    /// this project / [n] deny / [d] deny always / [a] abort); without a terminal it is denied unless --yes. Exit code: 0 when the result
    /// is ok, 1 when it failed, 2 when the call could not be made.
    ///
    /// Example: toold call run_command '{"command":"cargo test"}' --cwd ~/src/project
    Call(call::CallArgs),
    /// Run a batch of calls from a JSON file (or stdin) and print its events as they come.
    ///
    /// The file holds a list of calls: [{"id":"a","name":"read_file","arguments":{"path":"README.md"}}, …];
    /// ids are generated when absent. With --json, each event is one JSON line, then the
    /// tools/execute result. Approvals as for `call`. Exit code: 0 when every call is ok, 1 when
    /// one failed, 2 when the batch could not run.
    ///
    /// Example: toold exec calls.json --json
    Exec(exec::ExecArgs),
    /// List the tools the daemon offers (or that a session's model may see).
    ///
    /// Example: toold tools --session s_0123456789abcdef
    Tools(listing::ToolsArgs),
    /// List the daemon's sessions; `new` creates one (printing its id), `close` closes some.
    ///
    /// Examples:
    ///   toold sessions --json
    ///   id=$(toold sessions new --cwd ~/src/app --mode plan --title 'by hand')
    ///   toold sessions close "$id"
    #[command(verbatim_doc_comment)]
    Sessions(sessions::SessionsArgs),
    /// Say whether the daemon is up, with its version, socket, sessions and uptime.
    ///
    /// Exit code: 0 when it is up, 1 when it is not.
    ///
    /// Example: toold status --socket /tmp/toold-test/toold.sock
    Status(status::StatusArgs),
    /// Make the daemon read its config file again (as SIGHUP does): rules, hooks, limits and
    /// MCP servers take effect; a file with an error is refused and the running config kept.
    ///
    /// Exit code: 0 when reloaded, 1 when the file was refused, 2 when the daemon cannot be
    /// reached.
    ///
    /// Example: toold reload
    Reload(reload::ReloadArgs),
    /// Say how a call would be decided, and why: allowed, asked or denied, by which rule from
    /// which file, the paths and commands as judged, and what to add to change it. Nothing
    /// runs and nobody is asked.
    ///
    /// Exit code: 0 when the call would be allowed, 1 when not, 2 when it cannot be explained.
    ///
    /// Example: toold explain run_command '{"command":"rm -rf build"}' --cwd ~/src/project
    Explain(explain::ExplainArgs),
    /// List every permission rule in force for a project, with where it comes from (the
    /// config file and line, a project's table, a live session's rules, its grants); `remove`
    /// takes one out of the config file.
    ///
    /// Example: toold rules --project ~/src/app
    Rules(rules::RulesArgs),
    /// Read another agent's permission settings (Claude Code's, Codex's) as toold config:
    /// printed as TOML, or merged into the config file with --write. What cannot be mapped is
    /// listed on stderr with why.
    ///
    /// Exit code: 0 when everything was imported, 1 when an entry was dropped, 2 on a usage
    /// error or a file that cannot be read.
    ///
    /// Example: toold import claude --write
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Print the audit log, newest last: every call with its decision (and who made it) and
    /// outcome, every session change; `toold audit verify` checks its hash chain.
    ///
    /// Example: toold audit --since 1h --session s_0123456789abcdef
    Audit(audit::AuditArgs),
    /// Follow sessions' events live (calls, output, results, approvals) and, on a terminal,
    /// answer the watched session's approvals.
    ///
    /// By default it watches the newest live session, then each session created after it
    /// (switching to it, saying so on stderr), and waits for the next when its session closes,
    /// until Ctrl-C or SIGTERM; started before any session, it waits for the first. With
    /// --session ID it watches that session only and ends when it closes.
    ///
    /// Examples:
    ///   toold watch                       # start it, then the MCP host
    ///   toold watch --session s_0123456789abcdef
    ///   toold watch --json
    #[command(verbatim_doc_comment)]
    Watch(watch::WatchArgs),
    /// The daemon's MCP servers: `status` lists them, `restart NAME` starts one again; and
    /// `serve`, toold as an MCP server on stdio for MCP hosts.
    ///
    /// Example: toold mcp status
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
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
fn main() -> ExitCode {
    // The daemon's shell parser workers are this binary too (`shell::isolated`); they start
    // before the command line is parsed, and no user types this argument.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            toold::shell::isolated::WORKER_ARGUMENT,
        ))
    {
        return toold::shell::isolated::worker_main();
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            socket,
            config,
            allow_root,
            log_file,
        } => daemon_side(
            toold::serve::serve(toold::serve::ServeArgs {
                socket,
                config,
                allow_root,
                log_file,
            })
            .map_err(anyhow::Error::from),
        ),
        Command::CheckConfig { path, json: false } => {
            match toold::config::check_config(path.as_deref()) {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    // One line each, as every other error of toold's is shown.
                    for fault in error.all() {
                        eprintln!("toold: {}", fault.one_line());
                    }
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { path, json: true } => {
            let report = toold::config::check_config_json(path.as_deref());
            println!("{report:#}");
            if report["valid"] == true {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Command::Connect(args) => client_side(connect::connect(&args).map(|()| Outcome::Success)),
        Command::Call(args) => client_side(on_runtime(call::call(args))),
        Command::Exec(args) => client_side(on_runtime(exec::exec(args))),
        Command::Tools(args) => client_side(on_runtime(listing::tools(args))),
        Command::Sessions(args) => client_side(on_runtime(sessions::sessions(args))),
        Command::Status(args) => client_side(on_runtime(status::status(args))),
        Command::Reload(args) => client_side(on_runtime(reload::reload(args))),
        Command::Mcp(command) => client_side(on_runtime(mcp::mcp(command))),
        Command::Watch(args) => client_side(on_runtime(watch::watch(args))),
        Command::Explain(args) => client_side(on_runtime(explain::explain(args))),
        Command::Audit(args) => client_side(audit::audit(args)),
        Command::Rules(args) => client_side(on_runtime(rules::rules(args))),
        Command::Import(command) => client_side(import::import(command)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "toold", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
    }
}

/// Runs a client subcommand on a runtime of its own. One thread is plenty for one connection.
fn on_runtime(
    command: impl std::future::Future<Output = anyhow::Result<Outcome>>,
) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| anyhow::anyhow!("cannot start the runtime: {error}"))?;
    let outcome = runtime.block_on(command);
    // An approval prompt still reading the terminal (its call was settled elsewhere) must not
    // keep the process alive.
    runtime.shutdown_background();
    outcome
}

/// `serve`: 0, or 1 with the error.
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
            // The error may quote the daemon or the model.
            eprintln!("toold: {}", visible::block(&format!("{err:#}")));
            ExitCode::from(EXIT_ERROR)
        }
    }
}
