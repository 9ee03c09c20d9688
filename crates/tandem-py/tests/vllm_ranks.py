"""The vLLM pattern without vLLM or torch: one scheduler process driving
:class:`tandem.adapter.offload.SchedulerCore` (the leader, on rank 0's agent) and one worker
process per rank driving :class:`tandem.adapter.offload.WorkerCore`, the step's metadata
pickled to every worker, and each request counted finished only when every worker reported
it (vLLM's ``KVOutputAggregator``).

A worker's "GPU KV cache" is a numpy array of ``num_blocks`` blocks of one shard each; the
scheduler tells the workers which blocks the forward "computed" (each rank's own content of
the block), and the workers verify every block a load copied in.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import time
import traceback
from collections import Counter
from typing import Any

import numpy as np

import tandem
from tandem.adapter.group import GroupLink
from tandem.adapter.offload import SchedulerCore, StepMeta, WorkerCore

BLOCK_TOKENS = 16


def content(h: int, rank: int, size: int) -> np.ndarray:
    seed = (h ^ (rank * 0x9E3779B97F4A7C15)) & ((1 << 64) - 1)
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def hashes(run: str, q: int, n: int) -> list[bytes]:
    """vLLM's block hashes are bytes (sha256 family)."""
    return [hashlib.sha256(f"{run}/{q}/{i}".encode()).digest() for i in range(n)]


class NumpyCopier:
    def __init__(self, kv: np.ndarray, staging: np.ndarray) -> None:
        self.kv, self.staging = kv, staging

    def to_staging(self, blocks, pages) -> None:
        self.staging[list(pages)] = self.kv[list(blocks)]

    def from_staging(self, pages, blocks) -> None:
        self.kv[list(blocks)] = self.staging[list(pages)]


def worker(rank: int, socket: str, staging_path: str, inbox: Any, outbox: Any, args: dict) -> None:
    """One worker: for each message (meta, compute, expect) fill the computed blocks, bind the
    metadata (read and ack the frame, copy), verify the blocks loaded, report finished."""
    logging.basicConfig(level=logging.WARNING)
    report: dict[str, Any] = {"rank": rank, "failures": [], "verified": 0, "steps": 0}
    try:
        link = None
        if rank == 0:
            # Rank 0's shard size is the scheduler's to check; the tests use equal shards.
            shard = args["shard"]
            pool = tandem.PagePool.create(args["staging"], shard, path=staging_path)
        else:
            link = GroupLink(socket, rank, pairing=False)
            shard = link.shard_bytes
            pool = tandem.PagePool.create(args["staging"], shard)
            link.session.register_buffer(pool)
        kv = np.zeros((args["blocks"], shard), np.uint8)
        staging = np.frombuffer(pool, np.uint8).reshape(pool.pages, shard)
        core = WorkerCore(rank, link, NumpyCopier(kv, staging))
        expected: dict[str, list] = {}  # loads started: (GPU block, hash) to check once copied in
        outbox.put(("ready", rank))
        while True:
            msg = inbox.get(timeout=120)
            if msg is None:
                break
            meta, compute, expect = msg
            for block, h in compute:
                kv[block] = content(tandem.block_hash(h), rank, shard)
            core.bind(meta)
            report["steps"] += 1
            sending, recving = core.finished()
            errors = core.load_errors()
            expected.update(expect)
            for req_id in meta.copy_in:
                for block, h in expected.pop(req_id, ()):
                    report["verified"] += 1
                    if not np.array_equal(kv[block], content(tandem.block_hash(h), rank, shard)):
                        report["failures"].append(f"rank {rank}: block {block} of {req_id} is wrong")
            outbox.put(("done", rank, sorted(sending), sorted(recving), sorted(errors)))
        report["frames_missed"] = core.frames_missed
        report["ledger_open"] = link.ledger.open_slots() + len(link.ledger._streams) if link else 0
        report["unchecked"] = len(expected)
        core.close()
        core.copier = None  # the last view of the pool goes before the pool closes
        del staging
        pool.close()
    except Exception:  # noqa: BLE001
        report["failures"].append(traceback.format_exc())
    outbox.put(("report", rank, report))


class Scheduler:
    """The scheduler process's loop, with vLLM's aggregation of the workers' reports."""

    def __init__(self, socket: str, world: int, staging_path: str, inboxes: list, outbox: Any, args: dict) -> None:
        self.world, self.inboxes, self.outbox, self.args = world, inboxes, outbox, args
        ready = 0
        while ready < world:
            kind, *_ = outbox.get(timeout=120)
            ready += kind == "ready"
        self.link = GroupLink(socket, 0)
        self.link.session.register_buffer(tandem.PagePool.attach(self.link.shard_bytes, path=staging_path))
        self.core = SchedulerCore(self.link, args["staging"], BLOCK_TOKENS)
        self.counts: Counter = Counter()
        self.sent: set[str] = set()
        self.recvd: set[str] = set()
        self.load_errors: set[int] = set()
        self.step_s: list[float] = []
        self.meta_steps = 0

    def step(self, compute: list = (), expect: dict = None) -> StepMeta:
        t0 = time.perf_counter()
        meta = self.core.build_meta()
        self.step_s.append(time.perf_counter() - t0)
        self.meta_steps += 1
        for box in self.inboxes:
            box.put((meta, list(compute), expect or {}))
        sending: Counter = Counter()
        recving: Counter = Counter()
        got = 0
        while got < self.world:
            kind, rank, *rest = self.outbox.get(timeout=120)
            if kind == "report":
                raise RuntimeError(f"worker {rank} stopped: {rest[0]['failures']}")
            got += 1
            s, r, e = rest
            sending.update(s)
            recving.update(r)
            self.load_errors.update(e)
        done_s = [q for q, n in sending.items() if n == self.world]
        done_r = [q for q, n in recving.items() if n == self.world]
        self.sent.update(done_s)
        self.recvd.update(done_r)
        self.core.workers_done(done_s, done_r)
        return meta

    def store(self, run: str, q: int, n: int, base: int) -> str:
        hs = hashes(run, q, n)
        req = f"{run}-store-{q}"
        blocks = list(range(base, base + n))
        assert self.core.finish(req, hs, blocks)
        return req, list(zip(blocks, hs))

    def settle(self, until, max_steps: int = 4000) -> None:
        for _ in range(max_steps):
            if until():
                return
            self.step()
            time.sleep(self.args.get("step_pause", 0.0))
        raise RuntimeError(f"not settled after {max_steps} steps: {self.core.stats.as_dict()}")

    def close(self) -> dict:
        for box in self.inboxes:
            box.put(None)
        out = {"stats": self.core.stats.as_dict(), "staging_free": self.core.staging.free,
               "sent": sorted(self.sent), "recvd": sorted(self.recvd), "load_errors": sorted(self.load_errors),
               "epoch": self.link.epoch, "meta_steps": self.meta_steps,
               "step_s_median": sorted(self.step_s)[len(self.step_s) // 2] if self.step_s else None,
               "link": self.link.stats.as_dict()}
        self.core.close()
        return out


def scheduler(sockets: list[str], staging_path: str, inboxes: list, outbox: Any, result: Any, args: dict) -> None:
    logging.basicConfig(level=logging.WARNING)
    s = None
    report: dict[str, Any] = {"failures": []}
    try:
        s = Scheduler(sockets[0], len(sockets), staging_path, inboxes, outbox, args)
        run, n, rounds = args["run"], args["n"], args["rounds"]
        report["rounds"] = []
        for k in range(rounds):
            reqs, compute = [], []
            for q in range(args["per_round"]):
                req, pairs = s.store(run, k * 100 + q, n, base=q * n)
                reqs.append(req)
                compute += pairs
            before = s.core.stats.stores_ok + s.core.stats.stores_failed
            s.step(compute=compute)  # the forward computed these blocks; copies out
            s.settle(lambda: s.core.stats.stores_ok + s.core.stats.stores_failed >= before + len(reqs))
            # Loads into other GPU blocks, after many repeated lookups.
            loads, expect = [], {}
            for q in range(args["per_round"]):
                hs = hashes(run, k * 100 + q, n)
                req = f"{run}-load-{k * 100 + q}"
                tokens = 0
                for _ in range(args["lookups"]):
                    tokens = s.core.lookup(req, hs, n * BLOCK_TOKENS + 1, 0)
                dst = list(range(args["per_round"] * n + q * n, args["per_round"] * n + (q + 1) * n))
                got = tokens // BLOCK_TOKENS
                if got:
                    s.core.start_load(req, hs[:got], dst[:got])
                    loads.append(req)
                    expect[req] = list(zip(dst[:got], hs[:got]))
            s.step(expect=expect)
            s.settle(lambda: all(q in s.recvd for q in loads))
            # One more step so every settled load's staging pages come back.
            s.step()
            report["rounds"].append({"stores": len(reqs), "loads": len(loads), "stats": s.core.stats.as_dict()})
            print(f"round {k}: {len(loads)} loads", flush=True)
            if args.get("kill_after_round") == k:
                print("holding", flush=True)
                time.sleep(args.get("hold_s", 3.0))
    except Exception:  # noqa: BLE001
        report["failures"].append(traceback.format_exc())
    if s is not None:
        report |= s.close()
    else:
        for box in inboxes:
            box.put(None)
    result.put(report)


def drain_reports(outbox: Any, world: int, timeout: float) -> list[dict]:
    reports = {}
    end = time.monotonic() + timeout
    while len(reports) < world and time.monotonic() < end:
        try:
            kind, rank, *rest = outbox.get(timeout=max(end - time.monotonic(), 0.1))
        except queue.Empty:
            break
        if kind == "report":
            reports[rank] = rest[0]
    return [reports.get(r, {"rank": r, "failures": ["no report"]}) for r in range(world)]


def staging_file(tmp: str) -> str:
    return os.path.join(tmp, "staging-rank0")
