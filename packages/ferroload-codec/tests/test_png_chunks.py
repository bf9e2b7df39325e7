"""PNG ancillary chunks: compressed text and ICC profiles are never inflated (issue 13)."""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import ImageDecoder, decode_image
from ferroload_codec._sniff import png_strip_inflated

GIB = 1 << 30


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _zeros_zlib(size: int) -> bytes:
    """A zlib stream of `size` zero bytes (a multiple of 1 MiB), built in about 1 MB of
    memory: one fully flushed 1 MiB deflate block, repeated."""
    piece_len = 1 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = comp.compress(bytes(piece_len)) + comp.flush(zlib.Z_FULL_FLUSH)
    end = comp.flush()
    adler = 1
    zeros = bytes(piece_len)
    for _ in range(size // piece_len):
        adler = zlib.adler32(zeros, adler)
    return b"\x78\xda" + piece * (size // piece_len) + end + struct.pack(">I", adler)


def _png(mode: str = "RGB") -> bytes:
    arr = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    img = Image.fromarray(arr).convert(mode)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _with_chunks(png: bytes, *chunks: bytes) -> bytes:
    """`png` with `chunks` inserted after IHDR (8 + 25 bytes)."""
    return png[:33] + b"".join(chunks) + png[33:]


def _before_iend(png: bytes, *chunks: bytes) -> bytes:
    """`png` with `chunks` inserted before IEND (its last 12 bytes)."""
    return png[:-12] + b"".join(chunks) + png[-12:]


def test_zeros_zlib_is_what_it_says() -> None:
    z = _zeros_zlib(4 << 20)
    assert zlib.decompress(z) == bytes(4 << 20)


def test_strip_keeps_clean_pngs_uncopied_and_drops_compressed_chunks() -> None:
    png = _png()
    assert png_strip_inflated(png) is png
    view = memoryview(png)
    assert png_strip_inflated(view) is view
    text = _chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"v"))
    icc = _chunk(b"iCCP", b"p\x00\x00" + zlib.compress(b"x" * 100))
    itxt = _chunk(b"iTXt", b"k\x00\x01\x00\x00\x00" + zlib.compress(b"v"))
    plain = _chunk(b"tEXt", b"k\x00v")
    bloated = _with_chunks(png, text, plain, icc) + itxt  # iTXt after IEND: never reached
    assert bytes(png_strip_inflated(bloated)) == _with_chunks(png, plain) + itxt
    assert bytes(png_strip_inflated(memoryview(bloated))) == _with_chunks(png, plain) + itxt
    # a damaged chunk list stops the walk and leaves the rest to the decoder
    broken = png[:33] + struct.pack(">I", 1 << 31) + b"zTXt"
    assert png_strip_inflated(broken) == png[:33]


@pytest.mark.parametrize("mode", ["RGB", "P"])
def test_compressed_chunks_leave_the_pixels_alone(mode: str) -> None:
    png = _png(mode)
    icc = _chunk(b"iCCP", b"p\x00\x00" + zlib.compress(b"x" * 100))
    text = _chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"v"))
    bloated = _with_chunks(png, icc, text)
    after = _before_iend(png, text)  # text after the image data
    assert png_strip_inflated(after) == png
    assert np.array_equal(decode_image(bloated), decode_image(png))
    dec = ImageDecoder((8, 8))
    got = dec.decode_batch([bloated, memoryview(bloated), after, png]).images
    assert all(np.array_equal(got[i], got[3]) for i in range(3))
    dec.close()


_BOMB_SCRIPT = """
import resource, sys, time
import numpy as np
from ferroload_codec import DecodeError, ImageDecoder, decode_image

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

bomb, clean = (open(p, "rb").read() for p in sys.argv[1:3])
want = decode_image(clean)
dec, exif = ImageDecoder((8, 8), threads=1), ImageDecoder((8, 8), exif=True, threads=1)
base = peak()
t = time.perf_counter()
a = decode_image(bomb)
b = dec.decode_batch([bomb, memoryview(bomb)]).images
try:
    c = exif.decode(bomb)
except DecodeError as exc:
    c = str(exc)
took = time.perf_counter() - t
print(took, peak() - base)
assert np.array_equal(a, want) and np.array_equal(b[0], want) and np.array_equal(b[1], want)
assert isinstance(c, str) or np.array_equal(c, want), c
"""


@pytest.mark.parametrize("mode", ["RGB", "P"])  # libspng, and Pillow (palette)
def test_compressed_chunk_bomb_stays_small(mode: str, tmp_path: Path) -> None:
    zeros = _zeros_zlib(GIB)  # about 1 MB
    bomb = _with_chunks(
        _before_iend(_png(mode), _chunk(b"zTXt", b"Comment\x00\x00" + zeros)),
        _chunk(b"zTXt", b"Raw profile type exif\x00\x00" + zeros),
        _chunk(b"iCCP", b"icc\x00\x00" + zeros),
    )
    (tmp_path / "bomb.png").write_bytes(bomb)
    (tmp_path / "clean.png").write_bytes(_png(mode))
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            _BOMB_SCRIPT,
            str(tmp_path / "bomb.png"),
            str(tmp_path / "clean.png"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    seconds, grown = run.stdout.split()
    print(f"bomb ({mode}): {float(seconds):.3f} s, peak RSS +{int(grown) / 2**20:.1f} MiB")
    assert int(grown) < 100 * 2**20
