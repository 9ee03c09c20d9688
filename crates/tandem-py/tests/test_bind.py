"""Per-rank page binding and per-request lookups from Python, on a real cluster (``tandem up``,
pp 1 x tp 2): the follower binds pages different from the leader's in a smaller pool and the
loaded bytes verify on both ranks; bad binds raise the documented ``BindRefused`` subclasses;
a request's repeated lookups hold one pin set, released by ``release``."""

from __future__ import annotations

import numpy as np
import pytest

import tandem
from conftest import Cluster, http_get

BLOCKS = 4


def step(s: tandem.Session, f: tandem.Session, binds: dict[int, list[int]]) -> tandem.Applied:
    """The leader seals a step; the follower reads it, binds its own pages for every task that
    started without page ids (``binds``: its pages by task kind, in block order), acks."""
    a = s.end_step(deadline_s=2.0)
    s.ack()
    while True:
        try:
            got = f.next_frame(deadline_s=2.0)
            break
        except tandem.LeaderBehind:
            continue
    for kind, starts in (("store", got.frame.stores), ("load", got.frame.loads)):
        for t in starts:
            if len(t.page_ids) == 0:
                f.bind(t.task, binds[kind][: len(t.block_hashes)])
    f.ack()
    return a


def until(s: tandem.Session, f: tandem.Session, task: tandem.TaskId, binds: dict) -> tandem.TaskOutcome:
    for _ in range(200):
        a = step(s, f, binds)
        for d in a.outcomes:
            if d.outcome.task == task:
                return d.outcome
    pytest.fail(f"no outcome for {task}")


def test_each_rank_binds_its_own_pages_and_bad_binds_raise(tp2: Cluster) -> None:
    s = tandem.Session(tp2.sockets[0], 0)
    f = tandem.Session(tp2.sockets[1], 1)
    f.seek(s.step)
    shard = s.welcome.shard_bytes
    pool = tandem.PagePool.create(16, shard)
    fpool = tandem.PagePool.create(8, shard)  # the follower's pool is smaller
    s.register_buffer(pool)
    f.register_buffer(fpool)
    keys = [f"bind-test-{i}".encode() for i in range(BLOCKS)]
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, -1)
    fview = np.frombuffer(fpool, np.uint8).reshape(fpool.pages, -1)
    for i in range(BLOCKS):
        view[i] = 10 + i  # the leader's blocks in pages 0..4
        fview[7 - i] = 20 + i  # the follower's in pages 7..4, reversed
    follower_pages = {"store": [7 - i for i in range(BLOCKS)], "load": list(range(BLOCKS))}

    task = s.store(1, keys, [])
    # Refusals name what is wrong and record nothing.
    with pytest.raises(tandem.BindCount) as c:
        s.bind(task, [0])
    assert (c.value.blocks, c.value.pages) == (BLOCKS, 1)
    with pytest.raises(tandem.PageOutOfRange):
        s.bind(task, [0, 1, 2, 16])  # past the pool: refused before anything is sent
    with pytest.raises(tandem.UnknownTask) as u:
        s.bind(tandem.TaskId(task.epoch, task.seq + 100), [0, 1, 2, 3])
    assert isinstance(u.value, tandem.BindRefused) and u.value.task == f"{task.epoch}.{task.seq + 100}"
    s.bind(task, [0, 1, 2, 3])
    s.bind(task, [0, 1, 2, 3])  # the same bind again: accepted
    with pytest.raises(tandem.AlreadyBound):
        s.bind(task, [3, 2, 1, 0])
    out = until(s, f, task, follower_pages)
    assert out.ok, out

    # Repeated lookups: one answer, one pin set, given back by release.
    first = s.lookup(2, keys)
    assert first.matched_blocks == BLOCKS
    for _ in range(50):
        assert s.lookup(2, keys).matched_blocks == BLOCKS
        step(s, f, follower_pages)
    assert s.release(2) == BLOCKS
    assert s.release(2) == 0

    # A load into pages each rank chose: the leader's 8..12, the follower's 0..4.
    assert s.lookup(3, keys).matched_blocks == BLOCKS
    load = s.load(3, keys, [])
    s.bind(load, [8, 9, 10, 11])
    out = until(s, f, load, follower_pages)
    assert out.ok, out
    for i in range(BLOCKS):
        assert (view[8 + i] == 10 + i).all(), f"leader page {8 + i}"
        assert (fview[i] == 20 + i).all(), f"follower page {i}"

    # The follower's pool is 8 pages: a bind past it raises, naming the pool.
    task = s.store(4, [b"bind-test-extra"], [])
    s.bind(task, [5])
    a = s.end_step(deadline_s=2.0)
    s.ack()
    got = f.next_frame(deadline_s=2.0)
    with pytest.raises(tandem.PageOutOfRange):
        f.bind(task, [8])
    f.bind(task, [0])
    f.ack()
    out = until(s, f, task, follower_pages)
    assert out.ok, out
    del view, fview, a, got
    for rank, addr in enumerate(tp2.http):
        status, body = http_get(addr, "/readyz")
        assert status == 200, f"rank {rank} /readyz: {status} {body}"
    s.close()
    f.close()
    pool.close()
    fpool.close()
