//! A session's commands see a `/tmp` and a `/dev/shm` of the session's own: what they write
//! there is not in the host's, stays for the session's later calls, is not seen by another
//! session, and goes when the session is closed; what the host's `/tmp` holds — other
//! programs' files and sockets — is out of their reach.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use toold_tests::daemon::TestDaemon;

use super::{Places, connected, output, run, session};

#[tokio::test]
async fn each_session_has_a_tmp_of_its_own_for_as_long_as_it_lives() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let tag = std::process::id();
    // The host's `/tmp`: a file and a listening socket of another program.
    let host_file = Path::new("/tmp").join(format!("toold-host-file-{tag}"));
    std::fs::write(&host_file, "the host's\n").unwrap();
    let host_socket = Path::new("/tmp").join(format!("toold-host-{tag}.sock"));
    let _ = std::fs::remove_file(&host_socket);
    let listener = std::os::unix::net::UnixListener::bind(&host_socket).unwrap();
    listener.set_nonblocking(true).unwrap();

    let first = session(&client, &places.project, json!({})).await;
    let written = run(
        &client,
        &first,
        &format!(
            "echo a > /tmp/mine-{tag} && echo s > /dev/shm/mine-{tag} && mktemp && echo $TMPDIR"
        ),
    )
    .await;
    assert_eq!(written["ok"], json!(true), "{written}");
    let printed = output(&written);
    assert!(
        printed.starts_with("/tmp/tmp.") && printed.ends_with("\n/tmp\n"),
        "{written}"
    );
    for host in ["/tmp", "/dev/shm"] {
        let path = Path::new(host).join(format!("mine-{tag}"));
        assert!(!path.exists(), "written to the host's {}", path.display());
    }
    // Kept for the session's next call.
    let again = run(
        &client,
        &first,
        &format!("cat /tmp/mine-{tag} /dev/shm/mine-{tag}"),
    )
    .await;
    assert_eq!(output(&again), "a\ns\n", "{again}");
    // The host's `/tmp` is not there: not its files, not its sockets.
    for line in [
        format!("cat {}", host_file.display()),
        format!("ls {}", host_socket.display()),
        format!(
            "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
            host_socket.display()
        ),
    ] {
        let result = run(&client, &first, &line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    assert!(
        listener.accept().is_err(),
        "a command reached the host's socket"
    );
    // Writing the same path writes the session's own.
    let shadowed = run(
        &client,
        &first,
        &format!("echo x > {}", host_file.display()),
    )
    .await;
    assert_eq!(shadowed["ok"], json!(true), "{shadowed}");
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "the host's\n");
    // Another session has its own.
    let second = session(&client, &places.project, json!({})).await;
    let other = run(&client, &second, &format!("cat /tmp/mine-{tag}")).await;
    assert_eq!(other["ok"], json!(false), "{other}");

    // Closed, the session's `/tmp` goes.
    let private = daemon.root().join("state/toold/tmp").join(&first);
    assert!(
        private.join(format!("tmp/mine-{tag}")).exists(),
        "{}",
        private.display()
    );
    client
        .request("session/close", json!({"session_id": first}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while private.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !private.exists(),
        "{} outlived its session",
        private.display()
    );
    std::fs::remove_file(&host_file).unwrap();
    std::fs::remove_file(&host_socket).unwrap();
}

/// A session's `/tmp` survives a restart of the daemon with the session, and one whose
/// session is gone is removed when the daemon starts.
#[tokio::test]
async fn a_sessions_tmp_outlives_a_restart_with_it() {
    let mut daemon = TestDaemon::start();
    let places = Places::new();
    let session_id = {
        let client = connected(&daemon).await;
        let id = session(&client, &places.project, json!({})).await;
        let result = run(&client, &id, "echo kept > /tmp/kept").await;
        assert_eq!(result["ok"], json!(true), "{result}");
        id
    };
    let orphan = daemon.root().join("state/toold/tmp/s_999_deadbeef");
    std::fs::create_dir_all(orphan.join("tmp")).unwrap();
    daemon.stop();
    daemon.start_again();
    let client = connected(&daemon).await;
    let result = run(&client, &session_id, "cat /tmp/kept").await;
    assert_eq!(output(&result), "kept\n", "{result}");
    assert!(!orphan.exists(), "the /tmp of a session that is gone");
}
