"""Layerwise loads from Python, on a real cluster (``tandem up``, pp 1 x tp 2; its model has one
layer per rank): the frame that starts the load carries the leader's plan, every rank's
``wait_layer`` returns once its layer is in its pages (the bytes verify), and the refusals are
the documented ``LayerError`` subclasses with their fields (docs/LAYERWISE.md)."""

from __future__ import annotations

import numpy as np
import pytest

import tandem
from conftest import Cluster

BLOCKS = 4


def step(s: tandem.Session, f: tandem.Session) -> tuple[tandem.Applied, tandem.Applied]:
    """The leader seals a step and acks; the follower reads the same frame and acks."""
    a = s.end_step(deadline_s=2.0)
    s.ack()
    while True:
        try:
            got = f.next_frame(deadline_s=2.0)
            break
        except tandem.LeaderBehind:
            continue
    f.ack()
    return a, got


def until(s: tandem.Session, f: tandem.Session, task: tandem.TaskId) -> tandem.TaskOutcome:
    for _ in range(200):
        a, _ = step(s, f)
        for d in a.outcomes:
            if d.outcome.task == task:
                return d.outcome
    pytest.fail(f"no outcome for {task}")


def test_a_layerwise_load_is_waited_for_layer_by_layer(tp2: Cluster) -> None:
    s = tandem.Session(tp2.sockets[0], 0)
    f = tandem.Session(tp2.sockets[1], 1)
    f.seek(s.step)
    shard = s.welcome.shard_bytes
    pools = [tandem.PagePool.create(2 * BLOCKS, shard) for _ in range(2)]
    s.register_buffer(pools[0])
    f.register_buffer(pools[1])
    views = [np.frombuffer(p, np.uint8).reshape(p.pages, -1) for p in pools]
    for rank, view in enumerate(views):
        for i in range(BLOCKS):
            view[i] = 10 * (rank + 1) + i
    keys = [f"layerwise-test-{i}".encode() for i in range(BLOCKS)]
    assert until(s, f, s.store(1, keys, list(range(BLOCKS)))).ok

    assert s.lookup(2, keys).matched_blocks == BLOCKS
    dst = list(range(BLOCKS, 2 * BLOCKS))
    task = s.load_layerwise(2, keys, dst, layer_timeout_s=5.0)
    a, got = step(s, f)
    for frame in (a.frame, got.frame):
        (plan,) = [p for p in frame.layerwise if p.task == task]
        assert (plan.layers, plan.order, plan.layer_timeout_ms) == (1, (0,), 5000)
    for rank, session in enumerate((s, f)):
        assert session.wait_layer(task, 0, deadline_s=5.0) == 1
        for i in range(BLOCKS):
            assert (views[rank][BLOCKS + i] == 10 * (rank + 1) + i).all(), (rank, i)

    with pytest.raises(tandem.LayerOutOfRange) as e:
        f.wait_layer(task, 1, deadline_s=1.0)
    assert (e.value.layer, e.value.layers, e.value.task) == (1, 1, f"{task.epoch}.{task.seq}")
    other = tandem.TaskId(task.epoch, task.seq + 100)
    with pytest.raises(tandem.LayerUnknownTask) as u:
        s.wait_layer(other, 0, deadline_s=1.0)
    assert isinstance(u.value, tandem.LayerError) and u.value.layer == 0
    assert until(s, f, task).ok
