"""The video benchmark's clips: deterministic H.264 640x360 clips written once with PyAV (moving shapes over a scrolling texture, the frame index drawn as a bit pattern), stored as ferroload, WebDataset and HF `datasets` sets of the same bytes.

Every frame carries its own index as 10 black/white blocks in a row near the top centre
(inside the centre crop that every system keeps), so `frame_numbers` reads back which
frames a decoded `(T, 224, 224, 3)` clip holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

WIDTH, HEIGHT = 640, 360
BITS = 10  # frame index bits drawn into every frame (clips have at most 300 frames)
BLOCK_X0, BLOCK_W, BLOCK_Y0, BLOCK_H = 160, 32, 8, 48  # source pixels
OUT = 224  # output side: shorter side to 224, centre crop (every system)
PRESET = "veryfast"  # libx264 preset of the generated clips (CABAC, 3 B-frames, deblocking)
VERSION = 1  # bump when the clips change
UNIQUE = 100  # distinct encoded clips: clip i holds the bytes of clip i % UNIQUE


def clip_params(i: int, seed: int) -> dict[str, int]:
    """Clip `i`'s frame rate (25 or 30), length (5-10 s) and keyframe interval (2-5 s)."""
    rng = np.random.default_rng([seed, i])
    fps = int(rng.choice([25, 30]))
    frames = int(rng.integers(5 * fps, 10 * fps + 1))
    gop = int(rng.integers(2, 6)) * fps
    return {"fps": fps, "frames": frames, "gop": gop}


def _texture(rng: np.random.Generator) -> np.ndarray:
    """A (HEIGHT, 2 * WIDTH, 3) uint8 texture: colour gradients plus low-frequency waves."""
    ys = np.linspace(0, 1, HEIGHT, dtype=np.float32)[:, None]
    xs = np.linspace(0, 2, 2 * WIDTH, dtype=np.float32)[None, :]
    out = np.empty((HEIGHT, 2 * WIDTH, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(2, 9), rng.uniform(1, 6), rng.uniform(0, 2 * math.pi)
        out[..., c] = 110 + 60 * np.sin(fx * math.pi * xs + ph) * np.cos(fy * math.pi * ys)
        out[..., c] += 50 * (xs / 2 - ys) * rng.uniform(-1, 1)
    out += rng.normal(0, 6, out.shape).astype(np.float32)  # some fine texture
    return np.clip(out, 0, 255).astype(np.uint8)


def _draw_index(frame: np.ndarray, k: int) -> None:
    frame[: BLOCK_Y0 + BLOCK_H + 8, BLOCK_X0 - 8 : BLOCK_X0 + BITS * BLOCK_W + 8] = 128
    for b in range(BITS):
        x = BLOCK_X0 + b * BLOCK_W
        frame[BLOCK_Y0 : BLOCK_Y0 + BLOCK_H, x : x + BLOCK_W] = 255 if (k >> b) & 1 else 0


def encode_clip(i: int, seed: int) -> bytes:
    """Clip `i` as H.264 (libx264, yuv420p) in MP4: the same bytes on every run."""
    import av

    p = clip_params(i, seed)
    rng = np.random.default_rng([seed, i, 1])
    tex = _texture(rng)
    shapes = [
        (
            int(rng.integers(30, 90)),  # size
            rng.integers(60, 256, 3).astype(np.uint8),  # colour
            float(rng.uniform(0, WIDTH)),
            float(rng.uniform(80, HEIGHT - 100)),  # start x, y
            float(rng.uniform(-6, 6)),
            float(rng.uniform(-3, 3)),  # speed
        )
        for _ in range(4)
    ]
    scroll = float(rng.uniform(1, 4))
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=p["fps"])
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"g": str(p["gop"]), "preset": PRESET, "threads": "1"}
        for k in range(p["frames"]):
            x0 = int(scroll * k) % WIDTH
            frame = tex[:, x0 : x0 + WIDTH].copy()
            for size, colour, sx, sy, vx, vy in shapes:
                x = int(sx + vx * k) % (WIDTH - size)
                y = 72 + int(sy - 72 + vy * k) % (HEIGHT - 72 - size)
                frame[y : y + size, x : x + size] = colour
            _draw_index(frame, k)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def frame_numbers(clip: np.ndarray) -> list[int]:
    """The frame indices a decoded `(T, OUT, OUT, 3)` clip holds, read from the blocks.

    Shorter side to OUT and a centre crop map source x to `(x - (WIDTH - HEIGHT) / 2) *
    OUT / HEIGHT`, y to `y * OUT / HEIGHT`."""
    s = OUT / HEIGHT
    y = round((BLOCK_Y0 + BLOCK_H / 2) * s)
    got = []
    for frame in np.asarray(clip):
        k = 0
        for b in range(BITS):
            x = round((BLOCK_X0 + (b + 0.5) * BLOCK_W - (WIDTH - HEIGHT) / 2) * s)
            if frame[y - 2 : y + 3, x - 2 : x + 3].mean() > 128:
                k |= 1 << b
        got.append(k)
    return got


def uniform_indices(total: int, num_frames: int) -> list[int]:
    """The centre frame of each of `num_frames` equal segments (ferroload's `uniform`)."""
    return [(2 * i + 1) * total // (2 * num_frames) for i in range(num_frames)]


def _encoded(root: Path, i: int, seed: int) -> bytes:
    """Clip `i`'s bytes, from the clip cache under `root` or encoded (and cached)."""
    path = root / f"clip-cache-v{VERSION}-{PRESET}-{seed}" / f"{i:05d}.mp4"
    if path.exists():
        return path.read_bytes()
    data = encode_clip(i, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return data


def encode_all(root: Path, n: int, seed: int, processes: int = 2) -> list[bytes]:
    """The distinct clips `0 .. min(n, UNIQUE) - 1`, encoded in `processes` processes."""
    from concurrent.futures import ProcessPoolExecutor

    m = min(n, UNIQUE)
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(_encoded, [root] * m, range(m), [seed] * m))


def build(root: Path, n: int, seed: int, shards: int) -> dict[str, Any]:
    """Write (or reuse) the `n` clips as ferroload, WebDataset and HF sets under `root`,
    a folder keyed by the parameters; returns the manifest (keys, labels, frame counts).

    Clip `i` holds the bytes of distinct clip `i % UNIQUE` (encoding is the slow part, ~1.5 s
    of CPU per clip; decoding the same bytes again costs as much as other bytes would)."""
    params_key = [VERSION, n, seed, shards, PRESET, UNIQUE]
    key = hashlib.sha256(json.dumps(params_key).encode()).hexdigest()[:12]
    folder = root / f"clips-{n}-{key}"
    manifest_path = folder / "manifest.json"
    if manifest_path.exists():
        manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        return manifest
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    keys = [f"clip-{i:05d}" for i in range(n)]
    labels = [i % 10 for i in range(n)]
    params = [clip_params(i % UNIQUE, seed) for i in range(n)]
    distinct = encode_all(root, n, seed)
    payloads = [distinct[i % UNIQUE] for i in range(n)]

    import ferroload

    with ferroload.Writer(folder / "ferroload", "clips") as w:
        w.declare("video", "mp4", kind="tensor", codec_hint="video")
        for k, payload, label in zip(keys, payloads, labels, strict=True):
            w.add(k, {"video": payload}, {"label": label})

    import webdataset as wds

    (folder / "wds").mkdir()
    per = math.ceil(n / shards)
    pattern = str(folder / "wds" / "clips-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=per, maxsize=1 << 40, verbose=0, mtime=0) as sink:
        for k, payload, label in zip(keys, payloads, labels, strict=True):
            sink.write({"__key__": k, "mp4": payload, "cls": label})

    import datasets

    datasets.disable_progress_bars()
    features = datasets.Features({"video": datasets.Video(), "label": datasets.Value("int64")})
    hfds = datasets.Dataset.from_dict(
        {"video": [{"bytes": b, "path": None} for b in payloads], "label": labels},
        features=features,
    )
    hfds.save_to_disk(str(folder / "hf"))

    manifest = {
        "folder": str(folder),
        "keys": keys,
        "labels": labels,
        "frames": [p["frames"] for p in params],
        "fps": [p["fps"] for p in params],
        "gop": [p["gop"] for p in params],
        "bytes": sum(len(b) for b in payloads),
    }
    manifest_path.write_text(json.dumps(manifest))
    return manifest
