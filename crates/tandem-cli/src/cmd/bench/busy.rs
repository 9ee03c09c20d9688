//! The machine's CPU time over a timed part of a benchmark, per step: what every process on
//! the machine spent on all CPUs together, from the kernel's aggregate `cpu` line of
//! `/proc/stat` (user, nice, system, irq and softirq time; idle, iowait and steal are not
//! busy; guest time is already inside user).
//!
//! It explains latency figures on a small machine: when the N processes of a step share fewer
//! than N CPUs, a step cannot be shorter than its CPU time divided by the CPUs, whatever its
//! critical path. Owns the reading and the arithmetic; it measures the whole machine (other
//! processes included) and never attributes time to a process.

use std::time::Duration;

/// Busy time of all CPUs together since boot, as the kernel counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Busy(Duration);

impl Busy {
    /// Now, or `None` where `/proc/stat` cannot be read or parsed (not Linux).
    pub(super) fn now() -> Option<Busy> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        // SAFETY: sysconf has no preconditions; it reads a constant of the running system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        parse(&text, u64::try_from(hz).ok()?)
    }

    /// µs of busy time per step between `self` and `later`, over `steps` steps (`None` for
    /// no step or a clock that went back).
    pub(super) fn per_step_us(self, later: Busy, steps: usize) -> Option<f64> {
        let spent = later.0.checked_sub(self.0)?;
        (steps > 0).then(|| spent.as_secs_f64() * 1e6 / steps as f64)
    }
}

/// A baseline's timed rounds and the machine's CPU time per round over them.
#[derive(Clone, Debug)]
pub(super) struct Timed {
    /// µs of each timed round.
    pub samples_us: Vec<f64>,
    /// µs of busy CPU time (all CPUs, all processes) per timed round, when readable.
    pub cpu_us_per_step: Option<f64>,
}

/// µs per step between two optional readings (`None` when either is missing).
pub(super) fn per_step_us(before: Option<Busy>, after: Option<Busy>, steps: usize) -> Option<f64> {
    before?.per_step_us(after?, steps)
}

/// The busy time of `/proc/stat`'s first line (`cpu  user nice system idle iowait irq softirq
/// steal ...`, in ticks of `hz` per second).
fn parse(text: &str, hz: u64) -> Option<Busy> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if ticks.len() < 7 || hz == 0 {
        return None;
    }
    let busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6];
    Some(Busy(Duration::from_secs_f64(busy as f64 / hz as f64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_nice_system_irq_softirq_are_busy_idle_iowait_steal_are_not() {
        let text = "cpu  100 20 30 5000 40 5 7 900 0 0\ncpu0 50 10 15 2500 20 2 3 450 0 0\n";
        let busy = parse(text, 100).expect("parses");
        assert_eq!(busy, Busy(Duration::from_millis(1620)));
    }

    #[test]
    fn a_line_that_is_not_the_aggregate_or_is_short_is_refused() {
        assert_eq!(parse("cpu0 1 2 3 4 5 6 7\n", 100), None);
        assert_eq!(parse("cpu  1 2 3\n", 100), None);
        assert_eq!(parse("cpu  1 2 x 4 5 6 7\n", 100), None);
        assert_eq!(parse("cpu  1 2 3 4 5 6 7\n", 0), None);
    }

    #[test]
    fn per_step_divides_the_time_between_two_readings() {
        let (a, b) = (
            Busy(Duration::from_millis(10)),
            Busy(Duration::from_millis(30)),
        );
        assert_eq!(a.per_step_us(b, 4), Some(5_000.0));
        assert_eq!(b.per_step_us(a, 4), None, "a clock that went back");
        assert_eq!(a.per_step_us(b, 0), None);
        assert_eq!(per_step_us(None, Some(b), 4), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_reports_busy_time_that_only_grows() {
        let first = Busy::now().expect("/proc/stat readable on Linux");
        let spin = std::time::Instant::now();
        // Six clock ticks of this thread's own busy time at the usual 100 Hz.
        while spin.elapsed() < Duration::from_millis(60) {
            std::hint::spin_loop();
        }
        let second = Busy::now().expect("a second reading");
        assert!(second.0 > first.0, "{second:?} after {first:?}");
    }
}
