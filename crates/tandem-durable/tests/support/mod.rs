//! A redis-server that a test starts on a free loopback port and kills on drop. Tests never
//! use a server that was already running.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;

/// One redis-server child process with its own data directory.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    aof: bool,
}

impl RedisServer {
    /// A server without persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(false)
    }

    /// A server with `appendonly yes` (fsync every second) in its own directory.
    pub fn start_with_aof() -> RedisServer {
        RedisServer::start_with(true)
    }

    fn start_with(aof: bool) -> RedisServer {
        let mut dir = tempfile::tempdir().expect("temporary directory for redis-server");
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer {
                child: None,
                port,
                dir,
                aof,
            };
            if server.spawn() {
                return server;
            }
            dir = server.take_dir();
        }
        panic!("redis-server did not start on a free port after 5 tries");
    }

    fn take_dir(mut self) -> TempDir {
        self.kill();
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL the server (no shutdown save) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (loading its AOF, if any).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..20 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    /// Spawns and waits until PING answers; false if the process exited (port taken).
    fn spawn(&mut self) -> bool {
        let dir: &Path = self.dir.path();
        let log = dir.join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", if self.aof { "yes" } else { "no" }])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => panic!(
                "cannot run redis-server ({e}); install it with `apt-get install -y redis-server`"
            ),
        };
        for _ in 0..400 {
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// True when a server on `port` answers PING with PONG (and is done loading).
fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}
