//! An engine's reply written to its socket from the place that produced it.
//!
//! Owns the one non-blocking write of a reply's bytes by the `ProtocolActor`, in the same turn
//! as the core's output: no oneshot hop to the endpoint's task before the bytes move, and so
//! no yield before the peer messages of the same input (the answer is on the socket before
//! the fan-out starts). Whatever the socket does not take at once (it would block, took part,
//! failed, or the reply cannot be encoded) goes back to the endpoint, which writes it as it
//! writes any reply and meets any socket error there, so a failure ends the connection exactly
//! as before. It never decides an answer and never reads.

use tandem_client::api::EngineReply;
use tandem_client::wire::{encode, encode_call};

use super::{Answered, DirectReply};

/// Write `reply` to `to`'s socket at once: [`Answered::Written`] when the socket took it
/// whole, else what is left for the endpoint to write.
pub(super) fn write(to: &DirectReply, reply: EngineReply) -> Answered {
    let encoded = match to.call {
        Some(call) => encode_call(&reply, call),
        None => encode(&reply),
    };
    let Ok(bytes) = encoded else {
        // The endpoint encodes it again and meets the same error, as before.
        return Answered::Reply(reply);
    };
    match to.stream.try_write(&bytes) {
        Ok(n) if n == bytes.len() => Answered::Written,
        Ok(n) => Answered::Rest(bytes[n..].to_vec()),
        // Would block, or failed: the endpoint's write waits for room or reports the error.
        Err(_) => Answered::Rest(bytes),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tandem_client::api::{AgentError, CallId, EngineReply};
    use tandem_client::wire::{decode_call, encode_call, split_message};
    use tokio::net::UnixStream;

    use super::{write, Answered, DirectReply};

    fn refusal(len: usize) -> EngineReply {
        EngineReply::Error(AgentError::BadRequest {
            reason: "x".repeat(len),
        })
    }

    /// Everything the engine's side can read now.
    fn drain(engine: &UnixStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = engine.try_read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    #[actix_rt::test]
    async fn a_reply_the_socket_takes_is_on_it_whole_under_its_call() {
        let (agent, engine) = UnixStream::pair().expect("pair");
        let to = DirectReply {
            stream: Arc::new(agent),
            call: Some(CallId(7)),
        };
        to.stream.writable().await.expect("writable");
        assert!(matches!(write(&to, refusal(10)), Answered::Written));
        engine.readable().await.expect("readable");
        let got = drain(&engine);
        let (range, used) = split_message(&got).expect("framed").expect("whole");
        assert_eq!(used, got.len(), "one message, nothing more");
        let (reply, call) = decode_call::<EngineReply>(&got[range]).expect("decodes");
        assert_eq!((reply, call), (refusal(10), Some(CallId(7))));
    }

    #[actix_rt::test]
    async fn a_reply_the_socket_cannot_take_goes_back_whole_to_the_endpoint() {
        let (agent, engine) = UnixStream::pair().expect("pair");
        let to = DirectReply {
            stream: Arc::new(agent),
            call: Some(CallId(9)),
        };
        to.stream.writable().await.expect("writable");
        // The engine reads nothing: fill the socket until it takes no more.
        let filler = vec![0u8; 64 * 1024];
        while to.stream.try_write(&filler).is_ok() {}
        match write(&to, refusal(100)) {
            Answered::Rest(bytes) => {
                assert_eq!(
                    bytes,
                    encode_call(&refusal(100), CallId(9)).expect("encodes")
                )
            }
            other => panic!("expected the bytes back, got {other:?}"),
        }
        drop(engine);
    }
}
