//! One module per subcommand.

mod agent;
pub(crate) mod bench;
mod check_config;
mod replay;
mod status;
mod supervisor;
pub(crate) mod up;

use crate::cli::{Cli, Command};

/// Run the chosen subcommand.
pub(crate) fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::CheckConfig { file, json } => check_config::run(&file, json),
        Command::Agent {
            rank,
            config,
            epoch,
            log_json,
            test_protocol_version,
        } => agent::run(agent::AgentArgs {
            rank,
            config: &config,
            epoch,
            log_json,
            test_protocol_version,
        }),
        Command::Up {
            ranks,
            pp,
            tp,
            host_capacity,
            disk_capacity,
        } => {
            let (pp, tp) = crate::cli::layout(ranks, pp, tp);
            up::run(pp, tp, host_capacity, disk_capacity)
        }
        Command::Replay(args) => replay::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Status {
            config,
            supervisor,
            watch,
            json,
        } => status::run(status::StatusArgs {
            config: config.as_deref(),
            supervisor,
            watch,
            json,
        }),
        Command::Supervisor {
            config,
            launch_agents,
            log_json,
        } => supervisor::run(&config, launch_agents, log_json),
    }
}
