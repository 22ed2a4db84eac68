//! The tag every process of one tree carries in its environment ([`RUN_TAG_VAR`]): a value
//! unique to the call, and the command that starts a program beside calls with its own tag.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use super::reap::ensure_subreaper;

/// The environment variable that tags every process of one `run_command` call.
pub(crate) const RUN_TAG_VAR: &str = "TOOLD_RUN_TAG";

/// A value for [`RUN_TAG_VAR`] unique to one call: unique within the daemon by the counter,
/// across daemons by the pid and the clock.
pub(crate) fn new_run_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let serial = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or_default();
    format!("{}-{serial}-{nanos:x}", std::process::id())
}

/// The command for a program the daemon runs beside calls (a hook, an MCP server): started
/// directly (no shell) with `env` only and the tag of its own tree, its stdio piped, in a
/// process group of its own, killed if dropped. The daemon is made a child subreaper first, so
/// that whatever the program leaves behind stays findable by its tree's sweep.
pub(crate) fn tagged_command<K, V>(
    program: &str,
    env: impl IntoIterator<Item = (K, V)>,
    tag: &str,
) -> tokio::process::Command
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    ensure_subreaper();
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .envs(env)
        .env(RUN_TAG_VAR, tag)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_tags_are_unique() {
        assert_ne!(new_run_tag(), new_run_tag());
    }
}
