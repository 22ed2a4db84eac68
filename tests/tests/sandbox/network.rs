//! What a command may connect to: IP sockets with the network off and on, `io_uring`, and the
//! services in the user's runtime directory.

use std::time::Duration;

use serde_json::json;
use toold_tests::daemon::TestDaemon;

use super::{Places, connected, output, outside_base, run, session};

/// A TCP listener and a UDP socket on 127.0.0.1, and a command that connects and sends to
/// each.
#[tokio::test]
async fn network_off_refuses_ip_sockets_and_network_on_allows_them() {
    // The config opens the network, so that a session can have it either way.
    let daemon = TestDaemon::start_with_config(Some("[sandbox]\nnetwork = true\n"));
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
    // Every family but the local ones: SMC (TCP underneath), Bluetooth, CAN, TIPC, RDS, XDP.
    let families = run(
        &client,
        &offline,
        "python3 -c \"\nimport socket\nfor family in (43, 31, 29, 30, 21, 44, 42):\n    try:\n        socket.socket(family, socket.SOCK_STREAM if family == 43 else socket.SOCK_RAW)\n        print(family, 'made')\n    except OSError as e:\n        print(family, e.errno)\n\"",
    )
    .await;
    assert!(!output(&families).contains("made"), "{families}");
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
