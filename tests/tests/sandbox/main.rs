//! The command sandbox, end to end on the real daemon, real bash and the real kernel: what a
//! command of each mode can and cannot write, reach on the network, do to the daemon (its
//! socket, signals, tracing, environment), with every tier of the daemon socket's protection
//! exercised (the lower ones on a kernel made to seem to lack user namespaces or Landlock by
//! `without-kernel-features`). Each test checks effects — files unchanged, listeners that got
//! nothing, sessions not created — not only the errors.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use toold_tests::daemon::{TestClient, TestDaemon, no_answers};
use toold_tests::require;

/// A project (the session's root, a git repository), a directory outside every writable
/// place (under the build's own temp directory, not `/tmp`, which commands may write), and a
/// symlink in the project that leads there.
struct Places {
    _project_dir: tempfile::TempDir,
    _outside_dir: tempfile::TempDir,
    project: PathBuf,
    outside: PathBuf,
}

impl Places {
    fn new() -> Self {
        let project_dir = tempfile::tempdir().unwrap();
        let project = project_dir.path().canonicalize().unwrap();
        let outside_dir = tempfile::tempdir_in(outside_base()).unwrap();
        let outside = outside_dir.path().canonicalize().unwrap();
        std::fs::write(outside.join("keep.txt"), "kept\n").unwrap();
        std::fs::create_dir(outside.join("dir")).unwrap();
        std::fs::write(project.join("keep.txt"), "kept\n").unwrap();
        std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
        Self {
            _project_dir: project_dir,
            _outside_dir: outside_dir,
            project,
            outside,
        }
    }

    /// Every entry under `dir` with the content of each file: any change is an effect.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
        let mut entries = BTreeMap::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(current) = pending.pop() {
            for entry in std::fs::read_dir(&current).unwrap().flatten() {
                let path = entry.path();
                let kind = entry.file_type().unwrap();
                let content = if kind.is_dir() {
                    pending.push(path.clone());
                    "<dir>".to_owned()
                } else if kind.is_symlink() {
                    format!("-> {:?}", std::fs::read_link(&path).unwrap())
                } else {
                    std::fs::read_to_string(&path).unwrap_or_default()
                };
                entries.insert(path, content);
            }
        }
        entries
    }
}

/// A directory outside every place a sandboxed command may write (`/tmp`, `$TMPDIR`,
/// `/dev/shm`, the roots): `/var/tmp`, else the build's own temp directory, else `$HOME`,
/// whichever is first to lie outside them (a checkout under `/tmp` puts the build's there).
fn outside_base() -> PathBuf {
    let writable: Vec<PathBuf> = ["/tmp", "/dev/shm"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .filter_map(|dir| dir.canonicalize().ok())
        .collect();
    [
        Some(PathBuf::from("/var/tmp")),
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        std::env::var_os("HOME").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .filter_map(|dir| dir.canonicalize().ok())
    .find(|dir| dir.is_dir() && !writable.iter().any(|place| dir.starts_with(place)))
    .expect("a directory outside /tmp, $TMPDIR and /dev/shm for the tests' outside files")
}

/// Every `run_command` call is allowed: the sandbox alone bounds what they do.
const ALLOW_COMMANDS: &str = r#"{"allow": ["run_command"]}"#;

async fn session(client: &TestClient, project: &Path, sandbox: Value) -> String {
    client
        .create_session(
            project,
            json!({"rules": serde_json::from_str::<Value>(ALLOW_COMMANDS).unwrap(), "sandbox": sandbox}),
        )
        .await
}

/// Runs `line` as a one-call batch; returns the call's result.
async fn run(client: &TestClient, session: &str, line: &str) -> Value {
    let response = client
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [
                {"id": "c", "name": "run_command", "arguments": {"command": line, "timeout_ms": 60000}}]}),
        )
        .await
        .expect("tools/execute");
    response["results"][0]["result"].clone()
}

fn output(result: &Value) -> &str {
    result["content"].as_str().unwrap_or_default()
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display())
}

async fn connected(daemon: &TestDaemon) -> TestClient {
    daemon.connect(json!({}), no_answers()).await
}

/// A daemon with every default, a client, fresh places, and a session in the project with
/// the config's sandbox (every command allowed).
async fn sandboxed() -> (TestDaemon, TestClient, Places, String) {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    (daemon, client, places, session)
}

/// `dir` made a git repository by the real `git`.
fn git_init(git: &Path, dir: &Path) {
    let init = std::process::Command::new(git)
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(init.success());
}

#[tokio::test]
async fn workspace_write_keeps_every_write_inside_the_roots_and_temp_dirs() {
    let Some(git) = require::program(
        "workspace_write_keeps_every_write_inside_the_roots_and_temp_dirs",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let (_daemon, client, places, session) = sandboxed().await;
    let out = quoted(&places.outside);
    let link = quoted(&places.project.join("link"));
    let before = Places::snapshot(&places.outside);

    let attempts = [
        format!("echo x > {out}/new"),
        format!("echo x >> {out}/keep.txt"),
        format!(": > {out}/keep.txt"),
        format!("truncate -s 0 {out}/keep.txt"),
        format!("mkdir {out}/made"),
        format!("rm {out}/keep.txt"),
        format!("rmdir {out}/dir"),
        format!("mv {out}/keep.txt {out}/moved.txt"),
        format!("mv {out}/keep.txt ./stolen.txt"),
        format!("ln -s /etc/passwd {out}/symlink"),
        format!("echo x > {link}/through-link"),
        format!("rm {link}/keep.txt"),
        format!(
            "python3 -c \"open('{}/py', 'w').write('x')\"",
            places.outside.display()
        ),
        // A background child in its own session, waited for, and one left behind.
        format!("setsid -w bash -c 'echo x > {out}/setsid'"),
        format!("(setsid bash -c 'echo x > {out}/detached' &); sleep 0.5"),
        // Another namespace of its own changes nothing.
        format!("unshare -r bash -c 'echo x > {out}/unshared'"),
    ];
    let mut effects = Vec::new();
    for line in &attempts {
        let result = run(&client, &session, line).await;
        // The detached child's failure is not its shell's: only the effect tells.
        if result["ok"] == json!(true) && !line.contains("detached") {
            effects.push(format!("{line} succeeded: {result}"));
        }
        assert_eq!(result["metadata"]["sandbox"]["mode"], "workspace_write");
    }
    assert!(effects.is_empty(), "{effects:#?}");
    // The detached one had its time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(Places::snapshot(&places.outside), before);

    // Inside the root, in the temp directories and /dev/null: every kind of write works.
    let inside = run(
        &client,
        &session,
        "echo hi > a.txt && mkdir -p sub/deeper && mv a.txt sub/ && : > keep.txt && rm -r sub \
         && f=$(mktemp) && echo x > \"$f\" && rm \"$f\" && echo x > /tmp/toold-sandbox-$$ \
         && rm /tmp/toold-sandbox-$$ && echo x > /dev/shm/toold-sandbox-$$ \
         && rm /dev/shm/toold-sandbox-$$ && echo x > /dev/null && echo done",
    )
    .await;
    assert_eq!(inside["ok"], json!(true), "{inside}");
    assert_eq!(output(&inside), "done\n");
    // Reads anywhere.
    let read = run(
        &client,
        &session,
        &format!("cat {out}/keep.txt /etc/hostname"),
    )
    .await;
    assert_eq!(read["ok"], json!(true), "{read}");
    assert!(output(&read).starts_with("kept\n"), "{read}");
    // A repository made and committed to inside the root.
    let git = git.display();
    let git_line = format!(
        "{git} init -q repo && cd repo && echo x > f && {git} add f && \
         {git} -c user.name=t -c user.email=t@t commit -qm first && {git} log --oneline | wc -l"
    );
    let committed = run(&client, &session, &git_line).await;
    assert_eq!(committed["ok"], json!(true), "{committed}");
    assert_eq!(output(&committed).trim(), "1");
}

#[tokio::test]
async fn a_denied_write_says_so_and_names_where_commands_may_write() {
    let (_daemon, client, places, session) = sandboxed().await;
    let result = run(
        &client,
        &session,
        &format!("echo x > {}/new", quoted(&places.outside)),
    )
    .await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    let sandbox = &result["metadata"]["sandbox"];
    assert_eq!(sandbox["likely_denied"], true, "{result}");
    let hint = sandbox["hint"].as_str().unwrap();
    assert!(
        hint.contains(&places.project.display().to_string()),
        "{hint}"
    );
    assert!(hint.contains("/tmp") && hint.contains("writable"), "{hint}");
    assert!(result["error"].as_str().unwrap().contains(hint), "{result}");
    assert_eq!(sandbox["degraded"], json!([]), "{result}");
    // A failure that is not a denial carries no such claim.
    let plain = run(&client, &session, "exit 3").await;
    assert_eq!(plain["metadata"]["sandbox"].get("likely_denied"), None);
}

#[tokio::test]
async fn git_metadata_inside_the_root_stays_read_only() {
    let Some(git) = require::program(
        "git_metadata_inside_the_root_stays_read_only",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    let git_dir = places.project.join(".git");
    let session = session(&client, &places.project, json!({})).await;
    let before = Places::snapshot(&git_dir);
    for line in [
        "echo '[core] hooksPath = /tmp' >> .git/config",
        "git config core.hooksPath /tmp",
        "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
        "rm -r .git/hooks",
        "mv .git/config .git/config.old",
        "mv .git .git-old && mkdir .git",
        "rm -rf .git",
    ] {
        let result = run(&client, &session, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    assert_eq!(Places::snapshot(&git_dir), before);
}

#[tokio::test]
async fn read_only_allows_no_write_but_its_private_temp_dir() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({"mode": "read_only"})).await;
    let before = Places::snapshot(&places.project);
    for line in [
        "echo x > new.txt",
        "echo x >> keep.txt",
        ": > keep.txt",
        "rm keep.txt",
        "mkdir made",
        "echo x > /tmp/toold-read-only-$$",
        "echo x > /dev/shm/toold-read-only-$$",
    ] {
        let result = run(&client, &session, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert_eq!(result["metadata"]["sandbox"]["mode"], "read_only");
    }
    assert_eq!(Places::snapshot(&places.project), before);
    let private = run(
        &client,
        &session,
        "echo x > \"$TMPDIR/f\" && cat \"$TMPDIR/f\" && echo y > /dev/null && cat keep.txt && echo $TMPDIR",
    )
    .await;
    assert_eq!(private["ok"], json!(true), "{private}");
    let printed = output(&private);
    assert!(printed.starts_with("x\nkept\n"), "{printed}");
    // Private to the call: gone once it ended.
    let tmpdir = PathBuf::from(printed.lines().last().unwrap());
    assert!(!tmpdir.exists(), "{} outlived its call", tmpdir.display());
}

/// A TCP listener and a UDP socket on 127.0.0.1, and a command that connects and sends to
/// each.
#[tokio::test]
async fn network_off_refuses_ip_sockets_and_network_on_allows_them() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let udp_port = udp.local_addr().unwrap().port();
    let tcp_line = format!(
        "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {tcp_port})); s.sendall(b'tcp')\""
    );
    let udp_line = format!(
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'udp', ('127.0.0.1', {udp_port}))\""
    );
    let bash_line = format!("echo tcp > /dev/tcp/127.0.0.1/{tcp_port}");

    let offline = session(&client, &places.project, json!({"network": false})).await;
    for line in [&tcp_line, &udp_line, &bash_line] {
        let result = run(&client, &offline, line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert_eq!(result["metadata"]["sandbox"]["network"], false);
        assert_eq!(
            result["metadata"]["sandbox"]["likely_denied"], true,
            "{result}"
        );
    }
    assert!(tcp.accept().is_err(), "a connection reached the listener");
    let mut buffer = [0u8; 16];
    assert!(udp.recv_from(&mut buffer).is_err(), "a datagram arrived");
    // Unix sockets stay usable: only IP is off.
    let unix = run(
        &client,
        &offline,
        "python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'x'); print(b.recv(1))\"",
    )
    .await;
    assert_eq!(output(&unix), "b'x'\n", "{unix}");

    let online = session(&client, &places.project, json!({})).await;
    for line in [&tcp_line, &udp_line] {
        let result = run(&client, &online, line).await;
        assert_eq!(result["ok"], json!(true), "{line}: {result}");
    }
    tcp.set_nonblocking(false).unwrap();
    let (mut stream, _) = tcp.accept().unwrap();
    let mut received = String::new();
    std::io::Read::read_to_string(&mut stream, &mut received).unwrap();
    assert_eq!(received, "tcp");
    udp.set_nonblocking(false).unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (size, _) = udp.recv_from(&mut buffer).unwrap();
    assert_eq!(&buffer[..size], b"udp");
}

/// `io_uring`, whose operations (sockets among them) would pass the seccomp filter by, cannot
/// be set up by a sandboxed command, with the network on or off; with the sandbox off it can
/// (the control).
#[tokio::test]
async fn io_uring_is_refused_to_sandboxed_commands() {
    let daemon = TestDaemon::start_with_config(Some("[sandbox]\nallow_unsandboxed = true\n"));
    let client = connected(&daemon).await;
    let places = Places::new();
    // io_uring_setup(1, params), number 425 on every architecture: a ring's descriptor, or the errno's name.
    let line = String::from(
        "python3 -c \"import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True); \
         fd = libc.syscall(425, 1, ctypes.create_string_buffer(120)); \
         print('ring' if fd >= 0 else errno.errorcode[ctypes.get_errno()])\"",
    );
    for sandbox in [json!({"network": false}), json!({"network": true})] {
        let session = session(&client, &places.project, sandbox.clone()).await;
        let result = run(&client, &session, &line).await;
        assert_eq!(output(&result), "EACCES\n", "{sandbox}: {result}");
    }
    let off = session(&client, &places.project, json!({"mode": "off"})).await;
    let result = run(&client, &off, &line).await;
    assert_eq!(output(&result), "ring\n", "{result}");
}

/// Lines that try to reach the daemon through its socket: Python directly and through
/// `/proc/<daemon pid>/root`, `socat`, `toold status`, and Python through a hard link to the
/// socket made outside the sandbox (only the peer check stops that one). Each writes
/// `initialize` and a `session/create` and prints what it got back.
fn lines_reaching_the_daemon(daemon: &TestDaemon, project: &Path, hard_link: &Path) -> Vec<String> {
    let socket = daemon.socket();
    let through_proc = PathBuf::from(format!("/proc/{}/root", daemon.pid()))
        .join(socket.strip_prefix("/").unwrap());
    let messages = project.join("messages.ndjson");
    std::fs::write(
        &messages,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":1}}\n\
         {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"session/create\",\"params\":{\"cwd\":\"{}\"}}\n"
            .replace("{}", &project.display().to_string()),
    )
    .unwrap();
    let python = |path: &Path| {
        format!(
            "python3 -c \"import socket,time; s=socket.socket(socket.AF_UNIX); s.connect('{}'); \
             s.sendall(open('{}','rb').read()); time.sleep(0.5); s.settimeout(5); \
             print(s.recv(65536))\"",
            path.display(),
            messages.display()
        )
    };
    let toold = toold_tests::daemon::toold_binary();
    vec![
        python(&socket),
        python(&through_proc),
        python(hard_link),
        format!(
            "socat -t 5 - UNIX-CONNECT:{} < {}",
            socket.display(),
            messages.display()
        ),
        format!(
            "TOOLD_SOCKET={} {} status",
            socket.display(),
            toold.display()
        ),
    ]
}

/// What a command that reached the daemon would have made: another session.
async fn session_count(client: &TestClient) -> usize {
    let list = client.request("session/list", json!({})).await.unwrap();
    list["sessions"].as_array().unwrap().len()
}

/// Runs every line of [`lines_reaching_the_daemon`] in a session with `sandbox`; returns
/// the results, and whether any created a session.
async fn reach_the_daemon(daemon: &TestDaemon, sandbox: Value) -> (Vec<Value>, bool) {
    let client = connected(daemon).await;
    let places = Places::new();
    let hard_link = places.project.join("hard-link.sock");
    std::fs::hard_link(daemon.socket(), &hard_link).unwrap();
    let session = session(&client, &places.project, sandbox).await;
    let sessions_before = session_count(&client).await;
    let mut results = Vec::new();
    for line in lines_reaching_the_daemon(daemon, &places.project, &hard_link) {
        results.push(run(&client, &session, &line).await);
    }
    let created = session_count(&client).await != sessions_before;
    (results, created)
}

/// Whether a line's output shows an answer from the daemon.
fn answered(result: &Value) -> bool {
    let printed = output(result);
    printed.contains("protocol_version") || printed.contains("toold is up")
}

fn require_socat(test: &str) -> bool {
    require::program(test, "socat", &[], "apt-get install socat").is_some()
}

#[tokio::test]
async fn commands_cannot_reach_the_daemon_through_its_socket() {
    let test = "commands_cannot_reach_the_daemon_through_its_socket";
    if !require_socat(test) {
        return;
    }
    let daemon = TestDaemon::start_with_config(Some("[sandbox]\nallow_unsandboxed = true\n"));
    let (results, created) = reach_the_daemon(&daemon, json!({})).await;
    for result in &results {
        assert!(
            !answered(result),
            "the daemon answered a sandboxed command: {result}"
        );
    }
    assert!(!created, "a sandboxed command created a session");

    // The control: unsandboxed, the same lines reach it (the one through /proc only with
    // the power to trace the non-dumpable daemon, which root has).
    let (results, created) = reach_the_daemon(&daemon, json!({"mode": "off"})).await;
    for (index, result) in results.iter().enumerate() {
        assert!(index == 1 || answered(result), "{result}");
    }
    assert!(created);
}

#[tokio::test]
async fn commands_cannot_signal_trace_or_read_the_daemon() {
    let Some(strace) = require::program(
        "commands_cannot_signal_trace_or_read_the_daemon",
        "strace",
        &[],
        "apt-get install strace",
    ) else {
        return;
    };
    let (daemon, client, _places, session) = sandboxed().await;
    let pid = daemon.pid();
    for line in [
        format!("kill -STOP {pid}"),
        format!("kill -TERM {pid}"),
        format!("kill -KILL {pid}"),
        format!("timeout 5 {} -p {pid} -e trace=none", strace.display()),
        format!("cat /proc/{pid}/environ"),
        format!("cat /proc/{pid}/task/{pid}/environ"),
        format!("readlink /proc/{pid}/fd/0"),
        format!("ls /proc/{pid}/cwd/"),
        format!("head -c 16 /proc/{pid}/mem"),
    ] {
        let result = run(&client, &session, &line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
        assert!(!output(&result).contains("TOOLD"), "{line}: {result}");
    }
    // Every process it may signal, which is none outside its own sandbox.
    run(&client, &session, "kill -KILL -1").await;
    // Still serving, not stopped.
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = status.rsplit_once(") ").unwrap().1.chars().next().unwrap();
    assert!(matches!(state, 'S' | 'R'), "the daemon is in state {state}");
    assert_eq!(run(&client, &session, "echo alive").await["ok"], true);
}

#[tokio::test]
async fn the_session_may_tighten_the_sandbox_and_loosen_it_only_when_the_config_allows() {
    let strict = TestDaemon::start_with_config(Some("[sandbox]\nnetwork = false\n"));
    let client = connected(&strict).await;
    let places = Places::new();
    let tight = client
        .request(
            "session/create",
            json!({"cwd": places.project, "sandbox": {"mode": "read_only"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        tight["sandbox"],
        json!({"mode": "read_only", "network": false})
    );
    for loose in [json!({"mode": "off"}), json!({"network": true})] {
        let refused = client
            .request(
                "session/create",
                json!({"cwd": places.project, "sandbox": loose}),
            )
            .await
            .unwrap_err();
        let text = format!("{refused:?}");
        assert!(
            text.contains("-32602") && text.contains("allow_unsandboxed"),
            "{text}"
        );
        let update = client
            .request(
                "session/update",
                json!({"session_id": tight["session_id"], "sandbox": loose}),
            )
            .await
            .unwrap_err();
        assert!(format!("{update:?}").contains("allow_unsandboxed"));
    }
    // Back to the config's own: allowed.
    let back = client
        .request(
            "session/update",
            json!({"session_id": tight["session_id"], "sandbox": {}}),
        )
        .await
        .unwrap();
    assert_eq!(
        back["sandbox"],
        json!({"mode": "workspace_write", "network": false})
    );

    let lenient = TestDaemon::start_with_config(Some(
        "[sandbox]\nnetwork = false\nallow_unsandboxed = true\n",
    ));
    let client = connected(&lenient).await;
    let off = client
        .request(
            "session/create",
            json!({"cwd": places.project, "sandbox": {"mode": "off", "network": true},
                   "rules": {"allow": ["run_command"]}}),
        )
        .await
        .unwrap();
    assert_eq!(off["sandbox"], json!({"mode": "off", "network": true}));
    let result = run(&client, off["session_id"].as_str().unwrap(), "true").await;
    assert_eq!(
        result["metadata"]["sandbox"],
        json!({"mode": "off", "network": true, "enforced": [], "degraded": []})
    );
}

#[tokio::test]
async fn a_root_holding_the_daemon_socket_is_refused() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let refused = client
        .request(
            "session/create",
            json!({"cwd": daemon.root(), "roots": [daemon.root()]}),
        )
        .await
        .unwrap_err();
    assert!(format!("{refused:?}").contains("socket"), "{refused:?}");
}

#[tokio::test]
async fn initialize_reports_what_this_kernel_enforces() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let result = client
        .request("initialize", json!({"protocol_version": 1}))
        .await;
    // Already initialized: a fresh connection asks.
    assert!(result.is_err());
    let report = &sandbox_report(&daemon).await;
    assert_eq!(report["fs"], true, "{report}");
    assert_eq!(report["network"], true, "{report}");
    assert_eq!(report["daemon_socket"], "mount_namespace", "{report}");
    assert_eq!(report["processes"], "pid_namespace", "{report}");
    assert_eq!(report["degraded"], json!([]), "{report}");
    assert!(report["landlock_abi"].as_u64().unwrap() >= 6, "{report}");
}

/// The sandbox report of `initialize`, asked on a fresh connection.
async fn sandbox_report(daemon: &TestDaemon) -> Value {
    let fresh = TestClient::connect_raw(
        &daemon.socket(),
        toold_protocol::Framing::Ndjson,
        no_answers(),
    )
    .await;
    let mut result = fresh
        .request("initialize", json!({"protocol_version": 1}))
        .await
        .unwrap();
    result["sandbox"].take()
}

fn without(features: &[&str]) -> Vec<String> {
    let mut wrapper = vec![env!("CARGO_BIN_EXE_without-kernel-features").to_owned()];
    wrapper.extend(features.iter().map(|feature| (*feature).to_owned()));
    wrapper.push("--".to_owned());
    wrapper
}

/// Without user namespaces the socket is kept out by the peer check alone, and the rest of
/// the sandbox holds.
#[tokio::test]
async fn without_user_namespaces_the_peer_check_keeps_commands_out() {
    let test = "without_user_namespaces_the_peer_check_keeps_commands_out";
    if !require_socat(test) {
        return;
    }
    let daemon = TestDaemon::start_under_with_config(
        &without(&["--user-namespaces"]),
        "[sandbox]\nallow_unsandboxed = true\n",
    );
    let report = sandbox_report(&daemon).await;
    assert_eq!(report["daemon_socket"], "peer_check", "{report}");
    assert_eq!(report["processes"], "sweep", "{report}");
    assert_eq!(report["degraded"], json!(["git_metadata"]), "{report}");

    let (results, created) = reach_the_daemon(&daemon, json!({})).await;
    for result in &results {
        assert!(
            !answered(result),
            "the daemon answered a sandboxed command: {result}"
        );
        assert_eq!(
            result["metadata"]["sandbox"]["degraded"],
            json!(["git_metadata"])
        );
    }
    assert!(!created, "a sandboxed command created a session");
    let (results, created) = reach_the_daemon(&daemon, json!({"mode": "off"})).await;
    assert!(answered(&results[0]), "{results:#?}");
    assert!(created);

    // Writes are still confined.
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    let before = Places::snapshot(&places.outside);
    let result = run(
        &client,
        &session,
        &format!("echo x > {}/new", quoted(&places.outside)),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(Places::snapshot(&places.outside), before);
}

/// Without Landlock, `warn` runs the command and says what was not enforced; `refuse` does
/// not run it at all.
#[tokio::test]
async fn without_landlock_warn_says_so_and_refuse_does_not_run() {
    let places = Places::new();
    let marker = places.outside.join("ran");
    let line = format!("echo x > {}", quoted(&marker));

    let warn = TestDaemon::start_under_with_config(&without(&["--landlock"]), "");
    let client = connected(&warn).await;
    let session_id = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session_id, &line).await;
    let sandbox = &result["metadata"]["sandbox"];
    assert_eq!(
        sandbox["degraded"],
        json!(["filesystem", "signals"]),
        "{result}"
    );
    // Honest: the write was not confined, and the result said so.
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();
    // The daemon's socket is still out of reach (mount namespace and peer check).
    let reach = run(
        &client,
        &session_id,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')\"",
            warn.socket().display()
        ),
    )
    .await;
    assert_eq!(reach["ok"], json!(false), "{reach}");

    // Without Landlock to forbid unmounting, the namespace's mounts still hold: not even a
    // command run as root keeps the capability to remove them.
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    // In a script, which the permission engine cannot read (a line naming `.git` would not
    // even run): only the sandbox stands in the way.
    std::fs::write(
        places.project.join("unmount.sh"),
        "umount .git/config; umount -l .git/config; umount .git/hooks\n\
         echo x >> .git/config; touch .git/hooks/pre-commit\n",
    )
    .unwrap();
    let session_id = session(&client, &places.project, json!({})).await;
    let unmounted = run(&client, &session_id, "bash unmount.sh").await;
    assert_eq!(unmounted["ok"], json!(false), "{unmounted}");
    assert_eq!(
        std::fs::read_to_string(places.project.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!places.project.join(".git/hooks/pre-commit").exists());

    let refuse = TestDaemon::start_under_with_config(
        &without(&["--landlock"]),
        "[sandbox]\non_unsupported = \"refuse\"\n",
    );
    let client = connected(&refuse).await;
    let session_id = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session_id, &line).await;
    assert_eq!(result["error_type"], "sandbox_unavailable", "{result}");
    let message = result["error"].as_str().unwrap();
    assert!(
        message.contains("filesystem") && message.contains("refuse"),
        "{message}"
    );
    assert!(!marker.exists(), "the refused command ran");
    let report = sandbox_report(&refuse).await;
    assert_eq!(report["fs"], false, "{report}");
    assert_eq!(report["landlock_abi"], Value::Null, "{report}");
}

/// A small Rust project made and built inside the root, with the user's own toolchain: a
/// build writes only its target directory (and the temp directories).
#[tokio::test]
async fn cargo_new_and_an_offline_build_work_inside_the_root() {
    let Some(cargo) = require::program(
        "cargo_new_and_an_offline_build_work_inside_the_root",
        "cargo",
        &[],
        "install Rust with rustup",
    ) else {
        return;
    };
    let (_daemon, client, _places, session) = sandboxed().await;
    let cargo = cargo.display();
    let result = run(
        &client,
        &session,
        &format!(
            "{cargo} new -q --vcs none hello && cd hello && {cargo} build -q --offline && ./target/debug/hello"
        ),
    )
    .await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert_eq!(output(&result), "Hello, world!\n");
}

/// Whether any live process has `needle` on its command line.
fn alive_with(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        !zombie
            && String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(needle)
    })
}

/// The escapes a command's processes try — background, `setsid`, a double fork, `env -i`
/// (dropping the call's tag), all at once — leave nothing alive 2 s after the call ends,
/// whether it ended by itself or by its deadline.
#[tokio::test]
async fn no_process_of_a_sandboxed_command_outlives_its_call() {
    let (_daemon, client, _places, session) = sandboxed().await;
    assert_no_survivors(&client, &session, "pid_namespace").await;
}

/// Where PID namespaces cannot be made, the daemon's sweep alone still leaves no survivor.
#[tokio::test]
async fn without_pid_namespaces_the_sweep_leaves_no_survivor() {
    let daemon = TestDaemon::start_under_with_config(&without(&["--pid-namespaces"]), "");
    let report = sandbox_report(&daemon).await;
    assert_eq!(report["processes"], "sweep", "{report}");
    assert_eq!(report["daemon_socket"], "mount_namespace", "{report}");
    assert_eq!(report["degraded"], json!([]), "{report}");
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    assert_no_survivors(&client, &session, "sweep").await;
}

async fn assert_no_survivors(client: &TestClient, session: &str, tier: &str) {
    for (round, ending) in ["exit 0", "sleep 30"].iter().enumerate() {
        // Unique to this test process, tier, round and process: the tests of both tiers run
        // at once, and one must not take the other's processes for its own survivors.
        let tier_digit = u8::from(tier == "pid_namespace");
        let marker =
            |index: u32| format!("4000.{:08}{tier_digit}{round}{index}", std::process::id());
        let line = format!(
            "sleep {} & setsid sleep {} & (sleep {} &) ; (env -i setsid sh -c 'sleep {} &' &) ; \
             nohup sleep {} >/dev/null 2>&1 & sleep 0.3; {ending}",
            marker(1),
            marker(2),
            marker(3),
            marker(4),
            marker(5)
        );
        let response = client
            .request(
                "tools/execute",
                json!({"session_id": session, "calls": [{"id": "c", "name": "run_command",
                    "arguments": {"command": line, "timeout_ms": 2000}}]}),
            )
            .await
            .unwrap();
        let result = &response["results"][0]["result"];
        assert_eq!(result["metadata"]["sandbox"]["mode"], "workspace_write");
        let enforced = result["metadata"]["sandbox"]["enforced"]
            .as_array()
            .unwrap();
        assert_eq!(
            enforced.contains(&json!("pid_namespace")),
            tier == "pid_namespace",
            "{result}"
        );
        if round == 1 {
            assert_eq!(result["error_type"], "timeout", "{result}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        for index in 1..=5 {
            assert!(
                !alive_with(&marker(index)),
                "{} outlived its call ({ending}, {tier})",
                marker(index)
            );
        }
    }
}

/// Each command runs in a PID namespace of its own: its `/proc` shows its own processes
/// alone (not the daemon, not another session's command), under the pids they know; and
/// signals work there as anywhere: the shell is not the namespace's init, so `kill $$`, `kill
/// -9 $$` and a program's signal to itself end it, and its exit code is the call's.
#[tokio::test]
async fn each_command_runs_in_a_pid_namespace_of_its_own() {
    let (daemon, client, _places, own) = sandboxed().await;
    let daemon_pid = daemon.pid().to_string();
    let listed = run(
        &client,
        &own,
        "echo $$; ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; ls /proc/1/ >/dev/null && \
         grep -c . /proc/$$/status >/dev/null && echo readable",
    )
    .await;
    assert_eq!(listed["ok"], json!(true), "{listed}");
    let printed = output(&listed);
    let mut lines = printed.lines();
    assert_eq!(lines.next(), Some("2"), "{listed}");
    let pids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    // The init, the shell, `ls`, `grep` and `tr`: nothing else, the daemon least of all.
    assert!(pids.len() <= 5, "{listed}");
    assert!(!pids.contains(&daemon_pid.as_str()), "{listed}");
    assert_eq!(lines.next(), Some("readable"), "{listed}");

    // Another session's running command is not there either.
    let neighbour = connected(&daemon).await;
    let elsewhere = Places::new();
    let other = session(&neighbour, &elsewhere.project, json!({})).await;
    let sleeper = tokio::spawn(async move {
        run(&neighbour, &other, "exec -a toold-pidns-neighbour sleep 30").await
    });
    let started = std::time::Instant::now();
    while !alive_with("toold-pidns-neighbour") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the neighbour never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = run(&client, &own, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '").await;
    assert!(!output(&seen).contains("toold-pidns-neighbour"), "{seen}");
    sleeper.abort();

    for (line, signal) in [
        ("kill $$; echo survived", 15),
        ("kill -9 $$; echo survived", 9),
        (
            "python3 -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'",
            15,
        ),
        ("sh -c 'kill -USR1 $$'", 10),
    ] {
        let result = run(&client, &own, line).await;
        assert_eq!(
            result["metadata"]["signal"],
            json!(signal),
            "{line}: {result}"
        );
        assert!(!output(&result).contains("survived"), "{line}: {result}");
    }
    let result = run(&client, &own, "exit 7").await;
    assert_eq!(result["metadata"]["exit_code"], json!(7), "{result}");
}

/// A command has no controlling terminal (it cannot type into, or read from, the terminal
/// the daemon was started from), and cannot read or write another terminal either.
#[tokio::test]
async fn commands_reach_no_terminal() {
    let (_daemon, client, _places, session) = sandboxed().await;
    // In a session of its own (led by the shell, or by its PID namespace's init, pid 1), with
    // no terminal: tty_nr (field 7 of stat) is 0.
    let stat = run(&client, &session, "cut -d' ' -f6,7 /proc/$$/stat; echo $$").await;
    let printed = output(&stat);
    let mut lines = printed.lines();
    let (session_id, tty) = lines.next().unwrap().split_once(' ').unwrap();
    assert_eq!(tty, "0", "{stat}");
    let shell = lines.next().unwrap();
    assert!(session_id == shell || session_id == "1", "{stat}");
    let tty = run(&client, &session, "exec 3<>/dev/tty && echo opened-tty").await;
    assert_eq!(tty["ok"], json!(false), "{tty}");

    // Another terminal of the same user: neither written nor read.
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
    for line in [
        format!("echo injected > {}", slave.display()),
        format!("timeout 2 head -c 1 {}", slave.display()),
    ] {
        let result = run(&client, &session, &line).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    let mut master = std::fs::File::from(pty.master);
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .unwrap();
    let mut buffer = [0u8; 64];
    let read = std::io::Read::read(&mut master, &mut buffer);
    assert!(
        !matches!(read, Ok(n) if n > 0),
        "the terminal got {:?}",
        read.map(|n| String::from_utf8_lossy(&buffer[..n]).into_owned())
    );
}

/// A process whose main thread exits while another thread runs shows as a zombie in /proc;
/// it is still alive, and still dies with its call (double-forked, in a session of its own).
#[tokio::test]
async fn a_process_whose_main_thread_exited_still_dies_with_its_call() {
    let (_daemon, client, places, session) = sandboxed().await;
    let beat = places.project.join("beat");
    let script = format!(
        "import ctypes, os, platform, threading, time\n\
         if os.fork() == 0:\n\
         \x20   os.setsid()\n\
         \x20   if os.fork() == 0:\n\
         \x20       def work():\n\
         \x20           while True:\n\
         \x20               open({beat:?}, 'w').write(str(time.time()))\n\
         \x20               time.sleep(0.05)\n\
         \x20       threading.Thread(target=work).start()\n\
         \x20       time.sleep(0.2)\n\
         \x20       ctypes.CDLL(None).syscall(60 if platform.machine() == 'x86_64' else 93, 0)\n\
         \x20   os._exit(0)\n",
        beat = beat.display().to_string()
    );
    std::fs::write(places.project.join("zombie_leader.py"), script).unwrap();
    let result = run(&client, &session, "python3 zombie_leader.py; sleep 0.5").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(beat.exists(), "the thread never ran: {result}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = std::fs::read_to_string(&beat).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_to_string(&beat).unwrap(),
        before,
        "the thread still runs after its call"
    );
}

/// A command run as root cannot lift the read-only mounts with the new mount API either:
/// `mount_setattr` to clear read-only, `open_tree` to reach what a mount covers.
#[tokio::test]
async fn the_mount_api_cannot_lift_what_covers_git_or_the_socket() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    let socket_parent = daemon
        .socket()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    // x86_64 and aarch64 share these numbers (the syscalls newer than 5.1 are numbered alike).
    let script = format!(
        "import ctypes, os, socket\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         class Attr(ctypes.Structure):\n\
         \x20   _fields_ = [('set', ctypes.c_uint64), ('clr', ctypes.c_uint64), ('prop', ctypes.c_uint64), ('userns', ctypes.c_uint64)]\n\
         attr = Attr(0, 1, 0, 0)\n\
         r = libc.syscall(442, -100, b'.git/config', 0, ctypes.byref(attr), ctypes.sizeof(attr))\n\
         print('mount_setattr', r, ctypes.get_errno())\n\
         try:\n\
         \x20   open('.git/config', 'a').write('[core] fsmonitor = touch /tmp/pwned\\n')\n\
         except OSError as e:\n\
         \x20   print('write', e)\n\
         fd = libc.syscall(428, -100, os.getcwd().encode(), 1 | 0o2000000)\n\
         print('open_tree', fd, ctypes.get_errno())\n\
         if fd >= 0:\n\
         \x20   try:\n\
         \x20       f = os.open('.git/config', os.O_WRONLY | os.O_APPEND, dir_fd=fd)\n\
         \x20       os.write(f, b'[core] fsmonitor = touch /tmp/pwned\\n')\n\
         \x20   except OSError as e:\n\
         \x20       print('write through the clone', e)\n\
         fd = libc.syscall(428, -100, {parent:?}.encode(), 1 | 0o2000000)\n\
         print('open_tree socket', fd, ctypes.get_errno())\n\
         if fd >= 0:\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   s.connect(f'/proc/self/fd/{{fd}}/toold/toold.sock')\n\
         \x20   s.sendall(b'{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"protocol_version\":1}}}}\\n')\n\
         \x20   s.settimeout(3)\n\
         \x20   print('reply', s.recv(4096))\n",
        parent = socket_parent.display().to_string()
    );
    std::fs::write(places.project.join("lift.py"), script).unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, "python3 lift.py").await;
    let printed = output(&result);
    assert!(!printed.contains("protocol_version"), "{result}");
    assert_eq!(
        std::fs::read_to_string(places.project.join(".git/config")).unwrap(),
        "[core]\n",
        "{result}"
    );
}

/// The daemon's socket directory under a directory commands may write (`/tmp` here, as for
/// the `/tmp/toold-$UID` fallback): neither it nor a parent can be moved away or removed, so
/// no decoy takes its place and the socket stays where clients find it.
#[tokio::test]
async fn the_socket_directory_cannot_be_moved_or_removed() {
    let (daemon, client, places, session) = sandboxed().await;
    let socket_dir = daemon.socket().parent().unwrap().to_owned();
    let run_dir = socket_dir.parent().unwrap().to_owned();
    assert!(run_dir.starts_with("/tmp"), "{}", run_dir.display());
    for (index, line) in [
        format!("mv {} {}-moved", run_dir.display(), run_dir.display()),
        format!("mv {} {}-moved", socket_dir.display(), socket_dir.display()),
        format!("rm -rf {}", run_dir.display()),
        format!("rm {}", daemon.socket().display()),
    ]
    .iter()
    .enumerate()
    {
        // In a script, out of the permission engine's sight (it protects toold's directories
        // from lines that name them): only the sandbox stands in the way.
        let script = places.project.join(format!("move-{index}.sh"));
        std::fs::write(&script, format!("{line}\n")).unwrap();
        let result = run(&client, &session, &format!("bash {}", script.display())).await;
        assert_eq!(result["ok"], json!(false), "{line}: {result}");
    }
    assert!(daemon.socket().exists());
    // Still served where it was.
    let again = connected(&daemon).await;
    assert!(again.request("session/list", json!({})).await.is_ok());
}

/// What git reads but a mount cannot cover because it does not exist yet — a `commondir`
/// that would move the repository's config and hooks elsewhere — is removed after the call,
/// and the result says so; a missing `hooks` directory is made (empty) and covered.
#[tokio::test]
async fn git_metadata_made_where_git_would_read_it_is_undone() {
    let Some(git) = require::program(
        "git_metadata_made_where_git_would_read_it_is_undone",
        "git",
        &[],
        "apt-get install git",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    git_init(&git, &places.project);
    std::fs::remove_dir_all(places.project.join(".git/hooks")).unwrap();
    // In a script, out of the permission engine's sight.
    std::fs::write(
        places.project.join("redirect.sh"),
        "mkdir -p /tmp/evil-$$ && cp .git/config /tmp/evil-$$/config\n\
         ln -s \"$PWD/.git/objects\" \"$PWD/.git/refs\" /tmp/evil-$$/\n\
         echo /tmp/evil-$$ > .git/commondir\n\
         mkdir -p .git/hooks; echo 'touch /tmp/pwned' > .git/hooks/pre-commit\n",
    )
    .unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, "bash redirect.sh").await;
    assert_eq!(
        result["metadata"]["sandbox"]["removed"],
        json!([places.project.join(".git/commondir")]),
        "{result}"
    );
    assert!(!places.project.join(".git/commondir").exists());
    assert!(places.project.join(".git/hooks").is_dir());
    assert!(!places.project.join(".git/hooks/pre-commit").exists());
}

/// The removal after the call touches only the git directory it looked at: a command that
/// swaps its root for a symlink to another repository cannot make the daemon delete that
/// repository's `commondir`.
#[tokio::test]
async fn undoing_a_commondir_follows_no_symlink() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    std::fs::create_dir_all(places.project.join(".git/hooks")).unwrap();
    std::fs::write(places.project.join(".git/config"), "[core]\n").unwrap();
    let victim = places.outside.join("victim");
    std::fs::create_dir_all(victim.join(".git")).unwrap();
    std::fs::write(victim.join(".git/commondir"), "../main/.git\n").unwrap();
    let script = places.outside.join("swap.sh");
    std::fs::write(
        &script,
        format!(
            "cd /\nmv {project} {project}-moved\nln -s {victim} {project}\n",
            project = places.project.display(),
            victim = victim.display()
        ),
    )
    .unwrap();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(&client, &session, &format!("bash {}", script.display())).await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert_eq!(
        result["metadata"]["sandbox"].get("removed"),
        None,
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(victim.join(".git/commondir")).unwrap(),
        "../main/.git\n"
    );
}

/// toold's own config (whose hooks run unsandboxed) and saved sessions, here under `/tmp`
/// where commands may write: read-only to commands, whatever the line looks like.
#[tokio::test]
async fn toolds_own_directories_are_read_only_to_commands() {
    let daemon = TestDaemon::start_with_config(Some("# the user's config\n"));
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    let config = daemon.root().join("config/toold/config.toml");
    let state = daemon.root().join("state/toold");
    assert!(config.starts_with("/tmp") && state.is_dir());
    let script = places.project.join("plant.sh");
    std::fs::write(
        &script,
        format!(
            "echo '[[hooks.pre_tool_use]]' >> {config}\ntouch {state}/planted\n",
            config = config.display(),
            state = state.display()
        ),
    )
    .unwrap();
    let result = run(&client, &session, "bash plant.sh").await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# the user's config\n"
    );
    assert!(!state.join("planted").exists());
}

/// Services in the user's runtime directory (systemd's and the session bus's sockets, which
/// run commands on request) are out of a sandboxed command's reach; unsandboxed, the same
/// connection works (the control).
#[tokio::test]
async fn services_in_the_runtime_directory_are_out_of_reach() {
    let runtime = tempfile::tempdir_in(outside_base()).unwrap();
    let runtime = runtime.path().canonicalize().unwrap();
    let bus = runtime.join("bus");
    let listener = std::os::unix::net::UnixListener::bind(&bus).unwrap();
    listener.set_nonblocking(true).unwrap();
    let daemon = TestDaemon::start_with_env(&[("XDG_RUNTIME_DIR", runtime.to_str().unwrap())]);
    let client = connected(&daemon).await;
    let places = Places::new();
    let line = format!(
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{}')\"",
        bus.display()
    );
    let sandboxed = session(&client, &places.project, json!({})).await;
    let result = run(&client, &sandboxed, &line).await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(listener.accept().is_err(), "the service was reached");
}

/// A command that may write the parent of its root (a root under `/tmp`) swaps the root for a
/// symlink to a directory outside: the commands after it get no write rule through the link,
/// so the outside stays unchanged.
#[tokio::test]
async fn a_root_swapped_for_a_symlink_sends_no_later_write_outside() {
    let (_daemon, client, places, session) = sandboxed().await;
    let root = quoted(&places.project);
    let moved = format!("'{}.moved'", places.project.display());
    let swap = run(
        &client,
        &session,
        &format!(
            "cd / && mv {root} {moved} && ln -s {} {root}",
            quoted(&places.outside)
        ),
    )
    .await;
    assert_eq!(swap["ok"], json!(true), "{swap}");
    let before = Places::snapshot(&places.outside);
    for attempt in 0..3 {
        let result = run(
            &client,
            &session,
            &format!("echo x > {root}/written-{attempt}; echo y > written-here-{attempt}"),
        )
        .await;
        assert_eq!(result["ok"], json!(false), "{result}");
    }
    assert_eq!(Places::snapshot(&places.outside), before);
    // Put back, so that the project's temp directory is removed whole.
    std::fs::remove_file(&places.project).unwrap();
    std::fs::rename(
        format!("{}.moved", places.project.display()),
        &places.project,
    )
    .unwrap();
}

/// A config file given with `--config` in a place commands may write, in a directory that is
/// not toold's own, is read-only to them too (its hooks would run unsandboxed at the next
/// start).
#[tokio::test]
async fn a_config_file_in_a_writable_place_stays_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().canonicalize().unwrap().join("settings.toml");
    std::fs::write(&config, "# the user's config\n").unwrap();
    let wrapper = [
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("exec \"$0\" \"$@\" --config '{}'", config.display()),
    ];
    let daemon = TestDaemon::start_under(&wrapper, &[]);
    let client = connected(&daemon).await;
    let places = Places::new();
    let session = session(&client, &places.project, json!({})).await;
    let result = run(
        &client,
        &session,
        &format!("echo '[[hooks.pre_tool_use]]' >> {}", quoted(&config)),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "# the user's config\n"
    );
}

/// A shell that makes itself its init's tracee (`PTRACE_TRACEME`) and stops has not ended:
/// the call is not reported as over (nor as stopped); it runs to its deadline.
#[tokio::test]
async fn a_shell_that_stops_as_its_init_s_tracee_has_not_ended() {
    let test = "a_shell_that_stops_as_its_init_s_tracee_has_not_ended";
    if require::program(test, "python3", &[], "apt-get install python3").is_none() {
        return;
    }
    let (_daemon, client, _places, session) = sandboxed().await;
    let line = "exec python3 -c 'import ctypes, os; ctypes.CDLL(None).ptrace(0, 0, 0, 0); \
                os.kill(os.getpid(), 15)'";
    let response = client
        .request(
            "tools/execute",
            json!({"session_id": session, "calls": [{"id": "c", "name": "run_command",
                "arguments": {"command": line, "timeout_ms": 1500}}]}),
        )
        .await
        .unwrap();
    let result = &response["results"][0]["result"];
    assert_eq!(result["error_type"], "timeout", "{result}");
}

/// A root moved aside and made anew between two commands of the same sandbox: the next
/// command writes the new directory, and not the old one, wherever it went (a ruleset built
/// ahead holds to the directory it was built for).
#[tokio::test]
async fn a_root_moved_aside_and_made_anew_is_the_one_written() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let base = tempfile::tempdir_in(outside_base()).unwrap();
    let project = base.path().canonicalize().unwrap().join("project");
    let aside = project.with_file_name("aside");
    std::fs::create_dir(&project).unwrap();
    let first = session(&client, &project, json!({})).await;
    let result = run(&client, &first, "touch before").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    std::fs::rename(&project, &aside).unwrap();
    std::fs::create_dir(&project).unwrap();
    let second = session(&client, &project, json!({})).await;
    let result = run(&client, &second, "touch after").await;
    assert_eq!(result["ok"], json!(true), "{result}");
    assert!(project.join("after").exists());
    let result = run(
        &client,
        &second,
        &format!("touch {}", quoted(&aside.join("planted"))),
    )
    .await;
    assert_eq!(result["ok"], json!(false), "{result}");
    assert!(!aside.join("planted").exists());
}
