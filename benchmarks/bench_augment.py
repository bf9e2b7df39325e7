"""Augmented, model-ready batches: ferroload's decode threads against torchvision's
transforms in DataLoader workers, side by side in one run.

Over the same 256x256 JPEGs (quality 90, `_data.encode_natural`, the loader benchmark's
set), batches of 64 with int labels:

a. ferroload `make_loader(resize=(224, 224))`: the plain uint8 NHWC batch (the baseline);
b. ferroload `make_loader(crop="random", hflip=0.5, layout="NCHW", dtype=torch.float32,
   normalize=IMAGENET)`: RandomResizedCrop + flip + float + Normalize in the decode threads;
d. the same as (b) with `dtype=torch.bfloat16` (what mixed-precision training feeds a
   model): half the bytes of (b), written as bfloat16 bit patterns by the same lookup;
e. the same crop and flip with NCHW uint8 output (for a model that normalises on its
   device): the augmentation alone, without the float conversion;
c. torchvision: a map-style torch `Dataset` over the same bytes in memory that decodes each
   with `torchvision.io.decode_jpeg` and applies `v2.RandomResizedCrop(224)`,
   `v2.RandomHorizontalFlip()`, `v2.ToDtype(torch.float32, scale=True)`, `v2.Normalize`,
   in a `DataLoader(num_workers=2, batch_size=64, shuffle=True, persistent_workers=True)`.

Each system runs in its own fresh process: a warm-up epoch (which also checks what it
delivers), then the processes take turns, one epoch each per round (the order reversed
every other round), best of N. Goals (reported, never asserted): (b) >= 2x (c) samples/s
and (b) >= 0.9x (a).

Run it from the repository root:

    uv run python benchmarks/bench_augment.py            # full run (about a minute)
    uv run python benchmarks/bench_augment.py --quick    # smoke run (under a minute)

It prints a table and writes the results as JSON (see benchmarks/README.md). Heavy imports
happen in the worker processes only.
"""

from __future__ import annotations

import argparse
import math
import pickle
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from _harness import finish_run, interleaved_epochs, log, run_meta, run_parser, start_run, summary
from _loader_worker import loader_epoch
from _meta import pkg_version
from _peers import shutdown, write_ferroload
from _procs import Child, counting_faults, serve, unknown
from _report import goal, goals_table, ratio, run_header, table

from ferroload_core import available_cpus, exit_process

SEED = 20261202
SRC, OUT, BATCH, WORKERS = 256, 224, 64, 2
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

GOAL_PEER = 2.0  # (b) samples/s over torchvision's (c), at least
GOAL_PLAIN = 0.9  # (b) samples/s over ferroload's plain uint8 resize (a), at least
MEAN_TOLERANCE = 0.1  # |per-channel mean of (b) - (c)| over an epoch, normalised units


class Sizes(NamedTuple):
    """How big one run is."""

    jpeg: int  # 256x256 JPEGs
    rounds: int  # timed epochs per system (best of)


FULL = Sizes(jpeg=5_000, rounds=5)
QUICK = Sizes(jpeg=256, rounds=1)


class System(NamedTuple):
    """One system: its results key, its label and its worker spec."""

    key: str
    label: str
    spec: dict[str, Any]


# =========================================================================== worker side


class _Epoch(NamedTuple):
    run: Callable[[int, bool], dict[str, Any]]  # (epoch, check) -> result
    close: Callable[[], None]


def _consume(batches: Any, check: bool) -> dict[str, Any]:
    """One pass; with `check`, also the first batch's types and the epoch's per-channel
    means (in the units delivered: normalised floats, or uint8 levels / 255)."""
    t0 = time.perf_counter()
    n = 0
    if not check:
        for b in batches:
            n += len(b["label"])
        return {"s": time.perf_counter() - t0, "n": n}
    import torch

    first: dict[str, Any] | None = None
    sums = torch.zeros(3, dtype=torch.float64)
    labels = 0
    for b in batches:
        images, lab = b["image"], b["label"]
        if first is None:
            first = {
                "image_type": type(images).__module__ + "." + type(images).__name__,
                "image_dtype": str(images.dtype).removeprefix("torch."),
                "image_shape": list(images.shape),
                "label_dtype": str(lab.dtype).removeprefix("torch."),
            }
        x = images.double()
        if images.dtype == torch.uint8:
            x = x / 255
        if x.shape[-1] == 3:  # NHWC
            sums += x.mean(dim=(1, 2)).sum(dim=0)
        else:  # NCHW
            sums += x.mean(dim=(2, 3)).sum(dim=0)
        n += len(images)
        labels += int(lab.sum())
    return {
        "s": time.perf_counter() - t0,
        "n": n,
        "first": first,
        "channel_means": (sums / max(1, n)).tolist(),
        "label_sum": labels,
    }


def _build_ferroload(spec: dict[str, Any]) -> _Epoch:
    import torch

    import ferroload

    extra: dict[str, Any] = {}
    if spec["augment"]:
        dtype = {"bfloat16": torch.bfloat16, "uint8": torch.uint8}.get(
            spec["augment"], torch.float32
        )
        extra = {"crop": "random", "hflip": 0.5, "layout": "NCHW", "dtype": dtype}
        if dtype != torch.uint8:
            extra["normalize"] = IMAGENET
    dl = ferroload.make_loader(
        spec["path"], batch_size=BATCH, images=["image"], meta=["label"], resize=(OUT, OUT),
        out="torch", seed=0, **extra,
    )  # fmt: skip

    def run(epoch: int, check: bool) -> dict[str, Any]:
        return loader_epoch(dl, epoch, lambda: _consume(dl, check))

    return _Epoch(run, dl.close)


class _TorchvisionJpegs:
    """A map-style torch dataset: JPEG bytes in memory, decoded by torchvision and put
    through `transform` one sample at a time (in the DataLoader's workers)."""

    def __init__(self, payloads: list[bytes], labels: list[int], transform: Any) -> None:
        self.payloads = payloads
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.payloads)

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch
        from torchvision.io import decode_jpeg

        with warnings.catch_warnings():  # bytes are read-only; decode_jpeg only reads them
            warnings.simplefilter("ignore", UserWarning)
            data = torch.frombuffer(self.payloads[i], dtype=torch.uint8)
        return {"image": self.transform(decode_jpeg(data)), "label": self.labels[i]}


def _build_torchvision(spec: dict[str, Any]) -> _Epoch:
    import torch
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    with open(spec["payloads"], "rb") as f:
        payloads, labels = pickle.load(f)
    transform = v2.Compose(
        [
            v2.RandomResizedCrop(OUT, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(*IMAGENET),
        ]
    )
    ds = _TorchvisionJpegs(payloads, labels, transform)
    torch.manual_seed(0)
    dl = DataLoader(
        ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, persistent_workers=True
    )

    def run(epoch: int, check: bool) -> dict[str, Any]:
        return _consume(dl, check)

    return _Epoch(run, lambda: shutdown(dl))


BUILDERS: dict[str, Callable[[dict[str, Any]], _Epoch]] = {
    "ferroload": _build_ferroload,
    "torchvision": _build_torchvision,
}


def _handler(spec: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    ep = BUILDERS[spec["system"]](spec)

    def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["op"] == "ready":
            return {}
        if cmd["op"] == "epoch":
            return counting_faults(lambda: ep.run(cmd["epoch"], cmd.get("check", False)))
        if cmd["op"] == "quit":
            ep.close()
            return {"bye": True}
        return unknown(cmd)

    return handle


def worker(spec_json: str) -> None:
    """A per-system process: JSON commands on stdin, one JSON answer per line on stdout."""
    serve(spec_json, _handler)


# =========================================================================== driver side


def _systems(path: str, payloads: str) -> list[System]:
    return [
        System(
            "ferroload_plain",
            "a. ferroload make_loader, resize to 224, uint8 NHWC",
            {"system": "ferroload", "path": path, "augment": False},
        ),
        System(
            "ferroload_augment",
            "b. ferroload crop='random', hflip=0.5, NCHW float32, normalize",
            {"system": "ferroload", "path": path, "augment": True},
        ),
        System(
            "torchvision",
            f"c. torchvision decode_jpeg + v2 transforms, DataLoader(num_workers={WORKERS})",
            {"system": "torchvision", "payloads": payloads},
        ),
        System(
            "ferroload_augment_bf16",
            "d. as (b), NCHW bfloat16",
            {"system": "ferroload", "path": path, "augment": "bfloat16"},
        ),
        System(
            "ferroload_augment_uint8",
            "e. as (b), NCHW uint8, not normalised",
            {"system": "ferroload", "path": path, "augment": "uint8"},
        ),
    ]


def _check(n: int, label_sum: int, checks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Does every system deliver every sample, in the shapes and dtypes it promises, and
    do (b) and (c) agree on the normalised channel means?"""
    want = {
        "ferroload_plain": ("uint8", [BATCH, OUT, OUT, 3]),
        "ferroload_augment": ("float32", [BATCH, 3, OUT, OUT]),
        "torchvision": ("float32", [BATCH, 3, OUT, OUT]),
        "ferroload_augment_bf16": ("bfloat16", [BATCH, 3, OUT, OUT]),
        "ferroload_augment_uint8": ("uint8", [BATCH, 3, OUT, OUT]),
    }
    problems = []
    for key, c in checks.items():
        f = c.get("first") or {}
        if c["n"] != n or c["label_sum"] != label_sum:
            problems.append(f"{key}: {c['n']} samples (labels sum {c['label_sum']}), not {n}")
        if (f.get("image_dtype"), f.get("image_shape")) != want[key]:
            problems.append(f"{key}: images {f.get('image_dtype')} {f.get('image_shape')}")
        if not f.get("image_type", "").startswith("torch"):
            problems.append(f"{key}: images are {f.get('image_type')}, not torch tensors")
    means = {k: c["channel_means"] for k, c in checks.items()}
    a, b = means.get("ferroload_augment"), means.get("torchvision")
    gap = None
    if a is not None and b is not None:
        gap = max(abs(x - y) for x, y in zip(a, b, strict=True))
        if gap > MEAN_TOLERANCE:
            problems.append(f"normalised channel means differ by {gap:.3f}: {a} vs {b}")
    return {"channel_means": means, "mean_gap": gap, "problems": problems, "ok": not problems}


def bench(
    systems: list[System], n: int, label_sum: int, rounds: int, run_dir: Path
) -> dict[str, Any]:
    """Start every system's process, warm them up (checked), then `rounds` interleaved
    timed epochs."""
    children: dict[str, Child] = {}
    for s in systems:  # one at a time: their setup times are reported
        children[s.key] = Child(s.key, s.spec, run_dir, __file__)
        children[s.key].wait_ready()
    keys = list(children)
    # (a) over (b)'s epoch seconds, neighbours in a round
    pair = ("ferroload_plain", "ferroload_augment")
    plan = lambda r: keys if r % 2 == 0 else keys[::-1]  # noqa: E731
    got = interleaved_epochs(children, n, rounds, plan, pair, sample_warmup=False)
    times, checks, pairs, ref = got.times, got.checks, got.pairs, got.ref
    results: dict[str, Any] = {}
    for s in systems:
        ch = children[s.key]
        ch.close(sample=False)
        res: dict[str, Any] = {
            "label": s.label,
            "ok": ch.error is None and bool(times[s.key]),
            "error": ch.error,
            "setup_s": ch.ready.get("setup_s"),
        }
        if times[s.key]:
            res.update(summary(times[s.key], n))
            best = got.best_epoch(s.key)
            nb = math.ceil(n / BATCH)
            for k in ("build_s", "wait_s", "minflt"):
                if k in best:
                    res[f"best_epoch_{k}"] = best[k]
            if "build_s" in best:
                res["build_ms_per_batch"] = best["build_s"] / nb * 1e3
                res["wait_ms_per_batch"] = best["wait_s"] / nb * 1e3
                res["page_faults_per_batch"] = best["minflt"] / nb
        if s.key in checks:
            res["warmup_s"] = checks[s.key]["s"]
        results[s.key] = res
    sps = {k: r.get("samples_per_s") for k, r in results.items()}
    med = {k: r.get("median_samples_per_s") for k, r in results.items()}

    def ratio(d: dict[str, Any], x: str, y: str) -> float | None:
        return d[x] / d[y] if d.get(x) and d.get(y) else None

    return {
        "samples": n,
        "systems": results,
        "check": _check(n, label_sum, checks),
        "ratios": {
            "augment_over_torchvision": ratio(sps, "ferroload_augment", "torchvision"),
            "augment_over_torchvision_medians": ratio(med, "ferroload_augment", "torchvision"),
            "augment_over_plain": ratio(sps, "ferroload_augment", "ferroload_plain"),
            "augment_over_plain_medians": ratio(med, "ferroload_augment", "ferroload_plain"),
            "augment_over_plain_paired_median": float(np.median(pairs)) if pairs else None,
            "bf16_over_plain": ratio(sps, "ferroload_augment_bf16", "ferroload_plain"),
            "bf16_over_plain_medians": ratio(med, "ferroload_augment_bf16", "ferroload_plain"),
            "bf16_over_torchvision": ratio(sps, "ferroload_augment_bf16", "torchvision"),
            "uint8_augment_over_plain": ratio(sps, "ferroload_augment_uint8", "ferroload_plain"),
            "uint8_augment_over_plain_medians": ratio(
                med, "ferroload_augment_uint8", "ferroload_plain"
            ),
        },
        "reference_scaling_1_to_2": min(ref[1]) / min(ref[2]) if ref[1] else None,
        "reference_times_s": ref,
    }


# --------------------------------------------------------------------------- report


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    r = res["ratios"]
    b_c, b_a = r["augment_over_torchvision"], r["augment_over_plain"]
    chk = res["check"]
    return [
        goal(
            f"(b) ferroload augmented samples/s >= {GOAL_PEER}x (c) torchvision "
            f"DataLoader(num_workers={WORKERS})",
            "-" if b_c is None else f"{b_c:.2f}x",
            b_c is not None and b_c >= GOAL_PEER,
        ),
        goal(
            f"(b) ferroload augmented samples/s >= {GOAL_PLAIN}x (a) its plain uint8 resize",
            "-" if b_a is None else f"{b_a:.2f}x",
            b_a is not None and b_a >= GOAL_PLAIN,
        ),
        goal(
            "every system delivers every sample in its shape and dtype; (b) and (c) agree on "
            f"the normalised channel means (within {MEAN_TOLERANCE})",
            "ok" if chk["ok"] else "; ".join(chk["problems"])[:80],
            chk["ok"],
        ),
    ]


def render(res: dict[str, Any]) -> str:
    """The human-readable report of a result dict."""
    m = res["meta"]
    out = [
        *run_header("ferroload augmentation benchmark", m),
        "versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
        f"images: {m['image_source']}; {res['samples']:,} x 256x256 JPEG q90 "
        f"(avg {m['avg_bytes']:,.0f} B) -> 224x224, batches of {BATCH} + int64 labels",
        f"each system in its own fresh process: a warm-up epoch (checked), then best of "
        f"{m['rounds']} epochs, systems interleaved; dataset hot in the page cache",
    ]
    plain = res["systems"]["ferroload_plain"].get("samples_per_s")
    rows = []
    for r in res["systems"].values():
        sps = r.get("samples_per_s")
        rows.append(
            [
                r["label"] + ("" if r["ok"] else "  FAILED"),
                "-" if not sps else f"{r['best_s']:.3f}",
                "-" if not sps else f"{sps:,.0f}",
                "-" if not sps else f"{r['median_samples_per_s']:,.0f}",
                "-" if not sps or not plain else f"{sps / plain:.2f}",
                "-" if "build_ms_per_batch" not in r else f"{r['build_ms_per_batch']:.1f}",
                "-" if "wait_ms_per_batch" not in r else f"{r['wait_ms_per_batch']:.1f}",
            ]
        )
    headers = ["system", "best s", "samples/s", "median", "/ (a)", "build ms/batch",
               "wait ms/batch"]  # fmt: skip
    out += ["", table(headers, rows)]
    r = res["ratios"]

    out.append(
        f"(b) / (c) = {ratio(r['augment_over_torchvision'])} (medians "
        f"{ratio(r['augment_over_torchvision_medians'])}); (b) / (a) = "
        f"{ratio(r['augment_over_plain'])} (medians {ratio(r['augment_over_plain_medians'])}, "
        f"neighbouring epochs {ratio(r['augment_over_plain_paired_median'])}); "
        f"(d) bfloat16 / (a) = {ratio(r.get('bf16_over_plain'))} (medians "
        f"{ratio(r.get('bf16_over_plain_medians'))}), / (c) = {ratio(r.get('bf16_over_torchvision'))}; "
        f"(e) uint8 NCHW / (a) = {ratio(r.get('uint8_augment_over_plain'))} (medians "
        f"{ratio(r.get('uint8_augment_over_plain_medians'))})"
    )
    chk = res["check"]
    means = "; ".join(
        f"{k} " + ", ".join(f"{v:.3f}" for v in vals) for k, vals in chk["channel_means"].items()
    )
    out.append(
        "check: "
        + ("every sample, shapes and dtypes as promised" if chk["ok"] else "PROBLEMS: "
           + "; ".join(chk["problems"]))
        + f"; per-channel means over the warm-up epoch: {means}"
    )  # fmt: skip
    ref = res.get("reference_scaling_1_to_2")
    if ref is not None:
        out.append(f"machine reference (sha256, 1 vs 2 threads, same rounds): {ref:.2f} of linear")
    out += goals_table(res["goals"])
    if ref is not None and ref < 0.9:
        out.append(
            f"note: the machine reference scaled only {ref:.2f} of linear from 1 to 2 threads "
            "(other processes were using the CPUs): read the ratios, not the absolute figures"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = run_parser(__doc__, "bench_augment", quick="256 JPEGs, one timed epoch")
    p.add_argument("--rounds", type=int, default=None, help="timed epochs per system")
    p.add_argument("--keep", action="store_true", help="keep the written dataset")
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write the JSON, and return the results."""
    args = _parse(argv)
    if args.worker:
        worker(args.worker)
        exit_process(0)
    from _data import encode_natural, natural_photos, natural_source

    import ferroload

    run = start_run(args, "bench_augment", "augment-run-{mode}")
    run_dir = run.run_dir
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = sizes._replace(rounds=args.rounds)

    log(f"[{run.mode}] encoding {sizes.jpeg} JPEGs (not timed) ...")
    # the loader benchmark's JPEG set: same photos, seed and size
    samples = encode_natural(
        "jpeg", sizes.jpeg, fmt="jpg", seed=SEED + 2, size=SRC, photos=natural_photos(SEED)
    )
    path = run_dir / "ferroload"
    write_ferroload(samples, path, "augment")
    payloads = run_dir / "payloads.pkl"
    with open(payloads, "wb") as f:
        pickle.dump((samples.payloads, samples.labels), f, protocol=pickle.HIGHEST_PROTOCOL)
    systems = _systems(str(path), str(payloads))
    try:
        log(f"[{run.mode}] {len(systems)} processes ...")
        res = bench(systems, len(samples), sum(samples.labels), sizes.rounds, run_dir)
    finally:
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    res["meta"] = {
        **run_meta(run, available_cpus()),
        "versions": {
            n: pkg_version(n)
            for n in ("ferroload-loader", "ferroload-codec", "torch", "torchvision", "numpy")
        },
        "backends": ferroload.codec.backends(),
        "image_source": natural_source(),
        "avg_bytes": samples.payload_bytes / len(samples),
        "sizes": sizes._asdict(),
        "rounds": sizes.rounds,
        "seed": SEED,
        "configs": {
            "ferroload_plain": "make_loader(path, batch_size=64, images=['image'], "
            "meta=['label'], resize=(224, 224), out='torch', seed=0); set_epoch(e)",
            "ferroload_augment": "the same + crop='random', hflip=0.5, layout='NCHW', "
            "dtype=torch.float32, normalize=IMAGENET",
            "torchvision": "Dataset: decode_jpeg(torch.frombuffer(bytes)), then "
            "v2.Compose([RandomResizedCrop(224, antialias=True), RandomHorizontalFlip(), "
            "ToDtype(float32, scale=True), Normalize(*IMAGENET)]); DataLoader(ds, "
            f"batch_size=64, shuffle=True, num_workers={WORKERS}, persistent_workers=True)",
        },
    }
    res["goals"] = _goals(res)
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
