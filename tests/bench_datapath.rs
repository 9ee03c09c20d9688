//! `tandem bench datapath --quick` as a real process: the JSON parses, every case of the quick
//! sweep is there with figures from real agents, and every loaded byte was verified. No time
//! is asserted (speed is what the benchmark prints, against its baselines).

use std::collections::BTreeSet;

use tandem_tests::tandem;

/// The quick sweep: ranks × shard bytes × blocks per task × tier.
fn expected() -> BTreeSet<(u64, u64, u64, String)> {
    let mut cases = BTreeSet::new();
    for ranks in [1, 2] {
        for (shard, multi) in [(64u64 << 10, 64u64), (1 << 20, 16), (8 << 20, 2)] {
            for blocks in [1, multi] {
                for tier in ["host", "disk"] {
                    cases.insert((ranks, shard, blocks, tier.to_string()));
                }
            }
        }
    }
    cases
}

#[test]
fn quick_datapath_has_every_case_with_verified_bytes() {
    let plot = tempfile::Builder::new().suffix(".svg").tempfile().unwrap();
    let run = || {
        let out = tandem()
            .args(["bench", "datapath", "--quick", "--json", "--plot"])
            .arg(plot.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "bench failed:\n{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout))
        });
        (v, stderr)
    };
    // A missing case is a failure: the one that went missing in CI (a follower engine welcomed
    // past frames its rank had not acknowledged, docs/BENCHMARKS.md) is fixed, and the report
    // of a case that fails says where every engine and agent stood.
    let (v, stderr) = run();
    // Every run says which CPU idle policy it measured under; without --cpu-latency-us it
    // holds no PM QoS request.
    let idle = &v["machine"]["cpu_idle"];
    assert!(idle["states"].is_array(), "{idle}");
    assert!(idle["pm_qos_us"].is_null(), "{idle}");
    let d = &v["datapath"];
    assert_eq!(d["not_measured"], serde_json::json!([]), "{stderr}");
    let rows = d["rows"].as_array().expect("rows");
    let mut seen = BTreeSet::new();
    for r in rows {
        let key = (
            r["ranks"].as_u64().unwrap(),
            r["shard_bytes"].as_u64().unwrap(),
            r["blocks_per_task"].as_u64().unwrap(),
            r["tier"].as_str().unwrap().to_string(),
        );
        let f = &r["figures"];
        let w = r["working_set_blocks"].as_u64().unwrap();
        assert_eq!(f["verified_blocks"].as_u64(), Some(w * key.0), "{key:?}");
        for phase in ["store", "load"] {
            assert_eq!(
                f[phase]["tasks"].as_u64(),
                Some(w / key.2),
                "{key:?} {phase}"
            );
            assert!(
                f[phase]["gbps_per_rank"].as_f64().unwrap() > 0.0,
                "{key:?} {phase}"
            );
            assert!(
                f[phase]["task_us"]["p50"].as_f64().unwrap() > 0.0,
                "{key:?} {phase}"
            );
        }
        for floor in ["store_gbps", "load_gbps"] {
            assert!(r["floor"][floor].as_f64().unwrap() > 0.0, "{key:?} {floor}");
        }
        // The concurrent floor (one memcpy per rank at once for a host row, one pwrite/pread
        // loop per rank for a disk row) sits beside every row, with its ratios; at one rank
        // it is the floor itself.
        let concurrent = &r["floor_concurrent"];
        for (floor, ratio) in [
            ("store_gbps", "store_ratio_concurrent"),
            ("load_gbps", "load_ratio_concurrent"),
        ] {
            assert!(concurrent[floor].as_f64().unwrap() > 0.0, "{key:?} {floor}");
            assert!(r[ratio].as_f64().unwrap() > 0.0, "{key:?} {ratio}");
        }
        if key.0 == 1 {
            assert_eq!(concurrent, &r["floor"], "{key:?}: one rank, one copy");
        }
        for l in ["control_us", "lookup_1_us", "lookup_128_us"] {
            assert!(f[l]["n"].as_u64().unwrap() > 0, "{key:?} {l}");
        }
        assert!(seen.insert(key.clone()), "{key:?} twice");
    }
    assert_eq!(seen, expected());
    let svg = std::fs::read_to_string(plot.path()).unwrap();
    assert!(svg.contains("<svg"), "the plot is not an SVG");
}
