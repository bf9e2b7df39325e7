"""The run skeleton the benchmark scripts share: common flags, the run folder and clock, interleaved timed epochs, timing summaries, a machine reference probe, and the log.

A run (`start_run`) knows its mode (`quick` or `full`), where its JSON goes, its scratch
folder and when it started; `finish_run` stamps the end, prints the report and writes the
JSON.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from _meta import git_commit, loadavg, utc_now, write_json
from _procs import Child

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench"
_T0 = time.perf_counter()


def log(msg: str) -> None:
    """A progress line on stderr, stamped with the seconds since the script started."""
    print(f"[{time.perf_counter() - _T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the run


def default_json(name: str, quick: bool) -> Path:
    """Where `name`'s results go by default: `results/<name>[_quick].json`."""
    return RESULTS / (f"{name}_quick.json" if quick else f"{name}.json")


def run_parser(
    doc: str | None, name: str, *, quick: str, workdir: str = "scratch folder"
) -> argparse.ArgumentParser:
    """An argument parser with the flags every script has: `--quick` (help `quick`),
    `--workdir` (help `workdir`, then the default) and `--json`."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"{workdir} (default {DEFAULT_WORKDIR})",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the results (default "
        f"{default_json(name, False).relative_to(HERE.parent)}, or "
        f"{default_json(name, True).name} with --quick)",
    )
    return p


class Run(NamedTuple):
    """One run of a benchmark script: its mode, JSON path, scratch folder and start."""

    mode: str  # quick | full
    json_path: Path
    run_dir: Path  # emptied at the start
    started_at: str  # UTC, ISO 8601
    t0: float  # perf_counter at the start
    loadavg_start: list[float] | None


def start_run(args: argparse.Namespace, name: str, run_dir: str) -> Run:
    """Start a run of `name` from its parsed flags; `run_dir` names its folder in the
    workdir (`{mode}` is replaced by the mode)."""
    mode = "quick" if args.quick else "full"
    folder = Path(args.workdir) / run_dir.format(mode=mode)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return Run(
        mode=mode,
        json_path=args.json or default_json(name, args.quick),
        run_dir=folder,
        started_at=utc_now(),
        t0=time.perf_counter(),
        loadavg_start=loadavg(),
    )


def run_meta(run: Run, available_cpus: int) -> dict[str, Any]:
    """The result's `meta` fields every run has: mode, start, commit and the machine."""
    return {
        "mode": run.mode,
        "started_at": run.started_at,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "available_cpus": available_cpus,
        "loadavg_start": run.loadavg_start,
    }


def finish_run(res: dict[str, Any], run: Run, render: Callable[[dict[str, Any]], str]) -> None:
    """Stamp the end of the run into `res["meta"]`, print the report, write the JSON."""
    res["meta"]["loadavg_end"] = loadavg()
    res["meta"]["total_s"] = time.perf_counter() - run.t0
    print(render(res))
    print(f"\ntotal {res['meta']['total_s']:.0f} s; results written to {run.json_path}")
    write_json(run.json_path, res)


# --------------------------------------------------------------------------- timing


def summary(times: list[float], n: int) -> dict[str, Any]:
    """Best and median of the epoch `times` over `n` samples each."""
    best, med = min(times), float(np.median(times))
    return {
        "times_s": times,
        "best_s": best,
        "median_s": med,
        "samples_per_s": n / best,
        "median_samples_per_s": n / med,
    }


_REF_BUF = bytes(4 << 20)
_REF_UNITS = 6  # sha256 of 4 MiB buffers per thread and pass (~10-20 ms on one core)


def _ref_work() -> None:
    for _ in range(_REF_UNITS):
        hashlib.sha256(_REF_BUF).digest()  # C code that releases the GIL


def reference_pass(threads: int) -> float:
    """Seconds for `threads` threads to each hash `_REF_UNITS` buffers: a GIL-free workload
    that shows how parallel the machine is right now (its 1 -> 2 scaling is the ceiling)."""
    gc.collect()
    t0 = time.perf_counter()
    others = [threading.Thread(target=_ref_work) for _ in range(threads - 1)]
    for t in others:
        t.start()
    _ref_work()
    for t in others:
        t.join()
    return time.perf_counter() - t0


class Rounds(NamedTuple):
    """What `interleaved_epochs` measured."""

    checks: dict[str, dict[str, Any]]  # each system's warm-up (checked) epoch
    times: dict[str, list[float]]  # each system's timed epochs, seconds
    epochs: dict[str, list[dict[str, Any]]]  # each system's timed epochs, whole answers
    ref: dict[int, list[float]]  # reference_pass(1) and (2) seconds, one per round
    pairs: list[float]  # per round, pair[0]'s epoch seconds over pair[1]'s

    def best_epoch(self, key: str) -> dict[str, Any]:
        """The answer of `key`'s fastest timed epoch."""
        times = self.times[key]
        return self.epochs[key][times.index(min(times))]


def interleaved_epochs(
    children: dict[str, Child],
    n: int,
    rounds: int,
    order: Callable[[int], list[str]],
    pair: tuple[str, str] | None = None,
    *,
    sample_warmup: bool = True,
) -> Rounds:
    """A warm-up epoch (epoch 0, checked) of every child, one at a time; then `rounds`
    rounds of one timed epoch each, in the order `order(round)`, with the machine
    reference probe at the start of each round. An epoch that does not deliver `n`
    samples fails its child."""
    checks: dict[str, dict[str, Any]] = {}
    for key, ch in children.items():
        log(f"  warm-up {key}")
        got = ch.ask(op="epoch", epoch=0, check=True, sample=sample_warmup)
        if got is not None:
            checks[key] = got
    times: dict[str, list[float]] = {k: [] for k in children}
    epochs: dict[str, list[dict[str, Any]]] = {k: [] for k in children}
    ref: dict[int, list[float]] = {1: [], 2: []}
    pairs: list[float] = []
    for r in range(rounds):
        log(f"  round {r + 1}/{rounds}")
        for t in (1, 2):
            ref[t].append(reference_pass(t))
        this: dict[str, float] = {}
        for key in order(r):
            got = children[key].ask(op="epoch", epoch=r + 1, sample=False)
            if got is None:
                continue
            if got["n"] != n:
                children[key].fail(f"epoch {r + 1} delivered {got['n']} samples, not {n}")
                continue
            times[key].append(got["s"])
            epochs[key].append(got)
            this[key] = got["s"]
        if pair is not None and pair[0] in this and pair[1] in this:
            pairs.append(this[pair[0]] / this[pair[1]])
    return Rounds(checks, times, epochs, ref, pairs)


def fresh_process_rounds(
    kinds: Sequence[str],
    rounds: int,
    run: Callable[[str, int], dict[str, Any]],
    n: int,
    *,
    order: Callable[[int], Sequence[str]] | None = None,
    unit: str = "samples",
) -> dict[str, list[dict[str, Any]]]:
    """`rounds` rounds of one epoch of each kind, each `run(kind, round)` in a fresh
    process answering at least `n` and `epoch_s`; in the order `order(round)` (default:
    `kinds`, reversed every other round: A B B A ...). An epoch that does not deliver `n`
    is an error. Returns each kind's answers, in round order."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(rounds):
        this = order(r) if order is not None else (kinds if r % 2 == 0 else kinds[::-1])
        for kind in this:
            got = run(kind, r)
            if got["n"] != n:
                raise RuntimeError(f"{kind} delivered {got['n']} {unit}, not {n}")
            runs[kind].append(got)
            log(
                f"  round {r + 1} {kind}: epoch {got['epoch_s']:.3f} s "
                f"({n / got['epoch_s']:,.1f} {unit}/s), load {got.get('loadavg')}"
            )
    return runs
