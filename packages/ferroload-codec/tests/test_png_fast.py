"""The lean PNG path's inflate route: libdeflate inflates, libspng unfilters a stored copy.

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
    ic is None or not hasattr(ic, "deflate_decode"), reason="needs imagecodecs with libdeflate"
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


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the inflate route's libdeflate calls (the lean path binds it when built)."""
    calls: list[int] = []
    real = ic.deflate_decode

    class Counted:
        def __getattr__(self, name: str) -> Any:
            return getattr(ic, name)

        @staticmethod
        def deflate_decode(*a: Any, **k: Any) -> Any:
            calls.append(1)
            return real(*a, **k)

    monkeypatch.setattr(png_fast, "imagecodecs", lambda: Counted())
    return calls


@pytest.mark.parametrize(("mode", "channels"), [("RGB", 3), ("RGBA", 4), ("L", 1)])
@pytest.mark.parametrize("side", [1, 8, 32, 64])
def test_the_inflate_route_gives_libspngs_pixels(
    monkeypatch: pytest.MonkeyPatch, mode: str, channels: int, side: int
) -> None:
    calls = _counting(monkeypatch)
    items = [_encode(_photo(side, mode, i)) for i in range(6)]
    dec = ImageDecoder((side, side), mode=mode, threads=1)  # type: ignore[arg-type]
    got = dec.decode_batch(items)
    ref = np.stack([ic.spng_decode(p).reshape(side, side, channels) for p in items])
    assert got.ok.all() and np.array_equal(got.images.reshape(ref.shape), ref)
    assert len(calls) == len(items)  # every one of them took the route
    views = dec.decode_batch([memoryview(p) for p in items])  # a loader's payloads
    assert np.array_equal(views.images, got.images)
    # on several threads the GIL hand-overs cost more than libdeflate saves: libspng
    two = ImageDecoder((side, side), mode=mode, threads=2).decode_batch(items)  # type: ignore[arg-type]
    assert len(calls) == 2 * len(items) and np.array_equal(two.images, got.images)


def test_other_pngs_take_libspng_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interlaced, several IDAT chunks, or more filtered bytes than a stored block holds:
    libspng alone, the same pixels."""
    calls = _counting(monkeypatch)
    img = _photo(32, "RGB", 1)
    interlaced = _encode(img, optimize=False)
    # Pillow writes no Adam7; build one: the same image through libspng is not possible,
    # so check the route only refuses (the IHDR's interlace byte), then decodes as before
    chunks = _chunks(interlaced)
    laced = _build([(chunks[0][0], chunks[0][1][:12] + b"\x01"), *chunks[1:]])
    split = _chunks(interlaced)
    idat = split[1][1]
    two = _build([split[0], (b"IDAT", idat[:100]), (b"IDAT", idat[100:]), split[-1]])
    dec = ImageDecoder((32, 32), threads=1)
    res = dec.decode_batch([two, laced], on_error="skip")
    assert calls == []
    assert np.array_equal(res.images[0], ic.spng_decode(interlaced))
    assert not res.ok[1]  # non-interlaced data under an interlaced header: libspng's error
    big = _encode(_photo(160, "RGB", 2))  # 160 * (1 + 480) filtered bytes > 65,535
    got = ImageDecoder((160, 160), threads=1).decode_batch([big])
    assert calls == [] and np.array_equal(got.images[0], ic.spng_decode(big))


def test_damaged_streams_are_the_general_paths_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flipped byte in the compressed data (libdeflate fails, or its Adler-32 does), a
    stream that inflates to fewer filtered bytes than the header says, and a truncated
    stream: each is an error named by its sample, its row zero-filled, never the previous
    batch's pixels. One that inflates to more goes to libspng as it is, which reads the
    rows it needs (as before the route existed)."""
    good = _encode(_photo(32, "RGB", 3))
    head, idat, tail = _chunks(good)[0], _chunks(good)[1][1], _chunks(good)[-1]
    flipped = bytearray(idat)
    flipped[len(idat) // 2] ^= 0x55
    raw = zlib.decompress(idat)
    longer = zlib.compress(raw + raw[-97:])
    shorter = zlib.compress(raw[:-97])
    bad = [
        _build([head, (b"IDAT", bytes(flipped)), tail]),
        _build([head, (b"IDAT", shorter), tail]),
        _build([head, (b"IDAT", idat[: len(idat) // 2]), tail]),
    ]
    dec = ImageDecoder((32, 32), threads=1)
    out = np.full((len(bad) + 1, 32, 32, 3), 7, np.uint8)
    res = dec.decode_batch(
        [*bad, good], out=out, on_error="skip", sample_ids=[f"s{i}" for i in range(len(bad) + 1)]
    )
    assert res.ok.tolist() == [False] * len(bad) + [True]
    assert [e.sample_id for e in res.errors] == [f"s{i}" for i in range(len(bad))]
    assert not res.images[: len(bad)].any()
    assert np.array_equal(res.images[-1], ic.spng_decode(good))
    extra = _build([head, (b"IDAT", longer), tail])
    assert np.array_equal(dec.decode_batch([extra]).images[0], ic.spng_decode(extra))
    with pytest.raises(DecodeError, match="'s0'"):
        dec.decode_batch(bad[:1], sample_ids=["s0"])


def test_the_stored_copy_is_a_valid_png() -> None:
    """The prefix the route builds, with the filtered rows, a zlib trailer and IEND, is
    a PNG that zlib and Pillow read as the same image."""
    img = _photo(8, "RGB", 4)
    raw = zlib.decompress(_chunks(_encode(img))[1][1])
    prefix, crc = png_fast._stored_prefix(8, 8, 2, len(raw))
    adler = struct.pack(">I", zlib.adler32(raw))
    png = prefix + raw + adler + struct.pack(">I", zlib.crc32(adler, zlib.crc32(raw, crc)))
    png += png_fast._IEND
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), np.asarray(img))


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
