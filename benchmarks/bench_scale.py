"""Scale: open, first batch, order, subset, loader overhead and memory from 10^6 to 10^8
samples, and per-rank object-store requests with many ranks.

The datasets come from `_scale_data.py` (numpy writes what the Writer would write for the
same samples; see there): a **metadata** series (no payloads: `sample_id`, `label`, `ts`)
at 10^6, 10^7 and 10^8 samples, and an **image** series (one 4x4 PNG per sample, a 1 KiB
tar member) at 10^6 and 10^7 (10^8 would be 100 GB of shards). They are cached in
`--workdir` and reused by later runs.

Every figure of one dataset is measured in a fresh subprocess, so its peak RSS
(`ru_maxrss`) is that measurement's alone:

* `open`: `Dataset.open` (first, then best of 5 more in the same process).
* `loader`: `make_loader(uri, batch_size=256, meta=["label"] (+ the image at 4x4),
  out="numpy", rank=3, world_size=8, prefetch_bytes=512 MiB)`: seconds to the first batch
  (from before `make_loader`), then the steady-state seconds per batch over the next
  batches, per sample; peak RSS of the process, and its anonymous / file-backed parts at
  the end. Also with `streaming=True`.
* `order`: `Sampler(N, seed=0, rank=3, world_size=8)`: seconds to its first batch of
  indices, then per batch; peak RSS.
* `subset`: `Dataset.open(uri).subset(where)` with a selective predicate
  (`ts BETWEEN N/2 AND N/2 + 999`: 1,000 rows, `ts` sorted so row groups prune) and a
  non-selective one (`label < 500`: half the rows, nothing to prune): seconds, rows, bytes
  read (the store's counters and the process's `rchar`), peak RSS.
* `index bytes`: the index parts, sample-id runs and manifest on disk.

**Many ranks** (`ranks`): a 10^5-sample image dataset (shards of ~1,000 samples) on the
moto S3 server; for 8 and 64 ranks, ranks 0 and W-1 each run one epoch in a fresh process
with a fresh block cache, in the shuffled (permutation) and the streaming order, counting
the store's GET requests against the shards and samples the rank read.

Run it from the repository root (not in CI; `--quick` is the CI smoke):

    uv run python benchmarks/bench_scale.py            # full: ~6 min (+ ~15 to write ~12 GB)
    uv run python benchmarks/bench_scale.py --quick    # 10^4 / 10^5, seconds
    uv run python benchmarks/bench_scale.py --only manifest   # the manifest table alone
    uv run python benchmarks/bench_scale.py --only ranks      # the many-ranks S3 runs alone

Writes `benchmarks/results/bench_scale.json` (`bench_scale_quick.json` with `--quick`) and,
for a full run, the plots `docs/images/scale_*.png`.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _meta import git_commit, loadavg, machine, utc_now, write_json  # noqa: E402
from _procs import run_once, serve_once  # noqa: E402
from _scale_report import (  # noqa: E402
    plots,
    report,
    report_manifest,
    report_ranks,
    scale_goals,
    series_table,
)

from ferroload_core import exit_process  # noqa: E402

DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-scale"
RESULTS = HERE / "results"
IMAGES = HERE.parent / "docs" / "images"
BATCH = 256
RANK, WORLD = 3, 8
PREFETCH = 512 << 20

FULL = {
    "meta": [10**6, 10**7, 10**8],
    "image": [10**6, 10**7],
    "ranks_n": 10**5,
    "ranks_shard_size": 1 << 20,
    "worlds": [8, 64],
    "batches": 200,
    "shards": [1_000, 10_000, 100_000, 400_000],
    "both_ranks": True,
    "remote": [10**6, 10**7],
}
QUICK = {
    "meta": [10**4, 10**5],
    "image": [10**4],
    "ranks_n": 2_000,
    "ranks_shard_size": 64 << 10,
    "worlds": [2, 8],
    "batches": 10,
    "shards": [100, 1_000],
    "both_ranks": False,
    "remote": [10**5],
}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------- workers


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _rss_now() -> dict[str, float]:
    """The process's resident memory now, split (MB): anonymous (heap, Arrow buffers) and
    file-backed (mapped files: shard and index pages read through mmap count here, and the
    kernel may drop them at any time)."""
    out: dict[str, float] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


def _rchar() -> int:
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _w_open(spec: dict[str, Any]) -> dict[str, Any]:
    from ferroload_format import Dataset

    base = _peak_rss_mb()
    t0 = time.perf_counter()
    ds = Dataset.open(spec["uri"])
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        Dataset.open(spec["uri"])
        best = min(best, time.perf_counter() - t0)
    m = ds.manifest
    root = Path(spec["uri"])
    on_disk = {
        "index_parts": sum(p.stat().st_size for p in (root / "index").glob("part-*.parquet")),
        "id_runs": sum(r.size for r in m.id_runs),
        "manifest": (root / "_ferroload" / "versions" / f"{m.version:010d}.json").stat().st_size,
    }
    leftovers = sum(p.stat().st_size for p in (root / "_ferroload" / "ids").glob("*"))
    return {
        "unreferenced_id_run_bytes": leftovers - on_disk["id_runs"],
        "open_first_s": first,
        "open_s": best,
        "num_samples": ds.num_samples,
        "index_parts": len(m.index_parts),
        "shards": m.num_shards,
        "bytes": on_disk,
        "index_bytes": sum(on_disk.values()),
        "rss_import_mb": base,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _w_loader(spec: dict[str, Any]) -> dict[str, Any]:
    from ferroload_loader import make_loader

    base = _peak_rss_mb()
    kw: dict[str, Any] = {}
    if spec["images"]:
        kw = {"images": ["image"], "resize": 4}
    t0 = time.perf_counter()
    dl = make_loader(
        spec["uri"], batch_size=BATCH, meta=["label"], out="numpy", seed=0, rank=RANK,
        world_size=WORLD, prefetch_bytes=PREFETCH, streaming=spec.get("streaming", False), **kw,
    )  # fmt: skip
    made = time.perf_counter() - t0
    it = iter(dl)
    batch = next(it)
    first = time.perf_counter() - t0
    assert len(batch["sample_id"]) == BATCH
    k = min(spec["batches"], len(dl) - 1)
    t1 = time.perf_counter()
    for _ in range(k):
        next(it)
    per_batch = (time.perf_counter() - t1) / k
    dl.close()
    return {
        "make_loader_s": made,
        "first_batch_s": first,
        "per_batch_s": per_batch,
        "per_sample_us": per_batch / BATCH * 1e6,
        "batches": k,
        "streaming": spec.get("streaming", False),
        "rss_import_mb": base,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_end": _rss_now(),
    }


def _w_order(spec: dict[str, Any]) -> dict[str, Any]:
    from itertools import islice

    from ferroload_loader import Sampler

    base = _peak_rss_mb()
    t0 = time.perf_counter()
    s = Sampler(spec["n"], seed=0, rank=RANK, world_size=WORLD)
    it = iter(s)
    first = list(islice(it, BATCH))
    t_first = time.perf_counter() - t0
    assert len(first) == BATCH
    k = spec["batches"]
    t1 = time.perf_counter()
    got = sum(1 for _ in islice(it, BATCH * k))
    per_batch = (time.perf_counter() - t1) / k
    return {
        "first_s": t_first,
        "per_batch_s": per_batch,
        "items": got,
        "rss_import_mb": base,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _w_subset(spec: dict[str, Any]) -> dict[str, Any]:
    from ferroload_format import Dataset

    base = _peak_rss_mb()
    ds = Dataset.open(spec["uri"])
    before = ds.store.stats.snapshot()
    r0 = _rchar()
    t0 = time.perf_counter()
    view = ds.subset(spec["where"])
    rows = len(view)
    dt = time.perf_counter() - t0
    after = ds.store.stats.snapshot()
    scan: dict[str, int] | str
    try:  # what the scan read (row groups, bytes), measured again untimed
        import dataclasses

        from ferroload_format._pruning import ScanStats
        from ferroload_format._query import where_positions

        st = ScanStats()
        again = Dataset.open(spec["uri"])
        where_positions(again._index, None, spec["where"], uri=again.uri, stats=st)
        scan = dataclasses.asdict(st)
    except Exception as exc:  # a private API: the figure is optional
        scan = f"unavailable: {exc!r}"
    return {
        "where": spec["where"],
        "scan": scan,
        "s": dt,
        "rows": rows,
        "store_bytes_read": after["bytes_read"] - before["bytes_read"],
        "store_get_requests": after["get_requests"] - before["get_requests"],
        "rchar": _rchar() - r0,
        "rss_import_mb": base,
        "peak_rss_mb": _peak_rss_mb(),
        "rss_end": _rss_now(),
    }


def _w_rank(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from ferroload_format import Dataset
    from ferroload_loader import make_loader
    from ferroload_store import BlockCache

    cache_dir = tempfile.mkdtemp(prefix="scale-cache-")
    try:
        cache = BlockCache(cache_dir, max_bytes=2 << 30)
        t0 = time.perf_counter()
        ds = Dataset.open(spec["uri"], storage_options=spec["options"], cache=cache)
        s0 = ds.store.stats.snapshot()
        dl = make_loader(
            ds, batch_size=64, images=["image"], resize=4, out="numpy", seed=0,
            rank=spec["rank"], world_size=spec["world"], streaming=spec["streaming"],
            drop_last=False,
        )  # fmt: skip
        ids: list[str] = []
        it = iter(dl)
        first = next(it)
        t_first = time.perf_counter() - t0
        s1 = ds.store.stats.snapshot()
        ids.extend(first["sample_id"])
        for b in it:
            ids.extend(b["sample_id"])
        s2 = ds.store.stats.snapshot()
        dl.close()
        pos = np.array([int(s[1:]) for s in ids], dtype=np.int64)
        shard_of = ds.shard_of()  # the bench's own check, O(N) on purpose
        shards = np.unique(shard_of[pos])
        return {
            "world": spec["world"],
            "rank": spec["rank"],
            "streaming": spec["streaming"],
            "samples": len(ids),
            "distinct_samples": len(np.unique(pos)),
            "shards_read": len(shards),
            "get_requests": s2["get_requests"] - s0["get_requests"],
            "get_requests_to_first_batch": s1["get_requests"] - s0["get_requests"],
            "bytes_read": s2["bytes_read"] - s0["bytes_read"],
            "first_batch_s": t_first,
            "peak_rss_mb": _peak_rss_mb(),
        }
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def _w_manifest(spec: dict[str, Any]) -> dict[str, Any]:
    """`Dataset.open` of a version of `shards` shards whose manifest is what the commits
    now write (docs/format.md §6.2): synthetic records like the Writer's, 256 MiB each,
    one writer session of 1,000 shards per commit, each commit moving its inline shards
    into a shard list by the tiered rule (`_shard_lists.spill`, as `commit` does). The
    shards themselves do not exist: opening reads only the manifest. Also times the
    first `manifest.shards` (reading and checking every list: what the first payload
    read pays once) and records the lists' bytes."""
    from ferroload_format import Dataset
    from ferroload_format._names import new_txn_id
    from ferroload_format._paths import shard_paths, version_path
    from ferroload_format._records import ShardInfo
    from ferroload_format._shard_lists import forget_cached_lists, spill
    from ferroload_store import open_store

    src = Dataset.open(spec["uri"])
    out = []
    for count in spec["shards"]:
        root = Path(tempfile.mkdtemp(prefix="scale-manifest-"))
        try:
            shutil.copytree(spec["uri"], root / "ds")
            store = open_store(str(root / "ds"))
            m = src.manifest.derive(shards=())
            for first in range(0, count, 1000):
                txn = new_txn_id()
                session = tuple(
                    ShardInfo(*shard_paths(txn, k), 256 << 20, 2684, 2684, 1)
                    for k in range(min(1000, count - first))
                )
                m = spill(store, m.derive(inline_shards=m.inline_shards + session), txn)
            data = m.to_bytes()
            (root / "ds" / version_path(m.version)).write_bytes(data)
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                ds = Dataset.open(str(root / "ds"))
                best = min(best, time.perf_counter() - t0)
            assert ds.num_shards == count
            resolve = float("inf")
            for _ in range(3):
                forget_cached_lists()
                fresh = Dataset.open(str(root / "ds")).manifest
                t0 = time.perf_counter()
                assert len(fresh.shards) == count
                resolve = min(resolve, time.perf_counter() - t0)
            out.append(
                {
                    "shards": count,
                    "manifest_bytes": len(data),
                    "open_s": best,
                    "inline_shards": len(m.inline_shards),
                    "shard_lists": len(m.shard_lists),
                    "list_bytes": sum(x.size for x in m.shard_lists),
                    "resolve_shards_s": resolve,
                }
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {"runs": out, "peak_rss_mb": _peak_rss_mb()}


def _w_remote(spec: dict[str, Any]) -> dict[str, Any]:
    """Open and first batch of a dataset on S3 (moto), with the requests and bytes each
    took (a fresh block cache)."""
    from ferroload_format import Dataset
    from ferroload_loader import make_loader
    from ferroload_store import BlockCache

    cache_dir = tempfile.mkdtemp(prefix="scale-cache-")
    try:
        cache = BlockCache(cache_dir, max_bytes=2 << 30)
        t0 = time.perf_counter()
        ds = Dataset.open(spec["uri"], storage_options=spec["options"], cache=cache)
        t_open = time.perf_counter() - t0
        s0 = ds.store.stats.snapshot()
        dl = make_loader(
            ds, batch_size=BATCH, meta=["label"], out="numpy", seed=0, rank=RANK,
            world_size=WORLD, streaming=spec["streaming"],
        )  # fmt: skip
        batch = next(iter(dl))
        t_first = time.perf_counter() - t0
        s1 = ds.store.stats.snapshot()
        dl.close()
        assert len(batch["sample_id"]) == BATCH
        return {
            "n": spec["n"],
            "streaming": spec["streaming"],
            "open_s": t_open,
            "first_batch_s": t_first,
            "get_requests": s1["get_requests"] - s0["get_requests"],
            "bytes_read": s1["bytes_read"] - s0["bytes_read"],
            "peak_rss_mb": _peak_rss_mb(),
        }
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


WORKERS = {
    "remote": _w_remote,
    "manifest": _w_manifest,
    "open": _w_open,
    "loader": _w_loader,
    "order": _w_order,
    "subset": _w_subset,
    "rank": _w_rank,
}


def worker(spec_json: str) -> None:
    serve_once(WORKERS, spec_json)


def _run(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its result, or `{"error": ...}`."""
    try:
        return run_once(__file__, spec, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    except RuntimeError as exc:
        return {"error": str(exc)}


# --------------------------------------------------------------------- driver


def _dataset(workdir: Path, kind: str, n: int, shard_size: int | None = None) -> Path:
    """The cached dataset `kind`-`n` in `workdir`, written by `_scale_data` if absent."""
    import _scale_data

    name = f"{kind}-{n}" + (f"-{shard_size}" if shard_size else "")
    root = workdir / name
    done = workdir / f"{name}.done.json"
    if done.exists() and root.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    _log(f"writing {name}")
    kw = {"shard_size": shard_size} if shard_size else {}
    info = _scale_data.write_dataset(root, n, payloads=kind == "image", log=_log, **kw)
    done.write_text(json.dumps(info) + "\n")
    _log(f"wrote {name} in {info['seconds']:.0f} s")
    return root


def _bench_dataset(root: Path, kind: str, n: int, batches: int) -> dict[str, Any]:
    uri = str(root)
    res: dict[str, Any] = {"kind": kind, "n": n}
    res["generator"] = json.loads((root.parent / f"{root.name}.done.json").read_text())
    res["open"] = _run({"kind": "open", "uri": uri})
    _log(f"{kind} {n:.0e}: open {res['open'].get('open_s', res['open'])}")
    res["loader"] = _run(
        {"kind": "loader", "uri": uri, "images": kind == "image", "batches": batches}
    )
    _log(f"{kind} {n:.0e}: loader {res['loader']}")
    res["loader_streaming"] = _run(
        {"kind": "loader", "uri": uri, "images": kind == "image", "batches": batches,
         "streaming": True}
    )  # fmt: skip
    _log(f"{kind} {n:.0e}: loader streaming {res['loader_streaming']}")
    if kind == "meta":
        res["order"] = _run({"kind": "order", "n": n, "batches": batches})
        _log(f"{kind} {n:.0e}: order {res['order']}")
        lo = n // 2
        res["subset_selective"] = _run(
            {"kind": "subset", "uri": uri, "where": f"ts BETWEEN {lo} AND {lo + 999}"}
        )
        res["subset_all"] = _run({"kind": "subset", "uri": uri, "where": "label < 500"})
        _log(
            f"{kind} {n:.0e}: subset {res['subset_selective'].get('s')} / "
            f"{res['subset_all'].get('s')}"
        )
    return res


def _bench_ranks(workdir: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    from bench_store import _upload

    from ferroload_testing import MotoServer

    n, shard_size = sizes["ranks_n"], sizes["ranks_shard_size"]
    local = _dataset(workdir, "image", n, shard_size)
    out: dict[str, Any] = {"n": n, "shard_size": shard_size, "runs": []}
    with MotoServer() as s3:
        bucket = "scale"
        s3.create_bucket(bucket)
        options = s3.storage_options(bucket)
        uri = f"s3://{bucket}/ranks"
        out["uploaded_bytes"] = _upload(local, uri, options)
        out["remote"] = []
        for n in sizes["remote"]:
            meta_uri = f"s3://{bucket}/meta-{n}"
            _upload(_dataset(workdir, "meta", n), meta_uri, options)
            for streaming in (False, True):
                spec = {"kind": "remote", "uri": meta_uri, "options": options, "n": n,
                        "streaming": streaming}  # fmt: skip
                r = _run(spec, timeout=900)
                r.setdefault("n", n)
                r.setdefault("streaming", streaming)
                out["remote"].append(r)
                _log(f"remote: {r}")
        for streaming in (False, True):
            for world in sizes["worlds"]:
                for rank in (0, world - 1) if sizes["both_ranks"] else (0,):
                    spec = {
                        "kind": "rank", "uri": uri, "options": options, "world": world,
                        "rank": rank, "streaming": streaming,
                    }  # fmt: skip
                    r = _run(spec, timeout=900)
                    r.setdefault("world", world)
                    r.setdefault("rank", rank)
                    r.setdefault("streaming", streaming)
                    out["runs"].append(r)
                    _log(f"ranks: {r}")
    return out


def _only(args: argparse.Namespace) -> dict[str, Any]:
    """One part alone (`--only manifest`: on the smallest metadata dataset; `--only
    ranks`: the many-ranks runs on S3, without the remote metadata datasets)."""
    sizes = dict(QUICK if args.quick else FULL)
    if args.meta is not None:
        sizes["meta"] = args.meta
    workdir: Path = args.workdir / ("quick" if args.quick else "full")
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "command": f"python benchmarks/bench_scale.py --only {args.only}",
            "date": utc_now(),
            "git_commit": git_commit(),
            "machine": machine(),
            "loadavg_start": loadavg(),
        },
    }
    if args.only == "manifest":
        small = _dataset(workdir, "meta", sizes["meta"][0])
        results["manifest"] = _run(
            {"kind": "manifest", "uri": str(small), "shards": sizes["shards"]}
        )
    else:
        results["ranks"] = _bench_ranks(workdir, {**sizes, "remote": []})
    results["meta"]["loadavg_end"] = loadavg()
    suffix = "_quick" if args.quick else ""
    out_json = args.json or RESULTS / f"bench_scale_{args.only}{suffix}.json"
    write_json(out_json, results)
    if args.only == "manifest":
        report_manifest(results)
    else:
        report_ranks(results["ranks"])
    print(f"\nresults: {out_json}")
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (seconds)")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plots", type=Path, default=None, help="folder for scale_*.png")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--meta", type=int, nargs="*", help="sizes of the metadata series")
    ap.add_argument("--image", type=int, nargs="*", help="sizes of the image series")
    ap.add_argument("--no-ranks", action="store_true", help="skip the many-ranks S3 part")
    ap.add_argument(
        "--only",
        choices=["manifest", "ranks"],
        help="run only this part (writes bench_scale_<part>[_quick].json)",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker)
        exit_process(0)
    if args.only:
        return _only(args)
    sizes = dict(QUICK if args.quick else FULL)
    if args.meta is not None:
        sizes["meta"] = args.meta
    if args.image is not None:
        sizes["image"] = args.image
    workdir: Path = args.workdir / ("quick" if args.quick else "full")
    workdir.mkdir(parents=True, exist_ok=True)
    out_json = args.json or RESULTS / (
        "bench_scale_quick.json" if args.quick else "bench_scale.json"
    )
    started = time.perf_counter()
    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "command": " ".join(["python", "benchmarks/bench_scale.py", *(argv or sys.argv[1:])]),
            "date": utc_now(),
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "machine": machine(),
            "loadavg_start": loadavg(),
            "sizes": sizes,
            "batch_size": BATCH,
            "rank": RANK,
            "world_size": WORLD,
            "prefetch_bytes": PREFETCH,
        },
        "datasets": [],
    }
    for kind in ("meta", "image"):
        for n in sizes[kind]:
            root = _dataset(workdir, kind, n)
            results["datasets"].append(_bench_dataset(root, kind, n, sizes["batches"]))
    small = _dataset(workdir, "meta", sizes["meta"][0])
    results["manifest"] = _run({"kind": "manifest", "uri": str(small), "shards": sizes["shards"]})
    _log(f"manifest: {results['manifest']}")
    if not args.no_ranks:
        results["ranks"] = _bench_ranks(workdir, sizes)
    results["table"] = series_table(results)
    results["goals"] = scale_goals(results)
    if not args.no_plots and (args.plots or not args.quick):
        results["plots"] = plots(results, args.plots or IMAGES)
    results["meta"]["total_s"] = time.perf_counter() - started
    results["meta"]["loadavg_end"] = loadavg()
    write_json(out_json, results)
    report(results)
    print(f"\nresults: {out_json}")
    return results


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
