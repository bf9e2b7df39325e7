"""`run_tree`: `subprocess.run` for commands that start processes of their own.

A benchmark, an isolated package's test run or a DDP script starts children (bench
children, DataLoader workers, moto servers). When the test stops early (its timeout,
pytest-timeout, a Ctrl-C), `subprocess.run` kills the command only: its children live on
as orphans and take the CPUs from the tests after it (an audio benchmark's workers spun
for 10 minutes after their test had failed). `run_tree` runs the command in a session of
its own and kills the whole session when it returns, however it returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


def run_tree(
    cmd: Sequence[str | Path],
    *,
    timeout: float | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` until it exits (or `timeout`: `subprocess.TimeoutExpired`), its output
    captured as text; then kill whatever of its process tree is left.

    The output goes to files, not pipes: a descendant that inherited them would keep a
    pipe open, and reading it to its end would wait for that descendant too."""
    args = [str(c) for c in cmd]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group, which its descendants stay in
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:  # with what it printed, for the report
            _kill(proc)
            exc.output, exc.stderr = _read(out), _read(err)
            raise
        _kill(proc)
        text = [_read(f).decode(errors="replace") for f in (out, err)]
    return subprocess.CompletedProcess(args, code, *text)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill what is left of `proc`'s process group, and reap `proc` (not waiting for ever
    on a process the kernel does not let die)."""
    with contextlib.suppress(ProcessLookupError):  # nothing was left
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def _read(f: IO[bytes]) -> bytes:
    f.seek(0)
    return f.read()
