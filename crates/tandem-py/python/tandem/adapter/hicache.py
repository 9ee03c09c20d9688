"""The SGLang HiCache storage backend's calls, engine-free: exists, get, set and the step.

SGLang builds one backend per rank process and calls it on every rank alike (facts of
sglang 0.5.23's ``cache_controller``):

- ``batch_exists(keys)`` on every rank's prefetch thread; SGLang then takes the MIN of the
  answers over the ranks (gloo ``all_reduce``). Here the **leader** answers with its lookup
  (the group's answer); a **follower** answers ``len(keys)``, so the MIN is the leader's
  answer. (The leader's lookup pins nothing that outlives the call: it is released at once.)
- ``batch_get_v1(keys, host_indices)`` for the agreed pages, on every rank, in the same order.
  The leader looks the keys up again and starts the load of the matched blocks in the same
  step (under the step lock); the frame lists the lookup and the load. A follower pairs its
  call with that lookup and load by request id (:mod:`tandem.adapter.ledger`). Every rank,
  the leader included, binds its own pages (below). Every rank returns ``True`` for the
  first ``matched`` pages exactly when the group's outcome is ``ok``; the rest are ``False``.
- ``batch_set_v1(keys, host_indices)`` on the storage writers (every rank for MHA; for MLA
  only the writer of each pipeline stage). The leader starts the store; followers pair.
- **Pages per rank (MHA).** The leader starts every store and load without page ids; each
  rank binds its own ``host_indices`` pages for the blocks the frame lists (a store leaves out
  blocks already cached), so the ranks' host pages may differ. A rank that never binds fails
  its shard at the agents' bind deadline, and the task fails on every rank.
- **MLA** (``pages_per_rank=False``): a non-writer never gets ``batch_set_v1``, so it could
  not bind; the leader starts tasks with its own page ids, which every rank's agent uses (an
  MLA host pool is a replica of its stage writer's). A follower whose pages differ fails its
  call.
- The step: :meth:`HiCacheCore.step`, from the once-per-scheduler-iteration hook on every rank.

Every call returns by ``call_timeout_s``; it never raises into SGLang's threads (SGLang never
restarts a prefetch or backup thread that raised): failures are ``False`` pages, logged.

Pages are page ids of the rank's registered host pool (``page_unified`` layout: one page one
contiguous shard); the engine class turns ``host_indices`` into them.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import tandem

from tandem.adapter.group import GroupLink
from tandem.adapter.keys import request_id

__all__ = ["HiCacheCore", "HiCacheStats"]

log = logging.getLogger("tandem.adapter")


class HiCacheStats:
    """Counters for an engine operator, pages unless named: ``exists_calls``,
    ``exists_hit`` (pages the group had), ``exists_asked``; ``get_ok``, ``get_failed``;
    ``set_ok``, ``set_failed``; ``timeouts`` (calls that returned at their deadline);
    ``bytes_loaded``, ``bytes_stored`` (this rank's shard bytes)."""

    def __init__(self) -> None:
        self.exists_calls = 0
        self.exists_hit = 0
        self.exists_asked = 0
        self.get_ok = 0
        self.get_failed = 0
        self.set_ok = 0
        self.set_failed = 0
        self.timeouts = 0
        self.bytes_loaded = 0
        self.bytes_stored = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class HiCacheCore:
    """One rank's backend logic over ``link`` (see the module docs).

    ``writer``: SGLang's ``is_storage_writer`` for this rank; ``pages_per_rank``: every rank
    binds its own pages (MHA; ``False`` for MLA, see the module docs); ``call_timeout_s``: the
    most a get or set waits for the group's outcome."""

    def __init__(
        self, link: GroupLink, *, writer: bool = True, pages_per_rank: bool = True, call_timeout_s: float = 30.0
    ) -> None:
        self.link = link
        self.writer = writer
        self.pages_per_rank = pages_per_rank
        self.call_timeout_s = call_timeout_s
        self.stats = HiCacheStats()

    @property
    def leader(self) -> bool:
        return self.link.leader

    def step(self) -> int:
        """The per-iteration step hook; frames applied. Never raises."""
        return self.link.step()

    # --- calls ---

    def exists(self, keys: Sequence[Any]) -> int:
        """How many leading ``keys`` the group holds (the leader's answer; a follower's is
        ``len(keys)``, see the module docs). Never raises: 0 on any failure."""
        self.stats.exists_calls += 1
        self.stats.exists_asked += len(keys)
        if not keys:
            return 0
        if not self.leader:
            return len(keys)
        try:
            hashes = [tandem.block_hash(k) for k in keys]
            request = request_id("exists", hashes, paired=False)
            with self.link.step_lock():
                n = self.link.lookup(request, hashes)
                self.link.release(request)
        except Exception as e:  # noqa: BLE001
            log.warning("exists of %d keys failed: %s", len(keys), e)
            return 0
        self.stats.exists_hit += n or 0
        return n or 0

    def get(self, keys: Sequence[Any], pages: Sequence[int]) -> list[bool]:
        """Load ``keys`` into this rank's ``pages`` (one page per key); per page, whether it
        now holds its block. Never raises."""
        try:
            out = self._get([tandem.block_hash(k) for k in keys], list(pages))
        except Exception as e:  # noqa: BLE001
            log.warning("get of %d pages failed: %s", len(keys), e)
            out = [False] * len(keys)
        good = sum(out)
        self.stats.get_ok += good
        self.stats.get_failed += len(out) - good
        self.stats.bytes_loaded += good * self.link.shard_bytes
        return out

    def _get(self, hashes: list[int], pages: list[int]) -> list[bool]:
        if len(hashes) != len(pages):
            raise ValueError(f"{len(hashes)} keys and {len(pages)} pages")
        if not hashes:
            return []
        request = request_id("get", hashes)
        ledger = self.link.ledger
        if self.leader:
            with self.link.step_lock():
                n = self.link.lookup(request, hashes)
                if not n:
                    return [False] * len(hashes)
                slot = self.link.start(
                    "load", request, hashes[:n], pages[:n], pages_per_rank=self.pages_per_rank
                )
        else:
            found = ledger.wait(ledger.expect("lookup", request), self.call_timeout_s)
            if not found.settled or not found.matched:
                self.stats.timeouts += int(not found.settled)
                return [False] * len(hashes)
            n = found.matched
            slot = ledger.expect("load", request, dict(zip(hashes[:n], pages[:n])))
            self.link.bind_pending()
        slot = ledger.wait(slot, self.call_timeout_s)
        self.stats.timeouts += int(slot.abandoned)
        return [slot.ok] * n + [False] * (len(hashes) - n)

    def set(self, keys: Sequence[Any], pages: Sequence[int]) -> list[bool]:
        """Store ``keys`` from this rank's ``pages``; per page, whether the group holds its
        block now (a block already held counts). Never raises."""
        try:
            out = self._set([tandem.block_hash(k) for k in keys], list(pages))
        except Exception as e:  # noqa: BLE001
            log.warning("set of %d pages failed: %s", len(keys), e)
            out = [False] * len(keys)
        good = sum(out)
        self.stats.set_ok += good
        self.stats.set_failed += len(out) - good
        self.stats.bytes_stored += good * self.link.shard_bytes
        return out

    def _set(self, hashes: list[int], pages: list[int]) -> list[bool]:
        if len(hashes) != len(pages):
            raise ValueError(f"{len(hashes)} keys and {len(pages)} pages")
        if not hashes:
            return []
        request = request_id("set", hashes)
        ledger = self.link.ledger
        if self.leader:
            slot = self.link.start("store", request, hashes, pages, pages_per_rank=self.pages_per_rank)
        else:
            slot = ledger.expect("store", request, dict(zip(hashes, pages)))
            self.link.bind_pending()
        slot = ledger.wait(slot, self.call_timeout_s)
        self.stats.timeouts += int(slot.abandoned)
        return [slot.ok] * len(hashes)

    def close(self) -> None:
        self.link.close()
