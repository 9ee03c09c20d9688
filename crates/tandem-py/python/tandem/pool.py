"""``PagePool``: an engine's KV page pool in shared memory, viewable without a copy.

The pool is created or attached by the Rust library (``tandem._tandem._NativePool``: a file, a
memfd, or a descriptor another component made), and mapped here with Python's own ``mmap``:
``PagePool`` *is* an ``mmap.mmap``, so it has the buffer protocol on every CPython 3.10+
(``memoryview(pool)``, ``numpy.frombuffer(pool, numpy.uint8)``, ``torch.frombuffer(pool,
dtype=torch.uint8)`` all view the pages in place), and it refuses to close while such a view
exists (``BufferError``) instead of leaving the view pointing at unmapped memory.

Page ``i`` is bytes ``[i * page_size_bytes, (i + 1) * page_size_bytes)``; the agent maps the
same region and copies block shards in and out of the pages a task names.
"""

from __future__ import annotations

import mmap
import os
from typing import Optional, Union

from tandem import _tandem

__all__ = ["PagePool"]

PathLike = Union[str, "os.PathLike[str]"]


class PagePool(mmap.mmap):
    """A pool of ``pages`` pages of ``page_size_bytes`` bytes in shared memory (see the module
    docs). Make one with :meth:`create` or :meth:`attach`; register it with
    ``Client.register_buffer(pool)`` or ``Session.register_buffer(pool)``.
    """

    _native: _tandem._NativePool

    def __new__(cls, native: _tandem._NativePool) -> "PagePool":
        # mmap duplicates the descriptor: the mapping and the native pool close independently.
        self = super().__new__(cls, native.fd, native.size_bytes)
        self._native = native
        return self

    def __init__(self, native: _tandem._NativePool) -> None:  # noqa: D107 (see __new__)
        pass

    @classmethod
    def create(
        cls,
        pages: int,
        page_size_bytes: int,
        path: Optional[PathLike] = None,
        name: str = "tandem-pool",
    ) -> "PagePool":
        """Create ``pages`` zeroed pages of ``page_size_bytes`` bytes (use the agent's
        ``welcome.shard_bytes``): in the file at ``path`` (created or truncated; removed by
        :meth:`close`), or, without one, in a memfd named ``name`` (registered by descriptor).

        Raises ``PoolEmpty`` for zero pages or zero-byte pages, ``PoolIoError``."""
        return cls(_tandem._NativePool.create(pages, page_size_bytes, path, name))

    @classmethod
    def attach(
        cls,
        page_size_bytes: int,
        *,
        path: Optional[PathLike] = None,
        fd: Optional[int] = None,
    ) -> "PagePool":
        """Map an existing region, by ``path`` (kept by :meth:`close`) or by file descriptor
        ``fd`` (duplicated: the caller keeps and closes its own; for example SGLang's memfd host
        pool or ``os.memfd_create``). Its size must be a whole, positive number of
        ``page_size_bytes`` pages.

        Raises ``PoolGeometry`` (names both sizes), ``PoolIoError``, ``DescriptorError`` (a
        closed descriptor), ``TypeError`` (neither or both of ``path`` and ``fd``)."""
        if (path is None) == (fd is None):
            raise TypeError("PagePool.attach takes exactly one of path= and fd=")
        if fd is not None:
            return cls(_tandem._NativePool.attach_fd(fd, page_size_bytes))
        return cls(_tandem._NativePool.attach_path(path, page_size_bytes))

    @property
    def pages(self) -> int:
        """Pages in the pool."""
        return self._native.pages

    @property
    def page_size_bytes(self) -> int:
        """Bytes of one page (one block shard)."""
        return self._native.page_size_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes of the whole region, ``pages * page_size_bytes``."""
        return self._native.size_bytes

    @property
    def path(self) -> Optional[str]:
        """The region's file, or ``None`` for a memfd or a descriptor."""
        p = self._native.path
        return None if p is None else os.fspath(p)

    @property
    def fd(self) -> int:
        """The region's descriptor, owned by the pool (valid until :meth:`close`)."""
        return self._native.fd

    def page(self, page: int) -> memoryview:
        """A writable view of page ``page`` (``page_size_bytes`` bytes), without a copy.

        Raises ``PageOutOfRange`` past the last page."""
        start = self._native.offset(page)
        return memoryview(self)[start : start + self.page_size_bytes]

    def close(self) -> None:
        """Unmap the pool; a pool created in a file removes the file. Raises ``BufferError``
        while a view (``memoryview``, numpy array) of it still exists."""
        super().close()
        self._native.close()

    def __repr__(self) -> str:
        where = self.path if self.path is not None else self._native.label
        return f"PagePool(pages={self.pages}, page_size_bytes={self.page_size_bytes}, region={where!r})"
