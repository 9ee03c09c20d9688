//! Command-line definitions (clap derive).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Tandem: a KV-cache offload cluster for pipeline- and tensor-parallel inference groups.
#[derive(Debug, Parser)]
#[command(name = "tandem", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
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
