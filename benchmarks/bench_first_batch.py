"""Time to the first batch: issue 19's "first batch <= 0.2 s on JPEG, <= 0.1 s on tiny".

The sets are `bench_loader.py`'s: tiny (32x32 PNG, batches of 256) and jpeg (256x256 JPEG
q90 resized to 224x224, batches of 64), written once with the quickstart `Writer`. Each rep
is a fresh interpreter (`--worker`) that times, separately:

- `import_s`: `import ferroload` (and torch, which the loader's `out="torch"` needs);
- `make_s`: `make_loader(...)` itself, with `bench_loader.py`'s arguments;
- `first_s`: from just after `make_loader` returns to the first batch in hand
  (`next(iter(dl))`), the issue's figure.

The page cache is warm: every file of the set is read once before the reps. Reps of the
two sets are interleaved; the figures are medians. `--quick` runs fewer, smaller reps.

Remote (`--remote`, on by default; `--no-remote` skips it): the same two sets uploaded
to a real S3 API (`ferroload_testing.MotoServer` on 127.0.0.1) behind a `FaultProxy`
that adds `REMOTE_DELAY` (20 ms, as `bench_store.py`) to every request, each rep a fresh
interpreter with a fresh, empty block cache: `make_s` (opening the dataset: manifest
and index requests) and `first_s` (the first batch's index window and payload blocks)
from the server, cold. Reported, no goal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _meta import git_commit, loadavg, utc_now, write_json

from ferroload_core import exit_process

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bench_first_batch.json"
GOALS = {"tiny": 0.1, "jpeg": 0.2}
# name: (ext, encoded side, output side, batch)
SETS = {"tiny": ("png", 32, 32, 256), "jpeg": ("jpg", 256, 224, 64)}
PREFETCH = 512 * 1024 * 1024


REMOTE_DELAY = 0.020  # seconds the proxy adds to every request (bench_store.py's)
BUCKET = "first-batch"


def _worker(spec: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    import torch  # noqa: F401  (out="torch" needs it; timed with the import)

    import ferroload

    t1 = time.perf_counter()
    size = spec["out"]
    remote: dict[str, Any] = {}
    if "storage_options" in spec:  # a fresh, empty block cache: every block from the server
        remote = {
            "storage_options": spec["storage_options"],
            "cache": ferroload.BlockCache(spec["cache_dir"], max_bytes=1 << 30),
        }
    dl = ferroload.make_loader(
        spec["path"],
        batch_size=spec["batch"],
        images=["image"],
        meta=["label"],
        resize=(size, size),
        out="torch",
        seed=0,
        prefetch_bytes=PREFETCH,
        **remote,
    )
    t2 = time.perf_counter()
    batch = next(iter(dl))
    t3 = time.perf_counter()
    n = len(batch["image"])
    dl.close()
    print(
        "RESULT "
        + json.dumps({"import_s": t1 - t0, "make_s": t2 - t1, "first_s": t3 - t2, "n": n}),
        flush=True,
    )


def _warm(root: Path) -> int:
    total = 0
    for p in root.rglob("*"):
        if p.is_file():
            total += len(p.read_bytes())
    return total


def _run_one(path: Path | str, spec: dict[str, Any]) -> dict[str, Any]:
    spec = {**spec, "path": str(path)}
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise RuntimeError(out.stderr)


def _write(name: str, n: int, root: Path) -> Path:
    from _data import encode_samples
    from _peers import write_ferroload

    ext, side, _, _ = SETS[name]
    samples = encode_samples(name, n, size=side, fmt=ext, seed=0)
    path = root / name
    write_ferroload(samples, path, name)
    return path


def _remote(
    paths: dict[str, Path], reps: int, root: Path
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """Upload the sets to a moto S3 server behind a delaying proxy; time fresh-process
    first batches from it, each with an empty block cache (reps interleaved)."""
    from bench_store import ProxyProcess, _upload

    from ferroload_testing import MotoServer

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}
    info: dict[str, Any] = {"delay_s": REMOTE_DELAY, "uploaded_bytes": {}}
    with MotoServer() as s3:
        direct = s3.storage_options(BUCKET)
        proxy = ProxyProcess(*s3.address, REMOTE_DELAY)
        try:
            via_proxy = s3.storage_options(endpoint=proxy.endpoint)
            for name, p in paths.items():
                info["uploaded_bytes"][name] = _upload(p, f"s3://{BUCKET}/{name}", direct)
            for r in range(reps):
                for name in paths:
                    _, _, out, batch = SETS[name]
                    cache = Path(tempfile.mkdtemp(prefix=f"cache-{name}-{r}-", dir=root))
                    spec = {"out": out, "batch": batch, "storage_options": via_proxy,
                            "cache_dir": str(cache)}  # fmt: skip
                    runs[name].append(_run_one(f"s3://{BUCKET}/{name}", spec))
                    shutil.rmtree(cache, ignore_errors=True)
        finally:
            proxy.close()
    return runs, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sets, fewer reps")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--dir", type=Path, default=None, help="reuse / keep the sets here")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--remote",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the first batch from an S3 server behind a 20 ms proxy",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        _worker(json.loads(args.worker))
        exit_process(0)
    counts = {"tiny": 2_048, "jpeg": 512} if args.quick else {"tiny": 20_480, "jpeg": 5_000}
    reps = args.reps or (3 if args.quick else 7)
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ferroload-first-")
        root = Path(tmp.name)
    else:
        root = args.dir
        root.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, n in counts.items():
        p = root / name
        marker = root / f"{name}.n"
        if not (marker.exists() and marker.read_text() == str(n)):
            shutil.rmtree(p, ignore_errors=True)  # a set of another size (--quick) is replaced
            p = _write(name, n, root)
            marker.write_text(str(n))
        paths[name] = p
        _warm(p)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in counts}
    meta: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "started_at": utc_now(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": loadavg(),
        "reps": reps,
        "method": "fresh interpreter per rep, sets interleaved, page cache warm (every "
        "file read once before), medians; first_s: next(iter(dl)) after make_loader returns",
    }
    t0 = time.perf_counter()
    for _ in range(reps):
        for name in counts:  # interleaved
            _, _, out, batch = SETS[name]
            runs[name].append(_run_one(paths[name], {"out": out, "batch": batch}))
    remote_runs: dict[str, list[dict[str, Any]]] = {}
    if args.remote:
        remote_runs, meta["remote"] = _remote(paths, reps, root)
    meta["loadavg_end"] = loadavg()
    meta["total_s"] = time.perf_counter() - t0
    sets: dict[str, Any] = {}
    goals: list[dict[str, Any]] = []
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("import_s", "make_s", "first_s")}
        sets[name] = {"samples": counts[name], "batch": SETS[name][3], "median": med, "reps": rs}
        goals.append(
            {
                "goal": f"{name}: first batch <= {GOALS[name]} s after make_loader returns "
                "(local disk, warm page cache, fresh processes, medians)",
                "value": med["first_s"],
                "pass": med["first_s"] <= GOALS[name],
            }
        )
        print(
            f"{name:5s} first batch {med['first_s'] * 1e3:7.1f} ms (goal {GOALS[name] * 1e3:.0f})"
            f"  make_loader {med['make_s'] * 1e3:6.1f} ms  import {med['import_s'] * 1e3:6.1f} ms"
        )
    remote: dict[str, Any] = {}
    for name, rs in remote_runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("import_s", "make_s", "first_s")}
        remote[name] = {"samples": counts[name], "batch": SETS[name][3], "median": med, "reps": rs}
        print(
            f"{name:5s} remote (S3 + {REMOTE_DELAY * 1e3:.0f} ms, cold cache): first batch "
            f"{med['first_s'] * 1e3:7.1f} ms  make_loader {med['make_s'] * 1e3:6.1f} ms"
        )
    data = {"meta": meta, "sets": sets, "remote": remote, "goals": goals}
    write_json(args.out, data)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
