//! One module per subcommand.

mod check_config;

use crate::cli::{Cli, Command};

/// Run the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::CheckConfig { file, json } => check_config::run(&file, json),
    }
}
