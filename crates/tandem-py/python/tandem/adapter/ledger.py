"""Pairs a rank's own calls with what the group's frames say about them.

A plug-in's calls (SGLang's ``batch_get_v1`` on a storage thread, say) wait for the group:
the leader's call for the outcome of the task it started, a follower's call for the leader's
lookup, the task's start (to bind its own pages) and its outcome. Frames arrive on another
thread (the step hook). The ledger is where the two meet, under one lock:

- A **slot** is one call: its kind (``"lookup"``, ``"store"``, ``"load"``), request id, and
  what the frames said (matched blocks, the task's start, its outcome).
- The leader knows its task ids (``store``/``load`` return them): :meth:`Ledger.track` files
  the slot under its task id (before the frame that starts it is applied), and starts and
  outcomes are found by task id.
- Every rank, the leader included, binds its own pages once its call and the task's start
  are both known (:meth:`Ledger.take_binds`); an outcome counts for a rank only after that.
- A follower knows only the request id both sides derive from the keys
  (:mod:`tandem.adapter.keys`). The k-th call of a (kind, request id) pairs with the k-th
  frame event of that kind and id (:meth:`Ledger.expect`), whichever comes first: every rank
  makes the same calls in the same order (SGLang and vLLM drive every rank alike), so
  positions agree. A call that timed out still takes its position, so later calls stay
  paired.
- A new epoch forgets every position (frames of the new epoch pair afresh). A call whose task
  this rank saw start waits for frame 0 of the new epoch, which settles every earlier task
  (redelivered outcome, aborted, or never started); a call whose task it never saw is settled
  ``"aborted"`` at once.

The ledger never talks to an agent and never blocks except in :meth:`Ledger.wait`, which
returns by its deadline.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from tandem.adapter.keys import is_paired

__all__ = ["Slot", "Ledger"]


@dataclass
class Slot:
    """One call and what the frames said about it.

    ``kind``: ``"lookup"``, ``"store"`` or ``"load"``; ``request``: the request id;
    ``epoch``: the epoch the call was made in; ``pages``: this rank's page per block hash
    (stores and loads; what a follower binds); ``matched``: a lookup's matched blocks;
    ``task``: the task id once known; ``start``: the task's ``TaskStart`` once a frame listed
    it; ``result``: ``"ok"``, ``"failed"``, ``"aborted"``, ``"not_started"``, or ``None``
    while open; ``reason``: the first failure reported; ``local_error``: why this rank fails
    the call itself (pages it cannot bind); ``abandoned``: its caller stopped waiting."""

    kind: str
    request: int
    epoch: int
    pages: dict[int, int] = field(default_factory=dict)
    matched: Optional[int] = None
    task: Any = None
    start: Any = None
    result: Optional[str] = None
    reason: Optional[str] = None
    local_error: Optional[str] = None
    bound: bool = False
    needs_check: bool = False
    checked: bool = False
    abandoned: bool = False

    @property
    def settled(self) -> bool:
        """A lookup has its match; a task its outcome, and (a follower's) its pages bound or
        checked: an outcome never counts for this rank before its own pages were."""
        if self.kind == "lookup":
            return self.matched is not None or self.result is not None
        return self.result is not None and (not self.needs_check or self.checked)

    @property
    def ok(self) -> bool:
        """The task's outcome is ``ok`` and this rank did not fail it itself."""
        return self.result == "ok" and self.local_error is None

    def bind_pages(self) -> list[int]:
        """This rank's page for each block of the started task, in the task's block order.

        Raises ``KeyError`` for a block the call did not name (a protocol violation)."""
        return [self.pages[h] for h in self.start.block_hashes]


class _Stream:
    """The slots of one (kind, request id), in call order; the next for a call and for a
    frame event."""

    __slots__ = ("slots", "local", "frame")

    def __init__(self) -> None:
        self.slots: deque[Slot] = deque()
        self.local = 0
        self.frame = 0

    def take(self, which: str, make) -> Slot:
        index = getattr(self, which)
        while len(self.slots) <= index:
            self.slots.append(make())
        setattr(self, which, index + 1)
        return self.slots[index]

    def prune(self) -> None:
        while self.local > 0 and self.frame > 0 and self.slots and self.slots[0].settled:
            self.slots.popleft()
            self.local -= 1
            self.frame -= 1


class Ledger:
    """The meeting point of calls and frames (see the module docs). ``follower``: pair by
    position (a follower) or by task id only (the leader). Thread-safe."""

    def __init__(self, epoch: int, follower: bool) -> None:
        self._cv = threading.Condition()
        self._epoch = epoch
        self._follower = follower
        self._streams: dict[tuple[str, int], _Stream] = {}
        self._by_task: dict[Any, Slot] = {}
        self._to_bind: list[Slot] = []

    @property
    def epoch(self) -> int:
        """The epoch whose frames the ledger pairs."""
        return self._epoch

    def open_slots(self) -> int:
        """Slots not settled yet (tasks by id and calls by position)."""
        with self._cv:
            n = sum(1 for s in self._by_task.values() if not s.settled)
            return n + sum(
                1 for st in self._streams.values() for s in st.slots if not s.settled and s.task is None
            )

    # --- calls ---

    def track(self, kind: str, request: int, task: Any, pages: Optional[dict[int, int]] = None) -> Slot:
        """The leader started ``task``; its outcome will be found by id."""
        with self._cv:
            slot = self._by_task.get(task)
            if slot is None:
                slot = Slot(kind, request, self._epoch, dict(pages or {}), task=task)
                if task.epoch != self._epoch:
                    slot.result, slot.reason = "aborted", "started in an earlier epoch"
                else:
                    self._by_task[task] = slot
            return slot

    def expect(self, kind: str, request: int, pages: Optional[dict[int, int]] = None) -> Slot:
        """A follower's call: the next slot of (``kind``, ``request``) in call order, with
        this rank's ``pages`` (block hash → page id). If the frame already listed the task's
        start, the slot is queued for binding (:meth:`take_binds`)."""
        with self._cv:
            stream = self._streams.setdefault((kind, request), _Stream())
            slot = stream.take("local", lambda: Slot(kind, request, self._epoch))
            slot.pages = dict(pages or {})
            if slot.start is not None and not slot.bound and kind != "lookup":
                slot.needs_check = True
                self._to_bind.append(slot)
            stream.prune()
            return slot

    def take_binds(self) -> list[Slot]:
        """Slots whose task started and whose pages are known, not bound yet (each once)."""
        with self._cv:
            out, self._to_bind = self._to_bind, []
            for s in out:
                s.bound = True
            return out

    def checked(self, slot: Slot) -> None:
        """This rank's pages for ``slot``'s task are bound (or are the leader's)."""
        with self._cv:
            slot.checked = True
            self._cv.notify_all()

    def fail_local(self, slot: Slot, why: str) -> None:
        """This rank cannot take part in ``slot``'s task (its pages cannot be bound)."""
        with self._cv:
            slot.local_error = why
            slot.checked = True
            self._cv.notify_all()

    def wait(self, slot: Slot, deadline_s: float) -> Slot:
        """Wait until ``slot`` is settled or failed locally, at most ``deadline_s`` seconds;
        the slot (marked abandoned when the deadline passed)."""
        end = time.monotonic() + deadline_s
        with self._cv:
            while not slot.settled and slot.local_error is None:
                left = end - time.monotonic()
                if left <= 0:
                    slot.abandoned = True
                    break
                self._cv.wait(left)
            return slot

    # --- frames ---

    def _slot_of(self, kind: str, request: int) -> Slot:
        stream = self._streams.setdefault((kind, request), _Stream())
        slot = stream.take("frame", lambda: Slot(kind, request, self._epoch))
        stream.prune()
        return slot

    def frame_lookup(self, lookup: Any) -> None:
        """A frame's ``LookupResult`` (followers pair it with their lookup calls)."""
        if not self._follower or not is_paired(lookup.request):
            return
        with self._cv:
            slot = self._slot_of("lookup", lookup.request)
            slot.matched = lookup.matched_blocks
            if slot.abandoned and slot.matched:
                # The call gave up before the leader's answer: the load that follows still
                # takes its position, so the next call of this id pairs with the next load.
                stream = self._streams.setdefault(("load", lookup.request), _Stream())
                stream.take("local", lambda: Slot("load", lookup.request, self._epoch)).abandoned = True
            self._cv.notify_all()

    def frame_start(self, start: Any) -> None:
        """A frame's ``TaskStart`` (a store or load the leader started): queued for binding
        (:meth:`take_binds`) when this rank's call is known."""
        with self._cv:
            slot = self._by_task.get(start.task)
            if slot is None:
                if not self._follower or start.task.epoch != self._epoch:
                    return
                slot = self._slot_of(start.kind, start.request)
                slot.task = start.task
                self._by_task[start.task] = slot
            slot.start = start
            if slot.pages and not slot.bound:
                slot.needs_check = True
                self._to_bind.append(slot)
            self._cv.notify_all()

    def frame_outcome(self, outcome: Any) -> None:
        """A task's ``TaskOutcome``, delivered once."""
        with self._cv:
            slot = self._by_task.pop(outcome.task, None)
            if slot is None:
                # A task refused before it started has an outcome and no start.
                if not self._follower or outcome.task.epoch != self._epoch:
                    return
                slot = self._slot_of(outcome.kind, outcome.request)
                slot.task = outcome.task
            slot.result, slot.reason = outcome.result, outcome.reason
            stream = self._streams.get((slot.kind, slot.request))
            if stream is not None:
                stream.prune()
            self._cv.notify_all()

    def not_started(self, requested: Any) -> None:
        """Frame 0 of a new epoch: a task the leader requested never started."""
        with self._cv:
            slot = self._by_task.pop(requested.task, None)
            if slot is not None:
                slot.result, slot.reason = "not_started", "the epoch ended before it started"
                self._cv.notify_all()

    def new_epoch(self, epoch: int) -> int:
        """The group moved to ``epoch``. A call whose task this rank saw start stays open:
        frame 0 of the new epoch settles it (redelivered, aborted or never started). Every
        other open call (paired by position, its task unknown here) is settled ``"aborted"``,
        and every position is forgotten. Returns how many calls were settled so."""
        with self._cv:
            if epoch == self._epoch:
                return 0
            n = 0
            for st in self._streams.values():
                for s in st.slots:
                    if not s.settled and s.task is None:
                        s.result, s.reason = "aborted", f"the group moved to epoch {epoch}"
                        n += 1
            self._streams.clear()
            self._to_bind.clear()
            self._epoch = epoch
            self._cv.notify_all()
            return n
