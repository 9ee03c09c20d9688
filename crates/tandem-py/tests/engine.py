"""A Python engine process of one rank, driving its agent through ``tandem.Session``.

The leader (rank 0) runs ``--requests`` requests: it computes each request's blocks into pages
(this rank's content of each block, through a numpy view of the pool), stores them, seals steps
until the store's outcome arrives, looks them up, loads them into other pages, seals until the
load's outcome arrives, and checks every loaded byte. A failed, aborted or never-started store
is computed and stored again. Followers read every frame: they compute the pages of each store
a frame starts (their own content) and check the pages of each load reported ok. Every engine
counts how many times each task reached it. The run ends with a frame holding a lookup of
request ``DONE``; each engine then writes its report (JSON) to ``--out``.

Progress lines (``request N done``, ``holding N``) let a test time a fault: ``--hold N:before``
pauses after the store of request N is requested and before any frame lists it, ``N:after``
after the frame that starts it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter

import numpy as np

import tandem

DONE = 1 << 62
"""The request id of the lookup that ends the run."""


def content(block: int, rank: int, size: int) -> np.ndarray:
    """This rank's shard of ``block``: deterministic bytes."""
    seed = (block ^ (rank * 0x9E3779B97F4A7C15)) & ((1 << 64) - 1)
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def keys(run: str, request: int, blocks: int) -> list:
    """The request's block keys: SHA-256 digests, as bytes for even requests and as hex str
    for odd ones (both map to the same kind of 128-bit hash)."""
    digests = [hashlib.sha256(f"{run}/{request}/{i}".encode()).digest() for i in range(blocks)]
    return digests if request % 2 == 0 else [d.hex() for d in digests]


class Engine:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = args.rank
        self.s = tandem.Session(args.socket, args.rank, recovery_s=60.0)
        shard = self.s.welcome.shard_bytes
        self.fd = None
        if args.pool == "file":
            self.pool = tandem.PagePool.create(args.pages, shard, path=f"pool-rank{args.rank}")
            self.s.register_buffer(self.pool)
        elif args.pool == "memfd":
            self.pool = tandem.PagePool.create(args.pages, shard)
            self.s.register_buffer(self.pool)
        else:  # raw-fd: the engine's own memfd, registered by descriptor
            self.fd = os.memfd_create(f"engine-rank{args.rank}")
            os.ftruncate(self.fd, args.pages * shard)
            self.pool = tandem.PagePool.attach(shard, fd=self.fd)
            self.s.register_buffer(self.fd, args.pages * shard, shard)
        self.pages = np.frombuffer(self.pool, np.uint8).reshape(self.pool.pages, shard)
        self.shard = shard
        self.delivered: Counter = Counter()
        self.verified = 0
        self.failures: list[str] = []
        self.epochs: set[int] = {self.s.epoch}
        self.new_epochs = 0

    def log(self, line: str) -> None:
        print(line, flush=True)

    def verify(self, start: "tandem.TaskStart") -> None:
        for h, p in zip(start.block_hashes, start.page_ids):
            self.verified += 1
            if not np.array_equal(self.pages[p], content(h, self.rank, self.shard)):
                self.failures.append(f"rank {self.rank}: page {p} does not hold block {h:032x}")

    def applied(self, a: "tandem.Applied") -> None:
        """What every rank does with a frame: compute the pages of its stores, count outcomes,
        check the pages of loads reported ok."""
        self.epochs.add(a.frame.epoch)
        for d in a.outcomes:
            self.delivered[str(d.outcome.task)] += 1
            if d.outcome.kind == "load" and d.outcome.ok and d.start is not None:
                self.verify(d.start)
        for r in a.not_started:
            self.delivered[str(r.task)] += 1
        if self.rank != 0:
            for start in a.frame.stores:
                for h, p in zip(start.block_hashes, start.page_ids):
                    self.pages[p] = content(h, self.rank, self.shard)

    def report(self) -> dict:
        return {
            "rank": self.rank,
            "delivered": dict(self.delivered),
            "verified": self.verified,
            "failures": self.failures,
            "epochs": sorted(self.epochs),
            "new_epochs": self.new_epochs,
            "tally": self.s.tally,
        }

    # --- the leader ---

    def seal(self) -> "tandem.Applied | None":
        """Seal the open step; ``None`` after a new epoch (the step's work is void)."""
        while True:
            try:
                a = self.s.end_step(deadline_s=2.0)
            except tandem.WindowFull:
                continue
            except tandem.NewEpoch:
                self.new_epochs += 1
                return None
            self.applied(a)
            try:
                self.s.ack()
            except tandem.NewEpoch:
                self.new_epochs += 1
            if self.args.step_pause:
                time.sleep(self.args.step_pause)
            return a

    def settle(self, task: "tandem.TaskId") -> str:
        """Seal steps until ``task`` is settled: its result, or ``"not_started"``."""
        while True:
            a = self.seal()
            if a is None:
                continue
            for d in a.outcomes:
                if d.outcome.task == task:
                    return d.outcome.result
            for r in a.not_started:
                if r.task == task:
                    return "not_started"

    def lead(self) -> None:
        self.holds = {}
        for h in filter(None, self.args.hold.split(",")):
            request, when = h.split(":")
            self.holds[int(request)] = when
        self.results: Counter = Counter()
        k = self.args.blocks
        requested: list[str] = []
        stores_retried = loads_failed = 0
        for r in range(self.args.requests):
            ks = keys(self.args.run, r, k)
            hashes = [tandem.block_hash(x) for x in ks]
            while True:  # store until it is ok
                for i, h in enumerate(hashes):
                    self.pages[i] = content(h, 0, self.shard)
                try:
                    task = self.s.store(r, ks, list(range(k)))
                except tandem.NewEpoch:
                    self.new_epochs += 1
                    continue
                requested.append(str(task))
                hold = self.holds.pop(r, None)
                if hold == "before":
                    # The store is requested and no frame lists it yet: a fault now leaves it
                    # never started.
                    self.log(f"holding {r}")
                    time.sleep(self.args.hold_s)
                elif hold == "after":
                    # One frame lists it: a fault now leaves it in flight (aborted) or finished
                    # but not revealed (redelivered).
                    self.seal()
                    self.log(f"holding {r}")
                    time.sleep(self.args.hold_s)
                result = self.settle(task)
                self.results[result] += 1
                if result == "ok":
                    break
                stores_retried += 1
            while True:  # look up and load into the second half of the pool
                try:
                    found = self.s.lookup(r, ks)
                    if found.matched_blocks == 0:
                        loads_failed += 1
                        break
                    dst = list(range(k, k + found.matched_blocks))
                    task = self.s.load(r, hashes[: found.matched_blocks], dst)
                except tandem.NewEpoch:
                    self.new_epochs += 1
                    continue
                requested.append(str(task))
                result = self.settle(task)
                if result != "ok":
                    loads_failed += 1
                break
            self.log(f"request {r} done")
        while True:
            try:
                self.s.lookup(DONE, [0])
            except tandem.NewEpoch:
                self.new_epochs += 1
                continue
            if self.seal() is not None:
                break
        self.extra = {
            "requested": requested,
            "stores_retried": stores_retried,
            "loads_failed": loads_failed,
            "store_results": dict(self.results),
        }

    # --- a follower ---

    def follow(self) -> None:
        while True:
            try:
                a = self.s.next_frame(deadline_s=0.5)
            except tandem.LeaderBehind:
                continue
            except tandem.NewEpoch:
                self.new_epochs += 1
                continue
            self.applied(a)
            try:
                self.s.ack()
            except tandem.NewEpoch:
                self.new_epochs += 1
                continue
            if any(lk.request == DONE for lk in a.frame.lookups):
                return


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--scenario", default="store_load")
    p.add_argument("--out", required=True)
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--pages", type=int, default=16)
    p.add_argument("--pool", choices=["file", "memfd", "raw-fd"], default="memfd")
    p.add_argument("--run", default="run")
    p.add_argument("--step-pause", type=float, default=0.0)
    p.add_argument("--hold", default="", help="REQUEST:before|after,...: pause there (a test faults)")
    p.add_argument("--hold-s", type=float, default=1.0)
    args = p.parse_args()
    e = Engine(args)
    e.extra = {}
    if args.rank == 0:
        e.lead()
    else:
        e.follow()
    report = e.report() | e.extra | {"pool": args.pool, "pool_path": e.pool.path}
    e.s.close()
    with open(args.out, "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
