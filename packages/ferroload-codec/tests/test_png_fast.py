"""The lean PNG paths: a batch's parts stacked (libtiff inflates, libspng unfilters), or
each image alone through libspng.

Whatever route an image takes, its pixels are libspng's own, and a damaged image is the
general path's error, never stale or partial pixels.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import DecodeError, ImageDecoder
from ferroload_codec import _png_fast as png_fast
from ferroload_codec._backends import imagecodecs

ic = imagecodecs()
pytestmark = pytest.mark.skipif(
    ic is None or not hasattr(ic, "tiff_decode"), reason="needs imagecodecs with libtiff"
)


def _photo(side: int, mode: str, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side]
    base = np.stack([x * 7 + y, y * 5 + x * 2, (x ^ y) * 3], axis=-1) % 256
    noise = rng.integers(-12, 12, size=base.shape)
    arr = np.clip(base + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(arr).convert(mode)


def _encode(img: Image.Image, **kw: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", **kw)
    return buf.getvalue()


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack_from(">I", png, pos)
        out.append((png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return out


def _build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(
        struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d)) for k, d in chunks
    )
    return b"\x89PNG\r\n\x1a\n" + body


def _filtered(arr: np.ndarray, kinds: list[int]) -> bytes:
    """A PNG of `arr` (h, w, c uint8) whose row r uses filter type `kinds[r]` (0 None,
    1 Sub, 2 Up, 3 Average, 4 Paeth), written the slow, plain way."""
    h, w, c = arr.shape
    prev = np.zeros(w * c, np.int32)
    rows = []
    for r in range(h):
        line = arr[r].reshape(-1).astype(np.int32)
        left = np.concatenate([np.zeros(c, np.int32), line[:-c]])
        up_left = np.concatenate([np.zeros(c, np.int32), prev[:-c]])
        kind = kinds[r]
        if kind == 0:
            pred = np.zeros_like(line)
        elif kind == 1:
            pred = left
        elif kind == 2:
            pred = prev
        elif kind == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - up_left
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - up_left)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, up_left))
        rows.append(bytes([kind]) + ((line - pred) % 256).astype(np.uint8).tobytes())
        prev = line
    color = {1: 0, 3: 2, 4: 6}[c]
    ihdr = struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    return _build([(b"IHDR", ihdr), (b"IDAT", zlib.compress(b"".join(rows))), (b"IEND", b"")])


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the stacked route's libtiff calls, one a part of a batch."""
    calls: list[int] = []
    real = ic.tiff_decode

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(png_fast.LeanPng, "__init__", _init_with(counted))
    return calls


def _init_with(tiff: Any) -> Any:
    real = png_fast.LeanPng.__init__

    def init(self: png_fast.LeanPng, *a: Any, **k: Any) -> None:
        real(self, *a, **k)
        self._tiff = tiff

    return init


def _ref(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    return np.stack([ic.spng_decode(p).reshape(shape) for p in items])


@pytest.mark.parametrize(("mode", "channels"), [("RGB", 3), ("RGBA", 4), ("L", 1)])
@pytest.mark.parametrize("side", [1, 8, 32])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_stacked_route_gives_libspngs_pixels(
    monkeypatch: pytest.MonkeyPatch, mode: str, channels: int, side: int, threads: int
) -> None:
    calls = _counting(monkeypatch)
    items = [_encode(_photo(side, mode, i)) for i in range(40)]
    dec = ImageDecoder((side, side), mode=mode, threads=threads)  # type: ignore[arg-type]
    got = dec.decode_batch(items)
    ref = _ref(items, (side, side, channels))
    assert got.ok.all() and np.array_equal(got.images, ref)
    # 40 images: 5 parts of 8 on one thread, 4 on two (2 a thread)
    assert len(calls) == min(2 * threads, 40 // png_fast.STACK_MIN)
    views = dec.decode_batch([memoryview(p) for p in items])  # a loader's payloads
    assert np.array_equal(views.images, ref)


@pytest.mark.parametrize("first", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_every_filter_type_in_every_row(first: int, channels: int) -> None:
    """Each image's first row sits under the previous image's last in the stacked PNG:
    whatever filter it uses (Up, Average and Paeth read the row above), it decodes as
    alone; the other rows use every type."""
    rng = np.random.default_rng(first * 10 + channels)
    items = []
    for _ in range(16):
        arr = rng.integers(0, 256, (12, 12, channels), dtype=np.uint8)
        kinds = [first, *rng.integers(0, 5, 11).tolist()]
        items.append(_filtered(arr, kinds))
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    got = ImageDecoder(12, mode=mode, threads=1).decode_batch(items)  # type: ignore[arg-type]
    assert np.array_equal(got.images, _ref(items, (12, 12, channels)))


def test_chunk_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ancillary chunks (text, a compressed one too, physical size) and an image data
    split over several IDAT chunks stay on the stacked route; a palette chunk, IDAT chunks
    apart, or an interlaced image go one by one through libspng or the general path, to
    libspng's pixels or error, wherever they sit in the batch."""
    calls = _counting(monkeypatch)
    base = [_encode(_photo(32, "RGB", i)) for i in range(16)]
    head, idat, end = _chunks(base[0])[0], _chunks(base[0])[1][1], _chunks(base[0])[-1]
    text = (b"tEXt", b"Comment\x00hello")
    ztxt = (b"zTXt", b"Comment\x00\x00" + zlib.compress(b"x" * 1000))
    phys = (b"pHYs", struct.pack(">IIB", 2835, 2835, 1))
    stacked = [
        _build([head, text, (b"IDAT", idat), ztxt, end]),
        _build([head, phys, (b"IDAT", idat[:50]), (b"IDAT", idat[50:]), end]),
    ]
    alone = [
        _build([head, (b"PLTE", bytes(range(9))), (b"IDAT", idat), end]),
        _build([head, (b"IDAT", idat[:50]), text, (b"IDAT", idat[50:]), end]),
        _build([(b"IHDR", head[1][:12] + b"\x01"), (b"IDAT", idat), end]),
    ]
    items = [*stacked, *base[2:8], alone[0], *base[8:12], alone[1], alone[2], *base[12:]]
    dec = ImageDecoder((32, 32), threads=1)
    got = dec.decode_batch(items, on_error="skip", sample_ids=[f"s{i}" for i in range(19)])
    for i, item in enumerate(items):
        try:
            want = ic.spng_decode(item)
        except Exception:
            assert not got.ok[i] and not got.images[i].any(), i
        else:
            assert got.ok[i] and np.array_equal(got.images[i], want), i
    assert not got.ok[14]  # non-interlaced data under an interlaced header
    assert len(calls) == 2  # 19 images: two parts, each stacked


def test_damaged_streams_are_the_general_paths_errors() -> None:
    """A flipped byte in the compressed data, a stream that inflates to fewer filtered
    bytes than the header says, a truncated one and a bad filter type: each fails its
    part of the batch, whose images then decode one by one: the damaged one is an error
    named by its sample, its image zero-filled, never another image's pixels; the rest
    decode. One that inflates to more is libspng's pixels (it reads the rows it needs)."""
    good = [_encode(_photo(32, "RGB", i)) for i in range(12)]
    head, idat, tail = _chunks(good[0])[0], _chunks(good[0])[1][1], _chunks(good[0])[-1]
    flipped = bytearray(idat)
    flipped[len(idat) // 2] ^= 0x55
    raw = zlib.decompress(idat)
    bad = [
        _build([head, (b"IDAT", bytes(flipped)), tail]),
        _build([head, (b"IDAT", zlib.compress(raw[:-97])), tail]),
        _build([head, (b"IDAT", idat[: len(idat) // 2]), tail]),
        _build([head, (b"IDAT", zlib.compress(b"\x07" + raw[1:])), tail]),
    ]
    items = [*good[:4], *bad, *good[4:]]
    ids = [f"s{i}" for i in range(len(items))]
    for threads in (1, 2):
        out = np.full((len(items), 32, 32, 3), 7, np.uint8)
        res = ImageDecoder((32, 32), threads=threads).decode_batch(
            items, out=out, on_error="skip", sample_ids=ids
        )
        assert res.ok.tolist() == [True] * 4 + [False] * 4 + [True] * 8
        assert [e.sample_id for e in res.errors] == ids[4:8]
        assert not res.images[4:8].any()
        assert np.array_equal(res.images[[*range(4), *range(8, 16)]], _ref(good, (32, 32, 3)))
    longer = _build([head, (b"IDAT", zlib.compress(raw + raw[-97:])), tail])
    dec = ImageDecoder((32, 32), threads=1)
    got = dec.decode_batch([longer, *good[:9]])
    assert np.array_equal(got.images[0], ic.spng_decode(longer))
    with pytest.raises(DecodeError, match="'s0'"):
        dec.decode_batch([bad[0], *good[:9]], sample_ids=ids[:10])


def test_without_libtiff_each_image_goes_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """An imagecodecs built without libtiff: the per-image route, the same pixels."""
    monkeypatch.setattr(png_fast.LeanPng, "__init__", _init_with(None))
    items = [_encode(_photo(16, "RGB", i)) for i in range(20)]
    got = ImageDecoder(16, threads=2).decode_batch(items)
    assert np.array_equal(got.images, _ref(items, (16, 16, 3)))


def test_large_images_and_small_batches_go_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over `STACK_MAX_RAW` filtered bytes an image, or fewer than `STACK_MIN` images a
    batch: one libspng call an image, the same pixels."""
    calls = _counting(monkeypatch)
    big = [_encode(_photo(160, "RGB", i)) for i in range(8)]  # 160 * 481 > 65,535
    got = ImageDecoder(160, threads=1).decode_batch(big)
    assert np.array_equal(got.images, _ref(big, (160, 160, 3)))
    small = [_encode(_photo(8, "RGB", i)) for i in range(png_fast.STACK_MIN - 1)]
    got = ImageDecoder(8, threads=1).decode_batch(small)
    assert np.array_equal(got.images, _ref(small, (8, 8, 3)))
    assert calls == []


def test_a_png_batch_loads_no_jpeg_library() -> None:
    """Decoding a batch of PNGs never imports a JPEG binding: its import (~8 ms for
    PyTurboJPEG) would only delay a PNG loader's first batch."""
    code = """
import io, sys
import numpy as np
from PIL import Image
from ferroload_codec import ImageDecoder
buf = io.BytesIO()
Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "PNG")
for threads in (1, 2):
    assert ImageDecoder((8, 8), threads=threads).decode_batch([buf.getvalue()] * 4).ok.all()
print(sorted(m for m in ("turbojpeg", "simplejpeg") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"], out.stdout + out.stderr


def test_preload_loads_a_formats_libraries_in_the_background() -> None:
    """`preload("png")` loads libspng and libtiff (not a JPEG library) on a thread of its
    own, once; `preload("jpg")` the JPEG binding; an unknown extension nothing. A fork
    waits for a preload still running."""
    code = """
import os, sys, threading
import ferroload_codec as fc
from ferroload_codec import _backends
assert not any(m.startswith("imagecodecs") for m in sys.modules)
assert fc.preload("PNG") is True and fc.preload("png") is False
assert fc.preload("txt") is False
pid = os.fork()  # waits for the preload (a child must not inherit its import lock)
if pid == 0:
    os._exit(0 if "imagecodecs._spng" in sys.modules else 3)
assert os.waitpid(pid, 0)[1] == 0
_backends._join_preloads()
print(sorted(m for m in ("imagecodecs._spng", "imagecodecs._tiff", "turbojpeg", "simplejpeg")
             if m in sys.modules))
assert fc.preload("jpeg") is True and fc.preload("jpg") is False
_backends._join_preloads()
print(any(m in sys.modules for m in ("turbojpeg", "simplejpeg")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["['imagecodecs._spng', 'imagecodecs._tiff']", "True"]
