"""The SGLang storage backend's logic (``tandem.adapter.hicache``) on real local clusters, one
process per rank, called the way SGLang 0.5.23 calls a backend (``tests/hicache_ranks.py``):
``exists`` on every rank then the MIN over ranks, ``get``/``set`` with each rank's pages,
the step hook on a scheduler thread of every rank. Every byte reported loaded is checked on
every rank; a repeated lookup holds no pin; an agent killed mid-store leaves every rank's
calls answered alike, by their deadline, and the group usable; every rank binds its own pages,
and a rank that never binds fails the calls on every rank alike."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from typing import Iterator

import pytest

import hicache_ranks
from conftest import Cluster, http_get


def start_ranks(cluster: Cluster, scenario: str, **args: object):
    ctx = multiprocessing.get_context("spawn")
    shared = hicache_ranks.Shared(ctx, cluster.world)
    out = ctx.Queue()
    procs = [ctx.Process(target=hicache_ranks.run, args=(r, cluster.sockets[r], scenario, shared, out, args))
             for r in range(cluster.world)]
    for p in procs:
        p.start()
    # The shared barrier must outlive the children's start (start() drops its arguments).
    out.shared = shared
    return procs, out


def finish(procs, out, timeout: float) -> list[dict]:
    reports = []
    try:
        for _ in procs:
            reports.append(out.get(timeout=timeout))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    reports.sort(key=lambda r: r["rank"])
    for r in reports:
        assert r["failures"] == [], r["failures"]
    return reports


def test_sglang_pattern_tp2_every_byte_on_every_rank(tp2: Cluster) -> None:
    procs, out = start_ranks(tp2, "roundtrip", run="sg-tp2", requests=6, blocks=8)
    reports = finish(procs, out, timeout=120)
    for r in reports:
        assert len(r["calls"]) == 6
        for c in r["calls"]:
            assert c["stored"] == [True] * 8, c
            assert c["hit"] == 8 and c["loaded"] == [True] * 8, c
        assert r["verified"] == 6 * 8
        assert r["stats"]["timeouts"] == 0
    # Every rank saw the same answers.
    assert reports[0]["calls"][0]["hit"] == reports[1]["calls"][0]["hit"]


def test_sglang_pattern_pp2_tp2_every_byte_on_every_rank(pp2tp2: Cluster) -> None:
    procs, out = start_ranks(pp2tp2, "roundtrip", run="sg-pp2", requests=4, blocks=5)
    reports = finish(procs, out, timeout=120)
    assert [r["verified"] for r in reports] == [20, 20, 20, 20]
    for r in reports:
        assert all(c["loaded"] == [True] * 5 for c in r["calls"]), r["calls"]


@pytest.fixture()
def small_tier() -> Iterator[Cluster]:
    """pp 1 × tp 2 with a host tier of 64 blocks a rank."""
    c = Cluster(1, 2, host_capacity=64)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


def test_repeated_lookups_hold_no_pin_and_the_tier_takes_new_stores(small_tier: Cluster) -> None:
    """Fill the 64-block tier, look every block up 300 times (SGLang's exists, on every
    rank), then store 64 new blocks: a leaked pin would leave blocks the tier cannot evict
    and the new stores refused."""
    procs, out = start_ranks(small_tier, "repeat_exists", run="sg-pins", capacity=64, repeats=300, blocks=8)
    reports = finish(procs, out, timeout=180)
    for r in reports:
        assert r["first_fill"] == [True] * 4, r
        assert r["hits"] == [16] * 300
        assert len(r["calls"]) == 8
        assert all(c["stored"] == [True] * 8 for c in r["calls"]), r["calls"]
        assert all(c["loaded"] == [True] * 8 for c in r["calls"]), r["calls"]


def test_agent_killed_mid_store_every_rank_answers_alike_and_recovers(fresh_tp2: Cluster) -> None:
    """SIGKILL rank 1's agent while the ranks store and load: every call returns (none
    raises, none outlives its deadline), the MIN over ranks agrees, bytes reported loaded are
    right on every rank, and requests after the restart store and load again. (A call in
    flight at the kill may end ok on one rank and aborted on another, when one engine read
    the frame with its outcome and the other's agent died first: SGLang takes the MIN of
    completed pages over the ranks, so that is the failed answer, as it should be.)"""
    c = fresh_tp2
    epoch = c.wait_ready()
    procs, out = start_ranks(c, "kill", run="sg-kill", requests=40, blocks=8, pause_s=0.05)
    time.sleep(1.5)
    pid = c.agent_pid(1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    c.wait_ready(epoch_above=epoch)
    reports = finish(procs, out, timeout=240)
    a, b = reports
    assert len(a["calls"]) == len(b["calls"]) == 40
    for x, y in zip(a["calls"], b["calls"]):
        assert x["hit"] == y["hit"], (x, y)
    assert all(max(x["s"] for x in r["calls"]) < 60 for r in reports)
    assert a["epoch"] > epoch and b["epoch"] > epoch
    # The last requests ran in the new epoch, end to end.
    assert all(x["stored"] == [True] * 8 and x["loaded"] == [True] * 8 for r in reports for x in r["calls"][-3:])
    assert all(http_get(h, "/readyz")[0] == 200 for h in c.http)


def test_every_rank_stores_and_loads_with_its_own_pages(tp2: Cluster) -> None:
    """Rank 1's host pages differ from the leader's (an offset of 100 pages). The leader starts
    each store and load without page ids and every rank binds its own: both ranks store and
    load, and every byte reported loaded is checked on every rank."""
    procs, out = start_ranks(tp2, "roundtrip", run="sg-differ", requests=3, blocks=4, offset_per_rank=100)
    reports = finish(procs, out, timeout=120)
    for r in reports:
        assert all(c["stored"] == [True] * 4 and c["loaded"] == [True] * 4 for c in r["calls"]), r["calls"]
        assert r["verified"] == 3 * 4
        # A store and a load a request, each bound on this rank (the leader's too).
        assert r["link"]["binds"] == 2 * 3 and r["link"]["bind_errors"] == 0, r["link"]
        assert r["stats"]["timeouts"] == 0


def test_a_follower_that_never_binds_fails_the_calls_on_every_rank_alike(tp2: Cluster) -> None:
    """After a first roundtrip, rank 1 drops its binds (an engine that never binds) for one
    get and one set. Its agent fails its shard at the bind deadline (5 s), so the group's
    outcome is failed: every rank's call returns False for every page, none raises, nothing
    is reported loaded; rank 1's own calls return at their deadline. The agents stay ready
    and the next roundtrip, with binds again, stores and loads on both ranks."""
    procs, out = start_ranks(tp2, "no_bind", run="sg-nobind", blocks=4, offset_per_rank=100,
                             no_bind_rank=1, call_timeout_s=12.0)
    reports = finish(procs, out, timeout=180)
    for r in reports:
        assert r["dropped_get"]["hit"] == 4, r
        assert r["dropped_get"]["loaded"] == [False] * 4, r
        assert r["dropped_set"]["stored"] == [False] * 4, r
        first, last = r["calls"]
        assert first["loaded"] == [True] * 4 and last["stored"] == [True] * 4 and last["loaded"] == [True] * 4
        assert r["verified"] == 8
    leader, follower = reports
    # The leader learnt the failure from the group's outcome; the follower's calls hit their deadline.
    assert leader["stats"]["timeouts"] == 0 and follower["stats"]["timeouts"] == 2
    assert all(http_get(h, "/readyz")[0] == 200 for h in tp2.http)
