//! What a Redis server reports about its load: commands by name (`INFO commandstats`), a
//! stream's length and memory (`XLEN`, `MEMORY USAGE`), and raising this process's
//! open-file limit for many connections.
//!
//! Owns these reads; it never writes a key (`CONFIG RESETSTAT` only clears counters).
//! Used on the benchmark's own `redis-server` only.

use std::collections::BTreeMap;

/// Calls per command name since the last reset (`INFO commandstats`: `cmdstat_xadd` →
/// `xadd`).
///
/// # Errors
/// The client's error, as text.
pub fn command_calls(url: &str) -> Result<BTreeMap<String, u64>, String> {
    let info: String = query(url, redis::cmd("INFO").arg("commandstats"))?;
    Ok(info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect())
}

/// Clears the server's command counters (`CONFIG RESETSTAT`).
///
/// # Errors
/// The client's error, as text.
pub fn reset_stats(url: &str) -> Result<(), String> {
    query(url, redis::cmd("CONFIG").arg("RESETSTAT"))
}

/// Entries in stream `key` and the bytes Redis uses for it (`XLEN`, `MEMORY USAGE ... SAMPLES
/// 0`, every node counted).
///
/// # Errors
/// The client's error, as text.
pub fn stream_size(url: &str, key: &str) -> Result<(u64, u64), String> {
    let len: u64 = query(url, redis::cmd("XLEN").arg(key))?;
    let bytes: Option<u64> = query(
        url,
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0),
    )?;
    Ok((len, bytes.unwrap_or(0)))
}

/// The keys matching `pattern` (`KEYS`: for the benchmark's own server only, never a shared
/// one).
///
/// # Errors
/// The client's error, as text.
pub fn keys(url: &str, pattern: &str) -> Result<Vec<String>, String> {
    query(url, redis::cmd("KEYS").arg(pattern))
}

fn query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> Result<T, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client.get_connection().map_err(|e| e.to_string())?;
    cmd.query(&mut conn).map_err(|e| e.to_string())
}

/// Raises this process's soft open-file limit to its hard limit (many groups hold many
/// connections); the limit now.
pub fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
    limit.rlim_cur
}
