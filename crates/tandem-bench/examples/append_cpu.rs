//! CPU time per write-ahead append, client and server, for a machine too loaded for
//! events per second to mean much: `append_cpu URL REDIS_PID [steps [depth...]]`. For 1, 8
//! and 32 appends in flight, or the depths given (one outcome per step, through
//! `tandem_bench::append::pipelined`, the loop `tandem bench redis` measures), and for
//! pipelined plain XADDs (256 per pipeline, one outcome each), prints wall-clock events/s, this process's CPU µs per event and the
//! redis-server's CPU µs per event (from /proc/REDIS_PID/stat).

use std::time::Instant;
use tandem_bench::append::pipelined;
use tandem_durable::{DurableConfig, EpochStore, RedisLog};
use tandem_proto::{OutcomeResult, RequestId, TaskId, TaskKind, TaskOutcome};

fn process_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

fn server_cpu_us(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 (1-based), 12 and 13 after the command name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    ticks * 1e6 / 100.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("URL");
    let pid: u32 = args.next().and_then(|p| p.parse().ok()).expect("REDIS_PID");
    let steps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let depths: Vec<usize> = args.filter_map(|d| d.parse().ok()).collect();
    let depths = if depths.is_empty() {
        vec![1, 8, 32]
    } else {
        depths
    };
    let batch = [TaskOutcome {
        task: TaskId { epoch: 1, seq: 0 },
        kind: TaskKind::Store,
        request: RequestId(0),
        result: OutcomeResult::Ok,
    }];
    let log = RedisLog::connect(&DurableConfig::new(&url, "cpu", 1))
        .await
        .expect("connect");
    let epoch = log.next_epoch().await.expect("epoch");
    let mut step = 0;
    pipelined(&log, epoch, step, 1000, &batch, 8)
        .await
        .expect("append");
    step += 1000;
    println!("what                 ev/s  client us/ev  server us/ev");
    for depth in depths {
        let (c0, s0, t0) = (process_cpu_us(), server_cpu_us(pid), Instant::now());
        pipelined(&log, epoch, step, steps, &batch, depth)
            .await
            .expect("append");
        let (c1, s1, wall) = (process_cpu_us(), server_cpu_us(pid), t0.elapsed());
        step += steps as u64;
        let n = steps as f64;
        println!(
            "{:<14} {:>10.0} {:>13.2} {:>13.2}",
            format!("{depth} in flight"),
            n / wall.as_secs_f64(),
            (c1 - c0) / n,
            (s1 - s0) / n
        );
    }
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let (c0, s0, t0) = (process_cpu_us(), server_cpu_us(pid), Instant::now());
    let mut sent = 0;
    while sent < steps {
        let mut pipe = redis::pipe();
        for _ in 0..256.min(steps - sent) {
            pipe.cmd("XADD")
                .arg("cpu-baseline")
                .arg("*")
                .arg("v")
                .arg(1)
                .arg("rec")
                .arg(&b"0123456789"[..])
                .ignore();
        }
        let _: () = pipe.query_async(&mut c).await.expect("pipeline");
        sent += 256;
    }
    let (c1, s1, wall) = (process_cpu_us(), server_cpu_us(pid), t0.elapsed());
    let n = steps as f64;
    println!(
        "{:<14} {:>10.0} {:>13.2} {:>13.2}",
        "xadd pipeline",
        n / wall.as_secs_f64(),
        (c1 - c0) / n,
        (s1 - s0) / n
    );
    let _: () = redis::cmd("DEL")
        .arg("cpu-baseline")
        .arg(&log.keys().completions)
        .arg(&log.keys().epoch)
        .query_async(&mut c)
        .await
        .expect("DEL");
}
