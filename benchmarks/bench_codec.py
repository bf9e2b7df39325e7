"""ferroload's image decoding against plain Pillow, side by side in one run.

1. 256x256 JPEG (q90) -> 224x224 RGB, `resize="exact"`, bilinear.
2. Variable-size JPEG (short side 300-700 px) -> 224x224, `resize="shorter"` (scale the
   shorter side, crop the centre) and `resize="exact"`.
3. 32x32 RGB PNG -> a batch of 32x32x3.

ferroload: `ImageDecoder(...).decode_batch(batch)` with 1 thread and with every CPU; for
the JPEG cases also on the libjpeg-turbo bundled in simplejpeg's wheel (the path of a
machine without the system's libturbojpeg), interleaved with the default path.
Baseline: what WebDataset / Hugging Face users write, one image at a time on one core,
`np.asarray(Image.open(io.BytesIO(b)).convert("RGB").resize((224, 224)))`, run twice: in
this process (the workspace's Pillow-SIMD) and in a side virtualenv with stock Pillow from
PyPI (what those users have; the goals are judged against it).

Run it from the repository root:

    uv run python benchmarks/bench_codec.py            # full run (a few minutes)
    uv run python benchmarks/bench_codec.py --quick    # smoke run (well under a minute)

It prints a table and writes the results as JSON (see benchmarks/README.md for what each
figure means). Timings are never asserted on: goals are reported as PASS / FAIL.

The stock-Pillow worker runs this same file (`--stock-worker`) in a virtualenv that has
only Pillow and numpy, so ferroload is imported inside the functions that need it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import pickle
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from _data import Samples, encode_natural, natural_photos, natural_source
from _harness import finish_run, reference_pass, run_meta, run_parser, start_run
from _meta import pkg_version
from _peers import StockPillow
from _report import goal, goals_table, ratio, run_header, table
from PIL import Image, ImageOps

from ferroload_core import available_cpus, exit_process

SEED = 20261201
OUT = 224  # output side of the JPEG cases
TINY = 32  # side of the PNG case

GOAL_PER_CORE = 2.5  # ferroload all-core img/s per core over stock Pillow's one-core img/s
GOAL_SCALING = 0.9  # 2-thread img/s over 2x the 1-thread img/s, at least
GOAL_PNG_IPS = 40_000.0  # 32x32 PNG images/s on all cores, at least
GOAL_MAD = 3.0  # mean absolute difference to Pillow (same filter), exact resize, below
GOAL_BUNDLED = 0.9  # bundled libjpeg-turbo (simplejpeg) img/s over the system's, at least


class Sizes(NamedTuple):
    """How big one run is (a NamedTuple: the module also loads from a bare file spec)."""

    jpeg: int  # 256x256 JPEGs
    var: int  # variable-size JPEGs
    png: int  # 32x32 PNGs
    jpeg_batch: int  # images per decode_batch call, JPEG
    png_batch: int  # images per decode_batch call, PNG
    repeats: int  # timed passes per method (best of)
    check: int  # images compared pixel by pixel


FULL = Sizes(jpeg=1024, var=512, png=16384, jpeg_batch=256, png_batch=4096, repeats=5, check=128)
QUICK = Sizes(jpeg=128, var=64, png=2048, jpeg_batch=64, png_batch=1024, repeats=2, check=32)


# --------------------------------------------------------------------------- the baselines
# One image at a time, the way a WebDataset / HF `datasets` user writes it. The same
# functions run in this process (Pillow-SIMD) and in the stock-Pillow worker.


def pil_exact(data: bytes) -> npt.NDArray[np.uint8]:
    """The user's line: Pillow's default resize filter (BICUBIC since Pillow 7)."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB").resize((OUT, OUT)))


def pil_exact_bilinear(data: bytes) -> npt.NDArray[np.uint8]:
    """The same with BILINEAR, ferroload's filter (for information and the pixel check)."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(im.resize((OUT, OUT), Image.Resampling.BILINEAR))


def pil_shorter(data: bytes) -> npt.NDArray[np.uint8]:
    """Resize the shorter side and crop the centre: `ImageOps.fit` (crop, then one resize)."""
    return np.asarray(ImageOps.fit(Image.open(io.BytesIO(data)).convert("RGB"), (OUT, OUT)))


def pil_shorter_bilinear(data: bytes) -> npt.NDArray[np.uint8]:
    im = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(ImageOps.fit(im, (OUT, OUT), Image.Resampling.BILINEAR))


def pil_png(data: bytes) -> npt.NDArray[np.uint8]:
    """A 32x32 PNG to an RGB array (no resize: it is already the target size)."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


BASELINES: dict[str, Callable[[bytes], npt.NDArray[np.uint8]]] = {
    "exact": pil_exact,
    "exact_bilinear": pil_exact_bilinear,
    "shorter": pil_shorter,
    "shorter_bilinear": pil_shorter_bilinear,
    "png": pil_png,
}


def pillow_pass(fn: Callable[[bytes], npt.NDArray[np.uint8]], items: Sequence[bytes]) -> float:
    """Seconds to decode every item with `fn`, one at a time (the arrays are kept)."""
    gc.collect()
    t0 = time.perf_counter()
    kept = [fn(b) for b in items]
    dt = time.perf_counter() - t0
    del kept
    return dt


def _pil_info() -> dict[str, Any]:
    from PIL import __version__ as pil_version
    from PIL import features

    dists = [d.lower() for d in packages_distributions().get("PIL", [])]
    return {
        "pillow": pil_version,
        "distribution": "pillow-simd" if "pillow-simd" in dists else "pillow",
        "libjpeg_turbo": features.version("libjpeg_turbo"),
        "zlib": features.version("zlib"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def stock_worker(data_path: str) -> None:
    """The stock-Pillow side process: JSON commands on stdin, one JSON answer per line."""
    with open(data_path, "rb") as f:
        sets: dict[str, list[bytes]] = pickle.load(f)
    print(json.dumps({"ready": True, **_pil_info()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            return
        fn, items = BASELINES[cmd["method"]], sets[cmd["case"]]
        if op == "time":
            answer: dict[str, Any] = {"s": pillow_pass(fn, items[: cmd.get("n", len(items))])}
        elif op == "dump":
            np.save(cmd["path"], np.stack([fn(b) for b in items[: cmd["n"]]]))
            answer = {"path": cmd["path"]}
        else:
            answer = {"error": f"unknown op {op!r}"}
        print(json.dumps(answer), flush=True)


# --------------------------------------------------------------------------- helpers


def _chunks(items: Sequence[bytes], size: int) -> list[Sequence[bytes]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# --------------------------------------------------------------------------- one case


class Case(NamedTuple):
    """One benchmark: a set of images, the ferroload decoder options and the baselines."""

    key: str  # results key
    title: str
    data: str  # name of the image set
    size: int
    resize: str  # ferroload resize mode
    batch: int
    baseline: str  # BASELINES key of the user's line
    info_baseline: str | None  # BASELINES key of the same-filter variant (info, pixel check)


def _ferroload_pass(
    decoder: Any,
    batches: list[Sequence[bytes]],
    out: npt.NDArray[np.uint8] | None = None,
    *,
    bundled: bool = False,
) -> float:
    """Seconds to decode every batch: into a new array per call, or into `out` (reused);
    with `bundled`, JPEGs go through simplejpeg's bundled libjpeg-turbo."""
    gc.collect()
    with bundled_jpeg(bundled):
        t0 = time.perf_counter()
        if out is None:
            for b in batches:
                decoder.decode_batch(b)
        else:
            for b in batches:
                decoder.decode_batch(b, out=out[: len(b)])
        return time.perf_counter() - t0


@contextlib.contextmanager
def bundled_jpeg(on: bool = True) -> Iterator[None]:
    """Decode JPEGs with the libjpeg-turbo bundled in simplejpeg's wheel, the path of a
    machine without the system's libturbojpeg (the swap the codec's tests make)."""
    import ferroload_codec._image as image
    from ferroload_codec._backends import simplejpeg

    saved = image.jpeg
    if on:
        image.jpeg = simplejpeg  # type: ignore[assignment]
    try:
        yield
    finally:
        image.jpeg = saved


def system_jpeg() -> bool:
    """Whether the system's libturbojpeg is in use (else the default path is the bundled one)."""
    from ferroload_codec._backends import turbojpeg

    return turbojpeg() is not None


def _summary(times: list[float], n: int, threads: int) -> dict[str, Any]:
    best = min(times)
    return {
        "times_s": times,
        "best_s": best,
        "median_s": float(np.median(times)),
        "threads": threads,
        "images_per_s": n / best,
        "us_per_image": best / n * 1e6,
        "per_core_images_per_s": n / best / threads,
    }


def bench_case(
    case: Case,
    items: list[bytes],
    thread_counts: list[int],
    stock: StockPillow | None,
    repeats: int,
    check: int,
    scratch: Path,
) -> dict[str, Any]:
    """Best-of-`repeats` passes over `items` of every method, interleaved."""
    from ferroload_codec import ImageDecoder

    batches = _chunks(items, case.batch)
    decoders = {
        t: ImageDecoder(case.size, resize=case.resize, interpolation="bilinear", threads=t)  # type: ignore[arg-type]
        for t in thread_counts
    }
    runs: dict[str, tuple[Callable[[], float], int]] = {}
    for t, dec in decoders.items():
        runs[f"ferroload_t{t}"] = (lambda d=dec: _ferroload_pass(d, batches), t)
    # For information: all cores, into one reused output array (no page faults on fresh
    # memory), as a loader that recycles its batch buffers does.
    t_all = max(thread_counts)
    reused = np.zeros((case.batch, case.size, case.size, 3), dtype=np.uint8)
    runs[f"ferroload_t{t_all}_out"] = (
        lambda: _ferroload_pass(decoders[t_all], batches, reused),
        t_all,
    )
    jpeg = case.data != "png32"
    if jpeg:  # the same decoders on simplejpeg's bundled libjpeg-turbo
        for t in sorted({1, t_all}):
            runs[f"ferroload_t{t}_bundled"] = (
                lambda d=decoders[t]: _ferroload_pass(d, batches, bundled=True),
                t,
            )
    pil_methods = [case.baseline] + ([case.info_baseline] if case.info_baseline else [])
    for m in pil_methods:
        runs[f"simd_{m}"] = (lambda fn=BASELINES[m]: pillow_pass(fn, items), 1)
        if stock is not None and stock.available:
            runs[f"stock_{m}"] = (
                lambda m=m: float(stock.ask(op="time", case=case.data, method=m)["s"]),
                1,
            )
    for t in (1, 2):
        runs[f"reference_t{t}"] = (lambda t=t: reference_pass(t), t)
    # Warm-up: thread pools, lazy imports, first-use costs, page-in of the payloads.
    warm = items[: min(len(items), case.batch)]
    for dec in decoders.values():
        dec.decode_batch(warm)
        if jpeg:
            with bundled_jpeg():
                dec.decode_batch(warm)
    decoders[t_all].decode_batch(warm, out=reused[: len(warm)])
    for m in pil_methods:
        pillow_pass(BASELINES[m], warm)
        if stock is not None and stock.available:
            stock.ask(op="time", case=case.data, method=m, n=len(warm))
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for rep in range(repeats):
        # Alternate the order so that no method always meets a busier machine.
        for name in names if rep % 2 == 0 else names[::-1]:
            times[name].append(runs[name][0]())
    for dec in decoders.values():
        dec.close()
    n = len(items)
    ref = {name: min(times.pop(name)) for name in ("reference_t1", "reference_t2")}
    methods = {name: _summary(ts, n, runs[name][1]) for name, ts in times.items()}
    res: dict[str, Any] = {
        "title": case.title,
        "images": n,
        "batch": case.batch,
        "resize": case.resize,
        "baseline": case.baseline,
        "methods": methods,
        # The same GIL-free work per thread: 1.0 = two threads run fully in parallel.
        "reference_scaling_1_to_2": ref["reference_t1"] / ref["reference_t2"],
    }
    fl_all = methods[f"ferroload_t{t_all}"]
    res["threads_all"] = t_all
    if 1 in thread_counts and 2 in thread_counts:
        res["scaling_1_to_2"] = methods["ferroload_t2"]["images_per_s"] / (
            2 * methods["ferroload_t1"]["images_per_s"]
        )
    if jpeg:
        bundled = methods[f"ferroload_t{t_all}_bundled"]
        # all cores, bundled over the default path (the system's libturbojpeg where present)
        res["bundled_over_default"] = bundled["images_per_s"] / fl_all["images_per_s"]
        res["default_jpeg"] = "system" if system_jpeg() else "bundled"
    for who in ("simd", "stock"):
        base = methods.get(f"{who}_{case.baseline}")
        if base is not None:
            res[f"per_core_over_{who}"] = fl_all["per_core_images_per_s"] / base["images_per_s"]
            if jpeg:
                res[f"bundled_per_core_over_{who}"] = (
                    methods[f"ferroload_t{t_all}_bundled"]["per_core_images_per_s"]
                    / base["images_per_s"]
                )
            res[f"t1_over_{who}"] = (
                methods["ferroload_t1"]["images_per_s"] / base["images_per_s"]
                if "ferroload_t1" in methods
                else None
            )
    res["correctness"] = check_pixels(case, items[:check], stock, scratch)
    return res


def check_pixels(
    case: Case, items: list[bytes], stock: StockPillow | None, scratch: Path
) -> dict[str, Any]:
    """Mean / max absolute difference between ferroload's output and Pillow's (not timed)."""
    from ferroload_codec import ImageDecoder

    dec = ImageDecoder(case.size, resize=case.resize, interpolation="bilinear", threads=1)  # type: ignore[arg-type]
    fl = dec.decode_batch(items).images.astype(np.int16)
    out: dict[str, Any] = {"images": len(items)}
    for m in filter(None, (case.info_baseline, case.baseline)):
        refs = {"simd": np.stack([BASELINES[m](b) for b in items])}
        if stock is not None and stock.available:
            path = scratch / f"stock-{case.key}-{m}.npy"
            stock.ask(op="dump", case=case.data, method=m, n=len(items), path=str(path))
            refs["stock"] = np.load(path)
        for who, ref in refs.items():
            diff = np.abs(fl - ref.astype(np.int16))
            out[f"{who}_{m}"] = {
                "mean_abs_diff": float(diff.mean()),
                "max_abs_diff": int(diff.max()),
            }
    return out


# --------------------------------------------------------------------------- report


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    goals = []
    stock = res["meta"]["stock_pillow"]["available"]
    against = "stock Pillow" if stock else "Pillow-SIMD (stock unavailable)"
    who = "stock" if stock else "simd"
    cores = res["meta"]["available_cpus"]
    for key in ("jpeg256_exact", "var_shorter", "var_exact"):
        c = res["cases"][key]
        v = c[f"per_core_over_{who}"]
        name = f"{key}: ferroload {c['threads_all']}-thread img/s / {cores} cores >= {GOAL_PER_CORE}x {against} 1-core"
        goals.append(goal(name, f"{v:.2f}x", v >= GOAL_PER_CORE))
    for key in ("jpeg256_exact", "var_shorter", "var_exact"):
        c = res["cases"][key]
        if "scaling_1_to_2" in c:
            v = c["scaling_1_to_2"]
            name = f"{key}: 2 threads >= {GOAL_SCALING}x linear scaling from 1 thread"
            goals.append(goal(name, f"{v:.2f}", v >= GOAL_SCALING))
    c = res["cases"]["jpeg256_exact"]
    v = c["bundled_over_default"]
    name = (
        f"jpeg256_exact: bundled libjpeg-turbo (simplejpeg) img/s >= {GOAL_BUNDLED}x "
        + ("the system libturbojpeg (PyTurboJPEG)" if c["default_jpeg"] == "system"
           else "the default path (no system libturbojpeg here: both are bundled)")
    )  # fmt: skip
    goals.append(goal(name, f"{v:.2f}x", v >= GOAL_BUNDLED))
    v = c[f"bundled_per_core_over_{who}"]
    name = f"jpeg256_exact: bundled libjpeg-turbo per core >= {GOAL_PER_CORE}x {against} 1-core"
    goals.append(goal(name, f"{v:.2f}x", v >= GOAL_PER_CORE))
    c = res["cases"]["png32"]
    v = c["methods"][f"ferroload_t{c['threads_all']}"]["images_per_s"]
    name = f"png32: >= {GOAL_PNG_IPS:,.0f} images/s on {c['threads_all']} threads"
    goals.append(goal(name, f"{v:,.0f}/s", v >= GOAL_PNG_IPS))
    for key in ("jpeg256_exact", "var_exact"):
        chk = res["cases"][key]["correctness"]["simd_exact_bilinear"]
        v = chk["mean_abs_diff"]
        name = f"{key}: mean |ferroload - Pillow bilinear| < {GOAL_MAD} levels"
        goals.append(goal(name, f"{v:.2f}", v < GOAL_MAD))
    return goals


_LABELS = {
    "exact": "user line (.resize, BICUBIC)",
    "exact_bilinear": "resize BILINEAR (info)",
    "shorter": "user line (ImageOps.fit, BICUBIC)",
    "shorter_bilinear": "ImageOps.fit BILINEAR (info)",
    "png": "user line (.convert('RGB'))",
}


def _method_label(name: str, res: dict[str, Any]) -> str:
    if name.startswith("ferroload_t"):
        threads, _, variant = name.removeprefix("ferroload_t").partition("_")
        label = f"ferroload decode_batch threads={threads}"
        if variant == "bundled":
            return label + ", bundled libjpeg-turbo (simplejpeg)"
        if system_jpeg() and res["cases"] and variant == "":
            label += ", system libturbojpeg"
        return label + (", out= reused (info)" if variant == "out" else "")
    who, method = name.split("_", 1)
    m = res["meta"]
    pil = m["pillow_simd"]["pillow"] if who == "simd" else m["stock_pillow"].get("pillow", "?")
    lib = "pillow-simd" if who == "simd" else "pillow (stock)"
    return f"{lib} {pil} {_LABELS[method]}"


def render(res: dict[str, Any]) -> str:
    """The human-readable report of a result dict."""
    m = res["meta"]
    st = m["stock_pillow"]
    stock_line = (
        f"stock Pillow {st['pillow']} (libjpeg-turbo {st['libjpeg_turbo']}, zlib {st['zlib']}) "
        f"in a side venv ({st['venv']})"
        if st["available"]
        else f"stock Pillow: unavailable ({st['reason']})"
    )
    ps = m["pillow_simd"]
    out = [
        *run_header("ferroload codec benchmark", m),
        "backends(): " + ", ".join(f"{k}={v}" for k, v in m["backends"].items()),
        f"in-process PIL: {ps['distribution']} {ps['pillow']} (libjpeg-turbo "
        f"{ps['libjpeg_turbo']}, zlib {ps['zlib']}); {stock_line}",
        f"images: {m['image_source']}; "
        + "; ".join(
            f"{s['name']}: {s['images']:,} x {s['desc']} (avg {s['avg_bytes']:,.0f} B)"
            for s in m["sets"].values()
        ),
        f"every figure: best of {m['repeats']} passes over all images, methods interleaved; "
        "Pillow decodes one image at a time on one core; 'per core' = img/s / threads; "
        "'/ stock', '/ simd' = per-core img/s over that Pillow's user-line img/s",
    ]
    for i, c in enumerate(res["cases"].values(), 1):
        out += [
            "",
            f"{i}. {c['title']} — {c['images']:,} images, decode_batch of {c['batch']}",
        ]
        base = c["methods"]
        simd = base.get(f"simd_{c['baseline']}")
        stock = base.get(f"stock_{c['baseline']}")
        rows = []
        for name, r in base.items():
            rows.append(
                [
                    _method_label(name, res),
                    f"{r['best_s']:.3f}",
                    f"{r['images_per_s']:,.0f}",
                    f"{r['us_per_image'] * r['threads']:.1f}",
                    f"{r['per_core_images_per_s']:,.0f}",
                    ratio(r["per_core_images_per_s"] / stock["images_per_s"] if stock else None),
                    ratio(r["per_core_images_per_s"] / simd["images_per_s"] if simd else None),
                ]
            )
        out.append(
            table(
                ["method", "best s", "img/s", "core-µs/img", "per core", "/ stock", "/ simd"],
                rows,
            )
        )
        notes = []
        if "scaling_1_to_2" in c:
            notes.append(
                f"scaling 1 -> 2 threads: {c['scaling_1_to_2']:.2f} of linear (machine "
                f"reference, sha256 on 1 vs 2 threads in the same rounds: "
                f"{c['reference_scaling_1_to_2']:.2f})"
            )
        chk = c["correctness"]
        diffs = [
            f"{k.replace('_', ' ', 1)} {v['mean_abs_diff']:.2f} (max {v['max_abs_diff']})"
            for k, v in chk.items()
            if isinstance(v, dict)
        ]
        notes.append(f"mean |ferroload - Pillow| over {chk['images']} images: " + ", ".join(diffs))
        out += notes
    out += goals_table(res["goals"])
    refs = [c["reference_scaling_1_to_2"] for c in res["cases"].values()]
    if min(refs) < GOAL_SCALING:
        out.append(
            f"note: the machine reference scaled only {min(refs):.2f}-{max(refs):.2f} of linear "
            "from 1 to 2 threads (other processes were using the CPUs): the scaling and "
            "all-core figures are bounded by the machine, not by ferroload alone"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = run_parser(
        __doc__,
        "bench_codec",
        quick="small sizes for a smoke run (128 + 64 JPEGs, 2,048 PNGs, best of 2)",
        workdir="scratch folder; the stock-Pillow venv is cached here",
    )
    p.add_argument(
        "--no-stock",
        action="store_true",
        help="skip the stock-Pillow baseline (no side venv; goals judged against Pillow-SIMD)",
    )
    p.add_argument("--stock-worker", metavar="DATA", help=argparse.SUPPRESS)
    return p.parse_args(argv)


CASES = (
    Case(
        "jpeg256_exact",
        'JPEG 256x256 q90 -> 224x224 RGB, resize="exact", bilinear',
        "jpeg256",
        OUT,
        "exact",
        0,
        "exact",
        "exact_bilinear",
    ),
    Case(
        "var_shorter",
        'JPEG short side 300-700 q90 -> 224x224 RGB, resize="shorter" (centre crop), bilinear',
        "var",
        OUT,
        "shorter",
        0,
        "shorter",
        "shorter_bilinear",
    ),
    Case(
        "var_exact",
        'JPEG short side 300-700 q90 -> 224x224 RGB, resize="exact", bilinear',
        "var",
        OUT,
        "exact",
        0,
        "exact",
        "exact_bilinear",
    ),
    Case("png32", "PNG 32x32 RGB -> 32x32x3 batch", "png32", TINY, "exact", 0, "png", None),
)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every benchmark, print the table, write the JSON, and return the results."""
    args = _parse(argv)
    if args.stock_worker:
        stock_worker(args.stock_worker)
        return {}
    import ferroload_codec

    sizes = QUICK if args.quick else FULL
    run = start_run(args, "bench_codec", "codec-run-{mode}")
    mode, run_dir = run.mode, run.run_dir

    print(f"[{mode}] encoding images (not timed) ...", file=sys.stderr, flush=True)
    photos = natural_photos(SEED)
    sets: dict[str, Samples] = {
        "jpeg256": encode_natural(
            "jpeg256", sizes.jpeg, fmt="jpg", seed=SEED + 1, size=256, photos=photos
        ),
        "var": encode_natural("var", sizes.var, fmt="jpg", seed=SEED + 2, photos=photos),
        "png32": encode_natural(
            "png32", sizes.png, fmt="png", seed=SEED + 3, size=TINY, photos=photos
        ),
    }
    descs = {
        "jpeg256": "256x256 JPEG q90",
        "var": "JPEG q90, short side 300-700, aspect up to 1.5",
        "png32": "32x32 RGB PNG",
    }
    stock: StockPillow | None = None
    if not args.no_stock:
        print(f"[{mode}] stock Pillow side venv ...", file=sys.stderr, flush=True)
        payloads = {k: s.payloads for k, s in sets.items()}
        stock = StockPillow(args.workdir, payloads, run_dir, __file__)
        if not stock.available:
            print(f"[{mode}] {stock.reason}", file=sys.stderr, flush=True)
    cpus = available_cpus()
    thread_counts = sorted({1, 2, cpus})
    pixels = [
        (int(im.size[0]), int(im.size[1]))
        for im in (Image.open(io.BytesIO(b)) for b in sets["var"].payloads)
    ]
    res: dict[str, Any] = {
        "meta": {
            **run_meta(run, cpus),
            "thread_counts": thread_counts,
            "backends": ferroload_codec.backends(),
            "versions": {
                n: pkg_version(n)
                for n in (
                    "ferroload-codec",
                    "pyturbojpeg",
                    "simplejpeg",
                    "opencv-python-headless",
                    "imagecodecs",
                    "numpy",
                )
            },
            "pillow_simd": _pil_info(),
            "stock_pillow": {
                "available": bool(stock and stock.available),
                "reason": "--no-stock" if stock is None else stock.reason,
                "venv": str(stock.venv) if stock else None,
                "setup_s": stock.setup_s if stock else None,
                **(stock.info if stock else {}),
            },
            "image_source": natural_source(),
            "sets": {
                k: {
                    "name": k,
                    "images": len(s),
                    "desc": descs[k],
                    "avg_bytes": s.payload_bytes / len(s),
                }
                for k, s in sets.items()
            },
            "var_mean_pixels": float(np.mean([w * h for w, h in pixels])),
            "sizes": sizes._asdict(),
            "repeats": sizes.repeats,
            "seed": SEED,
        },
        "cases": {},
    }
    try:
        for case in CASES:
            print(f"[{mode}] {case.key} ...", file=sys.stderr, flush=True)
            batch = sizes.png_batch if case.data == "png32" else sizes.jpeg_batch
            res["cases"][case.key] = bench_case(
                case._replace(batch=batch),
                sets[case.data].payloads,
                thread_counts,
                stock,
                sizes.repeats,
                sizes.check,
                run_dir,
            )
    finally:
        if stock is not None:
            stock.close()
    res["goals"] = _goals(res)
    shutil.rmtree(run_dir, ignore_errors=True)
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
