//! Prints the write-ahead cost figures against a running redis-server:
//! `cargo run -p tandem-bench --example bench_append -- redis://127.0.0.1:6379 [steps]`.
//! The `tandem bench redis` command calls the same library function (and starts its own
//! redis-server).

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let steps = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    match tandem_bench::bench_append(&url, &[1, 10, 100], steps).await {
        Ok(figures) => {
            print!("{figures}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench_append: {e}");
            ExitCode::FAILURE
        }
    }
}
