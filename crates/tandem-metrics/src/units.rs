//! Figures in the units a person reads: binary sizes (KiB, MiB, GiB), decimal rates (MB/s,
//! GB/s, as disks and links are quoted), percentages, durations in ms or s, and UTC times.
//!
//! Owns the formatting rules the status pages and `tandem status` share, so that a figure
//! reads the same in a browser and in a terminal. Never reads a clock: times are inputs.

/// `bytes` with a binary unit: `512 B`, `3.0 KiB`, `719.5 MiB`, `1.20 GiB`, `2.00 TiB`.
/// Three significant digits from KiB up.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{} {}", three_digits(value), UNITS[unit])
}

/// A rate in bytes per second with a decimal unit: `0 B/s`, `950 B/s`, `12.3 MB/s`,
/// `1.52 GB/s`. Negative or non-finite rates read `0 B/s`.
pub fn bytes_per_second(rate: f64) -> String {
    const UNITS: [&str; 5] = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    if !rate.is_finite() || rate <= 0.0 {
        return "0 B/s".into();
    }
    let mut value = rate;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{value:.0} B/s");
    }
    format!("{} {}", three_digits(value), UNITS[unit])
}

/// A ratio in `[0, 1]` as a percentage with one decimal: `0.9731` → `97.3 %`.
pub fn percent(ratio: f64) -> String {
    if !ratio.is_finite() {
        return "—".into();
    }
    format!("{:.1} %", ratio * 100.0)
}

/// A duration given in milliseconds: `0.42 ms`, `12 ms`, `950 ms`, `3.2 s`, `4 min 5 s`,
/// `2 h 3 min`.
pub fn millis(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        return "—".into();
    }
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else if ms < 3_600_000.0 {
        let s = (ms / 1000.0).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    } else {
        let m = (ms / 60_000.0).round() as u64;
        format!("{} h {} min", m / 60, m % 60)
    }
}

/// A per-second rate of plain events: `0/s`, `0.50/s`, `12.5/s`, `830/s`, `12.4k/s`.
pub fn per_second(rate: f64) -> String {
    if !rate.is_finite() || rate <= 0.0 {
        return "0/s".into();
    }
    if rate >= 10_000.0 {
        return format!("{:.1}k/s", rate / 1000.0);
    }
    if rate >= 100.0 {
        return format!("{rate:.0}/s");
    }
    if rate >= 10.0 {
        return format!("{rate:.1}/s");
    }
    format!("{rate:.2}/s")
}

/// Wall-clock milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn three_digits(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(3 * 1024), "3.00 KiB");
        // The figure the issue quotes: 754450432 bytes.
        assert_eq!(bytes(754_450_432), "720 MiB");
        assert_eq!(bytes(1_288_490_189), "1.20 GiB");
    }

    #[test]
    fn rates_use_decimal_units() {
        assert_eq!(bytes_per_second(0.0), "0 B/s");
        assert_eq!(bytes_per_second(-3.0), "0 B/s");
        assert_eq!(bytes_per_second(950.0), "950 B/s");
        assert_eq!(bytes_per_second(12_345_678.0), "12.3 MB/s");
        assert_eq!(bytes_per_second(1.52e9), "1.52 GB/s");
        assert_eq!(per_second(0.5), "0.50/s");
        assert_eq!(per_second(830.2), "830/s");
        assert_eq!(per_second(12_400.0), "12.4k/s");
    }

    #[test]
    fn durations_and_ratios() {
        assert_eq!(millis(0.42), "0.42 ms");
        assert_eq!(millis(120.4), "120 ms");
        assert_eq!(millis(3_240.0), "3.2 s");
        assert_eq!(millis(245_000.0), "4 min 5 s");
        assert_eq!(millis(7_380_000.0), "2 h 3 min");
        assert_eq!(percent(0.9731), "97.3 %");
        assert_eq!(percent(f64::NAN), "—");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        // 2024-02-29 12:34:56 UTC, a leap day.
        assert_eq!(utc(1_709_210_096_000), "2024-02-29 12:34:56 UTC");
    }
}
