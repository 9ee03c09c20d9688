//! Agent processes the supervisor launched itself (`tandem up`): start them, notice when one
//! exits, start it again at a restart. Under docker-compose or systemd the agents are launched
//! by those tools instead and this module is not used.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// How to start the agent of a rank.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The `tandem` binary.
    pub binary: PathBuf,
    /// The configuration file every agent reads.
    pub config: PathBuf,
    /// Where each agent's stderr goes: `<log_dir>/agent-<rank>.log` (`None`: inherit).
    pub log_dir: Option<PathBuf>,
}

/// The launched agents, by rank.
pub struct Launcher {
    spec: LaunchSpec,
    children: Vec<Option<Child>>,
}

impl Launcher {
    /// Start one agent per rank.
    ///
    /// # Errors
    /// The spawn error of the first agent that could not start.
    pub fn start(spec: LaunchSpec, world_size: u32) -> std::io::Result<Self> {
        let mut l = Self {
            spec,
            children: (0..world_size).map(|_| None).collect(),
        };
        for rank in 0..world_size {
            l.spawn(rank)?;
        }
        Ok(l)
    }

    fn spawn(&mut self, rank: u32) -> std::io::Result<()> {
        let mut cmd = Command::new(&self.spec.binary);
        cmd.arg("agent")
            .arg("--rank")
            .arg(rank.to_string())
            .arg("--config")
            .arg(&self.spec.config);
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        if let Some(dir) = &self.spec.log_dir {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(format!("agent-{rank}.log")))?;
            cmd.stdout(Stdio::null()).stderr(log);
        }
        let child = cmd.spawn()?;
        tracing::info!(rank, pid = child.id(), "agent launched");
        self.children[rank as usize] = Some(child);
        Ok(())
    }

    /// Ranks whose agent exited since the last call, with how.
    pub fn exited(&mut self) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        for (rank, slot) in self.children.iter_mut().enumerate() {
            if let Some(child) = slot {
                if let Ok(Some(status)) = child.try_wait() {
                    out.push((
                        rank as u32,
                        format!("agent of rank {rank} exited ({status})"),
                    ));
                    *slot = None;
                }
            }
        }
        out
    }

    /// Start again every agent that is not running.
    ///
    /// # Errors
    /// The spawn error.
    pub fn relaunch_missing(&mut self) -> std::io::Result<()> {
        for rank in 0..self.children.len() as u32 {
            if self.children[rank as usize].is_none() {
                self.spawn(rank)?;
            }
        }
        Ok(())
    }

    /// Process ids of the running agents, by rank (for tests and chaos).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.children
            .iter()
            .map(|c| c.as_ref().and_then(Child::id))
            .collect()
    }

    /// Send SIGTERM to every agent and wait up to `grace` for them to exit; kill the rest.
    pub async fn stop(&mut self, grace: std::time::Duration) {
        for child in self.children.iter().flatten() {
            if let Some(pid) = child.id() {
                // SAFETY: kill(2) on a pid this process spawned and has not reaped.
                unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        for child in self.children.iter_mut().flatten() {
            let _ = tokio::time::timeout_at(deadline, child.wait()).await;
            let _ = child.start_kill();
        }
    }
}
