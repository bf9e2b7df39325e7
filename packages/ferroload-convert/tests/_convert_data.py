"""Deterministic inputs for the convert tests (imported by name: conftest puts this folder
on sys.path)."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import numpy as np
from PIL import Image


def image_bytes(i: int, fmt: str = "PNG") -> bytes:
    """A deterministic small RGB image for input `i`, encoded as `fmt` (a Pillow format name).

    WebP and TIFF are encoded with imagecodecs, which ships its own libwebp and libtiff: a
    Pillow built from source (pillow-simd) lacks them when their headers were missing.
    """
    rng = np.random.default_rng(i)
    h, w = 8 + (i * 7) % 17, 9 + (i * 5) % 19
    pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    if fmt in ("WEBP", "TIFF"):
        import imagecodecs

        if fmt == "WEBP":
            return bytes(imagecodecs.webp_encode(pixels, lossless=True))
        return bytes(imagecodecs.tiff_encode(pixels))
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt)
    return buf.getvalue()


def wav_bytes(i: int, frames: int = 64) -> bytes:
    """A deterministic mono 16-bit WAV."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(
            struct.pack(f"<{frames}h", *((i * 97 + k * 31) % 2000 for k in range(frames)))
        )
    return buf.getvalue()


def flac_bytes(i: int, frames: int = 64) -> bytes:
    """A deterministic mono FLAC (written by soundfile)."""
    import soundfile

    buf = io.BytesIO()
    samples = ((np.arange(frames) * (i + 3)) % 200 - 100).astype(np.int16)
    soundfile.write(buf, samples, 8000, format="FLAC")
    return buf.getvalue()


def files_under(root: Path) -> dict[str, bytes]:
    """Relative path (with /) -> bytes of every file under `root`."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
