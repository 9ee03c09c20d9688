//! The sending side of one peer connection: a writer task fed by a channel.
//!
//! Owns the write half of a TCP stream. Messages are encoded once by the sender (a frame
//! broadcast to every follower is encoded once and shared), queued, and written in order.
//! A write error ends the task and is reported through the `on_close` callback; it never
//! reconnects: a connection lost inside an epoch is a rank failure.

use std::sync::Arc;

use tandem_proto::wire::codec::{encode_checked, CodecError};
use tandem_proto::wire::Message;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// A handle to queue messages on one peer connection. Cloning shares the connection.
#[derive(Clone, Debug)]
pub struct PeerLink {
    tx: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    max_frame_bytes: usize,
}

impl PeerLink {
    /// Start the writer task for `write_half`. `on_close` runs once, with the reason, when
    /// the connection can no longer be written (the task then ends).
    pub fn spawn<W>(
        mut write_half: W,
        max_frame_bytes: usize,
        on_close: impl FnOnce(String) + 'static,
    ) -> PeerLink
    where
        W: AsyncWrite + Unpin + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Arc<Vec<u8>>>();
        actix_rt::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if let Err(e) = write_half.write_all(&bytes).await {
                    on_close(format!("write failed: {e}"));
                    return;
                }
            }
            let _ = write_half.shutdown().await;
        });
        PeerLink {
            tx,
            max_frame_bytes,
        }
    }

    /// Encode and queue one message.
    ///
    /// # Errors
    /// [`CodecError::TooLarge`] past the frame limit. A closed connection is not an error here:
    /// its loss is reported once, by the reader or writer task.
    pub fn send(&self, msg: &Message) -> Result<(), CodecError> {
        let bytes = encode_checked(msg, self.max_frame_bytes)?;
        let _ = self.tx.send(Arc::new(bytes));
        Ok(())
    }

    /// Queue bytes already encoded (a frame shared between followers).
    pub fn send_encoded(&self, bytes: Arc<Vec<u8>>) {
        let _ = self.tx.send(bytes);
    }
}
