//! The host's end of `toold mcp serve`: stdin and stdout read and written on the runtime's own
//! thread when they are pipes or sockets (as every MCP host gives its servers), instead of
//! through tokio's `stdin()`/`stdout()`, which hand each read and write to a blocking thread.
//! That hand-over is two thread wake-ups per request, each costing tens of µs when the other
//! thread sleeps on another CPU; on the runtime's thread a request costs none.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

pub type HostReader = Pin<Box<dyn AsyncRead + Send>>;
pub type HostWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// Stdin and stdout for the MCP transport. Must be called on the runtime. A pipe or a socket
/// is made non-blocking and polled by the runtime; anything else (a terminal, a file,
/// `/dev/null`) goes through tokio's blocking-thread stdio. So does stdout when stderr is the
/// same pipe (`2>&1`): making it non-blocking would make the warnings written to stderr fail
/// when the pipe is full.
pub fn host_stdio() -> (HostReader, HostWriter) {
    let input = std::io::stdin();
    let reader: HostReader = match polled(input.as_fd()) {
        Some(Polled::Pipe(file)) => match pipe::Receiver::from_file(file) {
            Ok(receiver) => Box::pin(receiver),
            Err(_) => Box::pin(tokio::io::stdin()),
        },
        Some(Polled::Socket(socket)) => Box::pin(socket),
        None => Box::pin(tokio::io::stdin()),
    };
    let output = std::io::stdout();
    let shared_with_stderr = same_file(output.as_fd(), std::io::stderr().as_fd());
    let writer: HostWriter = match (!shared_with_stderr)
        .then(|| polled(output.as_fd()))
        .flatten()
    {
        Some(Polled::Pipe(file)) => match pipe::Sender::from_file(file) {
            Ok(sender) => Box::pin(sender),
            Err(_) => Box::pin(tokio::io::stdout()),
        },
        Some(Polled::Socket(socket)) => Box::pin(socket),
        None => Box::pin(tokio::io::stdout()),
    };
    (reader, writer)
}

enum Polled {
    Pipe(File),
    Socket(UnixStream),
}

/// A copy of `fd` the runtime can poll, when it is a pipe or a socket. A socket goes both ways:
/// only the direction the caller reads or writes is used (stdin and stdout may be one socket).
fn polled(fd: BorrowedFd<'_>) -> Option<Polled> {
    let file = File::from(fd.try_clone_to_owned().ok()?);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        return Some(Polled::Pipe(file));
    }
    if kind.is_socket() {
        let socket = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(file));
        socket.set_nonblocking(true).ok()?;
        return UnixStream::from_std(socket).ok().map(Polled::Socket);
    }
    None
}

/// Whether two descriptors are the same file (a pipe, a terminal).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    let stat = |fd: BorrowedFd<'_>| -> io::Result<(u64, u64)> {
        let metadata = File::from(fd.try_clone_to_owned()?).metadata()?;
        Ok((metadata.dev(), metadata.ino()))
    };
    matches!((stat(a), stat(b)), (Ok(a), Ok(b)) if a == b)
}
