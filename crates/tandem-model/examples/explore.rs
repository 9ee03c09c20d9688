//! Sizes the Tandem model for other bounds, and prints shortest traces, for choosing what CI
//! checks.
//!
//! Usage: `cargo run -p tandem-model --example explore -- [key=value ...]`, applied in order.
//! Bounds: `tasks` (start from `TandemConfig::ci_tasks`), `followers=N epochs=N steps=N
//! stores=N dups=N loads=N failed_appends=N failed_shards=N host=N window=N retention=N
//! acks=0|1 variant=correct|arrival|nodedup|confirm`. Commands: `check` (exhaustive BFS, prints the size and
//! every discovery), `depth=N` (BFS to N levels), `trace=PREFIX` (shortest path to the
//! discovery of the first property whose name starts with PREFIX).

use stateright::{Checker, Model};
use tandem_model::check::{bfs, shortest_discovery};
use tandem_model::tandem::{properties, trace, TandemConfig, TandemModel, Variant};

fn run(config: &TandemConfig, depth: Option<usize>) {
    let model = match TandemModel::new(config.clone()) {
        Ok(m) => m,
        Err(e) => return eprintln!("{e}"),
    };
    let (checker, report) = bfs(model, depth, 2);
    println!("{report}");
    let mut found: Vec<_> = checker.discoveries().into_keys().collect();
    found.sort();
    println!("discoveries: {found:?}");
}

fn show_trace(config: &TandemConfig, prefix: &str) {
    let model = match TandemModel::new(config.clone()) {
        Ok(m) => m,
        Err(e) => return eprintln!("{e}"),
    };
    let Some(name) = model
        .properties()
        .into_iter()
        .map(|p| p.name)
        .find(|n| n.starts_with(prefix))
    else {
        let names: Vec<_> = properties::all().into_iter().map(|p| p.name).collect();
        return eprintln!("no property starts with {prefix:?}; properties: {names:?}");
    };
    match shortest_discovery(&model, name, 100) {
        Some(path) => println!("\"{name}\":\n{}", trace::render(&path)),
        None => println!("no discovery of \"{name}\""),
    }
}

fn main() {
    let mut config = TandemConfig::ci();
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
        let number = value.parse::<u64>();
        let small = |n: u64| u8::try_from(n).unwrap_or(u8::MAX);
        match (key, number) {
            ("tasks", _) => config = TandemConfig::ci_tasks(),
            ("followers", Ok(n)) => config.followers = u32::try_from(n).unwrap_or(u32::MAX),
            ("loads", Ok(n)) => config.loads = small(n),
            ("failed_appends", Ok(n)) => config.failed_appends = small(n),
            ("failed_shards", Ok(n)) => config.failed_shards = small(n),
            ("host", Ok(n)) => config.host_blocks = n,
            ("epochs", Ok(n)) => config.epochs = n,
            ("steps", Ok(n)) => config.steps_per_epoch = n,
            ("stores", Ok(n)) => config.stores = u8::try_from(n).unwrap_or(u8::MAX),
            ("dups", Ok(n)) => config.duplicate_reports = u8::try_from(n).unwrap_or(u8::MAX),
            ("window", Ok(n)) => config.window_steps = n,
            ("retention", Ok(n)) => config.retention_steps = n,
            ("acks", Ok(n)) => config.acks = n != 0,
            ("depth", Ok(n)) => run(&config, usize::try_from(n).ok()),
            ("check", _) => run(&config, None),
            ("trace", _) => show_trace(&config, value),
            ("variant", _) => {
                config.variant = match value {
                    "arrival" => Variant::ApplyByArrival,
                    "nodedup" => Variant::NoEngineDedup,
                    "confirm" => Variant::ConfirmRefusedAppend,
                    _ => Variant::Correct,
                }
            }
            _ => eprintln!("ignored argument {arg:?} (see the example's docs)"),
        }
    }
}
