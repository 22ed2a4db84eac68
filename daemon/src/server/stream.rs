//! A client connection's socket as the daemon polls it: registered for reading only, and for
//! writing only while a write waits for room.
//!
//! Why: the runtime's own `UnixStream` registers every socket for both directions, edge
//! triggered, and the kernel signals room to write each time the client reads. So every
//! response the client read woke the daemon once more, for nothing: a third wake-up per call
//! (besides the request and, for an MCP tool, the server's answer), which a virtual CPU pays for
//! as dearly as the ones that carry work. Here a write goes straight to the socket, and only
//! one the socket refuses (a client not reading) registers a second descriptor of the same
//! socket for writability, dropped again once a write fits whole.

use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// The reading half: the socket, registered for readability alone.
pub(super) struct ReadHalf {
    socket: Arc<AsyncFd<UnixStream>>,
}

/// The writing half: writes to the socket directly; `waiting` is the registration for
/// writability that only a refused write makes, kept until a write fits whole.
pub(super) struct WriteHalf {
    socket: Arc<AsyncFd<UnixStream>>,
    waiting: Option<AsyncFd<OwnedFd>>,
}

/// Splits an accepted connection into its two halves, registered with the current runtime.
pub(super) fn split(stream: tokio::net::UnixStream) -> io::Result<(ReadHalf, WriteHalf)> {
    // Out of the runtime's registration for both directions, into one for reading.
    let stream = stream.into_std()?;
    let socket = Arc::new(register(stream, Interest::READABLE)?);
    Ok((
        ReadHalf {
            socket: Arc::clone(&socket),
        },
        WriteHalf {
            socket,
            waiting: None,
        },
    ))
}

/// What owns its descriptor: open, and the same one, for as long as it lives.
trait OwnsItsDescriptor: AsRawFd {}
impl OwnsItsDescriptor for UnixStream {}
impl OwnsItsDescriptor for OwnedFd {}

/// Registers `owner`'s descriptor with the current runtime for `interest` alone.
#[allow(unsafe_code)]
fn register<T: OwnsItsDescriptor>(owner: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: the runtime needs the descriptor to stay open and the same while registered;
    // `owner` owns it, and the `AsyncFd` owns `owner` until it deregisters.
    unsafe { AsyncFd::register_with_interest(owner, interest) }.map_err(io::Error::from)
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.socket.poll_read_ready(cx))?;
            let room = buf.remaining();
            match read_into(ready.get_inner(), buf) {
                Ok(read) => {
                    // Less than there was room for: the socket is drained, so the next read
                    // waits for the kernel's next edge instead of trying and being refused.
                    if read > 0 && read < room {
                        ready.clear_ready();
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }
}

/// Reads from `socket` into `buf`'s unfilled part, which need not be initialized: the caller's
/// buffer is a frame decoder's spare capacity, 8 KiB or more, and zeroing it before every read
/// cost about a twentieth of a call's instructions (perf of the one-call round trip).
#[allow(unsafe_code)]
fn read_into(socket: &UnixStream, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    // SAFETY: `read(2)` writes only into the `unfilled.len()` bytes it is given and reports how
    // many it wrote; those, and no others, are then marked initialized and filled.
    unsafe {
        let unfilled = buf.unfilled_mut();
        let read = nix::libc::read(
            socket.as_raw_fd(),
            unfilled.as_mut_ptr().cast(),
            unfilled.len(),
        );
        let read = usize::try_from(read).map_err(|_| io::Error::last_os_error())?;
        buf.assume_init(read);
        buf.advance(read);
        Ok(read)
    }
}

impl WriteHalf {
    /// The registration for writability, made at the first refused write. A duplicate that
    /// cannot be made (the descriptor limit reached) fails the write, which closes the
    /// connection as any failed write does.
    fn waiting(&mut self) -> io::Result<&AsyncFd<OwnedFd>> {
        if self.waiting.is_none() {
            // A second descriptor of the same socket: one epoll instance holds each descriptor
            // once, and the reading half's must stay registered for reading alone. Registered
            // now, it reports room at once if the client read in between.
            let duplicate = OwnedFd::from(self.socket.get_ref().try_clone()?);
            self.waiting = Some(register(duplicate, Interest::WRITABLE)?);
        }
        Ok(self.waiting.as_ref().expect("made above"))
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.socket.get_ref().write(buf) {
                Ok(written) => {
                    // All of it fit: the client keeps up, and while registered each of its
                    // reads would wake us. Part of it: the socket is full again, and the next
                    // write waits on the registration it would otherwise make anew.
                    if written == buf.len() {
                        self.waiting = None;
                    }
                    return Poll::Ready(Ok(written));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    let waiting = self.waiting()?;
                    let mut room = ready!(waiting.poll_write_ready(cx))?;
                    // The socket was full when last tried: this readiness may be older than
                    // that refusal, so forget it and try the write again.
                    room.clear_ready();
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Poll::Ready(Err(err)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.socket.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

impl Drop for WriteHalf {
    /// As the runtime's own write half does: the client sees the end of the stream even while
    /// the reading half lives on.
    fn drop(&mut self) {
        let _ = self.socket.get_ref().shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The events every epoll instance of this process waits for on descriptor `fd`, read from
    /// `/proc/self/fdinfo` (one mask per registration; the runtime holds its instance under two
    /// descriptors, whose identical lines count once).
    fn registrations_of(fd: i32) -> Vec<u32> {
        let mut lines = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let is_epoll = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy() == "anon_inode:[eventpoll]");
            if !is_epoll {
                continue;
            }
            let info = format!("/proc/self/fdinfo/{}", entry.file_name().to_string_lossy());
            let Ok(info) = std::fs::read_to_string(info) else {
                continue;
            };
            for line in info.lines() {
                // "tfd:        9 events:       19 data: ..."
                let mut words = line.split_whitespace();
                if words.next() == Some("tfd:") && words.next() == Some(&fd.to_string()) {
                    lines.insert(line.to_owned());
                }
            }
        }
        lines
            .iter()
            .map(|line| {
                let mask = line.split_whitespace().nth(3).unwrap();
                u32::from_str_radix(mask, 16).unwrap()
            })
            .collect()
    }

    const EPOLLIN: u32 = 0x1;
    const EPOLLOUT: u32 = 0x4;

    #[tokio::test]
    async fn a_client_reading_never_wakes_the_daemon_and_a_full_socket_still_drains_in_order() {
        let (daemon_end, mut client) = UnixStream::pair().unwrap();
        daemon_end.set_nonblocking(true).unwrap();
        let (mut reader, mut writer) =
            split(tokio::net::UnixStream::from_std(daemon_end).unwrap()).unwrap();
        // Registered for reading alone: the client's reads report no room to write.
        let socket_fd = writer.socket.get_ref().as_raw_fd();
        let masks = registrations_of(socket_fd);
        assert_eq!(masks.len(), 1, "{masks:x?}");
        assert!(
            masks[0] & EPOLLIN != 0 && masks[0] & EPOLLOUT == 0,
            "{:x}",
            masks[0]
        );

        // Far more than the socket holds, while the client reads nothing: the write waits,
        // registered for room meanwhile.
        let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let writing = tokio::spawn(async move {
            writer.write_all(&sent).await.unwrap();
            (writer, sent)
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !writing.is_finished(),
            "8 MiB cannot fit in an unread socket"
        );
        let reading = std::thread::spawn(move || {
            let mut received = vec![0; 8 * 1024 * 1024];
            client.read_exact(&mut received).unwrap();
            (client, received)
        });
        let (mut writer, sent) = writing.await.unwrap();
        let (mut client, received) = reading.join().unwrap();
        assert!(received == sent, "every byte, in order");
        assert!(
            writer.waiting.is_none(),
            "the registration for room ends with the wait"
        );
        let masks = registrations_of(socket_fd);
        assert!(masks.iter().all(|mask| mask & EPOLLOUT == 0), "{masks:x?}");

        // Both ways still work afterwards, and dropping the writer ends the client's stream.
        writer.write_all(b"after\n").await.unwrap();
        std::io::Write::write_all(&mut client, b"request\n").unwrap();
        let mut request = [0; 8];
        reader.read_exact(&mut request).await.unwrap();
        assert_eq!(&request, b"request\n");
        drop(writer);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"after\n");
    }
}
