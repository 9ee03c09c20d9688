#!/usr/bin/env python3
"""The seed's transport, timed the way `tandem bench frame` times a frame.

FlexKV's `scatter_pp` moves a leader's message to the other ranks point to point over
torch.distributed: the leader pickles the object, then for each follower sends one tensor
holding the payload's size and one uint8 tensor holding the payload (`isend`); a follower
receives the size, then the payload (`irecv`), and unpickles it. This script does exactly that
with the `gloo` backend, one process per rank on loopback, and times it like Tandem's frame
bench (docs/BENCHMARKS.md, "Frame latency"):

- per step every rank meets at a barrier, the followers post their receive of the size, the
  leader sleeps the gap (2 ms) so those receives are in place, takes t0 and sends;
- a follower's arrival is the moment its unpickle returned;
- the sample is t0 -> the last follower's arrival (the first follower's is kept too).

One clock: `time.monotonic_ns()` is CLOCK_MONOTONIC, system-wide on Linux, so the leader's t0
and a follower's arrival, taken in different processes of one machine, subtract exactly.
Timestamps stay in each process until the last step, then the followers send them to the
leader; nothing crosses processes inside the timed window but the payload.

The payload defaults to what an empty Tandem frame costs on the wire (17 bytes): a bytes object
chosen so that its pickle is that long (`--payload-bytes` for more).

Run it with a Python that has torch (`pip install torch`); without torch it prints that the
comparison was skipped and exits 0:

    scripts/bench-gloo.py --ranks 2,4,8
    /tmp/torchenv/bin/python scripts/bench-gloo.py --ranks 2,4,8,16 --json
    ./target/release/tandem bench frame --json > frame.json
    /tmp/torchenv/bin/python scripts/bench-gloo.py --compare frame.json

`--compare FILE` reads `tandem bench frame --json` output and prints, per rank count in both,
gloo p50 / Tandem p50 against the goal of issue 15 (Tandem >= 10x faster at p50). Targets are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import pickle
import socket
import sys
import time
import warnings
from datetime import timedelta

# torch warns at import when numpy is absent; nothing here uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

SKIPPED = "SKIPPED: torch is not installed (pip install torch to compare)"
# Issue 15: Tandem's frame p50 at least this many times below the seed transport's.
GOAL = 10.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Time a pickled point-to-point fan-out over torch.distributed gloo "
        "(FlexKV's scatter_pp), as `tandem bench frame` times a frame."
    )
    p.add_argument("--ranks", default="2,4,8", help="rank counts, comma-separated (default 2,4,8)")
    p.add_argument("--steps", type=int, default=2000, help="timed steps per rank count")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps first")
    p.add_argument("--gap-ms", type=float, default=2.0, help="leader's pause before each send")
    p.add_argument(
        "--payload-bytes", type=int, default=17, help="pickled payload size (default 17: an empty frame)"
    )
    p.add_argument("--quick", action="store_true", help="30 warm-up and 300 timed steps")
    p.add_argument("--timeout-s", type=float, default=300.0, help="limit per rank count")
    p.add_argument("--compare", metavar="FILE", help="`tandem bench frame --json` output to set beside")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    a = p.parse_args(argv)
    a.ranks = [int(x) for x in a.ranks.split(",") if x.strip()]
    if any(n < 2 for n in a.ranks):
        p.error("every rank count needs a leader and at least one follower (>= 2)")
    if a.quick:
        a.warmup, a.steps = 30, 300
    return a


def payload_of(size: int) -> object:
    """A bytes object whose pickle is `size` bytes, or the smallest pickle above it."""
    k = 0
    while len(pickle.dumps(b"\0" * k, protocol=pickle.HIGHEST_PROTOCOL)) < size:
        k += 1
    return b"\0" * k


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(sorted_v: list[float], p: float) -> float:
    """Nearest rank, as `tandem bench` computes it."""
    if not sorted_v:
        return 0.0
    rank = math.ceil(p / 100.0 * len(sorted_v))
    return sorted_v[min(max(rank, 1), len(sorted_v)) - 1]


def summary(v: list[float]) -> dict:
    s = sorted(v)
    return {"n": len(s), "p50": percentile(s, 50), "p99": percentile(s, 99), "max": s[-1] if s else 0.0}


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out) -> None:
    """One rank: rank 0 sends every step and collects the followers' arrivals at the end."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    total = args.warmup + args.steps
    gap = args.gap_ms / 1000.0
    times = torch.zeros(total, dtype=torch.int64)
    if rank == 0:
        obj = payload_of(args.payload_bytes)
        wire = len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        sent = torch.zeros(total, dtype=torch.int64)
        for i in range(total):
            dist.barrier()
            time.sleep(gap)
            t0 = time.monotonic_ns()
            data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            size = torch.tensor([len(data)], dtype=torch.int64)
            reqs = []
            for dst in range(1, world):
                reqs.append(dist.isend(size, dst))
                reqs.append(dist.isend(buf, dst))
            for r in reqs:
                r.wait()
            times[i] = t0
            sent[i] = time.monotonic_ns()
        arrivals = []
        for src in range(1, world):
            t = torch.zeros(total, dtype=torch.int64)
            dist.recv(t, src)
            arrivals.append(t)
        w = args.warmup
        t0s = times[w:].tolist()
        per = [[(a - b) / 1000.0 for a, b in zip(t[w:].tolist(), t0s)] for t in arrivals]
        last = [max(col) for col in zip(*per)]
        first = [min(col) for col in zip(*per)]
        sends = [(a - b) / 1000.0 for a, b in zip(sent[w:].tolist(), t0s)]
        out.put(
            {
                "ranks": world,
                "steps": args.steps,
                "payload_bytes": wire,
                "frame_us": summary(last),
                "first_follower_us": summary(first),
                "sends_done_us": summary(sends),
                "by_rank_p50_us": [summary(v)["p50"] for v in per],
            }
        )
    else:
        for i in range(total):
            dist.barrier()
            size = torch.zeros(1, dtype=torch.int64)
            dist.irecv(size, 0).wait()
            buf = torch.empty(int(size.item()), dtype=torch.uint8)
            dist.irecv(buf, 0).wait()
            pickle.loads(ctypes.string_at(buf.data_ptr(), buf.numel()))
            times[i] = time.monotonic_ns()
        dist.send(times, 0)
    dist.destroy_process_group()


def one(n: int, args: argparse.Namespace) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, n, port, args, out), daemon=True) for r in range(n)]
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + args.timeout_s
        row = None
        while row is None:
            try:
                row = out.get(timeout=1.0)
            except Exception:  # queue.Empty: look whether a rank died
                dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"rank(s) exited early: {dead}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no result within {args.timeout_s:.0f} s") from None
        for p in procs:
            p.join(timeout=30)
        return row
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def tandem_rows(path: str) -> dict[int, dict]:
    with open(path) as f:
        obj = json.load(f)
    frame = obj.get("frame", obj)
    return {r["ranks"]: r for r in frame.get("rows", [])}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        print(json.dumps({"skipped": SKIPPED}) if args.json else SKIPPED)
        return 0

    rows, not_measured = [], []
    for n in args.ranks:
        print(f"  gloo: {n} ranks ...", file=sys.stderr)
        try:
            rows.append(one(n, args))
        except Exception as e:  # one rank count failing leaves the others
            print(f"  gloo: {n} ranks not measured: {e}", file=sys.stderr)
            not_measured.append([n, str(e)])
    if not rows:
        print(f"no rank count could be measured: {not_measured}", file=sys.stderr)
        return 1
    lo, hi = min(rows, key=lambda r: r["ranks"]), max(rows, key=lambda r: r["ranks"])
    increment = (
        (hi["frame_us"]["p50"] - lo["frame_us"]["p50"]) / (hi["ranks"] - lo["ranks"])
        if hi["ranks"] > lo["ranks"]
        else None
    )
    comparison = []
    if args.compare:
        tandem = tandem_rows(args.compare)
        for r in rows:
            t = tandem.get(r["ranks"])
            if t is None:
                continue
            ratio = r["frame_us"]["p50"] / t["frame_us"]["p50"] if t["frame_us"]["p50"] > 0 else 0.0
            comparison.append(
                {
                    "ranks": r["ranks"],
                    "gloo_p50_us": r["frame_us"]["p50"],
                    "tandem_p50_us": t["frame_us"]["p50"],
                    "gloo_over_tandem_p50": ratio,
                    "goal_met": ratio >= GOAL,
                }
            )
    report = {
        "transport": "torch.distributed gloo: size tensor + pickled uint8 payload per follower, isend/irecv",
        "torch": torch.__version__,
        "gap_us": args.gap_ms * 1000.0,
        "warmup": args.warmup,
        "rows": rows,
        "not_measured": not_measured,
        "increment_us": increment,
        "comparison": comparison,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"gloo fan-out (torch {torch.__version__}), µs, t0 -> follower unpickled; "
          f"{args.steps} steps after {args.warmup} warm-up, gap {args.gap_ms} ms")
    print("| ranks | payload B | last p50 | p99 | max | first follower p50 | leader sends done p50 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        f = r["frame_us"]
        print(f"| {r['ranks']} | {r['payload_bytes']} | {f['p50']:.0f} | {f['p99']:.0f} | {f['max']:.0f} "
              f"| {r['first_follower_us']['p50']:.0f} | {r['sends_done_us']['p50']:.0f} |")
    if increment is not None:
        print(f"per follower (p50 slope {lo['ranks']} -> {hi['ranks']} ranks): {increment:.1f} µs")
    for n, e in not_measured:
        print(f"{n} ranks not measured: {e}")
    if comparison:
        print(f"\nbeside Tandem ({args.compare}); goal: gloo p50 / Tandem p50 >= {GOAL:g}")
        print("| ranks | gloo p50 | Tandem p50 | gloo / Tandem |")
        print("|---:|---:|---:|---:|")
        for c in comparison:
            mark = "pass" if c["goal_met"] else "FAIL"
            print(f"| {c['ranks']} | {c['gloo_p50_us']:.0f} | {c['tandem_p50_us']:.0f} "
                  f"| {c['gloo_over_tandem_p50']:.2f} {mark} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
