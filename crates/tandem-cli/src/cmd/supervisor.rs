//! `tandem supervisor --config FILE`: run the group's supervisor in the foreground.

use std::path::Path;

use tandem_config::{load, Overrides};
use tandem_supervisor::{Exit, LaunchSpec, Supervisor};

/// Run until SIGTERM/SIGINT (Ok) or the restart limit (an error mapped to exit code 3).
pub(super) fn run(config: &Path, launch_agents: bool, log_json: bool) -> anyhow::Result<()> {
    let shutdown = crate::signals::shutdown_on_signals()?;
    let cfg = load(Some(config), &Overrides::default())?;
    crate::logging::init(&cfg.log, log_json);
    if !cfg.redis.enabled() {
        anyhow::bail!("the supervisor needs Redis: set redis.url, redis.cluster_nodes or redis.sentinels (or TANDEM__REDIS__URL)");
    }
    let launch = launch_agents.then(|| LaunchSpec {
        binary: std::env::current_exe().unwrap_or_else(|_| "tandem".into()),
        config: config.to_path_buf(),
        log_dir: None,
    });
    let http_addr = cfg.supervisor.http_addr.clone();
    let collected =
        tandem_supervisor::collector::start(tandem_supervisor::collector::agent_addrs(&cfg))?;
    let group = cfg.group.id.clone();
    let system = actix_rt::System::new();
    let exit = system.block_on(async move {
        let supervisor = Supervisor::new(cfg, launch);
        let server = tandem_supervisor::http::start(&http_addr, supervisor.published(), collected)?;
        let handle = server.handle();
        let serving = actix_rt::spawn(server);
        tracing::info!(group = %group, http = %http_addr, "supervisor serving");
        // The supervisor stops its agents and waits for them before it returns; then the
        // HTTP server is stopped and joined.
        let exit = supervisor.run(shutdown).await;
        handle.stop(true).await;
        let _ = serving.await;
        anyhow::Ok(exit?)
    })?;
    match exit {
        Exit::Stopped => Ok(()),
        Exit::GroupFailed(reason) => Err(crate::exit::GroupFailed(reason).into()),
    }
}
