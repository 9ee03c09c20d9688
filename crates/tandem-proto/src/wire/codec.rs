//! The byte envelope of every [`Message`]: length-delimited and versioned.
//!
//! Layout of one encoded message (integers big endian):
//!
//! ```text
//! offset 0  2 bytes  MAGIC  b"TD"
//! offset 2  u16      WIRE_VERSION
//! offset 4  u32      payload length in bytes
//! offset 8  payload  postcard encoding of the Message
//! ```
//!
//! Owns encoding and streaming decoding. It must never panic on any input and never
//! allocate or wait for a payload whose claimed length exceeds the caller's limit: the length
//! is checked against the limit before the payload is touched.

use crate::wire::message::Message;
use thiserror::Error;

/// The two bytes that open every message.
pub const MAGIC: [u8; 2] = *b"TD";
/// The envelope and payload encoding version this build speaks.
/// Version 2: block hashes are 128 bits (16 bytes on the wire).
pub const WIRE_VERSION: u16 = 2;
/// Bytes of the envelope header before the payload.
pub const HEADER_LEN: usize = 8;

/// Why a byte string is not a message.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Error)]
pub enum CodecError {
    /// The first two bytes are not [`MAGIC`]: the peer does not speak Tandem.
    #[error("bad magic: expected {expected:02x?}, found {found:02x?}")]
    BadMagic {
        /// [`MAGIC`].
        expected: [u8; 2],
        /// The bytes received.
        found: [u8; 2],
    },
    /// The envelope version differs from [`WIRE_VERSION`].
    #[error("unsupported wire version: we speak {ours}, peer sent {theirs}")]
    UnsupportedVersion {
        /// [`WIRE_VERSION`].
        ours: u16,
        /// The version in the header.
        theirs: u16,
    },
    /// The header claims a payload larger than the limit (bytes).
    #[error("message too large: header claims {claimed} payload bytes, limit is {limit}")]
    TooLarge {
        /// Payload bytes the header claims.
        claimed: u64,
        /// The caller's limit in payload bytes.
        limit: u64,
    },
    /// The payload is not a valid postcard-encoded message.
    #[error("malformed payload: {0}")]
    Malformed(String),
}

/// Encode `msg` into one envelope (header plus payload).
///
/// # Panics
/// Only if the payload exceeds `u32::MAX` bytes, which no frame within any sane
/// `max_frame_bytes` reaches; use [`encode_checked`] to enforce a limit instead.
pub fn encode(msg: &Message) -> Vec<u8> {
    let payload = postcard::to_allocvec(msg).expect("every Message is postcard-serializable");
    let len = u32::try_from(payload.len()).expect("message payload exceeds 4 GiB");
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&WIRE_VERSION.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Encode `msg`, refusing with [`CodecError::TooLarge`] when its payload exceeds
/// `max_frame_bytes` (so the receiver with the same limit will accept it).
pub fn encode_checked(msg: &Message, max_frame_bytes: usize) -> Result<Vec<u8>, CodecError> {
    let payload = postcard::to_allocvec(msg).map_err(|e| CodecError::Malformed(e.to_string()))?;
    let too_large = || CodecError::TooLarge {
        claimed: payload.len() as u64,
        limit: max_frame_bytes as u64,
    };
    if payload.len() > max_frame_bytes {
        return Err(too_large());
    }
    let len = u32::try_from(payload.len()).map_err(|_| too_large())?;
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&WIRE_VERSION.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Decode the first message in `buf`.
///
/// Returns `Ok(None)` when `buf` holds only a prefix of a valid message (read more bytes and
/// call again), `Ok(Some((message, consumed)))` where `consumed` is the envelope's length in
/// bytes, or a typed error; after an error the stream cannot be resynchronised and the
/// connection should be closed. `max_frame_bytes` limits the payload, in bytes.
pub fn decode(buf: &[u8], max_frame_bytes: usize) -> Result<Option<(Message, usize)>, CodecError> {
    let Some(magic) = buf.get(0..2) else {
        return Ok(None);
    };
    if magic != MAGIC {
        return Err(CodecError::BadMagic {
            expected: MAGIC,
            found: [magic[0], magic[1]],
        });
    }
    let Some(version) = buf.get(2..4) else {
        return Ok(None);
    };
    let version = u16::from_be_bytes([version[0], version[1]]);
    if version != WIRE_VERSION {
        return Err(CodecError::UnsupportedVersion {
            ours: WIRE_VERSION,
            theirs: version,
        });
    }
    let Some(len) = buf.get(4..HEADER_LEN) else {
        return Ok(None);
    };
    let claimed = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    if u64::from(claimed) > max_frame_bytes as u64 {
        return Err(CodecError::TooLarge {
            claimed: claimed.into(),
            limit: max_frame_bytes as u64,
        });
    }
    // `claimed <= max_frame_bytes`, a usize, so this conversion is lossless.
    let end = HEADER_LEN + claimed as usize;
    let Some(payload) = buf.get(HEADER_LEN..end) else {
        return Ok(None);
    };
    let (msg, rest) = postcard::take_from_bytes::<Message>(payload)
        .map_err(|e| CodecError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::Malformed(format!(
            "{} trailing bytes after the message",
            rest.len()
        )));
    }
    Ok(Some((msg, end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Epoch, Rank, Step};
    use crate::wire::message::Ack;

    fn ack() -> Message {
        Message::Ack(Ack {
            epoch: Epoch(3),
            rank: Rank(1),
            step: Step(7),
        })
    }

    #[test]
    fn round_trip_and_consumed_length() {
        let bytes = encode(&ack());
        let mut stream = bytes.clone();
        stream.extend_from_slice(&bytes);
        let (m, n) = decode(&stream, 1024).unwrap().unwrap();
        assert_eq!(m, ack());
        assert_eq!(n, bytes.len());
        let (m2, _) = decode(&stream[n..], 1024).unwrap().unwrap();
        assert_eq!(m2, ack());
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let bytes = encode(&ack());
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut], 1024), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn limit_is_checked_from_the_header_alone() {
        let mut header = Vec::from(MAGIC);
        header.extend_from_slice(&WIRE_VERSION.to_be_bytes());
        header.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode(&header, 1 << 20),
            Err(CodecError::TooLarge {
                claimed: u32::MAX.into(),
                limit: 1 << 20
            })
        );
    }

    #[test]
    fn encode_checked_enforces_the_limit() {
        let bytes = encode_checked(&ack(), 1024).unwrap();
        assert_eq!(bytes, encode(&ack()));
        let payload = bytes.len() - HEADER_LEN;
        assert_eq!(
            encode_checked(&ack(), payload - 1),
            Err(CodecError::TooLarge {
                claimed: payload as u64,
                limit: payload as u64 - 1
            })
        );
    }

    #[test]
    fn trailing_payload_bytes_are_malformed() {
        let mut bytes = encode(&ack());
        bytes.push(0);
        let len = (bytes.len() - HEADER_LEN) as u32;
        bytes[4..8].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            decode(&bytes, 1024),
            Err(CodecError::Malformed(
                "1 trailing bytes after the message".into()
            ))
        );
    }

    #[test]
    fn bad_magic_and_version() {
        assert_eq!(
            decode(b"GET / HTTP/1.1", 1024),
            Err(CodecError::BadMagic {
                expected: MAGIC,
                found: *b"GE"
            })
        );
        let mut bytes = encode(&ack());
        bytes[2..4].copy_from_slice(&9u16.to_be_bytes());
        assert_eq!(
            decode(&bytes, 1024),
            Err(CodecError::UnsupportedVersion {
                ours: WIRE_VERSION,
                theirs: 9
            })
        );
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            CodecError::BadMagic {
                expected: MAGIC,
                found: *b"GE"
            }
            .to_string(),
            "bad magic: expected [54, 44], found [47, 45]"
        );
        assert_eq!(
            CodecError::UnsupportedVersion { ours: 1, theirs: 2 }.to_string(),
            "unsupported wire version: we speak 1, peer sent 2"
        );
        assert_eq!(
            CodecError::TooLarge {
                claimed: 10,
                limit: 5
            }
            .to_string(),
            "message too large: header claims 10 payload bytes, limit is 5"
        );
        assert_eq!(
            CodecError::Malformed("x".into()).to_string(),
            "malformed payload: x"
        );
    }
}
