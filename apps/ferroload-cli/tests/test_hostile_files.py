"""The CLI on a dataset with a FIFO in place of one of its files (`tar x` recreates
them): `ferroload info` used to wait for ever on a FIFO as `_ferroload/latest`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferroload_format import Writer

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ferroload_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,  # a hang fails the test instead of the run
        check=False,
    )


@pytest.mark.timeout(120)
def test_a_fifo_in_a_dataset_never_hangs_the_cli(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with Writer(root, "fifo") as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(3):
            w.add(f"s{i}", {"image": b"jpeg %d" % i}, {"label": i})
    (root / "_ferroload" / "latest").unlink()
    os.mkfifo(root / "_ferroload" / "latest")
    info = _cli("info", str(root), "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["num_samples"] == 3
    shard = next((root / "shards").glob("*.tar"))
    shard.unlink()
    os.mkfifo(shard)
    verify = _cli("verify", str(root), "--json")
    assert verify.returncode == 1, verify.stderr
    problems = json.loads(verify.stdout)["problems"]
    assert [p["kind"] for p in problems] == ["missing-shard"]
    get = _cli("get", str(root), "0")
    assert get.returncode == 1 and "Traceback" not in get.stderr
    assert shard.name in get.stderr
