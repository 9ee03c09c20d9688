"""The package as installed: keys, pools and their views, the exception classes, and bad input
against a real cluster (every refusal is the documented exception, never a crash, and the
agents stay ready and keep serving)."""

from __future__ import annotations

import errno
import hashlib
import importlib.resources
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tandem
from conftest import REPO, Cluster, http_get


def test_the_installed_wheel_is_imported_with_its_stubs() -> None:
    where = Path(tandem.__file__).resolve()
    assert "site-packages" in where.parts, where
    source = REPO / "crates" / "tandem-py" / "python"
    assert source not in where.parents, f"imported from the source tree: {where}"
    files = importlib.resources.files("tandem")
    for name in ("py.typed", "_tandem.pyi", "errors.py", "pool.py"):
        assert files.joinpath(name).is_file(), name


def test_block_hashes_from_ints_digests_and_hex() -> None:
    digest = hashlib.sha256(b"prefix").digest()
    assert tandem.block_hash(digest) == int.from_bytes(digest[:16], "big")
    assert tandem.block_hash(digest.hex()) == tandem.block_hash(digest)
    assert tandem.block_hash(digest.hex().upper()) == tandem.block_hash(digest)
    assert tandem.block_hash(2**128 - 1) == 2**128 - 1
    assert tandem.block_hash("00" * 15 + "2a") == 42
    # A short digest (a 64-bit xxhash) keeps its length in the top byte: never equal to the int.
    short = (42).to_bytes(8, "big")
    assert tandem.block_hash(short) == (0x88 << 120) | 42 != 42
    with pytest.raises(TypeError, match=r"key must be an int, bytes or hex str, not float"):
        tandem.block_hash(1.5)
    with pytest.raises(TypeError, match="not bool"):
        tandem.block_hash(True)
    with pytest.raises(ValueError, match=r"out of range: an int block hash is 0 .. 2\*\*128"):
        tandem.block_hash(2**128)
    with pytest.raises(ValueError, match="out of range"):
        tandem.block_hash(-1)
    with pytest.raises(ValueError, match="empty digest"):
        tandem.block_hash(b"")
    with pytest.raises(ValueError, match="not a hex digest"):
        tandem.block_hash("abc")


def test_pools_are_viewed_without_a_copy_and_refuse_to_close_under_a_view(tmp_path: Path) -> None:
    pool = tandem.PagePool.create(pages=4, page_size_bytes=64, path=tmp_path / "p")
    assert (pool.pages, pool.page_size_bytes, pool.size_bytes) == (4, 64, 256)
    assert pool.path == str(tmp_path / "p")
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, pool.page_size_bytes)
    view[2] = 9
    assert bytes(pool.page(2)) == b"\x09" * 64, "the numpy view writes the mapped pages"
    again = tandem.PagePool.attach(64, path=tmp_path / "p")
    assert bytes(again.page(2)) == b"\x09" * 64, "another mapping of the file sees it"
    again.close()
    with pytest.raises(tandem.PageOutOfRange) as e:
        pool.page(4)
    assert (e.value.page, e.value.pages) == (4, 4)
    with pytest.raises(BufferError):
        pool.close()
    del view
    pool.close()
    assert not (tmp_path / "p").exists(), "a created pool removes its file"
    with pytest.raises(tandem.Closed, match="the page pool is closed"):
        pool.page(0)
    with pytest.raises(tandem.PoolEmpty):
        tandem.PagePool.create(0, 64)
    fd = os.memfd_create("odd")
    os.ftruncate(fd, 100)
    with pytest.raises(tandem.PoolGeometry) as g:
        tandem.PagePool.attach(64, fd=fd)
    assert (g.value.size_bytes, g.value.page_size_bytes) == (100, 64)
    assert "100 bytes is not a whole number of 64-byte pages" in str(g.value)
    os.close(fd)
    with pytest.raises(tandem.DescriptorError) as d:
        tandem.PagePool.attach(64, fd=fd)
    assert d.value.errno == errno.EBADF
    with pytest.raises(TypeError, match="exactly one of path= and fd="):
        tandem.PagePool.attach(64)


def test_every_error_is_a_tandem_error_with_its_fields() -> None:
    for name in tandem.errors.__all__:
        assert issubclass(getattr(tandem, name), tandem.TandemError), name
    e = tandem.LeaderBehind("leader behind: ...", rank=1, epoch=3, wanted=812, sealed=790)
    assert (e.rank, e.epoch, e.wanted, e.sealed) == (1, 3, 812, 790)
    assert isinstance(e, tandem.AgentError) and str(e) == "leader behind: ..."


def test_blocking_calls_release_the_gil(tp2: Cluster) -> None:
    """A follower's frame call that waits 1 s for an unsealed step lets this thread run."""
    with tandem.Client(tp2.sockets[1], 1) as c:
        far = c.welcome.next_step + 1_000_000
        caught: list[BaseException] = []

        def wait() -> None:
            try:
                c.frame(far, deadline_s=1.0)
            except BaseException as e:  # noqa: BLE001 (handed to the main thread)
                caught.append(e)

        t = threading.Thread(target=wait)
        t.start()
        spins = 0
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            spins += 1
        t.join()
    assert len(caught) == 1 and isinstance(caught[0], tandem.LeaderBehind), caught
    behind = caught[0]
    assert (behind.rank, behind.wanted) == (1, far)
    assert behind.sealed is None or behind.sealed < far
    assert spins > 10_000, f"the main thread ran {spins} loops while the call waited"


def ready(c: Cluster) -> None:
    for rank, addr in enumerate(c.http):
        status, body = http_get(addr, "/readyz")
        assert status == 200, f"rank {rank} /readyz: {status} {body}"


def test_bad_input_raises_the_documented_exception_and_the_agents_stay_ready(
    tp2: Cluster, tmp_path: Path
) -> None:
    s = tandem.Session(tp2.sockets[0], 0)
    shard = s.welcome.shard_bytes

    # A page size that is not the shard size: refused, naming both numbers.
    wrong = tandem.PagePool.create(4, shard + 1)
    with pytest.raises(tandem.BufferRefused) as e:
        s.register_buffer(wrong)
    assert f"page size {shard + 1} bytes differs from the block shard size {shard} bytes" in str(e.value)
    wrong.close()
    # A region that is not a whole number of pages, and one smaller than claimed.
    fd = os.memfd_create("bad")
    os.ftruncate(fd, 2 * shard + 1)
    with pytest.raises(tandem.BufferRefused, match=f"size {2 * shard + 1} bytes is not a positive whole number of {shard}-byte pages"):
        s.register_buffer(fd, 2 * shard + 1, shard)
    with pytest.raises(tandem.BufferRefused, match=f"file holds {2 * shard + 1} bytes, need {4 * shard}"):
        s.register_buffer(fd, 4 * shard, shard)
    # A closed descriptor, and one that cannot be mapped (a pipe).
    os.close(fd)
    with pytest.raises(tandem.DescriptorError) as d:
        s.register_buffer(fd, 2 * shard, shard)
    assert d.value.fd == fd and d.value.errno == errno.EBADF
    r, w = os.pipe()
    with pytest.raises(tandem.BufferRefused, match="shared memory descriptor"):
        s.register_buffer(r, 2 * shard, shard)
    os.close(r)
    os.close(w)
    with pytest.raises(TypeError, match="a descriptor needs the region's size_bytes and page_size_bytes"):
        s.register_buffer(3)
    with pytest.raises(TypeError, match="takes a tandem.PagePool or a file descriptor"):
        s.register_buffer("pool")

    pool = tandem.PagePool.create(4, shard)
    assert s.register_buffer(pool) == 4
    # Keys and pages of the wrong type or range: nothing is sent.
    with pytest.raises(TypeError, match=r"block_hashes\[1\] must be an int, bytes or hex str, not float"):
        s.store(1, [1, 2.5], [0, 1])
    with pytest.raises(TypeError, match="must be a sequence"):
        s.lookup(1, "abcd")
    with pytest.raises(TypeError, match=r"page_ids\[0\] must be an int, not str"):
        s.store(1, [1], ["0"])
    with pytest.raises(ValueError, match=r"page_ids\[0\] = -1 is out of range"):
        s.store(1, [1], [-1])
    # A page past the registered pool: refused before anything is sent.
    with pytest.raises(tandem.PageOutOfRange) as p:
        s.store(1, [1], [4])
    assert (p.value.page, p.value.pages) == (4, 4)
    # Lists of different lengths: the agent refuses the request.
    with pytest.raises(tandem.BadRequest):
        s.store(1, [1, 2], [0])
    # A follower call on the leader, a leader call on a follower.
    f = tandem.Client(tp2.sockets[1], 1)
    with pytest.raises(tandem.NotLeader) as nl:
        f.end_step(f.welcome.next_step)
    assert nl.value.rank == 1
    f.close()
    ready(tp2)

    # The engine is still served: a store and its outcome.
    view = np.frombuffer(pool, np.uint8).reshape(pool.pages, -1)
    view[0] = 5
    follower = tandem.Session(tp2.sockets[1], 1)
    follower.seek(s.step)
    fpool = tandem.PagePool.create(4, shard)
    follower.register_buffer(fpool)
    task = s.store(7, [b"bad-input-test"], [0])
    settled = None
    for _ in range(200):
        a = s.end_step()
        s.ack()
        try:
            follower.next_frame(deadline_s=0.2)
            follower.ack()
        except tandem.LeaderBehind:
            pass
        settled = next((d.outcome for d in a.outcomes if d.outcome.task == task), None)
        if settled is not None:
            break
    assert settled is not None and settled.ok, settled
    del view

    # Calls after close.
    tally = s.close()
    assert tally is not None and tally["outcomes"] >= 1
    with pytest.raises(tandem.Closed, match="the session is closed"):
        s.end_step()
    with pytest.raises(tandem.Closed):
        s.register_buffer(pool)
    assert s.close() is None
    follower.close()
    c = tandem.Client(tp2.sockets[0], 0)
    c.close()
    with pytest.raises(tandem.Closed, match="the client is closed") as cl:
        c.hello()
    assert cl.value.what == "client"
    pool.close()
    fpool.close()
    with pytest.raises(tandem.Closed, match="the page pool is closed"):
        tandem.Session(tp2.sockets[0], 0).register_buffer(pool)
    ready(tp2)


def test_the_benchmark_runs_and_reports_every_figure() -> None:
    """``python -m tandem.bench`` on a tiny run (figures, not timings: nothing is asserted
    about speed)."""
    import json
    import subprocess
    import sys

    from conftest import tandem_bin

    done = subprocess.run(
        [sys.executable, "-m", "tandem.bench", "--tandem", str(tandem_bin()), "--steps", "40",
         "--rounds", "4", "--blocks", "2", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report["calls"]) == {"end_step", "frame (leader, again)", "frame (follower, first)",
                                    "frame (follower, again)", "ack (leader)"}
    for row in report["calls"].values():
        assert row["p50"]["rust_us"] > 0 and row["p50"]["python_us"] > 0, row
    for name in ("store", "load"):
        t = report["throughput"][name]
        assert t["rust_mb_s"] > 0 and t["python_mb_s"] > 0 and t["ratio"] > 0, t
