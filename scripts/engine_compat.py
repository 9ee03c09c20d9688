"""Drive tandem.sglang and tandem.vllm through the real engines' factories on a CPU-only
machine (run by scripts/engine-compat.sh, in its virtual environment with torch, sglang 0.5.23
and vllm 0.33.0). Prints one line per check ("ok ..." / "FAIL ...") and the figures.

What runs for real: SGLang's StorageBackendFactory.create_backend("dynamic", ...) building
TandemHiCacheStorage from a HiCacheStorageConfig on two rank threads; SGLang's own shm
allocator (alloc_shm: a memfd) and PageUnifiedLayout for the host pool, registered by
descriptor; batch_set_v1 / batch_exists / batch_get_v1 with torch host_indices; get_stats as
the step hook. vLLM's KVConnectorFactory resolving "TandemConnector" from
kv_connector_module_path, refusing it with the hybrid KV cache manager on, and both roles
built through create_connector; the scheduler and two workers stepped with real
KVConnectorOutput objects and CPU KV tensors.

What does not run here: SGLang's HostKVCache (it needs a device KV pool), its scheduler and
cache controller threads; vLLM's EngineCore, Scheduler and workers (CUDA kernels). Their
calls are made here in the order and on the threads those components use.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace as NS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "crates/tandem-py/tests"))

import torch  # noqa: E402

import tandem  # noqa: E402
from conftest import Cluster  # noqa: E402

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def model_of(cluster: Cluster) -> dict:
    cfg = tomllib.loads((Path(cluster.dir) / "tandem.toml").read_text())
    return {**cfg["model"], "tokens_per_block": cfg["group"]["tokens_per_block"]}


# ---------------------------------------------------------------- SGLang


def sglang(cluster: Cluster) -> None:
    import importlib.util

    import sglang.srt.mem_cache as mem_cache
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
    from sglang.srt.mem_cache.storage.mmap import alloc_shm

    # SGLang's own page_unified layout, loaded from its file: the pool_host package's
    # __init__ imports the device pools, which need torchvision and the GPU kernels.
    path = Path(list(mem_cache.__path__)[0]) / "pool_host" / "page_unified.py"
    spec = importlib.util.spec_from_file_location("sglang_page_unified", path)
    page_unified = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page_unified)
    PageUnifiedLayout = page_unified.PageUnifiedLayout

    m = model_of(cluster)
    tp = cluster.tp
    ps = m["tokens_per_block"]
    layout = PageUnifiedLayout(page_size=ps, layer_num=m["num_layers"], head_num=m["num_kv_heads"] // tp,
                               head_group_num=1, head_dim=m["head_dim"], itemsize=m["dtype_bytes"])
    pages = 64
    extra = {"backend_name": "tandem", "module_path": "tandem.sglang", "class_name": "TandemHiCacheStorage",
             "interface_v1": 1, "allocator": "shm", "sockets": cluster.sockets, "call_timeout_s": 20}

    def config(rank: int, metrics: bool = True) -> HiCacheStorageConfig:
        return HiCacheStorageConfig(tp_rank=rank, tp_size=tp, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                    attn_cp_size=1, is_mla_model=False, enable_storage_metrics=metrics,
                                    is_page_first_layout=False, model_name="compat", extra_config=extra)

    try:
        StorageBackendFactory.create_backend("dynamic", config(0, metrics=False), None)
        check(False, "sglang: a backend without --enable-metrics is refused")
    except ValueError as e:
        check("--enable-metrics" in str(e), f"sglang: refused without --enable-metrics: {e}")

    backends, hosts, stop = [], [], threading.Event()
    for r in range(tp):
        b = StorageBackendFactory.create_backend("dynamic", config(r), None)
        buf, fd, mm = alloc_shm(layout.page_dims(pages), torch.bfloat16 if m["dtype_bytes"] == 2 else torch.float32)
        host = NS(layout="page_unified", fd=fd, page_unified_layout=layout, page_size=ps, page_num=pages, kv_buffer=buf)
        b.register_mem_pool_host(host)
        backends.append(b)
        hosts.append((buf.view(torch.uint8).view(pages, -1), fd, mm))
    check(type(backends[0]).__name__ == "TandemHiCacheStorage",
          f"sglang: StorageBackendFactory built {type(backends[0]).__name__} for every rank ({tp})")

    hook_s: list[float] = []

    def hook(b) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            b.get_stats()  # check_hicache_events, once per scheduler iteration
            hook_s.append(time.perf_counter() - t0)
            time.sleep(0.0005)

    hooks = [threading.Thread(target=hook, args=(b,), daemon=True) for b in backends]
    for h in hooks:
        h.start()
    n = 8
    keys = [hashlib.sha256(f"compat/{i}".encode()).hexdigest() for i in range(n)]  # SGLang's keys: hex digests
    results: dict = {}

    def rank_calls(r: int) -> None:
        b, (view, _, _) = backends[r], hosts[r]
        src = torch.arange(0, n * ps, dtype=torch.int64)
        dst = torch.arange(n * ps, 2 * n * ps, dtype=torch.int64)
        for i in range(n):
            view[i] = (i * 7 + r * 31 + 1) % 251
        view[n: 2 * n] = 0
        # SGLang backs a page up only once every rank wrote it (writing_check takes the MIN
        # over the ranks) and never writes a page a prefetch was given: a barrier stands for both.
        barrier.wait(timeout=60)
        results[("set", r)] = b.batch_set_v1(keys, src)
        results[("exists", r)] = b.batch_exists(keys)
        t0 = time.perf_counter()
        results[("get", r)] = b.batch_get_v1(keys, dst)
        results[("get_s", r)] = time.perf_counter() - t0
        results[("bytes", r)] = all(bool((view[n + i] == (i * 7 + r * 31 + 1) % 251).all()) for i in range(n))

    barrier = threading.Barrier(tp)
    threads = [threading.Thread(target=rank_calls, args=(r,)) for r in range(tp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    hit = min(results[("exists", r)] for r in range(tp))
    check(all(results[("set", r)] == [True] * n for r in range(tp)), "sglang: batch_set_v1 on every rank: all pages stored")
    check(hit == n, f"sglang: batch_exists MIN over ranks = {hit} of {n}")
    check(all(results[("get", r)] == [True] * n for r in range(tp)), "sglang: batch_get_v1 on every rank: all pages loaded")
    check(all(results[("bytes", r)] for r in range(tp)), "sglang: every loaded byte right on every rank (torch views of the memfd)")
    shard = layout.bytes_per_page
    secs = max(results[("get_s", r)] for r in range(tp))
    print(f"figure sglang: batch_get_v1 of {n} pages x {shard} bytes: {secs * 1e3:.1f} ms, "
          f"{n * shard / secs / 1e6:.1f} MB/s per rank (zero-copy into the host pool)")
    stop.set()
    for h in hooks:
        h.join(timeout=5)
    steps = [b.core.link.stats.steps for b in backends]
    print(f"figure sglang: get_stats (the step hook) on the scheduler thread: median {sorted(hook_s)[len(hook_s) // 2] * 1e6:.0f} us "
          f"over {len(hook_s)} calls; frames sealed/read by rank {steps}")
    for b in backends:
        b.close()


# ---------------------------------------------------------------- vLLM


def vllm(cluster: Cluster, tmp: str) -> None:
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.outputs import KVConnectorOutput

    import tandem.vllm as tv

    m = model_of(cluster)
    tp, bs = cluster.tp, m["tokens_per_block"]
    ktc = KVTransferConfig(kv_connector="TandemConnector", kv_connector_module_path="tandem.vllm", kv_role="kv_both",
                           engine_id="compat", kv_connector_extra_config={
                               "sockets": cluster.sockets, "staging_pages": 64, "staging_dir": tmp})
    check(KVConnectorFactory.get_connector_class(ktc) is tv.TandemConnector,
          "vllm: KVConnectorFactory resolves TandemConnector from kv_connector_module_path")

    def vcfg(rank: int, hma_off: bool = True) -> NS:
        return NS(kv_transfer_config=ktc, scheduler_config=NS(disable_hybrid_kv_cache_manager=hma_off),
                  cache_config=NS(block_size=bs), parallel_config=NS(rank=rank))

    num_blocks = 32
    kvc = NS(num_blocks=num_blocks, prefix_cacheable_group_ids=(0,))
    try:
        KVConnectorFactory.create_connector(vcfg(0, hma_off=False), KVConnectorRole.WORKER, kvc)
        check(False, "vllm: refused with the hybrid KV cache manager on")
    except ValueError as e:
        check("--disable-hybrid-kv-cache-manager" in str(e), f"vllm: HMA on is refused: {e}")

    layers, heads, dim = m["num_layers"], m["num_kv_heads"] // tp, m["head_dim"]
    dtype = torch.bfloat16 if m["dtype_bytes"] == 2 else torch.float32
    workers, caches = [], []
    for r in range(tp):
        w = KVConnectorFactory.create_connector(vcfg(r), KVConnectorRole.WORKER, kvc)
        kv = {f"layer.{i}": torch.zeros(2, num_blocks, bs, heads, dim, dtype=dtype) for i in range(layers)}
        w.register_kv_caches(kv)
        workers.append(w)
        caches.append(kv)
    sched = KVConnectorFactory.create_connector(vcfg(0), KVConnectorRole.SCHEDULER, kvc)
    check(isinstance(sched, tv.TandemConnector), "vllm: create_connector built the scheduler and every worker")

    n = 4
    hashes = [bytes([7, i]) * 16 for i in range(n)]
    req = NS(request_id="req-1", block_hashes=hashes, num_tokens=n * bs + 1, num_computed_tokens=0)
    for r, kv in enumerate(caches):
        for i, t in enumerate(kv.values()):
            for b in range(n):
                t[:, b].view(torch.uint16 if m["dtype_bytes"] == 2 else torch.int32).fill_(1000 * r + 10 * i + b)

    step_s, bare_s = [], []

    def step() -> tuple[set, set, set]:
        t0 = time.perf_counter()
        meta = sched.build_connector_meta(None)
        step_s.append(time.perf_counter() - t0)
        sending, recving, errors = {}, {}, set()
        for w in workers:
            w.bind_connector_metadata(meta)
            s, rv = w.get_finished(set())
            for q in s or ():
                sending[q] = sending.get(q, 0) + 1
            for q in rv or ():
                recving[q] = recving.get(q, 0) + 1
            errors |= w.get_block_ids_with_load_errors()
            w.clear_connector_metadata()
        done_s = {q for q, c in sending.items() if c == tp}
        done_r = {q for q, c in recving.items() if c == tp}
        sched.update_connector_output(KVConnectorOutput(finished_sending=done_s, finished_recving=done_r))
        return done_s, done_r, errors

    delay, _ = sched.request_finished(req, list(range(n)))
    check(delay is True, "vllm: request_finished holds the blocks until the workers copied them out")
    sent = set()
    for _ in range(2000):
        s, _, _ = step()
        sent |= s
        if sched.scheduler.stats.stores_ok + sched.scheduler.stats.stores_failed:
            break
    check(sent == {"req-1"} and sched.scheduler.stats.stores_ok == 1, "vllm: the store copied out, reported by every worker, ok")
    for kv in caches:
        for t in kv.values():
            t.zero_()
    req2 = NS(request_id="req-2", block_hashes=hashes, num_tokens=n * bs + 1, num_computed_tokens=0)
    for _ in range(20):
        got, async_ = sched.get_num_new_matched_tokens(req2, 0)
    check((got, async_) == (n * bs, True), f"vllm: get_num_new_matched_tokens repeated 20 times = {got} tokens, async")
    dst = list(range(16, 16 + n))
    sched.update_state_after_alloc(req2, NS(get_block_ids=lambda: (dst,)), got)
    recvd, errs = set(), set()
    t0 = time.perf_counter()
    for _ in range(2000):
        _, rv, e = step()
        recvd |= rv
        errs |= e
        if "req-2" in recvd:
            break
    load_s = time.perf_counter() - t0
    check(recvd == {"req-2"} and not errs, "vllm: the load reported by every worker, no load errors")
    ok = all(
        bool((t[:, 16 + b].view(torch.uint16 if m["dtype_bytes"] == 2 else torch.int32) == 1000 * r + 10 * i + b).all())
        for r, kv in enumerate(caches) for i, t in enumerate(kv.values()) for b in range(n))
    check(ok, "vllm: every loaded block right in every worker's KV tensors")
    shard = workers[0].worker.copier.block_bytes
    # Staging → KV copy alone, many times, for a bytes/s figure.
    cp = workers[0].worker.copier
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        cp.from_staging(list(range(n)), dst)
    copy_s = (time.perf_counter() - t0) / reps
    with tandem.Client(cluster.sockets[1], 1):
        pass
    # The bare client's seal on the same leader session, for the per-step overhead figure.
    s = sched.scheduler.link.session
    for _ in range(200):
        t0 = time.perf_counter()
        try:
            s.end_step(deadline_s=0.002)
            s.ack()
        except tandem.WindowFull:
            pass
        bare_s.append(time.perf_counter() - t0)
        for w in workers[1:]:
            w.worker.link.step()
    for _ in range(200):
        step()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print(f"figure vllm: build_connector_meta median {med(step_s) * 1e6:.0f} us vs bare end_step+ack "
          f"{med(bare_s) * 1e6:.0f} us (ratio {med(step_s) / med(bare_s):.2f})")
    print(f"figure vllm: load of {n} blocks x {shard} bytes end to end {load_s * 1e3:.1f} ms; staging -> KV copy "
          f"{n * shard / copy_s / 1e6:.0f} MB/s (CPU tensors)")
    for c in [sched, *workers]:
        c.shutdown()


def main() -> int:
    c = Cluster(1, 2)
    try:
        c.wait_ready()
        for name, fn in (("sglang", lambda: sglang(c)), ("vllm", lambda: vllm(c, c.dir))):
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                check(False, f"{name}: {type(e).__name__}: {e}")
    finally:
        c.stop()
    print(f"engine-compat: {'FAILED: ' + '; '.join(failures) if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
