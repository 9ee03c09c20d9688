"""``python -m tandem.bench``: what a Python engine costs against the Rust client, measured in
the same run, on the same cluster, on the same connections.

It starts a local cluster (``tandem up --pp 1 --tp 2``; the ``tandem`` binary from ``--tandem``,
``$TANDEM_BIN`` or the PATH) and two engine processes, a leader (rank 0) and a follower (rank
1), each with one ``tandem.Client``. Each engine alternates between its Rust loop
(``tandem._tandem.bench_*``: ``EngineClient`` called from Rust on the client's connection, no
Python in the timed region) and its Python twin (this module: the ``tandem.Client`` methods and
numpy views of a ``PagePool``), in pairs of steps (or rounds) whose order is drawn from a seeded
random source, so both meet the same cluster and the same load on this shared machine at the
same moments, and nothing periodic (heartbeats, flushes) can fall on one of them every time. A
short warm-up runs first and is not counted.

- **Per-step overhead**, ``--steps`` empty steps (half of them each way). The leader seals a
  step (``end_step``), reads its frame back (``frame``, the call alone) and acknowledges it. The
  follower reads each frame (``frame, first read``: it waits for the seal, so it follows the
  leader's pace) and reads it again (``frame, again``: the call alone), then acknowledges it.
  Figures: p50 and p99, µs; ratio = Python / Rust (goal ≤ 1.3).
- **Throughput**, ``--rounds`` rounds (half each way): the leader computes ``--blocks`` pages
  (fills them), stores them and seals until the store is reported, then looks them up, loads
  them into other pages and seals until the load is reported, one step per 0.5 ms at most
  (an engine's steps take time). The follower computes its shard
  of each store through numpy in both halves. Figures: one rank's shard bytes of a task per
  second (median round), MB/s (10**6 bytes); ratio = Python / Rust throughput, the median over
  pairs of consecutive rounds (one each way) (goal ≥ 0.9).

Figures, not tests; only ratios within one run compare. Needs numpy (``pip install numpy``)
and ``redis-server`` (``tandem up`` starts one).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from statistics import median
from typing import Any

import tandem
from tandem import _tandem

DONE = 1 << 62
"""The request id of the lookup that ends a phase."""


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


def py_step(c: tandem.Client, s: int, deadline: float) -> tuple[int, int, int]:
    """Twin of ``bench_step``."""
    t0 = ns()
    seal(c, s, deadline)
    t1 = ns()
    c.frame(s, deadline)
    t2 = ns()
    c.ack(s)
    return t1 - t0, t2 - t1, ns() - t2


def py_read(c: tandem.Client, s: int, deadline: float) -> tuple[int, int, tandem.Frame] | None:
    """Twin of ``bench_read``."""
    t0 = ns()
    try:
        frame = c.frame(s, deadline)
    except tandem.LeaderBehind:
        return None
    t1 = ns()
    c.frame(s, deadline)
    return t1 - t0, ns() - t1, frame


STEP_INTERVAL_S = 0.0005
"""The shortest time between two steps while a round waits for an outcome (as
``STEP_INTERVAL`` in src/bench.rs): an engine's steps take time, and a leader sealing empty
steps as fast as it can would flood the follower, the faster loop the more."""


def until_done(c: tandem.Client, s: int, task: tandem.TaskId, deadline: float) -> int:
    while True:
        sealed = time.perf_counter()
        f = seal(c, s, deadline)
        c.ack(s)
        s += 1
        for o in f.finished:
            if o.task == task:
                if not o.ok:
                    raise RuntimeError(f"bench: task {o.task} ended {o.result}: {o.reason}")
                return s
        rest = STEP_INTERVAL_S - (time.perf_counter() - sealed)
        if rest > 0:
            time.sleep(rest)


def py_round(c: tandem.Client, view: Any, request: int, blocks: int, s: int, deadline: float) -> tuple[int, int, int]:
    """Twin of ``bench_round``: ``view`` is the pool as a (pages, page size) numpy array."""
    hashes = [(request << 32) | i for i in range(blocks)]
    t0 = ns()
    for i in range(blocks):
        view[i] = fill_byte(request, i, 0)
    task = c.store(s, request, hashes, list(range(blocks)))
    s = until_done(c, s, task, deadline)
    t1 = ns()
    c.lookup(s, request, hashes)
    task = c.load(s, request, hashes, list(range(blocks, 2 * blocks)))
    s = until_done(c, s, task, deadline)
    return t1 - t0, ns() - t1, s


def end_phase(c: tandem.Client, s: int, deadline: float) -> int:
    """Seal a frame with the lookup of ``DONE``: the follower stops after it."""
    c.lookup(s, DONE, [2**128 - 1])
    seal(c, s, deadline)
    c.ack(s)
    return s


def modes(count: int, seed: int) -> list[str]:
    """``count`` modes in pairs, one Rust and one Python each, in a random (seeded) order, so
    that nothing periodic on the machine or in the agents (heartbeats, flushes) can fall on the
    same mode every time."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < count:
        pair = ["rust", "python"]
        rng.shuffle(pair)
        out += pair
    return out[:count]


def lead(a: argparse.Namespace) -> dict:
    """The leader process: ``--worker steps`` or ``--worker transfer``, in paired modes."""
    import numpy as np

    c = tandem.Client(a.socket, 0)
    s = c.welcome.next_step
    out: dict[str, list[int]] = {}

    def add(name: str, mode: str, value: int) -> None:
        out.setdefault(f"{name}_{mode}", []).append(value)

    if a.worker == "steps":
        for mode in modes(a.steps, 1):
            t = _tandem.bench_step(c, s, a.deadline_s) if mode == "rust" else py_step(c, s, a.deadline_s)
            add("end_step", mode, t[0])
            add("frame", mode, t[1])
            add("ack", mode, t[2])
            s += 1
    else:
        pool = tandem.PagePool.create(2 * a.blocks, c.welcome.shard_bytes, name="bench")
        c.register_buffer(pool)
        view = np.frombuffer(pool, np.uint8).reshape(pool.pages, pool.page_size_bytes)
        for r, mode in enumerate(modes(a.rounds, 2)):
            request = 1_000_000 + a.offset + r
            if mode == "rust":
                store, load, s = _tandem.bench_round(c, pool._native, request, a.blocks, s, a.deadline_s)
            else:
                store, load, s = py_round(c, view, request, a.blocks, s, a.deadline_s)
            add("store", mode, store)
            add("load", mode, load)
        out["task_bytes"] = [a.blocks * pool.page_size_bytes]
        del view
    last = end_phase(c, s, a.deadline_s)
    c.close()
    return {"last": last, **out}


def follow(a: argparse.Namespace) -> dict:
    """The follower process: read every frame from ``--start`` (modes in pairs, random order), compute
    the pages of its stores through numpy, acknowledge it, until the frame that ends the
    phase."""
    import numpy as np

    c = tandem.Client(a.socket, a.rank)
    pool = tandem.PagePool.create(a.pages, c.welcome.shard_bytes, name="bench")
    c.register_buffer(pool)
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, pool.page_size_bytes)
    out: dict[str, list[int]] = {}
    s = a.start
    order = modes(1 << 16, 3)
    while True:
        mode = order[(s - a.start) % len(order)]
        got = _tandem.bench_read(c, s, a.deadline_s) if mode == "rust" else py_read(c, s, a.deadline_s)
        if got is None:
            continue
        first, again, frame = got
        out.setdefault(f"first_{mode}", []).append(first)
        out.setdefault(f"again_{mode}", []).append(again)
        for t in frame.stores:
            for i, p in enumerate(t.page_ids):
                view[p] = fill_byte(t.request, i, a.rank)
        c.ack(s)
        if any(lk.request == DONE for lk in frame.lookups):
            del view
            c.close()
            return {"last": s, **out}
        s += 1


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


def phase(cluster: Cluster, kind: str, start: int, a: argparse.Namespace, steps: int, rounds: int,
          offset: int) -> tuple[dict, dict]:
    """One phase: the leader's ``kind`` loop and the follower, each in its own process."""
    me = [sys.executable, "-m", "tandem.bench", "--deadline-s", str(a.deadline_s)]
    leader = me + ["--worker", kind, "--socket", cluster.sockets[0], "--steps", str(steps),
                   "--blocks", str(a.blocks), "--rounds", str(rounds), "--offset", str(offset)]
    follower = me + ["--worker", "follow", "--socket", cluster.sockets[1], "--rank", "1",
                     "--start", str(start), "--pages", str(2 * a.blocks)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for cmd in (leader, follower)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench: a {kind} phase's worker failed ({p.returncode})")
        outs.append(json.loads(out))
    return outs[0], outs[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tandem.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--tandem", default=os.environ.get("TANDEM_BIN") or shutil.which("tandem") or "tandem",
                   help="the tandem binary (default: $TANDEM_BIN, then the PATH)")
    p.add_argument("--steps", type=int, default=8000, help="steps of the overhead phase (half each way)")
    p.add_argument("--blocks", type=int, default=32, help="blocks per store and load")
    p.add_argument("--rounds", type=int, default=80, help="store+load rounds (half each way)")
    p.add_argument("--deadline-s", type=float, default=5.0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    # Worker processes (started by the orchestrator).
    p.add_argument("--worker", choices=["steps", "follow", "transfer"], help=argparse.SUPPRESS)
    p.add_argument("--socket", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--pages", type=int, default=64, help=argparse.SUPPRESS)
    p.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(follow(a) if a.worker == "follow" else lead(a)))
        return 0

    started = time.monotonic()
    warm_rounds = 4
    cluster = Cluster(a.tandem, host_capacity=max(1024, a.blocks * (a.rounds + warm_rounds) + 64))
    try:
        lead0, _ = phase(cluster, "steps", 0, a, steps=200, rounds=0, offset=0)  # warm-up
        lead1, _ = phase(cluster, "transfer", lead0["last"] + 1, a, steps=0, rounds=warm_rounds, offset=0)
        steps, steps_f = phase(cluster, "steps", lead1["last"] + 1, a, steps=a.steps, rounds=0, offset=0)
        transfer, _ = phase(cluster, "transfer", steps["last"] + 1, a, steps=0, rounds=a.rounds,
                            offset=warm_rounds)
    finally:
        cluster.stop()
    report = summarize(steps, steps_f, transfer, a)
    report["seconds"] = round(time.monotonic() - started, 1)
    if a.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


def summarize(steps: dict, steps_f: dict, transfer: dict, a: argparse.Namespace) -> dict:
    out: dict[str, Any] = {"steps": a.steps, "blocks": a.blocks, "rounds": a.rounds, "calls": {}, "throughput": {}}
    rows = [("end_step", steps, "end_step"), ("frame (leader, again)", steps, "frame"),
            ("frame (follower, first)", steps_f, "first"), ("frame (follower, again)", steps_f, "again"),
            ("ack (leader)", steps, "ack")]
    for name, src, key in rows:
        rust, py = src[f"{key}_rust"], src[f"{key}_python"]
        row = {}
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            rv, pv = pct(rust, q), pct(py, q)
            row[label] = {"rust_us": rv, "python_us": pv, "ratio": pv / rv if rv else None}
        out["calls"][name] = row
    task_bytes = transfer["task_bytes"][0]
    for name in ("store", "load"):
        rust, py = transfer[f"{name}_rust"], transfer[f"{name}_python"]
        tput = {m: task_bytes / (median(xs) / 1e9) / 1e6 for m, xs in (("rust", rust), ("python", py))}
        # Rounds 2k and 2k + 1 ran one each way, one after the other: the median of the pairs'
        # ratios is robust to the machine's load drifting during the run.
        paired = median(r / p for r, p in zip(rust, py))
        out["throughput"][name] = {"rust_mb_s": tput["rust"], "python_mb_s": tput["python"],
                                   "ratio": paired, "bytes_per_task": task_bytes}
    return out


def print_table(rep: dict) -> None:
    print(f"python engine against the rust client, pp 1 × tp 2, same cluster and connections ({rep['seconds']} s)")
    print(f"per-step overhead, {rep['steps']} steps in pairs, random order (µs; ratio = python / rust, goal ≤ 1.3)")
    print(f"  {'call':<26}{'rust p50':>10}{'python p50':>12}{'ratio':>8}{'rust p99':>10}{'python p99':>12}{'ratio':>8}")
    for name, row in rep["calls"].items():
        p50, p99 = row["p50"], row["p99"]
        print(f"  {name:<26}{p50['rust_us']:>10.1f}{p50['python_us']:>12.1f}{p50['ratio']:>8.2f}"
              f"{p99['rust_us']:>10.1f}{p99['python_us']:>12.1f}{p99['ratio']:>8.2f}")
    b = rep["throughput"]["store"]["bytes_per_task"]
    print(f"throughput, {rep['rounds']} rounds of {rep['blocks']} blocks in pairs, random order ({b} bytes per rank per task;"
          " MB/s per rank, median round; ratio = python / rust, median of paired rounds, goal ≥ 0.9)")
    print(f"  {'task':<26}{'rust':>10}{'python':>12}{'ratio':>8}")
    for name, row in rep["throughput"].items():
        print(f"  {name:<26}{row['rust_mb_s']:>10.1f}{row['python_mb_s']:>12.1f}{row['ratio']:>8.2f}")


if __name__ == "__main__":
    sys.exit(main())
