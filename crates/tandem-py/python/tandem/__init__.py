"""Tandem for Python engines: page pools, the engine client and the engine session.

Tandem is a KV-cache offload cluster for inference groups that run pipeline and tensor
parallelism: every rank hosts an agent, and the ranks never disagree about what happened,
because every group decision lives in the frame of a step that every rank reads by position.
This package is a thin layer over the Rust library ``tandem-client`` (one implementation of the
wire, the call matching, the task map and the way back into the group after a restart):

- :class:`PagePool`: the engine's pages in shared memory (a file or a memfd), an ``mmap`` that
  numpy and torch view without a copy.
- :class:`Session`: what an engine drives. The leader (rank 0) calls ``lookup``, ``store``,
  ``load``, then ``end_step``; followers call ``next_frame``; both ``ack``. Each task's outcome
  arrives exactly once, in an :class:`Applied`; after a group restart the session rejoins and
  raises :class:`NewEpoch`, and frame 0 of the new epoch settles every earlier task.
- :class:`Client`: the raw engine client, one call per method, for engines that keep their own
  step counter.
- :func:`block_hash`: the 128-bit block hash for a key (int, bytes digest of any length, or
  hex str).

Every call that can block releases the GIL. Errors are the classes of :mod:`tandem.errors`,
all under :class:`TandemError`. docs/PYTHON.md shows the API with an example that runs.
"""

from tandem._tandem import (
    Applied,
    Client,
    Delivered,
    Frame,
    LayerwiseLoad,
    LookupResult,
    Reconciliation,
    RequestedTask,
    Session,
    TaskId,
    TaskOutcome,
    TaskStart,
    Welcome,
    block_hash,
)
from tandem.errors import *  # noqa: F401,F403 (the exception classes are part of the API)
from tandem.errors import __all__ as _errors
from tandem.pool import PagePool

__all__ = [
    "Applied",
    "Client",
    "Delivered",
    "Frame",
    "LayerwiseLoad",
    "LookupResult",
    "PagePool",
    "Reconciliation",
    "RequestedTask",
    "Session",
    "TaskId",
    "TaskOutcome",
    "TaskStart",
    "Welcome",
    "block_hash",
    *_errors,
]
