//! The tier benchmark's report as a text table: GB/s per shard size with the ratio to its
//! baseline, then the O_DIRECT figures or why they are missing.

use super::TierBenchReport;

impl std::fmt::Display for TierBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "tiers: GB/s over {} MiB per figure in {} MiB bursts alternating with the baseline, pools of {} MiB{}",
            self.bytes_per_figure >> 20,
            self.burst_bytes >> 20,
            self.pool_bytes >> 20,
            if self.quick { " (quick)" } else { "" }
        )?;
        writeln!(
            f,
            "{:>6} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5}",
            "shard",
            "memcpy",
            "host-w",
            "×",
            "memcpy",
            "host-r",
            "×",
            "pwrite",
            "disk-w",
            "×",
            "pread",
            "disk-r",
            "×"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>6} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2}",
                size_label(r.shard_bytes),
                r.memcpy_store_gbps,
                r.host_store_gbps,
                r.host_store_ratio,
                r.memcpy_load_gbps,
                r.host_load_gbps,
                r.host_load_ratio,
                r.pwrite_gbps,
                r.disk_store_gbps,
                r.disk_store_ratio,
                r.pread_gbps,
                r.disk_load_gbps,
                r.disk_load_ratio
            )?;
        }
        match &self.direct_unsupported {
            Some(why) => writeln!(f, "O_DIRECT: not measured ({why})"),
            None => {
                writeln!(
                    f,
                    "O_DIRECT (GB/s; × is against the buffered baseline above)"
                )?;
                writeln!(
                    f,
                    "{:>6} | {:>6} {:>6} {:>5} | {:>6} {:>6} {:>5}",
                    "shard", "pwrite", "disk-w", "×", "pread", "disk-r", "×"
                )?;
                for r in &self.rows {
                    if let Some(d) = &r.direct {
                        writeln!(
                            f,
                            "{:>6} | {:>6.2} {:>6.2} {:>5.2} | {:>6.2} {:>6.2} {:>5.2}",
                            size_label(r.shard_bytes),
                            d.pwrite_gbps,
                            d.disk_store_gbps,
                            d.disk_store_gbps / r.pwrite_gbps.max(f64::MIN_POSITIVE),
                            d.pread_gbps,
                            d.disk_load_gbps,
                            d.disk_load_gbps / r.pread_gbps.max(f64::MIN_POSITIVE)
                        )?;
                    }
                }
                Ok(())
            }
        }
    }
}

pub(super) fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}
