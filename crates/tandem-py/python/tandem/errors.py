"""Every exception the ``tandem`` package raises, under one base class, :class:`TandemError`.

Each class mirrors one variant of the Rust library's errors (``AgentError``, ``ClientError``,
``SessionError``, ``PagePoolError`` in ``tandem-client``): the message is the Rust message, and
the variant's fields are attributes (epochs and steps are ints, counts are in the unit the name
says: ``_bytes``, ``_ms``). Wrong Python types raise ``TypeError`` and values out of range
``ValueError``, as Python code expects; those are not ``TandemError``.

The native module builds instances of these classes; nothing here talks to an agent.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TandemError",
    "AgentError",
    "NotLeader",
    "StaleEpoch",
    "LeaderBehind",
    "FrameExpired",
    "WindowFull",
    "WrongStep",
    "NotReady",
    "BufferRefused",
    "FrameTooLarge",
    "BadRequest",
    "ProtocolVersionMismatch",
    "BindRefused",
    "UnknownTask",
    "BindCount",
    "BindPageOutOfRange",
    "AlreadyBound",
    "BindExpired",
    "LayerError",
    "LayerTimeout",
    "LayerFailed",
    "LayerUnknownTask",
    "LayerOutOfRange",
    "ClientError",
    "WireError",
    "ConnectError",
    "UnexpectedReply",
    "Timeout",
    "Broken",
    "PageOutOfRange",
    "DescriptorError",
    "SessionError",
    "JoinFailed",
    "NewEpoch",
    "RejoinFailed",
    "Ambiguous",
    "ProtocolViolation",
    "Cancelled",
    "PagePoolError",
    "PoolIoError",
    "PoolEmpty",
    "PoolGeometry",
    "Closed",
]


class TandemError(Exception):
    """The base of every Tandem error. ``str(e)`` is the Rust message; the variant's fields
    are attributes."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        for name, value in fields.items():
            setattr(self, name, value)


# --- The agent refused the request (tandem_client::AgentError); nothing of it took effect. ---


class AgentError(TandemError):
    """The agent refused a request; nothing of it took effect."""


class NotLeader(AgentError):
    """A leader-only call (lookup, store, load, end_step) reached a follower.

    ``rank``: the agent's rank."""

    rank: int


class StaleEpoch(AgentError):
    """The request names another epoch: the group restarted. Say hello and read the new
    epoch's frames from step 0 (a ``Session`` does this itself and raises ``NewEpoch``).

    ``ours``: the agent's epoch; ``theirs``: the request's."""

    ours: int
    theirs: int


class LeaderBehind(AgentError):
    """The frame was not sealed before the deadline: ask again.

    ``rank``: the asking rank; ``epoch``; ``wanted``: the step asked for; ``sealed``: the last
    step sealed, or ``None``."""

    rank: int
    epoch: int
    wanted: int
    sealed: int | None


class FrameExpired(AgentError):
    """The frame is older than the retention window.

    ``epoch``; ``wanted``: the step asked for; ``oldest``: the oldest step retained."""

    epoch: int
    wanted: int
    oldest: int


class WindowFull(AgentError):
    """The leader cannot seal ``step``: a follower is more than ``window`` steps behind. Try
    again.

    ``step``; ``rank``: the slowest follower; ``slowest_ack``: its last acknowledged step, or
    ``None``; ``window``: in steps."""

    step: int
    rank: int
    slowest_ack: int | None
    window: int


class WrongStep(AgentError):
    """Steps are sealed in order from 0.

    ``expected``: the leader's next step; ``got``: the step asked to seal."""

    expected: int
    got: int


class NotReady(AgentError):
    """The group is not ready in this epoch (joining, restarting, failed).

    ``reason``."""

    reason: str


class BufferRefused(AgentError):
    """The page pool (page size not the shard size, size not a whole number of pages, region
    that cannot be mapped, no descriptor) or a page was refused; nothing was written.

    ``reason``: names the numbers."""

    reason: str


class FrameTooLarge(AgentError):
    """The request could make a frame larger than ``protocol.max_frame_bytes``; nothing was
    recorded: split it, or send it in a later step.

    ``bytes``: the largest frame it could make; ``limit``: the limit, bytes."""

    bytes: int
    limit: int


class BadRequest(AgentError):
    """The request was malformed (for example block and page lists of different lengths).

    ``reason``."""

    reason: str


class ProtocolVersionMismatch(AgentError):
    """The engine and the agent speak different engine protocol versions: refused at hello.
    Run an engine and an agent of the same Tandem release.

    ``agent``: the agent's version; ``engine``: the engine's."""

    agent: int
    engine: int


class BindRefused(AgentError):
    """A ``bind`` was refused; nothing was recorded. ``task``: the task named, as
    ``str(TaskId)`` (``"epoch.seq"``)."""

    task: str


class UnknownTask(BindRefused):
    """No task of this epoch waits for this rank's pages under that id (never started, not yet
    in a frame this rank read, or its outcome is already known)."""


class BindCount(BindRefused):
    """The bind does not name one page per block of the task.

    ``blocks``: blocks of the task (its ``block_hashes`` in the frame that starts it);
    ``pages``: pages named."""

    blocks: int
    pages: int


class BindPageOutOfRange(BindRefused):
    """A page past the end of this rank's registered pool.

    ``page``: the first page out of range; ``pages``: pages of the pool (0: none
    registered)."""

    page: int
    pages: int


class AlreadyBound(BindRefused):
    """The task's pages on this rank are already named (by an earlier bind with other pages,
    or by the page ids the task started with)."""


class BindExpired(BindRefused):
    """The bind came after this rank's deadline: its shard failed, and with it the task (its
    ``failed`` outcome arrives in a frame).

    ``bind_timeout_ms``: the deadline this rank waited."""

    bind_timeout_ms: int


class LayerError(AgentError):
    """A ``wait_layer`` ended without its layer (by its deadline, never later).

    ``task``: the task (``epoch.seq``); ``layer``: the layer asked for."""

    task: str
    layer: int


class LayerTimeout(LayerError):
    """The deadline passed first; the copy may still finish (wait again) or fail.

    ``ready``: layers this rank has copied; ``asked``: layers the one asked for needs."""

    ready: int
    asked: int


class LayerFailed(LayerError):
    """The task failed (this rank's copy, or the group outcome): its pages hold no defined
    data; recompute.

    ``ready``, ``asked``: as :class:`LayerTimeout`; ``reason``: the first failure heard."""

    ready: int
    asked: int
    reason: str


class LayerUnknownTask(LayerError):
    """No layerwise load of this epoch under that id has reached this rank (read the frame
    that starts it first)."""


class LayerOutOfRange(LayerError):
    """The layer is not in the task's plan.

    ``layers``: layers per rank the task copies."""

    layers: int


# --- The client failed (tandem_client::ClientError). ---


class ClientError(TandemError):
    """The engine client could not carry a call out."""


class WireError(ClientError):
    """The socket failed or closed (``kind == "io"``), or a message was too large
    (``"too_large"``) or malformed (``"malformed"``)."""

    kind: str


class ConnectError(ClientError):
    """No connection to the agent's socket before the deadline.

    ``path``: the socket; ``waited_ms``."""

    path: str
    waited_ms: int


class UnexpectedReply(ClientError):
    """The agent answered with a reply of the wrong kind (a bug on one side).

    ``request``: the call; ``reply``: the reply, printed."""

    request: str
    reply: str


class Timeout(ClientError):
    """No reply within the request's deadline plus the slack; the connection stays usable
    and a late reply is discarded.

    ``request``: the call; ``call``: its id; ``waited_ms``."""

    request: str
    call: int
    waited_ms: int


class Broken(ClientError):
    """The connection can no longer be trusted; ``reconnect``.

    ``reason``."""

    reason: str


class DescriptorError(ClientError):
    """A file descriptor that is not open (or cannot be passed); nothing was sent.

    ``fd``; ``errno``: the OS error number (``errno.EBADF`` for a closed one)."""

    fd: int
    errno: int | None


# --- The session gave up (tandem_client::SessionError). ---


class SessionError(TandemError):
    """The engine session could not carry a call out."""


class JoinFailed(SessionError):
    """The first connection (with its hello) did not succeed in time.

    ``rank``; ``waited_ms``."""

    rank: int
    waited_ms: int


class NewEpoch(SessionError):
    """The group moved to a new epoch during ``call``. The session already rejoined (hello,
    pool registered again) and is at step 0: whatever the engine did in the open step is void.
    The next ``end_step`` (leader) or ``next_frame`` (follower) returns frame 0, whose
    ``Applied`` settles every earlier task.

    ``call``; ``from_epoch``; ``to_epoch``; ``waited_ms``: from the call's first failure to the
    rejoin."""

    call: str
    from_epoch: int
    to_epoch: int
    waited_ms: int


class RejoinFailed(SessionError):
    """The group did not come back within the recovery deadline.

    ``rank``; ``call``; ``epoch``; ``step``; ``waited_ms``; ``last``: the last error seen."""

    rank: int
    call: str
    epoch: int
    step: int
    waited_ms: int
    last: str


class Ambiguous(SessionError):
    """The connection broke during a store or load and the group stayed in the same epoch for
    the whole recovery deadline: whether the call took effect cannot be known.

    ``rank``; ``call``; ``epoch``; ``step``; ``waited_ms``."""

    rank: int
    call: str
    epoch: int
    step: int
    waited_ms: int


class ProtocolViolation(SessionError):
    """The agent answered something the contract does not allow (a frame of another position,
    a malformed message).

    ``rank``; ``call``; ``epoch``; ``step``; ``detail``."""

    rank: int
    call: str
    epoch: int
    step: int
    detail: str


class Cancelled(SessionError):
    """``Session.cancel()`` was called while ``call`` waited.

    ``call``."""

    call: str


# --- Page pools (tandem_client::PagePoolError). ---


class PagePoolError(TandemError):
    """A page pool could not be created or attached."""


class PoolIoError(PagePoolError):
    """Creating, opening, sizing or mapping the region failed.

    ``path``: the file, ``memfd NAME`` or ``descriptor N``; ``errno``."""

    path: str
    errno: int | None


class PoolEmpty(PagePoolError):
    """Zero pages, or zero-byte pages.

    ``pages``; ``page_size_bytes``."""

    pages: int
    page_size_bytes: int


class PoolGeometry(PagePoolError):
    """An attached region is not a whole, positive number of pages.

    ``path``; ``size_bytes``; ``page_size_bytes``."""

    path: str
    size_bytes: int
    page_size_bytes: int


class PageOutOfRange(TandemError):
    """A page past the end of the pool: a ``Session.store``/``load`` page past the registered
    pool (nothing was sent), or ``PagePool.page`` past the last page. (A raw ``Client`` sends
    the request; the rank whose pool is too small fails its shard and the task's outcome is
    ``"failed"``, naming the page.)

    ``page``: the page id; ``pages``: pages in the pool."""

    page: int
    pages: int


class Closed(TandemError):
    """A call on a client, session or page pool after its ``close()``.

    ``what``: ``"client"``, ``"session"`` or ``"page pool"``."""

    what: str
