//! A stand-in for `toold serve` under socket activation, for the activation test: takes the
//! socket systemd (or `systemd-socket-activate`) passed, says `READY=1`, starts the watchdog,
//! answers one JSON-RPC request line on one connection, and on SIGTERM or when that connection
//! closes says `STOPPING=1` and exits 0.
//!
//! It answers with an error when the `LISTEN_*` variables outlived taking the socket, so that
//! the test, which only looks for a result, fails then.

use std::process::ExitCode;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};
use toold::server::{socket, systemd};

fn main() -> ExitCode {
    // A current-thread runtime starts no thread, so the process is still single-threaded when
    // the socket is taken and the variables can be removed.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("activation-probe: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve_one_connection())
}

async fn serve_one_connection() -> ExitCode {
    let listener = match systemd::inherited_listener() {
        Ok(Some(listener)) => listener,
        Ok(None) => {
            eprintln!("activation-probe: no socket inherited (run me under socket activation)");
            return ExitCode::from(2);
        }
        Err(error) => {
            eprintln!("activation-probe: {error}");
            return ExitCode::FAILURE;
        }
    };
    let left_over: Vec<&str> = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .collect();
    // Before READY=1: from then on a SIGTERM means "drain and stop", never death by signal.
    let mut terminate = match signal(SignalKind::terminate()) {
        Ok(terminate) => terminate,
        Err(error) => {
            eprintln!("activation-probe: cannot handle SIGTERM: {error}");
            return ExitCode::FAILURE;
        }
    };
    let _watchdog = systemd::spawn_watchdog();
    if let Err(error) = systemd::notify_ready() {
        eprintln!("activation-probe: cannot send READY=1: {error}");
        return ExitCode::FAILURE;
    }

    let (stream, _) = match listener.accept().await {
        Ok(connection) => connection,
        Err(error) => {
            eprintln!("activation-probe: accept: {error}");
            return ExitCode::FAILURE;
        }
    };
    if !socket::peer_allowed(&stream) {
        eprintln!("activation-probe: a peer of another user connected");
        return ExitCode::FAILURE;
    }
    let (reader, mut writer) = stream.into_split();
    let mut lines = BufReader::new(reader).lines();
    let Ok(Some(line)) = lines.next_line().await else {
        eprintln!("activation-probe: the client sent no request line");
        return ExitCode::FAILURE;
    };
    let id = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|request| request.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    let response = if left_over.is_empty() {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"server": "activation-probe"}})
    } else {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32603,
            "message": format!("still in the environment after taking the socket: {left_over:?}"),
        }})
    };
    let mut bytes = response.to_string().into_bytes();
    bytes.push(b'\n');
    if let Err(error) = writer.write_all(&bytes).await {
        eprintln!("activation-probe: cannot answer: {error}");
        return ExitCode::FAILURE;
    }
    // Serve (and ping the watchdog) until the client hangs up or SIGTERM comes, then stop as
    // the daemon does: STOPPING=1 and exit 0.
    tokio::select! {
        () = async { while let Ok(Some(_)) = lines.next_line().await {} } => {}
        _ = terminate.recv() => {}
    }
    if let Err(error) = systemd::notify_stopping() {
        eprintln!("activation-probe: cannot send STOPPING=1: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
