//! `tandem replay --json` on the first 300 requests of each Mooncake trace, on a local
//! cluster the command starts itself (its own redis-server, supervisor and agents), with and
//! without chaos (`--chaos kill-agent:1.5`, SIGKILL to a random agent every 1.5 s).
//!
//! Every run must end with no verify failure, no lost or duplicate completion and no mismatch.
//! Without chaos the observed token prefix-hit ratio equals the simulator's (unlimited
//! capacity, arrival order); with chaos the group went through at least one restart.
//!
//! The chaos runs follow the trace's timestamps 20 times faster than recorded (`--speed 20`:
//! about 4 to 5 s for 300 requests). At full rate the 300 requests finish in about 1.2 s,
//! before the first kill at 1.5 s, and the chaos would test nothing.
//!
//! The traces are the ones the repository ships, gzip-compressed, in `data/traces/`
//! (`$TANDEM_TRACE_DIR` overrides the directory). The runs share the machine's cores, so they run one at
//! a time.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tandem_tests::traces::mooncake_trace;
use tandem_tests::{serial, tandem, ChildGuard};

/// Longest a 300-request replay may take, chaos included.
const RUN_DEADLINE: Duration = Duration::from_secs(240);

/// What one `tandem replay` run printed and how it ended.
struct Run {
    json: serde_json::Value,
    success: bool,
    stderr: String,
    seconds: f64,
}

/// Run `tandem replay --trace <name> --limit 300 --json` plus `extra`, bounded by
/// [`RUN_DEADLINE`].
fn replay(name: &str, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut cmd = tandem();
    cmd.arg("replay")
        .arg("--trace")
        .arg(mooncake_trace(name))
        .args(["--limit", "300", "--json"])
        .args(extra);
    // The command starts its own redis-server unless REDIS_URL names one: the test never
    // uses a server it did not start.
    cmd.env_remove("REDIS_URL");
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"));
    let start = Instant::now();
    let mut child = ChildGuard(cmd.spawn().expect("spawn tandem replay"));
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait for tandem replay") {
            break status;
        }
        if start.elapsed() > RUN_DEADLINE {
            // SIGTERM first, so the command stops its cluster; the guard kills what remains.
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(5));
            drop(child);
            panic!(
                "tandem replay {name} {extra:?} did not end within {RUN_DEADLINE:?}; stderr:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let seconds = start.elapsed().as_secs_f64();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let json = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok().filter(serde_json::Value::is_object))
        .unwrap_or_else(|| panic!("tandem replay {name} {extra:?} printed no JSON object ({status}); stdout:\n{stdout}\nstderr:\n{stderr}"));
    eprintln!("replay {name} {extra:?}: {seconds:.1} s, {status}");
    Run {
        json,
        success: status.success(),
        stderr,
        seconds,
    }
}

fn field(run: &Run, key: &str) -> u64 {
    run.json[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is a number in {}", run.json))
}

/// The run verified every byte and every completion was delivered exactly once.
fn assert_clean(run: &Run) {
    for key in [
        "verify_failures",
        "lost_completions",
        "duplicate_completions",
        "mismatches",
    ] {
        assert_eq!(
            field(run, key),
            0,
            "{key} must be 0 in {}\nstderr:\n{}",
            run.json,
            run.stderr
        );
    }
    assert_eq!(
        field(run, "requests"),
        300,
        "every request completed: {}",
        run.json
    );
    assert!(
        run.success,
        "tandem replay exited with an error:\n{}",
        run.stderr
    );
}

fn without_chaos(name: &str) {
    let _serial = serial();
    let run = replay(name, &[]);
    assert_clean(&run);
    let observed = run.json["token_prefix_hit_ratio"]
        .as_f64()
        .expect("token_prefix_hit_ratio");
    let expected = run.json["expected_token_prefix_hit_ratio"]
        .as_f64()
        .expect("expected_token_prefix_hit_ratio");
    assert_eq!(
        observed, expected,
        "with unlimited capacity and no failure the cluster's hits are the simulator's: {}",
        run.json
    );
    assert_eq!(
        field(&run, "epochs"),
        1,
        "no restart without chaos: {}",
        run.json
    );
    assert_eq!(
        field(&run, "restarts"),
        0,
        "no restart without chaos: {}",
        run.json
    );
    eprintln!(
        "replay {name}: token prefix-hit ratio {observed:.4} ({:.1} s)",
        run.seconds
    );
}

fn with_chaos(name: &str) {
    let _serial = serial();
    let run = replay(name, &["--speed", "20", "--chaos", "kill-agent:1.5"]);
    assert_clean(&run);
    assert!(
        field(&run, "agents_killed") >= 1,
        "chaos killed an agent: {}",
        run.json
    );
    assert!(
        field(&run, "epochs") >= 2,
        "the kills moved the group to new epochs: {}",
        run.json
    );
    assert!(
        field(&run, "restarts") >= 1,
        "the group restarted: {}",
        run.json
    );
    eprintln!(
        "replay {name} with chaos: {} agents killed, {} restarts, recovery_ms_mean {} ({:.1} s)",
        field(&run, "agents_killed"),
        field(&run, "restarts"),
        run.json["recovery_ms_mean"],
        run.seconds
    );
}

/// A damaged gzip trace is refused before any cluster starts, with the typed error's message
/// (line number and the decoder's finding), and exit code 1.
#[test]
fn replay_refuses_a_corrupt_gzip_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = std::fs::read(mooncake_trace("synthetic")).expect("read the shipped trace");
    // Cut the file in half: the gzip stream ends before its trailer.
    bytes.truncate(bytes.len() / 2);
    let path = dir.path().join("cut.jsonl.gz");
    std::fs::write(&path, &bytes).expect("write the cut trace");
    let out = tandem()
        .arg("replay")
        .arg("--trace")
        .arg(&path)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run tandem replay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("corrupt gzip trace at line") && stderr.contains("ends early"),
        "{stderr}"
    );
}

#[test]
fn replay_conversation_trace() {
    without_chaos("conversation");
}

#[test]
fn replay_synthetic_trace() {
    without_chaos("synthetic");
}

#[test]
fn replay_conversation_trace_with_chaos() {
    with_chaos("conversation");
}

#[test]
fn replay_synthetic_trace_with_chaos() {
    with_chaos("synthetic");
}
