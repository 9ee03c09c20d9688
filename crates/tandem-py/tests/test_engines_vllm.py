"""The vLLM connector's logic (``tandem.adapter.offload``) on real local clusters: a scheduler
process (the leader) and one worker process per rank, the step's metadata pickled to the
workers, finished requests aggregated over every worker as vLLM does (``tests/vllm_ranks.py``).
Every loaded block is checked on every worker; lookups are repeated many times per request;
an agent killed mid-store leaves every request reported by every worker and no staging page
held."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import tandem
import vllm_ranks
from conftest import Cluster, http_get


def run(cluster: Cluster, tmp_path: Path, kill_rank: int | None = None, **args: object) -> tuple[dict, list[dict]]:
    ctx = multiprocessing.get_context("spawn")
    with tandem.Client(cluster.sockets[0], 0) as c:
        shard = c.welcome.shard_bytes
    args = {"shard": shard, "staging": 64, "blocks": 64, **args}
    path = vllm_ranks.staging_file(str(tmp_path))
    inboxes = [ctx.Queue() for _ in range(cluster.world)]
    outbox, result = ctx.Queue(), ctx.Queue()
    workers = [ctx.Process(target=vllm_ranks.worker, args=(r, cluster.sockets[r], path, inboxes[r], outbox, args))
               for r in range(cluster.world)]
    for w in workers:
        w.start()
    sched = ctx.Process(target=vllm_ranks.scheduler, args=(cluster.sockets, path, inboxes, outbox, result, args))
    sched.start()
    try:
        if kill_rank is not None:
            epoch = cluster.wait_ready()
            time.sleep(args.get("kill_at_s", 1.0))
            pid = cluster.agent_pid(kill_rank)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            cluster.wait_ready(epoch_above=epoch)
        report = result.get(timeout=300)
        workers_reports = vllm_ranks.drain_reports(outbox, cluster.world, timeout=60)
    finally:
        for p in [sched, *workers]:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    assert report["failures"] == [], report["failures"]
    for w in workers_reports:
        assert w["failures"] == [], w["failures"]
    return report, workers_reports


def test_vllm_pattern_tp2_every_block_on_every_worker(tp2: Cluster, tmp_path: Path) -> None:
    report, workers = run(tp2, tmp_path, run="vl-tp2", n=4, per_round=3, rounds=4, lookups=25)
    st = report["stats"]
    assert st["stores_ok"] == 12 and st["stores_failed"] == 0
    assert st["loads_ok"] == 12 and st["loads_failed"] == 0
    assert st["lookups"] == 12 * 25 and st["lookup_blocks_hit"] == 12 * 25 * 4
    assert report["staging_free"] == 64  # every staging page came back
    assert len(report["sent"]) == 12 and len(report["recvd"]) == 12
    assert report["load_errors"] == []
    assert [w["verified"] for w in workers] == [48, 48]
    assert [w["unchecked"] for w in workers] == [0, 0]
    assert [w["ledger_open"] for w in workers] == [0, 0]  # frames left nothing behind
    print("scheduler build_meta median (s):", report["step_s_median"])


def test_vllm_pattern_pp2_tp2(pp2tp2: Cluster, tmp_path: Path) -> None:
    report, workers = run(pp2tp2, tmp_path, run="vl-pp2", n=3, per_round=2, rounds=3, lookups=5)
    assert report["stats"]["loads_ok"] == 6 and report["staging_free"] == 64
    assert [w["verified"] for w in workers] == [18, 18, 18, 18]


def test_vllm_agent_killed_mid_store_every_request_reported(fresh_tp2: Cluster, tmp_path: Path) -> None:
    report, workers = run(fresh_tp2, tmp_path, kill_rank=1, kill_at_s=1.5, run="vl-kill", n=4,
                          per_round=3, rounds=30, lookups=3, step_pause=0.01)
    st = report["stats"]
    # Every store was copied out and reported by every worker, and settled once.
    assert len(report["sent"]) == 90 and st["stores_ok"] + st["stores_failed"] == 90
    # Every load started was reported by every worker (ok, or its blocks in load errors).
    assert st["loads_ok"] + st["loads_failed"] == st["loads_started"]
    assert report["staging_free"] == 64
    assert report["epoch"] > 1
    assert report["rounds"][-1]["loads"] == 3  # after the restart, the group stores and loads again
    print("after the kill:", st, "epoch", report["epoch"], "frames missed", [w["frames_missed"] for w in workers])
    assert all(http_get(h, "/readyz")[0] == 200 for h in fresh_tp2.http)
