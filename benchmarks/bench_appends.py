"""Many small appends: what the Nth one-sample append costs, and what reading a dataset
grown by N appends costs against the same rows written at once.

Makes N one-sample `Writer(mode="append")` commits to a local dataset and records the
time of each; prints the mean of the last appends before each checkpoint. Then times, on
the appended dataset and on one holding the same rows written by a single writer:
`Dataset.open`, the first batch of `ferroload.make_loader(..., out="numpy")` and a
`subset` (best of 3, each in this process after a warm-up), and the same on the appended
dataset after `Dataset.compact()` (its time is reported too). Appends merge index parts
as they go (tiered merging, docs/format.md §7.6), so it also records the slowest append
(a merge of many rows), the parts left, and what the manifest, which lists every shard,
costs to parse and to write after N appends (it lists the newest shards inline, the
others in O(log N) shard lists, docs/format.md §6.2). The goal (issue 16): open + first batch +
subset of the appended dataset within 2x of the compacted one.

Run it from the repository root:

    uv run python benchmarks/bench_appends.py                 # N = 2,000 (minutes)
    uv run python benchmarks/bench_appends.py --n 500
    uv run python benchmarks/bench_appends.py --quick         # N = 50, a smoke run
    uv run python benchmarks/bench_appends.py --n 10000       # the issue's 10^4 (long)

Prints a table and writes the figures, with the commit and date, as JSON to
`benchmarks/results/bench_appends.json` (`--quick`: `bench_appends_quick.json`; `--json
PATH` elsewhere).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _meta import git_commit, loadavg, pkg_version, utc_now, write_json

import ferroload
from ferroload_core import exit_process
from ferroload_format._manifest import Manifest
from ferroload_format._versions import read_manifest
from ferroload_store import open_store

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "bench_appends.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_appends_quick.json"


def _sample(i: int) -> tuple[str, dict[str, bytes], dict[str, Any]]:
    return f"s{i:08d}", {"blob": i.to_bytes(8, "little") * 4}, {"label": i % 10}


def _write_once(uri: str, n: int) -> None:
    w = ferroload.Writer(uri, "once")
    w.declare("blob", "bin")
    for i in range(n):
        w.add(*_sample(i))
    w.close()


def _append_many(uri: str, n: int, checkpoints: list[int]) -> tuple[dict[int, float], list[float]]:
    times: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        w = ferroload.Writer(uri, "appended")
        w.declare("blob", "bin")
        w.add(*_sample(i))
        w.close()
        times.append(time.perf_counter() - t0)
        if i + 1 in checkpoints:  # progress, for a long run stopped early
            last = times[max(0, i - 9) :]
            print(f"  ... append #{i + 1}: {sum(last) / len(last) * 1e3:.1f} ms", flush=True)
    out = {}
    for c in checkpoints:
        last = times[max(0, c - 10) : c]
        out[c] = sum(last) / len(last)
    return out, times


def _manifest_costs(uri: str) -> dict[str, float]:
    """What every append pays for the manifest after N appends: its size, one parse (the
    writer opening the dataset) and one serialization (the commit)."""
    store = open_store(uri)
    manifest = read_manifest(store)
    data = manifest.to_bytes()
    return {
        "bytes": len(data),
        "shards": manifest.num_shards,
        "inline_shards": len(manifest.inline_shards),
        "shard_lists": len(manifest.shard_lists),
        "parts": len(manifest.index_parts),
        "parse_s": _best(lambda: Manifest.from_bytes(data)),
        "write_s": _best(manifest.to_bytes),
    }


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
    results: dict[str, Any] = {
        "n": n,
        "meta": {
            "commit": git_commit(),
            "date": utc_now(),
            "ferroload": pkg_version("ferroload-format"),
            "loadavg_before": loadavg(),
        },
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        appended, once = f"{tmp}/appended", f"{tmp}/once"
        t0 = time.perf_counter()
        means, times = _append_many(appended, n, checkpoints)
        results["all_appends_s"] = time.perf_counter() - t0
        results["append_s"] = {str(k): v for k, v in means.items()}
        # the first append creates the dataset (and warms the imports): not counted
        slowest = max(range(1, n) if n > 1 else range(n), key=times.__getitem__)
        results["append_stats"] = {
            "median_s": statistics.median(times[1:] or times),
            "max_s": times[slowest],
            "slowest": slowest + 1,
        }
        results["manifest"] = _manifest_costs(appended)
        _write_once(once, n)
        results["read_appended"] = _read_costs(appended)
        results["read_once"] = _read_costs(once)
        t0 = time.perf_counter()
        ferroload.Dataset.open(appended).compact()
        results["compact_s"] = time.perf_counter() - t0
        results["read_compacted"] = _read_costs(appended)
    ratio = results["read_appended"]["total"] / results["read_compacted"]["total"]
    results["goal"] = {
        "goal": "open + first batch + subset after N appends within 2x of compacted",
        "value": round(ratio, 2),
        "pass": ratio <= 2,
    }
    results["meta"]["loadavg_after"] = loadavg()
    results["meta"]["total_s"] = time.perf_counter() - start
    st, m = results["append_stats"], results["manifest"]
    print(f"{n} one-sample appends took {results['all_appends_s']:.1f} s")
    print(
        f"  median append {st['median_s'] * 1e3:.1f} ms; slowest #{st['slowest']} "
        f"{st['max_s'] * 1e3:.1f} ms; {m['parts']} index parts left"
    )
    print(
        f"  manifest after them: {m['bytes'] / 1e3:.0f} kB ({m['shards']} shards: "
        f"{m['inline_shards']} inline, {m['shard_lists']} shard lists), "
        f"parse {m['parse_s'] * 1e3:.1f} ms, write {m['write_s'] * 1e3:.1f} ms"
    )
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
    g = results["goal"]
    print(f"GOAL {g['goal']}: {g['value']}x {'PASS' if g['pass'] else 'FAIL'}")
    path = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    write_json(path, results)
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
