//! Unix-socket proxies between engines and their agents whose connections a test can cut
//! mid-stream: an engine crash played without killing the process that holds every engine.
//!
//! It forwards bytes unchanged and never parses them; a cut closes both directions at once.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::Group;

type Pair = (u32, UnixStream, UnixStream);

/// Unix-socket proxies, one per rank, in front of the agents' engine sockets.
pub struct Proxy {
    dir: tempfile::TempDir,
    world: u32,
    live: Arc<Mutex<Vec<Pair>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listen in front of each of `g`'s engine sockets.
    pub fn start(g: &Group) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tandem-proxy-")
            .tempdir()
            .expect("tempdir");
        let live: Arc<Mutex<Vec<Pair>>> = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        for rank in 0..g.world_size {
            let listener = UnixListener::bind(dir.path().join(format!("rank{rank}.sock")))
                .expect("bind proxy");
            listener.set_nonblocking(true).expect("nonblocking");
            let (target, live, stop) = (g.socket(rank), live.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let engine = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    };
                    let _ = engine.set_nonblocking(false);
                    // No agent there (restarting): the engine sees a closed connection.
                    let Ok(agent) = UnixStream::connect(&target) else {
                        continue;
                    };
                    let (Ok(e2), Ok(a2), Ok(e3), Ok(a3)) = (
                        engine.try_clone(),
                        agent.try_clone(),
                        engine.try_clone(),
                        agent.try_clone(),
                    ) else {
                        continue;
                    };
                    if let Ok(mut l) = live.lock() {
                        l.push((rank, e3, a3));
                    }
                    pump(engine, a2);
                    pump(agent, e2);
                }
            });
        }
        Self {
            dir,
            world: g.world_size,
            live,
            stop,
        }
    }

    /// The proxy sockets engines connect to, by rank.
    pub fn sockets(&self) -> Vec<PathBuf> {
        (0..self.world)
            .map(|r| self.dir.path().join(format!("rank{r}.sock")))
            .collect()
    }

    /// Cut `rank`'s newest connection in both directions at once, mid-stream; false if it
    /// has none.
    pub fn cut(&self, rank: u32) -> bool {
        let Ok(mut l) = self.live.lock() else {
            return false;
        };
        let Some(i) = l.iter().rposition(|(r, _, _)| *r == rank) else {
            return false;
        };
        let (_, e, a) = l.remove(i);
        let _ = e.shutdown(std::net::Shutdown::Both);
        let _ = a.shutdown(std::net::Shutdown::Both);
        true
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copy `from` to `to` until either ends, then close both.
fn pump(mut from: UnixStream, mut to: UnixStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(std::net::Shutdown::Both);
        let _ = to.shutdown(std::net::Shutdown::Both);
    });
}
