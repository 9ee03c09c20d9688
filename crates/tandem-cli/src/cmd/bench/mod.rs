//! `tandem bench`: benchmarks that print figures, each against a baseline measured in the same
//! run (being written: see issue 8).

/// Options of `tandem bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which part to run.
    #[arg(value_enum, default_value_t = Part::All)]
    pub part: Part,
    /// A reduced version of everything (under about 2 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object with one key per part.
    #[arg(long)]
    pub json: bool,
}

/// The benchmark parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Leader seals → last follower holds the frame, against a TCP fan-out ping-pong.
    Frame,
    /// Write-ahead cost per step against a PING round trip.
    Redis,
    /// Host and disk tiers against memcpy and positional I/O.
    Tiers,
    /// SIGKILL one agent → group ready in the new epoch.
    Recovery,
    /// Blocks per second over the conversation trace.
    Replay,
    /// Every part.
    All,
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("tandem bench {:?} is not built yet", args.part)
}
