//! One shutdown mechanism, seen from outside: SIGTERM, caught only at the binary's edge, ends
//! `tandem supervisor`, `tandem agent` and `tandem up` cleanly (exit 0) in every wait,
//! start-up retry loops included, and `tandem up` leaves no process of its cluster behind.
//! Real processes, a real `redis-server` (started by `tandem up` itself), real signals.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tandem_tests::cluster::{Group, GroupSpec};
use tandem_tests::{free_port, ChildGuard};

/// Longest a clean stop may take: `tandem up` gives its supervisor 15 s, which gives its
/// agents 10 s; a healthy stop takes well under a second.
const STOP_DEADLINE: Duration = Duration::from_secs(30);

/// The `tandem` binary of this build, without the `TANDEM__*` variables of the test's own
/// environment.
fn tandem() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tandem"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TANDEM__") {
            cmd.env_remove(k);
        }
    }
    cmd.stdin(Stdio::null());
    cmd
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on a child this test spawned and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Waits until the file at `path` contains `needle`; its text.
fn wait_for_text(path: &Path, needle: &str, timeout: Duration) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            start.elapsed() < timeout,
            "{needle:?} not in {} within {timeout:?}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A group configuration whose Redis URL points at a port nothing listens on.
fn group_without_redis() -> Group {
    let spec = GroupSpec {
        redis_url: format!("redis://127.0.0.1:{}", free_port()),
        ..GroupSpec::new(1, 2)
    };
    Group::configure(&spec)
}

/// `args` run until they log `waiting`, then SIGTERM: exit 0 within a few seconds.
fn stops_while_waiting(args: &[&str], waiting: &str) {
    let group = group_without_redis();
    let log = group.dir.path().join("process.log");
    let mut child = ChildGuard(
        tandem()
            .args(args)
            .arg("--config")
            .arg(&group.config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn tandem"),
    );
    wait_for_text(&log, waiting, Duration::from_secs(20));
    // Well inside a retry pause, so the stop must come through the token, not a loop turn.
    std::thread::sleep(Duration::from_millis(700));
    let asked = Instant::now();
    sigterm(&child.0);
    let status = wait_exit(&mut child.0, Duration::from_secs(5));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{args:?} ended cleanly on SIGTERM while waiting; log:\n{text}"
    );
    assert!(text.contains("SIGTERM: stopping"), "{text}");
    eprintln!("{args:?}: stopped {:?} after SIGTERM", asked.elapsed());
}

#[test]
fn the_supervisor_stops_on_sigterm_while_redis_is_unreachable() {
    stops_while_waiting(&["supervisor"], "Redis unreachable; retrying");
}

#[test]
fn an_agent_stops_on_sigterm_while_redis_is_unreachable() {
    stops_while_waiting(&["agent", "--rank", "1"], "Redis unreachable; retrying");
}

/// Every process below `root` (children, grandchildren...), from `/proc`.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut found: Vec<u32> = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found
        .into_iter()
        .skip(1)
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            (pid, cmd)
        })
        .collect()
}

/// True while `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state != "Z")
}

/// `tandem up --ranks 2` until `ready_for_sigterm` says so, then SIGTERM: exit 0, and every
/// process it started (redis-server, the supervisor, the agents) is gone.
fn tandem_up_stops_cleanly(ready_for_sigterm: impl Fn(&Path, &[(u32, String)]) -> bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = ChildGuard(
        tandem()
            .args(["up", "--ranks", "2"])
            .env_remove("REDIS_URL")
            .stdout(std::fs::File::create(&out).expect("stdout"))
            .stderr(std::fs::File::create(&err).expect("stderr"))
            .spawn()
            .expect("spawn tandem up"),
    );
    let start = Instant::now();
    let started = loop {
        let below = descendants(child.0.id());
        if ready_for_sigterm(&out, &below) {
            break below;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "tandem up exited early ({status}):\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "tandem up not at the point to stop within 60 s:\n{}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    sigterm(&child.0);
    let status = wait_exit(&mut child.0, STOP_DEADLINE);
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "tandem up ended cleanly on SIGTERM; stderr:\n{stderr}"
    );
    let left: Vec<&(u32, String)> = started.iter().filter(|(pid, _)| alive(*pid)).collect();
    assert!(
        left.is_empty(),
        "processes of the cluster left running: {left:?}"
    );
    eprintln!(
        "tandem up stopped; it had started {} processes: {:?}",
        started.len(),
        started.iter().map(|(_, c)| c.as_str()).collect::<Vec<_>>()
    );
}

#[test]
fn tandem_up_stops_on_sigterm_during_its_start_up() {
    // As soon as the supervisor runs: the group is not ready yet.
    tandem_up_stops_cleanly(|_, below| below.iter().any(|(_, c)| c.contains(" supervisor ")));
}

#[test]
fn tandem_up_stops_on_sigterm_once_up() {
    tandem_up_stops_cleanly(|out, below| {
        std::fs::read_to_string(out).is_ok_and(|t| t.contains("tandem is up"))
            && below.iter().filter(|(_, c)| c.contains(" agent ")).count() == 2
    });
}
