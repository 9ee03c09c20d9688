//! `cargo run --release -p tandem-bench --example index_scale -- 100000 1000000`: the group
//! index figures of `tandem bench scale` alone, one JSON line per size.

fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![100_000]
    } else {
        sizes
    };
    for row in tandem_bench::scale::bench_index(&sizes, 8, 200_000) {
        println!("{}", serde_json::to_string(&row).unwrap_or_default());
    }
}
