"""Fixtures of the Python suite: real local clusters started with ``tandem up`` (a redis-server
child, the supervisor, one agent process per rank), and engine processes.

The suite tests the installed wheel: ``tandem`` must come from site-packages, never from the
source tree (``test_api.py`` checks). Every process a test starts is stopped by the test, by
its process id; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
ENGINE = HERE / "engine.py"


def tandem_bin() -> Path:
    """``$TANDEM_BIN`` or ``target/debug/tandem`` (scripts/test.sh builds it)."""
    env = os.environ.get("TANDEM_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "tandem"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `cargo build -p tandem-cli --bin tandem`")
    return path


def http_get(addr: str, path: str, timeout: float = 2.0) -> tuple[int, str]:
    """GET ``http://addr/path``: (status, body); (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


class Cluster:
    """A ``tandem up`` cluster: its sockets, HTTP addresses and processes."""

    def __init__(self, pp: int, tp: int, host_capacity: int = 512,
                 env: Optional[dict[str, str]] = None, disk_capacity: int = 0) -> None:
        self.pp, self.tp = pp, tp
        self.world = pp * tp
        self.sockets: list[str] = [""] * self.world
        self.http: list[str] = [""] * self.world
        self.supervisor_http = ""
        self.dir = ""
        self.proc = subprocess.Popen(
            [str(tandem_bin()), "up", "--pp", str(pp), "--tp", str(tp),
             "--host-capacity", str(host_capacity), "--disk-capacity", str(disk_capacity)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("TANDEM__")},
                 **(env or {})},
        )
        self.output: list[str] = []
        deadline = time.monotonic() + 60
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if m := re.search(r"rank (\d+): http://(\S+)/status\s+engine socket (\S+)", line):
                self.http[int(m[1])] = m[2]
                self.sockets[int(m[1])] = m[3]
            elif m := re.search(r"supervisor status: http://(\S+)/status", line):
                self.supervisor_http = m[1]
            elif m := re.search(r"files and logs: (\S+)", line):
                self.dir = m[1]
            elif "Ctrl-C stops everything" in line:
                break
            if time.monotonic() > deadline:
                break
        if not all(self.sockets) or not self.dir:
            self.stop()
            pytest.fail("tandem up did not start:\n" + "".join(self.output))

    def agent_pid(self, rank: int) -> Optional[int]:
        """The process id of ``rank``'s agent (a child of this cluster's supervisor)."""
        config = str(Path(self.dir) / "tandem.toml")
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            args = [a.decode(errors="replace") for a in argv]
            if "agent" in args and config in args and "--rank" in args:
                if args[args.index("--rank") + 1] == str(rank):
                    return int(entry)
        return None

    def supervisor_status(self) -> dict:
        status, body = http_get(self.supervisor_http, "/status")
        return json.loads(body) if status == 200 else {}

    def epoch(self) -> Optional[int]:
        return self.supervisor_status().get("epoch")

    def wait_ready(self, timeout: float = 60.0, epoch_above: int = 0) -> int:
        """Wait until every agent answers /readyz 200 in an epoch above ``epoch_above``;
        returns the epoch."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            epoch = self.epoch()
            ready = all(http_get(a, "/readyz")[0] == 200 for a in self.http)
            if ready and epoch is not None and epoch > epoch_above:
                return epoch
            time.sleep(0.1)
        pytest.fail(f"the cluster was not ready in an epoch above {epoch_above} within {timeout} s")

    def log(self) -> str:
        try:
            return (Path(self.dir) / "cluster.log").read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to ``tandem up`` (it stops the supervisor, the agents and redis), then
        SIGKILL past 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def tp2() -> Iterator[Cluster]:
    """pp 1 × tp 2, shared by the tests of a module."""
    c = Cluster(1, 2)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


@pytest.fixture()
def fresh_tp2() -> Iterator[Cluster]:
    """pp 1 × tp 2 of its own (tests that restart the group)."""
    c = Cluster(1, 2)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def pp2tp2() -> Iterator[Cluster]:
    """pp 2 × tp 2."""
    c = Cluster(2, 2)
    try:
        c.wait_ready()
        yield c
    finally:
        c.stop()


class Engine:
    """One engine process (``tests/engine.py``) of rank ``rank``; its JSON report on exit."""

    def __init__(self, cluster: Cluster, rank: int, scenario: str, out: Path, **args: object) -> None:
        self.rank = rank
        self.out = out / f"rank{rank}.json"
        cmd = [sys.executable, str(ENGINE), "--socket", cluster.sockets[rank], "--rank", str(rank),
               "--world", str(cluster.world), "--scenario", scenario, "--out", str(self.out)]
        for k, v in args.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        self.log = out / f"rank{rank}.log"
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     cwd=str(out))

    def progress(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def finish(self, timeout: float) -> dict:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"engine rank {self.rank} did not finish in {timeout} s:\n{self.progress()[-3000:]}")
        if code != 0 or not self.out.exists():
            pytest.fail(f"engine rank {self.rank} exited {code}:\n{self.progress()[-3000:]}")
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_engines(cluster: Cluster, scenario: str, out: Path, timeout: float = 120, **args: object) -> list[dict]:
    """Start one engine process per rank, wait for all, return their reports by rank."""
    engines = [Engine(cluster, r, scenario, out, **args) for r in range(cluster.world)]
    try:
        return [e.finish(timeout) for e in engines]
    finally:
        for e in engines:
            e.kill()
