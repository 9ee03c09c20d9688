//! The `tandem` command.
//!
//! # Layout
//! - [`cli`]: the clap definitions of every subcommand and flag.
//! - [`cmd`]: one module per subcommand; each returns `anyhow::Result` to `main`.
//! - [`exit`]: the documented exit codes that process supervisors act on.
//! - [`signals`]: SIGTERM and SIGINT, turned into the cancellation token the libraries stop on.
//! - [`local`]: a local cluster (redis-server, supervisor, agents) for `tandem up` and replay.
//!
//! This is the binary's edge: the only place that uses `anyhow`, prints to the terminal,
//! catches signals and turns errors into exit codes. Libraries below it return typed errors
//! and stop when the token they were given is cancelled.

mod cli;
mod cmd;
mod exit;
mod local;
mod logging;
mod signals;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let code = match cmd::run(cli) {
        Ok(()) => exit::OK,
        Err(err) => {
            eprintln!("tandem: error: {err:#}");
            exit::code_for(&err)
        }
    };
    std::process::exit(code);
}
