//! toold on another machine over ssh, as the README's "Using toold on another machine (ssh)"
//! says, against a real OpenSSH server of the test's own on loopback: `ssh host toold connect`
//! as a JSON-RPC pipe, a socket forwarded with `ssh -N -L` (whose `toold status` names the
//! daemon's pid, not ssh's), and `ssh host toold mcp serve --allow '…'` as an MCP host's server
//! command, quoted as the README shows. The "remote" side's home, state, config and runtime
//! directories are the test's own (the sshd's `SetEnv`), and its `PATH` starts with a directory
//! holding `toold`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use toold_tests::PATIENCE;
use toold_tests::child::{KillOnDrop, stdout_of_success, wait_for_path_made_by};
use toold_tests::daemon::{ForeignDaemon, daemon_pid, toold_binary, toold_command_in};
use toold_tests::require;

/// A private sshd on 127.0.0.1 and the "remote" user's directories; stops the daemon that the
/// remote commands started, and the sshd, when dropped.
struct Remote {
    /// Dropped first: killed before its directory is removed.
    sshd: KillOnDrop,
    _dir: tempfile::TempDir,
    root: PathBuf,
    port: u16,
}

impl Remote {
    /// Starts the sshd, or says why the test is skipped.
    fn start(test: &str) -> Option<Self> {
        let sshd = require::program(
            test,
            "sshd",
            &["/usr/sbin/sshd"],
            "Debian: apt-get install openssh-server",
        )?;
        for program in ["ssh", "ssh-keygen"] {
            require::program(test, program, &[], "Debian: apt-get install openssh-client")?;
        }
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = dir
            .path()
            .canonicalize()
            .expect("canonical temporary directory");
        for sub in ["sshd", "bin", "run", "state", "config", "home", "work"] {
            std::fs::create_dir_all(root.join(sub)).expect("the test's directories");
        }
        // The remote commands name `toold`, as a user's would; the binary under test is
        // `toold-e2e`.
        std::os::unix::fs::symlink(toold_binary(), root.join("bin/toold")).expect("bin/toold");
        keygen(&root.join("sshd/host_key"));
        keygen(&root.join("client_key"));
        std::fs::copy(
            root.join("client_key.pub"),
            root.join("sshd/authorized_keys"),
        )
        .expect("authorized_keys");
        if nix::unistd::geteuid().is_root() {
            // sshd run as root refuses to start without its privilege separation directory,
            // which the package's service creates at boot, and a container never booted it.
            std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        }
        let port = free_port();
        let config = root.join("sshd/sshd_config");
        std::fs::write(&config, sshd_config(&root)).expect("sshd_config");
        let log = std::fs::File::create(root.join("sshd/sshd.log")).expect("sshd.log");
        let child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .args(["-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let mut remote = Self {
            sshd: KillOnDrop(child),
            _dir: dir,
            root,
            port,
        };
        remote.wait_until_listening();
        Some(remote)
    }

    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = self.sshd.0.try_wait() {
                panic!("sshd exited with {status}: {}", self.sshd_log());
            }
            assert!(Instant::now() < deadline, "sshd did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn sshd_log(&self) -> String {
        std::fs::read_to_string(self.root.join("sshd/sshd.log")).unwrap_or_default()
    }

    /// `ssh` to this sshd, up to and including the host: what the remote command follows.
    fn ssh_argv(&self) -> Vec<String> {
        let key = self.root.join("client_key").display().to_string();
        let port = self.port.to_string();
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            &key,
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "-p",
            &port,
            "127.0.0.1",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    /// `ssh … REMOTE_COMMAND…` (each word passed as its own argument, as a host's config does).
    fn ssh(&self, remote: &[&str]) -> Command {
        let argv = self.ssh_argv();
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .args(remote)
            // Only the test's key: not an agent's.
            .env_remove("SSH_AUTH_SOCK");
        command
    }

    /// The remote daemon's socket: `$XDG_RUNTIME_DIR/toold/toold.sock` on the remote side.
    fn socket(&self) -> PathBuf {
        self.root.join("run/toold/toold.sock")
    }

    fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    /// The pid of the daemon on the remote socket, as `toold status --json` there gives it.
    fn daemon_pid(&self) -> Option<i32> {
        let status = status_json(&self.root, &self.socket())?;
        status["pid"]
            .as_i64()
            .and_then(|pid| i32::try_from(pid).ok())
    }

    /// Stops the daemon the remote commands started (SIGTERM, waiting for it).
    fn stop_daemon(&self) {
        let pid = self
            .daemon_pid()
            .expect("a daemon answers on the remote socket");
        ForeignDaemon {
            pid: Some(nix::unistd::Pid::from_raw(pid)),
        }
        .stop();
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // A daemon still there (the test failed before stopping it) is killed, not drained.
        if let Some(pid) = self.daemon_pid() {
            drop(ForeignDaemon {
                pid: Some(nix::unistd::Pid::from_raw(pid)),
            });
        }
        // Then `sshd`, dropped after this, is killed.
    }
}

/// `ssh-keygen -t ed25519 -N '' -f path`: a key pair without a passphrase.
fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "toold-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(status.success(), "ssh-keygen: {status}");
}

/// A port nobody listened on a moment ago.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The sshd's own config: its host key, the test's key, loopback only, and the remote side's
/// environment pointed at the test's directories (`SetEnv` comes after sshd's own `HOME` and
/// `PATH`, so it wins).
fn sshd_config(root: &Path) -> String {
    let at = |sub: &str| root.join(sub).display().to_string();
    format!(
        "ListenAddress 127.0.0.1\n\
         HostKey {host_key}\n\
         PidFile {pid}\n\
         AuthorizedKeysFile {authorized}\n\
         StrictModes no\n\
         UsePAM no\n\
         PermitRootLogin yes\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         AllowStreamLocalForwarding yes\n\
         X11Forwarding no\n\
         PrintMotd no\n\
         SetEnv HOME={home} XDG_RUNTIME_DIR={run} XDG_STATE_HOME={state} \
         XDG_CONFIG_HOME={config} PATH={bin}:/usr/local/bin:/usr/bin:/bin \
         TOOLD_LOG=info,toold=debug,rmcp=warn\n",
        host_key = at("sshd/host_key"),
        pid = at("sshd/sshd.pid"),
        authorized = at("sshd/authorized_keys"),
        home = at("home"),
        run = at("run"),
        state = at("state"),
        config = at("config"),
        bin = at("bin"),
    )
}

/// What a root user must add to a command that may start the daemon.
fn allow_root() -> Option<&'static str> {
    nix::unistd::geteuid().is_root().then_some("--allow-root")
}

/// `toold status --socket SOCKET --json`, run here with `root`'s directories; `None` when no
/// daemon answers.
fn status_json(root: &Path, socket: &Path) -> Option<Value> {
    let output = toold_command_in(root)
        .args(["status", "--json", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .output()
        .expect("run toold status");
    let report: Value = serde_json::from_slice(&output.stdout).ok()?;
    (report["up"] == true).then_some(report)
}

/// A JSON-RPC peer over a child's stdin and stdout, NDJSON.
struct Pipe {
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Pipe {
    /// Sends a request and returns its response, skipping the notifications before it.
    async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .expect("write to ssh");
        loop {
            let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"))
                .expect("read from ssh")
                .unwrap_or_else(|| panic!("ssh closed before answering {method}"));
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message.get("method").is_none() {
                assert_eq!(message["id"], id, "{message}");
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
        }
    }
}

#[tokio::test]
async fn ssh_toold_connect_is_a_json_rpc_pipe_to_the_remote_daemon() {
    let Some(remote) = Remote::start("remote_ssh::connect_pipe") else {
        return;
    };
    let mut words = vec!["toold", "connect"];
    words.extend(allow_root());
    let mut child = tokio::process::Command::from(remote.ssh(&words))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start ssh");
    let mut pipe = Pipe {
        stdin: child.stdin.take().expect("ssh's stdin"),
        lines: BufReader::new(child.stdout.take().expect("ssh's stdout")).lines(),
    };
    let initialized = pipe
        .call(
            1,
            "initialize",
            json!({"protocol_version": 1, "client_info": {"name": "over ssh"}}),
        )
        .await;
    let pid = initialized["pid"].as_i64().expect("initialize's pid");
    assert_eq!(
        i64::from(daemon_pid(&remote.socket()).as_raw()),
        pid,
        "the daemon listening on the remote socket is the one that answered"
    );
    let session = pipe
        .call(
            2,
            "session/create",
            json!({"cwd": remote.work(), "mode": "accept_edits"}),
        )
        .await;
    let session_id = session["session_id"].as_str().expect("a session id");
    let executed = pipe
        .call(
            3,
            "tools/execute",
            json!({"session_id": session_id, "calls": [{
                "id": "c1",
                "name": "write_file",
                "arguments": {"path": "from-afar.txt", "content": "written over ssh\n"},
            }]}),
        )
        .await;
    assert_eq!(executed["results"][0]["result"]["ok"], true, "{executed}");
    assert_eq!(
        std::fs::read_to_string(remote.work().join("from-afar.txt")).expect("the file written"),
        "written over ssh\n"
    );

    // End of input ends the bridge, and ssh with it; the daemon stays.
    drop(pipe);
    let output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("ssh ends within 30 s after its input does")
        .expect("wait for ssh");
    assert!(
        output.status.success(),
        "{}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    remote.stop_daemon();
}

#[tokio::test]
async fn a_forwarded_socket_reports_the_remote_daemons_pid_not_sshs() {
    let Some(remote) = Remote::start("remote_ssh::forwarded_socket") else {
        return;
    };
    // A daemon on the remote side, started as `toold connect` starts one.
    let mut words = vec!["toold", "connect"];
    words.extend(allow_root());
    let started = remote
        .ssh(&words)
        .stdin(Stdio::null())
        .output()
        .expect("run ssh toold connect");
    assert!(
        started.status.success(),
        "{}: {}",
        started.status,
        String::from_utf8_lossy(&started.stderr)
    );
    let remote_pid = daemon_pid(&remote.socket()).as_raw();

    let local = tempfile::tempdir().expect("the local side's directory");
    let local_root = local.path().canonicalize().expect("canonical");
    let forwarded = local_root.join("forwarded.sock");
    let mut forwarder = KillOnDrop(
        remote
            .ssh(&[])
            .args(["-N", "-o", "ExitOnForwardFailure=yes", "-L"])
            .arg(format!(
                "{}:{}",
                forwarded.display(),
                remote.socket().display()
            ))
            .stdin(Stdio::null())
            .spawn()
            .expect("start ssh -N -L"),
    );
    wait_for_path_made_by(&forwarded, &mut forwarder.0, "ssh -N -L");

    let status = status_json(&local_root, &forwarded).expect("the daemon answers through ssh");
    assert_eq!(status["pid"], json!(remote_pid), "{status}");
    let ssh_pid = daemon_pid(&forwarded).as_raw();
    assert_ne!(
        ssh_pid, remote_pid,
        "the forwarded socket's peer is ssh, so the pid must come from the daemon"
    );
    assert_eq!(status["socket"], json!(forwarded), "{status}");
    drop(forwarder);
    remote.stop_daemon();
}

#[tokio::test]
async fn ssh_toold_mcp_serve_with_a_quoted_rule_serves_an_mcp_host() {
    let test = "remote_ssh::mcp_serve";
    let python =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/installed/python/bin/python");
    if !require::file(test, &python, "run tests/mcp_servers/install.sh") {
        return;
    }
    let Some(remote) = Remote::start(test) else {
        return;
    };
    // As an MCP host's JSON config holds it: ssh re-parses the remote words in a shell, so the
    // rule with its space and `*` is quoted inside its one argument.
    let mut server = remote.ssh_argv();
    server.extend(["toold", "mcp", "serve"].map(str::to_owned));
    server.extend(allow_root().map(str::to_owned));
    server.extend(["--cwd".to_owned(), remote.work().display().to_string()]);
    server.extend(["--allow", "'run_command(echo *)'"].map(str::to_owned));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp_servers/host.py");
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .args(["call", "run_command", r#"{"command": "echo hi"}"#])
        .env("TOOLD_MCP_SERVER", serde_json::to_string(&server).unwrap())
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let stdout = stdout_of_success("the host", Duration::from_secs(60), run).await;
    let result: Value = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .find(|line| line["event"] == "result")
        .unwrap_or_else(|| panic!("no result in {stdout}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        result["text"].as_str().map(str::trim_end),
        Some("hi"),
        "{result}"
    );
    remote.stop_daemon();
}

/// Without `XDG_RUNTIME_DIR` (as under an sshd without PAM's systemd session), `toold connect`
/// says on stderr which socket it falls back to, before anything else. As root, the daemon it
/// tries to start refuses to run without `--allow-root`, so no daemon is left on that shared
/// socket; as another user one would be, which might be the user's own to stop: skipped.
#[test]
fn without_xdg_runtime_dir_connect_names_the_socket_it_falls_back_to() {
    if !require::root("remote_ssh::fallback_socket") {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().canonicalize().expect("canonical");
    let output = toold_command_in(&root)
        .env_remove("XDG_RUNTIME_DIR")
        .args(["connect", "--start-timeout", "5"])
        .stdin(Stdio::null())
        .output()
        .expect("run toold connect");
    let uid = nix::unistd::getuid().as_raw();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.lines().next(),
        Some(
            format!("toold: no XDG_RUNTIME_DIR; using the socket /tmp/toold-{uid}/toold.sock")
                .as_str()
        ),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("no XDG_RUNTIME_DIR").count(),
        1,
        "said once: {stderr}"
    );
    // Stdout is the protocol's: nothing of this there.
    assert!(!String::from_utf8_lossy(&output.stdout).contains("XDG_RUNTIME_DIR"));
}

/// `toold audit` reads this machine's files: where there are none (a daemon reached through a
/// forwarded socket keeps its log on its own machine) it says so, rather than listing nothing.
#[test]
fn audit_without_a_log_here_says_the_daemon_may_run_elsewhere() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let root = dir.path().canonicalize().expect("canonical");
    let output = toold_command_in(&root)
        .arg("audit")
        .stdin(Stdio::null())
        .output()
        .expect("run toold audit");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let log = root.join("state/toold/audit.jsonl");
    assert!(
        stderr.contains(&format!(
            "no audit log at {} on this machine; the daemon you reach may run elsewhere: run \
             `toold audit` there",
            log.display()
        )),
        "{stderr}"
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(output.stdout.is_empty());
}
