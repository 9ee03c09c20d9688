"""Tandem as a vLLM KV connector (vllm 0.33.0 only; importing this module on another version
raises :class:`tandem.adapter.versions.UnsupportedEngineVersion`).

Launch (docs/ENGINES.md has the whole command)::

    --disable-hybrid-kv-cache-manager --kv-transfer-config '{
        "kv_connector": "TandemConnector", "kv_connector_module_path": "tandem.vllm",
        "kv_role": "kv_both", "kv_connector_extra_config": {
            "socket_template": "/run/tandem/rank{rank}.sock", "staging_pages": 4096}}'

- The **scheduler side** (one per engine) is the Tandem leader: a session on rank 0's agent.
- Each **worker** (global rank ``r``: PP stage × TP size + TP rank) has a staging pool in
  shared memory (``staging_pages`` pages of one block shard: every layer's K and V of one
  block on that rank) and copies between its GPU KV blocks and those pages. Workers of rank
  ``r > 0`` are followers (a session on agent ``r``); worker 0's pool is a file in /dev/shm
  that the scheduler registers with agent 0.
- The hybrid KV cache manager is refused (``--disable-hybrid-kv-cache-manager``): this
  connector does not implement ``SupportsHMA``.
- The logic (lookups, staging pages, the step's metadata, outcomes) is
  :mod:`tandem.adapter.offload`; this class converts vLLM's arguments and copies tensors.

extra_config keys: ``socket_template`` or ``sockets``; ``staging_pages`` (1024);
``staging_dir`` (/dev/shm); ``connect_timeout_s`` (30), ``recovery_s`` (60),
``step_wait_s`` (0.002), ``frame_timeout_s`` (5).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional, Sequence

from tandem.adapter.versions import require

require("vllm")

import torch  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # noqa: E402
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

import tandem  # noqa: E402
from tandem.adapter.group import GroupLink, socket_of  # noqa: E402
from tandem.adapter.offload import SchedulerCore, StepMeta, WorkerCore  # noqa: E402

__all__ = ["TandemConnector", "TandemMetadata", "TorchCopier", "staging_path"]

log = logging.getLogger("tandem.vllm")


def staging_path(extra: dict, engine_id: str, rank: int) -> str:
    """Where worker ``rank`` of engine ``engine_id`` keeps a staging pool others open by path
    (rank 0's, which the scheduler registers)."""
    return os.path.join(extra.get("staging_dir", "/dev/shm"), f"tandem-vllm-{engine_id}-rank{rank}")


class TandemMetadata(KVConnectorMetadata):
    """The step's metadata, pickled to every worker: a :class:`StepMeta`."""

    def __init__(self, step: StepMeta) -> None:
        self.step = step


class TorchCopier:
    """Copies between the worker's KV caches (one tensor per layer, any layout with one axis
    of ``num_blocks``) and staging pages (each page: every layer's bytes of one block, in
    layer order)."""

    def __init__(self, kv_caches: dict[str, torch.Tensor], num_blocks: int, pool: "tandem.PagePool") -> None:
        self.layers = []
        offset = 0
        for name, t in kv_caches.items():
            axes = [i for i, d in enumerate(t.shape) if d == num_blocks]
            if not axes:
                raise ValueError(f"tandem: layer {name} of shape {tuple(t.shape)} has no axis of {num_blocks} blocks")
            view = t.movedim(axes[0], 0)
            nbytes = view[0].numel() * t.element_size()
            self.layers.append((view, offset, nbytes))
            offset += nbytes
        self.block_bytes = offset
        self.pool = pool
        self.staging = torch.frombuffer(pool, dtype=torch.uint8).view(pool.pages, pool.page_size_bytes)

    def to_staging(self, blocks: Sequence[int], pages: Sequence[int]) -> None:
        idx, dst = list(blocks), torch.tensor(list(pages), dtype=torch.long)
        for view, off, n in self.layers:
            data = view[idx].contiguous().view(torch.uint8).reshape(len(idx), n).cpu()
            self.staging[dst, off : off + n] = data

    def from_staging(self, pages: Sequence[int], blocks: Sequence[int]) -> None:
        idx, src = list(blocks), torch.tensor(list(pages), dtype=torch.long)
        for view, off, n in self.layers:
            raw = self.staging[src, off : off + n].to(view.device)
            view[idx] = raw.view(view.dtype).reshape((len(idx),) + tuple(view.shape[1:]))


class TandemConnector(KVConnectorBase_V1):
    """The connector (see the module docs). Raises ``ValueError`` at construction for a
    configuration it cannot serve, naming the flag or key."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        if not vllm_config.scheduler_config.disable_hybrid_kv_cache_manager:
            raise ValueError("tandem: start vLLM with --disable-hybrid-kv-cache-manager "
                             "(TandemConnector does not implement SupportsHMA)")
        ktc = vllm_config.kv_transfer_config
        self.extra = dict(ktc.kv_connector_extra_config or {})
        self.engine_id = str(ktc.engine_id)
        self.block_tokens = vllm_config.cache_config.block_size
        self.staging_pages = int(self.extra.get("staging_pages", 1024))
        self.scheduler: Optional[SchedulerCore] = None
        self.worker: Optional[WorkerCore] = None
        if role == KVConnectorRole.SCHEDULER:
            link = self._link(0)
            path = staging_path(self.extra, self.engine_id, 0)
            deadline = time.monotonic() + float(self.extra.get("connect_timeout_s", 30.0))
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.05)
            link.session.register_buffer(tandem.PagePool.attach(link.shard_bytes, path=path))
            self.scheduler = SchedulerCore(link, self.staging_pages, self.block_tokens)

    def _link(self, rank: int) -> GroupLink:
        e = self.extra
        return GroupLink(socket_of(e, rank), rank, pairing=False,
                         connect_timeout_s=float(e.get("connect_timeout_s", 30.0)),
                         recovery_s=float(e.get("recovery_s", 60.0)),
                         step_wait_s=float(e.get("step_wait_s", 0.002)))

    # --- worker side ---

    def _worker_rank(self) -> int:
        """This worker's global rank: PP rank × TP size + TP rank (vLLM's parallel groups, or
        ``parallel_config.rank`` where they are not initialised)."""
        try:
            from vllm.distributed.parallel_state import get_pp_group, get_tp_group

            tp, pp = get_tp_group(), get_pp_group()
            return pp.rank_in_group * tp.world_size + tp.rank_in_group
        except (AssertionError, ImportError, AttributeError):
            return int(self._vllm_config.parallel_config.rank)

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        rank = self._worker_rank()
        num_blocks = self._kv_cache_config.num_blocks
        block_bytes = sum(t.numel() * t.element_size() // num_blocks for t in kv_caches.values())
        if rank == 0:
            path = staging_path(self.extra, self.engine_id, 0)
            pool = tandem.PagePool.create(self.staging_pages, block_bytes, path=path)
            link = None
        else:
            link = self._link(rank)
            if link.shard_bytes != block_bytes:
                raise ValueError(f"tandem: rank {rank}'s KV block is {block_bytes} bytes on this worker and "
                                 f"{link.shard_bytes} bytes in the agent's layout (tandem.toml [model])")
            pool = tandem.PagePool.create(self.staging_pages, block_bytes, name=f"tandem-staging-rank{rank}")
            link.session.register_buffer(pool)
        copier = TorchCopier(kv_caches, num_blocks, pool)
        self.worker = WorkerCore(rank, link, copier, float(self.extra.get("frame_timeout_s", 5.0)))

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self.worker is not None and isinstance(connector_metadata, TandemMetadata):
            self.worker.bind(connector_metadata.step)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """The copies ran when the metadata was bound (whole blocks, before the forward)."""

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Loads are whole blocks, copied before the forward."""

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        """Stores copy finished requests' blocks, not layers during the forward."""

    def wait_for_save(self) -> None:
        """Nothing is saved during the forward."""

    def get_finished(self, finished_req_ids: set[str]) -> tuple[Optional[set[str]], Optional[set[str]]]:
        if self.worker is None:
            return None, None
        sending, recving = self.worker.finished()
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker.load_errors() if self.worker is not None else set()

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.scheduler is not None:
            self.scheduler.close()

    # --- scheduler side ---

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        try:
            n = self.scheduler.lookup(request.request_id, request.block_hashes, request.num_tokens, num_computed_tokens)
        except Exception as e:  # noqa: BLE001
            log.warning("tandem: lookup of %s failed: %s", request.request_id, e)
            n = 0
        return n, n > 0

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens == 0:
            return
        first = request.num_computed_tokens // self.block_tokens
        n = num_external_tokens // self.block_tokens
        block_ids = blocks.get_block_ids()[0]
        self.scheduler.start_load(request.request_id, request.block_hashes[first : first + n],
                                  block_ids[first : first + n])

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return TandemMetadata(self.scheduler.build_meta())

    def update_connector_output(self, connector_output: Any) -> None:
        self.scheduler.workers_done(connector_output.finished_sending or (), connector_output.finished_recving or ())

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Optional[dict]]:
        try:
            return self.scheduler.finish(request.request_id, request.block_hashes, block_ids), None
        except Exception as e:  # noqa: BLE001
            log.warning("tandem: store of %s not planned: %s", request.request_id, e)
            return False, None
