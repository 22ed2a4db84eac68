//! Reading a command's two pipes as output arrives: decoded per stream, sent live, and kept
//! as head and tail.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::mpsc;

use super::capture::{HeadTail, Utf8Decoder};
use super::halted;
use crate::tools::{LiveUpdate, OutputChunk, OutputStream, ToolContext};

/// One read from a pipe, and so the most one `tool/output` event carries. A quarter of what a
/// pipe holds: the events a slow client has not taken yet (up to `MAX_OUTPUT_LAG` in the
/// session's log, and a connection's outgoing queue) stay a few MiB.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// Reads both pipes as output arrives and keeps it: decoded per stream, sent live, and cut to
/// head and tail.
pub(super) struct OutputPump {
    stdout: Option<Receiver>,
    stderr: Option<Receiver>,
    stdout_buffer: Box<[u8]>,
    stderr_buffer: Box<[u8]>,
    stdout_text: Utf8Decoder,
    stderr_text: Utf8Decoder,
    kept: HeadTail,
    /// Every byte read, before decoding.
    pub total_bytes: u64,
    live: Option<mpsc::Sender<LiveUpdate>>,
}

impl OutputPump {
    pub(super) fn new(
        stdout: Option<Receiver>,
        stderr: Option<Receiver>,
        max_output_bytes: usize,
        live: Option<mpsc::Sender<LiveUpdate>>,
    ) -> Self {
        Self {
            stdout,
            stderr,
            stdout_buffer: vec![0; READ_BUFFER_BYTES].into_boxed_slice(),
            stderr_buffer: vec![0; READ_BUFFER_BYTES].into_boxed_slice(),
            stdout_text: Utf8Decoder::default(),
            stderr_text: Utf8Decoder::default(),
            kept: HeadTail::new(max_output_bytes),
            total_bytes: 0,
            live,
        }
    }

    pub(super) fn is_open(&self) -> bool {
        self.stdout.is_some() || self.stderr.is_some()
    }

    /// Waits for one read on either pipe. Cancel-safe (only reads are awaited), so it can race
    /// in a `select!`; the bytes stay in that stream's buffer for [`accept`](Self::accept).
    pub(super) async fn read(&mut self) -> (OutputStream, io::Result<usize>) {
        let Self {
            stdout,
            stderr,
            stdout_buffer,
            stderr_buffer,
            ..
        } = self;
        let from_stdout = async {
            match stdout {
                Some(pipe) => pipe.read(stdout_buffer).await,
                None => std::future::pending().await,
            }
        };
        let from_stderr = async {
            match stderr {
                Some(pipe) => pipe.read(stderr_buffer).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            read = from_stdout => (OutputStream::Stdout, read),
            read = from_stderr => (OutputStream::Stderr, read),
        }
    }

    /// Takes in what [`read`](Self::read) returned: keeps it, sends it live, or closes the
    /// stream at its end.
    pub(super) async fn accept(
        &mut self,
        stream: OutputStream,
        read: io::Result<usize>,
        ctx: &ToolContext,
    ) {
        let text = match read {
            Ok(0) => {
                self.close(stream);
                self.finish_stream(stream)
            }
            Ok(count) => {
                self.total_bytes += count as u64;
                match stream {
                    OutputStream::Stdout => self.stdout_text.decode(&self.stdout_buffer[..count]),
                    OutputStream::Stderr => self.stderr_text.decode(&self.stderr_buffer[..count]),
                }
            }
            Err(err) => {
                tracing::warn!(%err, ?stream, "cannot read a command's output");
                self.close(stream);
                self.finish_stream(stream)
            }
        };
        if text.is_empty() {
            return;
        }
        self.kept.push(&text);
        self.send_live(OutputChunk { stream, text }, ctx).await;
    }

    /// Sends a chunk to the live listener, waiting while it lags (that is the backpressure),
    /// but never past a cancellation: once stopping, a chunk that does not fit is dropped.
    async fn send_live(&mut self, chunk: OutputChunk, ctx: &ToolContext) {
        let Some(live) = &self.live else {
            return;
        };
        let receiver_gone = tokio::select! {
            biased;
            sent = live.send(LiveUpdate::Output(chunk)) => sent.is_err(),
            _ = halted(&ctx.cancel, ctx.deadline) => false,
        };
        if receiver_gone {
            self.live = None;
        }
    }

    fn close(&mut self, stream: OutputStream) {
        match stream {
            OutputStream::Stdout => self.stdout = None,
            OutputStream::Stderr => self.stderr = None,
        }
    }

    fn finish_stream(&mut self, stream: OutputStream) -> String {
        match stream {
            OutputStream::Stdout => self.stdout_text.finish(),
            OutputStream::Stderr => self.stderr_text.finish(),
        }
    }

    /// The kept output and whether it was cut. An incomplete character left in a stream that
    /// never closed becomes U+FFFD.
    pub(super) fn finish(mut self) -> (String, bool) {
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            let rest = self.finish_stream(stream);
            self.kept.push(&rest);
        }
        self.kept.finish()
    }
}
