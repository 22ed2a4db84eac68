//! The Unix sockets a sandboxed command may reach: those a process of the command itself
//! serves, and those the config names. A server outside the sandbox that acts on request — a
//! tmux server, an SSH agent, any program's socket at any path or abstract name — must run
//! nothing for a command, whatever path, link, call or mode it tries; the command's own
//! servers, socket pairs and descriptor passing keep working.

use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use toold_tests::child::{KillOnDrop, wait_for_path};
use toold_tests::daemon::TestDaemon;
use toold_tests::require;

use super::{Places, connected, output, quoted, run, sandboxed_on, session};

/// A tmux server of the user's, outside the sandbox, on `socket`: what it would run for a
/// command is the proof of an escape.
struct Tmux {
    program: PathBuf,
    socket: PathBuf,
}

impl Tmux {
    fn start(program: PathBuf, socket: PathBuf) -> Self {
        let started = Command::new(&program)
            .arg("-S")
            .arg(&socket)
            .args(["new-session", "-d", "-s", "user"])
            .env_remove("TMUX")
            .status()
            .unwrap();
        assert!(started.success());
        Self { program, socket }
    }

    fn windows(&self) -> usize {
        let listed = Command::new(&self.program)
            .arg("-S")
            .arg(&self.socket)
            .args(["list-windows", "-a"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&listed.stdout).lines().count()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new(&self.program)
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

/// The lines an attacker's program would try against the servers at `targets` (each a path to
/// a stream socket) and the datagram server at `dgram`, each in a script out of the permission
/// engine's sight, from a directory `cwd` of the root.
fn attempts(
    tmux: &Path,
    targets: &[&Path],
    dgram: &Path,
    abstract_name: &str,
    ran: &Path,
) -> Vec<String> {
    let ran = quoted(ran);
    let mut lines = vec![
        format!("tmux -S {} new-window \"touch {ran}\"", quoted(tmux)),
        format!("tmux -S {} run-shell \"touch {ran}\"", quoted(tmux)),
        format!(
            "ln -s {} link.sock && tmux -S link.sock new-window \"touch {ran}\"",
            quoted(tmux)
        ),
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\\\0{abstract_name}'); s.sendall(b'hello')\""
        ),
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b'dgram', '{}')\"",
            dgram.display()
        ),
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendmsg([b'msg'], [], 0, '{}')\"",
            dgram.display()
        ),
        format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.connect('{}'); s.send(b'con')\"",
            dgram.display()
        ),
        format!("echo hi | socat - UNIX-SENDTO:{}", dgram.display()),
    ];
    for target in targets {
        lines.push(format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); s.sendall(b'hello')\"",
            target.display()
        ));
        lines.push(format!(
            "echo hello | socat - UNIX-CONNECT:{}",
            target.display()
        ));
        // A thread that swaps the address after the daemon looked: the kernel never reads it
        // again.
        lines.push(format!(
            "python3 -c \"
import ctypes, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
good = b'\\\\x01\\\\x00' + b'own.sock'.ljust(108, b'\\\\0')
bad = b'\\\\x01\\\\x00' + b'{}'.ljust(108, b'\\\\0')
buf = ctypes.create_string_buffer(good, 110)
stop = False
def flip():
    while not stop:
        ctypes.memmove(buf, bad, 110); ctypes.memmove(buf, good, 110)
threading.Thread(target=flip, daemon=True).start()
for i in range(200):
    s = socket.socket(socket.AF_UNIX)
    if libc.connect(s.fileno(), buf, 110) == 0:
        s.sendall(b'hello')
    s.close()
stop = True
\"",
            target.display()
        ));
    }
    lines
}

#[tokio::test]
async fn servers_outside_the_sandbox_act_for_no_command() {
    let Some(tmux_program) = require::program(
        "servers_outside_the_sandbox_act_for_no_command",
        "tmux",
        &[],
        "apt-get install tmux",
    ) else {
        return;
    };
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    let ran = places.outside.join("ran");
    let tmux = Tmux::start(tmux_program.clone(), places.outside.join("tmux.sock"));
    // The user's own servers: one outside, one inside the root (made by a program that is not
    // the command), and an abstract one; a datagram one.
    let outside = places.outside.join("server.sock");
    let inside = places.project.join("user.sock");
    let listeners = [
        UnixListener::bind(&outside).unwrap(),
        UnixListener::bind(&inside).unwrap(),
    ];
    let abstract_name = format!("toold-test-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt;
        let address =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        UnixListener::bind_addr(&address).unwrap()
    };
    let dgram_path = places.outside.join("dgram.sock");
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    for listener in listeners.iter().chain([&abstract_listener]) {
        listener.set_nonblocking(true).unwrap();
    }
    dgram.set_nonblocking(true).unwrap();
    let windows = tmux.windows();
    // The command's own server, which the swapping thread's good address names.
    std::fs::write(
        places.project.join("own.py"),
        "import socket, os\ns = socket.socket(socket.AF_UNIX)\ns.bind('own.sock')\ns.listen(512)\n",
    )
    .unwrap();

    for sandbox in [json!({}), json!({"mode": "read_only", "network": false})] {
        let session = session(&client, &places.project, sandbox.clone()).await;
        let lines = attempts(
            &tmux.socket,
            &[&outside, &inside, &daemon.socket()],
            &dgram_path,
            &abstract_name,
            &ran,
        );
        for (index, line) in lines.iter().enumerate() {
            let script = places.project.join(format!("attempt-{index}.sh"));
            std::fs::write(&script, format!("cd {}\n{line}\n", quoted(&places.project))).unwrap();
            let result = run(&client, &session, &format!("bash {}", quoted(&script))).await;
            assert!(!ran.exists(), "{sandbox}: {line}: {result}");
            assert_eq!(tmux.windows(), windows, "{sandbox}: {line}: {result}");
            for listener in listeners.iter().chain([&abstract_listener]) {
                assert!(listener.accept().is_err(), "{sandbox}: {line}: {result}");
            }
            assert!(
                dgram.recv(&mut [0u8; 64]).is_err(),
                "{sandbox}: {line}: {result}"
            );
            let _ = std::fs::remove_file(places.project.join("link.sock"));
        }
        // The result says what was refused.
        let line = format!("echo hello | socat - UNIX-CONNECT:{}", outside.display());
        let result = run(&client, &session, &line).await;
        assert_eq!(result["ok"], json!(false), "{result}");
        let sandbox_metadata = &result["metadata"]["sandbox"];
        assert_eq!(
            sandbox_metadata["refused_sockets"],
            json!([outside.display().to_string()]),
            "{result}"
        );
        assert_eq!(sandbox_metadata["likely_denied"], json!(true), "{result}");
        assert!(
            sandbox_metadata["hint"]
                .as_str()
                .unwrap()
                .contains("unix_sockets"),
            "{result}"
        );
    }
}

/// What a command serves itself it reaches, however: by path (relative or not, in the root or
/// its `/tmp`), by abstract name, by datagram, and through a socket pair, passing descriptors.
#[tokio::test]
async fn a_commands_own_servers_and_socket_pairs_keep_working() {
    let daemon = TestDaemon::start();
    let client = connected(&daemon).await;
    let places = Places::new();
    std::fs::write(
        places.project.join("ipc.py"),
        r#"
import os, socket, sys, array

def serve(family, kind, address):
    server = socket.socket(family, kind)
    server.bind(address)
    if kind == socket.SOCK_STREAM:
        server.listen(1)
    pid = os.fork()
    if pid == 0:
        if kind == socket.SOCK_STREAM:
            conn, _ = server.accept()
            conn.sendall(conn.recv(64).upper())
        else:
            data, sender = server.recvfrom(64)
            server.sendto(data.upper(), sender)
        os._exit(0)
    server.close()
    return pid

results = []
for address in ["stream.sock", os.path.abspath("abs.sock"), "/tmp/in-tmp.sock", "\0own-abstract"]:
    pid = serve(socket.AF_UNIX, socket.SOCK_STREAM, address)
    client = socket.socket(socket.AF_UNIX)
    client.connect(address)
    client.sendall(b"stream")
    results.append(client.recv(64).decode())
    os.waitpid(pid, 0)

pid = serve(socket.AF_UNIX, socket.SOCK_DGRAM, "dgram.sock")
client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
client.bind("reply.sock")
client.sendto(b"dgram", "dgram.sock")
results.append(client.recv(64).decode())
os.waitpid(pid, 0)

left, right = socket.socketpair()
read_end, write_end = os.pipe()
left.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [write_end]))])
message, ancillary, _, _ = right.recvmsg(16, socket.CMSG_SPACE(4))
passed = array.array("i", ancillary[0][2])[0]
os.write(passed, b"through a passed pipe")
os.close(passed); os.close(write_end)
results.append(message.decode() + ": " + os.read(read_end, 64).decode())
try:
    left.sendmsg([b"zero copy"], [], socket.MSG_ZEROCOPY if hasattr(socket, "MSG_ZEROCOPY") else 0x4000000)
    results.append("zerocopy sent")
except OSError as error:
    results.append("zerocopy " + str(error.errno))
print(", ".join(results))
"#,
    )
    .unwrap();
    for sandbox in [json!({}), json!({"network": false})] {
        let session = session(&client, &places.project, sandbox.clone()).await;
        let result = run(&client, &session, "rm -f *.sock && python3 ipc.py").await;
        assert_eq!(result["ok"], json!(true), "{sandbox}: {result}");
        assert_eq!(
            output(&result),
            "STREAM, STREAM, STREAM, STREAM, DGRAM, fd: through a passed pipe, zerocopy 95\n",
            "{sandbox}: {result}"
        );
        assert_eq!(result["metadata"]["sandbox"].get("refused_sockets"), None);
    }
}

/// An SSH agent of the user's, started on `socket` (once it listens there); killed when
/// dropped.
fn start_agent(program: &Path, socket: &Path) -> KillOnDrop {
    let agent = KillOnDrop(
        Command::new(program)
            .arg("-D")
            .arg("-a")
            .arg(socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_path(socket);
    agent
}

/// `[sandbox] unix_sockets` lets commands reach what the config names — an SSH agent for `git
/// push` — where they would look for it (in the runtime directory, which is otherwise hidden,
/// or in the host's `/tmp`, which the session's own replaces), and its variable is passed;
/// every other service's socket and variable stays out of reach.
#[tokio::test]
async fn the_config_names_the_sockets_commands_may_reach() {
    let test = "the_config_names_the_sockets_commands_may_reach";
    let (Some(ssh_agent), Some(_)) = (
        require::program(test, "ssh-agent", &[], "apt-get install openssh-client"),
        require::program(test, "ssh-add", &[], "apt-get install openssh-client"),
    ) else {
        return;
    };
    let runtime = tempfile::tempdir_in(super::outside_base()).unwrap();
    let runtime_dir = runtime.path().canonicalize().unwrap();
    let in_runtime = runtime_dir.join("ssh-agent.socket");
    let other = runtime_dir.join("other-agent.socket");
    let host_tmp = tempfile::tempdir_in("/tmp").unwrap();
    let in_tmp = host_tmp.path().canonicalize().unwrap().join("agent.sock");
    let _agents = [
        start_agent(&ssh_agent, &in_runtime),
        start_agent(&ssh_agent, &other),
        start_agent(&ssh_agent, &in_tmp),
    ];
    let config = format!(
        "[sandbox]\nunix_sockets = [\"$SSH_AUTH_SOCK\", \"{}\"]\n",
        in_tmp.display()
    );
    let daemon = TestDaemon::start_with_config_and_env(
        &config,
        &[
            ("XDG_RUNTIME_DIR", runtime_dir.to_str().unwrap()),
            ("SSH_AUTH_SOCK", in_runtime.to_str().unwrap()),
            ("TMUX", &format!("{},1,0", other.display())),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                &format!("unix:path={}", other.display()),
            ),
            ("DISPLAY", ":0"),
        ],
    );
    let (client, _places, session) = sandboxed_on(&daemon).await;
    let result = run(
        &client,
        &session,
        "env | grep -E '^(SSH_AUTH_SOCK|TMUX|DBUS_SESSION_BUS_ADDRESS|DISPLAY)=' | sort",
    )
    .await;
    assert_eq!(
        output(&result),
        format!("SSH_AUTH_SOCK={}\n", in_runtime.display()),
        "{result}"
    );
    assert_eq!(
        result["metadata"]["sandbox"]["unix_sockets"],
        json!([in_runtime, in_tmp]),
        "{result}"
    );
    for agent in [&in_runtime, &in_tmp] {
        let result = run(
            &client,
            &session,
            &format!("SSH_AUTH_SOCK={} ssh-add -l", quoted(agent)),
        )
        .await;
        assert!(
            output(&result).contains("The agent has no identities"),
            "{}: {result}",
            agent.display()
        );
    }
    // The rest of the runtime directory is still hidden; another agent there is not reached.
    let result = run(
        &client,
        &session,
        &format!("ls -A {}", quoted(&runtime_dir)),
    )
    .await;
    assert_eq!(output(&result), "ssh-agent.socket\n", "{result}");
    let result = run(
        &client,
        &session,
        &format!("SSH_AUTH_SOCK={} ssh-add -l", quoted(&other)),
    )
    .await;
    assert!(
        !output(&result).contains("The agent has no identities"),
        "{result}"
    );
}
