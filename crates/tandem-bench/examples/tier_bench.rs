//! Runs the tier benchmark and prints its table (or JSON with `--json`).
//!
//! `cargo run --release -p tandem-bench --example tier_bench -- [--quick] [--json]
//! [--disk-dir DIR] [--shm-dir DIR]`; the disk directory defaults to the system temp dir and
//! the shared-memory directory to /dev/shm. The `tandem bench tiers` command calls the same
//! library function.

use std::path::PathBuf;
use std::process::ExitCode;

use tandem_bench::{run_tier_bench, TierBenchOptions};

fn main() -> ExitCode {
    let mut opts = TierBenchOptions {
        disk_dir: std::env::temp_dir(),
        shm_dir: PathBuf::from("/dev/shm"),
        quick: false,
    };
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => opts.quick = true,
            "--json" => json = true,
            "--disk-dir" | "--shm-dir" => {
                let Some(dir) = args.next() else {
                    eprintln!("{arg} needs a directory");
                    return ExitCode::from(2);
                };
                if arg == "--disk-dir" {
                    opts.disk_dir = dir.into();
                } else {
                    opts.shm_dir = dir.into();
                }
            }
            other => {
                eprintln!("unknown argument {other:?}; usage: tier_bench [--quick] [--json] [--disk-dir DIR] [--shm-dir DIR]");
                return ExitCode::from(2);
            }
        }
    }
    match run_tier_bench(&opts) {
        Ok(report) if json => match serde_json::to_string_pretty(&report) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
