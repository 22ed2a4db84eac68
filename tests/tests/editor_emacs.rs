//! toold.el (`client/emacs/`) in a real Emacs (`--batch`, ERT) against the real daemon,
//! through the scenario of `toold_tests::editor` (approvals with their previews in `diff-mode`,
//! answered as a person would through `completing-read`, stubbed by
//! `tests/editors/emacs_driver.el`; live output; a daemon restart).

use std::process::{Command, Stdio};

use toold_tests::editor::{ANSWERS, approve_from_the_editor, repository};
use toold_tests::require;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emacs_watches_and_approves_with_previews_and_survives_a_restart() {
    let Some(emacs) = require::program("editor_emacs", "emacs", &[], "apt-get install emacs-nox")
    else {
        return;
    };
    approve_from_the_editor(|daemon, session, dir| {
        Command::new(&emacs)
            .args(["--batch", "-Q", "-L"])
            .arg(repository().join("client/emacs"))
            .arg("-l")
            .arg(repository().join("tests/editors/emacs_driver.el"))
            .args(["-f", "ert-run-tests-batch-and-exit"])
            .env("TOOLD_SOCKET", daemon.socket())
            .env("TOOLD_TEST_SESSION", session)
            .env("TOOLD_TEST_DIR", dir)
            .env("TOOLD_TEST_ANSWERS", ANSWERS)
            .stdin(Stdio::null())
            .spawn()
            .expect("start emacs")
    })
    .await;
}
