//! Reading and writing protocol messages on an async byte stream.
//!
//! Owns the buffering between TCP and the proto codec. It never interprets a message: it hands
//! each decoded message to its caller, and a decode error ends the connection (a byte stream
//! cannot be resynchronised).

use tandem_proto::wire::codec::{decode, encode_checked, CodecError};
use tandem_proto::wire::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a peer connection ended or a message could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum PeerIoError {
    /// The socket failed.
    #[error("peer socket: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection.
    #[error("peer closed the connection")]
    Closed,
    /// The peer sent bytes that are not a Tandem message (bad magic, version, size, payload).
    #[error("peer sent a bad message: {0}")]
    Codec(#[from] CodecError),
    /// The peer sent nothing within the deadline.
    #[error("peer sent nothing within {0} ms")]
    Timeout(u64),
}

/// Reads whole messages from a stream, keeping partial bytes between calls.
pub struct MessageReader<R> {
    inner: R,
    buf: Vec<u8>,
    max_frame_bytes: usize,
}

impl<R: AsyncRead + Unpin> MessageReader<R> {
    /// Wrap a read half; `max_frame_bytes` bounds each payload before it is read.
    pub fn new(inner: R, max_frame_bytes: usize) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(64 * 1024),
            max_frame_bytes,
        }
    }

    /// The next message.
    ///
    /// # Errors
    /// [`PeerIoError::Closed`] at end of stream, [`PeerIoError::Codec`] for bad bytes,
    /// [`PeerIoError::Io`].
    pub async fn next(&mut self) -> Result<Message, PeerIoError> {
        loop {
            if let Some((msg, used)) = decode(&self.buf, self.max_frame_bytes)? {
                self.buf.drain(..used);
                return Ok(msg);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                return Err(PeerIoError::Closed);
            }
        }
    }

    /// The next message within `timeout_ms` milliseconds.
    ///
    /// # Errors
    /// [`PeerIoError::Timeout`], and as [`MessageReader::next`].
    pub async fn next_within(&mut self, timeout_ms: u64) -> Result<Message, PeerIoError> {
        tokio::time::timeout(std::time::Duration::from_millis(timeout_ms), self.next())
            .await
            .map_err(|_| PeerIoError::Timeout(timeout_ms))?
    }
}

/// Encode and write one message.
///
/// # Errors
/// [`PeerIoError::Codec`] when the message exceeds `max_frame_bytes`, [`PeerIoError::Io`].
pub async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: &Message,
    max_frame_bytes: usize,
) -> Result<(), PeerIoError> {
    let bytes = encode_checked(msg, max_frame_bytes)?;
    w.write_all(&bytes).await?;
    Ok(())
}
