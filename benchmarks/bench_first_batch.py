"""Time to the first batch: issue 19's "first batch <= 0.2 s on JPEG, <= 0.1 s on tiny".

The sets are `bench_loader.py`'s: tiny (32x32 PNG, batches of 256) and jpeg (256x256 JPEG
q90 resized to 224x224, batches of 64), written once with the quickstart `Writer`. Each rep
is a fresh interpreter (`--worker`) that times, separately:

- `import_s`: `import ferroload` (and torch, which the loader's `out="torch"` needs);
- `make_s`: `make_loader(...)` itself, with `bench_loader.py`'s arguments;
- `first_s`: from just after `make_loader` returns to the first batch in hand
  (`next(iter(dl))`), the issue's figure;
- `maxrss`: the rep process's peak RSS (`ru_maxrss`, as VmHWM) once it has its first
  batch and has closed the loader.

ferroload-rs 0.1.1 (`rs011`), the Rust original, is timed the same way beside it: the same
samples written by its own `Writer`, its documented `make_loader(root, B, images=["image"],
meta=["label"], resize=(S, S), out="torch", seed=0)`, each rep a fresh interpreter of its
own virtualenv (`_rs011_peer.py`; made once under `--workdir`; without one the run says
why and goes on without it). Its published wheel has no cloud support: the remote part
is ours alone.

The page cache is warm: every file of the set is read once before the reps. Reps of the
two sets and the two systems are interleaved; the figures are medians. `--quick` runs
fewer, smaller reps.

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
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Only the standard library at the top: ferroload-rs 0.1.1's venv runs this script's
# workers too (its own `ferroload`, no ferroload_core).
from _memory import maxrss
from _meta import git_commit, import_torch, loadavg, utc_now, write_json
from _rs011_peer import leave

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bench_first_batch.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench"  # _harness's
GOALS = {"tiny": 0.1, "jpeg": 0.2}
NO_CLOUD = "ferroload-rs 0.1.1's published wheel has no cloud support"
FIGURES = ("import_s", "make_s", "first_s", "maxrss")
# name: (ext, encoded side, output side, batch)
SETS = {"tiny": ("png", 32, 32, 256), "jpeg": ("jpg", 256, 224, 64)}
PREFETCH = 512 * 1024 * 1024


REMOTE_DELAY = 0.020  # seconds the proxy adds to every request (bench_store.py's)
BUCKET = "first-batch"


def _result(t: list[float], n: int) -> None:
    """Print a rep's `RESULT` line from its four time stamps and its first batch's size."""
    times = {"import_s": t[1] - t[0], "make_s": t[2] - t[1], "first_s": t[3] - t[2]}
    res = {**times, "maxrss": maxrss(resource.RUSAGE_SELF), "n": n}
    print("RESULT " + json.dumps(res), flush=True)


def _worker_rs011(spec: dict[str, Any]) -> None:
    """One rep of ferroload-rs 0.1.1 (this process runs its venv's interpreter)."""
    t0 = time.perf_counter()
    import_torch()  # out="torch" needs it; timed with the import
    from _rs011_peer import RS011_VERSION, make_loader

    import ferroload

    assert ferroload.__version__ == RS011_VERSION, ferroload.__version__
    t1 = time.perf_counter()
    dl = make_loader(spec["path"], spec["batch"], spec["out"])
    t2 = time.perf_counter()
    it = iter(dl)
    batch = next(it)
    t3 = time.perf_counter()
    n = len(batch["image"])
    del it, batch
    _result([t0, t1, t2, t3], n)


def _worker(spec: dict[str, Any]) -> None:
    if spec.get("system") == "rs011":
        _worker_rs011(spec)
        return
    t0 = time.perf_counter()
    import_torch()  # out="torch" needs it; timed with the import

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
    _result([t0, t1, t2, t3], n)


def _warm(root: Path) -> int:
    total = 0
    for p in root.rglob("*"):
        if p.is_file():
            total += len(p.read_bytes())
    return total


def _run_one(
    path: Path | str, spec: dict[str, Any], python: str = sys.executable
) -> dict[str, Any]:
    spec = {**spec, "path": str(path)}
    out = subprocess.run(
        [python, __file__, "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]))
    raise RuntimeError(out.stderr)


def _write(name: str, n: int, root: Path, rs011: str | None) -> dict[str, Path]:
    """The set `name` of `n` samples under `root`, written by ferroload (`root/name`) and,
    with its interpreter `rs011`, by ferroload-rs 0.1.1's Writer (`root/name-rs011`): the
    same samples. A copy already there with the same `n` (its `.n` marker) is kept."""
    from _data import encode_samples
    from _peers import write_ferroload
    from _rs011_peer import write_rs011

    ext, side, _, _ = SETS[name]
    paths = {"ferroload": root / name}
    if rs011 is not None:
        paths["rs011"] = root / f"{name}-rs011"
    todo = {}
    for system, path in paths.items():
        marker = path.parent / f"{path.name}.n"
        if not (marker.exists() and marker.read_text() == str(n)):
            todo[system] = (path, marker)
    if todo:
        samples = encode_samples(name, n, size=side, fmt=ext, seed=0)
        for system, (path, marker) in todo.items():
            shutil.rmtree(path, ignore_errors=True)  # a set of another size (--quick)
            if system == "rs011":
                assert rs011 is not None
                write_rs011(rs011, samples, path)
            else:
                write_ferroload(samples, path, name)
            marker.write_text(str(n))
    return paths


def _medians(rs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rs) for k in FIGURES if all(k in r for r in rs)}


def _goals(sets: dict[str, Any], rs011: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's first-batch goals, then ferroload against ferroload-rs 0.1.1 on each set:
    first batch and peak RSS of the rep processes (medians), at most rs011's."""
    goals = []
    for name, st in sets.items():
        med = st["median"]
        goals.append(
            {
                "goal": f"{name}: first batch <= {GOALS[name]} s after make_loader returns "
                "(local disk, warm page cache, fresh processes, medians)",
                "value": med["first_s"],
                "pass": med["first_s"] <= GOALS[name],
            }
        )
    for name, st in sets.items():
        theirs = rs011.get(name, {}).get("median", {})
        for key, what in (("first_s", "first batch"), ("maxrss", "peak RSS")):
            value = theirs.get(key)
            goals.append(
                {
                    "goal": f"{name}: {what} <= ferroload-rs 0.1.1's (fresh processes, "
                    "medians; value: ours / theirs)",
                    "value": None if value is None else st["median"][key] / value,
                    "pass": value is not None and st["median"][key] <= value,
                }
            )
    return goals


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


def _line(name: str, who: str, med: dict[str, float]) -> str:
    rss = med.get("maxrss")
    return (
        f"{name:5s} {who:9s} first batch {med['first_s'] * 1e3:7.1f} ms  make_loader "
        f"{med['make_s'] * 1e3:6.1f} ms  import {med['import_s'] * 1e3:6.1f} ms  peak RSS "
        + ("-" if rss is None else f"{rss / (1 << 20):,.0f} MiB")
    )


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
    ap.add_argument(
        "--rs011",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time ferroload-rs 0.1.1 in its own venv (made once under --workdir)",
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"where ferroload-rs 0.1.1's venv is kept (default {DEFAULT_WORKDIR})",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        _worker(json.loads(args.worker))
        leave(0)
    from _rs011_peer import RS011_VERSION, rs011_python

    counts = {"tiny": 2_048, "jpeg": 512} if args.quick else {"tiny": 20_480, "jpeg": 5_000}
    reps = args.reps or (3 if args.quick else 7)
    rs011: str | None = None
    rs011_reason: str | None = "--no-rs011"
    if args.rs011:
        rs011, rs011_reason = rs011_python(args.workdir)
        if rs011 is None:
            print(f"ferroload-rs {RS011_VERSION} left out: {rs011_reason}", file=sys.stderr)
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ferroload-first-")
        root = Path(tmp.name)
    else:
        root = args.dir
        root.mkdir(parents=True, exist_ok=True)
    copies = {name: _write(name, n, root, rs011) for name, n in counts.items()}
    for c in copies.values():
        for p in c.values():
            _warm(p)
    paths = {name: c["ferroload"] for name, c in copies.items()}
    systems = ["ferroload"] + (["rs011"] if rs011 is not None else [])
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {k: [] for k in counts} for s in systems}
    meta: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "started_at": utc_now(),
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": loadavg(),
        "reps": reps,
        "method": "fresh interpreter per rep, sets and systems interleaved, page cache warm "
        "(every file read once before), medians; first_s: next(iter(dl)) after make_loader "
        "returns; maxrss: the rep process's peak RSS after its first batch",
        "rs011": {
            "version": RS011_VERSION,
            "python": rs011,
            "reason": rs011_reason,
            "remote": NO_CLOUD,
            "loader": "make_loader(root, B, images=['image'], meta=['label'], "
            "resize=(S, S), out='torch', seed=0), the same samples written by its Writer",
        },
    }
    t0 = time.perf_counter()
    for r in range(reps):
        for name in counts:  # interleaved
            _, _, out, batch = SETS[name]
            for system in systems if r % 2 == 0 else systems[::-1]:
                spec = {"system": system, "out": out, "batch": batch}
                python = rs011 if system == "rs011" and rs011 is not None else sys.executable
                runs[system][name].append(_run_one(copies[name][system], spec, python))
    remote_runs: dict[str, list[dict[str, Any]]] = {}
    if args.remote:
        remote_runs, meta["remote"] = _remote(paths, reps, root)
        meta["remote"]["rs011"] = NO_CLOUD
    meta["loadavg_end"] = loadavg()
    meta["total_s"] = time.perf_counter() - t0
    found: dict[str, dict[str, Any]] = {s: {} for s in systems}
    for system, by_set in runs.items():
        for name, rs in by_set.items():
            found[system][name] = {
                "samples": counts[name],
                "batch": SETS[name][3],
                "median": _medians(rs),
                "reps": rs,
            }
    sets, theirs = found["ferroload"], found.get("rs011", {})
    for name in counts:
        print(_line(name, "ferroload", sets[name]["median"]))
        if name in theirs:
            print(_line(name, "rs011", theirs[name]["median"]))
    if rs011 is None:
        print(f"ferroload-rs {RS011_VERSION}: not run ({rs011_reason})")
    remote: dict[str, Any] = {}
    for name, rs in remote_runs.items():
        med = _medians(rs)
        remote[name] = {"samples": counts[name], "batch": SETS[name][3], "median": med, "reps": rs}
        print(
            f"{name:5s} remote (S3 + {REMOTE_DELAY * 1e3:.0f} ms, cold cache): first batch "
            f"{med['first_s'] * 1e3:7.1f} ms  make_loader {med['make_s'] * 1e3:6.1f} ms"
        )
    if remote_runs:
        print(f"remote: ferroload only ({NO_CLOUD})")
    goals = _goals(sets, theirs)
    for g in goals:
        v = g["value"]
        shown = "-" if v is None else f"{v:.3f}"
        print(f"{'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {shown}")
    data = {"meta": meta, "sets": sets, "rs011": theirs, "remote": remote, "goals": goals}
    write_json(args.out, data)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
    leave(0)  # without the interpreter's teardown (see README)
