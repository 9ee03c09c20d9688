//! vLLM's KV event batch in msgpack, as `vllm.distributed.kv_events` declares it with msgspec
//! (in 0.28 and in its main branch when this was written): the batch is `array_like`,
//! `[ts, [event, ...]]`; each event is a map tagged by its `type`:
//! `{"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
//! "lora_id", "medium", "lora_name"}`, `{"type": "BlockRemoved", "block_hashes", "medium"}`,
//! `{"type": "AllBlocksCleared"}`. Fields vLLM gives defaults (`extra_keys`, `group_idx`, ...)
//! are left out, as its encoder leaves them out when unset.
//!
//! Owns the encoding only. Block hashes are Tandem's 128-bit [`BlockHash`] as 16 big-endian
//! bytes (msgpack `bin 8`): vLLM's `ExternalBlockHash` is `bytes | int` and msgspec's ints stop
//! at 64 bits. Tandem knows no token ids, parent or LoRA of a block: `token_ids` is empty and
//! `parent_block_hash`, `lora_id`, `lora_name` are nil. `medium` is the tier under vLLM's
//! names for the same places: `CPU` (host), `STORAGE` (disk), `GPU` (device).

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use tandem_core::CacheEvent;
use tandem_proto::{BlockHash, Tier};

/// The medium string of a tier (vLLM's names: `CPU`, `STORAGE`, `GPU`).
pub fn medium(tier: Tier) -> &'static str {
    match tier {
        Tier::Host => "CPU",
        Tier::Disk => "STORAGE",
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
                let mut map = s.serialize_map(Some(8))?;
                map.serialize_entry("type", "BlockStored")?;
                map.serialize_entry("block_hashes", &hashes(h))?;
                map.serialize_entry("parent_block_hash", &Option::<Hash>::None)?;
                map.serialize_entry("token_ids", &[0u32; 0])?;
                map.serialize_entry("block_size", &self.block_size)?;
                map.serialize_entry("lora_id", &Option::<i64>::None)?;
                map.serialize_entry("medium", medium(*tier))?;
                map.serialize_entry("lora_name", &Option::<&str>::None)?;
                map.end()
            }
            CacheEvent::Removed { hashes: h, tier } => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("type", "BlockRemoved")?;
                map.serialize_entry("block_hashes", &hashes(h))?;
                map.serialize_entry("medium", medium(*tier))?;
                map.end()
            }
            CacheEvent::AllCleared => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("type", "AllBlocksCleared")?;
                map.end()
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

    fn str(out: &mut Vec<u8>, s: &str) {
        out.push(0xa0 | s.len() as u8);
        out.extend(s.as_bytes());
    }

    #[test]
    fn a_batch_is_an_array_of_tagged_maps_with_16_byte_hashes() {
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
        let mut e = vec![0x92, 0xcb];
        e.extend(1.5f64.to_be_bytes());
        e.push(0x93);
        e.push(0x81);
        str(&mut e, "type");
        e.extend([0xb0]);
        e.extend(b"AllBlocksCleared");
        e.push(0x88);
        str(&mut e, "type");
        str(&mut e, "BlockStored");
        str(&mut e, "block_hashes");
        e.extend([0x91, 0xc4, 16]);
        e.extend(h.to_bytes());
        str(&mut e, "parent_block_hash");
        e.push(0xc0);
        str(&mut e, "token_ids");
        e.push(0x90);
        str(&mut e, "block_size");
        e.extend([0xcd, 0x02, 0x00]);
        str(&mut e, "lora_id");
        e.push(0xc0);
        str(&mut e, "medium");
        str(&mut e, "CPU");
        str(&mut e, "lora_name");
        e.push(0xc0);
        e.push(0x83);
        str(&mut e, "type");
        str(&mut e, "BlockRemoved");
        str(&mut e, "block_hashes");
        e.extend([0x91, 0xc4, 16]);
        e.extend(h.to_bytes());
        str(&mut e, "medium");
        str(&mut e, "STORAGE");
        assert_eq!(bytes, e);
    }
}
