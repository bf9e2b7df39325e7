"""Importing an image folder: ferroload against Hugging Face `datasets` and WebDataset.

The same folder of JPEGs (a class per subfolder) becomes: a ferroload dataset
(`ferroload.import_image_folder`, with 1 reading thread and with the default 8); a Hugging
Face dataset (`load_dataset("imagefolder")` then `save_to_disk`, the documented way); and
WebDataset tars (a `ShardWriter` loop over the files, the usual conversion script).
Reported: samples/s, the bytes each wrote, and the ratios. Every system keeps the JPEG
bytes as they are; ferroload also checks each image's header.

    uv run python benchmarks/bench_convert.py            # full run (5,000 images)
    uv run python benchmarks/bench_convert.py --quick    # smoke run
    uv run python benchmarks/bench_convert.py --cold     # inputs read from the disk, not the
                                                          # page cache (root: drops it)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _meta import git_commit, loadavg, pkg_version, utc_now  # noqa: E402

from ferroload_core import exit_process  # noqa: E402

DEFAULT_JSON = HERE / "results" / "bench_convert.json"
DEFAULT_QUICK_JSON = HERE / "results" / "bench_convert_quick.json"
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "ferroload-bench-convert"
CLASSES = 10
SIZE = 160  # pixels a side: ~11 KB JPEGs


def make_folder(root: Path, n: int) -> int:
    """`n` JPEGs of coloured shapes under `root/<class>/`; returns their total bytes."""
    from ferroload.demo import draw_samples

    total = 0
    for i, (_, jpeg, _meta) in enumerate(draw_samples(n, size=SIZE, seed=7)):
        folder = root / f"class_{i % CLASSES:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i:06d}.jpg").write_bytes(jpeg)
        total += len(jpeg)
    return total


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(fn: Callable[[], int], out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    n = fn()
    seconds = time.perf_counter() - t0
    return {
        "samples": n,
        "seconds": seconds,
        "samples_per_s": n / seconds,
        "bytes": tree_bytes(out),
    }


def drop_page_cache() -> None:
    """Empty the OS page cache (root on Linux), so that every system reads from the disk."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        raise SystemExit(f"--cold needs root on Linux (/proc/sys/vm/drop_caches): {exc}") from exc


def run_ferroload(src: Path, out: Path, workers: int) -> int:
    import ferroload

    report = ferroload.import_image_folder(src, out, workers=workers)
    return report.num_samples


def run_hf(src: Path, out: Path, cache: Path) -> int:
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    datasets.disable_progress_bars()
    shutil.rmtree(cache, ignore_errors=True)
    ds = datasets.load_dataset(
        "imagefolder", data_dir=str(src), split="train", cache_dir=str(cache)
    )
    ds.save_to_disk(str(out))
    return len(ds)


def run_wds(src: Path, out: Path) -> int:
    import webdataset as wds

    out.mkdir(parents=True)
    classes = sorted(p.name for p in src.iterdir() if p.is_dir())
    n = 0
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxsize=256 << 20, verbose=0) as sink:
        for label, name in enumerate(classes):
            for path in sorted((src / name).iterdir()):
                sink.write(
                    {"__key__": f"{name}/{path.stem}", "jpg": path.read_bytes(), "cls": label}
                )
                n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--cold", action="store_true", help="empty the page cache before each system (root)"
    )
    args = ap.parse_args(argv)
    n = 600 if args.quick else 5_000
    out_json = args.json or (DEFAULT_QUICK_JSON if args.quick else DEFAULT_JSON)
    work = args.workdir / ("quick" if args.quick else "full")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = work / "folder"
    print(f"[{datetime.now(UTC):%H:%M:%S}] drawing {n} JPEGs", file=sys.stderr)
    jpeg_bytes = make_folder(src, n)
    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "cold": args.cold,
            "samples": n,
            "jpeg_bytes": jpeg_bytes,
            "started_at": utc_now(),
            "git_commit": git_commit(),
            "cpu_count": os.cpu_count(),
            "loadavg_start": loadavg(),
            "versions": {
                p: pkg_version(p) for p in ("ferroload-convert", "datasets", "webdataset")
            },
        },
        "systems": {},
    }
    systems = results["systems"]
    # imports are not part of any system's time
    import datasets  # noqa: F401
    import webdataset  # noqa: F401

    import ferroload  # noqa: F401

    runs: dict[str, Callable[[Path], int]] = {
        "ferroload_w1": lambda out: run_ferroload(src, out, 1),
        "ferroload_w8": lambda out: run_ferroload(src, out, 8),
        "hf_imagefolder_save_to_disk": lambda out: run_hf(src, out, work / "hf-cache"),
        "webdataset_shardwriter": lambda out: run_wds(src, out),
    }
    for name, run in runs.items():
        print(f"[{datetime.now(UTC):%H:%M:%S}] {name}", file=sys.stderr)
        out = work / name
        if args.cold:
            drop_page_cache()
        systems[name] = timed(lambda run=run, out=out: run(out), out)
        if not name.startswith("hf"):  # the HF cache lives outside `out`; its copy is there
            shutil.rmtree(out, ignore_errors=True)
    best = systems["ferroload_w8"]["samples_per_s"]
    hf, tars = systems["hf_imagefolder_save_to_disk"], systems["webdataset_shardwriter"]
    results["ratios"] = {
        "ferroload_vs_hf": best / hf["samples_per_s"],
        "ferroload_vs_webdataset": best / tars["samples_per_s"],
        "workers_8_vs_1": best / systems["ferroload_w1"]["samples_per_s"],
    }
    results["meta"]["loadavg_end"] = loadavg()
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nimport of an image folder: {n} JPEGs, {jpeg_bytes / 1e6:.1f} MB, {CLASSES} classes")
    print(f"  {'system':<30}{'samples/s':>11}{'seconds':>9}{'MB written':>12}")
    for k, v in systems.items():
        print(f"  {k:<30}{v['samples_per_s']:>11,.0f}{v['seconds']:>9.2f}{v['bytes'] / 1e6:>12.1f}")
    for k, v in results["ratios"].items():
        print(f"  {k}: {v:.2f}x")
    print(f"results: {out_json}")
    return 0


if __name__ == "__main__":
    exit_process(main() or 0)  # without the interpreter's teardown (see README)
