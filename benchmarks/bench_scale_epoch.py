"""One rank's whole epoch through `make_loader` on bench_scale's metadata datasets: the
loader's time per sample over an epoch (start-up, index windows and all) and peak RSS,
per N and order, each run in a fresh process, the N interleaved and repeated.

bench_scale.py times 200 batches after the first; with a shuffled order at 10^8 those
include the read of the first large index window, so this script gives the figure a
training job sees over an epoch, the one the "flat from 10^6 to 10^8" goal is judged on
(docs/scale.md). Every figure is one epoch, as a job's first epoch is: at 10^6 a rank's
epoch is 125,000 items (a fraction of a second), so the smaller N run more repetitions
(the median is reported). `--epochs K` runs K epochs in a row instead: later epochs of a
small dataset find its index row groups in the cache and cost less (the second table in
docs/scale.md).

    uv run python benchmarks/bench_scale_epoch.py --workdir /tmp/ferroload-scale
    uv run python benchmarks/bench_scale_epoch.py --one PATH [--streaming] [--epochs K]

The datasets are bench_scale's (`<workdir>/meta-<N>`; bench_scale.py writes them).
Writes `benchmarks/results/bench_scale_epoch.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _meta import git_commit, loadavg, write_json  # noqa: E402

from ferroload_core import exit_process  # noqa: E402

RANK, WORLD, BATCH = 3, 8, 256
SIZES = [10**6, 10**7, 10**8]
REPS_SMALL = 5  # repetitions of the figures under 10^8 (the median is reported)
GOAL = 1.5


def one(path: str, streaming: bool, epochs: int) -> dict[str, Any]:
    """One rank's `epochs` epochs over `path`, in this process."""
    from ferroload_loader import make_loader

    t0 = time.perf_counter()
    dl = make_loader(path, batch_size=BATCH, meta=["label"], out="numpy", rank=RANK,
                     world_size=WORLD, prefetch_bytes=512 << 20, streaming=streaming)  # fmt: skip
    items, first = 0, None
    for epoch in range(epochs):
        dl.set_epoch(epoch)
        for batch in dl:
            if first is None:
                first = time.perf_counter() - t0
            items += len(batch["sample_id"])
    seconds = time.perf_counter() - t0
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    return {
        "path": path, "num_samples": len(dl.source.datasets[0]), "streaming": streaming,
        "epochs": epochs, "items": items, "first_batch_s": first, "seconds": seconds,
        "per_sample_us": seconds / max(items, 1) * 1e6,
        "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
    }  # fmt: skip


def _fresh(path: Path, streaming: bool, epochs: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", str(path), "--epochs", str(epochs)]
    out = subprocess.run(
        cmd + (["--streaming"] if streaming else []), capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = loadavg()
    return result


def series(workdir: Path, reps: int, epochs: int) -> dict[str, Any]:
    """Every (N, order), `reps` times (`REPS_SMALL` for N under 10^8), interleaved; the
    median of each."""
    runs: list[dict[str, Any]] = []
    for rep in range(max(reps, REPS_SMALL)):
        for streaming in (False, True):
            for n in SIZES:
                if rep >= (reps if n >= 10**8 else max(reps, REPS_SMALL)):
                    continue
                r = _fresh(workdir / f"meta-{n}", streaming, epochs)
                r.update(n=n, rep=rep)
                runs.append(r)
                print(f"rep {rep} n={n:.0e} streaming={streaming}: {r['per_sample_us']:.2f} us/sample, "
                      f"peak {r['peak_rss_mb']:.0f} MB, first batch {r['first_batch_s']:.2f} s", flush=True)  # fmt: skip
    table = []
    for streaming in (False, True):
        for n in SIZES:
            mine = [r for r in runs if r["n"] == n and r["streaming"] == streaming]
            table.append({
                "n": n, "streaming": streaming,
                "per_sample_us": statistics.median(r["per_sample_us"] for r in mine),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
                "first_batch_s": statistics.median(r["first_batch_s"] for r in mine),
                "items": mine[0]["items"],
            })  # fmt: skip
    goals = []
    for streaming in (False, True):
        us = [t["per_sample_us"] for t in table if t["streaming"] == streaming]
        ratio = max(us) / min(us)
        goals.append({"order": "streaming" if streaming else "shuffled", "max_over_min": ratio,
                      "pass": ratio < GOAL})  # fmt: skip
    return {"runs": runs, "table": table, "goals": goals}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ferroload-scale"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--one", help="run one dataset in this process (what each figure runs)")
    ap.add_argument("--streaming", action="store_true", help="with --one: the streaming order")
    ap.add_argument("--epochs", type=int, default=1, help="epochs in a row per figure")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "bench_scale_epoch.json")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.streaming, args.epochs)))
        exit_process(0)
    command = "uv run python benchmarks/bench_scale_epoch.py " + " ".join(sys.argv[1:])
    results = {
        "meta": {"commit": git_commit(), "date": time.strftime("%Y-%m-%d"), "command": command,
                 "rank": RANK, "world": WORLD, "batch": BATCH, "epochs": args.epochs},
        **series(args.workdir, args.reps, args.epochs),
    }  # fmt: skip
    write_json(args.json, results)
    print("\n| N | order | us/sample (median) | peak RSS MB | first batch s |")
    for t in results["table"]:
        print(f"| {t['n']:.0e} | {'streaming' if t['streaming'] else 'shuffled'} | "
              f"{t['per_sample_us']:.2f} | {t['peak_rss_mb']:.0f} | {t['first_batch_s']:.2f} |")  # fmt: skip
    for g in results["goals"]:
        print(f"{g['order']}: max/min {g['max_over_min']:.2f} ({'PASS' if g['pass'] else 'FAIL'})")


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
