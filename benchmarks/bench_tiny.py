"""The loader against its own codec on tiny samples: 32x32 PNG (and 32x32 JPEG q90) + int label.

Each epoch runs in a fresh process. Both kinds of process first import torch and the
ferroload package they use (a training script has torch imported anyway; the import alone,
~1.4 s here, would dwarf an epoch of 20,000 tiny samples: it is reported as `import_s`), then
the epoch is timed from there to its last batch, start-up included (opening the dataset,
`make_loader`, the decoder's threads):

1. codec: `ImageDecoder.decode_batch` over the payloads in memory (read from a pickle), in
   batches of 256, with the loader's thread count (every available CPU);
2. loader: `make_loader(..., out="torch")` over the same images written as a ferroload
   dataset, batches of 256, one full epoch; its `LoaderStats` (time per batch in each
   stage: prepare, decode, collate, wait, blocked; the first batch) are recorded with it;
3. codec_shuffled: the codec again, over the same in-memory payloads taken in the
   loader's order (its epoch 0, seed 0; the batch lists built before the clock starts).
   The loader's shuffled epoch reads its images from scattered places in memory, the
   codec's stored order from consecutive ones; this kind shows what the order alone
   costs the codec (a few % here: cache and TLB misses), apart from the loader's own work.

Each epoch also records its CPU time (all threads, user and system) and page faults
(`cpu_s`, `major_faults`, `minor_faults`): CPU per sample does not depend on what else
the machine runs, where the epoch's wall time does; a major fault means the loader read
its shard from disk (the codec's bytes are in memory before its clock starts).

The kinds of process take turns (rotated every round), `rounds` of each; the figure is
loader samples/s over codec samples/s (stored order, the goal's), from the median epochs
(and from the best ones), and from the whole processes' times too (imports included);
loader over codec_shuffled is reported beside it.

Run it from the repository root:

    uv run python benchmarks/bench_tiny.py            # 20,000 samples, 5 rounds
    uv run python benchmarks/bench_tiny.py --quick    # smoke run (2,000 samples, 1 round)

Timings are never asserted on: goals are reported as PASS / FAIL.
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
from _harness import (  # noqa: E402
    finish_run,
    fresh_process_rounds,
    log,
    run_meta,
    run_parser,
    start_run,
)
from _meta import loadavg, usage, usage_since  # noqa: E402

from ferroload_core import available_cpus, exit_process  # noqa: E402

SEED = 20261219
BATCH = 256
SIDE = 32
GOALS = {"png": 0.9, "jpg": 0.95}  # loader over codec, at least
FULL_N, FULL_ROUNDS = 20_000, 5
QUICK_N, QUICK_ROUNDS = 2_000, 1
#: The kinds of timed process (see the module docstring).
KINDS = ("codec", "loader", "codec_shuffled")


# --------------------------------------------------------------------------- children


def _child_codec(root: Path, shuffled: bool = False) -> dict[str, Any]:
    import torch  # noqa: F401  (as in the loader's process)

    from ferroload_codec import ImageDecoder

    with open(root / "payloads.pkl", "rb") as f:
        payloads: list[bytes] = pickle.load(f)
    order = np.load(root / "order.npy").tolist() if shuffled else range(len(payloads))
    batches = [[payloads[i] for i in order[j : j + BATCH]] for j in range(0, len(order), BATCH)]
    used, t_epoch = usage(), time.perf_counter()
    dec = ImageDecoder((SIDE, SIDE))  # the loader's defaults: exact, bilinear, every CPU
    n = 0
    for batch in batches:
        n += len(dec.decode_batch(batch).images)
    dec.close()
    return {"n": n, "t_epoch": t_epoch, "used": used}


def _child_loader(root: Path) -> dict[str, Any]:
    import torch  # noqa: F401  (what out="torch" needs; imported by any training script)

    from ferroload_loader import make_loader

    used, t_epoch = usage(), time.perf_counter()
    dl = make_loader(
        str(root / "ferroload"),
        batch_size=BATCH,
        images=["image"],
        meta=["label"],
        resize=(SIDE, SIDE),
        out="torch",
        seed=0,
    )
    n = 0
    for b in dl:
        n += int(b["image"].shape[0])
    dl.close()
    st = dl.stats
    stats = {k: v for k, v in vars(st).items() if k != "skipped_ids"}
    stats["per_batch_s"] = st.per_batch()
    return {"n": n, "t_epoch": t_epoch, "used": used, "stats": stats}


def _child(kind: str, root: Path) -> None:
    got = _child_loader(root) if kind == "loader" else _child_codec(root, kind == "codec_shuffled")
    t_end = time.perf_counter()
    out = {
        "n": got["n"],
        "process_s": t_end - _T_START,
        "epoch_s": t_end - got["t_epoch"],
        "import_s": got["t_epoch"] - _T_START,
        **usage_since(got["used"]),  # the epoch's CPU time and page faults
    }
    if "stats" in got:  # the loader's LoaderStats: where its epoch went
        out["loader_stats"] = got["stats"]
    print(json.dumps(out))


def _run_child(kind: str, root: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--workdir", str(root)]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{kind} child failed: {res.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    out["loadavg"] = loadavg()
    return out


# --------------------------------------------------------------------------- one set


def _write(fmt: str, n: int, root: Path) -> dict[str, Any]:
    import _peers
    from _data import encode_natural

    samples = encode_natural(f"tiny-{fmt}", n, fmt=fmt, seed=SEED, size=SIDE)
    root.mkdir(parents=True, exist_ok=True)
    _peers.write_ferroload(samples, root / "ferroload")
    with open(root / "payloads.pkl", "wb") as f:
        pickle.dump(samples.payloads, f, protocol=pickle.HIGHEST_PROTOCOL)
    np.save(root / "order.npy", _loader_order(root / "ferroload", samples.keys))
    return {"samples": n, "avg_bytes": samples.payload_bytes / n}


def _loader_order(dataset: Path, keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """The payload positions in the order the loader's timed epoch delivers them."""
    from ferroload_loader import make_loader

    where = {k: i for i, k in enumerate(keys)}
    dl = make_loader(str(dataset), batch_size=BATCH, meta=["label"], seed=0)
    order = [where[sid] for b in dl for sid in b["sample_id"]]
    dl.close()
    return np.asarray(order, dtype=np.int64)


def bench_fmt(fmt: str, n: int, rounds: int, root: Path) -> dict[str, Any]:
    """Write the set, then `rounds` interleaved fresh-process epochs of each kind."""
    log(f"{fmt}: encoding and writing {n} samples (not timed) ...")
    out: dict[str, Any] = _write(fmt, n, root)
    log(f"  {fmt}:")
    runs = fresh_process_rounds(
        KINDS,
        rounds,
        lambda k, r: _run_child(k, root),
        n,
        order=lambda r: KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)],
    )
    for kind, rs in runs.items():
        ep = [x["epoch_s"] for x in rs]
        proc = [x["process_s"] for x in rs]
        out[kind] = {
            "runs": rs,
            "median_cpu_us_per_sample": float(np.median([x["cpu_s"] for x in rs])) * 1e6 / n,
            "median_epoch_s": float(np.median(ep)),
            "best_epoch_s": min(ep),
            "median_process_s": float(np.median(proc)),
            "samples_per_s": n / float(np.median(ep)),
            "best_samples_per_s": n / min(ep),
            "process_samples_per_s": n / float(np.median(proc)),
        }
    # the LoaderStats of the loader's median epoch (per batch: prepare, decode, ...)
    med_run = sorted(runs["loader"], key=lambda x: x["epoch_s"])[len(runs["loader"]) // 2]
    out["loader"]["median_run_stats"] = med_run.get("loader_stats")
    c, lo = out["codec"], out["loader"]
    out["loader_over_codec"] = lo["samples_per_s"] / c["samples_per_s"]
    out["loader_over_codec_best"] = lo["best_samples_per_s"] / c["best_samples_per_s"]
    out["loader_over_codec_process"] = lo["process_samples_per_s"] / c["process_samples_per_s"]
    out["loader_over_codec_shuffled"] = lo["samples_per_s"] / out["codec_shuffled"]["samples_per_s"]
    out["loader_cpu_over_codec"] = lo["median_cpu_us_per_sample"] / c["median_cpu_us_per_sample"]
    return out


def render(res: dict[str, Any]) -> str:
    lines = [
        "set    codec/s  loader/s  ratio (median epochs)  best   whole process"
        "   codec shuffled/s  loader/shuffled"
    ]
    for fmt, s in res["sets"].items():
        lines.append(
            f"{fmt:4s} {s['codec']['samples_per_s']:9.0f} {s['loader']['samples_per_s']:9.0f}"
            f"  {s['loader_over_codec']:.3f}{'':18s}{s['loader_over_codec_best']:.3f}"
            f"  {s['loader_over_codec_process']:.3f}{'':10s}"
            f"{s['codec_shuffled']['samples_per_s']:9.0f}  {s['loader_over_codec_shuffled']:.3f}"
        )
    for fmt, s in res["sets"].items():
        lines.append(
            f"{fmt} CPU per sample (median epochs, all threads): codec "
            f"{s['codec']['median_cpu_us_per_sample']:.1f} us, loader "
            f"{s['loader']['median_cpu_us_per_sample']:.1f} us ({s['loader_cpu_over_codec']:.2f}x)"
        )
    for fmt, s in res["sets"].items():
        st = s["loader"].get("median_run_stats")
        if st:
            parts = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in st["per_batch_s"].items())
            lines.append(
                f"{fmt} loader, median epoch, us per batch (LoaderStats): {parts}; "
                f"first batch {st['first_batch_seconds'] * 1e3:.0f} ms"
            )
    lines.append("GOALS")
    lines.extend(
        f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']:.3f}" for g in res["goals"]
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = run_parser(__doc__, "bench_tiny", quick="smoke run (2,000 samples, 1 round)")
    p.add_argument("--child", choices=KINDS, help="(internal) one timed epoch")
    p.add_argument("--rounds", type=int, default=None, help="epochs of each kind")
    p.add_argument("--fmt", choices=("png", "jpg", "both"), default="both")
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, Path(args.workdir))
        exit_process(0)

    run = start_run(args, "bench_tiny", "tiny-run-{mode}")
    n = QUICK_N if args.quick else FULL_N
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    fmts = ("png", "jpg") if args.fmt == "both" else (args.fmt,)
    meta = {**run_meta(run, available_cpus()), "samples": n, "rounds": rounds, "batch": BATCH}
    res: dict[str, Any] = {"meta": meta, "sets": {}}
    for fmt in fmts:
        res["sets"][fmt] = bench_fmt(fmt, n, rounds, run.run_dir / fmt)
    res["goals"] = [
        {
            "goal": f"tiny 32x32 {fmt.upper()}: loader >= {GOALS[fmt]}x the codec (fresh "
            "processes, start-up included, medians)",
            "value": s["loader_over_codec"],
            "pass": s["loader_over_codec"] >= GOALS[fmt],
        }
        for fmt, s in res["sets"].items()
    ]
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
