//! A local group of real agent processes on loopback, with its configuration in a temporary
//! directory (tiers, engine sockets and the config file all live there).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_ports, tandem, ChildGuard};

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
id = "itest"
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
                            tail(&self.log(r))
                        )
                    })
                    .collect();
                panic!("group not ready within {timeout:?}:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A minimal HTTP/1.0 GET over loopback TCP: `(status, body)`.
pub fn http_get(addr: (&str, u16), path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &format!("{}:{}", addr.0, addr.1).parse().ok()?,
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Some((status, body))
}
