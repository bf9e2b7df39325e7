"""Finding and decoding the frames of a video: the packet index, keyframe seeks, counters.

The index comes from demuxing the first video stream's packets without decoding them;
`_fetch` reaches a wanted frame by seeking to the keyframe at or before it (or decoding on
when no keyframe lies in between). Used by `_video.decode_video` and `_video.video_info`.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._errors import CodecUnavailableError, DecodeError, ImageTooLargeError
from ferroload_codec._reader import ByteReader

logger = logging.getLogger(__name__)

_FORMAT = "video"


@dataclass
class _Stats:
    """What the last `decode_video` call in this thread did (for tests and benchmarks)."""

    decoded: int = 0  # frames the codec produced
    seeks: int = 0  # demuxer seeks
    reopens: int = 0  # fresh containers, where seeking failed


_last = threading.local()


def _last_stats() -> _Stats:
    """The `_Stats` of this thread's last `decode_video` call."""
    stats: _Stats = getattr(_last, "stats", _Stats())
    return stats


_NO_DTS = np.iinfo(np.int64).min

# Decoders where a per-packet `skip_frame="NONREF"` skips exactly the pictures nothing
# refers to: h264 (nal_ref_idc 0). Not hevc, whose "sub-layer non-reference" pictures
# may be referenced by a higher temporal layer (iPhone videos have them); not libdav1d
# (AV1), which reads the setting once and then drops wanted frames; not mpeg4, whose
# "packed" B-frames (DivX avi) share a packet with a P-frame.
_SKIPS_NONREF = frozenset({"h264"})


@dataclass(frozen=True)
class _Index:
    """The stream's frames in presentation order."""

    pts: npt.NDArray[np.int64]  # ascending
    dts: npt.NDArray[np.int64]  # the decode timestamp of each frame's packet, or _NO_DTS
    keyframes: list[int]  # positions into `pts`, ascending
    time_base: Fraction
    last_duration: int  # of the last frame, in time_base units (0 if unknown)
    # The packets' "pts" are really decode times (h264 with B-frames in avi): frames
    # are then told apart by the order the decoder outputs them, not by their pts.
    pts_in_decode_order: bool = False

    def keyframe_at_or_before(self, j: int) -> int:
        """The keyframe to start decoding at to reach frame `j`; -1 where none precedes it."""
        k = bisect.bisect_right(self.keyframes, j) - 1
        return self.keyframes[k] if k >= 0 else -1


def _av() -> Any:
    try:
        import av
    except ImportError as exc:
        raise CodecUnavailableError(
            "video decoding needs PyAV: pip install ferroload-codec[video]"
        ) from exc
    return av


def _damaged(exc: BaseException, what: str, sid: str | None) -> DecodeError:
    detail = str(exc) or type(exc).__name__
    return DecodeError(f"{what}: {detail}", sample_id=sid, format=_FORMAT)


# FFmpeg's probe (`avformat_find_stream_info`, run by every `av.open`) decodes a stream's
# first frames to learn what mp4, mkv, webm and avi headers already say: ~2 ms of a
# ~60 ms 360p H.264 clip. Options given to `av.open` reach the probe's codec contexts, not
# the one PyAV opens later to decode, so `skip_frame` "all" keeps the probe to parsing.
_LEAN_PROBE = {"skip_frame": "all"}


def _open(av: Any, buf: bytes | bytearray | memoryview, sid: str | None) -> Any:
    """The container of `buf`, probed without decoding where its header gives the frame
    size (else probed again in full: a stream whose size only decoding tells)."""
    try:
        container = av.open(ByteReader(buf), mode="r", options=_LEAN_PROBE)  # no copy
        streams = container.streams.video
        if streams and not (streams[0].codec_context.width and streams[0].codec_context.height):
            container.close()
            container = av.open(ByteReader(buf), mode="r")
        return container
    except Exception as exc:  # PyAV raises FFmpegError subclasses, and more
        raise _damaged(exc, "not a readable video container", sid) from None


def too_large(
    w: int, h: int, max_pixels: int, sid: str | None, what: str = ""
) -> ImageTooLargeError:
    """The error for video frames of `w` x `h` over `max_pixels`."""
    return ImageTooLargeError(
        f"video frames of {w}x{h} = {w * h:,} pixels{what} exceed max_pixels={max_pixels:,}; "
        "raise max_pixels if they are genuine",
        sample_id=sid,
        format=_FORMAT,
    )


def ffmpeg_max_pixels(max_pixels: int) -> int:
    """The pixel limit given to FFmpeg's decoder for frames of at most `max_pixels`.

    A container's header may declare a frame size the stream does not have (the lean
    probe trusts it), so the decoder itself must not allocate a frame far over the
    limit. FFmpeg checks its own limit on the frame with its padding and alignment (a
    100x48 frame fails a limit of 4,800, an MPEG-4 one even 7,824), so it gets a margin:
    64 pixels on each side of a frame of at most 65,536 a side. Each decoded frame is
    then checked exactly (`_Cursor`).
    """
    return min(2**31 - 1, max_pixels + 128 * min(max_pixels + 1, 131_072) + 16_384)


def _opener(
    stack: contextlib.ExitStack[Any],
    av: Any,
    buf: bytes | bytearray | memoryview,
    sid: str | None,
    max_pixels: int,
    codec_threads: int = 1,
) -> Callable[[], tuple[Any, Any]]:
    """A function that opens `buf` (again: a cursor reopens to seek back) as a container
    closed with `stack`, and its video stream (`_video_stream`)."""

    def reopen() -> tuple[Any, Any]:
        container = stack.enter_context(_open(av, buf, sid))
        return container, _video_stream(container, sid, codec_threads, max_pixels=max_pixels)

    return reopen


def _video_stream(
    container: Any, sid: str | None, codec_threads: int = 1, *, max_pixels: int
) -> Any:
    streams = container.streams.video
    if not streams:
        raise DecodeError("the container has no video stream", sample_id=sid, format=_FORMAT)
    stream = streams[0]
    # applied when the decoder opens, at the first packet
    stream.codec_context.options = {"max_pixels": str(ffmpeg_max_pixels(max_pixels))}
    # one thread by default: parallelism comes from the loader's threads
    stream.codec_context.thread_count = codec_threads
    if codec_threads > 1:  # frame threads: the same frames, in the same order
        stream.codec_context.thread_type = "FRAME"
    return stream


def _index(container: Any, stream: Any, sid: str | None) -> _Index:
    """Demux every packet of `stream` (no decoding) into the frame list."""
    pts: list[int] = []
    dts: list[int] = []
    keys: list[bool] = []
    durations: list[int] = []
    try:
        for packet in container.demux(stream):
            if packet.pts is None or packet.size == 0 or packet.is_discard or packet.is_corrupt:
                continue  # the flush packet, frames an edit list hides, a frame cut short
            pts.append(packet.pts)
            dts.append(_NO_DTS if packet.dts is None else packet.dts)
            keys.append(packet.is_keyframe)
            durations.append(packet.duration or 0)
    except Exception as exc:  # FFmpegError, or a damaged packet's own error
        raise _damaged(exc, "damaged video (while reading packets)", sid) from None
    if not pts:
        raise DecodeError(
            "the video stream has no frames with timestamps (empty, damaged, or a raw "
            "elementary stream: remux it into mp4/mkv)",
            sample_id=sid,
            format=_FORMAT,
        )
    order = np.argsort(np.asarray(pts, dtype=np.int64), kind="stable")
    increasing = bool(np.all(np.diff(np.asarray(pts, dtype=np.int64)) > 0))
    keyframes = [int(i) for i in np.flatnonzero(np.asarray(keys, dtype=bool)[order])]
    return _Index(
        np.asarray(pts, dtype=np.int64)[order],
        np.asarray(dts, dtype=np.int64)[order],
        keyframes,
        Fraction(stream.time_base or 1),
        durations[int(order[-1])],
        pts_in_decode_order=increasing and bool(stream.codec_context.has_b_frames),
    )


class _Cursor:
    """Decodes forward from a keyframe, one frame at a time, with a one-frame pushback.

    `reopen` opens a fresh container on the same bytes: the last resort where the
    demuxer cannot seek (an avi that lost its index to truncation). Every frame out of
    the decoder is checked against `max_pixels` by its own size, whatever the
    container's header said (`ImageTooLargeError`), before anything converts it.
    """

    def __init__(
        self,
        container: Any,
        stream: Any,
        reopen: Callable[[], tuple[Any, Any]],
        index: _Index,
        wanted: set[int],
        stats: _Stats,
        sid: str | None,
        *,
        max_pixels: int,
    ) -> None:
        self.max_pixels = max_pixels
        codec = stream.codec_context
        self.declared = f"{codec.width}x{codec.height}"  # before the decoder updates it
        self.container = container
        self.stream = stream
        self._reopen = reopen
        self.index = index
        self.stats = stats
        self.sid = sid
        self.seekable = True
        self.wanted = wanted  # pts of the frames to return
        self._frames: Iterator[Any] | None = None
        self._pending: tuple[Any, int] | None = None  # read past the last target: next
        self._last_pts: int | None = None  # of the last frame taken from the decoder
        self._next_position = 0  # index position of the next frame out of the decoder

    @property
    def position(self) -> int | None:
        """The pts decoding has reached (None before the first seek and at the end)."""
        if self._frames is None:
            return None
        return self._pending[1] if self._pending is not None else self._last_pts

    def seek(self, k: int) -> None:
        """Make frame `k` (a keyframe; -1: the first packet) the next one the decoder sees.

        The demuxer's seek lands on a keyframe at or before the wanted timestamp; some
        land a GOP early (mp4 with B-frames: its index is in decode time), so packets
        before frame `k` are skipped without decoding, which costs only demuxing. A seek
        that lands after frame `k` is retried from an earlier keyframe, then the first;
        where all fail, decoding starts over in a fresh container.
        """
        index = self.index
        if self.seekable and k >= 0:
            pos = bisect.bisect_left(index.keyframes, k)
            for start in dict.fromkeys([k, index.keyframes[max(0, pos - 1)], index.keyframes[0]]):
                try:
                    self.container.seek(
                        int(index.pts[start]), stream=self.stream, backward=True, any_frame=False
                    )
                except Exception:  # FFmpegError: no keyframe before that timestamp
                    continue
                self.stats.seeks += 1
                if self._start_at(k):
                    return
            logger.debug("seeking to frame %d failed; decoding from the start instead", k)
            self.seekable = False
        self.container, self.stream = self._reopen()
        self.stats.reopens += 1
        if not self._start_at(k):
            raise DecodeError(
                f"frame {k} (pts {int(index.pts[max(k, 0)])}) is not in the stream (damaged video)",
                sample_id=self.sid,
                format=_FORMAT,
            )

    def _start_at(self, k: int) -> bool:
        """Demux (not decode) up to frame `k`'s packet; False if it went past it."""
        packets = self.container.demux(self.stream)
        if k >= 0:
            key_pts, key_dts = int(self.index.pts[k]), int(self.index.dts[k])
            for packet in packets:
                if packet.pts == key_pts and not packet.is_corrupt:
                    packets = _chain(packet, packets)
                    break
                passed_dts = key_dts != _NO_DTS and packet.dts is not None and packet.dts > key_dts
                passed_key = packet.is_keyframe and packet.pts is not None and packet.pts > key_pts
                if passed_dts or passed_key:
                    return False
            else:
                return False
        self._frames = self._decode(packets)
        self._pending = self._last_pts = None
        self._next_position = max(k, 0)
        return True

    def _decode(self, packets: Iterator[Any]) -> Iterator[Any]:
        codec = self.stream.codec_context
        skips = codec.codec.name in _SKIPS_NONREF and not self.index.pts_in_decode_order
        wanted = self.wanted
        for packet in packets:
            if packet.is_corrupt:  # a frame cut short (truncated file): not a frame
                continue
            if skips:  # a frame no other frame refers to is decoded only if it is wanted
                codec.skip_frame = "DEFAULT" if packet.pts in wanted else "NONREF"
            try:
                frames = packet.decode()
            except Exception as exc:  # FFmpegError: damage, or a frame over FFmpeg's limit
                refused = self._refused(exc)
                if refused is None:
                    raise
                raise refused from None
            for frame in frames:
                self.stats.decoded += 1
                if frame.width * frame.height > self.max_pixels:
                    raise too_large(
                        frame.width, frame.height, self.max_pixels, self.sid,
                        f" (decoded; the stream's header says {self.declared})",
                    )  # fmt: skip
                yield frame

    def _refused(self, exc: BaseException) -> ImageTooLargeError | None:
        """The error for a packet FFmpeg's decoder refused because its frame exceeds
        FFmpeg's pixel limit (`ffmpeg_max_pixels`); None for other damage. Some decoders
        keep the frame's size (h264), others reset it and say only EINVAL or ENOMEM."""
        codec = self.stream.codec_context
        w, h = int(codec.width or 0), int(codec.height or 0)
        if w * h > self.max_pixels:
            return too_large(
                w, h, self.max_pixels, self.sid,
                f" (the decoder refused them; the stream's header says {self.declared})",
            )  # fmt: skip
        if getattr(exc, "errno", None) in (errno.EINVAL, errno.ENOMEM):
            return ImageTooLargeError(
                f"FFmpeg refused to decode a frame ({exc}): frames over max_pixels="
                f"{self.max_pixels:,} (or of an impossible size; the stream's header says "
                f"{self.declared}); raise max_pixels if they are genuine",
                sample_id=self.sid,
                format=_FORMAT,
            )
        return None

    def next(self) -> tuple[Any, int] | None:
        """The next decoded frame and its pts, or None at the end of the stream."""
        if self._pending is not None:
            got, self._pending = self._pending, None
            return got
        assert self._frames is not None
        index = self.index
        for frame in self._frames:
            if index.pts_in_decode_order:  # the n-th frame out after keyframe k is k + n
                position, last = self._next_position, len(index.pts) - 1
                self._next_position += 1
                pts = int(index.pts[min(position, last)]) + max(0, position - last)
            elif frame.pts is None:
                continue
            else:
                pts = int(frame.pts)
            self._last_pts = pts
            return frame, pts
        self._frames = None
        return None

    def push_back(self, got: tuple[Any, int]) -> None:
        self._pending = got


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _fetch(cursor: _Cursor, j: int) -> Any:
    """Frame `j` of the index, seeking only when a keyframe lies between it and the cursor.

    A frame the decoder does not produce (damaged, or a timestamp quirk) is replaced by
    the nearest decoded frame before it, else the first one after it.
    """
    index = cursor.index
    target = int(index.pts[j])
    k = index.keyframe_at_or_before(j)
    pos = cursor.position
    if (
        pos is None
        or pos > target
        or (cursor.seekable and k >= 0 and pos < int(index.pts[k]))  # a keyframe is nearer
    ):
        cursor.seek(k)
    before = None
    while (got := cursor.next()) is not None:
        frame, pts = got
        if pts == target:
            return frame
        if pts < target:
            before = frame
            continue
        cursor.push_back(got)
        return before if before is not None else frame
    if before is not None:
        return before
    raise DecodeError(
        f"frame {j} (pts {target}) could not be decoded (truncated or damaged video)",
        sample_id=cursor.sid,
        format=_FORMAT,
    )
