"""Many small appends: what the Nth one-sample append costs, and what reading a dataset
grown by N appends costs against the same rows written at once.

Makes N one-sample `Writer(mode="append")` commits to a local dataset and records the
time of each; prints the mean of the last appends before each checkpoint. Then times, on
the appended dataset and on one holding the same rows written by a single writer:
`Dataset.open`, the first batch of `ferroload.make_loader(..., out="numpy")` and a
`subset` (best of 3, each in this process after a warm-up), and the same on the appended
dataset after `Dataset.compact()` (its time is reported too).

Run it from the repository root:

    uv run python benchmarks/bench_appends.py                 # N = 2,000 (minutes)
    uv run python benchmarks/bench_appends.py --n 500
    uv run python benchmarks/bench_appends.py --quick         # N = 50, a smoke run

Prints a table and, with `--json PATH`, writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import ferroload


def _sample(i: int) -> tuple[str, dict[str, bytes], dict[str, Any]]:
    return f"s{i:08d}", {"blob": i.to_bytes(8, "little") * 4}, {"label": i % 10}


def _write_once(uri: str, n: int) -> None:
    w = ferroload.Writer(uri, "once")
    w.declare("blob", "bin")
    for i in range(n):
        w.add(*_sample(i))
    w.close()


def _append_many(uri: str, n: int, checkpoints: list[int]) -> dict[int, float]:
    times: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        w = ferroload.Writer(uri, "appended")
        w.declare("blob", "bin")
        w.add(*_sample(i))
        w.close()
        times.append(time.perf_counter() - t0)
    out = {}
    for c in checkpoints:
        last = times[max(0, c - 10) : c]
        out[c] = sum(last) / len(last)
    return out


def _best(fn: Any, repeat: int = 3) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _read_costs(uri: str) -> dict[str, float]:
    def open_() -> None:
        ferroload.Dataset.open(uri)

    def first_batch() -> None:
        dl = ferroload.make_loader(uri, batch_size=64, meta=["label"], out="numpy")
        next(iter(dl))

    def subset() -> None:
        ferroload.Dataset.open(uri).subset("label = 3", return_indices=True)

    costs = {"open": _best(open_), "first_batch": _best(first_batch), "subset": _best(subset)}
    costs["total"] = sum(costs.values())
    return costs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="one-sample appends")
    p.add_argument("--quick", action="store_true", help="N = 50, a smoke run")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--workdir", type=Path, help="where the datasets go (default: a temp dir)")
    args = p.parse_args()
    n = 50 if args.quick else args.n
    checkpoints = sorted({c for c in (10, 100, 500, 1000, 2000, 5000, 10000, n) if c <= n})
    results: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        appended, once = f"{tmp}/appended", f"{tmp}/once"
        t0 = time.perf_counter()
        results["append_s"] = {str(k): v for k, v in _append_many(appended, n, checkpoints).items()}
        results["all_appends_s"] = time.perf_counter() - t0
        _write_once(once, n)
        results["read_appended"] = _read_costs(appended)
        results["read_once"] = _read_costs(once)
        t0 = time.perf_counter()
        ferroload.Dataset.open(appended).compact()
        results["compact_s"] = time.perf_counter() - t0
        results["read_compacted"] = _read_costs(appended)
    print(f"{n} one-sample appends took {results['all_appends_s']:.1f} s")
    print(f"compacting them took {results['compact_s']:.2f} s")
    for k, v in results["append_s"].items():
        print(f"  append #{k:>6}: {v * 1000:8.1f} ms (mean of the 10 before it)")
    print(f"{'dataset':<12}{'open ms':>10}{'batch ms':>10}{'subset ms':>11}{'total ms':>10}")
    for key in ("read_appended", "read_compacted", "read_once"):
        if key in results:
            r = results[key]
            print(
                f"{key[5:]:<12}{r['open'] * 1e3:>10.1f}{r['first_batch'] * 1e3:>10.1f}"
                f"{r['subset'] * 1e3:>11.1f}{r['total'] * 1e3:>10.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
