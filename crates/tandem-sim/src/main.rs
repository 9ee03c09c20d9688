//! `tandem-sim`: runs seeds of the deterministic simulator and prints the figures; with
//! `--seed N --trace`, replays one seed and prints its event trace.
//!
//! Exit codes: 0 every seed kept every invariant; 1 some seed broke one (the first failing
//! seeds are printed with the rule broken); 2 a bad argument.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use tandem_sim::{run_seed, Broken, SimConfig, Totals};

/// Run seeds of Tandem's deterministic simulator.
#[derive(Parser, Debug)]
#[command(name = "tandem-sim")]
struct Args {
    /// Run this one seed only.
    #[arg(long)]
    seed: Option<u64>,
    /// First seed of the range.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// How many seeds.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// Print the event trace (of the one seed, or of the first failing seed).
    #[arg(long)]
    trace: bool,
    /// Mean faults per second of active time.
    #[arg(long, default_value_t = SimConfig::default().faults_per_s)]
    faults_per_s: f64,
    /// Active time per seed, ms.
    #[arg(long, default_value_t = SimConfig::default().active_ms)]
    active_ms: u64,
    /// Run with a deliberately broken driver (to see how soon the checks catch it):
    /// `arrival` (a follower applies frames by arrival order), `append` (the leader is told a
    /// refused append is durable), `tierops` (a follower drops the tier operations), `order`
    /// (the leader hears the answers of its appends out of order).
    #[arg(long)]
    broken: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let broken = match args.broken.as_deref() {
        None => None,
        Some("arrival") => Some(Broken::FollowerAppliesArrivalOrder),
        Some("append") => Some(Broken::AppendedBeforeDurable),
        Some("tierops") => Some(Broken::FollowerSkipsTierOps),
        Some("order") => Some(Broken::AnswersAppendsOutOfOrder),
        Some(other) => {
            eprintln!("--broken: unknown driver {other:?} (arrival, append, tierops, order)");
            return ExitCode::from(2);
        }
    };
    let config = SimConfig {
        broken,
        faults_per_s: args.faults_per_s,
        active_ms: args.active_ms,
        trace: args.trace && args.seed.is_some(),
        ..SimConfig::default()
    };
    let (start, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.start, args.seeds),
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) ends the run quietly.
    macro_rules! say {
        ($($arg:tt)*) => {
            if writeln!(out, $($arg)*).is_err() {
                return ExitCode::SUCCESS;
            }
        };
    }
    let began = Instant::now();
    let mut totals = Totals::default();
    let mut shown = 0;
    for seed in start..start.saturating_add(count) {
        let run = run_seed(seed, &config);
        totals.add(&run.report, run.violation.is_some());
        if args.seed.is_some() {
            for line in &run.trace {
                say!("{line}");
            }
            say!("{:?}", run.report);
        }
        if let Some(v) = &run.violation {
            if shown < 10 {
                say!("seed {seed}: {v}");
                say!("  replay: cargo run -p tandem-sim --release -- --seed {seed} --trace");
                shown += 1;
            }
        }
    }
    let secs = began.elapsed().as_secs_f64();
    for line in totals.lines() {
        say!("{line}");
    }
    say!(
        "seeds per second     {:.0}  ({:.2} s for {} seeds)",
        totals.seeds as f64 / secs.max(1e-9),
        secs,
        totals.seeds
    );
    if totals.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
