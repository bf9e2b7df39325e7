"""Audio clips into training batches: 1 s random crops resampled to 16 kHz, ferroload's `make_loader` against WebDataset and HF `datasets` in `DataLoader(num_workers=2)`.

The set: 10,000 generated clips of 5-30 s (tones, chirps and noise, the kind is the int
label), mono and stereo, half at 16 kHz and half at 44.1 kHz, half FLAC and half PCM16
WAV (`_audio_data.py`). The same encoded bytes are written once as ferroload (a WAV and a
FLAC dataset, read as one source with `ferroload.mix`, as `examples/audio_loader.py`
does), WebDataset tar shards, and an HF dataset saved with `save_to_disk`, and kept under
the workdir (default /tmp/bench-audio) for the next run, keyed by the generator's
parameters. Every system delivers batches of 64: a `(64, 1, 16000)` float32 tensor (stereo
mixed down to mono by averaging) and an int64 label tensor.

- ferroload: `make_loader(mix, audio={"audio": {"length": 16000, "sample_rate": 16000,
  "mono": True, "crop": "random"}}, meta=["label", "clip"])`, its decode threads (every
  CPU). The codec reads only the crop's frames (WAV and FLAC seek), resamples them with
  soxr (HQ).
- WebDataset: `WebDataset(shards).shuffle(100).to_tuple("wav;flac", "cls", "__key__")`,
  the crop in `.map`, `.batched(64)`, `WebLoader(num_workers=2)`.
- HF `datasets` 5.x decodes its `Audio` feature with torchcodec, which needs FFmpeg's
  shared libraries: they are not on this machine (`torchcodec` 0.17 from PyPI, tried in a
  side folder, fails to load `libtorchcodec_core*.so`), and HF's `Audio` cannot even encode
  without it. So the column is `Audio(decode=False)` (written with `ArrowWriter` and
  `cast_column`), and the clips are decoded in `set_transform` with soundfile, HF's
  documented way to decode yourself; `DataLoader(shuffle=True, num_workers=2)`.

The peers decode each clip whole with `soundfile.read` (as their docs do), mix it down,
draw a uniform offset, and resample only the input window around the crop with the same
soxr preset and the same window rule as ferroload (a stronger peer than resampling the
whole clip, and the same output). The warm-up epoch of every system is checked: shapes,
dtype, every label against its clip, and the first 8 crops located in the reference
decode of their clip (the whole clip resampled) with their largest difference.

Each timed epoch runs in a fresh process (torch and the system's package imported first,
reported as `import_s`; the epoch includes building the loader and starting its workers);
the systems take turns in rotated order, `rounds` epochs each; the figures are medians.

    uv run python benchmarks/bench_audio.py                 # 10,000 clips, 3 rounds
    uv run python benchmarks/bench_audio.py --clips 2000    # fewer clips (disk space)
    uv run python benchmarks/bench_audio.py --quick         # smoke run (300 clips, 1 round)

The three copies of 10,000 clips take ~32 GB (about 1.1 MB a clip, each system its own
copy): check `df -h /tmp` first. `results/bench_audio.json` is a full run (10,000 clips) on
the shared 2-core, 24 GB development machine: the clips and the three copies (42 GB) do not
fit its page cache, so each system's epoch reads much of its copy from disk (other jobs
ran beside it: see its load averages).

Timings are never asserted on: the goal is reported as PASS / FAIL.
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _audio_data import LENGTH, OUT_RATE, clip, clip_info, locate, reference  # noqa: E402
from _harness import (  # noqa: E402
    finish_run,
    fresh_process_rounds,
    log,
    run_meta,
    run_parser,
    start_run,
)
from _meta import loadavg  # noqa: E402

from ferroload_core import available_cpus, exit_process  # noqa: E402

SEED = 20261219
BATCH = 64
WORKERS = 2
GOAL = 2.0  # ferroload samples/s over the best peer's, at least
SYSTEMS = ("ferroload", "wds", "hf")
FULL_N, FULL_ROUNDS = 10_000, 3
QUICK_N, QUICK_ROUNDS = 300, 1
CHECK_ITEMS = 8
TOLERANCE = 2e-3  # a crop against the whole clip resampled: edge effects of the window
DEFAULT_DATA = Path("/tmp/bench-audio")


# --------------------------------------------------------------------------- children


def _wds_sample(sample: tuple[bytes, bytes, str]) -> tuple[Any, int, int]:
    import torch
    from _audio_data import peer_crop

    data, cls, key = sample
    clip_id = int(key.rsplit("-", 1)[1])
    rng = np.random.default_rng([clip_id, _EPOCH[0]])
    return torch.from_numpy(peer_crop(data, rng)), int(cls), clip_id


_EPOCH = [0]


def _loader_ferroload(folder: Path, epoch: int) -> Any:
    import ferroload

    source = ferroload.mix(
        [str(folder / "ferroload-wav"), str(folder / "ferroload-flac")], weights=[0.5, 0.5]
    )
    audio = {"length": LENGTH, "sample_rate": OUT_RATE, "mono": True, "crop": "random"}
    dl = ferroload.make_loader(
        source, batch_size=BATCH, audio={"audio": audio}, meta=["label", "clip"], seed=0
    )
    dl.set_epoch(epoch)
    return dl, lambda b: (b["audio"], b["label"], b["clip"]), dl.close


def _loader_wds(folder: Path, epoch: int) -> Any:
    import webdataset as wds

    _EPOCH[0] = epoch
    urls = sorted(str(p) for p in (folder / "wds").glob("*.tar"))
    ds = (
        wds.WebDataset(urls, shardshuffle=100, seed=epoch)
        .shuffle(100)
        .to_tuple("wav;flac", "cls", "__key__")
        .map(_wds_sample)
        .batched(BATCH)
    )
    dl = wds.WebLoader(ds, batch_size=None, num_workers=WORKERS)
    return dl, lambda b: (b[0], b[1], b[2]), lambda: None


def _loader_hf(folder: Path, epoch: int) -> Any:
    import datasets
    import torch
    from _audio_data import peer_crop
    from torch.utils.data import DataLoader

    datasets.disable_progress_bars()
    hfds = datasets.load_from_disk(str(folder / "hf"))

    def transform(batch: dict[str, list[Any]]) -> dict[str, Any]:
        crops = [
            torch.from_numpy(peer_crop(a["bytes"], np.random.default_rng([c, epoch])))
            for a, c in zip(batch["audio"], batch["clip"], strict=True)
        ]
        return {"audio": crops, "label": batch["label"], "clip": batch["clip"]}

    hfds.set_transform(transform)
    gen = torch.Generator().manual_seed(epoch)
    dl = DataLoader(hfds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, generator=gen)
    return dl, lambda b: (b["audio"], b["label"], b["clip"]), lambda: None


def _child(kind: str, folder: Path, epoch: int, check: Path | None) -> None:
    import torch

    if kind == "ferroload":
        import ferroload  # noqa: F401
    elif kind == "wds":
        import soundfile
        import soxr
        import webdataset  # noqa: F401
    else:
        import datasets  # noqa: F401
        import soundfile  # noqa: F401
        import soxr  # noqa: F401
    t_epoch = time.perf_counter()
    build = {"ferroload": _loader_ferroload, "wds": _loader_wds, "hf": _loader_hf}[kind]
    dl, unpack, close = build(folder, epoch)
    n = 0
    first: dict[str, Any] | None = None
    labels_bad = 0
    clips: list[int] = []
    for b in dl:
        audio, label, clip_ids = unpack(b)
        n += int(audio.shape[0])
        if check is None:
            continue
        if first is None:
            first = {
                "audio_type": type(audio).__module__ + "." + type(audio).__name__,
                "audio_shape": list(audio.shape),
                "audio_dtype": str(audio.dtype),
                "label_dtype": str(label.dtype),
                "label_shape": list(label.shape),
            }
            np.savez(
                check,
                audio=np.asarray(audio[:CHECK_ITEMS]),
                clip=np.asarray(clip_ids[:CHECK_ITEMS]),
            )
        ids = [int(c) for c in torch.as_tensor(clip_ids).tolist()]
        clips.extend(ids)
        want = [clip_info(c, SEED).label for c in ids]
        labels_bad += int((torch.as_tensor(label) != torch.as_tensor(want)).sum())
    close()
    t_end = time.perf_counter()
    out: dict[str, Any] = {
        "n": n,
        "process_s": t_end - _T_START,
        "epoch_s": t_end - t_epoch,
        "import_s": t_epoch - _T_START,
    }
    if check is not None:
        out.update(first=first, labels_bad=labels_bad, distinct_clips=len(set(clips)))
    print(json.dumps(out))


def _run_child(kind: str, folder: Path, epoch: int, check: Path | None = None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", kind, "--data", str(folder), "--epoch", str(epoch)]
    if check is not None:
        cmd += ["--check", str(check)]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{kind} child failed: {res.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    out["loadavg"] = loadavg()
    return out


# --------------------------------------------------------------------------- checks


def check_system(kind: str, got: dict[str, Any], npz: Path, n: int) -> dict[str, Any]:
    """What the warm-up epoch of `kind` delivered, against what it should."""
    f = got["first"]
    saved = np.load(npz)
    diffs, offsets = [], []
    for crop, c in zip(saved["audio"], saved["clip"], strict=True):
        ref = reference(clip(int(c), SEED)[0])
        off, diff = locate(crop[0].astype(np.float32), ref)
        diffs.append(diff)
        offsets.append(off)
    out = {
        "first": f,
        "labels_bad": got["labels_bad"],
        "distinct_clips": got["distinct_clips"],
        "crop_offsets": offsets,
        "crop_max_diff": max(diffs),
        "shape_ok": f["audio_shape"] == [min(BATCH, n), 1, LENGTH],
        "dtype_ok": f["audio_dtype"] == "torch.float32" and f["label_dtype"] == "torch.int64",
    }
    out["ok"] = bool(
        out["shape_ok"]
        and out["dtype_ok"]
        and got["labels_bad"] == 0
        and out["crop_max_diff"] <= TOLERANCE
        and got["n"] == n
    )
    return out


# --------------------------------------------------------------------------- the run


def bench(n: int, rounds: int, folder: Path, run_dir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"checks": {}, "systems": {}}
    for kind in SYSTEMS:
        npz = run_dir / f"check-{kind}.npz"
        got = _run_child(kind, folder, 0, npz)
        res["checks"][kind] = check_system(kind, got, npz, n)
        c = res["checks"][kind]
        log(
            f"  warm-up {kind}: {got['epoch_s']:.1f} s, ok={c['ok']} (labels bad "
            f"{c['labels_bad']}, crop max diff {c['crop_max_diff']:.2e}, "
            f"{c['distinct_clips']} distinct clips), load {got['loadavg']}"
        )
    runs = fresh_process_rounds(
        SYSTEMS, rounds, lambda k, r: _run_child(k, folder, r + 1), n,
        order=lambda r: SYSTEMS[r % 3 :] + SYSTEMS[: r % 3],
    )  # fmt: skip
    for kind, rs in runs.items():
        ep = [x["epoch_s"] for x in rs]
        res["systems"][kind] = {
            "runs": rs,
            "median_epoch_s": float(np.median(ep)),
            "best_epoch_s": min(ep),
            "samples_per_s": n / float(np.median(ep)),
            "best_samples_per_s": n / min(ep),
            "median_import_s": float(np.median([x["import_s"] for x in rs])),
        }
    s = res["systems"]
    best_peer = max(("wds", "hf"), key=lambda k: s[k]["samples_per_s"])
    res["best_peer"] = best_peer
    res["ratio"] = s["ferroload"]["samples_per_s"] / s[best_peer]["samples_per_s"]
    return res


def render(res: dict[str, Any]) -> str:
    lines = ["system      samples/s (median)  best   epoch s  check"]
    for kind, s in res["systems"].items():
        c = res["checks"][kind]
        lines.append(
            f"{kind:10s} {s['samples_per_s']:12.0f} {s['best_samples_per_s']:12.0f} "
            f"{s['median_epoch_s']:8.2f}  {'ok' if c['ok'] else 'FAILED'} "
            f"(max diff {c['crop_max_diff']:.1e})"
        )
    lines.append(f"ferroload / best peer ({res['best_peer']}): {res['ratio']:.2f}x")
    lines.append("GOALS")
    lines.extend(
        f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']:.3f}" for g in res["goals"]
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = run_parser(__doc__, "bench_audio", quick="smoke run (300 clips, 1 round)")
    p.add_argument("--child", choices=SYSTEMS, help="(internal) one timed epoch")
    p.add_argument("--data", type=Path, default=None, help="(internal) the clips' folder")
    p.add_argument("--epoch", type=int, default=0, help="(internal) the epoch")
    p.add_argument("--check", type=Path, default=None, help="(internal) where to save crops")
    p.add_argument("--clips", type=int, default=None, help="clips (default 10,000; quick 300)")
    p.add_argument("--rounds", type=int, default=None, help="timed epochs of each system")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA,
        help=f"where the generated clips are kept between runs (default {DEFAULT_DATA})",
    )
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.data, args.epoch, args.check)
        exit_process(0)
    from _audio_data import data_facts, write_all

    run = start_run(args, "bench_audio", "audio-run-{mode}")
    n = args.clips or (QUICK_N if args.quick else FULL_N)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    log(f"writing {n} clips (once; reused by later runs) ...")
    t0 = time.perf_counter()
    folder = write_all(n, SEED, args.data_dir, log)
    flags = [a for a in (argv if argv is not None else sys.argv[1:]) if a]
    meta = {
        **run_meta(run, available_cpus()),
        "command": " ".join(["uv run python benchmarks/bench_audio.py", *flags]),
        "clips": n,
        "rounds": rounds,
        "batch": BATCH,
        "workers": WORKERS,
        "seed": SEED,
        "write_s": time.perf_counter() - t0,
        "data": data_facts(folder),
    }
    res: dict[str, Any] = {"meta": meta, **bench(n, rounds, folder, run.run_dir)}
    res["goals"] = [
        {
            "goal": f"audio 1 s crops at 16 kHz: ferroload >= {GOAL}x the best peer's samples/s "
            f"(DataLoader, {WORKERS} workers; fresh processes, medians)",
            "value": res["ratio"],
            "pass": res["ratio"] >= GOAL,
        },
        {
            "goal": "every system's crops, labels, shapes and dtypes check out",
            "value": float(all(c["ok"] for c in res["checks"].values())),
            "pass": all(c["ok"] for c in res["checks"].values()),
        },
    ]
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
