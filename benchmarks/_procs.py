"""Benchmark processes: a worker's command loop, the driver's `Child` at the other end of its pipe, and one-shot runs in a fresh interpreter.

A script runs its own workers: `script.py --worker '<json spec>'`. A long-lived worker
(`serve`) answers JSON commands on stdin with one JSON line each on stdout; a one-shot
worker (`serve_once`) prints one `RESULT <json>` line, which `run_once` reads.
"""

from __future__ import annotations

import contextlib
import gc
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _memory import MemSampler
from _meta import usage, usage_since

Handler = Callable[[dict[str, Any]], dict[str, Any]]


def serve(spec_json: str, build: Callable[[dict[str, Any]], Handler]) -> None:
    """A per-system process: JSON commands on stdin, one JSON answer per line on stdout.

    `build(spec)` sets the system up and returns its handler, which answers each command
    (a dict with an `op`). The first answer, `ready`, adds the handler's answer to
    `{"op": "ready"}`; the loop ends after `{"op": "quit"}`. An exception is answered as
    `{"error": ...}` (its traceback goes to stderr, the worker's log)."""
    spec = json.loads(spec_json)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints goes to the log, not the protocol
    t0 = time.perf_counter()
    handle = build(spec)
    ready = {"ready": True, "setup_s": time.perf_counter() - t0, **handle({"op": "ready"})}
    print(json.dumps(ready), file=out, flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            answer = handle(cmd)
        except Exception as exc:  # reported to the driver, which marks the system failed
            traceback.print_exc()
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), file=out, flush=True)
        if cmd["op"] == "quit" and "error" not in answer:
            return


def unknown(cmd: dict[str, Any]) -> dict[str, Any]:
    """The answer to a command a worker does not know."""
    return {"error": f"unknown op {cmd['op']!r}"}


def counting_faults(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`fn()` after a garbage collection, with the minor page faults of this process during
    it (not of DataLoader workers) as `minflt`: fresh output memory costs one per 4 KiB."""
    gc.collect()
    used = usage()
    answer = fn()
    answer["minflt"] = int(usage_since(used)["minor_faults"])
    return answer


class Child:
    """One system's process (`script --worker spec`), driven over a pipe; its stderr goes
    to a log file. `wait_ready` must be called before the first `ask`."""

    def __init__(
        self,
        name: str,
        spec: dict[str, Any],
        run_dir: Path,
        script: str | Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.log = run_dir / f"{name}.log"
        self.error: str | None = None
        self.ready: dict[str, Any] = {}
        # Tree memory peaks per phase: "run" (warm-up and timed epochs), "stall", ...
        self.peaks: dict[str, dict[str, int]] = {}
        with open(self.log, "w") as log:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                [sys.executable, str(Path(script).resolve()), "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"exited with {self.proc.wait()}: {self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{answer['error']}: {self.log_tail()}")
        return answer

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log.read_text().strip().splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self) -> None:
        try:
            self.ready = self._read()
        except (RuntimeError, ValueError) as exc:
            self.fail(f"did not start: {exc}")

    @property
    def ok(self) -> bool:
        return self.proc is not None and self.error is None

    def fail(self, why: str) -> None:
        self.error = why
        print(f"  ! {self.name}: {why}", file=sys.stderr, flush=True)
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def ask(self, phase: str = "run", *, sample: bool = True, **cmd: Any) -> dict[str, Any] | None:
        """Send one command and, with `sample`, sample the process tree's memory until the
        answer (the peak goes to `peaks[phase]`).

        Timed epochs are not sampled: reading `smaps_rollup` walks the process's page
        tables under its memory-map lock, which stalls its allocations, and more so the
        larger its address space (torch's libraries, mapped shards) — it would tax some
        systems more than others.
        """
        if not self.ok:
            return None
        assert self.proc is not None and self.proc.stdin is not None
        try:
            with MemSampler(self.proc.pid) if sample else contextlib.nullcontext() as mem:
                self.proc.stdin.write(json.dumps(cmd) + "\n")
                self.proc.stdin.flush()
                answer = self._read()
        except (OSError, RuntimeError, ValueError) as exc:
            self.fail(f"{cmd['op']} failed: {exc}")
            return None
        if mem is not None:
            peak = self.peaks.setdefault(phase, dict.fromkeys(mem.peak, 0))
            for k, v in mem.peak.items():
                peak[k] = max(peak[k], v)
        return answer

    def close(self, *, sample: bool = True) -> dict[str, Any] | None:
        """Ask the worker to quit and wait for it; its answer to `quit`."""
        answer = self.ask(op="quit", phase="quit", sample=sample)
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        return answer


def serve_once(
    workers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]], spec_json: str
) -> None:
    """A one-shot worker: run `workers[spec["kind"]](spec)`, print its result as `RESULT <json>`."""
    spec = json.loads(spec_json)
    print("RESULT " + json.dumps(workers[spec["kind"]](spec)), flush=True)


def run_once(
    script: str | Path, spec: dict[str, Any], *, timeout: float, log: Path | None = None
) -> dict[str, Any]:
    """Run `script --worker spec` in a fresh interpreter and return its `RESULT`.

    Its stderr goes to `log` (or is kept for the error). Raises RuntimeError, with the tail
    of its output, when it prints no result; `subprocess.TimeoutExpired` past `timeout`."""
    cmd = [sys.executable, str(Path(script).resolve()), "--worker", json.dumps(spec)]
    with open(log, "w") if log is not None else contextlib.nullcontext() as f:
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=f if f is not None else subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    err = log.read_text() if log is not None else proc.stderr or proc.stdout
    tail = err.strip().splitlines()[-12:]
    raise RuntimeError(f"exit {proc.returncode}: " + "\n".join(tail))
