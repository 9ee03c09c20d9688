"""Request ids that every rank derives alike, and page ids from token slots.

An engine plug-in on a follower never talks to the leader: it learns what the leader did from
frames, and pairs a frame's lookup, task start or outcome with its own call by the call's
request id. SGLang and vLLM give every rank the same block keys for the same call (chained
prefix hashes), so the id is a hash of the call's kind and keys: equal on every rank, without
any exchange. Equal ids for two calls with the same keys are fine: the ledger pairs the k-th
call with the k-th event of that id (:mod:`tandem.adapter.ledger`).
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

import tandem

__all__ = ["UNPAIRED", "request_id", "is_paired", "pages_of_slots"]

UNPAIRED = 1 << 61
"""The bit of request ids no follower pairs a call with (the leader's own probes, such as
SGLang's ``batch_exists``): followers ignore their lookups. Ids stay below ``2**62``; ids at
or above it are left to engines' own markers."""


def request_id(kind: str, keys: Iterable[object], paired: bool = True) -> int:
    """The request id of a call of ``kind`` (``"get"``, ``"set"``, or an engine's request
    name) over block ``keys`` (ints, bytes or hex strs, as :func:`tandem.block_hash` takes
    them): 61 bits of a BLAKE2b digest of the kind and the 128-bit block hashes, in order,
    with :data:`UNPAIRED` set when ``paired`` is false. Raises what ``block_hash`` raises for
    a bad key."""
    h = hashlib.blake2b(kind.encode(), digest_size=8)
    for key in keys:
        h.update(tandem.block_hash(key).to_bytes(16, "big"))
    rid = int.from_bytes(h.digest(), "big") >> 3  # 61 bits
    return rid if paired else rid | UNPAIRED


def is_paired(request: int) -> bool:
    """Whether followers pair calls with ``request``'s lookups (see :data:`UNPAIRED`)."""
    return not request & UNPAIRED


def pages_of_slots(slots: Sequence[int], page_size: int, pages: int) -> list[int]:
    """Page ids of a call whose token ``slots`` (an engine's host indices, ``page_size``
    tokens a page, ``len(slots) // page_size`` pages) start pages of a pool of ``pages``
    pages: page ``i`` is ``slots[i * page_size] // page_size``.

    Raises ``ValueError`` when ``len(slots)`` is not a whole number of pages, a page does not
    start on a page boundary, or a page is past the pool."""
    if page_size <= 0 or len(slots) % page_size:
        raise ValueError(f"{len(slots)} token slots are not a whole number of {page_size}-token pages")
    out = []
    for i in range(0, len(slots), page_size):
        slot = int(slots[i])
        if slot % page_size:
            raise ValueError(f"token slot {slot} does not start a {page_size}-token page")
        page = slot // page_size
        if not 0 <= page < pages:
            raise ValueError(f"page {page} (token slot {slot}) is past the pool's {pages} pages")
        out.append(page)
    return out
