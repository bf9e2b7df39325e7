"""Size-bucketed batches: images of varied sizes keep their aspect ratio (`crop="shortest_edge"`, shorter side to 224, each batch padded to its largest image), with batches bucketed by aspect ratio (`bucket_by="width/height"`, 8 quantile buckets) against the same loader without buckets: the fraction of padded pixels in the batches (work a model spends on padding), and samples/s.

The set: JPEGs (q90) whose shorter side is 300-700 px and whose aspect ratio is one of
3:4, 4:3, 2:3, 3:2, 1:1, 9:16, 16:9 (drawn from a fixed seed), written once with the
quickstart `Writer` with `width` and `height` index columns. Each epoch runs in a fresh
interpreter (`--worker`): `make_loader(..., batch_size=32, out="numpy")`, then the whole
epoch, timed from `make_loader` returning to the last batch, the consumer reading every pixel
of each batch once (`mean()`, padding included: what a model's first layer does); padding
is counted from each batch's `image_size` against its array. `make_s` (building the
loader: the bucketed one reads the two columns and computes the buckets) is apart. The
two systems alternate (ABBA) over the reps; the figures are medians, the speed ratio the
median of the per-round ratios. `--quick` writes a small set and runs fewer reps.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from _harness import finish_run, log, run_meta, run_parser, start_run
from _procs import run_once

from ferroload_core import exit_process

NAME = "bench_bucket"
RATIOS = [(3, 4), (4, 3), (2, 3), (3, 2), (1, 1), (9, 16), (16, 9)]
SIZE = 224
BATCH = 32
SYSTEMS = {
    "unbucketed": {},
    "bucketed": {"bucket_by": "width/height", "buckets": 8},
}
GOAL_SAVED = 0.5


def _image(rs: np.random.Generator, h: int, w: int) -> bytes:
    """A smooth gradient with a little noise (JPEG sizes of photos, fast to write)."""
    from PIL import Image

    y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    c = rs.random(3, dtype=np.float32)[None, None, :]
    img = 255 * (0.5 * x + 0.3 * y + 0.2 * c)
    img = img + rs.normal(0, 6, (h, w, 1)).astype(np.float32)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_set(root: Path, n: int) -> None:
    from ferroload_format import Writer

    rs = np.random.default_rng(19)
    with Writer(str(root), "bucket-bench") as w:
        w.declare("image", "jpeg", "tensor", "image")
        for i in range(n):
            short = int(rs.integers(300, 701))
            a, b = RATIOS[int(rs.integers(len(RATIOS)))]  # width : height
            if a >= b:
                h, wd = short, round(short * a / b)
            else:
                wd, h = short, round(short * b / a)
            w.add(f"img{i:06d}", {"image": _image(rs, h, wd)}, {"width": wd, "height": h})


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch in this fresh interpreter."""
    from ferroload_loader import make_loader

    t_make = time.perf_counter()
    dl = make_loader(
        spec["root"], batch_size=BATCH, images=["image"], resize=SIZE, crop="shortest_edge",
        out="numpy", seed=0, **SYSTEMS[spec["system"]],
    )  # fmt: skip
    dl.set_epoch(spec["epoch"])
    t0 = time.perf_counter()
    make_s = t0 - t_make
    n = valid = total = 0
    for b in dl:
        img, sizes = b["image"], b["image_size"]
        n += len(sizes)
        total += img.shape[0] * img.shape[1] * img.shape[2]
        valid += int((sizes[:, 0].astype(np.int64) * sizes[:, 1]).sum())
        img.mean()  # the consumer reads every pixel once, padding included, as a model would
    s = time.perf_counter() - t0
    return {
        "n": n, "s": s, "make_s": make_s, "samples_per_s": n / s, "padded": 1 - valid / total,
    }  # fmt: skip


def main() -> None:
    p = run_parser(__doc__, NAME, quick="a small set, fewer reps")
    p.add_argument("--worker", default=None, help="(internal) run one epoch")
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args()
    if args.worker is not None:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        exit_process(0)
    run = start_run(args, NAME, "bucket-{mode}")
    n = 300 if args.quick else 3000
    reps = args.reps or (2 if args.quick else 8)
    root = run.run_dir / "set"
    log(f"writing {n} JPEGs")
    write_set(root, n)
    for f in root.rglob("*"):  # warm page cache
        if f.is_file():
            f.read_bytes()
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in SYSTEMS}
    loads: list[list[float] | None] = []
    names = list(SYSTEMS)
    for r in range(reps):
        order = names if r % 2 == 0 else names[::-1]  # ABBA
        for name in order:
            log(f"rep {r + 1}/{reps}: {name}")
            got = run_once(__file__, {"root": str(root), "system": name, "epoch": r}, timeout=1200)
            if got["n"] != n:
                raise RuntimeError(f"{name} delivered {got['n']} samples, not {n}")
            runs[name].append(got)
        loads.append(os.getloadavg() if hasattr(os, "getloadavg") else None)
    med = {
        k: {
            m: statistics.median(r[m] for r in rs)
            for m in ("s", "make_s", "samples_per_s", "padded")
        }
        for k, rs in runs.items()
    }
    saved = 1 - med["bucketed"]["padded"] / med["unbucketed"]["padded"]
    # per round, the two epochs ran back to back: their ratio cancels the load's drift
    pairs = [
        b["samples_per_s"] / u["samples_per_s"]
        for b, u in zip(runs["bucketed"], runs["unbucketed"], strict=True)
    ]
    speed = statistics.median(pairs)
    goals = [
        {
            "goal": f"padded pixels saved by bucketing >= {GOAL_SAVED:.0%} (shortest_edge "
            f"{SIZE}, batches of {BATCH}, medians of fresh-process epochs)",
            "value": saved,
            "pass": saved >= GOAL_SAVED,
        },
        {
            "goal": "bucketed samples/s >= unbucketed (same decoding, less padding; median "
            "of the per-round ratios)",
            "value": speed,
            "pass": speed >= 1.0,
        },
    ]
    meta = {
        **run_meta(run, os.cpu_count() or 1),
        "samples": n,
        "batch_size": BATCH,
        "resize": SIZE,
        "reps": reps,
        "loadavg_per_rep": loads,
        "method": "fresh interpreter per epoch, systems alternated ABBA, page cache warm, "
        "medians; epoch timed from make_loader returning to the last batch",
    }
    res = {"meta": meta, "systems": {k: {"median": med[k], "reps": runs[k]} for k in runs},
           "padding_saved": saved, "speedup": speed, "round_ratios": pairs,
           "ratio_of_medians": med["bucketed"]["samples_per_s"]
           / med["unbucketed"]["samples_per_s"], "goals": goals}  # fmt: skip

    def render(res: dict[str, Any]) -> str:
        lines = [f"{'system':12s} {'samples/s':>10s} {'padded':>8s}"]
        for k, v in res["systems"].items():
            m = v["median"]
            lines.append(f"{k:12s} {m['samples_per_s']:10.1f} {m['padded']:8.1%}")
        lines += [
            f"{'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']:.3f}"
            for g in res["goals"]
        ]
        return "\n".join(lines)

    finish_run(res, run, render)


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
