//! The `toold` binary: the command line lives in the library (`toold::cli`).

fn main() -> std::process::ExitCode {
    toold::cli::main()
}
