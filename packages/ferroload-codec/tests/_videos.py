"""Test videos made with PyAV whose every frame shows its own index.

A frame is three horizontal grey bands, each 16 rows tall (one macroblock row, so lossy
codecs keep them flat): the base-16 digits of the frame index, band value
`digit * 16 + 8`. `frame_index()` reads the index back from a decoded frame, tolerating
the few levels of error a lossy codec or a YUV round trip adds.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

BAND = 16
DIGITS = 3
HEIGHT = BAND * DIGITS
WIDTH = 64

CONTAINER_FORMATS = {"mp4": "mp4", "mkv": "matroska", "webm": "webm", "avi": "avi"}


def frame_image(index: int, height: int = HEIGHT, width: int = WIDTH) -> npt.NDArray[np.uint8]:
    """The RGB picture of frame `index` (digits of the index as grey bands)."""
    img = np.empty((height, width, 3), dtype=np.uint8)
    band = height // DIGITS
    for d in range(DIGITS):
        digit = (index // 16 ** (DIGITS - 1 - d)) % 16
        img[d * band : (d + 1) * band] = digit * 16 + 8
    img[DIGITS * band :] = 0
    return img


def frame_index(frame: npt.NDArray[Any]) -> int:
    """The index shown by a decoded HWC frame (any size, any channel count)."""
    h = frame.shape[0]
    band = h / DIGITS
    index = 0
    for d in range(DIGITS):
        mid = int(band * d + band / 2)
        rows = frame[max(0, mid - 1) : mid + 2, frame.shape[1] // 4 : 3 * frame.shape[1] // 4]
        level = float(np.median(rows[..., 0]))
        index = index * 16 + round((level - 8) / 16)
    return index


def frame_indices(frames: npt.NDArray[Any]) -> list[int]:
    """`frame_index` of each frame of a THWC array."""
    return [frame_index(f) for f in frames]


def make_video(
    *,
    codec: str = "libx264",
    container: str = "mp4",
    num_frames: int = 30,
    fps: int = 25,
    width: int = WIDTH,
    height: int = HEIGHT,
    gop: int = 12,
    bframes: int = 0,
    lossless: bool = True,
    pts_ms: Sequence[int] | None = None,
    pix_fmt: str | None = None,
    alpha: int | None = None,
    threads: int = 1,
    noise: bool = False,
) -> bytes:
    """Encode a test video in memory and return its bytes.

    Args:
        codec: an encoder name (`libx264`, `mpeg4`, `libvpx-vp9`, `mjpeg`, `ffv1`, …).
        container: `mp4`, `mkv`, `webm` or `avi`.
        num_frames: how many frames (ignored when `pts_ms` is given).
        fps: the nominal frame rate.
        gop: keyframe interval.
        bframes: B-frames between references (libx264, mpeg4).
        lossless: lossless or near-lossless settings where the codec has them.
        pts_ms: explicit presentation times in milliseconds (variable frame rate; the
            stream then uses time base 1/1000).
        pix_fmt: the encoder's pixel format (default: yuv420p, yuvj420p for mjpeg).
        alpha: give every frame this alpha (for a pixel format with alpha, e.g. bgra).
        threads: encoder threads.
        noise: frames of random pixels instead (they barely compress: a large clip).
    """
    buf = io.BytesIO()
    with _open_output(buf, container) as out:
        stream = out.add_stream(codec, rate=fps, options=_options(codec, bframes, lossless))
        times: list[int | None] = [None] * num_frames
        if pts_ms is not None:
            stream.time_base = Fraction(1, 1000)
            stream.codec_context.time_base = Fraction(1, 1000)
            times = list(pts_ms)
        stream.width, stream.height = width, height
        stream.pix_fmt = pix_fmt or _pix_fmt(codec)
        stream.codec_context.gop_size = gop
        stream.codec_context.thread_count = threads
        if bframes and codec in ("mpeg4", "libx264"):
            stream.codec_context.max_b_frames = bframes
        import av

        rng = np.random.default_rng(0)
        for i, t in enumerate(times):
            img = frame_image(i, height, width)
            if noise:
                img = rng.integers(0, 256, img.shape, dtype=np.uint8)
            if alpha is not None:
                img = np.concatenate([img, np.full((height, width, 1), alpha, np.uint8)], axis=2)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24" if alpha is None else "rgba")
            if t is not None:
                frame.pts = t
                frame.time_base = Fraction(1, 1000)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def _open_output(buf: io.BytesIO, container: str) -> Any:
    import av

    return av.open(buf, mode="w", format=CONTAINER_FORMATS[container])


def _pix_fmt(codec: str) -> str:
    return {"mjpeg": "yuvj420p", "ffv1": "yuv420p"}.get(codec, "yuv420p")


def _options(codec: str, bframes: int, lossless: bool) -> dict[str, str]:
    if codec == "libx264":
        # fixed GOPs (no scene-cut keyframes) and B-frames even where x264 would skip them
        params = f"scenecut=0:bframes={bframes}:b-adapt=0" + (
            ":b-pyramid=normal" if bframes else ""
        )
        opts = {"preset": "veryfast", "x264-params": params}
        if lossless:  # x264 turns B-frames off when truly lossless (qp 0)
            opts["qp"] = "2" if bframes else "0"
        return opts
    if codec == "mpeg4":
        return {"qmin": "1", "qmax": "2"} if lossless else {"qmin": "4", "qmax": "8"}
    if codec == "libvpx-vp9":
        return {"lossless": "1", "deadline": "realtime", "cpu-used": "8"} if lossless else {
            "deadline": "realtime", "cpu-used": "8", "crf": "40", "b": "0"
        }  # fmt: skip
    if codec == "hevc":  # libx265
        return {"x265-params": "log-level=error"} | ({"crf": "0"} if lossless else {})
    if codec == "mjpeg":
        return {"qmin": "1", "qmax": "2"} if lossless else {}
    return {}


def declare_size(data: bytes, size: tuple[int, int], declared: tuple[int, int]) -> bytes:
    """A Matroska/WebM file whose track header declares frames of `declared` (width,
    height) over its stream of `size` frames: its PixelWidth (EBML id B0) and
    PixelHeight (BA) elements patched in place, the coded stream untouched."""
    out = bytearray(data)
    for element, old, new in zip((0xB0, 0xBA), size, declared, strict=True):
        nbytes = (old.bit_length() + 7) // 8  # how the muxer wrote the value
        assert new < 256**nbytes, "the declared size must fit the original's bytes"
        head = bytes((element, 0x80 | nbytes)) + old.to_bytes(nbytes, "big")
        at = out.find(head)
        assert at >= 0 and out.find(head, at + 1) < 0, "one track header, found once"
        out[at + 2 : at + 2 + nbytes] = new.to_bytes(nbytes, "big")
    return bytes(out)


def make_audio_only() -> bytes:
    """A Matroska file with one audio stream and no video."""
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="matroska") as out:
        stream = out.add_stream("pcm_s16le", rate=8000, layout="mono")
        samples = np.zeros((1, 800), dtype=np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def reference_frames(data: bytes) -> npt.NDArray[np.uint8]:
    """Every frame of the first video stream, decoded from the start by plain PyAV (RGB)."""
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
    return np.stack(frames)
