//! `tandem bench`: benchmarks that print figures, each against a baseline measured in the same
//! run (docs/BENCHMARKS.md). The machines are shared and noisy, so every raw figure sits next to a `ratio`
//! against its baseline; nothing here asserts a time, and targets are printed with pass/fail
//! marks only.
//!
//! # Layout
//! - [`frame`]: leader seals → last follower holds the frame, real agents per rank count.
//! - [`datapath`]: engine pages → every rank's tier → the finish frame and back, against
//!   memcpy, pwrite/pread and one engine round trip (wraps `tandem_bench::datapath`).
//! - [`engines`]: the engine threads that drive empty steps through a local cluster (used by
//!   `frame` and by `replay` for its empty-step baseline).
//! - [`fanout`]: the TCP fan-out ping-pong baseline and its echo peer processes.
//! - [`relay`]: the frame path's hop floor (bench → hub → leaves → bench) and its processes.
//! - [`redis`]: the write-ahead append cost (wraps `tandem_bench::bench_append`).
//! - [`tiers`]: the store engine's tier table (wraps `tandem_bench::run_tier_bench`).
//! - [`layerwise`]: a 64-block prefix at 32 layers, whole-task load against first and last
//!   layer of a layerwise load, from the host tier and from the disk tier.
//! - [`recovery`]: SIGKILL one agent → group ready in a new epoch.
//! - [`replay`]: the conversation trace through a 4-rank local cluster.
//! - [`scale`]: a full disk tier's restart, the group index at 10^7 blocks, Redis commands
//!   per step and groups per `redis-server`.
//! - [`idle`]: the CPU idle policy the run measures under, and `--cpu-latency-us`'s PM QoS
//!   request.
//! - [`stats`]: percentiles and ratios.
//! - [`plot`]: the SVGs of frame latency against rank count and of data-path GB/s against
//!   shard size.
//! - [`report`]: table helpers, pass/fail marks and the JSON object.
//!
//! Owns measurement and printing only: every cluster comes from [`crate::local::LocalCluster`],
//! every protocol call goes through `tandem_client`. It must never be called from a test.

mod busy;
mod datapath;
mod engines;
mod fanout;
mod frame;
mod idle;
mod layerwise;
mod plot;
mod recovery;
mod redis;
mod relay;
mod replay;
mod report;
mod scale;
mod stats;
mod tiers;

use std::path::PathBuf;

/// Options of `tandem bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    /// Which part to run.
    #[arg(value_enum, default_value_t = Part::All)]
    pub part: Part,
    /// A reduced version of everything (under about 2 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object with one key per part.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object (as `--json` prints it) to FILE, tables still on stdout.
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Also draw frame latency against rank count (baseline beside it), or with `datapath`
    /// GB/s against shard size, as an SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Copy workers per rank of `datapath` (`store.copy_workers`); several values run the
    /// whole sweep once per value (default: the agent's default).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub copy_workers: Vec<u32>,
    /// The leader's pause between two `end_step` calls in `datapath`, µs (default 0: back to
    /// back).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub step_gap_us: u64,
    /// Rank counts of `frame` (default 2,4,8,16) and of `datapath` (default 1,2,4).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub ranks: Vec<u32>,
    /// Tier cases of `datapath` (default: both).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "TIER,...")]
    pub tier: Vec<datapath::TierCase>,
    /// Shard sizes of `datapath`, KiB (default 64,1024,8192).
    #[arg(long, value_delimiter = ',', value_name = "KIB,...")]
    pub shards: Vec<usize>,
    /// Hold a PM QoS request (`/dev/cpu_dma_latency`, needs root) for the whole run: no idle
    /// CPU enters a state slower than US µs to leave (0: idle CPUs poll). Every part's round
    /// trips then stop paying a halted CPU's wake-up (on a VM with `haltpoll`, 55–70 µs
    /// against 23 µs per loopback PING). Default: the machine's own idle policy. The tables'
    /// head and the JSON's `machine.cpu_idle` say which applied.
    #[arg(long, value_name = "US")]
    pub cpu_latency_us: Option<u32>,
    /// Directory for the disk-tier files of `tiers` (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub disk_dir: Option<PathBuf>,
    /// Disk tier size of `scale`'s restart, GiB (default 16; 1 with --quick).
    #[arg(long, value_name = "GIB")]
    pub tier_gib: Option<f64>,
    /// Shard size of `scale`'s restart tier, KiB (default 1024: Llama-3-8B at TP 8 with
    /// 64-token blocks; smaller shards mean more blocks in the same tier).
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    pub shard_kib: usize,
    /// How `scale` fills its full tier: real shards when the disk has room, or sparse.
    #[arg(long, value_enum, default_value_t = scale::TierFill::Auto)]
    pub tier_fill: scale::TierFill,
    /// The trace `replay` uses.
    #[arg(long, value_name = "FILE", default_value = replay::DEFAULT_TRACE)]
    pub trace: PathBuf,
    /// Internal: run one echo peer of the fan-out baseline, connected to ADDR.
    #[arg(long, hide = true, value_name = "ADDR")]
    pub echo_peer: Option<String>,
    /// Internal: payload bytes of the echo peer or relay process.
    #[arg(long, hide = true, default_value_t = 0)]
    pub payload_bytes: usize,
    /// Internal: run the hub of the frame benchmark's hop floor, greeting SOCKET.
    #[arg(long, hide = true, value_name = "SOCKET")]
    pub relay_hub: Option<PathBuf>,
    /// Internal: leaves the relay hub waits for.
    #[arg(long, hide = true, default_value_t = 0)]
    pub relay_peers: usize,
    /// Internal: run one leaf of the hop floor, writing back to SOCKET.
    #[arg(long, hide = true, value_name = "SOCKET")]
    pub relay_leaf: Option<PathBuf>,
    /// Internal: the relay hub's TCP address, for a leaf.
    #[arg(long, hide = true, value_name = "ADDR", default_value = "")]
    pub relay_hub_addr: String,
}

/// The benchmark parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Part {
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
    /// Engine pages → every rank's tier → the finish frame and back, against memcpy,
    /// pwrite/pread and one engine round trip.
    Datapath,
    /// A full 16 GiB tier's restart, the index at 10^7 blocks, groups per Redis.
    Scale,
    /// A 64-block prefix at 32 layers: first and last layer against a whole-task load.
    Layerwise,
    /// Every part but `scale` (which writes a 16 GiB tier and runs for minutes) and
    /// `datapath` (minutes, its own `--plot`).
    All,
}

impl Part {
    /// The JSON key and table title of a part.
    fn key(self) -> &'static str {
        match self {
            Part::Frame => "frame",
            Part::Redis => "redis",
            Part::Tiers => "tiers",
            Part::Recovery => "recovery",
            Part::Replay => "replay",
            Part::Datapath => "datapath",
            Part::Scale => "scale",
            Part::Layerwise => "layerwise",
            Part::All => "all",
        }
    }
}

/// One part's result: its table and its JSON value.
pub(crate) struct PartOutput {
    /// The table printed on stdout.
    pub table: String,
    /// The part's JSON object.
    pub json: serde_json::Value,
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(addr) = &args.echo_peer {
        return fanout::echo_peer(addr, args.payload_bytes);
    }
    if let Some(socket) = &args.relay_hub {
        return relay::hub(socket, args.relay_peers, args.payload_bytes);
    }
    if let Some(socket) = &args.relay_leaf {
        return relay::leaf(socket, &args.relay_hub_addr, args.payload_bytes);
    }
    let parts = match args.part {
        Part::All => vec![
            Part::Frame,
            Part::Redis,
            Part::Tiers,
            Part::Recovery,
            Part::Replay,
        ],
        p => vec![p],
    };
    // Held until this function returns: the request covers every part and its children.
    let hold = args
        .cpu_latency_us
        .map(|us| idle::LatencyHold::hold(std::path::Path::new(idle::PM_QOS_DEVICE), us))
        .transpose()?;
    let policy = idle::IdlePolicy::current(hold.as_ref().map(|h| h.us));
    if !args.json {
        println!("{}", policy.line());
    }
    let started = std::time::Instant::now();
    let mut object = serde_json::Map::new();
    object.insert("machine".into(), report::machine_json(args.quick, &policy));
    let mut failed = Vec::new();
    for part in parts {
        eprintln!("tandem bench: {} ...", part.key());
        let t = std::time::Instant::now();
        let out = match part {
            Part::Frame => frame::run(&args),
            Part::Redis => redis::run(&args),
            Part::Tiers => tiers::run(&args),
            Part::Recovery => recovery::run(&args),
            Part::Replay => replay::run(&args),
            Part::Datapath => datapath::run(&args),
            Part::Scale => scale::run(&args),
            Part::Layerwise => layerwise::run(&args),
            Part::All => unreachable_all(),
        };
        eprintln!(
            "tandem bench: {} took {:.1} s",
            part.key(),
            t.elapsed().as_secs_f64()
        );
        match out {
            Ok(out) => {
                if !args.json {
                    println!("== {} ==\n{}", part.key(), out.table);
                }
                object.insert(part.key().into(), out.json);
            }
            Err(e) => {
                let msg = format!("{e:#}");
                if !args.json {
                    println!("== {} ==\nnot measured: {msg}\n", part.key());
                }
                object.insert(part.key().into(), serde_json::json!({ "error": msg }));
                failed.push(part.key());
            }
        }
    }
    object.insert(
        "wall_seconds".into(),
        started.elapsed().as_secs_f64().into(),
    );
    let object = serde_json::Value::Object(object);
    if let Some(path) = &args.save {
        std::fs::write(path, format!("{object:#}\n"))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        println!("{object}");
    }
    if !failed.is_empty() {
        anyhow::bail!("these parts could not run: {}", failed.join(", "));
    }
    Ok(())
}

/// `Part::All` is expanded before the loop; this keeps the match total without a panic.
fn unreachable_all() -> anyhow::Result<PartOutput> {
    anyhow::bail!("`all` is not a single part")
}
