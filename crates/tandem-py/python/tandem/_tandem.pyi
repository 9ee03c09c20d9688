"""Type stubs of the native module ``tandem._tandem`` (import these names from ``tandem``).

Units: sizes in bytes, waits in seconds (``_s``), latencies in nanoseconds; block hashes are
ints in ``0 .. 2**128``; page ids ints in ``0 .. 2**32``. Every blocking call releases the GIL.
"""

import os
from typing import Optional, Sequence, Tuple, Union

from tandem.pool import PagePool

Key = Union[int, bytes, str]
"""A block key: the 128-bit hash as an int, an engine digest as bytes (any length), or its hex
str. Mapped by :func:`block_hash`."""

PathLike = Union[str, "os.PathLike[str]"]

def block_hash(key: Key) -> int:
    """The 128-bit block hash for ``key``: an int is the hash itself; bytes of 16 or more are
    their first 16 bytes (big-endian); shorter digests are zero-padded with their length in
    the top byte; a hex str is decoded first (``block_hash(d.hex()) == block_hash(d)``).
    Raises TypeError for another type, ValueError for an int out of range, empty bytes or a
    str that is not an even number of hex digits."""

class TaskId:
    """A group-unique task id. Hashable, ordered; ``str()`` is ``"epoch.seq"``."""

    def __init__(self, epoch: int, seq: int) -> None: ...
    @property
    def epoch(self) -> int:
        """The epoch whose leader started the task."""
    @property
    def seq(self) -> int:
        """Sequence number within that epoch, from 0."""
    def __hash__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __lt__(self, other: "TaskId") -> bool: ...

class Welcome:
    """Where the group stood at the last hello."""

    @property
    def epoch(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def shard_bytes(self) -> int:
        """Bytes of one block shard: the page size the agent expects."""
    @property
    def next_step(self) -> int:
        """Where this engine goes on: the leader's, the next step the leader will seal; a
        follower's, the first frame its rank has not acknowledged (seek there when joining an
        epoch under way)."""

class LookupResult:
    """The leader's prefix-match decision for one request."""

    @property
    def request(self) -> int: ...
    @property
    def block_hashes(self) -> Tuple[int, ...]: ...
    @property
    def matched_blocks(self) -> int:
        """Leading blocks cached (blocks)."""
    @property
    def pinned(self) -> bool: ...

class TaskStart:
    """A store or load a frame started."""

    @property
    def task(self) -> TaskId: ...
    @property
    def kind(self) -> str:
        """``"store"`` or ``"load"``."""
    @property
    def request(self) -> int: ...
    @property
    def block_hashes(self) -> Tuple[int, ...]: ...
    @property
    def page_ids(self) -> Tuple[int, ...]: ...
    @property
    def tiers(self) -> Tuple[str, ...]:
        """Store only: ``"host"`` or ``"disk"`` per block."""

class LayerwiseLoad:
    """The leader's plan for a load started layerwise (docs/LAYERWISE.md)."""

    @property
    def task(self) -> TaskId: ...
    @property
    def layers(self) -> int:
        """Layers per rank."""
    @property
    def order(self) -> Tuple[int, ...]:
        """The order every rank copies and signals the layers in."""
    @property
    def layer_timeout_ms(self) -> int: ...

class TaskOutcome:
    """The group's verdict on one task."""

    @property
    def task(self) -> TaskId: ...
    @property
    def kind(self) -> str: ...
    @property
    def request(self) -> int: ...
    @property
    def result(self) -> str:
        """``"ok"``, ``"failed"`` or ``"aborted"``; a load that is not ok left its pages
        undefined (recompute them)."""
    @property
    def ok(self) -> bool: ...
    @property
    def reason(self) -> Optional[str]:
        """The first failure a rank reported (at most 256 bytes)."""

class Reconciliation:
    """What frame 0 of a new epoch settles."""

    @property
    def redelivered(self) -> Tuple[TaskOutcome, ...]: ...
    @property
    def aborted(self) -> Tuple[TaskOutcome, ...]: ...

class Frame:
    """Everything the group decided in one step (read-only)."""

    @property
    def epoch(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def lookups(self) -> Tuple[LookupResult, ...]: ...
    @property
    def stores(self) -> Tuple[TaskStart, ...]: ...
    @property
    def loads(self) -> Tuple[TaskStart, ...]: ...
    @property
    def finished(self) -> Tuple[TaskOutcome, ...]: ...
    @property
    def outcomes(self) -> Tuple[TaskOutcome, ...]:
        """Redelivered, aborted, then finished: the order to apply them."""
    @property
    def tier_ops(self) -> Tuple[Tuple[str, int], ...]:
        """``("evict" | "demote" | "promote", block hash)``, in order."""
    @property
    def reconciliation(self) -> Optional[Reconciliation]: ...
    @property
    def layerwise(self) -> Tuple[LayerwiseLoad, ...]:
        """The leader's plans for the loads of this frame started layerwise."""
    @property
    def is_empty(self) -> bool: ...

class Delivered:
    """An outcome delivered once, with its task's start when this engine saw it."""

    @property
    def outcome(self) -> TaskOutcome: ...
    @property
    def start(self) -> Optional[TaskStart]: ...

class RequestedTask:
    """A task this engine requested that never started: its pages are the engine's again."""

    @property
    def task(self) -> TaskId: ...
    @property
    def kind(self) -> str: ...
    @property
    def request(self) -> int: ...

class Applied:
    """What applying one frame gave the engine."""

    @property
    def frame(self) -> Frame: ...
    @property
    def outcomes(self) -> Tuple[Delivered, ...]:
        """Each task's outcome, exactly once, in apply order."""
    @property
    def not_started(self) -> Tuple[RequestedTask, ...]:
        """Frame 0 of a new epoch: requested in an earlier epoch, never started."""
    @property
    def lost(self) -> Tuple[TaskStart, ...]:
        """Frame 0 of a new epoch: started earlier, not settled (treat as failed)."""
    @property
    def sealed_here(self) -> bool: ...

PoolArg = Union[PagePool, int]

class Client:
    """The engine client of one rank: one call per method (see ``Session`` for the step
    counter, the task map and recovery)."""

    def __init__(self, socket: PathLike, rank: int, timeout_s: float = 30.0) -> None: ...
    @property
    def welcome(self) -> Welcome: ...
    @property
    def epoch(self) -> int: ...
    @property
    def late_replies(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def hello(self) -> Welcome: ...
    def reconnect(self, timeout_s: float = 5.0) -> Welcome: ...
    def register_buffer(
        self,
        pool: PoolArg,
        size_bytes: Optional[int] = None,
        page_size_bytes: Optional[int] = None,
    ) -> int:
        """Register a ``PagePool``, or a descriptor with its ``size_bytes`` and
        ``page_size_bytes``; returns the page count."""
    def lookup(self, step: int, request: int, block_hashes: Sequence[Key]) -> LookupResult: ...
    def store(
        self, step: int, request: int, block_hashes: Sequence[Key], page_ids: Sequence[int]
    ) -> TaskId: ...
    def load(
        self, step: int, request: int, block_hashes: Sequence[Key], page_ids: Sequence[int]
    ) -> TaskId: ...
    def load_layerwise(
        self,
        step: int,
        request: int,
        block_hashes: Sequence[Key],
        page_ids: Sequence[int],
        layer_timeout_s: float = 5.0,
    ) -> TaskId:
        """Leader: ``load`` copied layer by layer on every rank, as the leader's plan in the
        starting frame says (``Frame.layerwise``)."""
    def wait_layer(self, task: TaskId, layer: int, deadline_s: float = 1.0) -> int:
        """Any rank: wait until layer ``layer`` (this rank's own index) of layerwise load
        ``task`` is in this engine's pages; returns the layers copied so far. Raises a
        ``LayerError`` subclass by the deadline."""
    def end_step(self, step: int, deadline_s: float = 1.0) -> Frame: ...
    def frame(self, step: int, deadline_s: float = 1.0) -> Frame: ...
    def ack(self, step: int) -> None: ...
    def bind(self, task: TaskId, page_ids: Sequence[int]) -> None:
        """Any rank: this engine's pages for ``task``, a store or load started without page
        ids: one page per block of the task, in the order of its ``block_hashes`` in the frame
        that starts it. Raises a ``BindRefused`` subclass (``UnknownTask``, ``BindCount``,
        ``BindPageOutOfRange``, ``AlreadyBound``, ``BindExpired``)."""
    def release(self, request: int) -> int:
        """Leader: ``request`` is done with its lookup; returns the pinned blocks given
        back."""
    def set_reply_slack(self, seconds: float) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *exc: object) -> None: ...

class Session:
    """One engine's session: step counter, task → outcome map (each outcome once), and the
    way back into the group after a restart (``NewEpoch``)."""

    def __init__(
        self,
        socket: PathLike,
        rank: int,
        connect_timeout_s: float = 30.0,
        recovery_s: float = 60.0,
        retry_pause_s: float = 0.05,
    ) -> None: ...
    @property
    def welcome(self) -> Welcome: ...
    @property
    def epoch(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def step(self) -> int:
        """Leader: the open step. Follower: the next frame to read."""
    @property
    def last_applied(self) -> Optional[int]: ...
    @property
    def last_acked(self) -> Optional[int]: ...
    @property
    def open_tasks(self) -> int: ...
    @property
    def pending_requests(self) -> int: ...
    @property
    def tally(self) -> dict[str, int]: ...
    @property
    def closed(self) -> bool: ...
    def register_buffer(
        self,
        pool: PoolArg,
        size_bytes: Optional[int] = None,
        page_size_bytes: Optional[int] = None,
    ) -> int: ...
    def hello(self) -> Welcome: ...
    def lookup(self, request: int, block_hashes: Sequence[Key]) -> LookupResult:
        """Leader: the cached prefix for ``request``, pinned until its load or ``release``;
        the same request and blocks again return the same answer on the same pins."""
    def store(self, request: int, block_hashes: Sequence[Key], page_ids: Sequence[int]) -> TaskId: ...
    def load(self, request: int, block_hashes: Sequence[Key], page_ids: Sequence[int]) -> TaskId: ...
    def load_layerwise(
        self,
        request: int,
        block_hashes: Sequence[Key],
        page_ids: Sequence[int],
        layer_timeout_s: float = 5.0,
    ) -> TaskId:
        """Leader: ``load`` copied layer by layer on every rank (see ``Client``)."""
    def wait_layer(self, task: TaskId, layer: int, deadline_s: float = 1.0) -> int:
        """Any rank: wait for one layer of a layerwise load on this rank (see ``Client``)."""
    def end_step(self, deadline_s: float = 1.0) -> Applied: ...
    def next_frame(self, deadline_s: float = 1.0) -> Applied: ...
    def reread(self, step: int, deadline_s: float = 1.0) -> Frame: ...
    def seek(self, step: int) -> None: ...
    def ack(self) -> Optional[int]: ...
    def bind(self, task: TaskId, page_ids: Sequence[int]) -> None:
        """Any rank: this engine's pages for ``task``, a store or load started without page
        ids (``page_ids=[]``): one page per block of the task, in the order of its
        ``block_hashes`` in the frame that starts it. The rank copies only once bound; no bind
        within ``protocol.bind_timeout_ms`` fails the task on every rank. Binding again with the
        same pages is answered the same. Raises ``PageOutOfRange`` (nothing sent) or a
        ``BindRefused`` subclass."""
    def release(self, request: int) -> int:
        """Leader: ``request`` is done with its lookup (it will not load, or it finished):
        the blocks its lookup still pins go back; returns how many. A load spends them by
        itself."""
    def cancel(self) -> None: ...
    def close(self) -> Optional[dict[str, int]]: ...
    def __enter__(self) -> "Session": ...
    def __exit__(self, *exc: object) -> None: ...

class _NativePool:
    """The Rust page pool behind ``tandem.PagePool`` (use that)."""

    @staticmethod
    def create(
        pages: int, page_size_bytes: int, path: Optional[PathLike] = None, name: str = "tandem-pool"
    ) -> "_NativePool": ...
    @staticmethod
    def attach_path(path: PathLike, page_size_bytes: int) -> "_NativePool": ...
    @staticmethod
    def attach_fd(fd: int, page_size_bytes: int) -> "_NativePool": ...
    @property
    def pages(self) -> int: ...
    @property
    def page_size_bytes(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def path(self) -> Optional[str]: ...
    @property
    def label(self) -> str: ...
    @property
    def fd(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def offset(self, page: int) -> int: ...
    def close(self) -> None: ...

def bench_step(client: Client, step: int, deadline_s: float = 5.0) -> Tuple[int, int, int]:
    """Benchmark: seal ``step``, read it back, ack it, in Rust on ``client``'s connection;
    the three latencies, ns."""
def bench_read(client: Client, step: int, deadline_s: float = 5.0) -> Optional[Tuple[int, int, Frame]]:
    """Benchmark: read the frame of ``step`` (waiting for its seal) and again, in Rust; both
    latencies (ns) and the frame, or ``None`` while not sealed."""
def bench_round(
    client: Client, pool: _NativePool, request: int, blocks: int, step: int, deadline_s: float = 5.0
) -> Tuple[int, int, int]:
    """Benchmark: one store+load round in Rust (fill, store, seal until reported; lookup, load,
    seal until reported); store and load times (ns) and the next step."""
