//! What some tests need that a fresh machine may lack (a program such as
//! `systemd-socket-activate`, `rg`, `fd`, `git` or `node`; running as root): found, or the test
//! says on stderr that it was skipped and why, and passes. Under [`REQUIRE_ALL`]`=1`, which
//! `.ci/run` sets after installing everything, a missing requirement fails the test instead,
//! so that CI never hides a skipped test.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable that turns a missing requirement from a skip into a failure.
pub const REQUIRE_ALL: &str = "TOOLD_TESTS_REQUIRE_ALL";

/// The path of the program `name`: found on `PATH`, else at the first of `places` that is a
/// file (some packages put programs outside `PATH`, such as systemd's under `/lib/systemd`).
/// `None` (after saying so) when it is nowhere; `install` says how to get it.
pub fn program(test: &str, name: &str, places: &[&str], install: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .chain(places.iter().map(PathBuf::from))
        .find(|candidate| is_executable_file(candidate));
    if found.is_none() {
        missing(
            test,
            &format!("the program {name} is not installed ({install})"),
        );
    }
    found
}

/// Whether the test runs as root; says so when it does not.
pub fn root(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        missing(test, "it runs only as root (it acts as another user)");
    }
    root
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// Fails the test under [`REQUIRE_ALL`], else says it was skipped. Written to stderr directly,
/// not with `eprintln!`, which the test harness captures and shows only for a failing test.
fn missing(test: &str, why: &str) {
    if std::env::var_os(REQUIRE_ALL).is_some_and(|value| value == "1") {
        panic!("{test}: {why}, and {REQUIRE_ALL}=1 makes that a failure");
    }
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: {why} (with {REQUIRE_ALL}=1 this fails instead)"
    );
}

/// Whether the file `path` exists; says so when it does not (`install` says how to get it).
pub fn file(test: &str, path: &Path, install: &str) -> bool {
    let found = path.exists();
    if !found {
        missing(
            test,
            &format!("{} is not there ({install})", path.display()),
        );
    }
    found
}
