"""Video clips into batches: 8 frames per clip, sampled uniformly and resized to 224x224, by ferroload against WebDataset + PyAV and HF `datasets` (`Video`), each in `DataLoader(num_workers=2)`.

The data: 500 deterministic H.264 clips (libx264 `veryfast`, yuv420p, MP4), 640x360,
25 or 30 fps, 5-10 s long, a keyframe every 2-5 s (x264 adds one at scene cuts), 3
B-frames; coloured squares move over a scrolling texture, so frames differ and the
encoder does real work. Encoding is the slow part (~1.5 s of CPU per clip), so 100
distinct clips are encoded and clip `i` holds the bytes of clip `i % 100` (decoding the
same bytes again costs what other bytes would; every copy is decoded and checked). Every frame carries its index as 10 black/white blocks
(`_video_data.py`). The same encoded bytes go into a ferroload dataset (`Writer`), 8
WebDataset tar shards and an HF `datasets` dataset saved to disk (`Video()` feature).
Data lives under `/tmp/bench-video/`, in a folder keyed by the parameters, reused by the
next run.

The task, the same for every system: for each clip the 8 frames at the centres of 8
equal segments (frame `(2i + 1) * total // 16`), resized to 224x224 by scaling the shorter
side to 224 and cropping the centre (bilinear; each system with its own resizer, so pixel
values differ slightly, the frames do not), uint8 `(8, 8, 224, 224, 3)` batches of 8 clips
with an int label, dataset order (no shuffling). Every epoch reads the frame index back
from every clip and compares it with the expected frames (about 1 ms per clip, the same
work for every system).

* ferroload: `make_loader(video={"video": {"num_frames": 8, "size": 224, "resize":
  "shorter"}}, meta=["label"], out="torch")`, in-process, its default threads
  (`--codec-threads N` adds `"codec_threads": N`: frame threads in the codec as well, more
  CPU per clip but a larger share of a machine other processes keep busy).
* ferroload_w2: the same options in `FerroIterableDataset`, in `DataLoader(batch_size=None,
  num_workers=2)` (worker mode: batches through shared memory, one decode thread per
  worker on 2 cores). PyAV holds the GIL between packets (demuxing, a call per packet
  and frame), so two decode threads in one process use ~1.6 of 2 cores where two
  processes use ~1.85: video is where worker mode pays.
* WebDataset: `WebDataset(shards).to_tuple("mp4", "cls").map(decode)` in
  `DataLoader(batch_size=8, num_workers=2)`; `decode` is the PyAV code a user writes:
  open the bytes, `thread_type="AUTO"`, `stream.frames` for the count, decode frames in
  order and keep the wanted ones (stopping after the last), each resized by swscale
  (`frame.reformat(398, 224, "rgb24")`) and centre-cropped. Decoding sequentially is
  faster here than seeking to each wanted timestamp (`--peer-decode seek` runs that: 91
  against 183 ms of CPU per clip measured on 12 clips in one process; with a keyframe
  every 2-5 s a seek saves little and flushes the frame-threaded decoder every time).
* HF `datasets`: `Video()` decodes with torchcodec (datasets 5.x). torchcodec is not in
  the workspace and needs FFmpeg's shared libraries, which the machine lacks: the script
  installs torchcodec from PyPI into the data folder (`uv pip install --target`, the
  workspace's venv untouched) and points it at PyAV's bundled FFmpeg 8 libraries
  (symlinks under their plain names, `LD_LIBRARY_PATH`). The transform (`set_transform`)
  then does what HF's video docs show: `decoder.get_frames_at(indices)` with
  `decoder.metadata.num_frames`, and resizes with `torch.nn.functional.interpolate`
  (bilinear, antialias) + centre crop. Where torchcodec cannot be set up (offline), HF's
  documented way without it is used instead: `Video(decode=False)` and the same PyAV
  decoding as WebDataset in `set_transform` (the result says which).

Each epoch runs in a fresh process, the systems taking turns (A B C, C B A, ...); an epoch
is timed from after the imports (torch, the library) to its last batch, start-up
(`make_loader`, DataLoader workers) included. Figures are clips/s from the median epochs,
and CPU time per clip (the process and its DataLoader workers): on a shared machine a
system with more threads takes a larger share of the cores, CPU time per clip does not
depend on that. Goal: ferroload (its faster configuration) >= 1.5x the best peer in
clips/s.

    uv run python benchmarks/bench_video.py            # 500 clips, 3 rounds
    uv run python benchmarks/bench_video.py --quick    # smoke run (40 clips, 1 round)

Timings are never asserted on: goals are reported as PASS / FAIL.
"""

from __future__ import annotations

import time

_T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _harness import (  # noqa: E402
    finish_run,
    fresh_process_rounds,
    log,
    run_meta,
    run_parser,
    start_run,
)
from _meta import loadavg, pkg_version, usage, usage_since  # noqa: E402

from ferroload_core import available_cpus, exit_process  # noqa: E402

SEED = 20261219
BATCH = 8
FRAMES = 8
OUT = 224
SHARDS = 8
WORKERS = 2
GOAL = 1.5  # ferroload over the best peer, at least
FULL_N, FULL_ROUNDS = 500, 3
QUICK_N, QUICK_ROUNDS = 40, 1
DATA_ROOT = Path("/tmp/bench-video")
SYSTEMS = ("ferroload", "ferroload_w2", "webdataset", "hf")
FERROLOAD = ("ferroload", "ferroload_w2")
PEERS = ("webdataset", "hf")

# --------------------------------------------------------------------------- peers' code


def _resize_crop(frame: Any) -> Any:
    """A PyAV frame -> (OUT, OUT, 3) uint8: shorter side to OUT by swscale, centre crop."""
    w, h = frame.width, frame.height
    if w >= h:
        rw, rh = round(w * OUT / h), OUT
    else:
        rw, rh = OUT, round(h * OUT / w)
    arr = frame.reformat(width=rw, height=rh, format="rgb24").to_ndarray()
    y, x = (rh - OUT) // 2, (rw - OUT) // 2
    return arr[y : y + OUT, x : x + OUT]


def pyav_frames(data: bytes, method: str = "seq") -> np.ndarray:
    """The user's PyAV code: the uniform frames of one clip, (FRAMES, OUT, OUT, 3) uint8."""
    import io

    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        total = stream.frames
        want = [(2 * i + 1) * total // (2 * FRAMES) for i in range(FRAMES)]
        got: dict[int, np.ndarray] = {}
        if method == "seq":
            for i, frame in enumerate(container.decode(stream)):
                if i in want:
                    got[i] = _resize_crop(frame)
                if i >= want[-1]:
                    break
        else:  # seek to each wanted frame's timestamp, decode up to it
            rate, tb = stream.average_rate, stream.time_base
            start = stream.start_time or 0
            for j in dict.fromkeys(want):
                target = start + round(j / rate / tb)
                container.seek(target, stream=stream, backward=True)
                for frame in container.decode(stream):
                    if frame.pts is not None and frame.pts >= target:
                        got[j] = _resize_crop(frame)
                        break
        return np.stack([got[j] for j in want])


def _wds_decode(sample: tuple[str, bytes, int]) -> tuple[str, Any, int]:
    import torch

    key, data, label = sample
    method = os.environ.get("BENCH_VIDEO_PEER", "seq")
    return key, torch.from_numpy(pyav_frames(data, method)), label


def _hf_torchcodec(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """HF's `set_transform`: torchcodec `VideoDecoder`s in, uint8 THWC tensors out."""
    from torch.nn.functional import interpolate

    videos = []
    for dec in batch["video"]:
        total = dec.metadata.num_frames
        want = [(2 * i + 1) * total // (2 * FRAMES) for i in range(FRAMES)]
        x = dec.get_frames_at(want).data  # (T, C, H, W) uint8
        h, w = x.shape[-2:]
        rh, rw = (OUT, round(w * OUT / h)) if w >= h else (round(h * OUT / w), OUT)
        x = interpolate(x, size=(rh, rw), mode="bilinear", antialias=True)
        y0, x0 = (rh - OUT) // 2, (rw - OUT) // 2
        videos.append(x[:, :, y0 : y0 + OUT, x0 : x0 + OUT].permute(0, 2, 3, 1).contiguous())
    return {"video": videos, "label": batch["label"]}


def _hf_pyav(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """HF's `set_transform` with `Video(decode=False)`: the bytes, decoded with PyAV."""
    import torch

    method = os.environ.get("BENCH_VIDEO_PEER", "seq")
    videos = [torch.from_numpy(pyav_frames(v["bytes"], method)) for v in batch["video"]]
    return {"video": videos, "label": batch["label"]}


# --------------------------------------------------------------------------- children


def _loader(system: str, folder: Path, hf_mode: str) -> Any:
    from torch.utils.data import DataLoader

    if system in FERROLOAD:
        from ferroload_loader import make_loader
        from ferroload_loader.torch import FerroIterableDataset

        options: dict[str, Any] = {
            "batch_size": BATCH,
            "video": {
                "video": {
                    "num_frames": FRAMES,
                    "size": OUT,
                    "resize": "shorter",
                    "codec_threads": int(os.environ.get("BENCH_VIDEO_CODEC_THREADS", "1")),
                }
            },
            "meta": ["label"],
            "shuffle": False,
            "seed": 0,
        }
        uri = str(folder / "ferroload")
        if system == "ferroload":
            return make_loader(uri, out="torch", **options)
        ds = FerroIterableDataset(uri, **options)
        return DataLoader(ds, batch_size=None, num_workers=WORKERS, persistent_workers=False)

    if system == "webdataset":
        import webdataset as wds

        shards = sorted(str(p) for p in (folder / "wds").glob("*.tar"))
        ds = wds.WebDataset(shards, shardshuffle=False).to_tuple("__key__", "mp4", "cls")
        ds = ds.map(_wds_decode)
        return DataLoader(ds, batch_size=BATCH, num_workers=WORKERS)
    import datasets

    hf = datasets.load_from_disk(str(folder / "hf"))
    if hf_mode == "torchcodec":
        hf.set_transform(_hf_torchcodec)
    else:
        hf = hf.cast_column("video", datasets.Video(decode=False))
        hf.set_transform(_hf_pyav)
    return DataLoader(hf, batch_size=BATCH, num_workers=WORKERS, shuffle=False)


def _batch_parts(system: str, b: Any) -> tuple[list[str] | None, Any, Any]:
    """Keys (None: dataset order), videos and labels of a batch."""
    if system in FERROLOAD:
        return list(b["sample_id"]), b["video"], b["label"]
    if system == "webdataset":
        return list(b[0]), b[1], b[2]
    return None, b["video"], b["label"]


def _child(system: str, folder: Path, check: bool, hf_mode: str) -> None:
    import torch  # noqa: F401  (imported by any training script)

    if system in FERROLOAD:
        import ferroload_loader  # noqa: F401
    elif system == "webdataset":
        import av  # noqa: F401
        import webdataset  # noqa: F401
    else:
        import datasets  # noqa: F401
    t_epoch, used = time.perf_counter(), usage(children=True)  # with DataLoader workers
    dl = _loader(system, folder, hf_mode)
    n, first = 0, None
    seen: list[list[int]] = []
    labels: list[int] = []
    order: list[str | int] = []  # each clip's key, or its position in the dataset
    shapes: set[tuple[tuple[int, ...], str]] = set()
    for b in dl:
        keys, video, label = _batch_parts(system, b)
        if first is None:
            first = time.perf_counter() - t_epoch
        n += int(video.shape[0])
        if check:
            shapes.add((tuple(video.shape[1:]), str(video.dtype)))
            seen.extend(frame_numbers(clip) for clip in video.numpy())
            labels.extend(int(v) for v in label)
            order.extend(keys if keys is not None else range(len(order), len(order) + len(label)))
    t_end = time.perf_counter()
    if hasattr(dl, "close"):
        dl.close()
    del dl  # DataLoader workers end with their iterator; reap them for RUSAGE_CHILDREN
    import multiprocessing

    multiprocessing.active_children()
    out: dict[str, Any] = {
        "cpu_s": usage_since(used, children=True)["cpu_s"],
        "n": n,
        "epoch_s": t_end - t_epoch,
        "first_batch_s": first,
        "process_s": t_end - _T_START,
        "import_s": t_epoch - _T_START,
    }
    if check:
        out.update(frames=seen, labels=labels, order=order, shapes=sorted(map(list, shapes)))
    print("RESULT " + json.dumps(out), flush=True)


def frame_numbers(clip: Any) -> list[int]:
    from _video_data import frame_numbers as read

    return read(clip)


def _run_child(
    system: str, folder: Path, env: dict[str, str], *, check: bool = False, hf_mode: str
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", system, "--data", str(folder), "--hf", hf_mode]
    if check:
        cmd.append("--check")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    for line in reversed(res.stdout.splitlines()):
        if line.startswith("RESULT "):
            got: dict[str, Any] = json.loads(line[len("RESULT ") :])
            got["loadavg"] = loadavg()
            return got
    raise RuntimeError(f"{system} child failed ({res.returncode}): {res.stderr[-3000:]}")


# --------------------------------------------------------------------------- torchcodec


def torchcodec_env(root: Path) -> tuple[dict[str, str] | None, str]:
    """An environment in which HF's `Video()` decodes with torchcodec, or (None, why not).

    torchcodec from PyPI goes into `root/torchcodec` (`uv pip install --target`, cached);
    it loads FFmpeg's libraries by their plain names (`libavcodec.so.62`, ...), which are
    symlinked to the copies bundled with PyAV's wheel."""
    import av

    target = root / "torchcodec-lib"
    libs = target / "ffmpeg-libs"
    env = {
        **os.environ,
        "PYTHONPATH": str(target),
        "LD_LIBRARY_PATH": os.pathsep.join(
            [str(libs), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
        ),
    }
    probe = (
        "import io, av, numpy as np, torch\n"
        "buf = io.BytesIO()\n"
        "with av.open(buf, 'w', format='mp4') as c:\n"
        "    s = c.add_stream('libx264', rate=25); s.width, s.height = 64, 48\n"
        "    s.pix_fmt = 'yuv420p'\n"
        "    for k in range(30):\n"
        "        f = av.VideoFrame.from_ndarray(np.full((48, 64, 3), k, np.uint8), 'rgb24')\n"
        "        c.mux(s.encode(f))\n"
        "    c.mux(s.encode())\n"
        "from torchcodec.decoders import VideoDecoder\n"
        "assert VideoDecoder(buf.getvalue()).get_frames_at([3, 20]).data.shape[0] == 2\n"
    )

    def works() -> bool:
        r = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, timeout=120, check=False
        )
        return r.returncode == 0

    if (target / "torchcodec").is_dir() and works():
        return env, "torchcodec " + _tc_version(target)
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        return None, "uv not found to install torchcodec"
    shutil.rmtree(target, ignore_errors=True)
    install = ["pip", "install", "-q", "--no-config", "--no-deps", "--python", sys.executable]
    r = subprocess.run(
        [uv, *install, "--target", str(target), "torchcodec"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "UV_HTTP_TIMEOUT": "15"},
    )
    if r.returncode != 0:
        return None, f"torchcodec install failed: {r.stderr.strip()[-300:]}"
    libs.mkdir(parents=True, exist_ok=True)
    bundled = Path(av.__file__).parent.parent / "av.libs"
    ffmpeg = ("avutil", "avcodec", "avformat", "avdevice", "avfilter", "swscale", "swresample")
    for lib in bundled.glob("lib*.so*"):
        # every bundled library under its own name: the FFmpeg libraries' RUNPATH
        # ($ORIGIN) is the symlinks' folder, where their hashed dependencies must be
        (libs / lib.name).symlink_to(lib)
        stem, _, rest = lib.name.partition(".so.")
        base = stem.rsplit("-", 1)[0]  # libavcodec-5e6b81c2 -> libavcodec
        if base[3:] in ffmpeg:
            (libs / f"{base}.so.{rest.split('.')[0]}").symlink_to(lib)
    if not works():
        return None, "torchcodec does not load PyAV's FFmpeg libraries"
    return env, "torchcodec " + _tc_version(target)


def _tc_version(target: Path) -> str:
    found = sorted(target.glob("torchcodec-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-")[1] if found else "?"


# --------------------------------------------------------------------------- driver


def _check(system: str, got: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """Compare a check epoch with the expected frames, shapes and labels."""
    from _video_data import uniform_indices

    pos = {k: i for i, k in enumerate(manifest["keys"])}
    at = [pos[k] if isinstance(k, str) else k for k in got["order"]]
    expected = [uniform_indices(manifest["frames"][i], FRAMES) for i in at]
    wrong = [i for i, (a, b) in enumerate(zip(got["frames"], expected, strict=True)) if a != b]
    ok_shapes = got["shapes"] == [[[FRAMES, OUT, OUT, 3], "torch.uint8"]]
    ok_labels = got["labels"] == [manifest["labels"][i] for i in at]
    ok = not wrong and ok_shapes and ok_labels and sorted(at) == list(range(len(pos)))
    if not ok:
        log(
            f"  ! {system}: check failed: {len(wrong)} clips with other frames "
            f"(first: {[(got['frames'][i], expected[i]) for i in wrong[:2]]}), "
            f"shapes {got['shapes']}, labels ok {ok_labels}"
        )
    return {
        "ok": ok,
        "clips_with_wrong_frames": len(wrong),
        "shapes": got["shapes"],
        "labels_ok": ok_labels,
    }


def render(res: dict[str, Any]) -> str:
    lines = ["system        clips/s (median)  best  frames/s   first batch s  cpu ms/clip  check"]
    for name, s in res["systems"].items():
        lines.append(
            f"{name:12s} {s['clips_per_s']:10.1f} {s['best_clips_per_s']:9.1f}"
            f" {s['clips_per_s'] * FRAMES:9.0f} {s['median_first_batch_s']:10.2f}"
            f" {s['median_cpu_ms_per_clip']:12.1f}      {'ok' if s['check']['ok'] else 'FAILED'}"
        )
    lines.append("GOALS")
    lines.extend(
        f"  {'PASS' if g['pass'] else 'FAIL'}  {g['goal']}: {g['value']:.3f}" for g in res["goals"]
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = run_parser(__doc__, "bench_video", quick="smoke run (40 clips, 1 round)")
    p.add_argument("--child", choices=SYSTEMS, help="(internal) one epoch in this process")
    p.add_argument("--data", type=Path, help="(internal) the clips' folder")
    p.add_argument("--check", action="store_true", help="(internal) read the frames back")
    p.add_argument("--hf", default="torchcodec", help="(internal) HF decoding")
    p.add_argument("--rounds", type=int, default=None, help="epochs of each system")
    p.add_argument("--clips", type=int, default=None, help="clips (default 500, quick 40)")
    p.add_argument(
        "--peer-decode",
        choices=("seq", "seek"),
        default="seq",
        help="how the PyAV peers reach the frames: decode in order (default) or seek",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=DATA_ROOT,
        help=f"where the generated clips are kept between runs (default {DATA_ROOT})",
    )
    p.add_argument(
        "--torchcodec",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="HF decodes with torchcodec, installed beside the workspace (default); "
        "--no-torchcodec: with PyAV in set_transform, nothing installed",
    )
    p.add_argument(
        "--codec-threads",
        type=int,
        default=1,
        help="ferroload's decode_video codec_threads (default 1, the library's default)",
    )
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.data, args.check, args.hf)
        exit_process(0)
    from _video_data import build

    run = start_run(args, "bench_video", "video-run-{mode}")
    n = args.clips or (QUICK_N if args.quick else FULL_N)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    log(f"clips: building or reusing {n} clips under {args.data_dir} ...")
    t0 = time.perf_counter()
    manifest = build(args.data_dir, n, SEED, SHARDS)
    folder = Path(manifest["folder"])
    log(f"  {folder} ({manifest['bytes'] / 1e6:.0f} MB, {time.perf_counter() - t0:.0f} s)")
    base_env = {
        **os.environ,
        "BENCH_VIDEO_PEER": args.peer_decode,
        "BENCH_VIDEO_CODEC_THREADS": str(args.codec_threads),
    }
    base_env.pop("PYTHONPATH", None)
    tc_env, hf_how = torchcodec_env(args.data_dir) if args.torchcodec else (None, "--no-torchcodec")
    hf_mode = "torchcodec" if tc_env is not None else "pyav"
    log(f"HF decodes with {hf_mode} ({hf_how})")
    envs = dict.fromkeys(SYSTEMS, base_env)
    if tc_env is not None:
        envs["hf"] = {**tc_env, "BENCH_VIDEO_PEER": args.peer_decode}
    meta = {
        **run_meta(run, available_cpus()),
        "clips": n,
        "rounds": rounds,
        "batch": BATCH,
        "frames_per_clip": FRAMES,
        "out": OUT,
        "dataloader_workers": WORKERS,
        "peer_decode": args.peer_decode,
        "ferroload_codec_threads": args.codec_threads,
        "hf_decoding": hf_mode if tc_env is not None else f"pyav ({hf_how})",
        "data_bytes": manifest["bytes"],
        "clip_frames_total": sum(manifest["frames"]),
        "versions": {
            k: pkg_version(k) for k in ("av", "webdataset", "datasets", "torch", "ferroload")
        }
        | {"torchcodec": hf_how},
    }
    res: dict[str, Any] = {"meta": meta, "systems": {}}
    checks: dict[str, dict[str, Any]] = {}

    def one(system: str, r: int) -> dict[str, Any]:
        got = _run_child(system, folder, envs[system], check=True, hf_mode=hf_mode)
        if got["n"] == n:  # checked here; a wrong count is fresh_process_rounds' error
            check = _check(system, got, manifest)
            if system not in checks or not check["ok"]:
                checks[system] = check
        for k in ("frames", "labels", "order", "shapes"):
            got.pop(k, None)
        return got

    runs = fresh_process_rounds(SYSTEMS, rounds, one, n, unit="clips")
    for system, rs in runs.items():
        ep = [x["epoch_s"] for x in rs]
        res["systems"][system] = {
            "runs": rs,
            "median_epoch_s": float(np.median(ep)),
            "clips_per_s": n / float(np.median(ep)),
            "best_clips_per_s": n / min(ep),
            "median_first_batch_s": float(np.median([x["first_batch_s"] for x in rs])),
            "median_cpu_ms_per_clip": 1000 * float(np.median([x["cpu_s"] for x in rs])) / n,
            "check": checks[system],
        }
    systems = res["systems"]
    peer = max(PEERS, key=lambda s: systems[s]["clips_per_s"])
    ours = max(FERROLOAD, key=lambda s: systems[s]["clips_per_s"])
    ratio = systems[ours]["clips_per_s"] / systems[peer]["clips_per_s"]
    res["best_peer"] = peer
    res["best_ferroload"] = ours
    res["ferroload_over_best_peer"] = ratio
    res["over_best_peer"] = {
        s: systems[s]["clips_per_s"] / systems[peer]["clips_per_s"] for s in FERROLOAD
    }
    # load-independent: CPU time per clip (a system with more threads takes a larger
    # share of a loaded machine; this figure does not depend on that)
    cpu_peer = min(systems[s]["median_cpu_ms_per_clip"] for s in PEERS)
    res["cpu_per_clip_best_peer_over_ferroload"] = (
        cpu_peer / systems[ours]["median_cpu_ms_per_clip"]
    )
    all_ok = all(c["ok"] for c in checks.values())
    res["goals"] = [
        {
            "goal": f"video (500 H.264 360p clips, 8 frames to 224x224): ferroload ({ours}) "
            f">= {GOAL}x the best peer ({peer}, DataLoader num_workers={WORKERS}), clips/s, "
            "medians of fresh-process epochs",
            "value": ratio,
            "pass": ratio >= GOAL and all_ok,
        },
        {
            "goal": "video: every system delivers the expected frames, shapes and labels",
            "value": float(sum(c["ok"] for c in checks.values())),
            "pass": all_ok,
        },
    ]
    finish_run(res, run, render)
    return res


if __name__ == "__main__":
    main()
    exit_process(0)  # without the interpreter's teardown (see README)
