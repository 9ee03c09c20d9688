"""The leader's KV cache events, read by a real subscriber over ZeroMQ.

The subscriber decodes batches with vLLM's own msgspec wire types (an ``array_like`` batch of
tagged events), detects gaps by sequence number and repairs every one through the
replay socket, also when idle (a lost last message shows no gap until the next one). It drops
every fifth live message on purpose, so that repairs happen without waiting for a lost packet. A trace replay runs through a ``tandem up`` cluster while
the test kills a follower's agent and then the leader's; at the end the subscriber's view of
which blocks the group holds, and where, must equal rank 0's group index (``/index``).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional, Union

import msgspec
import pytest
import zmq

from conftest import Cluster, http_get, tandem_bin


# The wire types as vLLM (0.28, and its main branch when this was written) declares them in vllm/distributed/kv_events.py: the
# batch is array_like, each event a map tagged by its class name.
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Any]] = None
    group_idx: Optional[int] = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subscriber(threading.Thread):
    """SUB on the PUB address, DEALER on the replay address; keeps the view hash -> medium."""

    def __init__(self, pub: str, replay: str, topic: str = "kv-events", drop_every: int = 5):
        super().__init__(daemon=True)
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(pub)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.replay_addr = replay
        self.decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.drop_every = drop_every
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.view: dict[str, str] = {}
        self.last = -1
        self.received = 0
        self.dropped = 0
        self.gaps = 0
        self.repaired = 0
        self.unrepaired: list[tuple[int, int]] = []
        self.backwards = 0
        self.last_live = -1
        self.duplicates = 0
        self.restart_gaps = 0
        # Per gap: (first missing seq, the live seq that showed it or None when idle, the first
        # and last seq the replay returned, how it ended), for a failure's message.
        self.gap_log: list[tuple[Any, ...]] = []
        self.clears_at: list[int] = []
        self.pending = b""
        self.cleared = 0
        self.stored_blocks = 0
        self.bad_removals: list[str] = []
        self.errors: list[str] = []
        # Per block: (seq, what) of every event that named it, for a failure's message.
        self.history: dict[str, list[tuple[int, str]]] = {}

    def replay_from(self, start: int) -> list[tuple[int, bytes]]:
        """Every batch the replay socket holds from ``start`` on (DEALER: one request, many
        replies, then seq -1 with an empty payload)."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_addr)
        got: list[tuple[int, bytes]] = []
        try:
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if not dealer.poll(200):
                    continue
                _, seq, payload = dealer.recv_multipart()
                if not payload:
                    return got
                got.append((int.from_bytes(seq, "big"), payload))
            self.errors.append(f"replay from {start} did not end")
            return got
        finally:
            dealer.close(linger=0)

    def apply(self, seq: int, payload: bytes) -> None:
        if seq <= self.last:
            # Already applied from a replay (an idle check got it before the live copy).
            self.duplicates += 1
            return
        batch = self.decoder.decode(payload)
        with self.lock:
            for ev in batch.events:
                if isinstance(ev, AllBlocksCleared):
                    self.view.clear()
                    self.cleared += 1
                    self.clears_at.append(seq)
                elif isinstance(ev, BlockStored):
                    assert ev.block_size == 512 and ev.token_ids == [] and ev.lora_name is None
                    assert ev.medium in ("CPU", "STORAGE"), ev.medium
                    for h in ev.block_hashes:
                        self.view[bytes(h).hex()] = ev.medium
                        self.stored_blocks += 1
                        self.history.setdefault(bytes(h).hex(), []).append((seq, f"+{ev.medium}"))
                elif isinstance(ev, BlockRemoved):
                    for h in ev.block_hashes:
                        key = bytes(h).hex()
                        self.history.setdefault(key, []).append((seq, f"-{ev.medium}"))
                        if self.view.get(key) != ev.medium:
                            self.bad_removals.append(f"{key} from {ev.medium}: held {self.view.get(key)}")
                        self.view.pop(key, None)
            self.last = seq

    def starts_epoch(self, payload: bytes) -> bool:
        first = self.decoder.decode(payload).events[:1]
        return bool(first) and isinstance(first[0], AllBlocksCleared)

    def catch_up(self, upto: Optional[int]) -> None:
        """Fill the gap after the last batch applied (before ``upto``, or everything the replay
        socket holds) in order. Numbers no replay holds (a restarted leader's agent keeps only
        what it published, and the old one may have taken a number it never sent) are skipped
        only to a batch that starts a new epoch: its ``AllBlocksCleared`` makes them moot. That
        batch is either the live one that showed the gap, one in the replay, or, when the leader's
        agent restarted between the gap and the replay request, the first batch the new agent
        holds, past the gap: the old epoch's numbers are then lost with the old agent, and moot
        once that clear is applied (live or by a later repair)."""
        replayed = [(s, p) for s, p in self.replay_from(self.last + 1) if s > self.last]
        if upto is None and not replayed:
            return
        self.gaps += 1
        ends = (replayed[0][0], replayed[-1][0]) if replayed else ()
        first = (self.last + 1, upto, ends)
        skipped = False
        for seq, payload in replayed:
            if upto is not None and seq >= upto:
                break
            if seq != self.last + 1 and self.starts_epoch(payload):
                skipped = True
                self.last = seq - 1
            if seq == self.last + 1:
                self.apply(seq, payload)
        if upto is not None and self.last != upto - 1 and self.starts_epoch(self.pending):
            skipped = True
            self.last = upto - 1
        if upto is None or self.last == upto - 1:
            self.repaired += 0 if skipped else 1
            self.restart_gaps += 1 if skipped else 0
            self.gap_log.append((*first, "restart" if skipped else "repaired"))
        elif replayed and replayed[0][0] >= upto and self.starts_epoch(replayed[0][1]):
            self.restart_gaps += 1
            self.gap_log.append((*first, "restart, replay begins past the gap"))
            self.last = upto - 1
        else:
            self.unrepaired.append((self.last + 1, upto))
            self.gap_log.append((*first, "unrepaired"))
            self.last = upto - 1

    def run(self) -> None:
        for seq, payload in self.replay_from(0):
            self.apply(seq, payload)
        while not self.stop_flag.is_set():
            if not self.sub.poll(500):
                # Idle: a lost last message shows no gap until the next one, so ask the replay
                # socket for anything after the last batch applied, as a router would.
                self.catch_up(None)
                continue
            _, seq_bytes, payload = self.sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            self.received += 1
            if seq <= self.last_live:
                self.backwards += 1
            self.last_live = seq
            if self.drop_every and self.received % self.drop_every == 0:
                self.dropped += 1
                continue
            if seq > self.last + 1:
                self.pending = payload
                self.catch_up(seq)
            self.apply(seq, payload)

    def snapshot(self) -> dict[str, str]:
        with self.lock:
            return dict(self.view)

    def halt(self) -> None:
        """Ends the loop and waits for it: its counters are then final (a catch-up counts its
        gap before it repairs it, so they may be read mid-update while the loop runs)."""
        self.stop_flag.set()
        self.join(timeout=10)

    def stop(self) -> None:
        self.halt()
        self.sub.close(linger=0)
        self.ctx.term()


def index_of(cluster: Cluster) -> tuple[int, dict[str, str]]:
    status, body = http_get(cluster.http[0], "/index")
    assert status == 200, body
    import json

    doc = json.loads(body)
    return doc["epoch"], {h: m for h, m in doc["blocks"]}


def wait_batches(sub: Subscriber, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sub.last < n:
        assert time.monotonic() < deadline, f"only {sub.last + 1} batches seen"
        time.sleep(0.05)


def test_a_subscriber_repairs_every_gap_and_ends_with_the_group_index(tmp_path: Path) -> None:
    pub, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    env = {
        "TANDEM__EVENTS__ENABLED": "true",
        "TANDEM__EVENTS__PUB_ADDR": pub,
        "TANDEM__EVENTS__REPLAY_ADDR": replay,
        "TANDEM__EVENTS__BUFFER_BATCHES": "100000",
    }
    c = Cluster(1, 2, host_capacity=48, disk_capacity=48, env=env)
    sub: Optional[Subscriber] = None
    run: Optional[subprocess.Popen] = None
    try:
        epoch = c.wait_ready()
        sub = Subscriber(pub, replay)
        sub.start()
        wait_batches(sub, 0)
        out = open(tmp_path / "replay.log", "w")
        run = subprocess.Popen(
            [str(tandem_bin()), "replay", "--cluster-config", str(Path(c.dir) / "tandem.toml"),
             "--limit", "300"],
            stdout=out, stderr=subprocess.STDOUT,
        )
        for rank in (1, 0):
            wait_batches(sub, sub.last + 20)
            pid = c.agent_pid(rank)
            assert pid is not None, f"rank {rank}'s agent"
            import os
            import signal

            os.kill(pid, signal.SIGKILL)
            epoch = c.wait_ready(epoch_above=epoch)
        code = run.wait(timeout=300)
        log = (tmp_path / "replay.log").read_text()
        assert code == 0, log[-3000:]
        # Every batch of the last epoch reaches the subscriber (live or repaired); wait until
        # it has applied the last one the leader published.
        deadline = time.monotonic() + 30
        while True:
            index_epoch, index = index_of(c)
            view = sub.snapshot()
            if view == index or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        missing = sorted(set(index) - set(view))[:5]
        extra = sorted(set(view) - set(index))[:5]
        moved = sorted(h for h in set(view) & set(index) if view[h] != index[h])[:5]
        assert view == index, (
            f"epoch {index_epoch}: {len(index)} blocks in the index, {len(view)} in the view; "
            f"missing {missing}, extra {extra}, other medium {moved}; clears at {sub.clears_at}; "
            f"history {[(h, sub.history.get(h)) for h in missing + extra + moved]}; "
            f"gaps {sub.gaps} repaired {sub.repaired} at a restart {sub.restart_gaps}"
        )
        assert len(index) > 0
        sub.halt()
        assert sub.cleared >= 3, "one AllBlocksCleared per epoch (three epochs)"
        not_repaired = [g for g in sub.gap_log if g[-1] != "repaired"]
        counts = (
            f"gaps {sub.gaps}, repaired {sub.repaired}, at a restart {sub.restart_gaps}, "
            f"dropped {sub.dropped}, unrepaired {sub.unrepaired}, errors {sub.errors}, "
            f"clears at {sub.clears_at}, gaps not repaired {not_repaired}"
        )
        assert sub.dropped > 0 and sub.repaired > 0, counts
        assert sub.repaired + sub.restart_gaps == sub.gaps, counts
        assert sub.unrepaired == [], sub.unrepaired
        assert sub.backwards == 0 and sub.bad_removals == [] and sub.errors == []
        status, metrics = http_get(c.http[0], "/metrics")
        assert "tandem_event_replay_requests_total" in metrics
        print(f"events: {sub.received} received, {sub.dropped} dropped, {sub.gaps} gaps, "
              f"{sub.repaired} repaired, {sub.duplicates} duplicates, {sub.restart_gaps} gaps at a restart, {sub.cleared} clears, "
              f"{len(index)} blocks held")
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait()
        if sub is not None:
            sub.stop()
        c.stop()
