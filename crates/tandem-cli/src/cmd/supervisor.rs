//! `tandem supervisor --config FILE`: run the group's supervisor in the foreground.

use std::path::Path;

use tandem_config::{load, Overrides};
use tandem_supervisor::{Exit, LaunchSpec, Supervisor};

/// Run until SIGTERM/SIGINT (Ok) or the restart limit (an error mapped to exit code 3).
pub(super) fn run(config: &Path, launch_agents: bool, log_json: bool) -> anyhow::Result<()> {
    let cfg = load(Some(config), &Overrides::default())?;
    crate::logging::init(&cfg.log, log_json);
    if cfg.redis.url.is_empty() {
        anyhow::bail!("the supervisor needs Redis: set redis.url (or TANDEM__REDIS__URL)");
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
        actix_rt::spawn(server);
        tracing::info!(group = %group, http = %http_addr, "supervisor serving");
        let (tx, rx) = tokio::sync::watch::channel(false);
        actix_rt::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            let _ = tx.send(true);
        });
        let exit = supervisor.run(rx).await;
        handle.stop(true).await;
        anyhow::Ok(exit?)
    })?;
    match exit {
        Exit::Stopped => Ok(()),
        Exit::GroupFailed(reason) => Err(crate::exit::GroupFailed(reason).into()),
    }
}
