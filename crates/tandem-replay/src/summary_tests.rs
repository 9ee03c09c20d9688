use super::*;
use crate::ledger::{LedgerReport, LedgerTally};
use crate::scheduler::SchedStats;
use tandem_trace::{HitTotals, RequestHits};

fn engine(
    rank: u32,
    frames: &[((u64, u64), u64)],
    epochs: &[u64],
    recoveries: &[f64],
) -> EngineReport {
    EngineReport {
        rank,
        ledger: LedgerReport {
            frames: frames.iter().copied().collect(),
            tally: LedgerTally {
                duplicate_completions: 1,
                lost_completions: 2,
                reread_mismatches: 1,
                ..LedgerTally::default()
            },
            lost_samples: vec![
                "task 1.4 (store of request 2, 1 blocks): no outcome by the end of the run".into(),
            ],
        },
        verify_failures: u64::from(rank),
        verify_samples: vec![format!("rank {rank}: bad")],
        blocks_verified: 10,
        recoveries_ms: recoveries.to_vec(),
        epochs: epochs.iter().copied().collect(),
    }
}

fn leader() -> LeaderReport {
    let mut observed = HitTotals::default();
    observed.add(RequestHits {
        hit_blocks: 1,
        blocks: 2,
        hit_tokens: 512,
        input_tokens: 800,
    });
    let mut expected = HitTotals::default();
    expected.add(RequestHits {
        hit_blocks: 2,
        blocks: 2,
        hit_tokens: 800,
        input_tokens: 800,
    });
    LeaderReport {
        engine: engine(0, &[((1, 0), 7), ((1, 1), 8)], &[1, 2], &[100.0]),
        observed,
        expected,
        sched: SchedStats {
            blocks_stored: 3,
            blocks_loaded: 1,
            loads_failed: 1,
            ..SchedStats::default()
        },
        steps: 2,
        step_latency_us: vec![10, 30, 20],
        content_mismatches: 1,
        mismatch_samples: vec![
            "frame 1 of epoch 1: task 1.9, started in this step, is missing".into(),
        ],
        shard_bytes: 1024,
    }
}

#[test]
fn json_has_every_key_the_issue_names() {
    let followers = vec![engine(1, &[((1, 0), 7), ((1, 1), 9)], &[1, 3], &[200.0])];
    let summary = ReplaySummary::build(&leader(), &followers, Capacity::Unlimited, 1.5);
    let json: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
    for key in [
        "requests",
        "steps",
        "blocks_stored",
        "blocks_loaded",
        "bytes_stored",
        "bytes_loaded",
        "token_prefix_hit_ratio",
        "block_prefix_hit_ratio",
        "expected_token_prefix_hit_ratio",
        "expected_block_prefix_hit_ratio",
        "expected_capacity_blocks",
        "verify_failures",
        "lost_completions",
        "duplicate_completions",
        "mismatches",
        "epochs",
        "restarts",
        "recovery_ms_mean",
        "wall_seconds",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    for key in ["p50", "p99", "max"] {
        assert!(
            json["step_latency_us"].get(key).is_some(),
            "missing step_latency_us.{key}"
        );
    }
    assert_eq!(json["expected_capacity_blocks"], serde_json::Value::Null);
    assert_eq!(json["step_latency_us"]["p50"], 20);
}

#[test]
fn figures_are_summed_over_ranks_and_defined_as_documented() {
    let followers = vec![
        engine(1, &[((1, 0), 7), ((1, 1), 9)], &[1, 3], &[200.0]),
        engine(2, &[((1, 1), 9)], &[1], &[]),
    ];
    let s = ReplaySummary::build(&leader(), &followers, Capacity::Blocks(64), 2.0);
    assert_eq!(s.ranks, 3);
    assert_eq!(s.requests, 1);
    assert_eq!(s.bytes_stored, 3 * 1024 * 3);
    assert_eq!(s.bytes_loaded, 1024 * 3);
    assert_eq!(
        (s.token_prefix_hit_ratio, s.block_prefix_hit_ratio),
        (512.0 / 800.0, 0.5)
    );
    assert_eq!(
        (
            s.expected_token_prefix_hit_ratio,
            s.expected_block_prefix_hit_ratio
        ),
        (1.0, 1.0)
    );
    assert_eq!(s.expected_capacity_blocks, Some(64));
    assert_eq!(s.verify_failures, 3);
    assert_eq!(s.lost_completions, 6);
    assert_eq!(s.duplicate_completions, 3);
    assert_eq!(
        s.mismatch_detail,
        MismatchDetail {
            cross_rank: 2,
            reread: 3,
            content: 1
        }
    );
    assert_eq!(s.mismatches, 6);
    assert_eq!((s.epochs, s.restarts), (3, 2));
    assert_eq!(
        (s.recovery_ms_mean, s.recovery_ms_max),
        (Some(150.0), Some(200.0))
    );
    assert_eq!(s.blocks_verified, 30);
    assert_eq!(s.verify_failure_samples.len(), 3);
    let table = s.to_string();
    assert!(
        table.starts_with("tandem replay: 1 requests, 3 ranks, 2.0 s\n"),
        "{table}"
    );
    assert!(
        table.contains("  token prefix hit ratio            0.6400   (expected 1.0000)\n"),
        "{table}"
    );
    assert!(
        table.contains("mismatches                     6 (cross-rank 2, re-read 3, content 1)"),
        "{table}"
    );
    assert!(
        table.contains("recovery mean / max            150.0 ms / 200.0 ms"),
        "{table}"
    );
    assert!(table.contains("  ! rank 1: bad\n"), "{table}");
    assert_eq!(s.lost_completion_samples.len(), 3);
    assert_eq!(
        s.mismatch_samples,
        vec![
            "frame 1 of epoch 1: task 1.9, started in this step, is missing".to_string(),
            "frame 1 of epoch 1: rank 1 read a different frame than rank 0".to_string(),
            "frame 1 of epoch 1: rank 2 read a different frame than rank 0".to_string(),
        ]
    );
    assert!(
        table.contains("  ~ frame 1 of epoch 1: rank 2 read a different frame than rank 0\n"),
        "{table}"
    );
    assert!(table.contains("  ? rank 2: task 1.4 (store of request 2, 1 blocks): no outcome by the end of the run\n"), "{table}");
}

#[test]
fn latency_percentiles_are_nearest_rank() {
    assert_eq!(LatencySummary::of(&[]), LatencySummary::default());
    let samples: Vec<u64> = (1..=100).rev().collect();
    assert_eq!(
        LatencySummary::of(&samples),
        LatencySummary {
            p50: 50,
            p99: 99,
            max: 100
        }
    );
    assert_eq!(
        LatencySummary::of(&[7]),
        LatencySummary {
            p50: 7,
            p99: 7,
            max: 7
        }
    );
}

#[test]
fn a_quiet_run_has_no_recovery_figures() {
    let mut l = leader();
    l.engine.recoveries_ms.clear();
    let s = ReplaySummary::build(&l, &[], Capacity::Unlimited, 0.1);
    assert_eq!(s.recovery_ms_mean, None);
    assert!(
        s.to_string()
            .contains("recovery mean / max                - / -"),
        "{s}"
    );
}
