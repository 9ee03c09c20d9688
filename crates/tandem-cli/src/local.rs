//! A local cluster on this machine: a `redis-server` child (unless `REDIS_URL` names one), the
//! supervisor, and one agent per rank that the supervisor launches. `tandem up` and
//! `tandem replay` start one; everything lives in a temporary directory (configuration, tiers,
//! engine sockets, logs) and is stopped and removed when the cluster is dropped.
//!
//! Shutdown is one mechanism: the [`CancellationToken`] given to [`LocalCluster::start_until`]
//! (cancelled by the binary on SIGTERM or SIGINT) ends every wait here, start-up included;
//! [`LocalCluster::stop`] then sends SIGTERM to the supervisor (which stops its agents and
//! waits for them), waits for it, and stops Redis. Every wait and poll figure is named in
//! [`cadence`].

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;
use tokio_util::sync::CancellationToken;

/// Every wait and poll figure of a local cluster, in one place.
pub(crate) mod cadence {
    use std::time::Duration;

    /// How long the group may take to become ready after start.
    pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(60);
    /// How long `redis-server` may take to accept connections.
    pub(crate) const REDIS_START_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long the supervisor gets to stop its agents and itself after SIGTERM before it is
    /// killed (its own grace for the agents is 10 s).
    pub(crate) const SUPERVISOR_STOP_GRACE: Duration = Duration::from_secs(15);
    /// Pause between checks of readiness, of the supervisor process and of the token.
    pub(crate) const POLL: Duration = Duration::from_millis(50);
    /// Pause between checks while Redis starts or the supervisor stops.
    pub(crate) const FAST_POLL: Duration = Duration::from_millis(20);
}

/// The start-up of a cluster was ended by its shutdown token (not a failure: the command
/// exits 0).
#[derive(Debug, thiserror::Error)]
#[error("stopped before the cluster was ready")]
pub(crate) struct Cancelled;

/// The shape of a local cluster.
#[derive(Clone, Debug)]
pub(crate) struct LocalSpec {
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Host tier capacity per rank, in blocks.
    pub host_capacity_blocks: u64,
    /// Disk tier capacity per rank, in blocks.
    pub disk_capacity_blocks: u64,
    /// Tokens per block.
    pub tokens_per_block: u32,
    /// `[model]` as TOML lines (layers, heads, head_dim, dtype_bytes).
    pub model_toml: String,
    /// Heartbeat interval and timeout, ms.
    pub heartbeat_ms: (u64, u64),
    /// Restarts allowed within the restart window before the group is marked failed.
    pub max_restarts: u32,
    /// Where to put the cluster's files (`None`: a new temporary directory).
    pub dir: Option<PathBuf>,
}

/// Settings of a local cluster that only some callers change (the data-path benchmark).
#[derive(Clone, Debug, Default)]
pub(crate) struct LocalTuning {
    /// Directory for the ranks' host tiers (`None`: inside the cluster's directory, beside the
    /// disk tiers). A tmpfs such as /dev/shm keeps the host tier in memory while the disk
    /// tier stays on disk.
    pub host_dir: Option<PathBuf>,
    /// Extra `key = value` lines of `[store]`.
    pub store_lines: String,
}

/// A running local cluster.
pub(crate) struct LocalCluster {
    _tmp: Option<tempfile::TempDir>,
    dir: PathBuf,
    config: PathBuf,
    world_size: u32,
    http_base_port: u16,
    supervisor_http: String,
    redis: Option<Child>,
    supervisor: Option<Child>,
    shutdown: CancellationToken,
    /// The Redis URL in use (masked when printed).
    pub redis_url: String,
}

/// Loopback ports picked for one cluster. Every probe listener stays open until all ports are
/// picked, so that no two picks can return the same port.
#[derive(Default)]
struct PortPicker {
    held: Vec<std::net::TcpListener>,
}

/// A loopback listener on a random port below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`, 32768 by default) and at or above 10000, or on
/// a port the OS picks when that fails 64 times. Why: a port picked by the OS comes from the
/// ephemeral range, and between the probe's close and the agent's bind any outgoing
/// connection on the machine (a Redis client, a test) may take it as its local port.
fn probe_listener() -> std::io::Result<std::net::TcpListener> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    if low > 11_000 {
        for _ in 0..64 {
            let port = rand::Rng::gen_range(&mut rand::thread_rng(), 10_000..low);
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                return Ok(l);
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
}

impl PortPicker {
    /// One free port.
    fn one(&mut self) -> anyhow::Result<u16> {
        let l = probe_listener()?;
        let port = l.local_addr()?.port();
        self.held.push(l);
        Ok(port)
    }

    /// `n` consecutive free ports; returns the first.
    fn range(&mut self, n: u16) -> anyhow::Result<u16> {
        'search: for _ in 0..200 {
            let probe = probe_listener()?;
            let base = probe.local_addr()?.port();
            drop(probe);
            if base.checked_add(n).is_none() {
                continue;
            }
            let mut range = Vec::new();
            for p in base..base + n {
                match std::net::TcpListener::bind(("127.0.0.1", p)) {
                    Ok(l) => range.push(l),
                    Err(_) => continue 'search,
                }
            }
            self.held.extend(range);
            return Ok(base);
        }
        bail!("no range of {n} free loopback ports")
    }
}

/// GET `url` with a short deadline: `(status, body)`.
pub(crate) fn http_get(url: &str) -> Option<(u16, String)> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    match agent.get(url).call() {
        Ok(r) => {
            let status = r.status();
            Some((status, r.into_string().unwrap_or_default()))
        }
        Err(ureq::Error::Status(code, r)) => Some((code, r.into_string().unwrap_or_default())),
        Err(_) => None,
    }
}

impl LocalCluster {
    /// [`Self::start_until`] with a token nothing cancels (for commands that stop the
    /// cluster themselves).
    ///
    /// # Errors
    /// As [`Self::start_until`].
    pub(crate) fn start(spec: &LocalSpec) -> anyhow::Result<Self> {
        Self::start_until(spec, CancellationToken::new())
    }

    /// Start Redis (if needed), then the supervisor with its agents; wait until the group is
    /// ready. Once `shutdown` is cancelled every wait ends with [`Cancelled`] (and what was
    /// started is stopped).
    ///
    /// # Errors
    /// [`Cancelled`]; when `redis-server` is neither reachable through `REDIS_URL` nor
    /// installed, when a process cannot start, or when the group is not ready within
    /// [`cadence::READY_TIMEOUT`] (with the log tail).
    pub(crate) fn start_until(
        spec: &LocalSpec,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        Self::start_tuned(spec, &LocalTuning::default(), shutdown)
    }

    /// [`Self::start_until`] with `tuning` applied to the configuration.
    ///
    /// # Errors
    /// As [`Self::start_until`].
    pub(crate) fn start_tuned(
        spec: &LocalSpec,
        tuning: &LocalTuning,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Self> {
        let (tmp, dir) = match &spec.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (None, d.clone())
            }
            None => {
                let t = tempfile::Builder::new().prefix("tandem-local-").tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let mut cluster = Self {
            _tmp: tmp,
            dir: dir.clone(),
            config: dir.join("tandem.toml"),
            world_size: spec.pp * spec.tp,
            http_base_port: 0,
            supervisor_http: String::new(),
            redis: None,
            supervisor: None,
            shutdown,
            redis_url: String::new(),
        };
        cluster.redis_url = match std::env::var("REDIS_URL") {
            Ok(url) if !url.is_empty() => url,
            _ => cluster.start_redis()?,
        };
        cluster.write_config(spec, tuning)?;
        let log = std::fs::File::create(dir.join("cluster.log"))?;
        let exe = std::env::current_exe().context("cannot find the tandem binary")?;
        let child = Command::new(exe)
            .arg("supervisor")
            .arg("--config")
            .arg(&cluster.config)
            .arg("--launch-agents")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start the supervisor")?;
        cluster.supervisor = Some(child);
        cluster.wait_ready(cadence::READY_TIMEOUT)?;
        Ok(cluster)
    }

    fn start_redis(&mut self) -> anyhow::Result<String> {
        let port = PortPicker::default().one()?;
        let dir = self.dir.join("redis");
        std::fs::create_dir_all(&dir)?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("redis-server is not installed and REDIS_URL is not set: install it (apt-get install redis-server) or point REDIS_URL at a server")?;
        self.redis = Some(child);
        let url = format!("redis://127.0.0.1:{port}");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if self.shutdown.is_cancelled() {
                return Err(Cancelled.into());
            }
            if start.elapsed() > cadence::REDIS_START_TIMEOUT {
                bail!(
                    "redis-server did not start on port {port} within {:?}",
                    cadence::REDIS_START_TIMEOUT
                );
            }
            std::thread::sleep(cadence::FAST_POLL);
        }
        Ok(url)
    }

    fn write_config(&mut self, spec: &LocalSpec, tuning: &LocalTuning) -> anyhow::Result<()> {
        let mut ports = PortPicker::default();
        let leader_port = ports.one()?;
        self.http_base_port = ports.range(self.world_size as u16)?;
        let sup_port = ports.one()?;
        self.supervisor_http = format!("127.0.0.1:{sup_port}");
        let secret: String = rand::thread_rng()
            .sample_iter(rand::distributions::Alphanumeric)
            .take(32)
            .map(char::from)
            .collect();
        let d = self.dir.display();
        let host_root = match &tuning.host_dir {
            Some(h) => h.display().to_string(),
            None => d.to_string(),
        };
        let text = format!(
            r#"# Generated by tandem for a local cluster.
[group]
id = "local-{pid}"
secret = "{secret}"
pp_size = {pp}
tp_size = {tp}
tokens_per_block = {tpb}

[model]
{model}

[store]
host_capacity_blocks = {host}
disk_capacity_blocks = {disk}
host_dir = "{host_root}/rank{{rank}}/host"
disk_dir = "{d}/rank{{rank}}/disk"
{store_lines}

[network]
leader_addr = "127.0.0.1:{leader_port}"
http_host = "127.0.0.1"
http_base_port = {http}
engine_socket_dir = "{d}/sock"

[redis]
url = "{redis}"

[supervisor]
heartbeat_interval_ms = {hb_int}
heartbeat_timeout_ms = {hb_to}
max_restarts = {max_restarts}
http_addr = "{sup}"
"#,
            max_restarts = spec.max_restarts,
            pid = std::process::id(),
            pp = spec.pp,
            tp = spec.tp,
            tpb = spec.tokens_per_block,
            model = spec.model_toml,
            host = spec.host_capacity_blocks,
            disk = spec.disk_capacity_blocks,
            store_lines = tuning.store_lines,
            http = self.http_base_port,
            redis = self.redis_url,
            hb_int = spec.heartbeat_ms.0,
            hb_to = spec.heartbeat_ms.1,
            sup = self.supervisor_http,
        );
        std::fs::write(&self.config, text)?;
        Ok(())
    }

    /// Wait until the supervisor reports the group ready.
    ///
    /// # Errors
    /// [`Cancelled`] once the shutdown token is cancelled; when the supervisor exits; after
    /// `timeout`, with the last answer and the log tail.
    pub(crate) fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let answer = http_get(&format!("http://{}/readyz", self.supervisor_http));
            if matches!(answer, Some((200, _))) {
                return Ok(());
            }
            if self.shutdown.is_cancelled() {
                return Err(Cancelled.into());
            }
            if let Some(status) = self.supervisor_exit() {
                bail!("the supervisor exited ({status}):\n{}", self.log_tail(40));
            }
            if start.elapsed() > timeout {
                bail!(
                    "the group was not ready within {timeout:?} (last answer {answer:?}):\n{}",
                    self.log_tail(40)
                );
            }
            std::thread::sleep(cadence::POLL);
        }
    }

    /// Wait until the shutdown token is cancelled (`Ok`), or until the supervisor exits on
    /// its own: exit status 3 (it gave up on the group) is [`crate::exit::GroupFailed`],
    /// anything else an error; both carry the log tail.
    ///
    /// # Errors
    /// As above.
    pub(crate) fn wait_for_shutdown(&mut self) -> anyhow::Result<()> {
        while !self.shutdown.is_cancelled() {
            if let Some(status) = self.supervisor_exit() {
                let tail = self.log_tail(40);
                if status.code() == Some(crate::exit::GROUP_FAILED) {
                    return Err(crate::exit::GroupFailed(format!(
                        "the supervisor gave up on the group:\n{tail}"
                    ))
                    .into());
                }
                bail!("the supervisor exited ({status}):\n{tail}");
            }
            std::thread::sleep(cadence::POLL);
        }
        Ok(())
    }

    /// The supervisor's exit status once it exited.
    fn supervisor_exit(&mut self) -> Option<ExitStatus> {
        self.supervisor.as_mut()?.try_wait().ok().flatten()
    }

    /// The last `n` lines of the cluster's log.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.dir.join("cluster.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Ranks in the group.
    pub(crate) fn world_size(&self) -> u32 {
        self.world_size
    }

    /// The directory of the cluster's files.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `rank`'s engine socket.
    pub(crate) fn socket(&self, rank: u32) -> PathBuf {
        self.dir.join("sock").join(format!("rank{rank}.sock"))
    }

    /// The supervisor's HTTP address.
    pub(crate) fn supervisor_http(&self) -> &str {
        &self.supervisor_http
    }

    /// `rank`'s HTTP address.
    pub(crate) fn agent_http(&self, rank: u32) -> String {
        format!("127.0.0.1:{}", self.http_base_port as u32 + rank)
    }

    /// `rank`'s agent process id, from its `/status`.
    pub(crate) fn agent_pid(&self, rank: u32) -> Option<u32> {
        let (_, body) = http_get(&format!("http://{}/status", self.agent_http(rank)))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["agent"]["pid"].as_u64().map(|p| p as u32)
    }

    /// The supervisor's `/status`.
    pub(crate) fn supervisor_status(&self) -> Option<serde_json::Value> {
        let (_, body) = http_get(&format!("http://{}/status", self.supervisor_http))?;
        serde_json::from_str(&body).ok()
    }

    /// Stop everything: SIGTERM to the supervisor (which stops its agents), then Redis.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.supervisor.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while start.elapsed() < cadence::SUPERVISOR_STOP_GRACE {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(cadence::FAST_POLL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut child) = self.redis.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
