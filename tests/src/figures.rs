//! Sizes the fault and bad-input tests read from the environment, their seeded random source,
//! and the `FIGURE` lines `scripts/fault-suite.sh` collects for docs/RELIABILITY.md.
//!
//! It owns no check: a test decides what to assert; this module only sizes runs and prints.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::engines::Rng;

/// `key` parsed as a number, or `default` when it is unset or not a number.
pub fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Faults per fault test (`TANDEM_FAULT_ROUNDS`, default 1, at least 1).
pub fn fault_rounds() -> u64 {
    env_u64("TANDEM_FAULT_ROUNDS", 1).max(1)
}

/// Requests per replay of a fault test (`TANDEM_FAULT_REQUESTS`, default 600).
pub fn fault_requests() -> usize {
    env_u64("TANDEM_FAULT_REQUESTS", 600) as usize
}

/// Random garbage connections per port of a bad-input test (`TANDEM_BAD_INPUT_ROUNDS`,
/// default 12).
pub fn bad_input_rounds() -> u64 {
    env_u64("TANDEM_BAD_INPUT_ROUNDS", 12)
}

/// A random source for fault moments: `TANDEM_FAULT_SEED` or the clock; the seed is printed
/// (`{test}: TANDEM_FAULT_SEED=...`) so that a failing run can be repeated.
pub fn seeded(test: &str) -> Rng {
    let seed = std::env::var("TANDEM_FAULT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    println!("{test}: TANDEM_FAULT_SEED={seed}");
    Rng::new(seed)
}

/// Print one line of figures for scripts/fault-suite.sh: `FIGURE fault=NAME key=value ...`
/// (whitespace inside a value becomes `_`).
pub fn figure(fault: &str, kv: &[(&str, String)]) {
    println!("\nFIGURE fault={fault} {}", figure_fields(kv));
}

fn figure_fields(kv: &[(&str, String)]) -> String {
    kv.iter()
        .map(|(k, v)| format!("{k}={}", v.replace(char::is_whitespace, "_")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `what=kind` counts in one token, e.g. `leader_store=stale:1,follower_frame=not_ready:3`.
pub fn summarize(seen: &[String]) -> String {
    let mut counts: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    for s in seen {
        *counts.entry(s.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{}:{n}", k.replace(' ', "_")))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_summaries_are_single_tokens() {
        assert_eq!(
            figure_fields(&[("a", "1 2".into()), ("b", "x".into())]),
            "a=1_2 b=x"
        );
        let seen = ["leader store=stale", "leader store=stale", "frame=ok"].map(String::from);
        assert_eq!(summarize(&seen), "frame=ok:1,leader_store=stale:2");
    }
}
