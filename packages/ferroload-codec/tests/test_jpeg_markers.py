"""A JPEG's size is read by libjpeg's own marker grammar, and no output holds pixels the
decoder did not write (issue 31, point 1).

The frame header is read in Python (one libjpeg-turbo call an image); a walk that took a
standalone marker (RSTn, TEM) or a stray FF 00 for a segment with a length could land on
a fake frame header planted after the image and size the output from it, and
libjpeg-turbo then decoded the real image into one corner of a reused batch buffer. Each
case below plants one thing libjpeg passes over or stops at, and a fake 64x64 frame
header where a walk that read a length there would land.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import DecodeError, ImageDecoder, decode_image, image_info
from ferroload_codec._backends import simplejpeg
from ferroload_codec._sniff import jpeg_frame
from ferroload_codec._turbo import PIXEL_FORMATS, TurboError
from ferroload_core import JPEG_MAGIC, JPEG_SOF_MARKERS

from ._jpegs import system_turbojpeg, use_jpeg_backend


def _real(side: int = 8) -> bytes:
    rng = np.random.default_rng(31)
    y, x = np.mgrid[0:side, 0:side] * 8 // side
    noise = rng.integers(0, 9, (side, side, 3))
    img = np.stack([x * 30, y * 30, 255 - (x + y) * 15], axis=-1) + noise
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8)).save(buf, "JPEG", quality=95)
    return buf.getvalue()


#: A real 8x8 JPEG (APP0, DQT, SOF0, DHT, SOS) and what Pillow decodes of it.
REAL = _real()
#: A real 64x64 JPEG, the fake frame header's size.
REAL_64 = _real(64)
CLEAN = np.asarray(Image.open(io.BytesIO(REAL)).convert("RGB"))
#: A baseline frame header of 64x64, three components: the fake one.
FAKE = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, 64, 64, 3) + bytes.fromhex("011100021101031101")


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload


#: What is planted, and whether libjpeg decodes the image behind it (True) or fails.
PLANTED: dict[str, tuple[bytes, bool]] = {
    **{f"RST{k}": (bytes((0xFF, 0xD0 + k)), True) for k in range(8)},
    "TEM": (b"\xff\x01", True),
    "FF00": (b"\xff\x00", True),  # a stuffed zero: "extraneous bytes", a warning
    "FF00 x3": (b"\xff\x00" * 3, True),
    "fill FFFF": (b"\xff\xff", True),  # fill bytes before the next marker
    "stray bytes": (b"\x12\x34\x56", True),  # "extraneous bytes", a warning
    "FF FF00": (b"\xff\xff\x00", True),
    "APP5": (_segment(0xE5, b"hello"), True),
    "APP15": (_segment(0xEF, b"\xff\xd9\xff\xc0"), True),  # markers inside a payload
    "COM": (_segment(0xFE, b"a comment"), True),
    "APP1 length 0": (b"\xff\xe1\x00\x00", True),  # libjpeg skips nothing, reads on
    "COM length 1": (b"\xff\xfe\x00\x01", True),
    "DNL": (_segment(0xDC, b"\x00\x08"), True),
    "DRI": (_segment(0xDD, b"\x00\x00"), True),
    "RST0 FF00 TEM": (b"\xff\xd0\xff\x00\xff\x01", True),
    **{f"SOF{m - 0xC0}": (bytes((0xFF, m)) + FAKE[2:], False) for m in sorted(JPEG_SOF_MARKERS)},
    "second SOI": (b"\xff\xd8", False),
    "EOI": (b"\xff\xd9", False),
    "SOS before SOF": (_segment(0xDA, bytes.fromhex("010100003f00")), False),
    "DHT length 0": (b"\xff\xc4\x00\x00", False),
    "JPG": (_segment(0xC8, b"\x00\x00"), False),
    "DHP": (_segment(0xDE, FAKE[4:]), False),
    "EXP": (_segment(0xDF, b"\x00"), False),
    "JPG0": (_segment(0xF0, b"\x00\x00"), False),
    "JPG13": (_segment(0xFD, b"\x00\x00"), False),
    "reserved 02": (_segment(0x02, b"\x00\x00"), False),
    "reserved BF": (_segment(0xBF, b"\x00\x00"), False),
}


def plant(stray: bytes, at: int) -> bytes:
    """`REAL` with `stray` at offset `at`, and, after its end, a fake 64x64 frame header
    where a walk that read the two bytes after the stray marker as its length would land."""
    data = REAL[:at] + stray + REAL[at:]
    land = at + 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    if land > len(data):
        data += bytes(land - len(data)) + FAKE + b"\xff\xda"
    return data


def _sof_offset() -> int:
    return REAL.index(b"\xff\xc0")


PLACES = {"after SOI": 2, "before SOF": _sof_offset()}


def cases() -> Iterator[tuple[str, bytes, bool]]:
    for name, (stray, decodes) in PLANTED.items():
        for where, at in PLACES.items():
            data = plant(stray, at)
            # libjpeg reads FF D8 12 34 as a JPEG, Pillow and ferroload's sniff do not
            yield f"{name} {where}", data, decodes and data[:3] == JPEG_MAGIC


CASES = list(cases())


@pytest.fixture(params=["system", "bundled"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each case on the system's libjpeg-turbo (PyTurboJPEG's library) and on the one
    simplejpeg's wheel bundles."""
    return use_jpeg_backend(str(request.param), monkeypatch)


def _pillow(data: bytes) -> np.ndarray | None:
    try:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    except Exception:
        return None


def _outcome(fn: Callable[[], np.ndarray]) -> np.ndarray | None:
    try:
        return fn()
    except DecodeError:
        return None


@pytest.mark.parametrize(("name", "data", "decodes"), CASES, ids=[c[0] for c in CASES])
def test_every_marker_libjpeg_passes_over_or_stops_at(
    name: str, data: bytes, decodes: bool, backend: str
) -> None:
    """The image behind the planted marker decodes to Pillow's pixels of the real image,
    or the whole file is a `DecodeError`, as libjpeg's grammar says; a batch gives the
    same pixels whatever its buffer held before; `image_info` agrees with the decode."""
    got = _outcome(lambda: decode_image(data))
    if not decodes:
        assert got is None, "libjpeg fails on this file: it must not decode"
        with pytest.raises(DecodeError):
            image_info(data)
        # after a clean file of the output size, the batch takes the lean path: at 64x64
        # the walk there reads the fake frame header too, and libjpeg refuses the file
        for size, first in (((8, 8), REAL), ((64, 64), REAL_64)):
            with pytest.raises(DecodeError):
                ImageDecoder(size, threads=1).decode_batch([first, data])
        return
    pil = _pillow(data)
    if pil is not None:  # where Pillow reads it (not TEM), the same pixels
        assert np.array_equal(pil, CLEAN)
    if got is None:
        # simplejpeg stops at libjpeg's "extraneous bytes" warning (FF 00), Pillow takes
        # the file over and refuses the TEM behind it: refused, not misread
        assert backend == "bundled" and pil is None
        return
    assert np.array_equal(got, CLEAN)
    assert image_info(data)[1:] == (8, 8)
    assert jpeg_frame(data) == (8, 8, 3)
    for size in ((8, 8), (64, 64), (16, 16)):
        dec = ImageDecoder(size, threads=1)
        outs = []
        for fill in (0, 255, 77):
            out = np.full((2, *size, 3), fill, np.uint8)
            outs.append(dec.decode_batch([data, REAL], out=out).images.copy())
            # the clean file first: at 8x8 the batch takes the lean path (`_jpeg_fast`),
            # which decodes `data` too where its segments follow each other plainly
            out = np.full((2, *size, 3), fill, np.uint8)
            outs.append(dec.decode_batch([REAL, data], out=out).images[::-1].copy())
        assert all(np.array_equal(o, outs[0]) for o in outs[1:]), size
        assert np.array_equal(outs[0][0], outs[0][1]), size  # as the clean file
        dec.close()


def test_the_issue_repro_no_longer_shows_the_previous_batch(backend: str) -> None:
    """Issue 31's file: the real 8x8 behind a stray RST0, a fake 64x64 frame after its
    end. It decoded as 64x64, 94-100% of it the previous batch's pixels."""
    data = plant(b"\xff\xd0", 2)
    assert data.index(FAKE) > len(REAL)
    dec = ImageDecoder((64, 64), threads=1)
    green = np.zeros((1, 64, 64, 3), np.uint8)
    green[..., 1] = 255
    first = dec.decode_batch([data], out=green).images.copy()
    again = dec.decode_batch([data], out=np.zeros((1, 64, 64, 3), np.uint8)).images
    assert np.array_equal(first, again)
    assert np.array_equal(first, dec.decode_batch([REAL]).images)
    assert decode_image(data).shape == (8, 8, 3) and image_info(data)[1:] == (8, 8)


@pytest.mark.parametrize("shape", [(64, 64, 3), (9, 8, 3), (8, 9, 1), (12, 10, 4)])
def test_an_output_the_image_does_not_fill_is_an_error(shape: tuple[int, int, int]) -> None:
    """Whatever sized the output, libjpeg-turbo's binding never hands one back that the
    image did not fill: the system's writes a smaller image into the output's corner
    (it checks the last pixel, and libjpeg's header where it is unchanged), simplejpeg
    reports the size it decoded."""
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[shape[2]]
    sj = simplejpeg()
    assert sj is not None
    libs = [sj, system_turbojpeg()]
    for lib in libs:
        dst = np.full(shape, 200, np.uint8)
        with pytest.raises(TurboError):
            lib.decode_into(REAL, dst, PIXEL_FORMATS[mode])
        ok = np.full((8, 8, shape[2]), 90, np.uint8)
        lib.decode_into(REAL, ok, PIXEL_FORMATS[mode])
        if mode == "RGB":
            assert np.array_equal(ok, CLEAN)


def test_an_image_whose_last_pixel_is_the_canary_still_decodes() -> None:
    """The system binding's canary may be what the image's last pixel really is: its
    header then confirms the size, and the image decodes."""
    tj = system_turbojpeg()
    hits = 0
    for v in range(256):
        buf = io.BytesIO()
        Image.new("L", (8, 8), v).save(buf, "JPEG", quality=100)
        data = buf.getvalue()
        dst = np.zeros((8, 8, 1), np.uint8)
        tj.decode_into(data, dst, PIXEL_FORMATS["L"])
        hits += int(dst[-1, -1, 0] == 0x5A)
        assert np.array_equal(dst[..., 0], np.asarray(Image.open(io.BytesIO(data))))
    assert hits >= 1  # one of them ended on the canary's value
