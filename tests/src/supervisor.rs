//! `tandem supervisor` processes the tests start for their groups, and
//! [`SupervisedGroup`]: agents and a supervisor started together, as a deployment runs them.
//!
//! It owns starting, watching and restarting those processes (logs `supervisor-{run}.log`
//! beside the group's files) and reading their HTTP pages; what a test expects of them is the
//! test's.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{supervisor_http, Group, GroupSpec};
use crate::http::{http_get, json, metric_in};
use crate::netns::Netns;
use crate::{tail, tandem, tandem_bin, ChildGuard};

/// The supervisor process of one group's configuration, started as often as a test asks
/// (each run logs to its own `supervisor-{run}.log` in the group's directory).
pub struct Supervisor {
    config: PathBuf,
    dir: PathBuf,
    http: (String, u16),
    env: Vec<(String, String)>,
    runs: u32,
    /// The running process, if any (dropping it SIGKILLs it).
    pub child: Option<ChildGuard>,
}

impl Supervisor {
    /// A supervisor of `group` (not started) whose runs get the `TANDEM__*` overrides `env`.
    pub fn new(group: &Group, env: &[(&str, &str)]) -> Self {
        Supervisor {
            config: group.config.clone(),
            dir: group.path().to_path_buf(),
            http: supervisor_http(&group.config),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            runs: 0,
            child: None,
        }
    }

    /// The command of the next run (stdin and stdout closed, stderr to its log).
    pub fn command(&mut self) -> Command {
        self.runs += 1;
        let log = std::fs::File::create(self.log_path(self.runs)).expect("supervisor log");
        let mut cmd = tandem();
        cmd.arg("supervisor").arg("--config").arg(&self.config);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        cmd
    }

    /// Start the next run (replacing, and so killing, a running one).
    pub fn start(&mut self) {
        let child = self.command().spawn().expect("spawn tandem supervisor");
        self.child = Some(ChildGuard(child));
    }

    /// Runs started so far.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// Where run `run` (from 1) logs.
    pub fn log_path(&self, run: u32) -> PathBuf {
        self.dir.join(format!("supervisor-{run}.log"))
    }

    /// The log of the latest run.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path(self.runs)).unwrap_or_default()
    }

    /// Its HTTP address, `(host, port)`.
    pub fn http(&self) -> &(String, u16) {
        &self.http
    }

    /// GET `path` on its HTTP port.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get((&self.http.0, self.http.1), path)
    }

    /// Its `/status` as JSON.
    pub fn status(&self) -> Option<serde_json::Value> {
        self.get("/status")
            .and_then(|(_, body)| serde_json::from_str(&body).ok())
    }

    /// The epoch its `/status` names.
    pub fn epoch(&self) -> Option<u64> {
        self.status().and_then(|s| s["epoch"].as_u64())
    }

    /// True when its `/readyz` answers 200.
    pub fn ready(&self) -> bool {
        matches!(self.get("/readyz"), Some((200, _)))
    }
}

/// Agents by rank and a supervisor, all started by the test (the supervisor with a restart
/// limit no test reaches), the Redis they use given by URL.
pub struct SupervisedGroup {
    /// The agents and their files.
    pub group: Group,
    sup: Supervisor,
    hosts: Vec<String>,
}

impl SupervisedGroup {
    /// Configure and start `spec` with `log_level`.
    pub fn start(spec: &GroupSpec, log_level: &str) -> Self {
        let g = Group::configure(spec);
        g.set_log_level(log_level);
        Self::launch(
            g,
            vec!["127.0.0.1".into(); spec.world_size() as usize],
            &[],
            None,
        )
    }

    /// As [`Self::start`] with 2 KiB shards.
    pub fn start_small(spec: &GroupSpec, log_level: &str) -> Self {
        let g = Self::configure_small(spec);
        g.set_log_level(log_level);
        Self::launch(
            g,
            vec!["127.0.0.1".into(); spec.world_size() as usize],
            &[],
            None,
        )
    }

    /// Configure (2 KiB shards) without starting anything.
    pub fn configure_small(spec: &GroupSpec) -> Group {
        let g = Group::configure(spec);
        g.use_small_shards();
        g
    }

    /// Start a configured group.
    pub fn start_configured(g: Group, log_level: &str) -> Self {
        g.set_log_level(log_level);
        let n = g.world_size as usize;
        Self::launch(g, vec!["127.0.0.1".into(); n], &[], None)
    }

    /// Two ranks: rank 0 here, rank 1 in `net`'s namespace, reaching the leader and Redis
    /// over the veth pair (`spec.redis_url` names Redis on the host side).
    pub fn start_partitionable(spec: &GroupSpec, net: &Netns) -> Self {
        let g = Self::configure_small(spec);
        let text = std::fs::read_to_string(&g.config).expect("config");
        let leader = g.leader_addr();
        let port = leader.rsplit_once(':').expect("host:port").1;
        let text = text.replace(
            &format!("leader_addr = \"{leader}\""),
            &format!("leader_addr = \"{}:{port}\"", net.host_ip),
        );
        std::fs::write(&g.config, text).expect("write config");
        let local_redis = spec.redis_url.replace(&net.host_ip, "127.0.0.1");
        let hosts = vec!["127.0.0.1".to_string(), net.ns_ip.clone()];
        Self::launch(
            g,
            hosts,
            &[
                (0, "TANDEM__REDIS__URL", local_redis),
                (1, "TANDEM__NETWORK__HTTP_HOST", net.ns_ip.clone()),
            ],
            Some(net.name()),
        )
    }

    /// Start every agent (rank 1 inside `netns` when given) with its `env`, then the
    /// supervisor (with rank 0's Redis URL override, if any); wait until all are ready.
    fn launch(
        mut g: Group,
        hosts: Vec<String>,
        env: &[(u32, &str, String)],
        netns: Option<&str>,
    ) -> Self {
        for rank in 0..g.world_size {
            let mut cmd = match netns {
                Some(ns) if rank == 1 => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", ns])
                        .arg(tandem_bin())
                        .args(["agent", "--rank", "1", "--config"])
                        .arg(&g.config);
                    c.stdout(Stdio::null())
                        .stderr(std::fs::File::create(g.log_path(1)).expect("log"));
                    c
                }
                _ => g.agent_command(rank),
            };
            for (r, k, v) in env {
                if *r == rank {
                    cmd.env(k, v);
                }
            }
            g.agents
                .push(Some(ChildGuard(cmd.spawn().expect("spawn agent"))));
        }
        let redis = env
            .iter()
            .find(|(r, k, _)| *r == 0 && *k == "TANDEM__REDIS__URL")
            .map(|e| e.2.as_str());
        let mut sup_env = vec![("TANDEM__SUPERVISOR__MAX_RESTARTS", "10000")];
        if let Some(url) = redis {
            sup_env.push(("TANDEM__REDIS__URL", url));
        }
        let mut sup = Supervisor::new(&g, &sup_env);
        sup.start();
        let c = Self {
            group: g,
            sup,
            hosts,
        };
        c.wait_ready(Duration::from_secs(60));
        c
    }

    fn agent_get(&self, rank: u32, path: &str) -> Option<(u16, String)> {
        http_get(
            (
                &self.hosts[rank as usize],
                self.group.http_base_port + rank as u16,
            ),
            path,
        )
    }

    /// The supervisor's epoch.
    pub fn supervisor_epoch(&self) -> Option<u64> {
        json(self.sup.get("/status"))["epoch"].as_u64()
    }

    /// Wait until the supervisor's epoch exceeds `old`; the new epoch.
    pub fn wait_epoch_after(&self, old: u64, timeout: Duration) -> u64 {
        let started = Instant::now();
        loop {
            if let Some(e) = self.supervisor_epoch().filter(|e| *e > old) {
                return e;
            }
            assert!(
                started.elapsed() < timeout,
                "the group stayed in epoch {old} for {timeout:?}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until the supervisor and every agent are ready in one epoch.
    pub fn wait_ready(&self, timeout: Duration) {
        let started = Instant::now();
        loop {
            let sup = self.sup.get("/readyz");
            let agents: Vec<_> = (0..self.group.world_size)
                .map(|r| self.agent_get(r, "/readyz"))
                .collect();
            let epochs: std::collections::BTreeSet<_> = agents
                .iter()
                .map(|a| json(a.clone())["epoch"].as_u64())
                .collect();
            if matches!(sup, Some((200, _)))
                && agents.iter().all(|a| matches!(a, Some((200, _))))
                && epochs.len() == 1
            {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "not ready within {timeout:?}: supervisor {sup:?}, agents {agents:?}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `rank`'s agent process id.
    pub fn agent_pid(&self, rank: u32) -> u32 {
        self.group.agents[rank as usize]
            .as_ref()
            .expect("agent runs")
            .0
            .id()
    }

    /// `agent.stale_epoch_rejected` from `rank`'s `/status`.
    pub fn stale_rejected(&self, rank: u32) -> u64 {
        json(self.agent_get(rank, "/status"))["agent"]["stale_epoch_rejected"]
            .as_u64()
            .unwrap_or(0)
    }

    /// A metric of `rank` (first sample).
    pub fn metric(&self, rank: u32, name: &str) -> f64 {
        self.metric_labeled(rank, name, "")
    }

    /// A metric of `rank`, first sample whose labels contain `label`.
    pub fn metric_labeled(&self, rank: u32, name: &str, label: &str) -> f64 {
        self.agent_get(rank, "/metrics")
            .map_or(0.0, |(_, t)| metric_in(&t, name, label))
    }

    /// SIGKILL `rank`'s agent and start it again (the outer restart policy's job); the new
    /// run appends to the same log.
    pub fn kill_and_respawn(&mut self, rank: u32) {
        if let Some(mut c) = self.group.agents[rank as usize].take() {
            let _ = c.0.kill();
            let _ = c.0.wait();
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.group.log_path(rank))
            .expect("log");
        let mut cmd = tandem();
        cmd.args(["agent", "--rank", &rank.to_string(), "--config"])
            .arg(&self.group.config)
            .stdout(Stdio::null())
            .stderr(log);
        self.group.agents[rank as usize] = Some(ChildGuard(cmd.spawn().expect("respawn agent")));
    }

    /// Log tails of every process.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for r in 0..self.group.world_size {
            out += &format!("--- rank {r} log:\n{}\n", tail(&self.group.log(r), 25));
        }
        out += &format!("--- supervisor log:\n{}\n", tail(&self.sup.log(), 25));
        out
    }
}
