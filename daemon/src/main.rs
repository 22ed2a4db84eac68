//! The `toold` command: thin glue over the library. The socket server (`toold serve`) and the
//! client commands are being built on the tool runtime; today it tells its version and state.

use clap::Parser;

/// toold: the per-user daemon that executes AI agents' tool calls.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {}

fn main() {
    Cli::parse();
    eprintln!(
        "toold {}: the tool runtime is built; the socket server (`toold serve`) is not yet. See README.md.",
        env!("CARGO_PKG_VERSION")
    );
    std::process::exit(2);
}
