//! Framing of the engine endpoint: each message is a 4-byte big-endian payload length followed
//! by its payload.
//!
//! ```text
//! offset 0  u32 (big endian)  payload length in bytes, at most MAX_MESSAGE_BYTES
//! offset 4  payload           postcard(body) ‖ postcard(CallId), the call id as a varint
//! ```
//!
//! The body is an [`crate::EngineRequest`] (engine → agent) or an [`crate::EngineReply`]
//! (agent → engine). The call id after it is what matches a reply to its request
//! ([`crate::api::CallId`]): [`crate::EngineClient`] always sends one and takes a reply only
//! when it carries the id of the call waiting for it. A payload that ends right after the body
//! has no call id: tools that speak the wire by hand may send such bare requests, and the
//! agent answers them bare, in order, as the protocol did before call ids; the client never
//! accepts a bare reply.
//!
//! The socket is local (a Unix domain socket between an engine and its own agent), so there is
//! no magic or version in the envelope: `Hello` fails cleanly on a mismatch because postcard
//! refuses an unknown variant. The claimed length is checked against the limit before any
//! payload is read or allocated.

use std::io::{Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::CallId;

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

/// Encode one message with its call id after the body (see the module docs).
///
/// # Errors
/// As [`encode`].
pub fn encode_call<T: Serialize>(msg: &T, call: CallId) -> Result<Vec<u8>, WireError> {
    let out =
        postcard::to_extend(msg, vec![0u8; 4]).map_err(|e| WireError::Malformed(e.to_string()))?;
    let mut out =
        postcard::to_extend(&call, out).map_err(|e| WireError::Malformed(e.to_string()))?;
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

/// Decode a payload (without its length header): the body and the call id after it, `None`
/// for a bare message that ends with its body.
///
/// # Errors
/// [`WireError::Malformed`] when the body is not a `T`, or the bytes after it are not exactly
/// one call id.
pub fn decode_call<T: DeserializeOwned>(payload: &[u8]) -> Result<(T, Option<CallId>), WireError> {
    let malformed = |e: postcard::Error| WireError::Malformed(e.to_string());
    let (body, rest) = postcard::take_from_bytes::<T>(payload).map_err(malformed)?;
    if rest.is_empty() {
        return Ok((body, None));
    }
    let (call, rest) = postcard::take_from_bytes::<CallId>(rest).map_err(malformed)?;
    if !rest.is_empty() {
        return Err(WireError::Malformed(format!(
            "{} bytes after the call id",
            rest.len()
        )));
    }
    Ok((body, Some(call)))
}

/// Find one whole message at the front of `buf` (bytes read from a stream so far): the range
/// of its payload and the bytes it takes (header included), or `None` while it is incomplete.
///
/// # Errors
/// [`WireError::TooLarge`] as soon as the header is complete and claims more than the limit.
pub fn split_message(buf: &[u8]) -> Result<Option<(std::ops::Range<usize>, usize)>, WireError> {
    let Some(header) = buf.get(..4) else {
        return Ok(None);
    };
    let len = check_len([header[0], header[1], header[2], header[3]])?;
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((4..4 + len, 4 + len)))
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

/// Read one message and the call id after its body (`None` for a bare message) from a
/// blocking stream: what an agent (or a stand-in for one) reads.
///
/// # Errors
/// As [`read_message`].
pub fn read_call<T: DeserializeOwned>(r: &mut impl Read) -> Result<(T, Option<CallId>), WireError> {
    let mut header = [0u8; 4];
    r.read_exact(&mut header)?;
    let len = check_len(header)?;
    let mut payload = Vec::new();
    let got = r.take(len as u64).read_to_end(&mut payload)?;
    if got < len {
        return Err(WireError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed mid-message",
        )));
    }
    decode_call(&payload)
}

/// Write one message under `call` (bare for `None`) to a blocking stream: what an agent
/// answers a request read with [`read_call`].
///
/// # Errors
/// As [`write_message`].
pub fn write_call<T: Serialize>(
    w: &mut impl Write,
    msg: &T,
    call: Option<CallId>,
) -> Result<(), WireError> {
    let bytes = match call {
        Some(call) => encode_call(msg, call)?,
        None => encode(msg)?,
    };
    w.write_all(&bytes)?;
    w.flush()?;
    Ok(())
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
    fn call_ids_follow_the_body_and_bare_messages_have_none() {
        let req = EngineRequest::Ack {
            epoch: Epoch(3),
            step: Step(9),
        };
        let bytes = encode_call(&req, CallId(300)).unwrap();
        let (range, used) = split_message(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(
            decode_call::<EngineRequest>(&bytes[range.clone()]).unwrap(),
            (req.clone(), Some(CallId(300)))
        );
        // A reader that knows nothing of call ids still reads the body.
        assert_eq!(decode::<EngineRequest>(&bytes[range]).unwrap(), req);
        let bare = encode(&req).unwrap();
        assert_eq!(
            decode_call::<EngineRequest>(&bare[4..]).unwrap(),
            (req.clone(), None)
        );
        assert_eq!(split_message(&bare[..bare.len() - 1]).unwrap(), None);
        assert_eq!(split_message(&bare[..3]).unwrap(), None);
        let mut extra = bytes[4..].to_vec();
        extra.push(0);
        let e = decode_call::<EngineRequest>(&extra).unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed message: 1 bytes after the call id"
        );
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
