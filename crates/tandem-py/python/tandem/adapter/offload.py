"""The vLLM KV connector's logic, engine-free: the scheduler side and the worker side.

vLLM 0.33 runs one scheduler-side connector per engine (in EngineCore) and one worker-side
connector per GPU worker (one per PP × TP rank). Tandem's leader is rank 0's engine, so the
**scheduler side is the leader** (a session on rank 0's agent) and every **worker of rank
r > 0 is a follower** (a session on rank r's agent, reading the same frames). Worker 0 needs
no session of its own: its pages are registered by the scheduler, and it learns the frame
from the step's metadata.

Pages: the agents copy between the tier and a **staging pool** per worker (shared memory,
``staging_pages`` pages of one block shard each). The scheduler picks staging page ids, the
same on every worker (the pools have the same geometry), so no rank needs to bind pages of
its own; the workers copy between their GPU KV blocks and their staging pages.

One step ``s`` (the scheduler's ``build_connector_meta``, then the workers' forward):

1. Scheduler, while scheduling: ``lookup`` (``get_num_new_matched_tokens``: the leader's
   lookup, idempotent per request, repeated as often as vLLM asks), ``start_load``
   (``update_state_after_alloc``: staging pages, the load, in the same step as the lookup),
   ``finish`` (``request_finished``: staging pages for the request's full blocks; the GPU
   blocks stay held until the workers copied them out).
2. :meth:`SchedulerCore.build_meta` seals step ``s`` and returns :class:`StepMeta`, pickled
   to every worker: ``(epoch, step)``, the copies out (GPU → staging, for stores), the copies
   in (staging → GPU, for loads whose outcome was ``ok``) and the failed loads.
3. Each worker (:meth:`WorkerCore.bind`) reads frame ``s`` from its own agent and
   acknowledges it (rank 0: the scheduler did), copies, and reports through
   ``get_finished``: stores copied out (their GPU blocks may be freed) and loads settled;
   failed loads' GPU blocks through ``get_block_ids_with_load_errors``. vLLM counts a request
   only when every worker reported it.
4. Scheduler, ``update_connector_output``: for each request every worker copied out, it
   starts the Tandem store from the staging pages (sealed in step ``s + 1``); staging pages
   of a store go back when its outcome arrives, those of a load when every worker reported
   it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

import tandem

from tandem.adapter.group import GroupLink
from tandem.adapter.keys import request_id
from tandem.adapter.ledger import Slot

__all__ = ["StagingPages", "StepMeta", "SchedulerCore", "WorkerCore", "Copier", "OffloadStats"]

log = logging.getLogger("tandem.adapter")


class StagingPages:
    """A free list of ``pages`` staging page ids (the scheduler's; every worker's pool has the
    same geometry)."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self._free = list(range(pages - 1, -1, -1))

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self, n: int) -> Optional[list[int]]:
        """``n`` pages, or ``None`` when fewer are free (nothing taken)."""
        if n > len(self._free):
            return None
        return [self._free.pop() for _ in range(n)]

    def give(self, pages: Sequence[int]) -> None:
        self._free.extend(reversed(pages))


@dataclass
class StepMeta:
    """What the scheduler tells every worker about step ``step`` of ``epoch`` (pickled).

    ``copy_out``: request → (GPU block ids, staging pages), to copy GPU → staging now;
    ``copy_in``: request → (staging pages, GPU block ids), loads ``ok``, to copy staging → GPU
    now; ``load_failed``: request → GPU block ids of a load that did not finish ``ok``
    (recompute); ``sealed``: whether the scheduler sealed a frame for this step (``False``
    when the window was full or the group restarting: workers read nothing)."""

    epoch: int
    step: int
    sealed: bool
    copy_out: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    copy_in: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    load_failed: dict[str, list[int]] = field(default_factory=dict)


class OffloadStats:
    """Scheduler counters: ``lookups``, ``lookup_blocks_hit``, ``loads_started``,
    ``loads_ok``, ``loads_failed``, ``stores_planned``, ``stores_started``, ``stores_ok``,
    ``stores_failed``, ``staging_short`` (stores or loads skipped for want of staging
    pages), ``steps_unsealed``."""

    def __init__(self) -> None:
        for name in ("lookups", "lookup_blocks_hit", "loads_started", "loads_ok", "loads_failed",
                     "stores_planned", "stores_started", "stores_ok", "stores_failed",
                     "staging_short", "steps_unsealed"):
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Load:
    slot: Slot
    staging: list[int]
    gpu_blocks: list[int]


@dataclass
class _Store:
    hashes: list[int]
    staging: list[int]
    slot: Optional[Slot] = None


class SchedulerCore:
    """The scheduler side (the leader; see the module docs). ``link``: rank 0's link;
    ``staging_pages``: pages of every worker's staging pool; ``block_tokens``: tokens per
    KV block."""

    def __init__(self, link: GroupLink, staging_pages: int, block_tokens: int) -> None:
        if not link.leader:
            raise ValueError(f"the scheduler side is the leader (rank 0), not rank {link.rank}")
        self.link = link
        self.block_tokens = block_tokens
        self.staging = StagingPages(staging_pages)
        self.stats = OffloadStats()
        self._loads: dict[str, _Load] = {}
        self._loads_settled: dict[str, _Load] = {}
        self._stores: dict[str, _Store] = {}
        self._copy_out: dict[str, tuple[list[int], list[int]]] = {}

    @staticmethod
    def request(req_id: str) -> int:
        """The Tandem request id of vLLM request ``req_id``."""
        return request_id("vllm:" + req_id, ())

    # --- while scheduling ---

    def lookup(self, req_id: str, hashes: Sequence[Any], num_tokens: int, num_computed_tokens: int) -> int:
        """``get_num_new_matched_tokens``: tokens beyond ``num_computed_tokens`` the group
        can load, in whole blocks, leaving at least the prompt's last token to compute; 0 on
        any failure. Idempotent: the lookup may be repeated each step."""
        self.stats.lookups += 1
        hashes = [tandem.block_hash(h) for h in hashes]
        usable = min(len(hashes), max(num_tokens - 1, 0) // self.block_tokens)
        if usable * self.block_tokens <= num_computed_tokens:
            return 0
        n = self.link.lookup(self.request(req_id), hashes[:usable]) or 0
        self.stats.lookup_blocks_hit += n
        return max(n * self.block_tokens - num_computed_tokens, 0)

    def start_load(self, req_id: str, hashes: Sequence[Any], gpu_blocks: Sequence[int]) -> bool:
        """``update_state_after_alloc`` with external tokens: load ``hashes`` (the blocks after
        the computed ones) into staging, then GPU ``gpu_blocks``. ``False`` when it could not
        start (no staging pages, the load refused): the next step reports it failed."""
        hashes = [tandem.block_hash(h) for h in hashes]
        pages = self.staging.take(len(hashes))
        if pages is None:
            self.stats.staging_short += 1
            slot = Slot("load", self.request(req_id), self.link.epoch, result="failed",
                        reason="no staging pages")
            self._loads[req_id] = _Load(slot, [], list(gpu_blocks))
            return False
        slot = self.link.start("load", self.request(req_id), hashes, pages, pages_per_rank=False)
        self.stats.loads_started += 1
        self._loads[req_id] = _Load(slot, pages, list(gpu_blocks))
        return slot.result is None

    def finish(self, req_id: str, hashes: Sequence[Any], gpu_blocks: Sequence[int]) -> bool:
        """``request_finished``: plan the store of the request's full blocks (``hashes``, one
        per GPU block of ``gpu_blocks``, in order); ``True`` when the GPU blocks must stay held
        until the workers copied them out (``delay_free``)."""
        self.link.release(self.request(req_id))
        n = min(len(hashes), len(gpu_blocks))
        if n == 0:
            return False
        pages = self.staging.take(n)
        if pages is None:
            self.stats.staging_short += 1
            return False
        self._stores[req_id] = _Store([tandem.block_hash(h) for h in hashes[:n]], pages)
        self._copy_out[req_id] = (list(gpu_blocks[:n]), pages)
        self.stats.stores_planned += 1
        return True

    # --- the step ---

    def build_meta(self) -> StepMeta:
        """Seal the step and say what the workers do in it (see the module docs)."""
        sealed = self.link.step() > 0
        if not sealed:
            self.stats.steps_unsealed += 1
        step = self.link.session.last_applied if sealed else -1
        meta = StepMeta(self.link.epoch, step if step is not None else -1, sealed)
        meta.copy_out, self._copy_out = self._copy_out, {}
        for req_id, ld in list(self._loads.items()):
            if ld.slot.result is None:
                continue
            del self._loads[req_id]
            self._loads_settled[req_id] = ld
            if ld.slot.ok:
                self.stats.loads_ok += 1
                meta.copy_in[req_id] = (ld.staging, ld.gpu_blocks)
            else:
                self.stats.loads_failed += 1
                meta.load_failed[req_id] = ld.gpu_blocks
        for req_id, st in list(self._stores.items()):
            if st.slot is not None and st.slot.result is not None:
                del self._stores[req_id]
                self.staging.give(st.staging)
                if st.slot.ok:
                    self.stats.stores_ok += 1
                else:
                    self.stats.stores_failed += 1
        return meta

    def workers_done(self, sending: Sequence[str], recving: Sequence[str]) -> None:
        """``update_connector_output``: requests every worker reported. Copied out → start
        the store; load settled → its staging pages go back."""
        for req_id in sending:
            st = self._stores.get(req_id)
            if st is not None and st.slot is None:
                st.slot = self.link.start("store", self.request(req_id), st.hashes, st.staging,
                                              pages_per_rank=False)
                self.stats.stores_started += 1
        for req_id in recving:
            ld = self._loads_settled.pop(req_id, None)
            if ld is not None:
                self.staging.give(ld.staging)

    @property
    def in_flight(self) -> int:
        """Loads and stores not settled yet."""
        return len(self._loads) + len(self._stores)

    def close(self) -> None:
        self.link.close()


class Copier(Protocol):
    """A worker's copies between its KV blocks and its staging pages (torch in vLLM, numpy
    in tests)."""

    def to_staging(self, blocks: Sequence[int], pages: Sequence[int]) -> None: ...

    def from_staging(self, pages: Sequence[int], blocks: Sequence[int]) -> None: ...


class WorkerCore:
    """The worker side of rank ``rank`` (see the module docs). ``link``: this rank's link (a
    follower), or ``None`` for rank 0; ``copier``: the copies; ``frame_timeout_s``: the most
    a worker waits for the frame the metadata names."""

    def __init__(self, rank: int, link: Optional[GroupLink], copier: Copier, frame_timeout_s: float = 5.0) -> None:
        if (link is None) != (rank == 0):
            raise ValueError("rank 0's worker uses the scheduler's frame; every other rank a link of its own")
        self.rank = rank
        self.link = link
        self.copier = copier
        self.frame_timeout_s = frame_timeout_s
        self.meta: Optional[StepMeta] = None
        self.frames_missed = 0
        self._sending: set[str] = set()
        self._recving: set[str] = set()
        self._errors: set[int] = set()

    def bind(self, meta: StepMeta) -> None:
        """``bind_connector_metadata`` + ``start_load_kv``: read and acknowledge this rank's
        frame of the step, then copy out and in. Never raises."""
        self.meta = meta
        if self.link is not None and meta.sealed:
            self._read_frame(meta)
        try:
            for req_id, (blocks, pages) in meta.copy_out.items():
                self.copier.to_staging(blocks, pages)
                self._sending.add(req_id)
            for req_id, (pages, blocks) in meta.copy_in.items():
                self.copier.from_staging(pages, blocks)
                self._recving.add(req_id)
        except Exception as e:  # noqa: BLE001
            log.error("rank %d: staging copy failed: %s", self.rank, e)
            for req_id, (pages, blocks) in meta.copy_in.items():
                self._errors.update(blocks)
                self._recving.add(req_id)
        for req_id, blocks in meta.load_failed.items():
            self._errors.update(blocks)
            self._recving.add(req_id)

    def _read_frame(self, meta: StepMeta) -> None:
        """Read frames up to ``meta.step`` from this rank's agent and acknowledge them (the
        window of the leader moves only so)."""
        import time

        s = self.link.session
        end = time.monotonic() + self.frame_timeout_s
        while time.monotonic() < end:
            last = s.last_applied
            if s.epoch == meta.epoch and last is not None and last >= meta.step:
                return
            try:
                a = s.next_frame(deadline_s=min(0.05, self.frame_timeout_s))
            except tandem.LeaderBehind:
                continue
            except tandem.NewEpoch:
                continue
            except Exception as e:  # noqa: BLE001
                log.warning("rank %d: frame %d of epoch %d: %s", self.rank, meta.step, meta.epoch, e)
                break
            self.link.apply(a)
            self.link.guard("ack", s.ack)
        self.frames_missed += 1

    def finished(self) -> tuple[set[str], set[str]]:
        """``get_finished``: (requests copied out, requests whose load settled), each once."""
        out = (self._sending, self._recving)
        self._sending, self._recving = set(), set()
        return out

    def load_errors(self) -> set[int]:
        """``get_block_ids_with_load_errors``: GPU blocks of loads that failed, each once."""
        out, self._errors = self._errors, set()
        return out

    def close(self) -> None:
        if self.link is not None:
            self.link.close()
