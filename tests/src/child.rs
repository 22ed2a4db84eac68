//! Processes a test starts itself (a server, an agent, an editor, a daemon outside
//! [`crate::daemon::TestDaemon`]): killed when the test ends however it ends, waited for with
//! a bound, run to a successful end, and the paths they make waited for.

use std::path::Path;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

/// A child process of the test, killed (and reaped) when dropped if it still runs: a failing
/// test leaves none behind.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// How it exited, once it has, waiting up to `within`; `None` if it still runs.
    pub fn wait_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().expect("wait for the child") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Waits for it to end, successfully.
    pub fn finished(mut self) {
        let status = self.0.wait().expect("wait for the child");
        assert!(status.success(), "{status}");
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Waits up to [`crate::PATIENCE`] for `path` to exist.
pub fn wait_for_path(path: &Path) {
    crate::wait_until(&format!("{} to appear", path.display()), || path.exists());
}

/// Waits up to [`crate::PATIENCE`] for `path` to exist, which `maker` (named `what`) makes: the test
/// fails at once if `maker` exits first.
pub fn wait_for_path_made_by(path: &Path, maker: &mut Child, what: &str) {
    crate::wait_until(&format!("{what} to make {}", path.display()), || {
        if let Some(status) = maker.try_wait().expect("wait for the child") {
            panic!(
                "{what} exited with {status} before {} appeared",
                path.display()
            );
        }
        path.exists()
    });
}

/// What a process wrote on stdout, once it ended successfully within `within`; otherwise the
/// test fails naming `what`, with its stdout and stderr. `run` is the process's output (a
/// `tokio::process::Command`'s `output()`, best with `kill_on_drop`, or a child's
/// `wait_with_output()`).
pub async fn stdout_of_success(
    what: &str,
    within: Duration,
    run: impl Future<Output = std::io::Result<Output>>,
) -> String {
    let output = tokio::time::timeout(within, run)
        .await
        .unwrap_or_else(|_| panic!("{what} finished within {within:?}"))
        .unwrap_or_else(|error| panic!("run {what}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
