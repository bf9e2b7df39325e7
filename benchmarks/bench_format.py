"""ferroload's format against its peers, side by side in one run.

1. Write throughput: ferroload `Writer` vs WebDataset `ShardWriter` (same encoded images).
2. Random access: `Dataset.get(i, ["image"])` vs Hugging Face `datasets` `hfds[i]`.
3. `Dataset.open` on a 1,000,000-sample dataset: latency and bytes read.
4. Bytes on disk: ferroload vs WebDataset tars vs a `save_to_disk` folder.

Run it from the repository root:

    uv run python benchmarks/bench_format.py            # full run (a few minutes)
    uv run python benchmarks/bench_format.py --quick    # smoke run (well under a minute)

It prints a table and writes the results as JSON (see benchmarks/README.md for what each
figure means). Timings are never asserted on: goals are reported as PASS / FAIL.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import datasets
import numpy as np
import numpy.typing as npt
import webdataset as wds
from _meta import git_commit, pkg_version, utc_now, write_json
from _peers import write_ferroload
from _report import goal, goals_table, table

import ferroload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import Samples, base_images, encode_samples, image_source

from ferroload_core import exit_process

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "bench_format.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_format_quick.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench"

#: Shard target of both writers: ferroload's default, and the same `maxsize` for WebDataset.
SHARD_SIZE = 256 << 20
MB = 1e6
SEED = 20261130

GOAL_WRITE_RATIO = 1.3  # ferroload time / WebDataset time, at most
GOAL_ACCESS_SPEEDUP = 3.0  # HF latency / ferroload latency, at least
GOAL_OPEN_MS = 50.0  # median Dataset.open on 1M samples, below


class Sizes(NamedTuple):
    """How big one run is (a NamedTuple: the module also loads from a bare file spec)."""

    tiny: int
    jpeg: int
    open_samples: int
    lookups: int
    repeats: int
    open_repeats: int


FULL = Sizes(
    tiny=50_000, jpeg=5_000, open_samples=1_000_000, lookups=20_000, repeats=3, open_repeats=20
)
QUICK = Sizes(tiny=2_000, jpeg=200, open_samples=20_000, lookups=2_000, repeats=2, open_repeats=10)


# --------------------------------------------------------------------------- helpers


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _reset(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def tree_bytes(root: Path, pattern: str = "*") -> int:
    """Apparent size of every file under `root` whose name matches `pattern`."""
    return sum(p.stat().st_size for p in root.rglob(pattern) if p.is_file())


def _quiet_hf() -> None:
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


# --------------------------------------------------------------------------- writers


def write_webdataset(samples: Samples, root: Path, *, mtime: float | None = None) -> None:
    """What a WebDataset user does: `ShardWriter` with the default encoder, `cls` labels.

    With the defaults (`mtime=None`: the current time, a float) Python's tarfile writes a
    PAX header before every member; `mtime=0` (reproducible tars) avoids them.
    """
    root.mkdir(parents=True, exist_ok=True)
    pattern = str(root / f"{samples.name}-%06d.tar")
    ext = samples.ext
    with wds.ShardWriter(pattern, maxsize=SHARD_SIZE, verbose=0, mtime=mtime) as sink:
        for key, payload, label in zip(samples.keys, samples.payloads, samples.labels, strict=True):
            sink.write({"__key__": key, ext: payload, "cls": label})


def write_hf(samples: Samples, root: Path) -> None:
    """An HF dataset of the same bytes: `image` is a `binary` column (no decoding)."""
    features = datasets.Features(
        {"image": datasets.Value("binary"), "label": datasets.Value("int64")}
    )
    hfds = datasets.Dataset.from_dict(
        {"image": samples.payloads, "label": samples.labels}, features=features
    )
    hfds.save_to_disk(str(root))


# --------------------------------------------------------------------------- 1. write


def bench_write(samples: Samples, out: Path, repeats: int) -> dict[str, Any]:
    """Best-of-`repeats` write times of ferroload and WebDataset, interleaved."""
    runs: dict[str, Callable[[Samples, Path], None]] = {
        "ferroload": write_ferroload,
        "webdataset": write_webdataset,
        "webdataset_mtime0": functools.partial(write_webdataset, mtime=0),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for rep in range(repeats):
        # Alternate the order so that no writer always meets a busier disk.
        for name in names if rep % 2 == 0 else names[::-1]:
            write, target = runs[name], _reset(out / name)
            times[name].append(_timed(lambda: write(samples, target)))  # noqa: B023
    hf_root = _reset(out / "hf")
    hf_time = _timed(lambda: write_hf(samples, hf_root))
    payload = samples.payload_bytes
    result: dict[str, Any] = {"samples": len(samples), "payload_bytes": payload}
    for name, ts in times.items():
        best = min(ts)
        result[name] = {
            "times_s": ts,
            "best_s": best,
            "median_s": float(np.median(ts)),
            "samples_per_s": len(samples) / best,
            "payload_mb_per_s": payload / MB / best,
        }
    result["hf_save_to_disk"] = {
        "times_s": [hf_time],
        "best_s": hf_time,
        "samples_per_s": len(samples) / hf_time,
        "payload_mb_per_s": payload / MB / hf_time,
    }
    fl = result["ferroload"]["best_s"]
    result["ratio_ferroload_over_webdataset"] = fl / result["webdataset"]["best_s"]
    result["ratio_ferroload_over_webdataset_mtime0"] = fl / result["webdataset_mtime0"]["best_s"]
    # The goal is judged against the faster WebDataset configuration.
    result["ratio_ferroload_over_fastest_webdataset"] = max(
        result["ratio_ferroload_over_webdataset"],
        result["ratio_ferroload_over_webdataset_mtime0"],
    )
    return result


# --------------------------------------------------------------------------- 2. random access


def _latencies(fn: Callable[[int], object], indices: Sequence[int]) -> npt.NDArray[np.float64]:
    out = np.empty(len(indices), dtype=np.float64)
    clock = time.perf_counter
    for k, i in enumerate(indices):
        t0 = clock()
        fn(i)
        out[k] = clock() - t0
    return out


def _summary(lat: npt.NDArray[np.float64]) -> dict[str, float]:
    us = lat * 1e6
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
        "lookups_per_s": float(len(us) / lat.sum()),
    }


def _check_same_bytes(samples: Samples, getters: dict[str, Callable[[int], bytes]]) -> None:
    """Correctness, not speed: every reader must hand back the bytes that were written."""
    for i in np.linspace(0, len(samples) - 1, 25).astype(int).tolist():
        for name, get in getters.items():
            if get(i) != samples.payloads[i]:
                raise RuntimeError(f"{name} returned wrong bytes for sample {i} of {samples.name}")


def bench_access(
    samples: Samples, fl_root: Path, hf_root: Path, lookups: int, repeats: int
) -> dict[str, Any]:
    """p50 / p99 latency of single-sample lookups at the same random positions."""
    ds = ferroload.Dataset.open(fl_root)
    hfds = datasets.load_from_disk(str(hf_root))
    if len(ds) != len(samples) or len(hfds) != len(samples):
        raise RuntimeError(f"{samples.name}: datasets hold {len(ds)} / {len(hfds)} samples")
    _check_same_bytes(
        samples,
        {
            "ferroload": lambda i: ds.get(i, ["image"])["image"],
            "hf": lambda i: hfds[i]["image"],
        },
    )
    indices = np.random.default_rng(SEED).integers(0, len(samples), lookups).tolist()
    cases: dict[str, Callable[[int], object]] = {
        "ferroload": lambda i: ds.get(i, ["image"]),
        "ferroload_image_label": lambda i: ds.get(i, ["image", "label"]),
        "hf": lambda i: hfds[i],
    }
    for fn in cases.values():  # warm: page cache, index columns, Arrow memory maps
        _latencies(fn, indices)
    best: dict[str, dict[str, float]] = {}
    for rep in range(repeats):
        order = list(cases) if rep % 2 == 0 else list(cases)[::-1]
        for name in order:
            gc.collect()
            s = _summary(_latencies(cases[name], indices))
            if name not in best or s["p50_us"] < best[name]["p50_us"]:
                best[name] = s
    fl, fl2, hf = best["ferroload"], best["ferroload_image_label"], best["hf"]
    return {
        "samples": len(samples),
        "lookups": lookups,
        **best,
        "speedup_p50_hf_over_ferroload": hf["p50_us"] / fl["p50_us"],
        "speedup_p99_hf_over_ferroload": hf["p99_us"] / fl["p99_us"],
        "speedup_p50_hf_over_ferroload_image_label": hf["p50_us"] / fl2["p50_us"],
        "speedup_p99_hf_over_ferroload_image_label": hf["p99_us"] / fl2["p99_us"],
    }


# --------------------------------------------------------------------------- 3. open


def _open_payload(i: int) -> bytes:
    return i.to_bytes(8, "little") * 2


def ensure_open_dataset(root: Path, n: int) -> tuple[Path, float | None]:
    """A real `n`-sample ferroload dataset (16-byte payloads, int labels), cached in `root`.

    Returns the root and the seconds spent creating it (None when the cache was reused).
    """
    name = f"bench-open-{n}"
    try:
        ds = ferroload.Dataset.open(root)
        if ds.name == name and len(ds) == n:
            return root, None
    except ferroload.FerroloadError:
        pass
    _reset(root)
    t0 = time.perf_counter()
    w = ferroload.Writer(root, name)
    w.declare("data", "bin", "bytes", "raw")
    for i in range(n):
        w.add(f"s{i:07d}", {"data": _open_payload(i)}, {"label": i % 1000})
    w.close()
    return root, time.perf_counter() - t0


def bench_open(root: Path, n: int, repeats: int) -> dict[str, Any]:
    """Median in-process `Dataset.open` time and what a fresh open reads."""
    root, created_s = ensure_open_dataset(root, n)
    ferroload.Dataset.open(root)  # warm: imports, page cache
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        ds = ferroload.Dataset.open(root)
        times.append(time.perf_counter() - t0)
    ds = ferroload.Dataset.open(root)
    stats = ds.store.stats.snapshot()
    versions = root / "_ferroload" / "versions"
    manifest_bytes = (versions / f"{ds.version:010d}.json").stat().st_size
    hint = root / "_ferroload" / "latest"
    hint_bytes = hint.stat().st_size if hint.exists() else 0
    if len(ds) != n or ds.get(n - 1, ["data"])["data"] != _open_payload(n - 1):
        raise RuntimeError(f"the cached open dataset at {root} is not what it should be")
    ms = np.asarray(times) * 1e3
    return {
        "samples": n,
        "repeats": repeats,
        "created_s": created_s,
        "median_ms": float(np.median(ms)),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        "bytes_read": stats["bytes_read"],
        "get_requests": stats["get_requests"],
        "list_requests": stats["list_requests"],
        "head_requests": stats["head_requests"],
        "manifest_bytes": manifest_bytes,
        "hint_bytes": hint_bytes,
        "manifest_only": stats["bytes_read"] == manifest_bytes + hint_bytes,
        "dataset_bytes": tree_bytes(root),
        "num_shards": ds.num_shards,
    }


# --------------------------------------------------------------------------- 4. size


def bench_size(root: Path) -> dict[str, Any]:
    """Bytes on disk (apparent file sizes) of the copies of one sample set under `root`."""
    fl_root = root / "ferroload"
    fl = tree_bytes(fl_root)
    shards = tree_bytes(fl_root / "shards", "*.tar")
    side = tree_bytes(fl_root / "shards", "*.idx.parquet")
    parts = tree_bytes(fl_root / "index")
    wds = tree_bytes(root / "webdataset")
    wds0 = tree_bytes(root / "webdataset_mtime0")
    hf = tree_bytes(root / "hf")
    return {
        "ferroload": fl,
        "ferroload_breakdown": {
            "shards": shards,
            "side_indexes": side,
            "index_parts": parts,
            "manifest_and_other": fl - shards - side - parts,
        },
        "webdataset": wds,
        "webdataset_mtime0": wds0,
        "hf": hf,
        "ratio_ferroload_over_webdataset": fl / wds,
        "ratio_ferroload_over_webdataset_mtime0": fl / wds0,
        "ratio_hf_over_webdataset": hf / wds,
    }


# --------------------------------------------------------------------------- report


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    goals = []
    for s in ("tiny", "jpeg"):
        r = res["write"][s]["ratio_ferroload_over_fastest_webdataset"]
        name = f"write {s}: ferroload time <= {GOAL_WRITE_RATIO}x webdataset (faster config)"
        goals.append(goal(name, f"{r:.2f}x", r <= GOAL_WRITE_RATIO))
    for s in ("tiny", "jpeg"):
        for p in ("p50", "p99"):
            v = res["random_access"][s][f"speedup_{p}_hf_over_ferroload"]
            name = f"random access {s} {p}: ferroload >= {GOAL_ACCESS_SPEEDUP}x faster than HF"
            goals.append(goal(name, f"{v:.2f}x", v >= GOAL_ACCESS_SPEEDUP))
    o = res["open"]
    name = f"open {o['samples']:,} samples: median < {GOAL_OPEN_MS:.0f} ms"
    goals.append(goal(name, f"{o['median_ms']:.2f} ms", o["median_ms"] < GOAL_OPEN_MS))
    read = f"{o['bytes_read']:,} B in {o['get_requests']} gets"
    goals.append(goal("open reads the manifest (and latest hint) only", read, o["manifest_only"]))
    for s in ("tiny", "jpeg"):
        z = res["size"][s]
        r = max(z["ratio_ferroload_over_webdataset"], z["ratio_ferroload_over_webdataset_mtime0"])
        name = f"size {s}: ferroload <= webdataset (smaller config)"
        goals.append(goal(name, f"{r:.3f}x", r <= 1.0))
    return goals


def _pairs(*cells: tuple[str, str]) -> str:
    """A one-row table from (header, value) pairs."""
    return table([h for h, _ in cells], [[v for _, v in cells]])


def render(res: dict[str, Any]) -> str:
    """The human-readable report of a result dict."""
    m = res["meta"]
    out = [
        f"ferroload format benchmark ({m['mode']}) — {m['started_at']}, commit {m['git_commit']}",
        f"{m['cpu_count']} CPUs, Python {m['python']}, {m['platform']}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"images: {m['image_source']}; "
        + "; ".join(
            f"{s['name']}: {s['samples']:,} x {s['desc']} (avg {s['avg_bytes']:,.0f} B)"
            for s in m["sets"].values()
        ),
        "",
        f"1. WRITE — best of {m['repeats']} (interleaved); MB = 1e6 payload bytes; "
        "webdataset = ShardWriter(maxsize=256 MiB)",
    ]
    rows = []
    writers = {
        "ferroload": "ferroload Writer",
        "webdataset": "webdataset (defaults)",
        "webdataset_mtime0": "webdataset (mtime=0)",
        "hf_save_to_disk": "hf save_to_disk (1 run, info)",
    }
    for s, w in res["write"].items():
        for name, label in writers.items():
            r = w[name]
            times = " ".join(f"{t:.2f}" for t in r["times_s"])
            rows.append(
                [
                    f"{s:5} {label}",
                    f"{r['best_s']:.3f}",
                    times,
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['payload_mb_per_s']:.1f}",
                    f"{r['best_s'] / w['webdataset']['best_s']:.2f}x",
                    f"{r['best_s'] / w['webdataset_mtime0']['best_s']:.2f}x",
                ]
            )
    out.append(
        table(
            ["set   writer", "best s", "runs s", "samples/s", "MB/s", "/ wds", "/ wds mtime=0"],
            rows,
        )
    )
    out += [
        "",
        f"2. RANDOM ACCESS — {m['lookups']:,} lookups at seeded random positions, warm, "
        f"best of {m['repeats']} passes (by p50); latency in µs",
    ]
    rows = []
    labels = {
        "ferroload": "ferroload get(i, ['image'])",
        "ferroload_image_label": "ferroload get(i, ['image','label'])",
        "hf": "hf hfds[i] (binary image + label)",
    }
    for s, a in res["random_access"].items():
        for name, label in labels.items():
            r = a[name]
            sp50 = a["hf"]["p50_us"] / r["p50_us"]
            sp99 = a["hf"]["p99_us"] / r["p99_us"]
            rows.append(
                [
                    f"{s:5} {label}",
                    f"{r['p50_us']:.1f}",
                    f"{r['p99_us']:.1f}",
                    f"{r['mean_us']:.1f}",
                    f"{r['lookups_per_s']:,.0f}",
                    f"{sp50:.2f}x",
                    f"{sp99:.2f}x",
                ]
            )
    out.append(
        table(["set   reader", "p50", "p99", "mean", "lookups/s", "hf/x p50", "hf/x p99"], rows)
    )
    o = res["open"]
    created = "reused cache" if o["created_s"] is None else f"created in {o['created_s']:.1f} s"
    out += [
        "",
        f"3. OPEN — Dataset.open on {o['samples']:,} samples ({o['num_shards']} shards, "
        f"{o['dataset_bytes'] / MB:,.0f} MB, {created}); {o['repeats']} in-process opens",
        _pairs(
            ("median ms", f"{o['median_ms']:.2f}"),
            ("min ms", f"{o['min_ms']:.2f}"),
            ("max ms", f"{o['max_ms']:.2f}"),
            ("bytes read", f"{o['bytes_read']:,}"),
            ("gets", str(o["get_requests"])),
            ("lists", str(o["list_requests"])),
            ("heads", str(o["head_requests"])),
            ("manifest B", f"{o['manifest_bytes']:,}"),
            ("hint B", str(o["hint_bytes"])),
            ("manifest only", "yes" if o["manifest_only"] else "NO"),
        ),
        "",
        "4. SIZE ON DISK — apparent bytes of every file under each root",
    ]
    rows = []
    for s, z in res["size"].items():
        rows.append(
            [
                s,
                f"{z['ferroload']:,}",
                f"{z['webdataset']:,}",
                f"{z['webdataset_mtime0']:,}",
                f"{z['hf']:,}",
                f"{z['ratio_ferroload_over_webdataset']:.3f}x",
                f"{z['ratio_ferroload_over_webdataset_mtime0']:.3f}x",
                f"{z['ratio_hf_over_webdataset']:.3f}x",
            ]
        )
    out.append(
        table(
            [
                "set",
                "ferroload B",
                "wds B",
                "wds mtime=0 B",
                "hf B",
                "fl/wds",
                "fl/wds mtime=0",
                "hf/wds",
            ],
            rows,
        )
    )
    out.append(
        "ferroload breakdown (B): "
        + "; ".join(
            f"{s}: shards {z['ferroload_breakdown']['shards']:,}, side indexes "
            f"{z['ferroload_breakdown']['side_indexes']:,}, index parts "
            f"{z['ferroload_breakdown']['index_parts']:,}, manifest+hint "
            f"{z['ferroload_breakdown']['manifest_and_other']:,}"
            for s, z in res["size"].items()
        )
    )
    out += goals_table(res["goals"])
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes for a smoke run (2,000 tiny, 200 jpeg, 20,000-sample open)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"scratch folder; the open-test dataset is cached here (default {DEFAULT_WORKDIR})",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the results (default {DEFAULT_JSON.relative_to(HERE.parent)}"
        f", or {DEFAULT_QUICK_JSON.name} with --quick)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the written datasets under the workdir (default: delete them)",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every benchmark, print the table, write the JSON, and return the results."""
    args = _parse(argv)
    sizes = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    json_path = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    workdir: Path = args.workdir
    run_dir = _reset(workdir / f"run-{mode}")
    run_dir.mkdir(parents=True)
    started = utc_now()
    t_start = time.perf_counter()

    _quiet_hf()
    print(f"[{mode}] encoding images (not timed) ...", file=sys.stderr, flush=True)
    bases = base_images(SEED)
    sets = {
        "tiny": encode_samples("tiny", sizes.tiny, size=32, fmt="png", seed=SEED + 1, bases=bases),
        "jpeg": encode_samples(
            "jpeg", sizes.jpeg, size=256, fmt="jpg", seed=SEED + 2, quality=90, bases=bases
        ),
    }
    warm = Samples("warm", "png", sets["tiny"].payloads[:50], sets["tiny"].labels[:50])
    write_ferroload(warm, run_dir / "warm" / "ferroload")
    write_webdataset(warm, run_dir / "warm" / "webdataset")
    write_hf(warm, run_dir / "warm" / "hf")  # first-use costs (lazy imports) are not timed

    res: dict[str, Any] = {
        "meta": {
            "mode": mode,
            "started_at": started,
            "git_commit": git_commit(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "versions": {
                n: pkg_version(n)
                for n in (
                    "ferroload-format",
                    "webdataset",
                    "datasets",
                    "pyarrow",
                    "numpy",
                    "pillow",
                )
            },
            "image_source": image_source(),
            "sets": {
                "tiny": {
                    "name": "tiny",
                    "samples": sizes.tiny,
                    "desc": "32x32 PNG",
                    "avg_bytes": sets["tiny"].payload_bytes / sizes.tiny,
                },
                "jpeg": {
                    "name": "jpeg",
                    "samples": sizes.jpeg,
                    "desc": "256x256 JPEG q90",
                    "avg_bytes": sets["jpeg"].payload_bytes / sizes.jpeg,
                },
            },
            "sizes": sizes._asdict(),
            "repeats": sizes.repeats,
            "lookups": sizes.lookups,
            "seed": SEED,
            "webdataset_writer": "webdataset.ShardWriter(pattern, maxsize=256 MiB), default "
            "encoder; samples {'__key__', '<ext>': bytes, 'cls': int}; "
            "once with defaults (mtime = time.time(): a PAX header per "
            "member) and once with mtime=0",
            "hf_layout": "Dataset.from_dict with Features(image=Value('binary'), "
            "label=Value('int64')); save_to_disk / load_from_disk",
        },
        "write": {},
        "random_access": {},
        "size": {},
    }
    for name, samples in sets.items():
        print(f"[{mode}] write {name} ...", file=sys.stderr, flush=True)
        res["write"][name] = bench_write(samples, run_dir / name, sizes.repeats)
    for name, samples in sets.items():
        print(f"[{mode}] random access {name} ...", file=sys.stderr, flush=True)
        d = run_dir / name
        res["random_access"][name] = bench_access(
            samples, d / "ferroload", d / "hf", sizes.lookups, sizes.repeats
        )
        res["size"][name] = bench_size(d)
    print(f"[{mode}] open {sizes.open_samples:,} samples ...", file=sys.stderr, flush=True)
    res["open"] = bench_open(
        workdir / f"open-{sizes.open_samples}", sizes.open_samples, sizes.open_repeats
    )
    res["goals"] = _goals(res)
    res["meta"]["total_s"] = time.perf_counter() - t_start
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(render(res))
    print(f"\ntotal {res['meta']['total_s']:.0f} s; results written to {json_path}")
    write_json(json_path, res)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
