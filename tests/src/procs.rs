//! Processes seen through `/proc`: signals to the processes a test started, their state,
//! parent and command line, the `tandem` processes of a configuration, resident memory, the
//! TCP ports a process listens on, and waiting for a child's exit.
//!
//! It only ever signals processes the test started itself (directly or through a `tandem`
//! command it ran), found by pid or by a command line naming the test's own files.

use std::collections::BTreeSet;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Send `sig` to `pid` (a process this test started, directly or through `tandem`).
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with a pid of a process the test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// `pid`'s command line, one string per argument (empty when it is gone).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// True while `pid` exists and is neither a zombie nor dead.
pub fn alive(pid: u32) -> bool {
    !matches!(state(pid), None | Some('Z') | Some('X'))
}

/// `pid`'s parent process id.
pub fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Live processes whose command line is `tandem <args...>` with every one of `args`: pid and
/// command line.
pub fn tandem_processes(args: &[&str]) -> Vec<(u32, Vec<String>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cl = cmdline(pid);
        if cl.first().is_some_and(|b| b.ends_with("tandem"))
            && args.iter().all(|a| cl.iter().any(|x| x == a))
            && alive(pid)
        {
            out.push((pid, cl));
        }
    }
    out
}

/// `pid`'s resident memory, KiB (0 when it is gone).
pub fn pid_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `(address, port)` of every TCP socket `pid` listens on, from `/proc/net/tcp{,6}`.
pub fn listening(pid: u32) -> Vec<(String, u16)> {
    let mut inodes = BTreeSet::new();
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|x| x.strip_suffix(']')) {
                    inodes.insert(inode.to_string());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                continue;
            }
            let (addr, port) = f[1].split_once(':').expect("addr:port");
            let port = u16::from_str_radix(port, 16).expect("port");
            out.push((decode_addr(addr, v6), port));
        }
    }
    out
}

/// `/proc/net/tcp` addresses: IPv4 as one little-endian u32, IPv6 as four of them.
fn decode_addr(hex: &str, v6: bool) -> String {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).expect("hex"))
        .collect();
    if !v6 {
        return std::net::Ipv4Addr::from(words[0].to_le_bytes()).to_string();
    }
    let mut bytes = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    std::net::Ipv6Addr::from(bytes).to_string()
}

/// True for a loopback address (`127.0.0.0/8`, `::1`).
pub fn is_loopback(addr: &str) -> bool {
    addr.parse::<std::net::IpAddr>()
        .is_ok_and(|a| a.is_loopback())
}

/// Wait for `child` to exit within `timeout`; its status, `None` if it still runs.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_addresses_decode() {
        assert_eq!(decode_addr("0100007F", false), "127.0.0.1");
        assert_eq!(decode_addr("00000000000000000000000001000000", true), "::1");
        assert!(is_loopback("127.0.0.1") && is_loopback("::1") && !is_loopback("0.0.0.0"));
        let me = std::process::id();
        assert!(alive(me));
        assert!(parent(me).is_some());
        assert!(pid_rss_kib(me) > 0);
    }
}
