"""`bench_audio.py`'s clips and crops: deterministic tones, chirps and noise as WAV/FLAC, written once as ferroload, WebDataset and HF `datasets`; the peers' crop; the reference check.

Clip `i` is a pure function of `(seed, i)`: its format (WAV when `i` is even, else FLAC),
rate (16 kHz or 44.1 kHz), channels (mono or stereo), length (5-30 s) and kind (tone,
chirp, noise: the label) come from `clip_info`, its samples from a generator seeded by
`(seed, i)`. Heavy imports (ferroload, webdataset, datasets, soxr) stay inside functions.
"""

from __future__ import annotations

import io
import json
import math
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

KINDS = ("tone", "chirp", "noise")  # the label is the index
RATES = (16_000, 44_100)
OUT_RATE = 16_000
LENGTH = 16_000  # 1 s crops at the output rate
QUALITY = "HQ"  # soxr's preset, as ferroload_codec._sndfile.RESAMPLE_QUALITY
DATA_VERSION = 1  # bump when the generator changes: the cache key includes it
WDS_SHARDS = 8


class ClipInfo(NamedTuple):
    fmt: str  # "wav" or "flac"
    rate: int
    channels: int
    frames: int
    label: int


def clip_info(i: int, seed: int) -> ClipInfo:
    """What clip `i` is, without generating it."""
    rng = np.random.default_rng([seed, i, 0])
    rate = RATES[i // 2 % 2]
    seconds = float(rng.uniform(5.0, 30.0))
    return ClipInfo(
        fmt="wav" if i % 2 == 0 else "flac",
        rate=rate,
        channels=1 + i // 4 % 2,
        frames=round(seconds * rate),
        label=(i // 8 + i) % len(KINDS),
    )


def clip(i: int, seed: int) -> tuple[bytes, ClipInfo]:
    """Clip `i` encoded (PCM16 WAV or FLAC), and what it is."""
    import soundfile

    info = clip_info(i, seed)
    rng = np.random.default_rng([seed, i, 1])
    t = np.arange(info.frames, dtype=np.float64) / info.rate
    chans = []
    for _ in range(info.channels):
        kind = KINDS[info.label]
        if kind == "tone":
            f = rng.uniform(100.0, 2000.0, size=3)
            wave = sum(np.sin(2 * np.pi * fk * t + rng.uniform(0, 6.3)) for fk in f) / 6
        elif kind == "chirp":
            f0, f1 = rng.uniform(50.0, 500.0), rng.uniform(1000.0, 7000.0)
            dur = info.frames / info.rate
            wave = 0.4 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * dur) * t * t))
        else:
            wave = np.clip(0.2 * rng.standard_normal(info.frames), -1.0, 1.0)
        chans.append(wave)
    frames = np.stack(chans, axis=1).astype(np.float32)
    buf = io.BytesIO()
    soundfile.write(buf, frames, info.rate, format=info.fmt.upper(), subtype="PCM_16")
    return buf.getvalue(), info


# --------------------------------------------------------------------------- the data sets


def cache_dir(base: Path, n: int, seed: int) -> Path:
    """The folder of one generated set: keyed by the generator's parameters."""
    return base / f"clips-v{DATA_VERSION}-n{n}-seed{seed}"


def write_all(n: int, seed: int, base: Path, log: Any) -> Path:
    """Write clips 0..n-1 once as ferroload (a WAV and a FLAC dataset), WebDataset shards
    and an HF dataset (`Audio(decode=False)` column); reuse them when already complete."""
    folder = cache_dir(base, n, seed)
    done = folder / "done.json"
    if done.exists():
        log(f"reusing the clips in {folder}")
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    import datasets
    import webdataset as wds
    from datasets.arrow_writer import ArrowWriter

    import ferroload

    datasets.disable_progress_bars()
    fl = {
        fmt: ferroload.Writer(folder / f"ferroload-{fmt}", f"clips-{fmt}")
        for fmt in ("wav", "flac")
    }
    for fmt, w in fl.items():
        w.declare("audio", fmt, kind="tensor", codec_hint="audio")
    (folder / "wds").mkdir()
    pattern = str(folder / "wds" / "clips-%06d.tar")
    per = math.ceil(n / WDS_SHARDS)
    sink = wds.ShardWriter(pattern, maxcount=per, maxsize=1 << 40, verbose=0, mtime=0)
    struct = {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
    feats = datasets.Features(
        {"audio": struct, "label": datasets.Value("int64"), "clip": datasets.Value("int64")}
    )
    arrow = folder / "hf-build.arrow"
    total = 0
    with ArrowWriter(features=feats, path=str(arrow)) as hf:
        for i in range(n):
            data, info = clip(i, seed)
            total += len(data)
            key = f"clip-{i:06d}"
            fl[info.fmt].add(key, {"audio": data}, {"label": info.label, "clip": i})
            sink.write({"__key__": key, info.fmt: data, "cls": info.label})
            hf.write({"audio": {"bytes": data, "path": None}, "label": info.label, "clip": i})
            if (i + 1) % 500 == 0:
                log(f"  {i + 1}/{n} clips written ({total / 2**30:.2f} GiB encoded)")
        hf.finalize()
    sink.close()
    for w in fl.values():
        w.close()
    hfds = datasets.Dataset.from_file(str(arrow)).cast_column("audio", datasets.Audio(decode=False))
    hfds.save_to_disk(str(folder / "hf"))
    del hfds
    arrow.unlink()
    for p in folder.glob("cache-*.arrow"):
        p.unlink()
    done.write_text(json.dumps({"clips": n, "seed": seed, "encoded_bytes": total}))
    return folder


def data_facts(folder: Path) -> dict[str, Any]:
    """The set's clip count and bytes (encoded, and on disk per system)."""

    def du(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())

    facts: dict[str, Any] = json.loads((folder / "done.json").read_text())
    facts["disk_bytes"] = {
        "ferroload": du(folder / "ferroload-wav") + du(folder / "ferroload-flac"),
        "wds": du(folder / "wds"),
        "hf": du(folder / "hf"),
    }
    return facts


# --------------------------------------------------------------------------- the crop


def window(total: int, in_rate: int, offset: int) -> tuple[int, int, int]:
    """The input frames `[start, stop)` to resample for the output crop at `offset`, and
    the output frames to drop from the front: ferroload's own rule (a margin either side,
    a start on an input frame that falls on an output frame), so the peers' crops are the
    same slice of the same resampled signal."""
    step = in_rate // math.gcd(in_rate, OUT_RATE)
    margin = 64 + 128 * -(-in_rate // OUT_RATE)
    start = max(0, offset * in_rate // OUT_RATE - margin) // step * step
    stop = min(total, -(-(offset + LENGTH) * in_rate // OUT_RATE) + margin)
    return start, stop, offset - start * OUT_RATE // in_rate


def peer_crop(data: bytes, rng: np.random.Generator) -> np.ndarray:
    """The peers' decode: the whole clip with soundfile (as their docs do it), mixed down
    to mono, a uniform random 1 s crop at 16 kHz resampled with soxr (HQ) from the input
    window around it. Returns `(1, LENGTH)` float32."""
    import soundfile
    import soxr

    x, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    if x.shape[1] > 1:  # a column at a time: no BLAS threads to spin in the workers
        acc = x[:, 0].copy()
        for c in range(1, x.shape[1]):
            acc += x[:, c]
        x = (acc * np.float32(1 / x.shape[1]))[:, None]
    total = x.shape[0]
    if rate == OUT_RATE:
        offset = int(rng.integers(0, total - LENGTH + 1))
        y = x[offset : offset + LENGTH]
    else:
        total_out = (total * OUT_RATE * 2 + rate) // (2 * rate)
        offset = int(rng.integers(0, total_out - LENGTH + 1))
        start, stop, skip = window(total, rate, offset)
        y = soxr.resample(x[start:stop], rate, OUT_RATE, quality=QUALITY)
        y = y.reshape(-1, 1)[skip : skip + LENGTH]
    out = np.zeros((1, LENGTH), dtype=np.float32)
    out[0, : len(y)] = y[:, 0]
    return out


def reference(data: bytes) -> np.ndarray:
    """The whole clip decoded, mixed to mono and resampled to 16 kHz: every crop is a slice
    of it (up to the resampler's edge effects)."""
    import soundfile
    import soxr

    x, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    x = x.mean(axis=1, dtype=np.float32)
    if rate != OUT_RATE:
        x = soxr.resample(x, rate, OUT_RATE, quality=QUALITY)
    return np.asarray(x, dtype=np.float32)


def locate(crop: np.ndarray, ref: np.ndarray) -> tuple[int, float]:
    """Where `crop` best fits in `ref` (least squares, by FFT), and the largest difference
    there."""
    n = len(ref) + len(crop)
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(ref, size) * np.conj(np.fft.rfft(crop, size)), size)
    k = len(ref) - len(crop) + 1
    sq = np.concatenate([[0.0], np.cumsum(ref.astype(np.float64) ** 2)])
    cost = (sq[len(crop) :][:k] - sq[:k]) - 2 * corr[:k]
    off = int(np.argmin(cost))
    return off, float(np.abs(ref[off : off + len(crop)] - crop).max())
