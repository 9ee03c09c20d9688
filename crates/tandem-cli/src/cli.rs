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
}
