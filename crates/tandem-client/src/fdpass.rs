//! Passing a file descriptor with a message over the engine socket (`SCM_RIGHTS`).
//!
//! An engine whose page pool has no path (SGLang's shared host pool lives in a memfd) hands the
//! agent the pool's descriptor itself: [`send_with_fd`] sends the bytes of one request with the
//! descriptor as ancillary data, and the agent reads every byte of its engine socket with
//! [`recv_with_fds`], so no descriptor is ever dropped by a plain `read`.
//!
//! # Which request a descriptor belongs to
//! Linux attaches the descriptor to the first byte the `sendmsg` wrote, and a `recvmsg` that
//! receives it ends at the end of the buffer the descriptor came with at the latest. The
//! client sends a request that carries a descriptor with a `sendmsg` of its own, after every
//! earlier byte is written, so the descriptor arrives with a read whose **last byte lies inside
//! that request**: [`FdLedger`] keeps each descriptor at that stream position and hands it to
//! the message that contains it. A descriptor that arrives with any other request is closed.
//!
//! Built on `rustix`'s safe `sendmsg`/`recvmsg` (owned and borrowed descriptors, no `unsafe`
//! here): std's ancillary-data API is unstable on Rust 1.85 and tokio has none. Owns no socket
//! and no policy; it never interprets message bytes.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// Most descriptors one read accepts; more in one read are cut by the kernel (and closed) and
/// reported as [`Received::truncated`].
pub const MAX_FDS_PER_READ: usize = 4;

/// Send `bytes` with `fd` attached (`SCM_RIGHTS`); returns the bytes written (at least one on
/// success; the caller writes the rest with plain writes). `MSG_NOSIGNAL`: a closed peer is an
/// `EPIPE` error, never a `SIGPIPE`.
///
/// # Errors
/// The socket's error; `EBADF` when `fd` is not an open descriptor (nothing is sent then).
pub fn send_with_fd(socket: impl AsFd, bytes: &[u8], fd: BorrowedFd<'_>) -> std::io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for one descriptor"));
    }
    Ok(sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

/// What one [`recv_with_fds`] read brought.
#[derive(Debug)]
pub struct Received {
    /// Bytes read into the buffer (0: the peer closed the connection).
    pub bytes: usize,
    /// Descriptors that arrived with them, close-on-exec.
    pub fds: Vec<OwnedFd>,
    /// More descriptors arrived than [`MAX_FDS_PER_READ`]: the kernel closed the rest.
    pub truncated: bool,
}

/// Read bytes into `buf`, with any descriptors that arrive with them (`MSG_CMSG_CLOEXEC`).
/// A non-blocking socket gives `WouldBlock` when nothing is there.
///
/// # Errors
/// The socket's error.
pub fn recv_with_fds(socket: impl AsFd, buf: &mut [u8]) -> std::io::Result<Received> {
    recv_flags(socket, buf, RecvFlags::CMSG_CLOEXEC)
}

/// [`recv_with_fds`] that never blocks, whatever the socket's mode (`MSG_DONTWAIT`):
/// `WouldBlock` when nothing is there.
///
/// # Errors
/// The socket's error.
pub fn recv_with_fds_now(socket: impl AsFd, buf: &mut [u8]) -> std::io::Result<Received> {
    recv_flags(socket, buf, RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT)
}

fn recv_flags(socket: impl AsFd, buf: &mut [u8], flags: RecvFlags) -> std::io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_READ))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(socket, &mut [IoSliceMut::new(buf)], &mut control, flags)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok(Received {
        bytes: got.bytes,
        fds,
        truncated: got.flags.contains(ReturnFlags::CTRUNC),
    })
}

/// Descriptors received on one stream, each kept at the stream position of the last byte read
/// with it, until the message holding that position claims them (see the module docs).
#[derive(Debug, Default)]
pub struct FdLedger {
    /// `(position of the last byte of the read, descriptor)`, in stream order.
    held: std::collections::VecDeque<(u64, OwnedFd)>,
    /// Reads whose descriptors the kernel cut, by the position of their last byte.
    truncated: Vec<u64>,
}

/// The descriptors of one message.
#[derive(Debug, Default)]
pub struct MessageFds {
    /// Descriptors that arrived with the message, in arrival order.
    pub fds: Vec<OwnedFd>,
    /// Some descriptors sent with the message were cut by the kernel (too many in one read).
    pub truncated: bool,
}

impl FdLedger {
    /// Note a read of `bytes` bytes that ended at stream position `end` (exclusive) and brought
    /// `received`.
    pub fn received(&mut self, end: u64, received: Received) {
        if received.bytes == 0 {
            return;
        }
        let last = end - 1;
        self.held
            .extend(received.fds.into_iter().map(|fd| (last, fd)));
        if received.truncated {
            self.truncated.push(last);
        }
    }

    /// The descriptors of the message occupying stream positions `start..end`; descriptors of
    /// earlier positions (that no message claimed) are closed.
    pub fn take(&mut self, start: u64, end: u64) -> MessageFds {
        let mut out = MessageFds::default();
        while let Some((at, _)) = self.held.front() {
            if *at >= end {
                break;
            }
            if let Some((at, fd)) = self.held.pop_front() {
                if at >= start {
                    out.fds.push(fd);
                }
            }
        }
        out.truncated = self.truncated.iter().any(|&at| at >= start && at < end);
        self.truncated.retain(|&at| at >= end);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn read_all(b: &UnixStream, ledger: &mut FdLedger, at: &mut u64, buf: &mut Vec<u8>) {
        let mut chunk = [0u8; 3];
        b.set_nonblocking(true).unwrap();
        loop {
            match recv_with_fds(b, &mut chunk) {
                Ok(r) if r.bytes > 0 => {
                    buf.extend_from_slice(&chunk[..r.bytes]);
                    *at += r.bytes as u64;
                    ledger.received(*at, r);
                }
                _ => return,
            }
        }
    }

    #[test]
    fn a_descriptor_goes_to_the_message_it_was_sent_with() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        // Message one: 5 bytes, no descriptor; message two: 7 bytes with the descriptor;
        // message three: 4 bytes. Reads of 3 bytes glue and split them arbitrarily.
        (&a).write_all(b"11111").unwrap();
        assert_eq!(send_with_fd(&a, b"2222222", file.as_fd()).unwrap(), 7);
        (&a).write_all(b"3333").unwrap();
        let (mut ledger, mut at, mut buf) = (FdLedger::default(), 0, Vec::new());
        read_all(&b, &mut ledger, &mut at, &mut buf);
        assert_eq!(buf, b"1111122222223333");
        assert!(ledger.take(0, 5).fds.is_empty());
        let two = ledger.take(5, 12);
        assert_eq!(two.fds.len(), 1);
        assert!(!two.truncated);
        // The received descriptor names the same file.
        let same = rustix::fs::fstat(&two.fds[0]).unwrap();
        let orig = rustix::fs::fstat(&file).unwrap();
        assert_eq!((same.st_dev, same.st_ino), (orig.st_dev, orig.st_ino));
        assert!(ledger.take(12, 16).fds.is_empty());
    }

    #[test]
    fn a_closed_descriptor_is_an_error_and_sends_nothing() {
        let (a, b) = UnixStream::pair().unwrap();
        // A number past any descriptor limit: never open, not even by another test thread
        // (a descriptor closed here could be reused by one before the send).
        let raw = 1 << 30;
        // SAFETY: deliberately a descriptor number that is not open, only passed to sendmsg,
        // which must refuse it; nothing reads or closes through it.
        let closed = unsafe { BorrowedFd::borrow_raw(raw) };
        let e = send_with_fd(&a, b"x", closed).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(rustix::io::Errno::BADF.raw_os_error())
        );
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4];
        assert!(
            recv_with_fds(&b, &mut buf).is_err(),
            "not one byte was sent"
        );
    }

    #[test]
    fn descriptors_no_message_claims_are_closed() {
        let mut ledger = FdLedger::default();
        let file = tempfile::tempfile().unwrap();
        ledger.received(
            4,
            Received {
                bytes: 4,
                fds: vec![file.into()],
                truncated: true,
            },
        );
        let later = ledger.take(10, 20);
        assert!(later.fds.is_empty() && !later.truncated);
        assert!(
            ledger.held.is_empty(),
            "the unclaimed descriptor was dropped"
        );
    }
}
