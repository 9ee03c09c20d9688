//! vLLM's KV event batch in msgpack, as `vllm.distributed.kv_events` declares it with msgspec
//! (`array_like=True`, `tag=True`): a batch is `[ts, [event, ...]]`; an event is an array
//! whose first element is its type name: `["BlockStored", block_hashes, parent_block_hash,
//! token_ids, block_size, lora_id, medium, lora_name]`, `["BlockRemoved", block_hashes,
//! medium]`, `["AllBlocksCleared"]`.
//!
//! Owns the encoding only. Block hashes are Tandem's 128-bit [`BlockHash`] as 16 big-endian
//! bytes (msgpack `bin 8`): vLLM's `ExternalBlockHash` is `bytes | int` and msgspec's ints stop
//! at 64 bits. Tandem knows no token ids, parent or LoRA of a block: `token_ids` is empty and
//! `parent_block_hash`, `lora_id`, `lora_name` are nil. `medium` is the tier: `CPU` (host),
//! `DISK`, `GPU` (device), vLLM's names for the same places.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use tandem_core::CacheEvent;
use tandem_proto::{BlockHash, Tier};

/// The medium string of a tier (vLLM's names: `CPU`, `DISK`, `GPU`).
pub fn medium(tier: Tier) -> &'static str {
    match tier {
        Tier::Host => "CPU",
        Tier::Disk => "DISK",
        Tier::Device => "GPU",
    }
}

/// A block hash as msgpack `bin`.
struct Hash(BlockHash);

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0.to_bytes())
    }
}

fn hashes(v: &[BlockHash]) -> Vec<Hash> {
    v.iter().map(|h| Hash(*h)).collect()
}

/// One event as its msgspec array.
struct Wire<'a> {
    event: &'a CacheEvent,
    block_size: u32,
}

impl Serialize for Wire<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.event {
            CacheEvent::Stored { hashes: h, tier } => {
                let mut seq = s.serialize_seq(Some(8))?;
                seq.serialize_element("BlockStored")?;
                seq.serialize_element(&hashes(h))?;
                seq.serialize_element(&Option::<Hash>::None)?;
                seq.serialize_element(&[0u32; 0])?;
                seq.serialize_element(&self.block_size)?;
                seq.serialize_element(&Option::<i64>::None)?;
                seq.serialize_element(medium(*tier))?;
                seq.serialize_element(&Option::<&str>::None)?;
                seq.end()
            }
            CacheEvent::Removed { hashes: h, tier } => {
                let mut seq = s.serialize_seq(Some(3))?;
                seq.serialize_element("BlockRemoved")?;
                seq.serialize_element(&hashes(h))?;
                seq.serialize_element(medium(*tier))?;
                seq.end()
            }
            CacheEvent::AllCleared => {
                let mut seq = s.serialize_seq(Some(1))?;
                seq.serialize_element("AllBlocksCleared")?;
                seq.end()
            }
        }
    }
}

/// The msgpack bytes of one batch `[ts, events]`: `ts` in seconds since the Unix epoch,
/// `block_size` in tokens (`group.tokens_per_block`).
pub fn encode_batch(ts: f64, events: &[CacheEvent], block_size: u32) -> Vec<u8> {
    let wire: Vec<Wire<'_>> = events
        .iter()
        .map(|event| Wire { event, block_size })
        .collect();
    // Serializing plain arrays, strings, numbers and bytes into a Vec cannot fail.
    rmp_serde::to_vec(&(ts, wire)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_msgspecs_array_form_with_16_byte_hashes() {
        let h = BlockHash(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        let events = [
            CacheEvent::AllCleared,
            CacheEvent::Stored {
                hashes: vec![h],
                tier: Tier::Host,
            },
            CacheEvent::Removed {
                hashes: vec![h],
                tier: Tier::Disk,
            },
        ];
        let bytes = encode_batch(1.5, &events, 512);
        let mut expected = vec![0x92, 0xcb];
        expected.extend(1.5f64.to_be_bytes());
        expected.push(0x93);
        expected.push(0x91);
        expected.push(0xa0 | 16);
        expected.extend(b"AllBlocksCleared");
        expected.push(0x98);
        expected.push(0xab);
        expected.extend(b"BlockStored");
        expected.extend([0x91, 0xc4, 16]);
        expected.extend(h.to_bytes());
        expected.extend([0xc0, 0x90, 0xcd, 0x02, 0x00, 0xc0, 0xa3]);
        expected.extend(b"CPU");
        expected.push(0xc0);
        expected.push(0x93);
        expected.push(0xac);
        expected.extend(b"BlockRemoved");
        expected.extend([0x91, 0xc4, 16]);
        expected.extend(h.to_bytes());
        expected.push(0xa4);
        expected.extend(b"DISK");
        assert_eq!(bytes, expected);
    }
}
