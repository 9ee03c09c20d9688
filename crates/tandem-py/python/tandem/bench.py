"""``python -m tandem.bench``: what a Python engine costs against the Rust client, measured in
the same run on the same cluster.

It starts a local cluster (``tandem up --pp 1 --tp 2``; the ``tandem`` binary from ``--tandem``,
``$TANDEM_BIN`` or the PATH) and runs, one engine process per rank, the same loops twice: once
in Rust (``tandem._tandem.bench_*``: ``EngineClient`` called from Rust, no Python in the loop)
and once in Python (this module: ``tandem.Client`` and numpy views of a ``PagePool``). The Rust
and Python loops are twins, call for call (``src/bench.rs`` and the ``py_*`` functions here).

- **Per-step overhead**: the leader seals ``--steps`` steps (``end_step``), reads each frame back
  (``frame``) and acknowledges it; the follower reads every frame and acknowledges it. Figures:
  p50 and p99 of each call, µs; ratio = Python / Rust (goal ≤ 1.3).
- **Throughput**: the leader computes ``--blocks`` pages (fills them), stores them and seals
  until the store is reported; then looks them up and loads them into other pages and seals
  until the load is reported, ``--rounds`` times; the follower computes its own shards of each
  store the frames start. Figures: bytes of one rank's shards per second, MB/s (10**6 bytes);
  ratio = Python / Rust (goal ≥ 0.9).

Figures, not tests: the machine is shared and noisy; only the ratios within one run compare.
Needs numpy (``pip install numpy``) and ``redis-server`` (``tandem up`` starts one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from statistics import median
from typing import Any, Callable

import tandem
from tandem import _tandem

DONE = 1 << 62
"""The request id of the lookup that ends a phase (as in src/bench.rs)."""


def fill_byte(request: int, i: int, rank: int) -> int:
    """The byte a bench page holds (as ``fill_byte`` in src/bench.rs)."""
    return (request & 0xFF) ^ ((i * 7) & 0xFF) ^ ((rank * 31) & 0xFF)


def ns() -> int:
    return time.perf_counter_ns()


def seal(c: tandem.Client, s: int, deadline: float) -> tandem.Frame:
    while True:
        try:
            return c.end_step(s, deadline)
        except tandem.WindowFull:
            continue


def seal_done(c: tandem.Client, s: int, deadline: float) -> None:
    c.lookup(s, DONE, [2**128 - 1])
    seal(c, s, deadline)
    c.ack(s)


def py_steps(socket: str, steps: int, deadline: float) -> tuple[list[int], list[int], int]:
    """Twin of ``bench_steps``."""
    c = tandem.Client(socket, 0)
    first = c.welcome.next_step
    end: list[int] = []
    read: list[int] = []
    for s in range(first, first + steps):
        t0 = ns()
        seal(c, s, deadline)
        t1 = ns()
        c.frame(s, deadline)
        t2 = ns()
        c.ack(s)
        end.append(t1 - t0)
        read.append(t2 - t1)
    last = first + steps
    seal_done(c, last, deadline)
    c.close()
    return end, read, last


def py_follow(socket: str, rank: int, start: int, pages: int, deadline: float) -> tuple[list[int], int]:
    """Twin of ``bench_follow``."""
    import numpy as np

    c = tandem.Client(socket, rank)
    pool = tandem.PagePool.create(pages, c.welcome.shard_bytes, name="bench")
    c.register_buffer(pool)
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, pool.page_size_bytes)
    latencies: list[int] = []
    s = start
    while True:
        t0 = ns()
        try:
            frame = c.frame(s, deadline)
        except tandem.LeaderBehind:
            continue
        latencies.append(ns() - t0)
        for t in frame.stores:
            for i, p in enumerate(t.page_ids):
                view[p] = fill_byte(t.request, i, rank)
        c.ack(s)
        if any(lk.request == DONE for lk in frame.lookups):
            c.close()
            return latencies, s
        s += 1


def until_done(c: tandem.Client, s: int, task: tandem.TaskId, deadline: float) -> int:
    while True:
        f = seal(c, s, deadline)
        c.ack(s)
        s += 1
        for o in f.finished:
            if o.task == task:
                if not o.ok:
                    raise RuntimeError(f"bench: task {o.task} ended {o.result}: {o.reason}")
                return s


def py_transfer(socket: str, blocks: int, rounds: int, deadline: float) -> tuple[list[int], list[int], int, int]:
    """Twin of ``bench_transfer``."""
    import numpy as np

    c = tandem.Client(socket, 0)
    shard = c.welcome.shard_bytes
    pool = tandem.PagePool.create(2 * blocks, shard, name="bench")
    c.register_buffer(pool)
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, shard)
    s = c.welcome.next_step
    stores: list[int] = []
    loads: list[int] = []
    for r in range(rounds):
        request = 1_000_000 + r
        hashes = [(request << 32) | i for i in range(blocks)]
        t0 = ns()
        for i in range(blocks):
            view[i] = fill_byte(request, i, 0)
        task = c.store(s, request, hashes, list(range(blocks)))
        s = until_done(c, s, task, deadline)
        stores.append(ns() - t0)
        t1 = ns()
        c.lookup(s, request, hashes)
        task = c.load(s, request, hashes, list(range(blocks, 2 * blocks)))
        s = until_done(c, s, task, deadline)
        loads.append(ns() - t1)
    seal_done(c, s, deadline)
    c.close()
    return stores, loads, blocks * shard, s


def worker(a: argparse.Namespace) -> Any:
    """One engine process of one phase: run the loop, return what it measured."""
    rust = a.mode == "rust"
    if a.worker == "steps":
        f: Callable[..., Any] = _tandem.bench_steps if rust else py_steps
        end, read, last = f(a.socket, a.steps, a.deadline_s)
        return {"end_step_ns": end, "frame_ns": read, "last": last}
    if a.worker == "follow":
        f = _tandem.bench_follow if rust else py_follow
        read, last = f(a.socket, a.rank, a.start, a.pages, a.deadline_s)
        return {"frame_ns": read, "last": last}
    f = _tandem.bench_transfer if rust else py_transfer
    stores, loads, task_bytes, last = f(a.socket, a.blocks, a.rounds, a.deadline_s)
    return {"store_ns": stores, "load_ns": loads, "task_bytes": task_bytes, "last": last}


def pct(xs: list[int], q: float) -> float:
    """The q-quantile (nearest rank) of nanosecond figures, in µs."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0


class Cluster:
    """``tandem up --pp 1 --tp 2`` in the background."""

    def __init__(self, binary: str, host_capacity: int) -> None:
        self.proc = subprocess.Popen(
            [binary, "up", "--pp", "1", "--tp", "2", "--host-capacity", str(host_capacity)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.sockets = ["", ""]
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            if m := re.search(r"rank (\d+): http://\S+\s+engine socket (\S+)", line):
                self.sockets[int(m[1])] = m[2]
            if "Ctrl-C stops everything" in line:
                break
        if not all(self.sockets):
            self.stop()
            raise SystemExit("tandem up did not start:\n" + "".join(lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def phase(cluster: Cluster, mode: str, kind: str, start: int, a: argparse.Namespace) -> tuple[dict, dict]:
    """Run one phase: the leader's loop `kind` and the follower, both in `mode`."""
    base = [sys.executable, "-m", "tandem.bench", "--mode", mode, "--deadline-s", str(a.deadline_s)]
    lead = base + ["--worker", kind, "--socket", cluster.sockets[0], "--steps", str(a.steps),
                   "--blocks", str(a.blocks), "--rounds", str(a.rounds)]
    follow = base + ["--worker", "follow", "--socket", cluster.sockets[1], "--rank", "1",
                     "--start", str(start), "--pages", str(2 * a.blocks)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for cmd in (lead, follow)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench: a {mode} {kind} worker failed ({p.returncode})")
        outs.append(json.loads(out))
    return outs[0], outs[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tandem.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", default=os.environ.get("TANDEM_BIN") or shutil.which("tandem") or "tandem",
                   help="the tandem binary (default: $TANDEM_BIN, then the PATH)")
    p.add_argument("--steps", type=int, default=2000, help="steps per overhead phase")
    p.add_argument("--blocks", type=int, default=32, help="blocks per store and load")
    p.add_argument("--rounds", type=int, default=16, help="store+load rounds per throughput phase")
    p.add_argument("--deadline-s", type=float, default=5.0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    # Worker processes (started by the orchestrator).
    p.add_argument("--worker", choices=["steps", "follow", "transfer"], help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=["rust", "python"], help=argparse.SUPPRESS)
    p.add_argument("--socket", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pages", type=int, default=64, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a)))
        return 0

    started = time.monotonic()
    cluster = Cluster(a.tandem, host_capacity=max(1024, 2 * a.blocks * a.rounds + 64))
    try:
        results: dict[str, dict] = {}
        step = 0
        for kind in ("steps", "transfer"):
            for mode in ("rust", "python"):
                lead, follow = phase(cluster, mode, kind, step, a)
                results[f"{kind}-{mode}"] = {"leader": lead, "follower": follow}
                step = lead["last"] + 1
    finally:
        cluster.stop()
    report = summarize(results, a)
    report["seconds"] = round(time.monotonic() - started, 1)
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


def summarize(r: dict[str, dict], a: argparse.Namespace) -> dict:
    out: dict[str, Any] = {"steps": a.steps, "blocks": a.blocks, "rounds": a.rounds, "calls": {}, "throughput": {}}
    calls = [
        ("end_step", "steps", "leader", "end_step_ns"),
        ("frame (leader, sealed)", "steps", "leader", "frame_ns"),
        ("frame (follower)", "steps", "follower", "frame_ns"),
    ]
    for name, kind, who, key in calls:
        rust, py = r[f"{kind}-rust"][who][key], r[f"{kind}-python"][who][key]
        row = {}
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            rv, pv = pct(rust, q), pct(py, q)
            row[label] = {"rust_us": rv, "python_us": pv, "ratio": pv / rv if rv else None}
        out["calls"][name] = row
    for name, key in (("store", "store_ns"), ("load", "load_ns")):
        tput = {}
        for mode in ("rust", "python"):
            lead = r[f"transfer-{mode}"]["leader"]
            tput[mode] = lead["task_bytes"] / (median(lead[key]) / 1e9) / 1e6
        out["throughput"][name] = {"rust_mb_s": tput["rust"], "python_mb_s": tput["python"],
                                   "ratio": tput["python"] / tput["rust"],
                                   "bytes_per_task": r["transfer-rust"]["leader"]["task_bytes"]}
    return out


def print_table(rep: dict) -> None:
    print(f"python engine against the rust client, pp 1 × tp 2, same cluster, same run ({rep['seconds']} s)")
    print(f"per-step overhead, {rep['steps']} steps each (µs; ratio = python / rust, goal ≤ 1.3)")
    print(f"  {'call':<24}{'rust p50':>10}{'python p50':>12}{'ratio':>8}{'rust p99':>10}{'python p99':>12}{'ratio':>8}")
    for name, row in rep["calls"].items():
        p50, p99 = row["p50"], row["p99"]
        print(f"  {name:<24}{p50['rust_us']:>10.1f}{p50['python_us']:>12.1f}{p50['ratio']:>8.2f}"
              f"{p99['rust_us']:>10.1f}{p99['python_us']:>12.1f}{p99['ratio']:>8.2f}")
    b = rep["throughput"]["store"]["bytes_per_task"]
    print(f"throughput, {rep['rounds']} rounds of {rep['blocks']} blocks ({b} bytes per rank per task;"
          " MB/s per rank, median round; ratio = python / rust, goal ≥ 0.9)")
    print(f"  {'task':<24}{'rust':>10}{'python':>12}{'ratio':>8}")
    for name, row in rep["throughput"].items():
        print(f"  {name:<24}{row['rust_mb_s']:>10.1f}{row['python_mb_s']:>12.1f}{row['ratio']:>8.2f}")


if __name__ == "__main__":
    sys.exit(main())
