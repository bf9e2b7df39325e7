"""A busy machine on demand: competing CPU-bound processes, and a consumer that spends CPU
per batch as a CPU training step does.

A load is named by a string (`--loads quiet,busy1,busy2,step`):

- `quiet`: nothing else runs;
- `busyN`: N competing processes, each a pure-Python loop that never sleeps (one core
  each), started before the measured processes and kept running until every system has
  been measured under that load;
- `step`: no competitor, but the consumer spends `STEP_MS` of CPU on every batch before it
  takes the next (numpy work on one thread, the GIL released as a training step's
  kernels do), so the loader's threads share the cores with the "model".

Every system of a run is measured under each load, in the same interleaved rounds.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np

LOADS = ("quiet", "busy1", "busy2", "step")
#: CPU milliseconds a `step` consumer spends on each batch.
STEP_MS = 4.0
_BURN = "while True:\n    pass\n"


def parse_loads(text: str) -> tuple[str, ...]:
    """`quiet,busy1,...` -> the loads, checked."""
    loads = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in loads if x not in LOADS]
    if bad or not loads:
        raise SystemExit(f"--loads: unknown {bad or text!r}; choose from {', '.join(LOADS)}")
    return loads


def competitors(load: str) -> int:
    """How many competing processes `load` runs."""
    return int(load[4:]) if load.startswith("busy") else 0


@contextlib.contextmanager
def competing(load: str) -> Iterator[int]:
    """Run `load`'s competing processes for the duration of the block (yields how many)."""
    n = competitors(load)
    procs = [subprocess.Popen([sys.executable, "-c", _BURN]) for _ in range(n)]
    try:
        if procs:
            time.sleep(0.5)  # let them reach their loop
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


class Step:
    """The consumer's work per batch under the `step` load: `STEP_MS` of CPU time on
    the calling thread (small matrix products, which release the GIL as a training
    step's kernels do); a no-op under any other load."""

    def __init__(self, load: str) -> None:
        self.ms = STEP_MS if load == "step" else 0.0
        rng = np.random.default_rng(0)
        self._a = rng.random((64, 64), dtype=np.float32)

    def __call__(self) -> None:
        if not self.ms:
            return
        until = time.thread_time() + self.ms / 1e3
        a = self._a
        while time.thread_time() < until:
            a = (a @ self._a) * np.float32(1e-2)
