//! Layering and validation: defaults, then a TOML file, then `TANDEM__SECTION__KEY`
//! environment variables, then CLI overrides.
//!
//! The file is first parsed on its own, strictly, so that an unknown or mistyped key is
//! reported with the file's path and the key's line; the `config` crate then merges the layers.

use std::path::Path;

use config::{Config, Environment, File, FileFormat};

use crate::error::ConfigError;
use crate::sections::TandemConfig;

/// The largest `protocol.max_frame_bytes` accepted, bytes: the engine socket's message limit
/// (64 MiB, `tandem_client::wire::MAX_MESSAGE_BYTES`) less 1 KiB for the reply's envelope, so
/// that every frame a peer accepts also reaches the leader's own engine.
pub const MAX_FRAME_BYTES_CEILING: u32 = 64 * 1024 * 1024 - 1024;

/// The largest `store.disk_op_deadline_ms` accepted, ms: one hour.
pub const MAX_DISK_OP_DEADLINE_MS: u64 = 3_600_000;

/// The most `protocol.max_appends_in_flight` accepted.
pub const MAX_APPENDS_IN_FLIGHT: u32 = 1024;

/// The largest `protocol.append_wait_ms` accepted, ms: one minute.
pub const MAX_APPEND_WAIT_MS: u64 = 60_000;

/// The largest `redis.ack_interval_ms` accepted, ms: one minute.
pub const MAX_ACK_INTERVAL_MS: u64 = 60_000;

/// Dotted-key overrides from CLI flags, applied last (e.g. `("group.tp_size", "4")`).
#[derive(Debug, Clone, Default)]
pub struct Overrides(pub Vec<(String, String)>);

impl Overrides {
    /// Add one override; `key` is dotted (`section.key`), `value` is parsed like a TOML scalar.
    pub fn set(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.0.push((key.into(), value.to_string()));
        self
    }
}

/// Load the configuration: defaults, then `path` (if any), then the environment, then
/// `overrides`; then validate.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read; [`ConfigError::Invalid`] naming the key
/// and the origin (file path, `environment` or `overrides`) for unknown keys or wrong types;
/// [`ConfigError::Value`] and [`ConfigError::Layout`] for values out of range.
pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<TandemConfig, ConfigError> {
    let text = match path {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    let origin = path.map(|p| p.display().to_string()).unwrap_or_default();
    load_layers(text.as_deref(), &origin, Some(std::env::vars()), overrides)
}

/// Load from TOML text without reading the environment (for tests and embedded defaults).
///
/// # Errors
/// As [`load`], with `origin` naming the text in messages.
pub fn load_str(
    toml_text: &str,
    origin: &str,
    overrides: &Overrides,
) -> Result<TandemConfig, ConfigError> {
    load_layers(
        Some(toml_text),
        origin,
        None::<std::iter::Empty<(String, String)>>,
        overrides,
    )
}

fn load_layers(
    toml_text: Option<&str>,
    origin: &str,
    env: Option<impl Iterator<Item = (String, String)>>,
    overrides: &Overrides,
) -> Result<TandemConfig, ConfigError> {
    let mut builder = Config::builder();
    if let Some(text) = toml_text {
        // Strict pass over the file alone: exact key, line and column in the message.
        toml::from_str::<TandemConfig>(text).map_err(|e| ConfigError::Invalid {
            origin: origin.to_string(),
            detail: one_line(&e.to_string()),
        })?;
        builder = builder.add_source(File::from_str(text, FileFormat::Toml));
    }
    if let Some(vars) = env {
        let vars: config::Map<String, String> =
            vars.filter(|(k, _)| k.starts_with("TANDEM__")).collect();
        if !vars.is_empty() {
            let source = Environment::with_prefix("TANDEM")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .list_separator(",")
                .with_list_parse_key("redis.cluster_nodes")
                .with_list_parse_key("redis.sentinels")
                .source(Some(vars));
            builder = builder.add_source(source);
            check_layer(builder.clone(), "environment (TANDEM__* variables)")?;
        }
    }
    for (key, value) in &overrides.0 {
        builder = builder
            .set_override(key.as_str(), value.as_str())
            .map_err(|e| ConfigError::Invalid {
                origin: "overrides".into(),
                detail: e.to_string(),
            })?;
    }
    let cfg = check_layer(builder, "overrides")?;
    validate(&cfg)?;
    Ok(cfg)
}

fn check_layer(
    builder: config::ConfigBuilder<config::builder::DefaultState>,
    origin: &str,
) -> Result<TandemConfig, ConfigError> {
    builder
        .build()
        .and_then(|c| c.try_deserialize::<TandemConfig>())
        .map_err(|e| ConfigError::Invalid {
            origin: origin.to_string(),
            detail: one_line(&e.to_string()),
        })
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Check ranges that types cannot express.
///
/// # Errors
/// [`ConfigError::Value`] naming the key, or [`ConfigError::Layout`].
pub fn validate(cfg: &TandemConfig) -> Result<(), ConfigError> {
    let positive = [
        ("group.pp_size", u64::from(cfg.group.pp_size)),
        ("group.tp_size", u64::from(cfg.group.tp_size)),
        ("protocol.window_steps", cfg.protocol.window_steps),
        ("protocol.frame_deadline_ms", cfg.protocol.frame_deadline_ms),
        ("protocol.bind_timeout_ms", cfg.protocol.bind_timeout_ms),
        (
            "protocol.frame_retention_steps",
            cfg.protocol.frame_retention_steps,
        ),
        (
            "protocol.handshake_timeout_ms",
            cfg.protocol.handshake_timeout_ms,
        ),
        ("store.disk_op_deadline_ms", cfg.store.disk_op_deadline_ms),
        (
            "supervisor.heartbeat_interval_ms",
            cfg.supervisor.heartbeat_interval_ms,
        ),
        (
            "supervisor.restart_window_s",
            cfg.supervisor.restart_window_s,
        ),
    ];
    for (key, v) in positive {
        if v == 0 {
            return Err(ConfigError::Value {
                key,
                reason: "must be at least 1".into(),
            });
        }
    }
    if cfg.store.host_capacity_blocks == 0 && cfg.store.disk_capacity_blocks == 0 {
        return Err(ConfigError::Value {
            key: "store.host_capacity_blocks",
            reason: "must be at least 1 when store.disk_capacity_blocks is 0 (a rank needs a tier)"
                .into(),
        });
    }
    if cfg.store.disk_op_deadline_ms > MAX_DISK_OP_DEADLINE_MS {
        return Err(ConfigError::Value {
            key: "store.disk_op_deadline_ms",
            reason: format!(
                "{} ms is above the {MAX_DISK_OP_DEADLINE_MS} ms maximum (one hour)",
                cfg.store.disk_op_deadline_ms
            ),
        });
    }
    if cfg.group.id.is_empty()
        || !cfg
            .group
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ConfigError::Value {
            key: "group.id",
            reason: format!(
                "{:?} must be non-empty ASCII letters, digits, '-' or '_'",
                cfg.group.id
            ),
        });
    }
    if cfg.protocol.frame_retention_steps < cfg.protocol.window_steps {
        return Err(ConfigError::Value {
            key: "protocol.frame_retention_steps",
            reason: format!(
                "{} is smaller than protocol.window_steps = {}; followers could lose frames they have not acknowledged",
                cfg.protocol.frame_retention_steps, cfg.protocol.window_steps
            ),
        });
    }
    if !(1..=MAX_APPENDS_IN_FLIGHT).contains(&cfg.protocol.max_appends_in_flight) {
        return Err(ConfigError::Value {
            key: "protocol.max_appends_in_flight",
            reason: format!(
                "{} is outside 1 to {MAX_APPENDS_IN_FLIGHT}",
                cfg.protocol.max_appends_in_flight
            ),
        });
    }
    if cfg.protocol.append_wait_ms > MAX_APPEND_WAIT_MS {
        return Err(ConfigError::Value {
            key: "protocol.append_wait_ms",
            reason: format!(
                "{} ms is above the {MAX_APPEND_WAIT_MS} ms maximum",
                cfg.protocol.append_wait_ms
            ),
        });
    }
    if cfg.protocol.max_frame_bytes < 4096 {
        return Err(ConfigError::Value {
            key: "protocol.max_frame_bytes",
            reason: format!(
                "{} is below the 4096-byte minimum",
                cfg.protocol.max_frame_bytes
            ),
        });
    }
    if cfg.protocol.max_frame_bytes > MAX_FRAME_BYTES_CEILING {
        return Err(ConfigError::Value {
            key: "protocol.max_frame_bytes",
            reason: format!(
                "{} is above the {MAX_FRAME_BYTES_CEILING}-byte maximum (a frame must also fit one message to the leader's engine)",
                cfg.protocol.max_frame_bytes
            ),
        });
    }
    if cfg.supervisor.heartbeat_timeout_ms <= cfg.supervisor.heartbeat_interval_ms {
        return Err(ConfigError::Value {
            key: "supervisor.heartbeat_timeout_ms",
            reason: format!(
                "{} ms must exceed supervisor.heartbeat_interval_ms = {} ms",
                cfg.supervisor.heartbeat_timeout_ms, cfg.supervisor.heartbeat_interval_ms
            ),
        });
    }
    validate_redis(&cfg.redis)?;
    if cfg.supervisor.backoff_max_ms < cfg.supervisor.backoff_initial_ms {
        return Err(ConfigError::Value {
            key: "supervisor.backoff_max_ms",
            reason: "must be at least supervisor.backoff_initial_ms".into(),
        });
    }
    cfg.shard_layout()?;
    Ok(())
}

/// The `[redis]` keys name one deployment, completely.
fn validate_redis(r: &crate::sections::RedisConfig) -> Result<(), ConfigError> {
    if !r.cluster_nodes.is_empty() && !r.sentinels.is_empty() {
        return Err(ConfigError::Value {
            key: "redis.sentinels",
            reason: "cannot be combined with redis.cluster_nodes: name a cluster or a Sentinel-managed primary, not both".into(),
        });
    }
    if !r.sentinels.is_empty() && r.sentinel_master.is_empty() {
        return Err(ConfigError::Value {
            key: "redis.sentinel_master",
            reason: "must name the master the sentinels monitor when redis.sentinels is set".into(),
        });
    }
    if r.sentinels.is_empty() && !r.sentinel_master.is_empty() {
        return Err(ConfigError::Value {
            key: "redis.sentinels",
            reason: format!(
                "is empty but redis.sentinel_master = {:?}: list the sentinels' addresses",
                r.sentinel_master
            ),
        });
    }
    if let Some(bad) = r
        .cluster_nodes
        .iter()
        .chain(&r.sentinels)
        .find(|u| !(u.starts_with("redis://") || u.starts_with("rediss://")))
    {
        return Err(ConfigError::Value {
            key: if r.cluster_nodes.is_empty() {
                "redis.sentinels"
            } else {
                "redis.cluster_nodes"
            },
            reason: format!(
                "{:?} is not a redis:// URL",
                crate::sections::redact_url(bad)
            ),
        });
    }
    if r.ack_interval_ms > MAX_ACK_INTERVAL_MS {
        return Err(ConfigError::Value {
            key: "redis.ack_interval_ms",
            reason: format!(
                "{} ms is above the {MAX_ACK_INTERVAL_MS} ms maximum",
                r.ack_interval_ms
            ),
        });
    }
    if r.wait_replicas > 0 && r.wait_timeout_ms == 0 {
        return Err(ConfigError::Value {
            key: "redis.wait_timeout_ms",
            reason: "must be at least 1 when redis.wait_replicas is set".into(),
        });
    }
    Ok(())
}

/// Check that the group secret is set and long enough; agents call this before joining.
///
/// # Errors
/// [`ConfigError::Value`] for `group.secret` (the message never contains the secret).
pub fn require_secret(cfg: &TandemConfig) -> Result<(), ConfigError> {
    if cfg.group.secret.len() < 16 {
        return Err(ConfigError::Value {
            key: "group.secret",
            reason: format!(
                "must be at least 16 bytes (it is {}); set it in the file or with TANDEM__GROUP__SECRET",
                cfg.group.secret.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_gives_defaults() {
        let c = load_str("", "empty", &Overrides::default()).unwrap();
        assert_eq!(c, TandemConfig::default());
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let e = load_str(
            "[group]\ntp_sise = 4\n",
            "cfg/x.toml",
            &Overrides::default(),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("invalid configuration in cfg/x.toml:"),
            "{msg}"
        );
        assert!(msg.contains("tp_sise"), "{msg}");
    }

    #[test]
    fn wrong_type_names_key() {
        let e = load_str(
            "[protocol]\nwindow_steps = \"eight\"\n",
            "w.toml",
            &Overrides::default(),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("w.toml") && msg.contains("window_steps"),
            "{msg}"
        );
    }

    #[test]
    fn overrides_apply_last_and_are_checked() {
        let c = load_str(
            "[group]\ntp_size = 1\n",
            "f",
            &Overrides::default().set("group.tp_size", 2),
        )
        .unwrap();
        assert_eq!(c.group.tp_size, 2);
        let e = load_str("", "f", &Overrides::default().set("group.tp_size", 3)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid model layout: num_kv_heads = 2 does not divide evenly by tp_size = 3"
        );
    }

    #[test]
    fn environment_overrides_the_file_and_unknown_variables_are_named() {
        let env = vec![
            ("TANDEM__GROUP__TP_SIZE".to_string(), "1".to_string()),
            (
                "TANDEM__GROUP__SECRET".to_string(),
                "0123456789abcdef0123".to_string(),
            ),
            ("HOME".to_string(), "/root".to_string()),
        ];
        let c = load_layers(
            Some("[group]\ntp_size = 2\n"),
            "f",
            Some(env.into_iter()),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.group.tp_size, 1);
        assert_eq!(c.group.secret, "0123456789abcdef0123");
        let env = vec![("TANDEM__GROUP__TP_SISE".to_string(), "1".to_string())];
        let e = load_layers(None, "f", Some(env.into_iter()), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid configuration in environment"), "{e}");
        assert!(e.contains("tp_sise"), "{e}");
    }

    #[test]
    fn range_errors_name_the_key() {
        for (toml, msg) in [
            (
                "[protocol]\nmax_appends_in_flight = 0\n",
                "invalid value for protocol.max_appends_in_flight: 0 is outside 1 to 1024",
            ),
            (
                "[protocol]\nmax_appends_in_flight = 1025\n",
                "invalid value for protocol.max_appends_in_flight: 1025 is outside 1 to 1024",
            ),
            (
                "[protocol]\nappend_wait_ms = 60001\n",
                "invalid value for protocol.append_wait_ms: 60001 ms is above the 60000 ms maximum",
            ),
        ] {
            let e = load_str(toml, "f", &Overrides::default()).unwrap_err();
            assert_eq!(e.to_string(), msg);
        }
        let c = load_str(
            "[protocol]\nmax_appends_in_flight = 1024\nappend_wait_ms = 0\n",
            "f",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            (c.protocol.max_appends_in_flight, c.protocol.append_wait_ms),
            (1024, 0)
        );
        let e = load_str("[protocol]\nwindow_steps = 0\n", "f", &Overrides::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for protocol.window_steps: must be at least 1"
        );
        let e = load_str(
            "[supervisor]\nheartbeat_timeout_ms = 50\n",
            "f",
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e
            .to_string()
            .starts_with("invalid value for supervisor.heartbeat_timeout_ms"));
        let e = load_str("[group]\nid = \"a b\"\n", "f", &Overrides::default()).unwrap_err();
        assert!(e.to_string().starts_with("invalid value for group.id"));
        let text = format!(
            "[protocol]\nmax_frame_bytes = {}\n",
            MAX_FRAME_BYTES_CEILING + 1
        );
        let e = load_str(&text, "f", &Overrides::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("invalid value for protocol.max_frame_bytes: {} is above the {MAX_FRAME_BYTES_CEILING}-byte maximum (a frame must also fit one message to the leader's engine)", MAX_FRAME_BYTES_CEILING + 1)
        );
        let text = format!("[protocol]\nmax_frame_bytes = {MAX_FRAME_BYTES_CEILING}\n");
        assert!(load_str(&text, "f", &Overrides::default()).is_ok());
    }

    #[test]
    fn disk_deadline_and_tier_capacities_are_checked() {
        let err = |text: &str| {
            load_str(text, "f", &Overrides::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("[store]\ndisk_op_deadline_ms = 0\n"),
            "invalid value for store.disk_op_deadline_ms: must be at least 1"
        );
        assert_eq!(
            err("[store]\ndisk_op_deadline_ms = 3600001\n"),
            "invalid value for store.disk_op_deadline_ms: 3600001 ms is above the 3600000 ms maximum (one hour)"
        );
        assert_eq!(
            err("[store]\nhost_capacity_blocks = 0\ndisk_capacity_blocks = 0\n"),
            "invalid value for store.host_capacity_blocks: must be at least 1 when store.disk_capacity_blocks is 0 (a rank needs a tier)"
        );
        let c = load_str(
            "[store]\nhost_capacity_blocks = 0\ndisk_op_deadline_ms = 250\n",
            "f",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            (c.store.host_capacity_blocks, c.store.disk_op_deadline_ms),
            (0, 250),
            "a disk-only rank, with its deadline"
        );
    }

    #[test]
    fn redis_deployments_are_checked() {
        let err = |text: &str| {
            load_str(text, "f", &Overrides::default())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("[redis]\ncluster_nodes = [\"redis://a:1\"]\nsentinels = [\"redis://s:2\"]\nsentinel_master = \"m\"\n"),
            "invalid value for redis.sentinels: cannot be combined with redis.cluster_nodes: name a cluster or a Sentinel-managed primary, not both"
        );
        assert_eq!(
            err("[redis]\nsentinels = [\"redis://s:2\"]\n"),
            "invalid value for redis.sentinel_master: must name the master the sentinels monitor when redis.sentinels is set"
        );
        assert_eq!(
            err("[redis]\nsentinel_master = \"m\"\n"),
            "invalid value for redis.sentinels: is empty but redis.sentinel_master = \"m\": list the sentinels' addresses"
        );
        assert_eq!(
            err("[redis]\ncluster_nodes = [\"a:1\"]\n"),
            "invalid value for redis.cluster_nodes: \"a:1\" is not a redis:// URL"
        );
        assert_eq!(
            err("[redis]\nwait_replicas = 1\nwait_timeout_ms = 0\n"),
            "invalid value for redis.wait_timeout_ms: must be at least 1 when redis.wait_replicas is set"
        );
        assert_eq!(
            err("[redis]\nack_interval_ms = 60001\n"),
            "invalid value for redis.ack_interval_ms: 60001 ms is above the 60000 ms maximum"
        );
        for ms in [0, 60_000] {
            let c = load_str(
                &format!("[redis]\nack_interval_ms = {ms}\n"),
                "f",
                &Overrides::default(),
            )
            .unwrap();
            assert_eq!(c.redis.ack_interval_ms, ms);
        }
        let c = load_str(
            "[redis]\ncluster_nodes = [\"redis://a:1\", \"redis://b:2\"]\nwait_replicas = 1\n",
            "f",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.redis.mode(), crate::RedisMode::Cluster);
        assert_eq!(c.redis.wait_replicas, 1);
    }

    #[test]
    fn redis_lists_come_from_the_environment_comma_separated() {
        let env = vec![
            (
                "TANDEM__REDIS__SENTINELS".to_string(),
                "redis://s1:26379,redis://s2:26379".to_string(),
            ),
            (
                "TANDEM__REDIS__SENTINEL_MASTER".to_string(),
                "mymaster".to_string(),
            ),
        ];
        let c = load_layers(None, "f", Some(env.into_iter()), &Overrides::default()).unwrap();
        assert_eq!(
            c.redis.sentinels,
            vec![
                "redis://s1:26379".to_string(),
                "redis://s2:26379".to_string()
            ]
        );
        assert_eq!(c.redis.sentinel_master, "mymaster");
    }

    #[test]
    fn secret_is_required_but_never_echoed() {
        let mut c = TandemConfig::default();
        c.group.secret = "short".into();
        let e = require_secret(&c).unwrap_err().to_string();
        assert!(!e.contains("short"));
        assert!(e.starts_with("invalid value for group.secret"));
        c.group.secret = "0123456789abcdef".into();
        require_secret(&c).unwrap();
    }

    #[test]
    fn shipped_default_file_is_the_default_config() {
        let text = include_str!("../../../config/tandem.toml");
        let c = load_str(text, "config/tandem.toml", &Overrides::default()).unwrap();
        let mut expected = TandemConfig::default();
        expected.group.secret = c.group.secret.clone();
        assert_eq!(c, expected, "config/tandem.toml must list the defaults");
        // Every key of the default configuration appears in the documented file.
        let defaults = toml::Value::try_from(TandemConfig::default()).unwrap();
        let file: toml::Value = toml::from_str(text).unwrap();
        for (section, keys) in defaults.as_table().unwrap() {
            for key in keys.as_table().unwrap().keys() {
                assert!(
                    file.get(section).and_then(|s| s.get(key)).is_some(),
                    "config/tandem.toml lacks {section}.{key}"
                );
            }
        }
    }
}
