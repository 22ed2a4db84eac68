//! What any relay between an MCP client and its server pays on this machine, whatever work it
//! does: the same `echo` call from a raw client (JSON lines, blocking I/O, as toold's benchmark
//! client) straight to a copy of the server's stdio, and through a relay that does no work at
//! all (a tokio runtime of two workers, as the daemon's, copying bytes between a Unix socket and
//! another copy's stdio). toold is such a relay plus its pipeline; the MCP figure reports both.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use anyhow::{Context, ensure};

/// A raw MCP client: one request line out, lines in until its answer.
pub struct RawClient<W: Write, R: BufRead> {
    writer: W,
    reader: R,
    next_id: u64,
    line: String,
}

impl<W: Write, R: BufRead> RawClient<W, R> {
    /// Initializes the session, as any client must before calling a tool.
    fn new(writer: W, reader: R) -> anyhow::Result<Self> {
        let mut client = Self {
            writer,
            reader,
            next_id: 1,
            line: String::new(),
        };
        client.request(
            r#""method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"toold-bench","version":"1"}}"#,
        )?;
        client
            .writer
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        client.writer.flush()?;
        Ok(client)
    }

    /// One `tools/call` of `echo`; an error unless its answer is a result.
    pub fn echo(&mut self) -> anyhow::Result<()> {
        self.request(
            r#""method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}"#,
        )?;
        ensure!(
            self.line.contains("Echo: hi"),
            "echo answered {}",
            self.line
        );
        Ok(())
    }

    /// Sends a request of `method_and_params` and reads lines until its answer (in `line`).
    fn request(&mut self, method_and_params: &str) -> anyhow::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        writeln!(
            self.writer,
            r#"{{"jsonrpc":"2.0","id":{id},{method_and_params}}}"#
        )?;
        self.writer.flush()?;
        let answer_id = format!("\"id\":{id}");
        loop {
            self.line.clear();
            ensure!(
                self.reader.read_line(&mut self.line)? > 0,
                "the server closed its output"
            );
            if self.line.contains(&answer_id) {
                return Ok(());
            }
        }
    }
}

/// A copy of the server, its stdio the raw client's.
pub struct Direct {
    child: Child,
    pub client: RawClient<ChildStdin, BufReader<ChildStdout>>,
}

impl Direct {
    pub fn start(program: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("start {}", program.display()))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Self {
            child,
            client: RawClient::new(stdin, stdout)?,
        })
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A zero-work relay in front of another copy of the server, and the raw client connected to it.
pub struct Relayed {
    /// Owns the relay's tasks and the copy of the server (killed when the runtime drops them).
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
    pub client: RawClient<UnixStream, BufReader<UnixStream>>,
}

impl Relayed {
    pub fn start(program: &Path) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let dir = tempfile::tempdir()?;
        let socket: PathBuf = dir.path().join("relay.sock");
        // The listener and the child's pipes register with the runtime that will poll them.
        let (listener, mut child) = {
            let _entered = runtime.enter();
            let listener = tokio::net::UnixListener::bind(&socket)?;
            let child = tokio::process::Command::new(program)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("start {}", program.display()))?;
            (listener, child)
        };
        let mut server_in = child.stdin.take().context("stdin")?;
        let mut server_out = child.stdout.take().context("stdout")?;
        runtime.spawn(async move {
            let _child = child;
            let Ok((connection, _)) = listener.accept().await else {
                return;
            };
            let (mut from_client, mut to_client) = connection.into_split();
            let _ = tokio::join!(
                tokio::io::copy(&mut from_client, &mut server_in),
                tokio::io::copy(&mut server_out, &mut to_client),
            );
        });
        let connection = UnixStream::connect(&socket)?;
        let reader = BufReader::new(connection.try_clone()?);
        Ok(Self {
            client: RawClient::new(connection, reader)?,
            _runtime: runtime,
            _dir: dir,
        })
    }
}
