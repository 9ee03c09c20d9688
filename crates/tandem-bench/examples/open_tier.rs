//! `cargo run --release -p tandem-bench --example open_tier -- BLOCKS [SHARD_KIB] [DIR]`: fills
//! a sparse disk tier of BLOCKS blocks in a temporary directory (or DIR, kept) and times `Store::open` of it
//! two hundred times (what `tandem bench scale` measures beside an agent's restart).

use tandem_bench::scale::{fill_disk_tier, time_open, Fill};
use tandem_proto::ids::Rank;
use tandem_store::disk::IoMode;
use tandem_store::store::StoreConfig;

fn main() {
    let mut args = std::env::args().skip(1);
    let blocks: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(16_384);
    let shard_kib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    // A third argument keeps the tier in that directory (for starting an agent on it).
    let dir_arg = args.next().map(std::path::PathBuf::from);
    let root = dir_arg.as_deref().unwrap_or(tmp.path());
    let config = StoreConfig {
        rank: Rank(0),
        shard_bytes: shard_kib << 10,
        host_capacity_blocks: 16,
        disk_capacity_blocks: blocks,
        host_dir: root.join("host"),
        disk_dir: root.join("disk"),
        disk_io: IoMode::Buffered,
        layout: Default::default(),
    };
    let filled = fill_disk_tier(&config, Fill::Sparse, 1).expect("fill");
    println!("{}", serde_json::to_string(&filled).unwrap_or_default());
    // Signal to a profiler attached with --delay that the fill is over.
    eprintln!("filled");
    for _ in 0..200 {
        let (ms, adopted) = time_open(&config).expect("open");
        println!("open {ms:.2} ms, {adopted} blocks");
    }
}
