"""Tiny samples, 32x32 PNG (and 32x32 JPEG q90) + int label: the loader against its own codec and against ferroload-rs 0.1.1, quiet and on a busy machine.

Each epoch runs in a fresh process. Every kind of process first imports torch and the
package it uses (a training script has torch imported anyway; the import alone, ~1.4 s
here, would dwarf an epoch of 20,000 tiny samples: it is reported as `import_s`), then the
epoch is timed from there to its last batch, start-up included (opening the dataset,
`make_loader`, the decoder's threads). Batches of 256, uint8 NHWC images and int64
labels, `out="torch"`:

1. codec: `ImageDecoder.decode_batch` over the payloads in memory (read from a pickle),
   with the loader's thread count (every available CPU); codec1: the same on one thread
   (the codec's 1 -> 2 thread scaling);
2. loader: `make_loader(..., out="torch")` over the same images written as a ferroload
   dataset, one full shuffled epoch; its `LoaderStats` (time per batch in each stage) are
   recorded with it; loader_stream: the same with `streaming=True`;
3. codec_shuffled: the codec over the payloads taken in the loader's order (what the
   order alone costs the codec: cache and TLB misses);
4. rs011 and rs011_stream: ferroload-rs 0.1.1, the Rust original, from its published
   wheel in a virtualenv of its own (`_rs011_peer.py`), over the same images written by
   its own `Writer`, through its documented path `make_loader(root, 256, images=["image"],
   meta=["label"], resize=(32, 32), out="torch", seed=0[, streaming=True])`.

Before the timed rounds, every system runs one untimed checked epoch: the sum of its pixels
and its label counts must match the codec's pixels and the set's labels (exactly for PNG;
within 1 level of mean pixel for JPEG, whose decoders differ).

Each epoch also records its CPU time (all threads, user and system), page faults and peak
RSS: CPU per sample does not depend on what else the machine runs, where the epoch's wall
time does.

Loads (`--loads`, `_load.py`): `quiet`; `busy1` and `busy2`, with 1 and 2 competing
CPU-bound processes running through the load's rounds; `step`, where the consumer spends
4 ms of CPU per batch as a CPU training step does. Every system runs under every load, in
the same interleaved rounds (the order rotates every round); figures are medians with
min-max, and the spread is (max - min) / median of samples/s.

Run it from the repository root:

    uv run python benchmarks/bench_tiny.py            # 20,000 samples, 5 rounds, 4 loads
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
from _load import Step, competing, parse_loads  # noqa: E402
from _meta import import_torch, loadavg, usage, usage_since  # noqa: E402

SEED = 20261219
BATCH = 256
SIDE = 32
FULL_N, FULL_ROUNDS = 20_000, 5
QUICK_N, QUICK_ROUNDS = 2_000, 1
#: The kinds of timed process (see the module docstring); the `QUIET_ONLY` ones run quiet.
KINDS = ("codec", "codec1", "codec_shuffled", "loader", "loader_stream", "rs011", "rs011_stream")
QUIET_ONLY = ("codec1", "codec_shuffled")
RS_KINDS = ("rs011", "rs011_stream")
#: Goals (issue 34): ferroload over ferroload-rs 0.1.1, at least, every set, load and mode
GOAL_RS = 1.5
GOAL_CPU = 1.1  # loader CPU per sample over the codec's, at most
GOAL_SCALING = 1.8  # codec on every CPU over codec on one thread, at least
GOAL_BUSY = 0.6  # loader under busy1 over loader quiet, at least
JPEG_MEAN_TOLERANCE = 1.0  # |mean pixel - codec's|, JPEG (other decoders)


# --------------------------------------------------------------------------- children


def _codec_batches(root: Path, shuffled: bool) -> list[list[bytes]]:
    with open(root / "payloads.pkl", "rb") as f:
        payloads: list[bytes] = pickle.load(f)
    order = np.load(root / "order.npy").tolist() if shuffled else range(len(payloads))
    return [[payloads[i] for i in order[j : j + BATCH]] for j in range(0, len(order), BATCH)]


class _Sink:
    """The consumer: counts what each batch holds, spends the load's CPU per batch, and
    keeps the batches only for a checked epoch."""

    def __init__(self, load: str, check: bool) -> None:
        self.n = 0
        self.step = Step(load)
        self.kept: list[Any] | None = [] if check else None

    def __call__(self, batch: Any) -> None:
        self.n += len(batch["image"] if isinstance(batch, dict) else batch)
        if self.kept is not None:
            self.kept.append(batch)
        self.step()


def _child_codec(root: Path, kind: str, sink: _Sink) -> dict[str, Any]:
    import torch

    from ferroload_codec import ImageDecoder

    batches = _codec_batches(root, kind == "codec_shuffled")
    used, t_epoch = usage(), time.perf_counter()
    # the loader's defaults: exact, bilinear, every CPU (one thread for codec1)
    dec = ImageDecoder((SIDE, SIDE), threads=1 if kind == "codec1" else None)
    for batch in batches:
        sink(torch.from_numpy(dec.decode_batch(batch).images))
    dec.close()
    return {"t_epoch": t_epoch, "used": used}


def _child_loader(root: Path, kind: str, sink: _Sink) -> dict[str, Any]:
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
        streaming=kind == "loader_stream",
    )
    for b in dl:
        sink(b)
    dl.close()
    st = dl.stats
    stats = {k: v for k, v in vars(st).items() if k != "skipped_ids"}
    stats["per_batch_s"] = st.per_batch()
    return {"t_epoch": t_epoch, "used": used, "stats": stats}


def _child_rs011(root: Path, kind: str, sink: _Sink) -> dict[str, Any]:
    import torch  # noqa: F401  (its out="torch" collates with torch)
    from _rs011_peer import make_loader

    used, t_epoch = usage(), time.perf_counter()
    dl = make_loader(str(root / "rs011"), BATCH, SIDE, streaming=kind == "rs011_stream")
    for b in dl:
        sink(b)
    return {"t_epoch": t_epoch, "used": used}


def _check(batches: list[Any]) -> dict[str, Any]:
    """What an epoch delivered: pixel sum, label counts, the first batch's types."""
    images = [b if not isinstance(b, dict) else b["image"] for b in batches]
    labels = [b["label"] for b in batches if isinstance(b, dict)]
    first_img = images[0]
    res: dict[str, Any] = {
        "pixel_sum": int(sum(int(x.numpy().sum(dtype=np.int64)) for x in images)),
        "image": [str(first_img.dtype), list(first_img.shape), type(first_img).__module__],
    }
    if labels:
        counts = np.bincount(np.concatenate([x.numpy() for x in labels]), minlength=1000)
        res["label_counts"] = counts.tolist()
        res["label"] = [str(labels[0].dtype), list(labels[0].shape)]
    return res


#: Seconds a child may take (its epoch takes 1-10): past it, it prints every thread's
#: stack and exits, and the run fails naming it, rather than waiting for ever
CHILD_TIMEOUT = 240.0


def _child(kind: str, root: Path, load: str, check: bool) -> None:
    import faulthandler

    from _memory import status_kib

    faulthandler.dump_traceback_later(CHILD_TIMEOUT, exit=True)
    import_torch()  # every kind's batches are torch tensors

    sink = _Sink(load, check)
    if kind.startswith("codec"):
        got = _child_codec(root, kind, sink)
    elif kind in RS_KINDS:
        got = _child_rs011(root, kind, sink)
    else:
        got = _child_loader(root, kind, sink)
    t_end = time.perf_counter()
    out = {
        "n": sink.n,
        "process_s": t_end - _T_START,
        "epoch_s": t_end - got["t_epoch"],
        "import_s": got["t_epoch"] - _T_START,
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec (from the driver)
        "maxrss_mib": (status_kib("VmHWM") or 0) / (1 << 20),  # (status_kib gives bytes)
        **usage_since(got["used"]),  # the epoch's CPU time and page faults
    }
    if "stats" in got:  # the loader's LoaderStats: where its epoch went
        out["loader_stats"] = got["stats"]
    if sink.kept is not None:
        out["check"] = _check(sink.kept)
    print(json.dumps(out), flush=True)
    os._exit(0)  # without the interpreter's teardown (see README)


def _run_child(
    kind: str, root: Path, load: str, python: str, check: bool = False
) -> dict[str, Any]:
    cmd = [python, __file__, "--child", kind, "--workdir", str(root), "--load", load]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"  # the step's matmuls: one core
    if check:
        cmd.append("--check")
    try:
        res = subprocess.run(
            cmd, capture_output=True, text=True, env=env, check=False, timeout=CHILD_TIMEOUT + 30
        )
    except subprocess.TimeoutExpired as exc:  # it did not even print its stacks
        raise RuntimeError(f"{kind} child ({load}) hung: {str(exc.stderr)[-2000:]}") from exc
    if res.returncode != 0:
        raise RuntimeError(f"{kind} child ({load}) failed: {res.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    out["loadavg"] = loadavg()
    return out


# --------------------------------------------------------------------------- one set


def _write(fmt: str, n: int, root: Path, rs_python: str | None) -> dict[str, Any]:
    import _peers
    from _data import encode_natural
    from _rs011_peer import write_rs011

    samples = encode_natural(f"tiny-{fmt}", n, fmt=fmt, seed=SEED, size=SIDE)
    root.mkdir(parents=True, exist_ok=True)
    _peers.write_ferroload(samples, root / "ferroload")
    if rs_python is not None:
        write_rs011(rs_python, samples, root / "rs011")
    with open(root / "payloads.pkl", "wb") as f:
        pickle.dump(samples.payloads, f, protocol=pickle.HIGHEST_PROTOCOL)
    np.save(root / "order.npy", _loader_order(root / "ferroload", samples.keys))
    counts = np.bincount(np.asarray(samples.labels), minlength=1000).tolist()
    return {"samples": n, "avg_bytes": samples.payload_bytes / n, "label_counts": counts}


def _loader_order(dataset: Path, keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """The payload positions in the order the loader's timed epoch delivers them."""
    from ferroload_loader import make_loader

    where = {k: i for i, k in enumerate(keys)}
    dl = make_loader(str(dataset), batch_size=BATCH, meta=["label"], seed=0)
    order = [where[sid] for b in dl for sid in b["sample_id"]]
    dl.close()
    return np.asarray(order, dtype=np.int64)


def _checks(
    fmt: str, kinds: Sequence[str], root: Path, pythons: dict[str, str], set_info: dict[str, Any]
) -> dict[str, Any]:
    """One untimed, checked epoch of every kind; raises when a system delivers other
    pixels or labels than the codec and the set."""
    out: dict[str, Any] = {}
    ref: dict[str, Any] | None = None
    for kind in kinds:
        got = _run_child(kind, root, "quiet", pythons[kind], check=True)["check"]
        out[kind] = {k: v for k, v in got.items() if k != "label_counts"}
        if ref is None:
            ref = got  # the codec's
        pixels = SIDE * SIDE * 3 * set_info["samples"]
        diff = abs(got["pixel_sum"] - ref["pixel_sum"]) / pixels
        out[kind]["mean_pixel_diff"] = diff
        if (fmt == "png" and diff != 0) or diff > JPEG_MEAN_TOLERANCE:
            raise RuntimeError(f"{kind}: mean pixel differs from the codec's by {diff:.3f}")
        if "label_counts" in got and got["label_counts"] != set_info["label_counts"]:
            raise RuntimeError(f"{kind}: label counts differ from the set's")
        if got["image"][:2] != ["torch.uint8", [BATCH, SIDE, SIDE, 3]]:
            raise RuntimeError(f"{kind}: first batch is {got['image']}")
        if "label" in got and got["label"][0] != "torch.int64":
            raise RuntimeError(f"{kind}: labels are {got['label']}")
    return out


def _stat(values: list[float]) -> dict[str, float]:
    med = float(np.median(values))
    return {
        "median": med,
        "min": min(values),
        "max": max(values),
        "spread": (max(values) - min(values)) / med,
    }


def _summary(rs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    sps = [n / x["epoch_s"] for x in rs]
    out = {
        "runs": rs,
        "samples_per_s": _stat(sps),
        "process_samples_per_s": float(np.median([n / x["process_s"] for x in rs])),
        "median_cpu_us_per_sample": float(np.median([x["cpu_s"] for x in rs])) * 1e6 / n,
        "median_import_s": float(np.median([x["import_s"] for x in rs])),
        "median_maxrss_mib": float(np.median([x["maxrss_mib"] for x in rs])),
    }
    stats = [x for x in rs if "loader_stats" in x]
    if stats:  # the LoaderStats of the median epoch (per batch: prepare, decode, ...)
        med = sorted(stats, key=lambda x: x["epoch_s"])[len(stats) // 2]
        out["median_run_stats"] = med["loader_stats"]
    return out


def bench_fmt(
    fmt: str, n: int, rounds: int, root: Path, loads: Sequence[str], rs_python: str | None
) -> dict[str, Any]:
    """Write the set, check every system once, then under each load `rounds` interleaved
    fresh-process epochs of each kind."""
    log(f"{fmt}: encoding and writing {n} samples (not timed) ...")
    out: dict[str, Any] = _write(fmt, n, root, rs_python)
    kinds = [k for k in KINDS if rs_python is not None or k not in RS_KINDS]
    pythons = {k: rs_python if k in RS_KINDS else sys.executable for k in kinds}
    log(f"  {fmt}: checking what each system delivers")
    out["checks"] = _checks(fmt, [k for k in kinds if k != "codec1"], root, pythons, out)
    out["loads"] = {}
    for load in loads:
        these = tuple(k for k in kinds if load == "quiet" or k not in QUIET_ONLY)
        log(f"  {fmt}, load {load}:")
        with competing(load):
            runs = fresh_process_rounds(
                these,
                rounds,
                lambda k, r, load=load: _run_child(k, root, load, pythons[k]),
                n,
                order=lambda r, these=these: these[r % len(these) :] + these[: r % len(these)],
            )
        out["loads"][load] = {kind: _summary(rs, n) for kind, rs in runs.items()}
    return out


def _med(s: dict[str, Any], load: str, kind: str) -> float | None:
    got = s["loads"].get(load, {}).get(kind)
    return None if got is None else float(got["samples_per_s"]["median"])


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    goals: list[dict[str, Any]] = []

    def add(text: str, value: float | None, ok: bool) -> None:
        if value is not None:
            goals.append({"goal": text, "value": value, "pass": bool(ok)})

    for fmt, s in res["sets"].items():
        name = f"tiny 32x32 {fmt.upper()}"
        for load in s["loads"]:
            for ours, theirs, mode in (
                ("loader", "rs011", "shuffled"),
                ("loader_stream", "rs011_stream", "streaming"),
            ):
                a, b = _med(s, load, ours), _med(s, load, theirs)
                if a is not None and b is not None:
                    add(
                        f"{name}, {load}, {mode}: ferroload >= {GOAL_RS}x ferroload-rs 0.1.1",
                        a / b,
                        a / b >= GOAL_RS,
                    )
        quiet = s["loads"].get("quiet", {})
        for ours, theirs, mode in (
            ("loader", "rs011", "shuffled"),
            ("loader_stream", "rs011_stream", "streaming"),
        ):
            if ours in quiet and theirs in quiet:
                a = quiet[ours]["samples_per_s"]["spread"]
                b = quiet[theirs]["samples_per_s"]["spread"]
                add(
                    f"{name}, quiet, {mode}: spread of ferroload's epochs <= ferroload-rs 0.1.1's ({b:.3f})",
                    a,
                    a <= b,
                )
        if "loader" in quiet and "codec" in quiet:
            r = (
                quiet["loader"]["median_cpu_us_per_sample"]
                / quiet["codec"]["median_cpu_us_per_sample"]
            )
            add(
                f"{name}, quiet: loader CPU per sample <= {GOAL_CPU}x the codec's", r, r <= GOAL_CPU
            )
        if "codec1" in quiet and "codec" in quiet:
            r = _med(s, "quiet", "codec") / _med(s, "quiet", "codec1")
            add(
                f"{name}, quiet: codec on every CPU >= {GOAL_SCALING}x on one thread",
                r,
                r >= GOAL_SCALING,
            )
        if "busy1" in s["loads"] and "loader" in quiet:
            r = _med(s, "busy1", "loader") / _med(s, "quiet", "loader")
            add(
                f"{name}: loader under one competing process >= {GOAL_BUSY}x its quiet samples/s",
                r,
                r >= GOAL_BUSY,
            )
    return goals


def render(res: dict[str, Any]) -> str:
    lines = []
    for fmt, s in res["sets"].items():
        lines.append(
            f"tiny {fmt.upper()}: samples/s, median (min-max) of {res['meta']['rounds']} fresh-process epochs"
        )
        kinds = list(dict.fromkeys(k for load in s["loads"].values() for k in load))
        lines.append(
            "kind".ljust(16)
            + "".join(load.rjust(26) for load in s["loads"])
            + "   CPU us/sample  RSS MiB (quiet)"
        )
        for kind in kinds:
            cells = []
            for load in s["loads"].values():
                got = load.get(kind)
                sp = got["samples_per_s"] if got else None
                cells.append(
                    f"{sp['median']:9.0f} ({sp['min']:6.0f}-{sp['max']:6.0f})".rjust(26)
                    if sp
                    else " " * 26
                )
            q = s["loads"].get("quiet", {}).get(kind)
            extra = (
                f"   {q['median_cpu_us_per_sample']:13.1f}  {q['median_maxrss_mib']:7.0f}"
                if q
                else ""
            )
            lines.append(kind.ljust(16) + "".join(cells) + extra)
        st = s["loads"].get("quiet", {}).get("loader", {}).get("median_run_stats")
        if st:
            parts = ", ".join(f"{k} {v * 1e6:.0f}" for k, v in st["per_batch_s"].items())
            lines.append(
                f"loader, quiet median epoch, us per batch (LoaderStats): {parts}; "
                f"first batch {st['first_batch_seconds'] * 1e3:.0f} ms"
            )
        lines.append("")
    if res["meta"].get("rs011_unavailable"):
        lines.append(f"ferroload-rs 0.1.1 not measured: {res['meta']['rs011_unavailable']}")
    lines.append("GOALS")
    lines.extend(
        f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']:.3f}" for g in res["goals"]
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = run_parser(__doc__, "bench_tiny", quick="smoke run (2,000 samples, 1 round)")
    p.add_argument("--child", choices=KINDS, help="(internal) one timed epoch")
    p.add_argument("--load", default="quiet", help="(internal) the child's load")
    p.add_argument("--check", action="store_true", help="(internal) check what it delivers")
    p.add_argument("--rounds", type=int, default=None, help="epochs of each kind and load")
    p.add_argument("--fmt", choices=("png", "jpg", "both"), default="both")
    p.add_argument(
        "--loads",
        default="quiet,busy1,busy2,step",
        help="the loads to run, in turn (quiet, busy1, busy2, step; see _load.py)",
    )
    p.add_argument("--no-rs011", action="store_true", help="leave ferroload-rs 0.1.1 out")
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, Path(args.workdir), args.load, args.check)

    from _rs011_peer import rs011_python

    from ferroload_core import available_cpus

    loads = parse_loads(args.loads)
    run = start_run(args, "bench_tiny", "tiny-run-{mode}")
    n = QUICK_N if args.quick else FULL_N
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    fmts = ("png", "jpg") if args.fmt == "both" else (args.fmt,)
    rs_python, why = (None, "--no-rs011") if args.no_rs011 else rs011_python(Path(args.workdir))
    meta = {
        **run_meta(run, available_cpus()),
        "samples": n,
        "rounds": rounds,
        "batch": BATCH,
        "loads": list(loads),
        "rs011_unavailable": why,
    }
    res: dict[str, Any] = {"meta": meta, "sets": {}}
    for fmt in fmts:
        res["sets"][fmt] = bench_fmt(fmt, n, rounds, run.run_dir / fmt, loads, rs_python)
    res["goals"] = _goals(res)
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    os._exit(0)  # without the interpreter's teardown (see README)
