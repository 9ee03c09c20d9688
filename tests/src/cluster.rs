//! A local group of real agent processes on loopback, with its configuration in a temporary
//! directory (tiers, engine sockets and the config file all live there).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::http::http_get;
use crate::{free_ports, tail, tandem, ChildGuard};

/// How a test group is shaped.
#[derive(Clone, Debug)]
pub struct GroupSpec {
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Host tier capacity per rank, in blocks.
    pub host_capacity_blocks: u64,
    /// Disk tier capacity per rank, in blocks.
    pub disk_capacity_blocks: u64,
    /// Leader's window, in steps.
    pub window_steps: u64,
    /// Extra TOML appended to the generated configuration.
    pub extra_toml: String,
    /// The Redis URL (`""`: none; agents run one epoch and completions are not durable).
    pub redis_url: String,
    /// The group's name (`group.id`, the `{group}` of its Redis keys); default `itest`.
    pub group_id: String,
    /// More lines for the `[redis]` section (for example `cluster_nodes = [...]`).
    pub redis_toml: String,
}

impl GroupSpec {
    /// `pp × tp` ranks with small tiers.
    pub fn new(pp: u32, tp: u32) -> Self {
        Self {
            pp,
            tp,
            host_capacity_blocks: 64,
            disk_capacity_blocks: 64,
            window_steps: 8,
            extra_toml: String::new(),
            redis_url: String::new(),
            group_id: "itest".into(),
            redis_toml: String::new(),
        }
    }

    /// Ranks in the group.
    pub fn world_size(&self) -> u32 {
        self.pp * self.tp
    }
}

/// A running group; every agent is killed when it is dropped.
pub struct Group {
    /// The temporary directory holding the config, tiers and sockets.
    pub dir: tempfile::TempDir,
    /// The configuration file.
    pub config: PathBuf,
    /// Ranks in the group.
    pub world_size: u32,
    /// HTTP port of rank 0 (rank r uses `http_base_port + r`).
    pub http_base_port: u16,
    /// Agent processes by rank (`None` once killed).
    pub agents: Vec<Option<ChildGuard>>,
}

/// The group secret tests use.
pub const TEST_SECRET: &str = "integration-test-secret-0123456789";

impl Group {
    /// Write a configuration for `spec` (the model: 8 layers, 8 KV heads, head_dim 16,
    /// 2 bytes, 16 tokens per block, so shards are small) without starting anything.
    pub fn configure(spec: &GroupSpec) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let world_size = spec.world_size();
        let (singles, http_base_port) = free_ports(2, world_size as u16);
        let (leader_port, supervisor_port) = (singles[0], singles[1]);
        let d = dir.path().display();
        let text = format!(
            r#"
[group]
id = "{group_id}"
secret = "{TEST_SECRET}"
pp_size = {pp}
tp_size = {tp}
tokens_per_block = 16

[model]
num_layers = 8
num_kv_heads = 8
head_dim = 16
dtype_bytes = 2

[protocol]
window_steps = {window}
frame_deadline_ms = 5000
handshake_timeout_ms = 2000

[store]
host_capacity_blocks = {host}
disk_capacity_blocks = {disk}
host_dir = "{d}/rank{{rank}}/host"
disk_dir = "{d}/rank{{rank}}/disk"

[network]
leader_addr = "127.0.0.1:{leader_port}"
http_host = "127.0.0.1"
http_base_port = {http_base_port}
engine_socket_dir = "{d}/sock"

[redis]
url = "{redis}"
{redis_toml}

[supervisor]
heartbeat_interval_ms = 50
heartbeat_timeout_ms = 1000
http_addr = "127.0.0.1:{supervisor_port}"

[log]
level = "info"
{extra}
"#,
            pp = spec.pp,
            tp = spec.tp,
            window = spec.window_steps,
            host = spec.host_capacity_blocks,
            disk = spec.disk_capacity_blocks,
            extra = spec.extra_toml,
            redis = spec.redis_url,
            redis_toml = spec.redis_toml,
            group_id = spec.group_id,
            supervisor_port = supervisor_port,
        );
        let config = dir.path().join("tandem.toml");
        std::fs::write(&config, text).expect("write config");
        Self {
            dir,
            config,
            world_size,
            http_base_port,
            agents: Vec::new(),
        }
    }

    /// Configure and start one agent process per rank.
    pub fn start(spec: &GroupSpec) -> Self {
        let mut g = Self::configure(spec);
        for rank in 0..g.world_size {
            let child = g.agent_command(rank).spawn().expect("spawn tandem agent");
            g.agents.push(Some(ChildGuard(child)));
        }
        g
    }

    /// The command that runs `rank`'s agent (logs to `<dir>/rank<r>.log`).
    pub fn agent_command(&self, rank: u32) -> Command {
        let log = std::fs::File::create(self.log_path(rank)).expect("log file");
        let mut cmd = tandem();
        cmd.arg("agent")
            .arg("--rank")
            .arg(rank.to_string())
            .arg("--config")
            .arg(&self.config);
        cmd.stdout(Stdio::null()).stderr(log);
        cmd
    }

    /// Where `rank`'s agent logs.
    pub fn log_path(&self, rank: u32) -> PathBuf {
        self.dir.path().join(format!("rank{rank}.log"))
    }

    /// `rank`'s log so far (for failure messages).
    pub fn log(&self, rank: u32) -> String {
        std::fs::read_to_string(self.log_path(rank)).unwrap_or_default()
    }

    /// `rank`'s engine socket.
    pub fn socket(&self, rank: u32) -> PathBuf {
        self.dir
            .path()
            .join("sock")
            .join(format!("rank{rank}.sock"))
    }

    /// A page-pool file path for `rank`'s simulated engine.
    pub fn pool_path(&self, rank: u32) -> PathBuf {
        self.dir.path().join(format!("pool{rank}"))
    }

    /// The directory of the group's files.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The value of the first `key = value` line of the configuration file, unquoted (for
    /// example `leader_addr`, `http_addr`, `http_base_port`).
    ///
    /// # Panics
    /// When the file cannot be read or has no such line.
    pub fn config_value(&self, key: &str) -> String {
        config_value(&self.config, key)
    }

    /// The leader's peer address (`network.leader_addr`), `host:port`.
    pub fn leader_addr(&self) -> String {
        self.config_value("leader_addr")
    }

    /// The supervisor's HTTP address (`supervisor.http_addr`) as `(host, port)`.
    pub fn supervisor_http(&self) -> (String, u16) {
        supervisor_http(&self.config)
    }

    /// Rewrite the configuration for 2 KiB shards instead of 32 KiB (head_dim 1): for tests
    /// of the protocol rather than of copy bandwidth.
    pub fn use_small_shards(&self) {
        self.edit_config("head_dim = 16", "head_dim = 1");
    }

    /// Set the agents' and supervisor's log level (`log.level`, default `info`).
    pub fn set_log_level(&self, level: &str) {
        self.edit_config("level = \"info\"", &format!("level = \"{level}\""));
    }

    /// Replace the first `from` in the configuration file with `to`.
    pub fn edit_config(&self, from: &str, to: &str) {
        let text = std::fs::read_to_string(&self.config).expect("read config");
        std::fs::write(&self.config, text.replacen(from, to, 1)).expect("write config");
    }

    /// Every rank's `/readyz` answers 200 naming the same epoch; that epoch.
    ///
    /// # Panics
    /// When a rank does not answer, is not ready, or names another epoch, with its log.
    pub fn ready_epoch(&self) -> u64 {
        let mut epoch = None;
        for r in 0..self.world_size {
            let (code, body) = self.http_get(r, "/readyz").unwrap_or_else(|| {
                panic!("rank {r} /readyz does not answer; log:\n{}", self.log(r))
            });
            assert_eq!(
                code,
                200,
                "rank {r} not ready: {body}\nlog:\n{}",
                self.log(r)
            );
            let v: serde_json::Value = serde_json::from_str(&body).expect("readyz JSON");
            let e = v["epoch"].as_u64().expect("readyz names the epoch");
            assert!(
                epoch.is_none_or(|x| x == e),
                "ranks disagree on the epoch: {body}"
            );
            epoch = Some(e);
        }
        epoch.expect("at least one rank")
    }

    /// GET `path` on `rank`'s HTTP port: `(status, body)`, or `None` if nothing answers.
    pub fn http_get(&self, rank: u32, path: &str) -> Option<(u16, String)> {
        http_get(("127.0.0.1", self.http_base_port + rank as u16), path)
    }

    /// Wait until every rank's `/readyz` answers 200.
    ///
    /// # Panics
    /// After `timeout`, with each rank's last answer and log tail.
    pub fn wait_ready(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            let answers: Vec<Option<(u16, String)>> = (0..self.world_size)
                .map(|r| self.http_get(r, "/readyz"))
                .collect();
            if answers.iter().all(|a| matches!(a, Some((200, _)))) {
                return;
            }
            if start.elapsed() > timeout {
                let logs: Vec<String> = (0..self.world_size)
                    .map(|r| {
                        format!(
                            "--- rank {r}: {:?}\n{}",
                            answers[r as usize],
                            tail(&self.log(r), 30)
                        )
                    })
                    .collect();
                panic!("group not ready within {timeout:?}:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The value of the first `key = value` line of the configuration file at `config`,
/// unquoted.
///
/// # Panics
/// When the file cannot be read or has no such line.
pub fn config_value(config: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(config).expect("read config");
    let prefix = format!("{key} = ");
    text.lines()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .map(|v| v.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{key} in {}", config.display()))
}

/// The supervisor's HTTP address (`supervisor.http_addr`) in the configuration file at
/// `config`, as `(host, port)`.
pub fn supervisor_http(config: &Path) -> (String, u16) {
    let addr = config_value(config, "http_addr");
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    (host.to_string(), port.parse().expect("port"))
}
