from __future__ import annotations

import doctest
import functools
import subprocess
import sys
import textwrap
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferroload_codec._errors import CodecUnavailableError, DecodeError, ImageTooLargeError
from ferroload_codec._video import VideoInfo, decode_video, video_info
from ferroload_codec._video_frames import _last_stats, _open, ffmpeg_max_pixels

from ._videos import (
    HEIGHT,
    WIDTH,
    declare_size,
    frame_image,
    frame_indices,
    make_audio_only,
    make_video,
    reference_frames,
)

pytest.importorskip("av", reason="video decoding needs the video extra (PyAV)")


@functools.cache
def video(**kwargs: object) -> bytes:
    return make_video(**kwargs)  # type: ignore[arg-type]


def all_frames(data: bytes) -> list[int]:
    return frame_indices(decode_video(data, num_frames=None, sampling="stride"))


# ------------------------------------------------------------------ codecs and containers

CODECS = [
    # codec, container, fps, B-frames, lossless
    ("libx264", "mp4", 25, 2, True),
    ("libx264", "mkv", 30, 3, False),
    ("libx264", "avi", 24, 0, True),
    ("libx264", "avi", 25, 2, True),  # B-frames, but avi stores decode times only
    ("mpeg4", "avi", 24, 2, True),
    ("mpeg4", "mp4", 60, 2, False),
    ("libvpx-vp9", "webm", 30, 0, False),
    ("libvpx-vp9", "mkv", 24, 0, True),
    ("mjpeg", "avi", 60, 0, True),
    ("ffv1", "mkv", 25, 0, True),
    ("hevc", "mp4", 30, 0, False),
]


@pytest.fixture(params=CODECS, ids=lambda c: "-".join(map(str, c)))
def coded(request: pytest.FixtureRequest) -> tuple[bytes, int]:
    """50 frames of one CODECS entry (codec, container, fps, B-frames, lossless), and its
    frame rate."""
    codec, container, fps, bframes, lossless = request.param
    data = video(
        codec=codec, container=container, fps=fps, num_frames=50, bframes=bframes, lossless=lossless
    )
    return data, fps


def test_every_codec_and_container_gives_the_exact_frames(coded: tuple[bytes, int]) -> None:
    data, fps = coded
    assert all_frames(data) == list(range(50))
    frames = decode_video(data, num_frames=8)
    assert frame_indices(frames) == [3, 9, 15, 21, 28, 34, 40, 46]
    # seeking and decoding forward gives the very pixels of a decode from the start
    np.testing.assert_array_equal(frames, reference_frames(data)[[3, 9, 15, 21, 28, 34, 40, 46]])
    assert frame_indices(decode_video(data, num_frames=6, sampling="stride", stride=7)) == [
        0, 7, 14, 21, 28, 35,
    ]  # fmt: skip
    info = video_info(data)
    assert info.num_frames == 50
    assert info.fps == pytest.approx(fps, rel=1e-3)
    assert info.duration == pytest.approx(50 / fps, abs=1.5e-3)
    assert (info.width, info.height) == (WIDTH, HEIGHT)
    assert info.keyframes[0] == 0


@pytest.mark.parametrize("container", ["mkv", "mp4"])
def test_av1_decodes(container: str) -> None:
    data = video(codec="libsvtav1", container=container, height=64, num_frames=60, gop=30)
    assert all_frames(data) == list(range(60))
    assert video_info(data).codec == "av1"
    for n in (3, 7, 16):  # frames skipped on the way must not change which are returned
        wanted = [(2 * i + 1) * 60 // (2 * n) for i in range(n)]
        frames = decode_video(data, num_frames=n)
        assert frame_indices(frames) == wanted
        np.testing.assert_array_equal(frames, reference_frames(data)[wanted])


def test_h264_frames_nothing_refers_to_are_skipped_unless_wanted() -> None:
    data = video(codec="libx264", container="mkv", num_frames=120, gop=120, bframes=3)
    frames = decode_video(data, num_frames=1)  # frame 60: 61 frames from the keyframe
    assert frame_indices(frames) == [60]
    np.testing.assert_array_equal(frames[0], reference_frames(data)[60])
    assert _last_stats().decoded <= 45  # x264's non-reference B-frames were not decoded
    clip = decode_video(data, num_frames=8, sampling="random", seed=2)  # all wanted
    start = frame_indices(clip)[0]
    np.testing.assert_array_equal(clip, reference_frames(data)[start : start + 8])


def test_lossless_frames_are_exact() -> None:
    data = video(codec="ffv1", container="mkv", pix_fmt="bgr0", num_frames=20)
    frames = decode_video(data, num_frames=5, sampling="stride", stride=4)
    for t, i in enumerate([0, 4, 8, 12, 16]):
        np.testing.assert_array_equal(frames[t], frame_image(i))


def test_near_lossless_yuv_frames_are_within_a_level() -> None:
    data = video(codec="libx264", container="mp4", num_frames=12)
    frames = decode_video(data, num_frames=None, sampling="stride")
    expected = np.stack([frame_image(i) for i in range(12)]).astype(int)
    assert np.abs(frames.astype(int) - expected).max() <= 2


def test_codec_names_in_info() -> None:
    names = {
        ("libx264", "mp4"): "h264",
        ("mpeg4", "avi"): "mpeg4",
        ("libvpx-vp9", "webm"): "vp9",
        ("mjpeg", "avi"): "mjpeg",
        ("ffv1", "mkv"): "ffv1",
    }
    for (codec, container), name in names.items():
        assert video_info(video(codec=codec, container=container)).codec == name


def test_info_lists_keyframes_from_the_packets() -> None:
    info = video_info(video(codec="libx264", container="mp4", num_frames=50, gop=12))
    assert info == VideoInfo(50, 25.0, 2.0, WIDTH, HEIGHT, "h264", (0, 12, 24, 36, 48))
    every = video_info(video(codec="mjpeg", container="avi", num_frames=10))
    assert every.keyframes == tuple(range(10))


# ------------------------------------------------------------------ variable frame rate

VFR_MS = np.cumsum(np.random.default_rng(0).integers(5, 150, 60)).tolist()


@pytest.mark.parametrize(
    ("codec", "container", "bframes"),
    [("libx264", "mkv", 2), ("libx264", "mp4", 2), ("ffv1", "mkv", 0), ("libvpx-vp9", "webm", 0)],
)
def test_variable_frame_rate_counts_frames_not_time(
    codec: str, container: str, bframes: int
) -> None:
    data = video(codec=codec, container=container, pts_ms=tuple(VFR_MS), bframes=bframes)
    assert all_frames(data) == list(range(60))
    assert frame_indices(decode_video(data, num_frames=6)) == [5, 15, 25, 35, 45, 55]
    info = video_info(data)
    assert info.num_frames == 60
    span = (VFR_MS[-1] - VFR_MS[0]) / 1000
    assert span < info.duration < span + 0.15  # plus the last frame's duration
    assert info.fps == pytest.approx(60 / info.duration)  # the average, not a nominal rate


# ------------------------------------------------------------------ frame choice


def test_uniform_takes_the_centre_of_equal_segments() -> None:
    data = video(num_frames=30)
    assert frame_indices(decode_video(data, num_frames=1)) == [15]
    assert frame_indices(decode_video(data, num_frames=3)) == [5, 15, 25]
    assert frame_indices(decode_video(data, num_frames=30)) == list(range(30))


def test_uniform_repeats_frames_of_a_short_video_and_decodes_each_once() -> None:
    data = video(num_frames=5)
    frames = decode_video(data, num_frames=8)
    assert frame_indices(frames) == [0, 0, 1, 2, 2, 3, 4, 4]
    np.testing.assert_array_equal(frames[0], frames[1])
    assert _last_stats().decoded <= 5


def test_stride_stops_at_the_end_or_at_num_frames() -> None:
    data = video(num_frames=30)
    assert frame_indices(decode_video(data, num_frames=4, sampling="stride", stride=3)) == [
        0, 3, 6, 9,
    ]  # fmt: skip
    assert frame_indices(decode_video(data, num_frames=10, sampling="stride", stride=5)) == [
        0, 5, 10, 15, 20, 25,
    ]  # fmt: skip
    everything = decode_video(data, num_frames=None, sampling="stride", stride=4)
    assert frame_indices(everything) == list(range(0, 30, 4))


def test_random_clips_are_seeded_and_fit_the_video() -> None:
    data = video(num_frames=40)
    first = decode_video(data, num_frames=4, sampling="random", stride=3, seed=7)
    again = decode_video(data, num_frames=4, sampling="random", stride=3, seed=7)
    np.testing.assert_array_equal(first, again)
    starts = set()
    for seed in range(12):
        got = frame_indices(
            decode_video(data, num_frames=4, sampling="random", stride=3, seed=seed)
        )
        start = got[0]
        assert got == [start, start + 3, start + 6, start + 9]
        assert 0 <= start <= 40 - 10
        starts.add(start)
    assert len(starts) >= 4  # different seeds pick different clips


def test_random_accepts_a_generator() -> None:
    data = video(num_frames=40)
    a = decode_video(data, num_frames=2, sampling="random", seed=np.random.default_rng(5))
    b = decode_video(data, num_frames=2, sampling="random", seed=np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)


def test_random_clip_longer_than_the_video_repeats_the_last_frame() -> None:
    data = video(num_frames=10)
    got = decode_video(data, num_frames=8, sampling="random", stride=2, seed=1)
    assert frame_indices(got) == [0, 2, 4, 6, 8, 9, 9, 9]


# ------------------------------------------------------------------ seeking


def test_late_frames_are_reached_by_seeking_not_by_decoding_from_the_start() -> None:
    data = video(codec="libx264", container="mp4", num_frames=240, gop=12, bframes=2)
    last = decode_video(data, num_frames=1)  # frame 120, in the GOP starting at 120
    assert frame_indices(last) == [120]
    stats = _last_stats()
    assert stats.seeks == 1
    assert stats.decoded <= 1 + 4  # the keyframe itself, plus B-frame reordering delay
    clip = decode_video(data, num_frames=4, sampling="random", stride=2, seed=3)
    start = frame_indices(clip)[0]
    assert frame_indices(clip) == [start + 2 * i for i in range(4)]
    assert _last_stats().decoded <= 12 + 6 + 4  # at most two GOPs' worth, never 240


@pytest.mark.parametrize(("codec", "container"), [("libx264", "mkv"), ("libvpx-vp9", "webm")])
def test_uniform_frames_cost_about_a_gop_each(codec: str, container: str) -> None:
    data = video(codec=codec, container=container, num_frames=240, gop=12, bframes=0)
    frames = decode_video(data, num_frames=8)
    expected = [(2 * i + 1) * 240 // 16 for i in range(8)]
    assert frame_indices(frames) == expected
    stats = _last_stats()
    assert stats.decoded <= sum(j % 12 + 1 for j in expected) + 8 * 4
    assert stats.decoded < 240 // 2


def test_frames_of_one_gop_are_decoded_in_one_pass() -> None:
    data = video(codec="libx264", container="mkv", num_frames=48, gop=24, bframes=2)
    frames = decode_video(data, num_frames=6, sampling="stride", stride=4)
    assert frame_indices(frames) == [0, 4, 8, 12, 16, 20]
    assert _last_stats().seeks == 1


def test_mp4_with_b_frames_seeks_to_the_right_gop() -> None:
    # mp4's index is in decode time, so a seek to a keyframe's pts can land a GOP early;
    # packets before the keyframe are skipped without being decoded.
    data = video(codec="libx264", container="mp4", pts_ms=tuple(VFR_MS), bframes=2)
    assert frame_indices(decode_video(data, num_frames=1)) == [30]
    assert _last_stats().decoded <= 30 - 24 + 1 + 4
    assert all_frames(data) == list(range(60))
    assert _last_stats().decoded == 60  # each frame once, though some seeks land early


@pytest.mark.parametrize(("codec", "container"), [("libx264", "mp4"), ("libx264", "mkv")])
def test_opening_decodes_no_frame_where_the_header_gives_the_size(
    codec: str, container: str
) -> None:
    # FFmpeg's probe decodes a stream's first frames to learn its pixel format unless
    # told to skip them; the pixel format is then still unknown after opening
    import av

    data = video(codec=codec, container=container, num_frames=30, bframes=2)
    with _open(av, data, None) as opened:
        ctx = opened.streams.video[0].codec_context
        assert (ctx.width, ctx.height) == (WIDTH, HEIGHT)
        assert ctx.format is None
    assert frame_indices(decode_video(data, num_frames=3)) == [5, 15, 25]


class _FakeContainer:
    """What `_open` reads of a container: its first video stream's size, and close()."""

    def __init__(self, width: int, options: dict[str, str] | None) -> None:
        ctx = type("Ctx", (), {"width": width, "height": 48 if width else 0})()
        self.streams = type("Streams", (), {"video": [type("S", (), {"codec_context": ctx})()]})()
        self.options = options
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_stream_whose_size_only_decoding_tells_is_probed_again_in_full() -> None:
    opened: list[_FakeContainer] = []

    def fake_open(file: object, mode: str, options: dict[str, str] | None = None) -> object:
        got = _FakeContainer(0 if options else 64, options)  # the lean probe learns no size
        opened.append(got)
        return got

    fake_av = type("FakeAV", (), {"open": staticmethod(fake_open)})
    container = _open(fake_av, b"video bytes", "clip-1")
    assert [c.options for c in opened] == [{"skip_frame": "all"}, None]
    assert opened[0].closed and container is opened[1] and not opened[1].closed


# ------------------------------------------------------------------ output


def test_shape_dtype_and_modes() -> None:
    data = video(num_frames=20)
    rgb = decode_video(data, num_frames=4)
    assert rgb.shape == (4, HEIGHT, WIDTH, 3)
    assert rgb.dtype == np.uint8
    grey = decode_video(data, num_frames=4, mode="L")
    assert grey.shape == (4, HEIGHT, WIDTH, 1)
    assert np.abs(grey[..., 0].astype(int) - rgb[..., 0].astype(int)).max() <= 1
    rgba = decode_video(data, num_frames=4, mode="RGBA")
    assert rgba.shape == (4, HEIGHT, WIDTH, 4)
    assert (rgba[..., 3] == 255).all()
    np.testing.assert_array_equal(rgba[..., :3], rgb)


def test_rgba_keeps_the_alpha_plane() -> None:
    data = video(codec="ffv1", container="mkv", pix_fmt="bgra", alpha=77, num_frames=6)
    frames = decode_video(data, num_frames=3, mode="RGBA")
    assert (frames[..., 3] == 77).all()
    assert frame_indices(frames) == [1, 3, 5]


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area", "nearest"])
def test_resize_exact(interpolation: str) -> None:
    frames = decode_video(
        video(num_frames=20),
        num_frames=4,
        size=(96, 40),
        interpolation=interpolation,  # type: ignore[arg-type]
    )
    assert frames.shape == (4, 96, 40, 3)
    assert frame_indices(frames) == [2, 7, 12, 17]


def test_resize_modes() -> None:
    data = video(num_frames=20)  # 48 x 64 frames
    square = decode_video(data, num_frames=2, size=32)
    assert square.shape == (2, 32, 32, 3)
    cropped = decode_video(data, num_frames=2, size=(48, 48), resize="shorter")
    assert cropped.shape == (2, 48, 48, 3)
    assert frame_indices(cropped) == [5, 15]
    padded = decode_video(data, num_frames=2, size=(64, 64), resize="longer")
    assert padded.shape == (2, 64, 64, 3)
    assert (padded[:, :8] == 0).all() and (padded[:, -8:] == 0).all()
    assert frame_indices(padded[:, 8:-8]) == [5, 15]


def test_out_is_filled_in_place() -> None:
    data = video(num_frames=20)
    batch = np.full((3, 4, 24, 32, 3), 9, dtype=np.uint8)
    got = decode_video(data, num_frames=4, size=(24, 32), out=batch[1])
    assert got is batch[1] or np.shares_memory(got, batch)
    assert frame_indices(batch[1]) == [2, 7, 12, 17]
    assert (batch[0] == 9).all() and (batch[2] == 9).all()


def test_out_with_stride_of_a_short_video_returns_the_filled_rows() -> None:
    out = np.zeros((8, 16, 16, 1), dtype=np.uint8)
    got = decode_video(
        video(num_frames=10), num_frames=8, sampling="stride", stride=3, size=16, mode="L", out=out
    )
    assert got.shape == (4, 16, 16, 1)
    assert np.shares_memory(got, out)
    assert frame_indices(got) == [0, 3, 6, 9]


def test_out_must_match() -> None:
    data = video(num_frames=10)
    with pytest.raises(ValueError, match="needs size"):
        decode_video(data, out=np.zeros((8, 48, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="out must be uint8 of shape"):
        decode_video(data, num_frames=4, size=32, out=np.zeros((8, 32, 32, 3), np.uint8))
    with pytest.raises(ValueError, match="out must be uint8 of shape"):
        decode_video(data, num_frames=4, size=32, out=np.zeros((4, 32, 32, 3), np.float32))
    with pytest.raises(ValueError, match="needs num_frames"):
        decode_video(
            data,
            num_frames=None,
            sampling="stride",
            size=32,
            out=np.zeros((4, 32, 32, 3), np.uint8),
        )


def test_buffers_other_than_bytes() -> None:
    data = video(num_frames=10)
    expected = decode_video(data, num_frames=2)
    for buf in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        np.testing.assert_array_equal(decode_video(buf, num_frames=2), expected)  # type: ignore[arg-type]


def test_a_view_of_a_clip_is_never_copied_whole() -> None:
    # the loader hands a view of a mapped shard: the decoder reads it in pieces (PyAV
    # asks for 32 KiB at a time), where io.BytesIO would hold a copy of the whole clip
    data = video(codec="mjpeg", container="avi", num_frames=60, width=160, height=120, noise=True)
    assert len(data) > 500_000
    view = memoryview(bytearray(data))
    expected = decode_video(data, num_frames=4)
    tracemalloc.start()
    try:
        got = decode_video(view, num_frames=4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, expected)
    held = peak - got.nbytes  # besides the frames returned
    assert held < len(data) // 4, f"{held} bytes held while decoding a {len(data)}-byte clip"


def test_parallel_threads_give_the_same_frames() -> None:
    datas = [video(codec=c, container=k, num_frames=40) for c, k, *_ in CODECS[:6]] * 3
    serial = [decode_video(d, num_frames=5, size=32) for d in datas]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda d: decode_video(d, num_frames=5, size=32), datas))
    for a, b in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sampling": "evenly"}, "sampling must be"),
        ({"num_frames": 0}, "num_frames must be"),
        ({"num_frames": None}, "needs sampling='stride'"),
        ({"num_frames": None, "sampling": "random"}, "needs sampling='stride'"),
        ({"stride": 0}, "stride must be"),
        ({"size": (0, 4)}, "size must be"),
        ({"size": (4, 4, 3)}, "size must be"),
        ({"size": True}, "size must be"),
        ({"resize": "crop"}, "resize must be"),
        ({"interpolation": "lanczos"}, "interpolation must be"),
        ({"mode": "CMYK"}, "mode must be"),
        ({"max_pixels": 0}, "max_pixels must be"),
        ({"size": (10**6, 10**6)}, r"10\^12|1,000,000,000,000 pixels .* max_pixels="),
        ({"size": 65, "max_pixels": 64 * 64}, "4,225 pixels an image, more than max_pixels=4,096"),
    ],
)
def test_bad_options_fail_before_any_decoding(options: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        decode_video(b"", **options)  # type: ignore[arg-type]
    assert not isinstance(info.value, DecodeError)


def test_empty_and_garbage_input() -> None:
    for bad in (b"", b"\x00" * 64, b"RIFF" + b"\xff" * 200, b"not a video at all"):
        with pytest.raises(DecodeError) as info:
            decode_video(bad, sample_id="s9")
        assert info.value.sample_id == "s9"
        assert info.value.format == "video"
        assert "s9" in str(info.value)
        with pytest.raises(DecodeError):
            video_info(bad)
    with pytest.raises(DecodeError, match="expected encoded bytes"):
        decode_video("video.mp4")  # type: ignore[arg-type]


def test_no_video_stream() -> None:
    with pytest.raises(DecodeError, match="no video stream"):
        decode_video(make_audio_only())
    with pytest.raises(DecodeError, match="no video stream"):
        video_info(make_audio_only())


def test_max_pixels_refuses_big_frames_before_decoding() -> None:
    data = video(num_frames=10)
    with pytest.raises(ImageTooLargeError, match="max_pixels") as info:
        decode_video(data, max_pixels=WIDTH * HEIGHT - 1, sample_id="big")
    assert isinstance(info.value, DecodeError)
    assert info.value.sample_id == "big"
    assert decode_video(data, max_pixels=WIDTH * HEIGHT, num_frames=1).shape[0] == 1


#: Streams whose frames (256x192) are larger than their Matroska header says (64x48):
#: h264 and VP8, whose size FFmpeg's lean probe takes from that header.
LYING = [("libx264", "mkv"), ("libvpx", "webm"), ("libvpx", "mkv")]


@functools.cache
def lying(codec: str, container: str, declared: tuple[int, int] = (64, 48)) -> bytes:
    data = make_video(
        codec=codec, container=container, width=256, height=192, num_frames=4, lossless=False
    )
    return declare_size(data, (256, 192), declared)


@pytest.mark.parametrize(("codec", "container"), LYING)
def test_max_pixels_holds_for_frames_larger_than_their_header(codec: str, container: str) -> None:
    """Issue 31: a container that says 64x48 over 256x192 frames passed max_pixels=4096
    (an mkv saying 64x64 over 9600x9600 H.264 frames decoded ~560 MB); video_info
    reported 64x48. Each decoded frame is checked by its own size; video_info reports
    the decoded size."""
    data = lying(codec, container)
    with pytest.raises(
        ImageTooLargeError, match=r"256x192 .*decoded; the stream's header says 64x48"
    ) as info:
        decode_video(data, max_pixels=4096, num_frames=2, sample_id="liar")
    assert info.value.sample_id == "liar"
    with pytest.raises(ImageTooLargeError, match="256x192"):
        video_info(data, max_pixels=4096)
    assert (video_info(data).width, video_info(data).height) == (256, 192)
    # within the limit: frames of their real size, not stretched to the header's
    frames = decode_video(data, num_frames=None, sampling="stride")
    assert frames.shape == (4, 192, 256, 3)
    assert np.array_equal(frames, reference_frames(data))
    assert decode_video(data, num_frames=2, size=(48, 64)).shape == (2, 48, 64, 3)


@pytest.mark.parametrize(("codec", "container"), LYING)
def test_ffmpeg_never_allocates_a_frame_far_over_max_pixels(codec: str, container: str) -> None:
    """FFmpeg's decoder gets a limit near max_pixels: a frame far over it (here 256x192
    under a header of 8x6, with max_pixels=64) is refused by the decoder before it
    allocates the frame, an ImageTooLargeError too (FFmpeg's own check: no frame
    comes out to check)."""
    assert ffmpeg_max_pixels(64) < 256 * 192
    data = lying(codec, container, (8, 6))
    with pytest.raises(ImageTooLargeError, match="max_pixels=64"):
        decode_video(data, max_pixels=64, num_frames=1)
    assert _last_stats().decoded == 0
    with pytest.raises(ImageTooLargeError, match="max_pixels=64"):
        video_info(data, max_pixels=64)


@pytest.mark.parametrize(
    ("codec", "container"), [("libx264", "mkv"), ("libvpx", "webm"), ("mpeg4", "avi")]
)
def test_frames_of_exactly_max_pixels_decode(codec: str, container: str) -> None:
    """FFmpeg counts a frame with its padding and row alignment (a 100x48 frame failed
    its limit of 4,800): the limit it gets leaves room, ours is exact."""
    data = video(codec=codec, container=container, width=100, height=48, num_frames=2)
    assert decode_video(data, max_pixels=4800, num_frames=2).shape == (2, 48, 100, 3)
    with pytest.raises(ImageTooLargeError):
        decode_video(data, max_pixels=4799, num_frames=2)


@pytest.mark.parametrize(
    ("codec", "container"),
    [
        ("libx264", "mkv"),
        ("libvpx-vp9", "webm"),
        ("ffv1", "mkv"),
        ("mjpeg", "avi"),
        ("mpeg4", "avi"),
    ],
)
def test_truncated_video_decodes_the_frames_it_still_holds(codec: str, container: str) -> None:
    data = video(
        codec=codec, container=container, num_frames=60, bframes=2 if codec != "ffv1" else 0
    )
    shorter = 0
    for fraction in (0.5, 0.8, 0.9, 0.95):
        cut = data[: int(len(data) * fraction)]
        try:
            info = video_info(cut)
            got = all_frames(cut)
        except DecodeError:
            continue  # the cut took what the demuxer needs to start (avi: its index)
        assert 0 < info.num_frames <= 60
        shorter += info.num_frames < 60
        assert len(got) == info.num_frames
        # frames that survived, in order: a frame cut short is not one of them
        assert got == sorted(set(got))
        assert set(got) <= set(range(60))
        assert frame_indices(decode_video(cut, num_frames=2)) == [
            got[info.num_frames // 4],
            got[3 * info.num_frames // 4],
        ]
    assert shorter >= 1


def test_avi_that_lost_its_index_is_decoded_from_the_start() -> None:
    # h264 with B-frames in avi: no presentation times, and a cut file has no index to
    # seek with; frames are told apart by decoder output order, from a fresh container.
    data = video(codec="libx264", container="avi", num_frames=60, bframes=2)
    reopened = 0
    for percent in range(60, 100, 4):
        cut = data[: len(data) * percent // 100]
        try:
            n = video_info(cut).num_frames
        except DecodeError:
            continue
        got = all_frames(cut)
        assert len(got) == n
        assert got == sorted(set(got))  # a B-frame whose packet was cut is missing
        reopened += _last_stats().reopens > 0
        wanted = [got[(2 * i + 1) * n // 8] for i in range(4)]
        assert frame_indices(decode_video(cut, num_frames=4)) == wanted
    assert reopened > 0


def test_truncated_mp4_is_a_decode_error() -> None:
    data = video(codec="libx264", container="mp4", num_frames=30)  # the index is at the end
    with pytest.raises(DecodeError, match="not a readable video container"):
        decode_video(data[: len(data) // 2], sample_id="cut")


def test_missing_pyav_is_a_codec_unavailable_error() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["av"] = None  # as if PyAV were not installed
        from ferroload_codec._video import decode_video
        from ferroload_codec._errors import CodecUnavailableError
        try:
            decode_video(b"\\x00\\x00\\x00\\x18ftypmp42")
        except CodecUnavailableError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "pip install ferroload-codec[video]" in result.stdout
    assert issubclass(CodecUnavailableError, ImportError)


def test_docstring_examples_run() -> None:
    from ferroload_codec import _video

    result = doctest.testmod(_video, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2
    assert result.failed == 0


def test_importing_the_codec_package_does_not_import_av() -> None:
    code = "import sys, ferroload_codec, ferroload_codec._video; print('av' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


# ------------------------------------------------------------------ damaged input (property)

SAMPLES = {
    "mp4": video(codec="libx264", container="mp4", num_frames=24, bframes=2),
    "mkv": video(codec="libx264", container="mkv", num_frames=24, bframes=2),
    "webm": video(codec="libvpx-vp9", container="webm", num_frames=24),
    "avi": video(codec="mjpeg", container="avi", num_frames=24),
    "mpeg4": video(codec="mpeg4", container="avi", num_frames=24, bframes=2),
    "avi-h264": video(codec="libx264", container="avi", num_frames=24, bframes=2),
}


def _check_decodes_or_fails_cleanly(data: bytes) -> None:
    try:
        frames = decode_video(data, num_frames=4, size=16)
    except DecodeError:
        return
    assert frames.shape == (4, 16, 16, 3)
    assert frames.dtype == np.uint8


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_random_bytes_never_escape_as_other_errors(data: bytes) -> None:
    _check_decodes_or_fails_cleanly(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(SAMPLES)),
    st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=12),
    st.floats(0, 1),
    st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 300)),
)
def test_damaged_videos_decode_or_raise_decode_error(
    name: str,
    flips: list[tuple[float, int]],
    keep: float,
    cut: tuple[float, int],
) -> None:
    data = bytearray(SAMPLES[name])
    for where, value in flips:
        data[int(where * len(data))] = value
    start = int(cut[0] * len(data))
    del data[start : start + cut[1]]
    data = data[: max(1, int(keep * len(data)))] if keep < 1 else data
    _check_decodes_or_fails_cleanly(bytes(data))


def test_codec_threads_give_the_same_frames(coded: tuple[bytes, int]) -> None:
    data, _ = coded
    for options in (
        {"num_frames": 8},
        {"num_frames": 1},
        {"num_frames": 6, "sampling": "stride", "stride": 7},
        {"num_frames": None, "sampling": "stride"},
        {"num_frames": 5, "sampling": "random", "seed": 3},
        {"num_frames": 4, "size": 24, "resize": "shorter"},
    ):
        one = decode_video(data, **options)  # type: ignore[arg-type]
        for threads in (2, 3):
            np.testing.assert_array_equal(
                decode_video(data, codec_threads=threads, **options),  # type: ignore[arg-type]
                one,
            )


def test_codec_threads_must_be_a_positive_int() -> None:
    for bad in (0, -1, True, 1.5, "2", 65, 10**5):
        with pytest.raises(ValueError, match="codec_threads must be"):
            decode_video(b"", codec_threads=bad)  # type: ignore[arg-type]
