"""One rank's link to its agent, as an engine plug-in drives it.

Owns a ``tandem.Session`` and a :class:`~tandem.adapter.ledger.Ledger`, and does three things:

- **The step hook** (:meth:`GroupLink.step`), called once per scheduler iteration on every
  rank, from a hook the engine calls on every rank alike (never from a rank-local condition):
  the leader seals the open step (``end_step``) and acknowledges it; a follower reads every
  frame already sealed (``next_frame``) and acknowledges each. Each frame's lookups, starts
  and outcomes go to the ledger, so calls waiting on other threads wake up.
- **The leader's requests** (:meth:`lookup`, :meth:`store`, :meth:`load`), one at a time,
  under the step lock so that a lookup and the load that follows it land in the same step.
- **Per-rank pages.** A task the leader starts without page ids (``pages_per_rank``) is
  copied on a rank only once that rank's engine bound its own pages (``Session.bind(task,
  page_ids)``, one page per block of the task in the order of the frame's ``block_hashes``:
  a store leaves out blocks already cached, so the pages come from the frame, never from the
  call). Every rank, the leader included, binds as soon as both the task's start (from a
  frame) and its own call are known. A task started with the leader's page ids is copied
  with those ids on every rank: a follower then checks that its own pages are the same and
  fails its call when they differ.

Every error of the session is turned into a settled slot or a log line: nothing here raises
into an engine's thread once the link is up. A ``NewEpoch`` moves the ledger to the
new epoch (:meth:`tandem.adapter.ledger.Ledger.new_epoch`); frame 0 settles the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

import tandem

from tandem.adapter.ledger import Ledger, Slot

__all__ = ["GroupLink", "LinkStats", "socket_of"]

log = logging.getLogger("tandem.adapter")


def socket_of(extra: dict, rank: int) -> str:
    """The agent socket of ``rank`` from extra_config; ``ValueError`` naming the keys."""
    if "sockets" in extra:
        sockets = extra["sockets"]
        if not 0 <= rank < len(sockets):
            raise ValueError(f"tandem: extra_config 'sockets' has {len(sockets)} entries, no rank {rank}")
        return str(sockets[rank])
    if "socket_template" in extra:
        return str(extra["socket_template"]).format(rank=rank)
    raise ValueError("tandem: extra_config needs 'socket_template' (with {rank}) or 'sockets'")


class LinkStats:
    """Counters of one link, for an engine's metrics: ``steps`` (frames sealed or read),
    ``step_ns`` (time in the step hook), ``window_full`` (seals refused because a follower
    lagged), ``new_epochs``, ``binds``, ``bind_errors``, ``errors`` (session errors turned
    into failed calls)."""

    def __init__(self) -> None:
        self.steps = 0
        self.step_ns = 0
        self.window_full = 0
        self.new_epochs = 0
        self.binds = 0
        self.bind_errors = 0
        self.errors = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class GroupLink:
    """The link of rank ``rank`` to the agent at ``socket`` (see the module docs).

    ``session``: an open ``tandem.Session`` to use instead of connecting (tests);
    ``step_wait_s``: how long the step hook may wait (the leader for the window, a follower
    for a frame) before returning; ``max_frames``: frames a follower reads per hook at most;
    ``pairing``: a follower pairs its calls with the frames by position (SGLang); ``False``
    for a follower that makes no calls of its own and learns its work otherwise (vLLM's
    workers, from the step's metadata), so that frames leave nothing behind in its ledger.

    Raises what ``tandem.Session`` raises when it cannot connect (at construction only)."""

    def __init__(
        self,
        socket: str = "",
        rank: int = 0,
        *,
        session: Optional[Any] = None,
        connect_timeout_s: float = 30.0,
        recovery_s: float = 60.0,
        step_wait_s: float = 0.002,
        max_frames: int = 64,
        pairing: bool = True,
    ) -> None:
        self.session = session if session is not None else tandem.Session(
            socket, rank, connect_timeout_s=connect_timeout_s, recovery_s=recovery_s
        )
        self.rank = self.session.rank
        self.leader = self.rank == 0
        self.ledger = Ledger(self.session.epoch, follower=not self.leader and pairing)
        self.step_wait_s = step_wait_s
        self.max_frames = max_frames
        self.stats = LinkStats()
        self.on_frame: Optional[Callable[[Any], None]] = None
        """Called with each ``Applied`` after the ledger took it (the vLLM scheduler)."""
        self._step_lock = threading.RLock()
        self._closed = False
        self._hook: Optional[threading.Thread] = None

    @property
    def shard_bytes(self) -> int:
        """Bytes of one block shard: the page size this rank's agent expects."""
        return self.session.welcome.shard_bytes

    @property
    def epoch(self) -> int:
        return self.ledger.epoch

    def step_lock(self) -> threading.RLock:
        """Held around calls that must land in one step (a lookup and its load)."""
        return self._step_lock

    # --- errors ---

    def _new_epoch(self, e: Exception) -> None:
        to = getattr(e, "to_epoch", None)
        epoch = to if isinstance(to, int) else self.session.epoch
        if epoch != self.ledger.epoch:
            n = self.ledger.new_epoch(epoch)
            self.stats.new_epochs += 1
            log.warning("rank %d: the group moved to epoch %d; %d open calls aborted", self.rank, epoch, n)

    def guard(self, what: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run a session call: ``(True, result)``, or ``(False, error)`` after turning a
        ``NewEpoch`` into the ledger's new epoch and logging anything else."""
        try:
            return True, fn()
        except tandem.NewEpoch as e:
            self._new_epoch(e)
            return False, e
        except Exception as e:  # noqa: BLE001 (an engine thread must never see it)
            self.stats.errors += 1
            log.warning("rank %d: %s failed: %s", self.rank, what, e)
            if self.session.epoch != self.ledger.epoch:
                self._new_epoch(e)
            return False, e

    # --- the step hook ---

    def apply(self, a: Any) -> None:
        """Give one ``Applied`` to the ledger (and :attr:`on_frame`)."""
        f = a.frame
        for lk in f.lookups:
            self.ledger.frame_lookup(lk)
        for s in f.stores:
            self.ledger.frame_start(s)
        for s in f.loads:
            self.ledger.frame_start(s)
        self.bind_pending()  # before any outcome: the agents wait for a bind, not for us
        for d in a.outcomes:
            self.ledger.frame_outcome(d.outcome)
        for r in a.not_started:
            self.ledger.not_started(r)
        self.stats.steps += 1
        if self.on_frame is not None:
            self.on_frame(a)

    def start_hook_thread(self) -> None:
        """Run each hook's work on a thread of the link's own: :meth:`step` then only wakes it
        (a few microseconds on the engine's scheduler thread) and returns the frames applied
        since the last call. Steps still come only from the engine's hook: at most one per
        hook, and hooks that come while the thread is still working merge into its next step.
        Used by the SGLang backend: a step is a round trip to the agent per frame (a poll with
        deadline 0 is answered at once, about 70 µs in a debug build), and the leader's seal
        waits for the completion log's append: neither belongs on the scheduler thread."""
        if self._hook is not None:
            return
        self._wake = threading.Event()
        self._done = 0
        self._done_lock = threading.Lock()
        self._hook = threading.Thread(target=self._hook_loop, name=f"tandem-hook-rank{self.rank}", daemon=True)
        self._hook.start()

    def _hook_loop(self) -> None:
        while not self._closed:
            if not self._wake.wait(0.5):
                continue
            self._wake.clear()
            n = self._step()
            with self._done_lock:
                self._done += n

    def step(self) -> int:
        """The step hook (see the module docs): frames applied by this call (with a hook
        thread: since the last call). Never raises."""
        if self._hook is not None:
            self._wake.set()
            with self._done_lock:
                done, self._done = self._done, 0
            return done
        return self._step()

    def _step(self) -> int:
        if self._closed:
            return 0
        t0 = time.monotonic_ns()
        applied = 0
        try:
            if self.leader:
                a = None
                with self._step_lock:
                    try:
                        a = self.session.end_step(deadline_s=self.step_wait_s)
                    except tandem.WindowFull:
                        self.stats.window_full += 1  # a follower lags: seal at the next hook
                    except tandem.NewEpoch as e:
                        self._new_epoch(e)
                    except Exception as e:  # noqa: BLE001
                        self.stats.errors += 1
                        log.warning("rank %d: end_step failed: %s", self.rank, e)
                if a is not None:
                    self.apply(a)
                    self.guard("ack", self.session.ack)
                    applied = 1
            else:
                while applied < self.max_frames:
                    try:
                        a = self.session.next_frame(deadline_s=self.step_wait_s)
                    except tandem.LeaderBehind:
                        break
                    except tandem.NewEpoch as e:
                        self._new_epoch(e)
                        break
                    except Exception as e:  # noqa: BLE001
                        self.stats.errors += 1
                        log.warning("rank %d: next_frame failed: %s", self.rank, e)
                        break
                    self.apply(a)
                    self.guard("ack", self.session.ack)
                    applied += 1
            self.bind_pending()
        finally:
            self.stats.step_ns += time.monotonic_ns() - t0
        return applied

    # --- per-rank pages ---

    def bind_pending(self) -> None:
        """Bind this rank's pages to every task whose start and call are both known: a task
        started without page ids takes this rank's own (leader and followers alike); a task
        started with the leader's page ids only needs them to equal this rank's."""
        for slot in self.ledger.take_binds():
            try:
                pages = slot.bind_pages()
            except KeyError as e:
                self.ledger.fail_local(slot, f"the task names block {e} this rank's call did not")
                continue
            started = list(slot.start.page_ids)
            if started or not pages:
                if started == pages:
                    self.ledger.checked(slot)  # the leader's pages are this rank's, or no block
                    continue
                # The agent copies the leader's page ids on this rank too: they must not be used.
                self.stats.bind_errors += 1
                self.ledger.fail_local(
                    slot,
                    "the task started with the leader's page ids and this rank's differ: "
                    f"leader {started[:8]}, here {pages[:8]}",
                )
                log.error("rank %d: %s", self.rank, slot.local_error)
                continue
            ok, err = self.guard("bind", lambda: self.session.bind(slot.task, pages))
            if ok:
                self.stats.binds += 1
                self.ledger.checked(slot)
            else:
                self.stats.bind_errors += 1
                self.ledger.fail_local(slot, f"bind failed: {err}")

    # --- the leader's requests ---

    def lookup(self, request: int, hashes: Sequence[int]) -> Optional[int]:
        """Leader: matched leading blocks of ``hashes`` (pinned for a load in this step), or
        ``None`` when the lookup failed."""
        ok, r = self.guard("lookup", lambda: self.session.lookup(request, hashes))
        return r.matched_blocks if ok else None

    def release(self, request: int) -> None:
        """Leader: give back the pins of ``request``'s lookup (a pin otherwise lasts until
        the step ends)."""
        self.guard("release", lambda: self.session.release(request))

    def start(
        self, kind: str, request: int, hashes: Sequence[int], pages: Sequence[int], *, pages_per_rank: bool = True
    ) -> Slot:
        """Leader: start a store or load of ``hashes`` from/into ``pages`` (this rank's page
        per block); its slot (settled ``"failed"`` at once when the request was refused).

        ``pages_per_rank``: start the task without page ids, so that every rank (this one
        too, from the frame :meth:`step` seals) binds its own pages; otherwise start it with
        ``pages``, which every rank's agent then uses. Under the step lock, so the slot is
        tracked before the frame that starts the task is applied."""
        call = self.session.store if kind == "store" else self.session.load
        ids = [] if pages_per_rank else list(pages)
        with self._step_lock:
            ok, task = self.guard(kind, lambda: call(request, hashes, ids))
            if not ok:
                slot = Slot(kind, request, self.ledger.epoch)
                slot.result, slot.reason = "failed", str(task)
                return slot
            return self.ledger.track(kind, request, task, dict(zip(hashes, pages)))

    def close(self) -> None:
        """Close the session (its tally is logged)."""
        if not self._closed:
            self._closed = True
            if self._hook is not None:
                self._wake.set()
                self._hook.join(timeout=5)
            try:
                tally = self.session.close()
                log.info("rank %d: session closed: %s", self.rank, tally)
            except Exception as e:  # noqa: BLE001
                log.warning("rank %d: close failed: %s", self.rank, e)
