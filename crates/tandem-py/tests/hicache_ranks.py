"""One rank process of the SGLang pattern, driving :class:`tandem.adapter.hicache.HiCacheCore`
as SGLang 0.5.23 drives its storage backend, without SGLang or torch.

Each rank process has a host pool (a memfd ``PagePool``, registered by descriptor), a
"scheduler" thread that calls the step hook in a loop (``check_hicache_events`` → the
backend's ``get_stats``), and the main thread in the role of SGLang's prefetch and backup
threads: ``exists`` on every rank then the MIN over the ranks (SGLang's gloo ``all_reduce``,
here a shared array and a barrier), ``get`` and ``set`` with this rank's own pages. Every
byte a ``get`` reports loaded is checked against this rank's content of the block.

Scenarios (``run(rank, socket, scenario, shared, out)``): ``roundtrip`` (set, exists, get,
verify, per request), ``repeat_exists`` (fill the tier, look its blocks up many times, then
store as many new blocks again: a lookup that leaked its pins would make the tier refuse),
``kill`` (a long series of sets and gets, during which the test kills an agent),
``no_bind`` (a roundtrip; then rank ``no_bind_rank`` drops its binds, as an engine that never
binds would, for one get and one set; then a roundtrip with binds again).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import traceback
from typing import Any

import numpy as np

import tandem
from tandem.adapter.group import GroupLink
from tandem.adapter.hicache import HiCacheCore


def content(h: int, rank: int, size: int) -> np.ndarray:
    seed = (h ^ (rank * 0x9E3779B97F4A7C15)) & ((1 << 64) - 1)
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def keys(run: str, request: int, blocks: int) -> list[str]:
    """SGLang's keys are hex digests (SHA-256 here)."""
    return [hashlib.sha256(f"{run}/{request}/{i}".encode()).hexdigest() for i in range(blocks)]


class Shared:
    """What the rank processes share: a barrier and one int per rank (the MIN reduce)."""

    def __init__(self, ctx: Any, world: int) -> None:
        self.world = world
        self.barrier = ctx.Barrier(world)
        self.values = ctx.Array("q", world)

    def all_min(self, rank: int, v: int) -> int:
        self.values[rank] = v
        self.barrier.wait(timeout=120)
        m = min(self.values[:])
        self.barrier.wait(timeout=120)
        return m


class Rank:
    def __init__(
        self, rank: int, socket: str, shared: Shared, pages: int, offset: int, call_timeout_s: float = 20.0
    ) -> None:
        self.rank = rank
        self.shared = shared
        # As the SGLang backend runs it: the hook wakes the link's own thread.
        self.link = GroupLink(socket, rank, step_wait_s=0.0)
        self.core = HiCacheCore(self.link, call_timeout_s=call_timeout_s)
        self.link.start_hook_thread()
        shard = self.link.shard_bytes
        self.pool = tandem.PagePool.create(pages, shard)
        self.link.session.register_buffer(self.pool)
        self.pages = np.frombuffer(self.pool, np.uint8).reshape(pages, shard)
        self.shard = shard
        # Pages of rank r start at page offset: 0 everywhere is the leader's pages.
        self.offset = offset
        self.stop = threading.Event()
        self.steps = 0
        self.hook = threading.Thread(target=self.scheduler, daemon=True)
        self.hook.start()
        self.report: dict[str, Any] = {"rank": rank, "failures": [], "calls": [], "verified": 0}

    def scheduler(self) -> None:
        while not self.stop.is_set():
            self.steps += self.core.step()
            time.sleep(0.0005)

    def fill(self, ks: list[str], pages: list[int]) -> None:
        for k, p in zip(ks, pages):
            self.pages[p] = content(tandem.block_hash(k), self.rank, self.shard)

    def verify(self, ks: list[str], pages: list[int], ok: list[bool]) -> None:
        for k, p, good in zip(ks, pages, ok):
            if good:
                self.report["verified"] += 1
                if not np.array_equal(self.pages[p], content(tandem.block_hash(k), self.rank, self.shard)):
                    self.report["failures"].append(f"rank {self.rank}: page {p} does not hold {k[:12]}")

    def roundtrip(self, run: str, request: int, n: int, base: int) -> dict:
        """set → exists (MIN) → get into other pages → verify."""
        ks = keys(run, request, n)
        src = [self.offset + base + i for i in range(n)]
        dst = [self.offset + base + n + i for i in range(n)]
        self.fill(ks, src)
        self.pages[dst] = 0
        # SGLang backs a page up to storage only once every rank wrote it to its host pool
        # (writing_check takes the MIN over the ranks), and never writes a host page a
        # prefetch was given: a barrier stands for both.
        self.shared.all_min(self.rank, 0)
        t0 = time.monotonic()
        stored = self.core.set(ks, src)
        hit = self.shared.all_min(self.rank, self.core.exists(ks))
        loaded = self.core.get(ks[:hit], dst[:hit]) if hit else []
        self.verify(ks, dst, loaded)
        call = {"request": request, "stored": stored, "hit": hit, "loaded": loaded,
                "s": round(time.monotonic() - t0, 3)}
        self.report["calls"].append(call)
        print(f"rank {self.rank}: request {request} stored {sum(stored)} hit {hit} loaded {sum(loaded)}", flush=True)
        return call

    def drop_binds(self, drop: bool) -> None:
        """An engine that never binds (``drop``): the link takes its binds and does nothing
        with them, so the agent never hears of this rank's pages; or binds again."""
        def never_bind() -> None:
            self.link.ledger.take_binds()

        if drop:
            self.link.bind_pending = never_bind  # type: ignore[method-assign]
        elif "bind_pending" in vars(self.link):
            del self.link.bind_pending

    def timed(self, fn: Any, *args: Any) -> tuple[Any, float]:
        t0 = time.monotonic()
        out = fn(*args)
        return out, round(time.monotonic() - t0, 3)

    def close(self) -> None:
        self.stop.set()
        self.hook.join(timeout=5)
        self.report["stats"] = self.core.stats.as_dict()
        self.report["link"] = self.link.stats.as_dict()
        self.report["steps"] = self.steps
        self.report["epoch"] = self.link.epoch
        self.core.close()


def run(rank: int, socket: str, scenario: str, shared: Shared, out: Any, args: dict) -> None:
    logging.basicConfig(level=logging.WARNING)
    r = None
    try:
        r = Rank(rank, socket, shared, args.get("pages", 256), offset=rank * args.get("offset_per_rank", 0),
                 call_timeout_s=args.get("call_timeout_s", 20.0))
        shared.barrier.wait(timeout=120)
        n = args.get("blocks", 8)
        if scenario == "roundtrip":
            for q in range(args.get("requests", 6)):
                r.roundtrip(args["run"], q, n, base=(q % 4) * 2 * n)
        elif scenario == "repeat_exists":
            cap = args["capacity"]
            ks = keys(args["run"], 0, cap)
            r.fill(ks, list(range(cap)))
            r.shared.all_min(rank, 0)
            stored = [r.core.set(ks[i:i + 16], list(range(i, min(i + 16, cap)))) for i in range(0, cap, 16)]
            r.report["first_fill"] = [all(s) for s in stored]
            hits = []
            for rep in range(args["repeats"]):
                i = (rep * 16) % cap
                hits.append(r.shared.all_min(rank, r.core.exists(ks[i:i + 16])))
            r.report["hits"] = hits
            for q in range(1, 1 + cap // n):
                r.roundtrip(args["run"], 1000 + q, n, base=0)
        elif scenario == "kill":
            for q in range(args["requests"]):
                r.roundtrip(args["run"], q, n, base=(q % 4) * 2 * n)
                time.sleep(args.get("pause_s", 0.05))
        elif scenario == "no_bind":
            run_ = args["run"]
            r.roundtrip(run_, 0, n, base=0)
            r.drop_binds(rank == args["no_bind_rank"])
            ks = keys(run_, 0, n)
            dst = [r.offset + 2 * n + i for i in range(n)]
            r.pages[dst] = 0
            hit = shared.all_min(rank, r.core.exists(ks))
            loaded, s = r.timed(r.core.get, ks[:hit], dst[:hit])
            r.report["dropped_get"] = {"hit": hit, "loaded": loaded, "s": s}
            r.verify(ks, dst, loaded)
            ks = keys(run_, 1, n)
            src = [r.offset + 3 * n + i for i in range(n)]
            r.fill(ks, src)
            shared.all_min(rank, 0)
            stored, s = r.timed(r.core.set, ks, src)
            r.report["dropped_set"] = {"stored": stored, "s": s}
            r.drop_binds(False)
            shared.all_min(rank, 0)
            r.roundtrip(run_, 2, n, base=4 * n)
        shared.barrier.wait(timeout=120)
    except Exception:  # noqa: BLE001 (reported to the test)
        if r is not None:
            r.report["failures"].append(traceback.format_exc())
        else:
            out.put({"rank": rank, "failures": [traceback.format_exc()], "calls": []})
            return
    r.close()
    out.put(r.report)
