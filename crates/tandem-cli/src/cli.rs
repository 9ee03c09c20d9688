//! Command-line definitions (clap derive).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Tandem: a KV-cache offload cluster for pipeline- and tensor-parallel inference groups.
#[derive(Debug, Parser)]
#[command(name = "tandem", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Validate a configuration file and print the effective configuration (file, then
    /// TANDEM__SECTION__KEY environment variables) with the derived block-shard size.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
        /// Print one JSON object instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Run the agent of one rank: its StoreActor and ProtocolActor, the engine socket, the
    /// peer connection (rank 0 listens, others connect) and the HTTP endpoints.
    Agent {
        /// The rank to run, 0..pp_size×tp_size (0 is the leader).
        #[arg(long)]
        rank: u32,
        /// The configuration file (environment variables TANDEM__SECTION__KEY override it).
        #[arg(long)]
        config: PathBuf,
        /// Run this one epoch without a supervisor. Without it the agent follows the epoch
        /// counter in Redis (or runs epoch 1 when `redis.url` is empty).
        #[arg(long)]
        epoch: Option<u64>,
        /// Log one JSON object per line.
        #[arg(long)]
        log_json: bool,
        /// Test only: present this protocol version in the handshake.
        #[arg(long, hide = true)]
        test_protocol_version: Option<u16>,
    },
    /// Start a local cluster (redis-server unless REDIS_URL is set, the supervisor, one agent
    /// per rank), print where its status pages are, and stop it on Ctrl-C or SIGTERM.
    Up {
        /// Ranks (pp 1 × tp N); or use --pp and --tp.
        #[arg(long, conflicts_with_all = ["pp", "tp"])]
        ranks: Option<u32>,
        /// Pipeline-parallel degree.
        #[arg(long)]
        pp: Option<u32>,
        /// Tensor-parallel degree.
        #[arg(long)]
        tp: Option<u32>,
        /// Host tier capacity per rank, blocks.
        #[arg(long, default_value_t = 4096)]
        host_capacity: u64,
        /// Disk tier capacity per rank, blocks.
        #[arg(long, default_value_t = 0)]
        disk_capacity: u64,
    },
    /// Replay a request trace (Mooncake FAST'25 format) through a local cluster with one
    /// simulated engine per rank, verify every byte, and report hit ratios, latencies and
    /// any lost, duplicated or mismatched completion.
    Replay(ReplayArgs),
    /// Benchmarks: frame latency, write-ahead cost, tiers, recovery, replay; each against a
    /// baseline measured in the same run.
    Bench(crate::cmd::bench::BenchArgs),
    /// The group at a glance in a terminal: epoch, state, every rank's readiness and
    /// heartbeat age, steps per second, tier occupancy, restarts and their causes, from the
    /// supervisor's /status (which carries what it read from every agent).
    Status {
        /// The configuration, for `supervisor.http_addr` (default 127.0.0.1:7490).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The supervisor's HTTP address, host:port (overrides --config).
        #[arg(long)]
        supervisor: Option<String>,
        /// Redraw every SECONDS (default 2) until Ctrl-C.
        #[arg(long, num_args = 0..=1, default_missing_value = "2", value_name = "SECONDS")]
        watch: Option<f64>,
        /// Print the supervisor's /status document as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Run the group's supervisor: watch every rank (heartbeats and failure reports in Redis),
    /// restart the whole group into a new epoch when any rank fails, and give up (exit 3)
    /// past `supervisor.max_restarts` restarts within `supervisor.restart_window_s`.
    Supervisor {
        /// The configuration file.
        #[arg(long)]
        config: PathBuf,
        /// Also launch one agent process per rank and watch their exits.
        #[arg(long)]
        launch_agents: bool,
        /// Log one JSON object per line.
        #[arg(long)]
        log_json: bool,
    },
}

/// Options of `tandem replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The trace (JSON lines: timestamp, input_length, output_length, hash_ids), plain or
    /// gzip-compressed (`.jsonl.gz`, as the traces in data/traces/ ship). Without it, a small
    /// synthetic multi-turn workload.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Replay at most this many requests (default: all of the trace; 300 synthetic ones).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Ranks (pp 1 × tp N); or use --pp and --tp.
    #[arg(long, conflicts_with_all = ["pp", "tp"])]
    pub ranks: Option<u32>,
    /// Pipeline-parallel degree.
    #[arg(long)]
    pub pp: Option<u32>,
    /// Tensor-parallel degree.
    #[arg(long)]
    pub tp: Option<u32>,
    /// Follow the trace's timestamps X times faster than recorded.
    #[arg(long, conflicts_with = "max_rate")]
    pub speed: Option<f64>,
    /// Admit requests as fast as the cluster takes them (the default).
    #[arg(long)]
    pub max_rate: bool,
    /// Host tier capacity per rank, blocks (default: every distinct block of the requests,
    /// i.e. unlimited).
    #[arg(long)]
    pub host_capacity: Option<u64>,
    /// Disk tier capacity per rank, blocks.
    #[arg(long, default_value_t = 0)]
    pub disk_capacity: u64,
    /// Fault injection: `kill-agent:SECONDS` sends SIGKILL to a random agent every SECONDS.
    #[arg(long)]
    pub chaos: Option<String>,
    /// What to do with a malformed trace line: report it and skip it, or stop.
    #[arg(long, value_enum, default_value_t = Malformed::Skip)]
    pub on_malformed: Malformed,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Drive an existing cluster instead of starting one: the configuration its agents run
    /// (the engine sockets are `network.engine_socket_dir/rank<r>.sock`). `--chaos` and the
    /// capacity flags do not apply then.
    #[arg(long, conflicts_with_all = ["chaos", "ranks", "pp", "tp"])]
    pub cluster_config: Option<PathBuf>,
}

/// Policy for malformed trace lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Malformed {
    /// Report the line (with its number) and go on.
    Skip,
    /// Stop at the first malformed line.
    Fail,
}

/// `pp × tp` from `--ranks` or `--pp/--tp` (default 1 × 2).
pub(crate) fn layout(ranks: Option<u32>, pp: Option<u32>, tp: Option<u32>) -> (u32, u32) {
    match ranks {
        Some(n) => (1, n.max(1)),
        None => (pp.unwrap_or(1).max(1), tp.unwrap_or(2).max(1)),
    }
}
