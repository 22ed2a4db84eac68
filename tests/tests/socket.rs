//! The daemon's listening socket on real sockets in temp dirs: modes of the directory and the
//! socket, the directories and files refused, a stale socket replaced, a live one refused, and
//! the peer's uid.

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown, lchown};
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream as StdUnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;

use nix::unistd::geteuid;
use toold::server::socket::{SocketError, bind_listener, peer_allowed, peer_uid, refuse_root};
use toold_tests::PATIENCE;
use toold_tests::daemon::TestDaemon;

/// A temp dir the socket may live in: tempfile creates it with the umask's mode (often 0755).
fn private_temp_dir() -> tempfile::TempDir {
    let temp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(temp.path(), fs::Permissions::from_mode(0o700)).expect("chmod 700");
    temp
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o7777
}

#[tokio::test]
async fn the_directory_is_created_0700_and_the_socket_is_0600() {
    let temp = private_temp_dir();
    let socket = temp.path().join("run/toold/toold.sock");
    let listener = bind_listener(&socket).expect("bind");
    assert_eq!(
        mode(&temp.path().join("run")),
        0o700,
        "a missing parent too"
    );
    assert_eq!(mode(&temp.path().join("run/toold")), 0o700);
    assert_eq!(mode(&socket), 0o600);

    let client = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    assert_eq!(peer_uid(&server).expect("peer uid"), geteuid().as_raw());
    assert!(peer_allowed(&server));
    assert!(peer_allowed(&client));
}

#[tokio::test]
async fn a_directory_open_to_others_is_refused() {
    let temp = private_temp_dir();
    let dir = temp.path().join("open");
    fs::create_dir(&dir).expect("mkdir");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    let error = bind_listener(&dir.join("toold.sock")).unwrap_err();
    assert!(
        matches!(error, SocketError::DirectoryTooOpen { mode: 0o755, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("chmod 700 {}", dir.display())),
        "{message}"
    );
    assert!(!dir.join("toold.sock").exists());
}

#[tokio::test]
async fn a_directory_of_another_user_is_refused() {
    let temp = private_temp_dir();
    // As root, hand a private directory to `nobody`; as anyone else, `/` is root's.
    let dir = if geteuid().is_root() {
        let dir = temp.path().join("theirs");
        fs::create_dir(&dir).expect("mkdir");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        chown(&dir, Some(65534), Some(65534)).expect("chown to nobody");
        dir
    } else {
        Path::new("/").to_path_buf()
    };
    let error = bind_listener(&dir.join("toold.sock")).unwrap_err();
    assert!(
        matches!(error, SocketError::DirectoryNotOwned { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("--socket"), "{error}");
}

#[tokio::test]
async fn a_directory_symlink_planted_by_another_user_is_refused() {
    // Only root can make a symlink that belongs to someone else.
    if !toold_tests::require::root("a_directory_symlink_planted_by_another_user_is_refused") {
        return;
    }
    let temp = private_temp_dir();
    let ours = temp.path().join("ours");
    fs::create_dir(&ours).expect("mkdir");
    fs::set_permissions(&ours, fs::Permissions::from_mode(0o700)).expect("chmod");
    let planted = temp.path().join("planted");
    std::os::unix::fs::symlink(&ours, &planted).expect("symlink");
    lchown(&planted, Some(65534), Some(65534)).expect("lchown to nobody");
    let error = bind_listener(&planted.join("toold.sock")).unwrap_err();
    assert!(
        matches!(error, SocketError::DirectoryNotOwned { owner: 65534, .. }),
        "{error:?}"
    );
    assert!(!ours.join("toold.sock").exists());
}

#[tokio::test]
async fn a_regular_file_at_the_path_is_refused_and_kept() {
    let temp = private_temp_dir();
    let path = temp.path().join("toold.sock");
    fs::write(&path, "not a socket").expect("write");
    let error = bind_listener(&path).unwrap_err();
    assert!(matches!(error, SocketError::NotASocket { .. }), "{error:?}");
    assert_eq!(fs::read_to_string(&path).expect("read"), "not a socket");
}

#[tokio::test]
async fn a_symlink_at_the_path_is_refused() {
    let temp = private_temp_dir();
    let elsewhere = temp.path().join("elsewhere.sock");
    let _listener = StdUnixListener::bind(&elsewhere).expect("bind elsewhere");
    let path = temp.path().join("toold.sock");
    std::os::unix::fs::symlink(&elsewhere, &path).expect("symlink");
    let error = bind_listener(&path).unwrap_err();
    assert!(matches!(error, SocketError::NotASocket { .. }), "{error:?}");
}

#[tokio::test]
async fn a_stale_socket_is_replaced() {
    let temp = private_temp_dir();
    let path = temp.path().join("toold.sock");
    drop(StdUnixListener::bind(&path).expect("bind the soon stale socket"));
    assert!(path.exists(), "closing a listener leaves its file behind");

    let listener = bind_listener(&path).expect("bind over the stale socket");
    assert_eq!(mode(&path), 0o600);
    let _client = StdUnixStream::connect(&path).expect("connect");
    listener.accept().await.expect("the new listener accepts");
}

#[tokio::test]
async fn a_live_daemon_is_not_replaced() {
    let temp = private_temp_dir();
    let path = temp.path().join("toold.sock");
    let first = bind_listener(&path).expect("first bind");
    let error = bind_listener(&path).unwrap_err();
    assert!(
        matches!(error, SocketError::AlreadyServing { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&format!(
            "another toold is already serving on {}",
            path.display()
        )),
        "{error}"
    );
    // The first daemon still serves.
    let _client = StdUnixStream::connect(&path).expect("connect");
    first.accept().await.expect("the first listener accepts");
}

#[tokio::test]
async fn a_path_too_long_for_a_socket_is_refused_before_anything_is_created() {
    let temp = private_temp_dir();
    let dir = temp.path().join("d".repeat(120));
    let error = bind_listener(&dir.join("toold.sock")).unwrap_err();
    assert!(
        matches!(error, SocketError::PathTooLong { .. }),
        "{error:?}"
    );
    assert!(!dir.exists());
}

#[test]
fn root_needs_allow_root() {
    assert!(refuse_root(true).is_ok());
    let refused = refuse_root(false);
    assert_eq!(refused.is_err(), geteuid().is_root(), "{refused:?}");
    if let Err(error) = refused {
        assert!(error.to_string().contains("--allow-root"), "{error}");
    }
}

/// The uid and gid of `nobody`.
const NOBODY: u32 = 65534;

/// Starts a copy of this test binary in `dir` (where `nobody` may run it: the target directory
/// may be private) as `nobody`, to run `test` alone with `env` set; its stdout piped.
fn spawn_as_nobody(dir: &Path, test: &str, env: (&str, &Path)) -> std::process::Child {
    let copy = dir.join("socket-test");
    fs::copy(std::env::current_exe().expect("current_exe"), &copy).expect("copy the test");
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).expect("chmod 755");
    let mut command = std::process::Command::new(&copy);
    command
        .args(["--exact", test, "--nocapture"])
        .env(env.0, env.1)
        .stdout(std::process::Stdio::piped())
        .uid(NOBODY)
        .gid(NOBODY);
    // Another test of this process forking meanwhile may hold the copy's descriptor (open for
    // writing, close-on-exec) until its child execs: the kernel then refuses to run the copy
    // with ETXTBSY for that moment.
    let mut busy = 0;
    loop {
        match command.spawn() {
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy && busy < 100 => {
                busy += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            spawned => return spawned.expect("run the test as nobody"),
        }
    }
}

/// A peer of another user is told apart by its credentials. Only root can be another user, so
/// the test runs a copy of itself as `nobody` to connect; as anyone else it cannot switch users
/// and checks nothing more than the tests above.
#[tokio::test]
async fn a_peer_of_another_user_is_not_allowed() {
    const INNER: &str = "TOOLD_TEST_CONNECT_TO";
    if let Some(path) = std::env::var_os(INNER) {
        let mut stream = StdUnixStream::connect(path).expect("connect as nobody");
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stream, &mut rest).expect("read until closed");
        return;
    }
    if !toold_tests::require::root("a_peer_of_another_user_is_not_allowed") {
        return;
    }
    // Bound directly, not with bind_listener: nobody must be able to reach this socket.
    let temp = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(temp.path(), fs::Permissions::from_mode(0o755)).expect("chmod 755");
    let path = temp.path().join("open.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o777)).expect("chmod 777");

    let inner = spawn_as_nobody(
        temp.path(),
        "a_peer_of_another_user_is_not_allowed",
        (INNER, &path),
    );
    let (server, _) = tokio::time::timeout(PATIENCE, listener.accept())
        .await
        .expect("nobody connected within 30 s")
        .expect("accept");
    assert_eq!(peer_uid(&server).expect("peer uid"), NOBODY);
    assert!(!peer_allowed(&server));
    drop(server);
    let output = inner.wait_with_output().expect("wait");
    assert!(
        output.status.success(),
        "the inner test failed: {}",
        output.status
    );
}

/// The real daemon, its socket and directory then forced open to everyone: a client running as
/// `nobody` is disconnected without a byte read or written (its `initialize` goes unanswered),
/// while the daemon's own user is served. Runs fully only as root (it switches to `nobody`).
#[tokio::test]
async fn the_daemon_refuses_a_client_of_another_user_even_on_an_open_socket() {
    const INNER: &str = "TOOLD_TEST_DAEMON_AS_NOBODY";
    if let Some(path) = std::env::var_os(INNER) {
        let mut stream = StdUnixStream::connect(path).expect("connect as nobody");
        // A daemon that served nobody would keep the connection open: stop waiting, then look.
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("a read timeout");
        // The daemon may close before or after this write; either way nothing comes back.
        let _ = std::io::Write::write_all(
            &mut stream,
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1,\"capabilities\":{}}}\n",
        );
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stream, &mut rest);
        assert!(
            rest.is_empty(),
            "nobody was answered: {}",
            String::from_utf8_lossy(&rest)
        );
        return;
    }
    if !toold_tests::require::root(
        "the_daemon_refuses_a_client_of_another_user_even_on_an_open_socket",
    ) {
        return;
    }
    let daemon = toold_tests::daemon::TestDaemon::start();
    let socket = daemon.socket();
    // Forced open after the start: every directory on the way and the socket itself.
    let mut dir = socket
        .parent()
        .expect("the socket's directory")
        .to_path_buf();
    fs::set_permissions(&socket, fs::Permissions::from_mode(0o777)).expect("chmod 777");
    while dir != daemon.root().parent().expect("the temp root's parent") {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod 755");
        dir = dir.parent().expect("a parent").to_path_buf();
    }
    let inner = spawn_as_nobody(
        daemon.root(),
        "the_daemon_refuses_a_client_of_another_user_even_on_an_open_socket",
        (INNER, &socket),
    )
    .wait_with_output()
    .expect("wait");
    assert!(
        inner.status.success(),
        "the inner test failed: {}\n{}",
        inner.status,
        String::from_utf8_lossy(&inner.stdout)
    );
    // The daemon's own user is still served.
    let client = daemon
        .connect(serde_json::json!({}), toold_tests::daemon::no_answers())
        .await;
    client
        .request("session/list", serde_json::json!({}))
        .await
        .expect("the daemon's user is served");
}

/// A daemon stopped cleanly removes its socket file (nothing dead is left to connect to); one
/// killed leaves it behind, and the next start replaces it.
#[test]
fn a_clean_stop_removes_the_socket_file_and_a_killed_daemon_s_is_replaced() {
    let mut daemon = TestDaemon::start();
    let socket = daemon.socket();
    assert!(fs::symlink_metadata(&socket).is_ok());
    let status = daemon.stop();
    assert!(status.success(), "{status}");
    assert!(
        fs::symlink_metadata(&socket).is_err(),
        "the socket file outlived a clean stop"
    );

    daemon.start_again();
    daemon.kill();
    assert!(
        fs::symlink_metadata(&socket).is_ok(),
        "a killed daemon cannot remove its socket"
    );
    daemon.start_again();
    StdUnixStream::connect(&socket).expect("the new daemon listens on the replaced socket");
}
