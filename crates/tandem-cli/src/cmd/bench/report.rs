//! Printing helpers of `tandem bench`: aligned text tables, pass/fail marks, and the machine
//! description that heads the JSON object. Owns formatting only; it measures nothing.

use std::time::{SystemTime, UNIX_EPOCH};

/// A text table with right-aligned columns.
pub(super) struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub(super) fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Add one row (missing cells print empty, extra cells are dropped).
    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, one line per row after the title line, two spaces between columns.
    pub(super) fn render(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([self.head[i].chars().count()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.head.len()).map(width).collect();
        let line = |cells: &[String]| {
            let parts: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let c = cells.get(i).map(String::as_str).unwrap_or("");
                    format!("{}{c}", " ".repeat(w.saturating_sub(c.chars().count())))
                })
                .collect();
            parts.join("  ") + "\n"
        };
        let mut out = line(&self.head);
        for r in &self.rows {
            out += &line(r);
        }
        out
    }
}

/// `pass` when a target is met, `FAIL` when not.
pub(super) fn mark(met: bool) -> &'static str {
    if met {
        "pass"
    } else {
        "FAIL"
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch.
pub(super) fn utc(secs: u64) -> String {
    // Days to civil date (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Where and when this run happened: date, CPUs, memory, load average, kernel, and the CPU
/// idle policy it measured under (`cpu_idle`).
pub(super) fn machine_json(quick: bool, idle: &super::idle::IdlePolicy) -> serde_json::Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mem_kib = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    serde_json::json!({
        "date": utc(now),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "memory_gib": (mem_kib as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0,
        "load_average_at_start": read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "quick": quick,
        "cpu_idle": idle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["a", "bbb"]);
        t.row(vec!["1234".into(), "5".into()]);
        assert_eq!(t.render(), "   a  bbb\n1234    5\n");
    }

    #[test]
    fn dates_and_marks() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400 + 3661), "2000-02-29 01:01:01 UTC");
        assert_eq!(mark(true), "pass");
        assert_eq!(mark(false), "FAIL");
    }
}
