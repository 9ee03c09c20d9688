//! A `redis-server` child process for the process tests: its own free loopback port, its own
//! temporary directory (append-only file included, when asked), started and stopped by the
//! test, plus a minimal RESP client to look at what the group stored.
//!
//! It never uses a server that was already running, and never talks to anything but its own
//! child. The server is killed (SIGKILL, after a SIGCONT in case a test stopped it) when the
//! helper is dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// How long a start (or a restart that loads the append-only file) may take until PING answers.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// One `redis-server` child with its own data directory.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    options: RedisOptions,
}

/// How a [`RedisServer`] is started (the default: no persistence, loopback only).
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// `appendonly yes` with `appendfsync everysec`: a restart loads what was acknowledged
    /// about a second before the kill.
    pub aof: bool,
    /// Addresses to bind, space-separated (`None`: `127.0.0.1`). With more than one, protected
    /// mode is off: clients in a test's network namespace do not come from loopback.
    pub bind: Option<String>,
    /// More arguments for `redis-server`, for example `["--requirepass", "..."]`.
    pub extra_args: Vec<String>,
}

/// A RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resp {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` bulk string; `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*n` array; `None` for the null array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The reply as text (simple and bulk strings, integers), `None` otherwise.
    pub fn text(&self) -> Option<String> {
        match self {
            Resp::Simple(s) => Some(s.clone()),
            Resp::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Resp::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }
}

impl RedisServer {
    /// A server without persistence.
    ///
    /// # Panics
    /// When `redis-server` is not installed, or does not start on a free port after 5 tries.
    pub fn start() -> Self {
        Self::start_with_options(RedisOptions::default())
    }

    /// A server with `appendonly yes` (fsync every second) in its own directory: a restart
    /// loads what was acknowledged before the kill.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_with_aof() -> Self {
        Self::start_with_options(RedisOptions {
            aof: true,
            ..RedisOptions::default()
        })
    }

    /// A server with an append-only file bound to `bind` (one or more addresses,
    /// space-separated), as the fault tests use it.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_bound(bind: &str) -> Self {
        Self::start_with_options(RedisOptions {
            aof: true,
            bind: Some(bind.to_string()),
            ..RedisOptions::default()
        })
    }

    /// A server started with `options`.
    ///
    /// # Panics
    /// As [`RedisServer::start`].
    pub fn start_with_options(options: RedisOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tandem-redis-")
            .tempdir()
            .expect("temporary directory for redis-server");
        let mut server = Self {
            child: None,
            port: 0,
            dir,
            options,
        };
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!(
            "redis-server did not start on a free port after 5 tries; its log:\n{}",
            server.log()
        );
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis://{userinfo}127.0.0.1:PORT` (`userinfo` such as `":pass@"`).
    pub fn url_with_userinfo(&self, userinfo: &str) -> String {
        format!("redis://{userinfo}127.0.0.1:{}", self.port)
    }

    /// The server's process id.
    ///
    /// # Panics
    /// When it is not running (killed and not restarted).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("redis-server runs").id()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's data directory (append-only file and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// True while the child process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// SIGKILL the server (no shutdown save: only what reached the append-only file survives)
    /// and reap it. Does nothing when it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start the server again on the same port and directory (loading its append-only file,
    /// if any), killing it first if it still runs.
    ///
    /// # Panics
    /// When it does not answer PING within 50 tries (the port was taken meanwhile).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "redis-server did not restart on port {}; its log:\n{}",
            self.port,
            self.log()
        );
    }

    /// As [`Self::restart`], with `extra_args` instead of the ones it was started with.
    ///
    /// # Panics
    /// As [`Self::restart`].
    pub fn restart_with_args(&mut self, extra_args: Vec<String>) {
        self.options.extra_args = extra_args;
        self.restart();
    }

    /// Spawn on `self.port` and wait until PING answers PONG (so the append-only file is
    /// loaded); false when the process exited first (port taken) or the deadline passed.
    fn spawn(&mut self) -> bool {
        let bind = self.options.bind.as_deref().unwrap_or("127.0.0.1");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()])
            .arg("--bind")
            .args(bind.split_whitespace());
        if bind.split_whitespace().count() > 1 {
            cmd.args(["--protected-mode", "no"]);
        }
        let child = cmd
            .args(["--save", ""])
            .args(["--appendonly", if self.options.aof { "yes" } else { "no" }])
            .args(["--appendfsync", "everysec"])
            .args(&self.options.extra_args)
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!("cannot run redis-server ({e}): install it (`apt-get install -y redis-server`; scripts/test.sh does)"),
        };
        let start = Instant::now();
        while start.elapsed() < START_DEADLINE {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            if ping(self.port) {
                self.child = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// Run one command and return its reply.
    ///
    /// # Errors
    /// The connection or protocol error, as text.
    pub fn command(&self, args: &[&str]) -> Result<Resp, String> {
        command(self.port, args)
    }

    /// `GET key` as text (`None`: no such key or Redis unreachable).
    pub fn get(&self, key: &str) -> Option<String> {
        self.command(&["GET", key]).ok().and_then(|r| r.text())
    }

    /// `HGETALL key` as a map (empty: no such key or Redis unreachable).
    pub fn hgetall(&self, key: &str) -> BTreeMap<String, String> {
        let Ok(Resp::Array(Some(items))) = self.command(&["HGETALL", key]) else {
            return BTreeMap::new();
        };
        items
            .chunks(2)
            .filter_map(|kv| Some((kv.first()?.text()?, kv.get(1)?.text()?)))
            .collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            crate::procs::signal(c.id(), libc::SIGCONT);
        }
        self.kill();
    }
}

/// Run one command against the Redis (or sentinel) on loopback port `port` and return its
/// reply (a connection of its own, a 2 s read deadline).
///
/// # Errors
/// The connection or protocol error, as text.
pub fn command(port: u16, args: &[&str]) -> Result<Resp, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect to redis on port {port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a.as_bytes());
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req)
        .map_err(|e| format!("send {args:?}: {e}"))?;
    read_reply(&mut BufReader::new(s))
}

/// True when a server on `port` answers PING with PONG (not `-LOADING`), or asks for a
/// password first (`-NOAUTH`, a server started with `--requirepass`).
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
}

/// Read one RESP reply.
fn read_reply(r: &mut impl BufRead) -> Result<Resp, String> {
    let mut line = String::new();
    r.read_line(&mut line)
        .map_err(|e| format!("read reply: {e}"))?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| format!("bad length or integer in reply line {line:?}"))
    };
    match kind {
        "+" => Ok(Resp::Simple(rest.to_string())),
        "-" => Ok(Resp::Error(rest.to_string())),
        ":" => Ok(Resp::Int(int(rest)?)),
        "$" => {
            let n = int(rest)?;
            if n < 0 {
                return Ok(Resp::Bulk(None));
            }
            let mut buf = vec![0u8; n as usize + 2];
            r.read_exact(&mut buf)
                .map_err(|e| format!("read bulk string: {e}"))?;
            buf.truncate(n as usize);
            Ok(Resp::Bulk(Some(buf)))
        }
        "*" => {
            let n = int(rest)?;
            if n < 0 {
                return Ok(Resp::Array(None));
            }
            (0..n)
                .map(|_| read_reply(r))
                .collect::<Result<Vec<_>, _>>()
                .map(|v| Resp::Array(Some(v)))
        }
        _ => Err(format!("unexpected reply line {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let mut r = std::io::Cursor::new(b"*3\r\n$5\r\nhello\r\n:7\r\n$-1\r\n".to_vec());
        let reply = read_reply(&mut r).unwrap();
        assert_eq!(
            reply,
            Resp::Array(Some(vec![
                Resp::Bulk(Some(b"hello".to_vec())),
                Resp::Int(7),
                Resp::Bulk(None)
            ]))
        );
        let mut r = std::io::Cursor::new(b"-ERR no\r\n".to_vec());
        assert_eq!(read_reply(&mut r).unwrap(), Resp::Error("ERR no".into()));
        let mut r = std::io::Cursor::new(b"?\r\n".to_vec());
        assert_eq!(
            read_reply(&mut r).unwrap_err(),
            "unexpected reply line \"?\""
        );
    }

    #[test]
    fn a_server_keeps_its_append_only_data_across_a_kill() {
        let mut redis = RedisServer::start_with_aof();
        assert_eq!(
            redis.command(&["SET", "k", "v1"]).unwrap(),
            Resp::Simple("OK".into())
        );
        assert_eq!(
            redis.command(&["HSET", "h", "a", "1", "b", "2"]).unwrap(),
            Resp::Int(2)
        );
        redis.restart();
        assert_eq!(redis.get("k").as_deref(), Some("v1"));
        assert_eq!(
            redis.hgetall("h"),
            BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "2".to_string())
            ])
        );
        assert!(redis.is_running());
        redis.kill();
        assert!(!redis.is_running());
        assert!(redis.get("k").is_none());
    }
}
