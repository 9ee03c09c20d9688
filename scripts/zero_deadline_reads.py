"""How long a follower engine's frame read takes when the step is not sealed yet.

Starts a `tandem up --pp 1 --tp 2` cluster (the binary in $TANDEM_BIN, default
target/debug/tandem), opens the leader's and rank 1's sessions, seals nothing, and times on
rank 1, N times each:

- `next_frame(deadline_s=0)`: answered `LeaderBehind` at once;
- `next_frame(deadline_s=0.001)`: the baseline, answered at the 1 ms deadline, by the agent's
  timer;
- `GroupLink.step()` inline (no hook thread): a follower's step hook with nothing to read.

Prints median and 99th percentile in microseconds and the ratio to the baseline. Run it with
the wheel installed (scripts/test-python.sh makes target/py-venv):

    TANDEM_BIN=target/debug/tandem target/py-venv/bin/python scripts/zero_deadline_reads.py [N]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crates" / "tandem-py" / "tests"))

import tandem  # noqa: E402
from conftest import Cluster  # noqa: E402
from tandem.adapter.group import GroupLink  # noqa: E402


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def behind(session: tandem.Session, deadline_s: float):
    def read() -> None:
        try:
            session.next_frame(deadline_s=deadline_s)
        except tandem.LeaderBehind:
            return
        raise AssertionError("a frame was sealed: nothing should be")

    return read


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    c = Cluster(1, 2)
    try:
        c.wait_ready()
        leader = tandem.Session(c.sockets[0], 0)
        follower = tandem.Session(c.sockets[1], 1)
        link = GroupLink(session=follower, step_wait_s=0.0)
        rows = [
            ("next_frame(deadline 1 ms), baseline", timed(behind(follower, 0.001), n)),
            ("next_frame(deadline 0)", timed(behind(follower, 0.0), n)),
            ("GroupLink.step() inline, nothing sealed", timed(link.step, n)),
        ]
        base = statistics.median(rows[0][1])
        print(f"{n} calls each, rank 1 of pp 1 x tp 2, nothing sealed")
        for name, xs in rows:
            xs.sort()
            med = statistics.median(xs)
            p99 = xs[int(0.99 * (len(xs) - 1))]
            print(f"  {name:42s} median {med:8.1f} us  p99 {p99:8.1f} us  x{med / base:.3f} of baseline")
        follower.close()
        leader.close()
    finally:
        c.stop()


if __name__ == "__main__":
    main()
