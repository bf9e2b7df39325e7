"""Enrichment maps: ferroload `Dataset.map` layers against Hugging Face `datasets.map`.

The same CPU-bound work over the same 10,000 JPEGs (256x256): the mean colour of each
image (a float32[3] column) and a 64x64 PNG thumbnail (a new modality / binary column).
ferroload runs it with its local executor (2 processes, and 2 threads) and with Ray
(`ray.init(num_cpus=2)`); HF datasets with `.map(batched=True, num_proc=2)`. Reported:
samples/s and the bytes each system wrote (ferroload writes only the new layer; HF writes
a new Arrow table with every column).

    uv run python benchmarks/bench_map.py            # full run
    uv run python benchmarks/bench_map.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _meta import git_commit, utc_now  # noqa: E402

from ferroload_core import exit_process  # noqa: E402

DEFAULT_JSON = HERE / "results" / "bench_map.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_map_quick.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench-map"
SEED = 20261204
THUMB = 64


def _thumb_png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).resize((THUMB, THUMB), Image.Resampling.BILINEAR).save(buf, "PNG")
    return buf.getvalue()


def stats_fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
    """The work: mean colour and a 64x64 PNG thumbnail of each decoded image."""
    images = batch["image"]
    return {
        "mean_color": np.stack([im.reshape(-1, 3).mean(axis=0) for im in images]).astype(
            np.float32
        ),
        "thumb": [_thumb_png(im) for im in images],
    }


def hf_fn(batch: dict[str, list[Any]]) -> dict[str, Any]:
    arrays = [np.asarray(im.convert("RGB")) for im in batch["image"]]
    return {
        "mean_color": [a.reshape(-1, 3).mean(axis=0).astype(np.float32).tolist() for a in arrays],
        "thumb": [_thumb_png(a) for a in arrays],
    }


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _write(n: int, root: Path, hf_root: Path) -> None:
    import datasets
    from _data import encode_samples

    import ferroload

    s = encode_samples("map", n, size=256, fmt="jpg", seed=SEED)
    with ferroload.Writer(root, "map") as w:
        w.declare("image", "jpg", "tensor", "image")
        for key, payload, label in zip(s.keys, s.payloads, s.labels, strict=True):
            w.add(key, {"image": payload}, {"label": label})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    hf = datasets.Dataset.from_dict(
        {"image": [{"bytes": p, "path": None} for p in s.payloads], "label": list(s.labels)},
        features=features,
    )
    hf.save_to_disk(str(hf_root))


def run_ferroload(root: Path, executor: Any, label: str) -> dict[str, Any]:
    import ferroload
    from ferroload_map import map_dataset

    # every system starts from the same, layer-free copy of the dataset
    copy = root.with_name(f"{root.name}-{label}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy)
    root = copy
    ds = ferroload.Dataset.open(root)
    before = _tree_bytes(root)
    t0 = time.perf_counter()
    out = map_dataset(
        ds, stats_fn, inputs=["image"], outputs={"mean_color": "float32[3]", "thumb": "png"},
        layer="stats", batch_size=64, executor=executor, progress=False,
    )  # fmt: skip
    dt = time.perf_counter() - t0
    check = out[0]
    return {
        "s": dt,
        "samples_per_s": len(ds) / dt,
        "bytes_written": _tree_bytes(root) - before,
        "columns": sorted(k for k in check if k not in ("image",)),
    }


def run_hf(hf_root: Path, workdir: Path) -> dict[str, Any]:
    import datasets

    datasets.disable_progress_bars()
    hf = datasets.load_from_disk(str(hf_root))
    cache = workdir / "hf-map-cache"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    t0 = time.perf_counter()
    out = hf.map(
        hf_fn, batched=True, batch_size=64, num_proc=2,
        cache_file_name=str(cache / "map.arrow"),
    )  # fmt: skip
    dt = time.perf_counter() - t0
    return {
        "s": dt,
        "samples_per_s": len(hf) / dt,
        "bytes_written": _tree_bytes(cache),
        "columns": sorted(out.column_names),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    n = 1_000 if args.quick else 10_000
    out_json = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    work = args.workdir / ("quick" if args.quick else "full")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root, hf_root = work / "ferroload", work / "hf"
    print(f"[{datetime.now(UTC):%H:%M:%S}] writing {n} JPEGs", file=sys.stderr)
    _write(n, root, hf_root)
    base_bytes = _tree_bytes(root)
    import ray

    from ferroload_map import LocalExecutor, RayExecutor

    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "samples": n,
            "started_at": utc_now(),
            "git_commit": git_commit(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "base_bytes": {"ferroload": base_bytes, "hf": _tree_bytes(hf_root)},
        },
        "systems": {},
    }
    systems = results["systems"]
    print("hf datasets map(num_proc=2)", file=sys.stderr)
    systems["hf_num_proc2"] = run_hf(hf_root, work)
    for label, make in (
        ("processes", lambda: LocalExecutor("processes", workers=2)),
        ("threads", lambda: LocalExecutor("threads", workers=2)),
    ):
        print(f"ferroload local {label}", file=sys.stderr)
        systems[f"ferroload_{label}"] = run_ferroload(root, make(), label)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        print("ferroload ray", file=sys.stderr)
        systems["ferroload_ray"] = run_ferroload(root, RayExecutor(), "ray")
    finally:
        ray.shutdown()
    hf = systems["hf_num_proc2"]
    results["goals"] = [
        {
            "goal": f"{k}: writes only the new layer (bytes written < HF's rewrite)",
            "value": f"{v['bytes_written'] / 1e6:.1f} MB vs {hf['bytes_written'] / 1e6:.1f} MB",
            "pass": v["bytes_written"] < hf["bytes_written"],
        }
        for k, v in systems.items()
        if k.startswith("ferroload")
    ]
    results["meta"]["loadavg_end"] = list(os.getloadavg())
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nmap over {n} JPEGs (mean colour + {THUMB}x{THUMB} PNG thumbnail)")
    print(f"  {'system':<22}{'samples/s':>11}{'seconds':>9}{'MB written':>12}")
    for k, v in systems.items():
        print(
            f"  {k:<22}{v['samples_per_s']:>11.0f}{v['s']:>9.2f}{v['bytes_written'] / 1e6:>12.1f}"
        )
    print(
        f"  (dataset: ferroload {base_bytes / 1e6:.1f} MB, HF {results['meta']['base_bytes']['hf'] / 1e6:.1f} MB)"
    )
    for g in results["goals"]:
        print(f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']}")
    print(f"\nresults: {out_json}")
    return 0


if __name__ == "__main__":
    exit_process(main() or 0)  # without the interpreter's teardown (see README)
