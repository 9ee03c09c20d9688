"""Tandem as SGLang's HiCache L3 storage backend (sglang 0.5.23 only; importing this module
on another version raises :class:`tandem.adapter.versions.UnsupportedEngineVersion`).

Launch (docs/ENGINES.md has the whole command)::

    --enable-hierarchical-cache --hicache-mem-layout page_unified --enable-metrics \\
    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config '{
        "backend_name": "tandem", "module_path": "tandem.sglang",
        "class_name": "TandemHiCacheStorage", "interface_v1": 1, "allocator": "shm",
        "socket_template": "/run/tandem/rank{rank}.sock"}'

- Every rank process builds its own instance and connects to its own agent: rank
  ``pp_rank * tp_size + tp_rank``, socket ``socket_template`` with ``{rank}`` (or
  ``sockets[rank]``).
- The host pool is SGLang's shared-memory one (``"allocator": "shm"``: a memfd) in the
  ``page_unified`` layout, where one page is one contiguous run of bytes: exactly a Tandem
  block shard. It is registered with the agent by descriptor, so the agent copies straight
  between the tier and SGLang's host pages (no staging copy).
- The step hook is ``get_stats()``: SGLang calls it from ``check_hicache_events``, once per
  scheduler iteration on every rank, before any rank-local decision, when storage metrics are
  on (``--enable-metrics``; refused without). The leader seals a step there, followers read.
- The logic (the leader's answers, followers pairing and binding, deadlines, outcomes) is
  :mod:`tandem.adapter.hicache`; this class converts SGLang's arguments and nothing else.

extra_config keys: ``socket_template`` or ``sockets``; ``call_timeout_s`` (30: the most a get
or set waits for the group), ``step_wait_s`` (0: the most a step waits for the window or a
frame), ``hook_thread`` (true: the hook wakes a thread of the backend's own that seals or
reads, so SGLang's scheduler thread never waits on the agent), ``connect_timeout_s`` (30),
``recovery_s`` (60).
"""

from __future__ import annotations

import logging
from typing import Any, List, Optional

from tandem.adapter.versions import require

require("sglang")

import torch  # noqa: E402  (after the version check, which must name the versions first)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig  # noqa: E402

from tandem.adapter.group import GroupLink, socket_of  # noqa: E402
from tandem.adapter.hicache import HiCacheCore  # noqa: E402
from tandem.adapter.keys import pages_of_slots  # noqa: E402

__all__ = ["TandemHiCacheStorage"]

log = logging.getLogger("tandem.sglang")


class TandemHiCacheStorage(HiCacheStorage):
    """The backend (see the module docs). Built by SGLang's ``StorageBackendFactory`` as
    ``TandemHiCacheStorage(storage_config, kwargs)``.

    Raises ``ValueError`` at construction for a configuration it cannot serve (naming the flag
    or key), and what ``tandem.Session`` raises when the agent does not answer."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None) -> None:
        extra = dict(storage_config.extra_config or {})
        if int(extra.get("interface_v1", 0)) != 1:
            raise ValueError('tandem: set "interface_v1": 1 in --hicache-storage-backend-extra-config (zero-copy calls)')
        if extra.get("allocator") != "shm":
            raise ValueError('tandem: set "allocator": "shm" in --hicache-storage-backend-extra-config (the host pool in a memfd)')
        if not storage_config.enable_storage_metrics:
            raise ValueError("tandem: start SGLang with --enable-metrics: the step hook is get_stats(), which "
                             "check_hicache_events calls once per scheduler iteration only with storage metrics on")
        if storage_config.dp_rank or storage_config.attn_cp_size > 1:
            log.warning("tandem: one Tandem group per DP replica and no attention CP; dp_rank %d, attn_cp_size %d",
                        storage_config.dp_rank, storage_config.attn_cp_size)
        self.storage_config = storage_config
        self.rank = storage_config.pp_rank * storage_config.tp_size + storage_config.tp_rank
        link = GroupLink(
            socket_of(extra, self.rank),
            self.rank,
            connect_timeout_s=float(extra.get("connect_timeout_s", 30.0)),
            recovery_s=float(extra.get("recovery_s", 60.0)),
            step_wait_s=float(extra.get("step_wait_s", 0.0)),
        )
        self.core = HiCacheCore(link, writer=storage_config.is_storage_writer,
                                pages_per_rank=not getattr(storage_config, "is_mla_model", False),
                                call_timeout_s=float(extra.get("call_timeout_s", 30.0)))
        if extra.get("hook_thread", True):
            link.start_hook_thread()
        self.page_size = 0
        self.pages = 0

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Register SGLang's host pool with this rank's agent, by descriptor. Raises
        ``ValueError`` for another layout or allocator, ``tandem.BufferRefused`` when the
        page bytes differ from the agent's shard bytes (naming both)."""
        super().register_mem_pool_host(mem_pool_host)
        if getattr(mem_pool_host, "layout", None) != "page_unified":
            raise ValueError(f"tandem: start SGLang with --hicache-mem-layout page_unified "
                             f"(the host pool is {getattr(mem_pool_host, 'layout', None)!r})")
        fd = getattr(mem_pool_host, "fd", None)
        if fd is None:
            raise ValueError('tandem: the host pool has no descriptor; set "allocator": "shm"')
        page_bytes = mem_pool_host.page_unified_layout.bytes_per_page
        self.page_size = mem_pool_host.page_size
        self.pages = mem_pool_host.page_num
        self.core.link.session.register_buffer(fd, self.pages * page_bytes, page_bytes)
        log.info("tandem rank %d: host pool registered: %d pages of %d bytes", self.rank, self.pages, page_bytes)

    def _pages(self, host_indices: torch.Tensor, n: int) -> list[int]:
        slots = host_indices[: n * self.page_size].tolist()
        return pages_of_slots(slots, self.page_size, self.pages)

    # --- zero-copy calls (interface_v1) ---

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        return self.core.exists(keys)

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        try:
            pages = self._pages(host_indices, len(keys))
        except Exception as e:  # noqa: BLE001 (never into SGLang's threads)
            log.warning("tandem: get: %s", e)
            return [False] * len(keys)
        return self.core.get(keys, pages)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        try:
            pages = self._pages(host_indices, len(keys))
        except Exception as e:  # noqa: BLE001
            log.warning("tandem: set: %s", e)
            return [False] * len(keys)
        return self.core.set(keys, pages)

    def get_stats(self) -> None:
        """The step hook (see the module docs); SGLang's own metrics stand (``None``)."""
        self.core.step()
        return None

    # --- the generic calls: Tandem needs interface_v1, these only answer safely ---

    def exists(self, key: str) -> bool:
        return self.core.exists([key]) == 1

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> None:
        return None

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> list:
        return [None] * len(keys)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return False

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        return False

    def clear(self) -> None:
        """Tandem's tier belongs to the group; clearing it from one engine is not offered."""

    def close(self) -> None:
        self.core.close()
