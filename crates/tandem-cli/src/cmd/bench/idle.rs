//! The CPU idle policy a `tandem bench` run measures under: what the kernel's cpuidle driver
//! offers (read from sysfs), and, with `--cpu-latency-us`, a PM QoS request that keeps idle
//! CPUs out of states slower to leave than that, held for the run.
//!
//! Why: every figure of `frame`, `redis` and `datapath` is made of round trips between
//! processes, and a round trip to a process whose CPU went idle pays that CPU's wake-up. On a
//! virtual machine with the `haltpoll` driver an idle vCPU halts after polling for up to
//! `guest_halt_poll_ns` (50 µs by default), and waking a halted vCPU leaves the guest: a
//! loopback Redis `PING` measured 55–70 µs p50 there with the machine idle, 23 µs with the
//! request below held (or with a busy loop on each core), docs/BENCHMARKS.md, "CPU idle
//! states". Writing a number of µs to `/dev/cpu_dma_latency` and keeping the file open is the
//! kernel's PM QoS interface for this (the CPU latency QoS of the kernel's power docs); it is what
//! `tuned`'s latency-performance profile sets, so an operator can hold the same on an inference
//! node. The request is the whole machine's and ends when the file is closed (this process
//! exits or drops the [`LatencyHold`]).
//!
//! Owns reading the policy and holding the request; it never changes a sysfs setting and never
//! holds a request the user did not ask for.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The kernel's PM QoS device for the CPU wake-up latency limit.
pub(super) const PM_QOS_DEVICE: &str = "/dev/cpu_dma_latency";

/// Where the cpuidle driver and CPU 0's idle states are described.
const SYSFS_CPU: &str = "/sys/devices/system/cpu";

/// Why the PM QoS request could not be held.
#[derive(Debug, thiserror::Error)]
pub(super) enum IdleError {
    /// The device could not be opened (it needs root, or the kernel lacks PM QoS).
    #[error("--cpu-latency-us: cannot open {path}: {source} (it needs root; without the flag the run measures under the machine's own idle policy)")]
    Open {
        /// The device path.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The request could not be written.
    #[error("--cpu-latency-us: cannot write {us} µs to {path}: {source}")]
    Write {
        /// The device path.
        path: PathBuf,
        /// The limit asked for, µs.
        us: u32,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The limit does not fit the device's signed 32-bit value.
    #[error("--cpu-latency-us: {us} µs is above the largest limit the kernel takes ({max} µs)")]
    TooLarge {
        /// The limit asked for, µs.
        us: u32,
        /// `i32::MAX`.
        max: i32,
    },
}

/// A PM QoS CPU latency request, held until dropped (the kernel drops it when the file
/// closes).
pub(super) struct LatencyHold {
    _file: File,
    /// The limit held, µs.
    pub us: u32,
}

impl LatencyHold {
    /// Asks that no idle CPU enter a state whose exit latency is above `us` µs (0: stay in
    /// the polling state), through the device at `path` ([`PM_QOS_DEVICE`] in a run).
    ///
    /// # Errors
    /// [`IdleError::TooLarge`] above `i32::MAX` µs; [`IdleError::Open`] when the device cannot
    /// be opened for writing (not root, no PM QoS); [`IdleError::Write`] when the kernel refuses
    /// the value.
    pub(super) fn hold(path: &Path, us: u32) -> Result<LatencyHold, IdleError> {
        let value = i32::try_from(us).map_err(|_| IdleError::TooLarge { us, max: i32::MAX })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| IdleError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        // The device takes the limit as a native-endian s32 (or as hex text); binary is the
        // form every kernel since PM QoS has taken.
        file.write_all(&value.to_ne_bytes())
            .map_err(|source| IdleError::Write {
                path: path.to_path_buf(),
                us,
                source,
            })?;
        Ok(LatencyHold { _file: file, us })
    }
}

/// One idle state of CPU 0 as sysfs names it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(super) struct IdleState {
    /// The state's name (`POLL`, `haltpoll idle`, `C1`, ...).
    pub name: String,
    /// Its exit latency as the driver states it, µs.
    pub latency_us: u64,
}

/// The cpuidle driver and CPU 0's idle states, empty where sysfs has none (no cpuidle).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(super) struct IdlePolicy {
    /// `cpuidle/current_driver` (`haltpoll`, `intel_idle`, `acpi_idle`, ...), empty if absent.
    pub driver: String,
    /// `cpuidle/current_governor`, empty if absent.
    pub governor: String,
    /// CPU 0's states in index order.
    pub states: Vec<IdleState>,
    /// The PM QoS limit this run holds, µs; `None`: the machine's own policy.
    pub pm_qos_us: Option<u32>,
}

impl IdlePolicy {
    /// Reads the policy under `root` ([`SYSFS_CPU`] in a run); `held` is the run's request.
    pub(super) fn read(root: &Path, held: Option<u32>) -> IdlePolicy {
        let read = |p: PathBuf| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let mut states = Vec::new();
        for i in 0.. {
            let dir = root.join(format!("cpu0/cpuidle/state{i}"));
            if !dir.is_dir() {
                break;
            }
            states.push(IdleState {
                name: read(dir.join("name")),
                latency_us: read(dir.join("latency")).parse().unwrap_or(0),
            });
        }
        IdlePolicy {
            driver: read(root.join("cpuidle/current_driver")),
            governor: read(root.join("cpuidle/current_governor")),
            states,
            pm_qos_us: held,
        }
    }

    /// The machine's policy now, with the run's request.
    pub(super) fn current(held: Option<u32>) -> IdlePolicy {
        IdlePolicy::read(Path::new(SYSFS_CPU), held)
    }

    /// One line for the head of the tables: driver, states, and the request held or not.
    pub(super) fn line(&self) -> String {
        let states: Vec<String> = self
            .states
            .iter()
            .map(|s| format!("{} ({} µs)", s.name, s.latency_us))
            .collect();
        let driver = if self.driver.is_empty() {
            "no cpuidle driver".to_string()
        } else {
            format!("driver {}, states {}", self.driver, states.join(", "))
        };
        let qos = match self.pm_qos_us {
            Some(us) => format!("PM QoS {PM_QOS_DEVICE} = {us} µs held for this run"),
            None => {
                "no PM QoS request (the machine's own idle policy; --cpu-latency-us 0 holds one)"
                    .into()
            }
        };
        format!("cpu idle: {driver}; {qos}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_driver_and_the_states_in_order() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path();
        std::fs::create_dir_all(p.join("cpuidle")).unwrap();
        std::fs::write(p.join("cpuidle/current_driver"), "haltpoll\n").unwrap();
        std::fs::write(p.join("cpuidle/current_governor"), "haltpoll\n").unwrap();
        for (i, (name, lat)) in [("POLL", "0"), ("haltpoll idle", "1")].iter().enumerate() {
            let d = p.join(format!("cpu0/cpuidle/state{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(d.join("latency"), format!("{lat}\n")).unwrap();
        }
        let policy = IdlePolicy::read(p, Some(0));
        assert_eq!(policy.driver, "haltpoll");
        assert_eq!(
            policy.states,
            vec![
                IdleState {
                    name: "POLL".into(),
                    latency_us: 0
                },
                IdleState {
                    name: "haltpoll idle".into(),
                    latency_us: 1
                },
            ]
        );
        let line = policy.line();
        assert!(
            line.contains("driver haltpoll, states POLL (0 µs), haltpoll idle (1 µs)"),
            "{line}"
        );
        assert!(line.contains("= 0 µs held"), "{line}");
    }

    #[test]
    fn a_machine_without_cpuidle_reads_empty() {
        let root = tempfile::tempdir().unwrap();
        let policy = IdlePolicy::read(root.path(), None);
        assert_eq!(policy, IdlePolicy::default());
        assert!(
            policy.line().contains("no cpuidle driver"),
            "{}",
            policy.line()
        );
        assert!(
            policy.line().contains("no PM QoS request"),
            "{}",
            policy.line()
        );
    }

    #[test]
    fn a_missing_device_is_a_typed_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu_dma_latency");
        match LatencyHold::hold(&path, 0) {
            Err(IdleError::Open { path: p, .. }) => assert_eq!(p, path),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("held a request on a missing device"),
        }
        assert!(matches!(
            LatencyHold::hold(&path, u32::MAX),
            Err(IdleError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_request_is_written_as_a_native_s32() {
        // A regular file stands in for the device: the bytes written are what the kernel reads.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qos");
        std::fs::write(&path, b"").unwrap();
        let hold = LatencyHold::hold(&path, 20).unwrap();
        assert_eq!(hold.us, 20);
        assert_eq!(std::fs::read(&path).unwrap(), 20i32.to_ne_bytes());
    }
}
