"""ferroload's loader against WebDataset, Hugging Face `datasets` and ferroload-rs 0.1.1, side by side in one run.

1. tiny: 32x32 PNG + int label -> uint8 (B, 32, 32, 3) + int64 labels, batches of 256.
2. jpeg: 256x256 JPEG q90 + int label -> resized to uint8 (B, 224, 224, 3), batches of 64.

The same encoded images are written once as a ferroload dataset, as WebDataset shards, as
a Hugging Face `save_to_disk` folder and as a ferroload-rs 0.1.1 dataset (its own
`Writer`). Each system (and each of its configurations) then runs in its own fresh
process: ferroload's `make_loader` (one process, its decode threads), shuffled and
`streaming=True`; ferroload-rs 0.1.1's documented `make_loader`, map-style and
`streaming=True`, in a process of its own virtualenv (`_rs011_peer.py`; without one, the
run says why and goes on without it);
WebDataset's pipeline through `wds.WebLoader` (a torch DataLoader) with 0 and 2 worker
processes; `load_from_disk` + `set_transform` through a torch DataLoader with 0 and 2
workers; the codec alone (`ImageDecoder.decode_batch` over the bytes in memory), the
ceiling of the loader; and ferroload's `FerroIterableDataset` in a torch DataLoader with 2
persistent workers (`ferroload_w2`). Every process runs a warm-up epoch (which also checks
what it delivers), then the processes take turns, one full epoch each per round, best of N.
Peak memory comes from the process itself (`ru_maxrss`, its workers' too) and from the
whole process tree (PSS, sampled). A last test stalls the consumer to measure what
`prefetch_bytes` (64 MiB vs the default 512 MiB) holds at most.

`--loads quiet,busy1,...` (`_load.py`) times the interleaved rounds of every system again
under each load: `busyN` runs N CPU-bound competing processes through that load's rounds,
`step` makes each consumer spend CPU on every batch. `quiet` is always measured first
(the warm-up check, the figures above and the reference of the other loads).

Run it from the repository root:

    uv run python benchmarks/bench_loader.py            # full run (several minutes)
    uv run python benchmarks/bench_loader.py --quick    # smoke run (about two minutes)
    uv run python benchmarks/bench_loader.py --loads quiet,busy1,step

It prints a table and writes the results as JSON (see benchmarks/README.md for what each
figure means). Timings are never asserted on: goals are reported as PASS / FAIL.

The peers decode with Pillow. By default their processes import stock Pillow from PyPI (what
WebDataset and HF users have), installed once into a folder under the workdir and put first
on their `PYTHONPATH`; `--no-stock` (or no network) runs them on the workspace's Pillow-SIMD,
which is faster, so a stricter test. Heavy imports happen inside the worker processes only
(`_loader_worker.py`): this module, and the shared `_*.py` helpers it uses, import nothing
but the standard library and numpy at the top.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from _harness import (
    Rounds,
    finish_run,
    interleaved_epochs,
    log,
    reference_pass,
    run_meta,
    run_parser,
    start_run,
    summary,
)
from _load import STEP_MS, competing, competitors, parse_loads
from _loader_report import render
from _loader_worker import NUM_CLASSES, worker
from _meta import pkg_version
from _peers import stock_pillow, write_ferroload, write_hf, write_webdataset
from _procs import Child
from _report import MiB, goal
from _rs011_peer import RS011_VERSION, rs011_python, write_rs011

from ferroload_core import available_cpus, exit_process

SEED = 20261202

GOAL_TINY = 2.0  # ferroload samples/s over the best peer configuration's, tiny set, at least
GOAL_JPEG = 1.3  # the same, JPEG set, at least
GOAL_CODEC = 0.85  # loader samples/s over the codec's own all-core images/s (JPEG), at least
GOAL_PREFETCH_OVERHEAD = 64 * MiB  # peak RSS growth above prefetch_bytes, stalled consumer
PREFETCH_BUDGETS = (64 * MiB, 512 * MiB)  # the test's small budget and the default
GOAL_WORKERS_PEER = 1.5  # tiny: ferroload_w2 samples/s over the best 2-worker peer's, at least
GOAL_WORKERS_MEMORY = 1.3  # ferroload_w2's tree peak PSS over in-process ferroload's, at most
WORKERS = 2  # DataLoader workers of ferroload's worker-mode configuration
JPEG_MEAN_TOLERANCE = 1.0  # |mean pixel - ferroload's| across systems (different resizers)
# ferroload samples/s over ferroload-rs 0.1.1's (median epochs, under each load), at least
GOAL_RS011 = {"tiny": 1.5, "jpeg": 2.0}
GOAL_BUSY1_KEEP = 0.6  # ferroload's median samples/s under busy1 over its quiet one, at least
#: (ours, ferroload-rs 0.1.1's) configuration keys, compared like for like
RS011_PAIRS = {
    "shuffled": ("ferroload", "rs011"),
    "streaming": ("ferroload_stream", "rs011_stream"),
}
WORKER_SCRIPT = Path(__file__).resolve().parent / "_loader_worker.py"


class Sizes(NamedTuple):
    """How big one run is."""

    tiny: int  # 32x32 PNGs
    jpeg: int  # 256x256 JPEGs
    rounds: int  # timed epochs per configuration (best of)
    wds_shards: int  # WebDataset shards per set (so that every DataLoader worker has some)
    stall_s: float  # longest wait for the prefetcher to fill its budget
    peer_workers: tuple[int, ...]  # DataLoader num_workers of the peers' configurations


FULL = Sizes(tiny=20_480, jpeg=5_000, rounds=3, wds_shards=8, stall_s=60.0, peer_workers=(0, 2))
# Quick: every process imports torch (~3.5 s of CPU each), so fewer of them.
QUICK = Sizes(tiny=2_048, jpeg=256, rounds=1, wds_shards=4, stall_s=10.0, peer_workers=(2,))


class SetSpec(NamedTuple):
    """One benchmark data set and the batches every system makes of it."""

    key: str
    ext: str  # png | jpg
    src: int  # side of the encoded images
    out: int  # side of the output images
    batch: int


SETS = (
    SetSpec("tiny", "png", 32, 32, 256),
    SetSpec("jpeg", "jpg", 256, 224, 64),
)


# --------------------------------------------------------------------------- one set


class Config(NamedTuple):
    """One system configuration: a results key, its label, and its worker spec."""

    key: str
    label: str
    kind: str  # ferroload | codec | peer | prefetch
    spec: dict[str, Any]
    workers: int = 0


def _configs(
    s: SetSpec,
    paths: dict[str, Any],
    payloads_path: Path,
    threads: int,
    peer_workers: Sequence[int],
) -> list[Config]:
    common = {"out": s.out, "batch": s.batch, "ext": s.ext}
    fl = {"system": "ferroload", "path": paths["ferroload"], **common}
    configs = [
        Config(
            "ferroload",
            f"ferroload make_loader ({threads} decode threads, prefetch 512 MiB)",
            "ferroload",
            {**fl, "prefetch_bytes": PREFETCH_BUDGETS[1]},
        ),
        Config(
            "ferroload_stream",
            f"ferroload make_loader streaming=True ({threads} decode threads)",
            "stream",
            {**fl, "prefetch_bytes": PREFETCH_BUDGETS[1], "streaming": True},
        ),
    ]
    configs.append(
        Config(
            f"ferroload_w{WORKERS}",
            f"ferroload FerroIterableDataset + DataLoader num_workers={WORKERS} (persistent)",
            "workers",
            {**fl, "system": "ferroload_workers", "workers": WORKERS},
            WORKERS,
        )
    )
    if s.key == "jpeg":
        configs.append(
            Config(
                "ferroload_prefetch64",
                "ferroload make_loader, prefetch_bytes=64 MiB",
                "prefetch",
                {**fl, "prefetch_bytes": PREFETCH_BUDGETS[0]},
            )
        )
    configs.append(
        Config(
            "codec",
            f"ferroload_codec decode_batch only ({threads} threads, bytes in memory)",
            "codec",
            {"system": "codec", "payloads": str(payloads_path), **common},
        )
    )
    peers = (
        ("wds", "webdataset + WebLoader", "urls"),
        ("hf", "HF datasets + DataLoader", "path"),
    )
    for system, what, arg in peers:
        for n in peer_workers:
            spec = {"system": system, arg: paths[system], "workers": n, **common}
            label = f"{what} num_workers={n}" + (" (persistent)" if n else "")
            configs.append(Config(f"{system}_w{n}", label, "peer", spec, n))
    if "rs011" in paths:
        for key, streaming in (("rs011", False), ("rs011_stream", True)):
            how = "streaming=True" if streaming else "map-style, shuffled"
            spec = {"system": "rs011", "path": paths["rs011"], "streaming": streaming, **common}
            label = f"ferroload-rs {RS011_VERSION} make_loader ({how})"
            configs.append(Config(key, label, "rs011", spec))
    return configs


def _check(
    s: SetSpec, n: int, labels: list[int], checks: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Did every system deliver the same samples, as the same tensors?"""
    want_counts = np.bincount(np.asarray(labels), minlength=NUM_CLASSES).tolist()
    want_shape = [s.batch, s.out, s.out, 3]
    problems = []
    means = {}
    for key, c in checks.items():
        f = c["first"] or {}
        if c["n"] != n:
            problems.append(f"{key}: {c['n']} samples, not {n}")
        shape = f.get("image_shape") or []
        if f.get("image_dtype") != "uint8" or shape[1:] != want_shape[1:] or shape[0] > s.batch:
            problems.append(f"{key}: images {f.get('image_dtype')} {f.get('image_shape')}")
        if key != "codec":
            if not f.get("image_type", "").startswith("torch"):
                problems.append(f"{key}: images are {f.get('image_type')}, not torch tensors")
            if f.get("label_dtype") != "int64" or f.get("label_type") != "Tensor":
                problems.append(f"{key}: labels {f.get('label_type')} {f.get('label_dtype')}")
            if c["label_counts"] != want_counts:
                problems.append(f"{key}: the labels differ from the data set's")
        means[key] = c["pixel_sum"] / max(1, c["n"] * s.out * s.out * 3)
    ref = means.get("ferroload")
    if ref is not None:
        for key, m in means.items():
            if s.ext == "png" and checks[key]["pixel_sum"] != checks["ferroload"]["pixel_sum"]:
                problems.append(f"{key}: pixel sum differs from ferroload's (lossless set)")
            elif abs(m - ref) > JPEG_MEAN_TOLERANCE:
                problems.append(f"{key}: mean pixel {m:.2f} vs ferroload's {ref:.2f}")
    return {
        "image_shape": want_shape,
        "image_dtype": "uint8",
        "label_dtype": "int64",
        "first_batch": {k: c["first"] for k, c in checks.items()},
        "mean_pixel": means,
        "problems": problems,
        "ok": not problems,
    }


#: Where a non-peer configuration goes in a round: ferroload next to the codec and to
#: ferroload-rs 0.1.1, streaming next to its streaming (ratios are taken between neighbours).
_PLACE = {"rs011": 0, "ferroload": 1, "codec": 2, "ferroload_stream": 8, "rs011_stream": 9}


def _round_plan(configs: list[Config], r: int) -> list[str]:
    """The order of round `r`: the ferroload processes, the codec and ferroload-rs 0.1.1
    next to each other (see `_PLACE`), between the peers; reversed every other round so
    that no configuration always meets the same moment of the machine."""
    peers = [c.key for c in configs if c.kind == "peer"]
    fast = sorted((c.key for c in configs if c.kind != "peer"), key=lambda k: _PLACE.get(k, 5))
    half = (len(peers) + 1) // 2
    plan = peers[:half] + fast + peers[half:]
    return plan if r % 2 == 0 else plan[::-1]


def _loader_overhead(
    s: SetSpec, configs: list[Config], rounds: int, run_dir: Path, env: dict[str, str]
) -> dict[str, Any]:
    """The loader's own overhead: ferroload against the codec alone, with no other
    process alive (the peers' idle processes, with their persistent workers, slow the
    loader's four threads more than the codec's two; that crowded figure is reported too).
    """
    keys = ("ferroload", "codec")
    specs = {c.key: c.spec for c in configs if c.key in keys}
    children = {k: Child(f"{s.key}-overhead-{k}", specs[k], run_dir, __file__, env) for k in keys}
    for ch in children.values():
        ch.wait_ready()
    best = dict.fromkeys(keys, math.inf)
    pairs: list[float] = []
    for key, ch in children.items():
        log(f"  overhead warm-up {key}")
        ch.ask(op="epoch", epoch=0, sample=False)
    for r in range(rounds):
        this: dict[str, float] = {}
        for key in keys if r % 2 == 0 else keys[::-1]:
            got = children[key].ask(op="epoch", epoch=r + 1, sample=False)
            if got is not None:
                this[key] = got["s"]
                best[key] = min(best[key], got["s"])
        if len(this) == 2:
            pairs.append(this["codec"] / this["ferroload"])
    for ch in children.values():
        ch.close()
    ok = all(math.isfinite(v) for v in best.values())
    return {
        "loader_over_codec": best["codec"] / best["ferroload"] if ok else None,
        "loader_over_codec_paired_median": float(np.median(pairs)) if pairs else None,
    }


def _config_result(
    c: Config,
    ch: Child,
    got: Rounds,
    stall: dict[str, Any] | None,
    n: int,
) -> dict[str, Any]:
    """One configuration's figures, from its process's answers."""
    end = ch.close()
    res: dict[str, Any] = {
        "label": c.label,
        "kind": c.kind,
        "workers": c.workers,
        "ok": ch.error is None and bool(got.times[c.key]),
        "error": ch.error,
        "setup_s": ch.ready.get("setup_s"),
        "rss_setup": ch.ready.get("rss_setup"),
        "pil": (end or {}).get("pil") or ch.ready.get("pil"),
        "api": ch.ready.get("api"),
        # Warm-up and timed epochs only (not the stalled-consumer epoch).
        "tree_peak": ch.peaks.get("run", {"rss": 0, "pss": 0, "pss_anon": 0, "procs": 0}),
        "tree_peak_stall": ch.peaks.get("stall"),
    }
    if end:
        res["maxrss_self"] = end["maxrss_self"]
        if stall is not None and stall.get("hwm_before"):
            res["maxrss_self_incl_stall"] = end["maxrss_self"]
            res["maxrss_self"] = stall["hwm_before"]
        res["maxrss_children"] = end["maxrss_children"]
        res["maxrss_main_plus_workers"] = end["maxrss_self"] + c.workers * end["maxrss_children"]
    if got.times[c.key]:
        res.update(summary(got.times[c.key], n))
        best = got.best_epoch(c.key)
        for k in ("build_s", "wait_s", "batches", "minflt"):
            if k in best:
                res[f"best_epoch_{k}"] = best[k]
    if stall is not None:
        res["stall"] = stall
    if c.key in got.checks:
        res["warmup_s"] = got.checks[c.key]["s"]
    return res


def _versus_peers(results: dict[str, Any]) -> dict[str, Any]:
    """ferroload against the fastest peer configuration (best epochs and medians)."""
    fl = results["ferroload"].get("samples_per_s")
    fl_med = results["ferroload"].get("median_samples_per_s")
    peers = {k: r for k, r in results.items() if r["kind"] == "peer" and r.get("samples_per_s")}
    if not peers:
        return {}
    best_key = max(peers, key=lambda k: peers[k]["samples_per_s"])
    best = peers[best_key]
    return {
        "best_peer": best_key,
        "best_peer_samples_per_s": best["samples_per_s"],
        "ferroload_over_best_peer": fl / best["samples_per_s"] if fl else None,
        "ferroload_over_best_peer_medians": (
            fl_med / max(p["median_samples_per_s"] for p in peers.values()) if fl_med else None
        ),
    }


def _per_batch(bd: dict[str, Any], codec: dict[str, Any], batches: int) -> dict[str, Any]:
    """Where a ferroload batch's time goes (`bd`: the epoch with `decode_batch` timed),
    beside the codec alone (`codec`: its results, `batches` batches an epoch)."""
    nb = max(1, bd["batches"])
    return {
        "batches": bd["batches"],
        "epoch_s": bd["s"],
        "build_ms_per_batch": bd["build_s"] / nb * 1e3,
        "decode_ms_per_batch": bd["decode_s"] / nb * 1e3,
        "other_ms_per_batch": (bd["build_s"] - bd["decode_s"]) / nb * 1e3,
        "wait_ms_per_batch": bd["wait_s"] / nb * 1e3,
        "page_faults_per_batch": bd["minflt"] / nb,
        "codec_page_faults_per_batch": (
            codec["best_epoch_minflt"] / batches if "best_epoch_minflt" in codec else None
        ),
        "codec_best_ms_per_batch": (
            codec["best_s"] / batches * 1e3 if codec.get("best_s") else None
        ),
    }


class InterpreterChild(Child):
    """A `Child` whose worker is `_loader_worker.py` run by another interpreter, ferroload-rs
    0.1.1's virtualenv (`_procs.Child` runs `script` with this process's interpreter)."""

    def __init__(
        self, name: str, spec: dict[str, Any], run_dir: Path, python: str, env: dict[str, str]
    ) -> None:
        self.name = name
        self.spec = spec
        self.log = run_dir / f"{name}.log"
        self.error = None
        self.ready = {}
        self.peaks = {}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [python, str(WORKER_SCRIPT), "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )


def _by_load(times: dict[str, list[float]], n: int) -> dict[str, dict[str, Any]]:
    """Each configuration's samples/s over its epochs under one load: median, min, max."""
    out = {}
    for key, ts in times.items():
        if ts:
            out[key] = {
                "median_samples_per_s": n / float(np.median(ts)),
                "min_samples_per_s": n / max(ts),
                "max_samples_per_s": n / min(ts),
                "epochs_s": ts,
            }
    return out


def _load_rounds(
    children: dict[str, Child],
    configs: list[Config],
    n: int,
    rounds: int,
    load: str,
    first_epoch: int,
) -> tuple[dict[str, list[float]], float]:
    """`rounds` interleaved rounds of one timed epoch of every configuration under `load`
    (its competitors already running; each consumer does the load's work per batch).
    Returns each configuration's epoch seconds and the machine reference's 1 -> 2 thread
    scaling in the same rounds."""
    times: dict[str, list[float]] = {k: [] for k in children}
    ref: dict[int, list[float]] = {1: [], 2: []}
    for r in range(rounds):
        log(f"  {load}: round {r + 1}/{rounds}")
        for t in (1, 2):
            ref[t].append(reference_pass(t))
        for key in _round_plan(configs, r):
            got = children[key].ask(op="epoch", epoch=first_epoch + r, sample=False, load=load)
            if got is None:
                continue
            if got["n"] != n:
                children[key].fail(f"{load} epoch delivered {got['n']} samples, not {n}")
                continue
            times[key].append(got["s"])
    return times, min(ref[1]) / min(ref[2])


def _versus_rs011(
    results: dict[str, Any], times: dict[str, list[float]]
) -> dict[str, dict[str, Any]]:
    """ferroload against ferroload-rs 0.1.1, shuffled and streaming: on best epochs, on
    median epochs, and the median over rounds of neighbouring epochs."""
    out = {}
    for how, (ours, theirs) in RS011_PAIRS.items():
        a, b = results.get(ours, {}), results.get(theirs, {})
        if not a.get("samples_per_s") or not b.get("samples_per_s"):
            continue
        ta, tb = times.get(ours) or [], times.get(theirs) or []
        paired = [y / x for x, y in zip(ta, tb, strict=True)] if len(ta) == len(tb) else []
        out[how] = {
            "ours": ours,
            "rs011": theirs,
            "ratio_best": a["samples_per_s"] / b["samples_per_s"],
            "ratio_medians": a["median_samples_per_s"] / b["median_samples_per_s"],
            "ratio_paired_median": float(np.median(paired)) if paired else None,
        }
    return out


def bench_set(
    s: SetSpec,
    samples: Any,
    configs: list[Config],
    rounds: int,
    run_dir: Path,
    stock_path: Path | None,
    stall_s: float,
    *,
    loads: Sequence[str] = ("quiet",),
    rs011: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start every configuration's process (ferroload-rs 0.1.1's with its interpreter
    `rs011`), warm them up, then time `rounds` interleaved epochs (best of), with the
    machine reference probe in the same rounds; then the same rounds again under each
    further load of `loads` (the first is quiet).

    Returns the set's results (the quiet load's figures) and, per load, each
    configuration's samples/s and the machine reference's scaling."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    peer_env = dict(env)
    if stock_path is not None:
        peer_env["PYTHONPATH"] = str(stock_path)
    isolated = _loader_overhead(s, configs, rounds, run_dir, env)
    children: dict[str, Child] = {}
    for c in configs:
        name = f"{s.key}-{c.key}"
        if c.kind == "rs011":
            assert rs011 is not None  # its configurations exist only with its interpreter
            children[c.key] = InterpreterChild(name, c.spec, run_dir, rs011, env)
        else:
            e = peer_env if c.kind == "peer" else env
            children[c.key] = Child(name, c.spec, run_dir, __file__, e)
    for ch in children.values():
        ch.wait_ready()
    n = len(samples)
    # loader / codec between neighbours, per round
    plan = lambda r: _round_plan(configs, r)  # noqa: E731
    got = interleaved_epochs(children, n, rounds, plan, pair=("codec", "ferroload"))
    quiet_ref = min(got.ref[1]) / min(got.ref[2])
    by_load = {"quiet": {"systems": _by_load(got.times, n), "reference_scaling_1_to_2": quiet_ref}}
    epoch = rounds + 2  # rounds + 1 is the breakdown's
    for load in loads[1:]:
        with competing(load) as k:
            log(f"  load {load}: {k} competing processes" + (", step" if load == "step" else ""))
            times, scaling = _load_rounds(children, configs, n, rounds, load, epoch)
        epoch += rounds
        by_load[load] = {"systems": _by_load(times, n), "reference_scaling_1_to_2": scaling}
    breakdown = None
    if children["ferroload"].ok:
        log("  ferroload: one more epoch with decode_batch timed")
        breakdown = children["ferroload"].ask(op="breakdown", epoch=rounds + 1)
    stalls: dict[str, Any] = {}
    if s.key == "jpeg":
        for c in configs:
            if c.kind in ("ferroload", "prefetch"):
                log(f"  stalled consumer {c.key}")
                stall = children[c.key].ask(op="stall", phase="stall", max_wait=stall_s)
                if stall is not None:
                    stalls[c.key] = stall
    results = {
        c.key: _config_result(c, children[c.key], got, stalls.get(c.key), n) for c in configs
    }
    out: dict[str, Any] = {
        "samples": n,
        "batch": s.batch,
        "out": s.out,
        "configs": results,
        "check": _check(s, n, samples.labels, got.checks),
        "reference_scaling_1_to_2": quiet_ref,
        "reference_times_s": got.ref,
        **_versus_peers(results),
        "vs_rs011": _versus_rs011(results, got.times),
    }
    fl = results["ferroload"].get("samples_per_s")
    codec = results["codec"].get("samples_per_s")
    out["loader_over_codec_crowded"] = fl / codec if fl and codec else None
    pairs = got.pairs
    out["loader_over_codec_crowded_paired_median"] = float(np.median(pairs)) if pairs else None
    out.update(isolated)
    if breakdown is not None and breakdown.get("decode_s") is not None:
        out["breakdown"] = _per_batch(breakdown, results["codec"], math.ceil(n / s.batch))
    return out, by_load


# --------------------------------------------------------------------------- goals


def _worker_goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    """ferroload in DataLoader workers: against the best peer with as many workers (tiny),
    and the process tree's peak memory against the in-process loader's (each set).

    Memory is PSS, summed over the tree: a page shared by the main process and its forked
    workers (torch's libraries and their relocated data, ~300 MiB, inherited at the fork)
    counts once, split between them. Summed RSS would count it in every process, so any
    DataLoader with 2 workers shows ~2x its main process there, peers included; it is
    in the value for reference."""
    goals = []
    key = f"ferroload_w{WORKERS}"
    st = res["sets"]["tiny"]
    mine = st["configs"].get(key, {}).get("samples_per_s")
    peers = {
        k: r["samples_per_s"]
        for k, r in st["configs"].items()
        if r["kind"] == "peer" and r["workers"] == WORKERS and r.get("samples_per_s")
    }
    best = max(peers, key=lambda k: peers[k]) if peers else "none"
    r = mine / peers[best] if mine and peers else None
    name = f"tiny: {key} samples/s >= {GOAL_WORKERS_PEER}x the best {WORKERS}-worker peer ({best})"
    goals.append(
        goal(name, "-" if r is None else f"{r:.2f}x", r is not None and r >= GOAL_WORKERS_PEER)
    )
    for set_key, st in res["sets"].items():
        cfg = st["configs"]
        w, fl = cfg.get(key, {}).get("tree_peak") or {}, cfg["ferroload"].get("tree_peak") or {}
        name = f"{set_key}: {key} tree peak PSS <= {GOAL_WORKERS_MEMORY}x in-process ferroload"
        if not w.get("pss") or not fl.get("pss"):
            goals.append(goal(name, "-", False))
            continue
        ratio = w["pss"] / fl["pss"]
        value = f"{ratio:.2f}x (summed RSS {w['rss'] / fl['rss']:.2f}x)"
        goals.append(goal(name, value, ratio <= GOAL_WORKERS_MEMORY))
    return goals


def _load_goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Per load: ferroload against ferroload-rs 0.1.1 on each set, shuffled and streaming
    (median epochs); and what ferroload keeps of its quiet throughput under busy1."""
    goals = []
    missing = "-" if res["meta"]["rs011"]["python"] else "- (ferroload-rs 0.1.1 not run)"
    for load, sets in res["loads"].items():
        for set_key, st in sets.items():
            target = GOAL_RS011[set_key]
            for how, (ours, theirs) in RS011_PAIRS.items():
                a = st.get(ours, {}).get("median_samples_per_s")
                b = st.get(theirs, {}).get("median_samples_per_s")
                name = (
                    f"{load}: {set_key}: {ours} samples/s >= {target}x ferroload-rs "
                    f"{RS011_VERSION}'s {theirs} ({how}, median epochs)"
                )
                r = a / b if a and b else None
                goals.append(
                    goal(name, missing if r is None else f"{r:.2f}x", r is not None and r >= target)
                )
    if "busy1" in res["loads"]:
        for set_key in res["loads"]["quiet"]:
            q = res["loads"]["quiet"][set_key].get("ferroload", {})
            b = res["loads"]["busy1"][set_key].get("ferroload", {})
            qm, bm = q.get("median_samples_per_s"), b.get("median_samples_per_s")
            r = bm / qm if qm and bm else None
            name = (
                f"busy1: {set_key}: ferroload keeps >= {GOAL_BUSY1_KEEP}x its quiet samples/s "
                "(median epochs)"
            )
            ok = r is not None and r >= GOAL_BUSY1_KEEP
            goals.append(goal(name, "-" if r is None else f"{r:.2f}x", ok))
    return goals


def _goals(res: dict[str, Any]) -> list[dict[str, Any]]:
    goals = []
    against = res["meta"]["peer_pillow"]
    for key, target in (("tiny", GOAL_TINY), ("jpeg", GOAL_JPEG)):
        st = res["sets"][key]
        r = st.get("ferroload_over_best_peer")
        best = st.get("best_peer", "none")
        name = f"{key}: ferroload samples/s >= {target}x the best peer config ({best}, {against})"
        goals.append(goal(name, "-" if r is None else f"{r:.2f}x", r is not None and r >= target))
    goals += _worker_goals(res)
    st = res["sets"]["jpeg"]
    r = st.get("loader_over_codec")
    name = f"jpeg: loader samples/s >= {GOAL_CODEC}x the codec's own all-core images/s"
    goals.append(goal(name, "-" if r is None else f"{r:.2f}x", r is not None and r >= GOAL_CODEC))
    for key in ("ferroload_prefetch64", "ferroload"):
        stall = st["configs"].get(key, {}).get("stall")
        budget = PREFETCH_BUDGETS[0] if key.endswith("64") else PREFETCH_BUDGETS[1]
        name = (
            f"jpeg: prefetch_bytes={budget // MiB} MiB, stalled consumer: peak RSS growth "
            f"<= budget + {GOAL_PREFETCH_OVERHEAD // MiB} MiB"
        )
        if stall is None:
            goals.append(goal(name, "-", False))
        else:
            d = stall["delta"]
            goals.append(goal(name, f"{d / MiB:.0f} MiB", d <= budget + GOAL_PREFETCH_OVERHEAD))
    for key in ("tiny", "jpeg"):
        chk = res["sets"][key]["check"]
        name = f"{key}: every system delivers the same samples as uint8 NHWC + int64 labels"
        goals.append(goal(name, "ok" if chk["ok"] else "; ".join(chk["problems"])[:80], chk["ok"]))
    goals += _load_goals(res)
    return goals


# --------------------------------------------------------------------------- main

CONFIGS_META = {
    "ferroload": "make_loader(path, batch_size=B, images=['image'], meta=['label'], "
    "resize=(S, S), out='torch', seed=0); set_epoch(e) per epoch",
    "ferroload_stream": "the same with streaming=True",
    "rs011": f"ferroload-rs {RS011_VERSION} in its own venv (its Writer, the same bytes): "
    "make_loader(root, B, images=['image'], meta=['label'], resize=(S, S), out='torch', "
    "seed=0); rs011_stream: the same with streaming=True; set_epoch(e) per epoch",
    "webdataset": "wds.WebDataset(urls, shardshuffle=100, seed=0).shuffle(1000)"
    ".decode('pil').to_tuple(ext, 'cls').map_tuple(transform, identity).batched(B); "
    "wds.WebLoader(ds, batch_size=None, num_workers=n, persistent_workers=n>0)",
    "hf": "load_from_disk(path) with image: Image(), label: int64; "
    "set_transform(transform of every image); DataLoader(hfds, batch_size=B, "
    "shuffle=True, num_workers=n, persistent_workers=n>0)",
    "transform": "torch.from_numpy(np.array(img.convert('RGB').resize((S, S), BILINEAR)))",
    "codec": "ImageDecoder((S, S)).decode_batch(chunk of B encoded images)",
    "ferroload_workers": "FerroIterableDataset(path, batch_size=B, images=['image'], "
    "meta=['label'], resize=(S, S), seed=0); DataLoader(ds, batch_size=None, "
    "num_workers=2, persistent_workers=True); ds.set_epoch(e) per epoch",
}
DESCS = {"tiny": "32x32 PNG", "jpeg": "256x256 JPEG q90"}


def _parse(argv: Sequence[str] | None) -> Any:
    p = run_parser(
        __doc__,
        "bench_loader",
        quick="small sizes for a smoke run (2,048 PNGs, 256 JPEGs, one timed epoch)",
        workdir="scratch folder; stock Pillow is cached here",
    )
    p.add_argument(
        "--no-stock",
        action="store_true",
        help="peers use the workspace's Pillow-SIMD (no stock-Pillow download)",
    )
    p.add_argument("--rounds", type=int, default=None, help="timed epochs per configuration")
    p.add_argument(
        "--loads",
        default="quiet",
        help="the loads to time every system under, in turn (quiet, busy1, busy2, step; "
        "default quiet, which is always measured first)",
    )
    p.add_argument(
        "--no-rs011",
        action="store_true",
        help=f"leave ferroload-rs {RS011_VERSION} out (no venv, no download)",
    )
    p.add_argument("--keep", action="store_true", help="keep the written datasets")
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _write_set(
    samples: Any, root: Path, shards: int, rs011: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write `samples` the three ways, and the fourth with ferroload-rs 0.1.1's `Writer`
    (run by its interpreter `rs011`, where there is one), and pickle their payloads for
    the codec alone. Returns the paths for the worker specs and what the writing took."""
    paths: dict[str, Any] = {"ferroload": str(root / "ferroload"), "hf": str(root / "hf")}
    t0 = time.perf_counter()
    write_ferroload(samples, root / "ferroload")
    t1 = time.perf_counter()
    write_hf(samples, root / "hf")
    t2 = time.perf_counter()
    paths["wds"] = write_webdataset(samples, root / "wds", shards)
    wt = {"ferroload": t1 - t0, "hf": t2 - t1, "wds": time.perf_counter() - t2}
    if rs011 is not None:
        t3 = time.perf_counter()
        write_rs011(rs011, samples, root / "rs011")
        paths["rs011"] = str(root / "rs011")
        wt["rs011"] = time.perf_counter() - t3
    paths["payloads"] = root / "payloads.pkl"
    with open(paths["payloads"], "wb") as f:
        pickle.dump(samples.payloads, f, protocol=pickle.HIGHEST_PROTOCOL)
    return paths, {"write_s": wt, "wds_shards": len(paths["wds"])}


def _peer_pillow(res: dict[str, Any], stock: bool) -> str:
    """Which Pillow the peers decoded with, as their processes reported it."""
    peer_pil = {
        r["pil"]["pillow"]
        for st in res["sets"].values()
        for r in st["configs"].values()
        if r["kind"] == "peer" and r.get("pil")
    }
    if not peer_pil:
        return "?"
    return ("stock Pillow " if stock else "Pillow-SIMD ") + ", ".join(sorted(peer_pil))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every benchmark, print the table, write the JSON, and return the results."""
    args = _parse(argv)
    if args.worker:
        worker(args.worker)
        exit_process(0)
    from _data import encode_natural, natural_photos, natural_source

    sizes = QUICK if args.quick else FULL
    sizes = sizes._replace(rounds=args.rounds or sizes.rounds)
    run = start_run(args, "bench_loader", "loader-run-{mode}")
    mode = run.mode

    log(f"[{mode}] encoding images (not timed) ...")
    photos = natural_photos(SEED)
    counts = {"tiny": sizes.tiny, "jpeg": sizes.jpeg}
    sets = {
        s.key: encode_natural(
            s.key, counts[s.key], fmt=s.ext, seed=SEED + i, size=s.src, photos=photos
        )
        for i, s in enumerate(SETS, 1)
    }

    def side(what: str, skip: str | None, make: Any) -> tuple[Any, str | None]:
        """A side environment (`make(workdir)` -> (it, None) or (None, why)), or
        (None, the flag) when the run was told to leave it out."""
        if skip:
            return None, skip
        log(f"[{mode}] {what} ...")
        got, why = make(args.workdir)
        if got is None:
            log(f"[{mode}] {what} unavailable, left out: {why}")
        return got, why

    stock_path, stock_reason = side(
        "stock Pillow for the peers", "--no-stock" if args.no_stock else None, stock_pillow
    )
    rs011, rs011_reason = side(
        f"ferroload-rs {RS011_VERSION} venv", "--no-rs011" if args.no_rs011 else None, rs011_python
    )
    loads = ("quiet", *(x for x in parse_loads(args.loads) if x != "quiet"))
    threads = available_cpus()
    meta: dict[str, Any] = {
        **run_meta(run, threads),
        "versions": {
            n: pkg_version(n)
            for n in ("ferroload-loader", "webdataset", "datasets", "torch", "numpy")
        },
        "stock_pillow": {"path": str(stock_path) if stock_path else None, "reason": None},
        "image_source": natural_source(),
        "sets": {},
        "sizes": sizes._asdict(),
        "rounds": sizes.rounds,
        "wds_shards": sizes.wds_shards,
        "seed": SEED,
        "configs": CONFIGS_META,
        "rs011": {"version": RS011_VERSION, "python": rs011, "reason": rs011_reason},
        "loads": {
            "measured": list(loads),
            "competitors": {x: competitors(x) for x in loads},
            "step_ms": STEP_MS,
        },
    }
    res: dict[str, Any] = {"meta": meta, "sets": {}, "loads": {x: {} for x in loads}}
    res["loads_reference_scaling_1_to_2"] = {x: {} for x in loads}
    if stock_path is None:
        meta["stock_pillow"]["reason"] = f"stock Pillow unavailable: {stock_reason}"
    try:
        for s in SETS:
            samples = sets[s.key]
            meta["sets"][s.key] = {
                "samples": len(samples),
                "desc": DESCS[s.key],
                "avg_bytes": samples.payload_bytes / len(samples),
            }
            log(f"[{mode}] {s.key}: writing the {4 if rs011 else 3} formats ...")
            root = run.run_dir / s.key
            paths, written = _write_set(samples, root, sizes.wds_shards, rs011)
            meta["sets"][s.key].update(written)
            configs = _configs(s, paths, paths["payloads"], threads, sizes.peer_workers)
            log(f"[{mode}] {s.key}: {len(configs)} processes ...")
            res["sets"][s.key], by_load = bench_set(
                s,
                samples,
                configs,
                sizes.rounds,
                run.run_dir,
                stock_path,
                sizes.stall_s,
                loads=loads,
                rs011=rs011,
            )
            for load, got in by_load.items():
                res["loads"][load][s.key] = got["systems"]
                scaling = got["reference_scaling_1_to_2"]
                res["loads_reference_scaling_1_to_2"][load][s.key] = scaling
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.keep:
            for p in run.run_dir.glob("*"):
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
    meta["peer_pillow"] = _peer_pillow(res, stock_path is not None)
    apis = {
        r.get("api")
        for st in res["sets"].values()
        for r in st["configs"].values()
        if r["kind"] != "rs011"
    }
    meta["ferroload_api"] = ", ".join(sorted(a for a in apis if a)) or None
    res["goals"] = _goals(res)
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
