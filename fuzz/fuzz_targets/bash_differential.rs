//! Fuzz target for the command-line analysis against real bash: an arbitrary line that the
//! engine allows under `run_command(echo *)` and `run_command(git status)` is run by bash under
//! strace with a `PATH` of stubs (tests/src/bash_trace.rs, included here so that this crate
//! needs no dependency on the tests crate).
//!
//! Invariant: bash runs no program, looks up no command and writes no file that the analysis
//! did not list. Without strace every input is skipped.
#![no_main]

#[path = "parser_panics.rs"]
mod parser_panics;

// Only part of the tracer is used here; the rest serves the tests crate.
#[allow(dead_code)]
#[path = "../../tests/src/bash_trace.rs"]
mod bash_trace;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// The stub directory, or `None` when strace is not installed.
fn stubs() -> Option<&'static bash_trace::Stubs> {
    static STUBS: OnceLock<Option<bash_trace::Stubs>> = OnceLock::new();
    STUBS
        .get_or_init(|| {
            if bash_trace::find_program("strace").is_none() {
                eprintln!("bash_differential: strace is not installed; every input is skipped");
                return None;
            }
            Some(bash_trace::Stubs::new().expect("the stub directory"))
        })
        .as_ref()
}

fuzz_target!(|data: &[u8]| {
    parser_panics::leave_parser_panics_to_toold();
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Some(stubs) = stubs() else {
        return;
    };
    let found = match bash_trace::check(line, stubs) {
        Ok(Some((_, found))) => found,
        Ok(None) => return,
        Err(error) => panic!("strace could not trace bash (is ptrace permitted?): {error}"),
    };
    let found: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "allowed {line:?}, and bash did what the analysis missed: {}",
        found.join("; ")
    );
});
