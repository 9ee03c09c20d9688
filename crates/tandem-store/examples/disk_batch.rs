//! Where the time of a disk-tier batch goes: one process, no cluster. A working set of
//! engine pages (a shared-memory file) is stored into a disk tier in batches (tasks) and
//! loaded back, through each path the tier has, beside one `pwrite` / `pread` per shard of the
//! same bytes (the datapath bench's floor). The tier's transfers run on an I/O thread of their
//! own, as the agent's `disk-io` thread does (without its deadline). Per path: GB/s (best of
//! the passes) and CPU seconds per GB of the calling thread and of the I/O thread
//! (`RUSAGE_THREAD`), so that a copy or a hand-off shows as CPU, not only as wall time.
//!
//! ```sh
//! cargo run --release -p tandem-store --example disk_batch -- [DIR] [SHARD_KIB] [BLOCKS_PER_TASK] [TASKS] [PASSES]
//! ```
//! Defaults: the temp dir, 1024 KiB, 64 blocks, 2 tasks, 5 passes.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use tandem_store::disk::{
    DiskIo, DiskTier, DiskTransfer, IoMode, Kept, SlotRead, SlotWrite, Submitted, DISK_SLAB_FILE,
};
use tandem_store::shm::ShmFile;
use tandem_store::BlockHash;

/// Transfers on a thread of their own, in order, no deadline; `cache` says whether batch
/// reads may take page-cache hits on the caller's side.
#[derive(Debug)]
struct Threaded {
    jobs: mpsc::Sender<DiskTransfer>,
    done: mpsc::Receiver<(DiskTransfer, std::io::Result<()>)>,
    cache: bool,
    cpu: Arc<std::sync::Mutex<f64>>,
}

fn thread_cpu() -> f64 {
    // SAFETY: getrusage into a zeroed struct it fills.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

impl Threaded {
    fn start(cache: bool) -> Self {
        let (jobs, queue) = mpsc::channel::<DiskTransfer>();
        let (tx, done) = mpsc::channel();
        let cpu = Arc::new(std::sync::Mutex::new(0.0));
        let c = cpu.clone();
        std::thread::spawn(move || {
            while let Ok(mut t) = queue.recv() {
                let r = t.perform();
                *c.lock().unwrap() = thread_cpu();
                if tx.send((t, r)).is_err() {
                    return;
                }
            }
        });
        Threaded {
            jobs,
            done,
            cache,
            cpu,
        }
    }

    fn cpu(&self) -> f64 {
        *self.cpu.lock().unwrap()
    }
}

impl DiskIo for Threaded {
    fn submit(&mut self, t: DiskTransfer) {
        self.jobs.send(t).unwrap();
    }

    fn wait(&mut self) -> Submitted {
        let (t, r) = self.done.recv().unwrap();
        Submitted::Done(t, r)
    }

    fn reclaim(&mut self) -> Option<DiskTransfer> {
        None
    }

    fn cache_reads(&self) -> bool {
        self.cache
    }
}

/// A shared handle on the I/O's CPU counter (the tier owns the I/O).
struct Probe(Arc<std::sync::Mutex<f64>>);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let shard = arg(2, 1024) << 10;
    let per_task = arg(3, 64);
    let tasks = arg(4, 2);
    let passes = arg(5, 5);
    let blocks = per_task * tasks;
    let bytes = (shard * blocks) as f64;
    let work = tempfile::tempdir_in(&dir).unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut pool = ShmFile::create(&shm.path().join("pool"), (shard * blocks) as u64).unwrap();
    for (i, b) in pool.bytes_mut().chunks_exact_mut(8).enumerate() {
        b.copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    }
    pool.populate();
    let pool = Arc::new(pool);
    let kept = Kept::shm(pool.clone());
    let back = ShmFile::create(&shm.path().join("back"), (shard * blocks) as u64).unwrap();
    back.populate();

    // The floor: one pwrite / pread per shard into a written, preallocated file.
    let plain = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(work.path().join("plain"))
        .unwrap();
    tandem_store::disk::preallocate(&plain, (shard * blocks) as u64).unwrap();
    let slab = work.path().join(DISK_SLAB_FILE);
    let (mut disk, _) = DiskTier::open(&slab, shard, blocks as u64, IoMode::Buffered).unwrap();
    // Written once first, as the datapath bench's files are, from memory already written:
    // a write from pages never touched (a fresh `vec![0u8; n]`) faults inside the kernel's
    // copy, which then falls back to one 4 KiB page cache folio at a time, and every later
    // write into those folios ran at 0.6× the floor's (docs/BENCHMARKS.md, Datapath, "On a
    // quiet machine, and what the disk tier's own figures were missing").
    std::fs::OpenOptions::new()
        .write(true)
        .open(&slab)
        .unwrap()
        .write_all_at(pool.bytes(), 0)
        .unwrap();

    println!(
        "{} KiB × {per_task} per task, {tasks} tasks, best of {passes}; GB/s, CPU s per GB (caller / I/O thread)",
        shard >> 10
    );
    let best = |name: &str, run: &mut dyn FnMut() -> (f64, f64)| {
        let (mut g, mut cpu) = (0.0f64, (f64::MAX, f64::MAX));
        for _ in 0..passes {
            let c0 = thread_cpu();
            let t = Instant::now();
            let (io0, io1) = run();
            let secs = t.elapsed().as_secs_f64();
            let c = thread_cpu() - c0;
            g = g.max(bytes / secs / 1e9);
            cpu.0 = cpu.0.min(c / (bytes / 1e9));
            cpu.1 = cpu.1.min((io1 - io0) / (bytes / 1e9));
        }
        println!(
            "{name:<34} {g:6.2} GB/s   cpu {:.3} / {:.3} s/GB",
            cpu.0, cpu.1
        );
    };
    best("floor pwrite", &mut || {
        for (i, s) in pool.bytes().chunks_exact(shard).enumerate() {
            plain.write_all_at(s, (i * shard) as u64).unwrap();
        }
        (0.0, 0.0)
    });
    // The same pwrite into the tier's own file: the check that the slab is as fast to write
    // as the floor's file, so that the tier's rows compare paths, not files.
    best("floor pwrite into the slab", &mut || {
        let f = std::fs::OpenOptions::new().write(true).open(&slab).unwrap();
        for (i, s) in pool.bytes().chunks_exact(shard).enumerate() {
            f.write_all_at(s, DiskTier::slot_offset(shard, i as u64))
                .unwrap();
        }
        (0.0, 0.0)
    });
    best("checksum only (engine pages)", &mut || {
        for (i, s) in pool.bytes().chunks_exact(shard).enumerate() {
            std::hint::black_box(tandem_store::checksum::checksum(BlockHash(i as u128), s));
        }
        (0.0, 0.0)
    });
    let mut out = back;
    best("floor pread", &mut || {
        for (i, d) in out.bytes_mut().chunks_exact_mut(shard).enumerate() {
            plain.read_exact_at(d, (i * shard) as u64).unwrap();
        }
        (0.0, 0.0)
    });
    for cache in [false, true] {
        let io = Threaded::start(cache);
        let probe = Probe(io.cpu.clone());
        let _ = io.cpu();
        disk.set_io(Box::new(io));
        let srcs: Vec<[&[u8]; 1]> = pool.bytes().chunks_exact(shard).map(|p| [p]).collect();
        for kept_path in [false, true] {
            if cache && !kept_path {
                continue;
            }
            let name = if kept_path {
                "store: pwritev from the pages"
            } else {
                "store: staged (copy + crc, pwrite)"
            };
            best(name, &mut || {
                let io0 = *probe.0.lock().unwrap();
                for t in 0..tasks {
                    let mut jobs: Vec<SlotWrite<'_>> = (t * per_task..(t + 1) * per_task)
                        .map(|b| SlotWrite {
                            slot: b as u64,
                            src: &srcs[b],
                            seed: BlockHash(b as u128),
                            result: None,
                        })
                        .collect();
                    if kept_path {
                        disk.write_slots_kept(&mut jobs, &kept);
                    } else {
                        disk.write_slots(&mut jobs);
                    }
                    assert!(jobs.iter().all(|j| matches!(j.result, Some(Ok(_)))));
                }
                (io0, *probe.0.lock().unwrap())
            });
        }
        let name = if cache {
            "load: preadv2 NOWAIT + crc"
        } else {
            "load: staged (pread, copy + crc)"
        };
        best(name, &mut || {
            let io0 = *probe.0.lock().unwrap();
            for t in 0..tasks {
                let views: Vec<&mut [u8]> = out
                    .bytes_mut()
                    .chunks_exact_mut(shard)
                    .skip(t * per_task)
                    .take(per_task)
                    .collect();
                if cache {
                    let reader = disk.cached_reader().unwrap();
                    for (k, v) in views.into_iter().enumerate() {
                        let b = t * per_task + k;
                        reader.read(b as u64, v, BlockHash(b as u128)).unwrap();
                    }
                } else {
                    let mut jobs: Vec<SlotRead<'_>> = views
                        .into_iter()
                        .enumerate()
                        .map(|(k, v)| SlotRead {
                            slot: (t * per_task + k) as u64,
                            dst: vec![v],
                            seed: BlockHash((t * per_task + k) as u128),
                            result: None,
                        })
                        .collect();
                    disk.read_slots(&mut jobs);
                    assert!(jobs.iter().all(|j| matches!(j.result, Some(Ok(_)))));
                }
            }
            (io0, *probe.0.lock().unwrap())
        });
    }
    assert!(out.bytes() == pool.bytes(), "every byte came back");
}
