//! `tandem agent --rank R --config FILE`: run one rank's agent in the foreground.

use std::path::Path;

use tandem_agent::AgentSettings;
use tandem_config::{load, Overrides};
use tandem_proto::ids::Epoch;

/// Options of `tandem agent`.
pub(super) struct AgentArgs<'a> {
    pub rank: u32,
    pub config: &'a Path,
    pub epoch: Option<u64>,
    pub log_json: bool,
    pub test_protocol_version: Option<u16>,
}

pub(super) fn run(args: AgentArgs<'_>) -> anyhow::Result<()> {
    let shutdown = crate::signals::shutdown_on_signals()?;
    let cfg = load(Some(args.config), &Overrides::default())?;
    crate::logging::init(&cfg.log, args.log_json);
    let fixed_epoch = args.epoch.is_some() || !cfg.redis.enabled();
    let mut settings = AgentSettings::new(cfg, args.rank, Epoch(args.epoch.unwrap_or(1)))?;
    if let Some(v) = args.test_protocol_version {
        settings.membership.protocol_version = v;
    }
    let span =
        tracing::info_span!("agent", group = %settings.membership.group_id, rank = args.rank);
    let _entered = span.enter();
    tandem_agent::run(settings, fixed_epoch, shutdown)?;
    Ok(())
}
