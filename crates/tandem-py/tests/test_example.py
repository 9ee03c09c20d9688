"""The example of docs/PYTHON.md runs as written, against a pp 1 × tp 2 cluster of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Cluster


def example() -> str:
    text = (REPO / "docs" / "PYTHON.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/PYTHON.md has no python block"
    return blocks[0]


def test_the_documented_example_runs(tp2: Cluster, tmp_path: Path) -> None:
    code = example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 25, "the example stays short (25 lines)"
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script), *tp2.sockets],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    block = f"{int.from_bytes(bytes.fromhex('9f' * 16), 'big'):032x}"
    # The two engine threads print at once: one print's text and its newline are two writes,
    # so lines may interleave; take each rank's line wherever it landed.
    lines = sorted(re.findall(r"rank \d+: block [0-9a-f]+ stored in epoch \d+", done.stdout))
    assert lines == [
        f"rank 0: block {block} stored in epoch {tp2.epoch()}",
        f"rank 1: block {block} stored in epoch {tp2.epoch()}",
    ], done.stdout
