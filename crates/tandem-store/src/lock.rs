//! The rank's tier lock: one process per rank's tiers at a time (README invariant 8).
//!
//! Owns [`TierLock`] and [`LockError`]. [`TierLock::acquire`] takes an exclusive `flock(2)`
//! on a lock file (`tandem.lock`) in the disk directory, in the host directory when the host
//! tier is enabled, and on every further lock file the caller names (the agent names one beside
//! its engine socket), before anything there is opened, created or unlinked; the lock is held
//! until the [`TierLock`] is dropped (the agent holds it for the process's life). A lock file
//! is never unlinked: a process that unlinked it would let a second one lock a new file of the
//! same name while the first still holds the old. The kernel releases the lock when its holder
//! dies, however it dies, so no stale lock survives a crash (only after the dead process's
//! memory is torn down: a holder that is exiting is waited for, up to 5 s, so that a rank
//! restarted right after a SIGKILL starts). A lock held by a live process is a typed
//! error naming the file and the holder's pid (each holder writes `pid N` at the start of its
//! lock files); nothing has been created, opened or changed besides the lock files and
//! directories. Acquiring starts a new incarnation of the rank's [`Fence`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::fence::{Fence, Fenced, FENCE_FILE};
use crate::store::StoreConfig;

/// The file name of the lock file inside a tier directory.
pub const LOCK_FILE: &str = "tandem.lock";

/// Bytes of the `pid N` line at the start of a lock file (padded, overwritten in place, so a
/// lock file on a full file system can still be rewritten).
const PID_LINE_BYTES: usize = 32;

/// Why the rank's tiers could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock: another agent runs for this rank (or did not stop).
    #[error("another process holds this rank's tiers: lock file {path} is held by {}", holder_text(*.pid))]
    Held {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, when it wrote one.
        pid: Option<u32>,
    },
    /// A directory or lock file could not be created, opened or locked.
    #[error("lock file {path}: {op} failed: {source}")]
    Io {
        /// The lock file (or its directory).
        path: PathBuf,
        /// What was being done (`create-dir`, `open`, `lock`, `write`).
        op: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The fence record could not be claimed.
    #[error(transparent)]
    Fence(#[from] Fenced),
}

fn holder_text(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("pid {pid}"),
        None => "a process that has not written its pid yet".into(),
    }
}

/// The held lock of one rank's tiers (see the module docs).
#[derive(Debug)]
pub struct TierLock {
    held: Vec<(PathBuf, File)>,
    fence: Fence,
}

impl TierLock {
    /// The lock files a store of `config` takes: the disk directory's, then the host
    /// directory's when the host tier is enabled and lives elsewhere.
    pub fn paths(config: &StoreConfig) -> Vec<PathBuf> {
        let mut paths = vec![config.disk_dir.join(LOCK_FILE)];
        if config.host_capacity_blocks > 0 && config.host_dir != config.disk_dir {
            paths.push(config.host_dir.join(LOCK_FILE));
        }
        paths
    }

    /// Lock the tiers of `config`, then each of `extra` (lock files beside other things this
    /// process owns for the rank, such as its engine socket), in that order, and start a new
    /// incarnation of the rank's fence. Directories are created as needed.
    ///
    /// Errors: [`LockError::Held`] naming the first lock file held elsewhere and its holder's
    /// pid; [`LockError::Io`]; [`LockError::Fence`]. Locks taken before the error are released.
    pub fn acquire(config: &StoreConfig, extra: &[PathBuf]) -> Result<TierLock, LockError> {
        let mut held = Vec::new();
        for path in TierLock::paths(config).iter().chain(extra) {
            held.push((path.clone(), lock_one(path)?));
        }
        let line = format!("pid {}", std::process::id());
        let line = format!("{line:<width$}\n", width = PID_LINE_BYTES - 1);
        for (path, file) in &held {
            file.write_all_at(line.as_bytes(), 0)
                .map_err(|source| LockError::Io {
                    path: path.clone(),
                    op: "write",
                    source,
                })?;
        }
        let fence = Fence::claim(&config.disk_dir.join(FENCE_FILE))?;
        Ok(TierLock { held, fence })
    }

    /// The fence of the incarnation this lock started.
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// The lock files held.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.held.iter().map(|(p, _)| p.as_path())
    }
}

/// How long [`lock_one`] waits for a holder that is exiting to let go: the kernel releases a
/// killed process's `flock` only once it has torn down its memory (a populated host slab
/// takes a while on a loaded machine), and a supervisor restarts a rank right after its kill.
const EXITING_HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Open (creating) and lock one lock file. A lock held by a live process is refused at once;
/// one whose holder is exiting (gone, a zombie, or in its exit) is tried again every 10 ms for
/// up to [`EXITING_HOLDER_WAIT`].
fn lock_one(path: &Path) -> Result<File, LockError> {
    let started = std::time::Instant::now();
    loop {
        match try_lock_one(path) {
            Err(LockError::Held { pid: Some(pid), .. })
                if holder_exiting(pid) && started.elapsed() < EXITING_HOLDER_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Whether process `pid` is gone or exiting: no `/proc/PID`, state zombie or dead, or the
/// kernel's `PF_EXITING` flag (0x4) in `/proc/PID/stat`'s ninth field, set from the moment a
/// process starts to exit (a SIGKILLed one tearing down its memory still holds its locks).
fn holder_exiting(pid: u32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The command name (field 2) is in parentheses and may hold spaces: read after its end.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); flags is field 9.
    let state = fields.first().copied().unwrap_or("");
    let flags = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(0);
    matches!(state, "Z" | "X" | "x") || flags & PF_EXITING != 0
}

/// Open (creating) and lock one lock file without blocking.
fn try_lock_one(path: &Path) -> Result<File, LockError> {
    let io = |op: &'static str, p: &Path| {
        let p = p.to_path_buf();
        move |source| LockError::Io {
            path: p,
            op,
            source,
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io("create-dir", dir))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io("open", path))?;
    // SAFETY: flock(2) on a file descriptor this function owns; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(file);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Err(LockError::Held {
            path: path.to_path_buf(),
            pid: holder_pid(&file),
        });
    }
    Err(io("lock", path)(err))
}

/// The pid the holder wrote at the start of the lock file, if any.
fn holder_pid(file: &File) -> Option<u32> {
    let mut buf = [0u8; PID_LINE_BYTES];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .trim()
        .strip_prefix("pid ")?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::ids::Rank;

    /// One test of this module at a time: `a_zombie_holder_is_exiting` spawns a child, and a
    /// child holds a copy of every descriptor of this process from its fork to its exec, the
    /// tier locks' `flock`s included; a test that drops a lock and takes it again in that
    /// window found it held (CI: `a_held_extra_lock_releases_the_tier_locks`).
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn config(root: &Path) -> StoreConfig {
        StoreConfig {
            rank: Rank(1),
            shard_bytes: 64,
            host_capacity_blocks: 2,
            disk_capacity_blocks: 2,
            host_dir: root.join("host"),
            disk_dir: root.join("disk"),
            disk_io: Default::default(),
            layout: Default::default(),
        }
    }

    #[test]
    fn a_live_holder_is_not_exiting_and_a_gone_one_is() {
        let _serial = serial();
        assert!(!holder_exiting(std::process::id()));
        // Pids above the kernel's pid_max (at most 2^22) never exist.
        assert!(holder_exiting(u32::MAX - 1));
    }

    #[test]
    fn a_zombie_holder_is_exiting() {
        let _serial = serial();
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Not yet reaped: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !holder_exiting(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().expect("reap");
    }

    #[test]
    fn one_holder_at_a_time_and_the_refusal_names_file_and_pid() {
        let _serial = serial();
        let root = tempfile::tempdir().unwrap();
        let cfg = config(root.path());
        let socket_lock = root.path().join("sock").join("rank1.sock.lock");
        let lock = TierLock::acquire(&cfg, std::slice::from_ref(&socket_lock)).unwrap();
        assert_eq!(lock.files().count(), 3);
        let e = TierLock::acquire(&cfg, std::slice::from_ref(&socket_lock)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "another process holds this rank's tiers: lock file {} is held by pid {}",
                cfg.disk_dir.join(LOCK_FILE).display(),
                std::process::id()
            )
        );
        let incarnation = lock.fence().token().incarnation;
        drop(lock);
        let again = TierLock::acquire(&cfg, &[socket_lock]).unwrap();
        assert_eq!(again.fence().token().incarnation, incarnation + 1);
        assert!(cfg.disk_dir.join(LOCK_FILE).exists(), "lock files stay");
    }

    #[test]
    fn a_held_extra_lock_releases_the_tier_locks() {
        let _serial = serial();
        let root = tempfile::tempdir().unwrap();
        let cfg = config(root.path());
        let socket_lock = root.path().join("rank1.sock.lock");
        let _socket = lock_one(&socket_lock).unwrap();
        let e = TierLock::acquire(&cfg, std::slice::from_ref(&socket_lock)).unwrap_err();
        assert!(
            matches!(&e, LockError::Held { path, pid: None } if *path == socket_lock),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "another process holds this rank's tiers: lock file {} is held by a process that has not written its pid yet",
                socket_lock.display()
            )
        );
        let mut tiers_only = cfg.clone();
        tiers_only.host_capacity_blocks = 0;
        TierLock::acquire(&tiers_only, &[]).expect("the tier locks were released");
    }
}
