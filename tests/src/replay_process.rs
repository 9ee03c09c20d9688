//! A `tandem replay --json` process that starts its own cluster (supervisor and agents)
//! against the test's Redis ([`ReplayCli`]); [`ClusterView`], that cluster found from outside
//! (`/proc`, its configuration, its HTTP pages) so that a test can signal its processes; and
//! [`ReplayResult`], how the process ended.
//!
//! It signals only the processes of a cluster its own `tandem replay` started, found by
//! parent pid and configuration path. Every wait has a deadline.

use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{config_value, supervisor_http};
use crate::http::{http_get, json, metric_in};
use crate::procs::{parent, signal, tandem_processes};
use crate::{tandem, ChildGuard};

/// A `tandem replay --json` process using our Redis.
pub struct ReplayCli {
    child: Option<Child>,
    out: tempfile::TempDir,
    started: Instant,
}

/// The cluster a [`ReplayCli`] started, seen from outside.
pub struct ClusterView {
    config: PathBuf,
    dir: PathBuf,
    world: u32,
    sup: (String, u16),
    http_base: u16,
    adopted: Vec<ChildGuard>,
}

/// How a replay process ended.
pub struct ReplayResult {
    /// Exit status.
    pub status: ExitStatus,
    /// The summary (`--json`), if printed.
    pub summary: Option<serde_json::Value>,
    /// Its stderr.
    pub stderr: String,
    /// Seconds it ran.
    pub seconds: f64,
}

impl ReplayCli {
    /// `tandem replay --json --limit requests --ranks 2 EXTRA` with `REDIS_URL` and a
    /// restart limit no replay reaches.
    pub fn spawn(redis_url: &str, requests: usize, extra: &[&str]) -> Self {
        let out = tempfile::Builder::new()
            .prefix("tandem-faults-replay-")
            .tempdir()
            .expect("tempdir");
        let child = tandem()
            .args([
                "replay",
                "--json",
                "--ranks",
                "2",
                "--limit",
                &requests.to_string(),
            ])
            .args(extra)
            .env("REDIS_URL", redis_url)
            .env("TANDEM__SUPERVISOR__MAX_RESTARTS", "10000")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(out.path().join("stdout")).expect("stdout"))
            .stderr(std::fs::File::create(out.path().join("stderr")).expect("stderr"))
            .spawn()
            .expect("spawn tandem replay");
        Self {
            child: Some(child),
            out,
            started: Instant::now(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("runs").id()
    }

    /// True once the replay process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(
            self.child.as_mut().map(Child::try_wait),
            Some(Ok(Some(_))) | None
        )
    }

    /// Wait until its supervisor and `world` agents run and the group is ready.
    pub fn cluster(&mut self, world: u32, timeout: Duration) -> ClusterView {
        let started = Instant::now();
        let me = self.pid().to_string();
        loop {
            assert!(
                !self.exited(),
                "the replay exited before its cluster was ready:\n{}",
                self.stderr()
            );
            assert!(
                started.elapsed() < timeout,
                "no cluster within {timeout:?}:\n{}",
                self.stderr()
            );
            let sups = tandem_processes(&["supervisor", "--launch-agents"]);
            let sup = sups
                .into_iter()
                .find(|(pid, _)| parent(*pid).is_some_and(|p| p.to_string() == me));
            if let Some((_, cl)) = sup {
                let config = PathBuf::from(
                    cl.iter()
                        .skip_while(|a| *a != "--config")
                        .nth(1)
                        .expect("--config"),
                );
                let view = ClusterView {
                    dir: config.parent().expect("dir").to_path_buf(),
                    sup: supervisor_http(&config),
                    http_base: config_value(&config, "http_base_port")
                        .parse()
                        .expect("port"),
                    config,
                    world,
                    adopted: Vec::new(),
                };
                if view.wait_ready(Duration::from_millis(100)).is_some()
                    && view.agent_pids().iter().all(Option::is_some)
                {
                    return view;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.out.path().join("stderr")).unwrap_or_default()
    }

    /// Wait for the exit (killing it past `timeout`).
    pub fn finish(mut self, timeout: Duration) -> ReplayResult {
        let mut child = self.child.take().expect("runs");
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if self.started.elapsed() > timeout {
                kill_tree(child.id());
                let _ = child.kill();
                let _ = child.wait();
                panic!("the replay ran past {timeout:?}:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = std::fs::read_to_string(self.out.path().join("stdout")).unwrap_or_default();
        ReplayResult {
            status,
            summary: serde_json::from_str(stdout.trim()).ok(),
            stderr: self.stderr(),
            seconds: self.started.elapsed().as_secs_f64(),
        }
    }
}

impl Drop for ReplayCli {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                kill_tree(c.id());
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGKILL every process of the cluster a `tandem replay` (`pid`) started: its supervisor
/// and every agent of that supervisor's configuration (orphans of an earlier supervisor
/// included). A replay killed from outside cannot stop them itself.
fn kill_tree(pid: u32) {
    for (sup, cl) in tandem_processes(&["supervisor", "--config"]) {
        if parent(sup) != Some(pid) {
            continue;
        }
        let Some(config) = cl.iter().skip_while(|a| *a != "--config").nth(1) else {
            continue;
        };
        for (p, _) in tandem_processes(&["--config", config]) {
            signal(p, libc::SIGKILL);
        }
    }
}

impl ReplayResult {
    /// Exit 0 and no verify failure, lost or duplicate completion or mismatch; the summary.
    pub fn assert_clean(&self, what: &str) -> serde_json::Value {
        let tail: String = self
            .stderr
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        let s = self
            .summary
            .clone()
            .unwrap_or_else(|| panic!("{what}: no summary (exit {:?}):\n{tail}", self.status));
        for k in [
            "verify_failures",
            "lost_completions",
            "duplicate_completions",
            "mismatches",
        ] {
            assert_eq!(s[k], 0, "{what}: {k} = {} in {s}", s[k]);
        }
        assert!(
            self.status.success(),
            "{what}: exit {:?}:\n{tail}",
            self.status
        );
        s
    }

    /// The figures of the summary in one token.
    pub fn short(&self) -> String {
        let Some(s) = &self.summary else {
            return "none".into();
        };
        let keys = [
            "requests",
            "epochs",
            "restarts",
            "supervisor_restarts",
            "recovery_ms_max",
            "verify_failures",
            "lost_completions",
            "duplicate_completions",
            "mismatches",
            "redelivered_unacked",
            "loads_failed",
            "stores_failed",
            "blocks_verified",
            "wall_seconds",
        ];
        let mut parts: Vec<String> = keys.iter().map(|k| format!("{k}:{}", s[*k])).collect();
        parts.push(format!("process_seconds:{:.1}", self.seconds));
        parts.join(",")
    }
}

impl ClusterView {
    /// The running supervisor: one this test started, or the replay's own.
    pub fn supervisor_pid(&self) -> Option<u32> {
        tandem_processes(&[
            "supervisor",
            "--config",
            self.config.to_str().expect("utf-8 path"),
        ])
        .first()
        .map(|p| p.0)
    }

    /// Agent process ids by rank.
    pub fn agent_pids(&self) -> Vec<Option<u32>> {
        let cfg = self.config.to_str().expect("utf-8 path");
        (0..self.world)
            .map(|r| {
                tandem_processes(&["agent", "--config", cfg, &r.to_string()])
                    .iter()
                    .find(|(_, cl)| {
                        cl.windows(2)
                            .any(|w| w[0] == "--rank" && w[1] == r.to_string())
                    })
                    .map(|p| p.0)
            })
            .collect()
    }

    /// `rank`'s agent process id.
    pub fn agent_pid(&self, rank: u32) -> Option<u32> {
        self.agent_pids()[rank as usize]
    }

    fn agent_get(&self, rank: u32, path: &str) -> Option<(u16, String)> {
        http_get(("127.0.0.1", self.http_base + rank as u16), path)
    }

    /// The epoch `rank`'s `/readyz` names.
    pub fn agent_epoch(&self, rank: u32) -> Option<u64> {
        json(self.agent_get(rank, "/readyz"))["epoch"].as_u64()
    }

    /// `tandem_stale_epoch_rejected_total` of `rank` now.
    pub fn stale_rejected_metric(&self, rank: u32) -> f64 {
        self.agent_get(rank, "/metrics").map_or(0.0, |(_, t)| {
            metric_in(&t, "tandem_stale_epoch_rejected_total", "")
        })
    }

    /// `/readyz` of the supervisor and each agent.
    pub fn readiness(&self) -> Vec<(String, Option<(u16, String)>)> {
        let mut v = vec![(
            "supervisor".to_string(),
            http_get((&self.sup.0, self.sup.1), "/readyz"),
        )];
        for r in 0..self.world {
            v.push((format!("rank {r}"), self.agent_get(r, "/readyz")));
        }
        v
    }

    /// Wait until the supervisor and every agent answer `/readyz` 200.
    pub fn wait_ready(&self, timeout: Duration) -> Option<()> {
        let started = Instant::now();
        loop {
            if self
                .readiness()
                .iter()
                .all(|(_, a)| matches!(a, Some((200, _))))
            {
                return Some(());
            }
            if started.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Wait until the supervisor answers `/readyz` 200.
    pub fn wait_supervisor_ready(&self, timeout: Duration) {
        let started = Instant::now();
        while !matches!(
            http_get((&self.sup.0, self.sup.1), "/readyz"),
            Some((200, _))
        ) {
            assert!(
                started.elapsed() < timeout,
                "the new supervisor was not ready within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Start a supervisor for this cluster (as systemd would after a crash).
    pub fn start_supervisor(&self, log: &str) -> ChildGuard {
        let child = tandem()
            .arg("supervisor")
            .arg("--config")
            .arg(&self.config)
            .env("TANDEM__SUPERVISOR__MAX_RESTARTS", "10000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(log)).expect("log"))
            .spawn()
            .expect("spawn supervisor");
        ChildGuard(child)
    }

    /// Lines of the cluster's log (supervisor and agents) that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("cluster.log")).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// Keep a supervisor this test started until the view is dropped.
    pub fn adopt_supervisor(&mut self, c: ChildGuard) {
        self.adopted.push(c);
    }

    /// Start `rank`'s agent (as systemd would after a crash).
    pub fn start_agent(&self, rank: u32, log: &str) -> ChildGuard {
        let child = tandem()
            .args(["agent", "--rank", &rank.to_string(), "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(log)).expect("log"))
            .spawn()
            .expect("spawn agent");
        ChildGuard(child)
    }
}
