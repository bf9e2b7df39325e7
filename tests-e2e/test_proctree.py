"""`run_tree` leaves no process of its command behind, whether it ends or times out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _proctree import run_tree

# a command that starts a grandchild (as a benchmark starts DataLoader workers), writes
# its pid and then runs for as long as its first argument says
SCRIPT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[2], "w").write(str(child.pid))
print("started", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent, init) counts as gone
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.parametrize("runs_for", [0, 60])
def test_run_tree_kills_what_its_command_started(tmp_path: Path, runs_for: int) -> None:
    pid_file = tmp_path / "pid"
    cmd = [sys.executable, "-c", SCRIPT, str(runs_for), str(pid_file)]
    if runs_for:
        with pytest.raises(subprocess.TimeoutExpired):
            run_tree(cmd, timeout=3)
    else:
        res = run_tree(cmd)
        assert res.returncode == 0 and res.stdout == "started\n"
    assert _gone(int(pid_file.read_text()))
