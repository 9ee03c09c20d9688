//! Framing of the engine endpoint: each message is a 4-byte big-endian payload length followed
//! by its postcard encoding.
//!
//! The socket is local (a Unix domain socket between an engine and its own agent), so there is
//! no magic or version in the envelope: `Hello` fails cleanly on a mismatch because postcard
//! refuses an unknown variant. The claimed length is checked against the limit before any
//! payload is read or allocated.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest payload accepted, bytes. A frame with thousands of tasks is far below it.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("engine socket: {0}")]
    Io(#[from] std::io::Error),
    /// The header claims more than [`MAX_MESSAGE_BYTES`].
    #[error("message too large: header claims {claimed} bytes, limit is {limit}")]
    TooLarge {
        /// Claimed payload bytes.
        claimed: u64,
        /// The limit in bytes.
        limit: u64,
    },
    /// The payload is not a valid encoding of the expected type.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Encode one message: length header plus postcard payload.
///
/// # Errors
/// [`WireError::Malformed`] if serialisation fails, [`WireError::TooLarge`] past the limit.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, WireError> {
    // Reserve the header, append the payload, then fill the header in.
    let mut out =
        postcard::to_extend(msg, vec![0u8; 4]).map_err(|e| WireError::Malformed(e.to_string()))?;
    let len = out.len() - 4;
    if len > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge {
            claimed: len as u64,
            limit: MAX_MESSAGE_BYTES as u64,
        });
    }
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Decode the payload of one message (without its length header).
///
/// # Errors
/// [`WireError::Malformed`] when the bytes are not a `T`.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, WireError> {
    postcard::from_bytes(payload).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Write one message to a blocking stream.
///
/// # Errors
/// As [`encode`], or [`WireError::Io`].
pub fn write_message<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), WireError> {
    w.write_all(&encode(msg)?)?;
    w.flush()?;
    Ok(())
}

/// Read one message from a blocking stream.
///
/// # Errors
/// [`WireError::Io`] (including `UnexpectedEof` when the peer closed), [`WireError::TooLarge`]
/// before reading the payload, [`WireError::Malformed`].
pub fn read_message<T: DeserializeOwned>(r: &mut impl Read) -> Result<T, WireError> {
    let mut header = [0u8; 4];
    r.read_exact(&mut header)?;
    let len = check_len(header)?;
    // Grow as bytes arrive rather than allocating the claimed length up front.
    let mut payload = Vec::new();
    let got = r.take(len as u64).read_to_end(&mut payload)?;
    if got < len {
        return Err(WireError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed mid-message",
        )));
    }
    decode(&payload)
}

/// Validate a length header and return the payload length.
///
/// # Errors
/// [`WireError::TooLarge`] past [`MAX_MESSAGE_BYTES`].
pub fn check_len(header: [u8; 4]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_MESSAGE_BYTES {
        return Err(WireError::TooLarge {
            claimed: len as u64,
            limit: MAX_MESSAGE_BYTES as u64,
        });
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EngineReply, EngineRequest};
    use tandem_proto::ids::{Epoch, Step};

    #[test]
    fn round_trip_through_a_byte_stream() {
        let req = EngineRequest::Frame {
            epoch: Epoch(2),
            step: Step(7),
            deadline_ms: 100,
        };
        let mut buf = Vec::new();
        write_message(&mut buf, &req).unwrap();
        let back: EngineRequest = read_message(&mut buf.as_slice()).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn huge_header_is_refused_before_reading() {
        let mut bytes = u32::MAX.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let e = read_message::<EngineReply>(&mut bytes.as_slice()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "message too large: header claims {} bytes, limit is {}",
                u32::MAX,
                MAX_MESSAGE_BYTES
            )
        );
    }

    #[test]
    fn garbage_is_malformed_and_truncation_is_io() {
        let mut bytes = 3u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0xff, 0xff, 0xff]);
        let e = read_message::<EngineReply>(&mut bytes.as_slice()).unwrap_err();
        assert!(e.to_string().starts_with("malformed message:"), "{e}");
        let e = read_message::<EngineReply>(&mut [0u8, 0, 0, 9, 1].as_slice()).unwrap_err();
        assert!(matches!(e, WireError::Io(_)), "{e}");
    }
}
