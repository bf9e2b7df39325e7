"""Video decoding with PyAV: exact frame selection from demuxed packets, keyframe seeks.

A video is indexed by demuxing its first video stream's packets without decoding them
(only container parsing): sorted by presentation timestamp they list every frame, also
for variable frame rates and B-frames, and say which frames are keyframes. Frame indices
are chosen on that list, and each wanted frame is reached by seeking to the keyframe at
or before it and decoding forward; a later wanted frame with no keyframe in between is
reached by decoding on, without a seek. On the way, h264 pictures that no other picture
refers to are skipped unless wanted (a third fewer frames decoded with B-frames).

Decisions:

* A truncated file is the shorter video it still holds: the frames whose packets can be
  demuxed whole (a packet cut short, which FFmpeg flags corrupt, is not a frame). A file
  whose header or index is cut off (mp4 with its `moov` at the end, most often) is a
  `DecodeError`.
* Each decode uses one codec thread: the loader decodes many videos at once on its own
  threads, where codec threads would oversubscribe the cores (and frame threading also
  delays the first frame after every seek). Measured on a 10 s 720p h264 clip.
  `codec_threads=` opts into frame threads: on a machine other processes keep busy the
  scheduler shares the cores per runnable thread, and a loader's few Python threads
  (which also wait on the GIL there) get a smaller share than processes with codec
  threads; measured on 360p H.264 at load 6 on 2 cores: 1.4x the clips/s at 1.2x the
  CPU per clip (bench_video.py).
* PyAV is imported on first use; `import ferroload_codec` never imports it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ferroload_codec._errors import DecodeError
from ferroload_codec._image import DEFAULT_MAX_PIXELS
from ferroload_codec._pixels import CHANNELS, ImageMode, convert_channels
from ferroload_codec._resize import (
    INTERPOLATIONS,
    RESIZE_MODES,
    Interpolation,
    ResizeMode,
    check_max_pixels,
    check_size,
    geometry,
    resize_into,
)
from ferroload_codec._sniff import as_buffer
from ferroload_codec._video_frames import (
    _FORMAT,
    _av,
    _Cursor,
    _damaged,
    _fetch,
    _index,
    _last,
    _opener,
    _Stats,
    too_large,
)

logger = logging.getLogger(__name__)

Sampling = Literal["uniform", "stride", "random"]
SAMPLINGS = ("uniform", "stride", "random")
#: The most codec threads a decode may ask for: FFmpeg fails to open the codec with far
#: more (100,000 read as "Resource temporarily unavailable", which would pass for a
#: damaged video and be skipped clip after clip).
MAX_CODEC_THREADS = 64


@dataclass(frozen=True)
class VideoInfo:
    """What a video's first video stream holds, found by demuxing; its frame size by
    decoding the first frame (a container's header may state another).

    Attributes:
        num_frames: frames in the stream (packets with a presentation timestamp).
        fps: the container's frame rate where the timestamps agree with it (a constant
            rate), else the average: frames over duration.
        duration: seconds from the first frame's start to the last frame's end.
        width: the first frame's width in pixels, as decoded.
        height: the first frame's height in pixels, as decoded.
        codec: the codec's name (`h264`, `hevc`, `vp9`, `av1`, `mpeg4`, …).
        keyframes: indices (in presentation order) of the frames decoding can start at.
    """

    num_frames: int
    fps: float
    duration: float
    width: int
    height: int
    codec: str
    keyframes: tuple[int, ...]


def _check_header(stream: Any, max_pixels: int, sid: str | None) -> None:
    """Refuse a stream whose header declares no size, or frames over `max_pixels`, before
    decoding. The header may understate the frames: each decoded frame is checked too."""
    w, h = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
    if w <= 0 or h <= 0:
        raise DecodeError(f"video stream declares size {w}x{h}", sample_id=sid, format=_FORMAT)
    if w * h > max_pixels:
        raise too_large(w, h, max_pixels, sid)


# ---------------------------------------------------------------------- frame choice


def _select(
    total: int,
    num_frames: int | None,
    sampling: Sampling,
    stride: int,
    rng: np.random.Generator | None,
) -> npt.NDArray[np.intp]:
    """Frame indices (non-decreasing, all in `[0, total)`) for a video of `total` frames."""
    if sampling == "stride":
        picks = np.arange(0, total, stride, dtype=np.intp)
        return picks if num_frames is None else picks[:num_frames]
    assert num_frames is not None
    if sampling == "uniform":  # the centre of each of num_frames equal segments
        return ((np.arange(num_frames) * 2 + 1) * total // (2 * num_frames)).astype(np.intp)
    assert rng is not None
    span = (num_frames - 1) * stride + 1
    start = int(rng.integers(0, total - span + 1)) if total >= span else 0
    return np.minimum(start + np.arange(num_frames) * stride, total - 1).astype(np.intp)


# ---------------------------------------------------------------------- decoding


def _to_array(frame: Any, mode: ImageMode) -> npt.NDArray[np.uint8]:
    if mode == "RGBA":
        arr: npt.NDArray[np.uint8] = frame.to_ndarray(format="rgba")
        return arr
    rgb: npt.NDArray[np.uint8] = frame.to_ndarray(format="rgb24")
    return convert_channels(rgb, CHANNELS[mode])


def _place(
    src: npt.NDArray[np.uint8],
    dst: npt.NDArray[np.uint8],
    resize: ResizeMode,
    interpolation: Interpolation,
) -> None:
    h, w = src.shape[:2]
    geo = geometry(h, w, dst.shape[0], dst.shape[1], resize)
    if geo.pads:
        dst[...] = 0
    box = src[geo.y0 : geo.y1, geo.x0 : geo.x1]
    target = dst[geo.top : geo.top + geo.height, geo.left : geo.left + geo.width]
    resize_into(box, target, interpolation)


# ---------------------------------------------------------------------- public API


def _check_options(
    num_frames: int | None,
    sampling: str,
    stride: int,
    size: int | tuple[int, int] | None,
    resize: str,
    interpolation: str,
    mode: str,
    max_pixels: int,
    codec_threads: int = 1,
) -> tuple[int, int] | None:
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if num_frames is None:
        if sampling != "stride":
            raise ValueError(
                f"num_frames=None (all frames) needs sampling='stride', not {sampling!r}"
            )
    elif isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
        raise ValueError(f"num_frames must be a positive int, got {num_frames!r}")
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
        raise ValueError(f"stride must be a positive int, got {stride!r}")
    if resize not in RESIZE_MODES:
        raise ValueError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {resize!r}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}"
        )
    if mode not in CHANNELS:
        raise ValueError(f"mode must be one of {', '.join(CHANNELS)}, got {mode!r}")
    check_max_pixels(max_pixels)
    if (
        isinstance(codec_threads, bool)
        or not isinstance(codec_threads, int)
        or not 1 <= codec_threads <= MAX_CODEC_THREADS
    ):
        raise ValueError(
            f"codec_threads must be a positive int of at most {MAX_CODEC_THREADS}, "
            f"got {codec_threads!r}"
        )
    return check_size(size, max_pixels)


def decode_video(
    data: bytes | bytearray | memoryview,
    *,
    num_frames: int | None = 8,
    sampling: Sampling = "uniform",
    stride: int = 1,
    seed: int | np.random.Generator | None = None,
    size: int | tuple[int, int] | None = None,
    resize: ResizeMode = "exact",
    interpolation: Interpolation = "bilinear",
    mode: ImageMode = "RGB",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    codec_threads: int = 1,
    sample_id: str | None = None,
    out: npt.NDArray[np.uint8] | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode chosen frames of a video into a uint8 THWC array.

    Frames are counted in presentation order over the first video stream (exact for
    variable frame rates and B-frames too). Each wanted frame is reached by seeking to the
    keyframe at or before it and decoding forward; frames between two wanted ones in the
    same GOP are decoded once. A frame wanted twice is decoded once and copied.

    Args:
        data: the encoded video (mp4, mkv, webm, avi, … anything FFmpeg demuxes).
        num_frames: how many frames. With `sampling="stride"`, at most this many, or
            None for every `stride`-th frame of the whole video.
        sampling: `uniform`: the centre frame of each of `num_frames` equal segments of
            the video (frame `(2i + 1) * total // (2 * num_frames)`); a video shorter than
            `num_frames` repeats frames, in order. `stride`: frames 0, `stride`,
            `2 * stride`, …, stopping at the end of the video (so possibly fewer than
            `num_frames`). `random`: a clip of `num_frames` frames `stride` apart whose
            start is uniform over the starts that fit; a video too short for the clip
            starts at frame 0 and repeats its last frame to fill it.
        stride: the step between frames for `stride` and `random`.
        seed: seeds `numpy.random.default_rng` for `random` (an int, or a Generator).
        size: output `(height, width)`, or an int for a square; None keeps the size of
            the first frame decoded (a later frame of another size is resized to it).
        resize: `exact`, `shorter` (scale, crop the centre) or `longer` (scale, pad with
            0), as for images.
        interpolation: `bilinear`, `bicubic`, `area` or `nearest`.
        mode: `RGB` (default), `L` (one channel, Pillow's luma) or `RGBA` (the alpha
            plane where the codec has one, else 255).
        max_pixels: refuse frames of more pixels: from the stream's header before
            decoding, and by each decoded frame's own size (a container's header may
            understate it); FFmpeg's decoder gets a limit near it, so that it never
            allocates a frame far over it.
        codec_threads: the codec's own threads for this video (frame threading where
            the codec has it; the frames are the same). 1 (the default) suits a loader
            that decodes several videos at once on its threads; 2 or more uses more
            CPU per clip (~20% on 360p H.264) but gets a larger share of a machine
            that other processes keep busy. At most `MAX_CODEC_THREADS` (64).
        sample_id: named in errors.
        out: a uint8 `(T, height, width, channels)` array to fill (needs `size`; `T` is
            `num_frames`). With `stride` sampling of a short video only the first rows
            are written, and `out[:n]` is returned.

    Returns:
        A uint8 `(T, height, width, channels)` array (`out`, or a leading slice of it,
        when given).

    Raises:
        ValueError: for bad options, or an `out` of the wrong shape.
        DecodeError: for empty, truncated or damaged input, or no video stream.
        ImageTooLargeError: frames over `max_pixels` (declared or decoded).
        CodecUnavailableError: when PyAV is not installed.

    Examples:
        >>> import io, av
        >>> buf = io.BytesIO()
        >>> with av.open(buf, "w", format="matroska") as mkv:
        ...     stream = mkv.add_stream("ffv1", rate=25)
        ...     stream.width, stream.height = 64, 48
        ...     for i in range(30):
        ...         grey = np.full((48, 64, 3), i * 8 + 4, np.uint8)  # frame i shows i
        ...         mkv.mux(stream.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")))
        ...     mkv.mux(stream.encode(None))
        >>> frames = decode_video(buf.getvalue(), num_frames=3, size=32)
        >>> frames.shape, frames.dtype
        ((3, 32, 32, 3), dtype('uint8'))
        >>> (frames[:, 0, 0, 0] // 8).tolist()  # the centres of three equal thirds
        [5, 15, 25]
    """
    target_size = _check_options(
        num_frames, sampling, stride, size, resize, interpolation, mode, max_pixels, codec_threads
    )
    channels = CHANNELS[mode]
    if out is not None:
        if target_size is None:
            raise ValueError("out= needs size=... (the frame size of the output)")
        if num_frames is None:
            raise ValueError("out= needs num_frames (the T of the output)")
        want = (num_frames, *target_size, channels)
        if not isinstance(out, np.ndarray) or out.shape != want or out.dtype != np.uint8:
            got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
            raise ValueError(f"out must be uint8 of shape {want}, got {got}")
    rng = np.random.default_rng(seed) if sampling == "random" else None
    buf = as_buffer(data, sample_id, _FORMAT)
    av = _av()
    stats = _Stats()
    _last.stats = stats
    try:
        with contextlib.ExitStack() as stack:
            reopen = _opener(stack, av, buf, sample_id, max_pixels, codec_threads)
            container, stream = reopen()
            _check_header(stream, max_pixels, sample_id)
            index = _index(container, stream, sample_id)
            picks = _select(len(index.pts), num_frames, sampling, stride, rng)
            result = None if out is None else out[: len(picks)]
            wanted = set(index.pts[picks].tolist())
            cursor = _Cursor(
                container, stream, reopen, index, wanted, stats, sample_id, max_pixels=max_pixels
            )
            done: dict[int, int] = {}  # frame index -> the row already holding it
            for row, j in enumerate(picks.tolist()):
                if result is not None and j in done:
                    result[row] = result[done[j]]
                    continue
                frame = _fetch(cursor, j)  # its size checked against max_pixels
                if result is None:  # sized by the first frame decoded, not by the header
                    th, tw = target_size or (frame.height, frame.width)
                    result = np.empty((len(picks), th, tw, channels), dtype=np.uint8)
                _place(_to_array(frame, mode), result[row], resize, interpolation)
                done[j] = row
    except DecodeError:
        raise
    except Exception as exc:  # FFmpegError and whatever else PyAV raises
        raise _damaged(exc, "damaged video", sample_id) from None
    assert result is not None  # an index has at least one frame, so picks too
    return result


def video_info(
    data: bytes | bytearray | memoryview,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    sample_id: str | None = None,
) -> VideoInfo:
    """Frame count, rate, duration, size, codec and keyframes: by demuxing, and the size
    by decoding the first frame.

    The frame size a container's header declares may not be the frames' (a lying mkv
    says 64x64 over 9600x9600 frames), so `width` and `height` are those of the first
    frame, decoded under `max_pixels` as `decode_video` decodes it.

    Args:
        data: the encoded video.
        max_pixels: refuse frames of more pixels, as `decode_video` does.
        sample_id: named in errors.

    Returns:
        The `VideoInfo` of the first video stream.

    Raises:
        DecodeError: for empty, truncated or damaged input, or no video stream.
        ImageTooLargeError: frames over `max_pixels` (declared or decoded).
        CodecUnavailableError: when PyAV is not installed.

    Examples:
        >>> import io, av
        >>> buf = io.BytesIO()
        >>> with av.open(buf, "w", format="matroska") as mkv:
        ...     stream = mkv.add_stream("mpeg4", rate=30)
        ...     stream.width, stream.height = 64, 48
        ...     for i in range(45):
        ...         grey = np.full((48, 64, 3), i, np.uint8)
        ...         mkv.mux(stream.encode(av.VideoFrame.from_ndarray(grey, format="rgb24")))
        ...     mkv.mux(stream.encode(None))
        >>> info = video_info(buf.getvalue())
        >>> info.num_frames, info.fps, info.width, info.height, info.codec
        (45, 30.0, 64, 48, 'mpeg4')
    """
    check_max_pixels(max_pixels)
    buf = as_buffer(data, sample_id, _FORMAT)
    av = _av()
    try:
        with contextlib.ExitStack() as stack:
            reopen = _opener(stack, av, buf, sample_id, max_pixels)
            container, stream = reopen()
            _check_header(stream, max_pixels, sample_id)
            codec = str(stream.codec_context.codec.canonical_name)  # av1, not libdav1d
            rate = stream.average_rate or stream.guessed_rate
            index = _index(container, stream, sample_id)
            first = {int(index.pts[0])}
            cursor = _Cursor(
                container, stream, reopen, index, first, _Stats(), sample_id, max_pixels=max_pixels
            )
            frame = _fetch(cursor, 0)
            width, height = int(frame.width), int(frame.height)
    except DecodeError:
        raise
    except Exception as exc:  # FFmpegError and whatever else PyAV raises
        raise _damaged(exc, "damaged video", sample_id) from None
    n = len(index.pts)
    last = index.last_duration
    if last <= 0:  # unknown: the typical gap between frames
        last = int(np.median(np.diff(index.pts))) if n > 1 else 0
    duration = float((int(index.pts[-1]) - int(index.pts[0]) + last) * index.time_base)
    measured = n / duration if duration > 0 else 0.0
    # the container's rate when it agrees (exact for constant rates), else the average
    fps = float(rate) if rate and abs(float(rate) - measured) <= 0.01 * measured else measured
    return VideoInfo(n, fps, duration, width, height, codec, tuple(index.keyframes))
