from __future__ import annotations

import contextlib
import io
import os
import struct
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import imagecodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

import ferroload_codec._image as image_module
import ferroload_codec._turbo as turbo_module
from ferroload_codec import (
    DecodeError,
    ImageDecoder,
    ImageTooLargeError,
    UnsupportedFormatError,
    backends,
    decode_image,
    decode_images,
    image_info,
)
from ferroload_codec._backends import simplejpeg, turbojpeg
from ferroload_codec._sniff import JPEG_MAX_SEGMENTS, jpeg_frame
from ferroload_codec._turbo import PIXEL_FORMATS, TurboError
from ferroload_core import FerroloadError

from ._jpegs import system_turbojpeg, thread_caps

RNG = np.random.default_rng(0)


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth, photo-like RGB image (gradients + mild noise): JPEG-friendly content."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack(
        [
            128 + 100 * np.sin(x / (7 + seed % 5) + r.uniform(0, 6)),
            128 + 100 * np.cos(y / (11 + seed % 3)),
            255 * (x + y) / (h + w),
        ],
        axis=-1,
    )
    return np.clip(img + r.normal(0, 4, img.shape), 0, 255).astype(np.uint8)


def encode(img: Image.Image | np.ndarray, fmt: str, **kw: Any) -> bytes:
    if isinstance(img, np.ndarray):
        img = Image.fromarray(img)
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def pil_decode(data: bytes, mode: str = "RGB") -> np.ndarray:
    arr = np.asarray(Image.open(io.BytesIO(data)).convert(mode))
    return arr[..., None] if arr.ndim == 2 else arr


def mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


JPEG = encode(photo(256, 256), "JPEG", quality=90)
PNG = encode(photo(40, 60, 1), "PNG")


@pytest.fixture(params=["active", "bundled"])
def jpeg_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a JPEG test on the libjpeg-turbo in use here (the system's where installed)
    and again on the one bundled in simplejpeg's wheel, the path of a machine without
    libturbojpeg."""
    if request.param == "bundled":
        monkeypatch.setattr(image_module, "jpeg", simplejpeg)
    return str(request.param)


# ------------------------------------------------------------------ formats and modes


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_jpeg_matches_pillow_exactly_without_resize(mode: str, jpeg_path: str) -> None:
    got = decode_image(JPEG, mode=mode)  # type: ignore[arg-type]
    assert got.dtype == np.uint8
    assert got.shape == (256, 256, {"RGB": 3, "L": 1, "RGBA": 4}[mode])
    # the same libjpeg-turbo underneath; greyscale via Y differs from Pillow's RGB->L by rounding
    assert mad(got, pil_decode(JPEG, mode)) <= (1.0 if mode == "L" else 0.0)


def _sources() -> dict[str, tuple[bytes, str]]:
    """name -> (encoded bytes, Pillow mode to compare against)."""
    rgb = photo(30, 50, 2)
    rgba = np.dstack([rgb, np.linspace(0, 255, 30 * 50).reshape(30, 50).astype(np.uint8)])
    grey = rgb[..., 1]
    pal = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 0
    grey16 = (grey.astype(np.uint16) * 257 + 3).astype(np.uint16)
    return {
        "png-rgb": (encode(rgb, "PNG"), "RGB"),
        "png-rgba": (encode(rgba, "PNG"), "RGBA"),
        "png-grey": (encode(grey, "PNG"), "L"),
        "png-palette": (encode(pal, "PNG"), "RGB"),
        "png-palette-transparent": (encode(pal_t, "PNG", transparency=0), "RGBA"),
        "png-grey-alpha": (encode(Image.fromarray(rgba).convert("LA"), "PNG"), "LA"),
        "png-interlaced": (encode(rgb, "PNG", optimize=False, interlace=1), "RGB"),
        "png-16bit-grey": (encode(Image.fromarray(grey16), "PNG"), "I;16"),
        "jpeg-grey": (encode(grey, "JPEG", quality=95), "L"),
        "jpeg-cmyk": (encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=95), "CMYK"),
        "jpeg-progressive": (encode(rgb, "JPEG", quality=90, progressive=True), "RGB"),
        # WebP and TIFF are made (and read back for reference) with imagecodecs, which
        # ships libwebp and libtiff: a Pillow built from source may lack them.
        "webp-lossless": (imagecodecs.webp_encode(rgb, lossless=True), "RGB"),
        "webp-rgba": (imagecodecs.webp_encode(rgba, lossless=True), "RGBA"),
        "webp-lossy": (imagecodecs.webp_encode(rgb, level=90), "RGB"),
        "gif": (encode(pal, "GIF"), "P"),
        "bmp": (encode(rgb, "BMP"), "RGB"),
        "tiff": (imagecodecs.tiff_encode(rgb), "RGB"),
        "tiff-rgba": (imagecodecs.tiff_encode(rgba), "RGBA"),
    }


def reference(name: str, data: bytes) -> Image.Image:
    """The source as a Pillow image: decoded by Pillow, or by imagecodecs for the formats
    a Pillow may lack."""
    if name.startswith("webp"):
        return Image.fromarray(imagecodecs.webp_decode(data))
    if name.startswith("tiff"):
        return Image.fromarray(imagecodecs.tiff_decode(data))
    return Image.open(io.BytesIO(data))


SOURCES = _sources()


@pytest.mark.parametrize("name", list(SOURCES))
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_every_source_converts_like_pillow(name: str, mode: str) -> None:
    data, src_mode = SOURCES[name]
    got = decode_image(data, mode=mode)  # type: ignore[arg-type]
    im = reference(name, data)
    if src_mode == "I;16":
        ref = (np.asarray(im, dtype=np.uint32) >> 8).astype(np.uint8)
        ref = np.asarray(Image.fromarray(ref).convert(mode))
    elif src_mode == "P" or (im.mode == "P" and "transparency" in im.info):
        ref = np.asarray(im.convert("RGBA").convert(mode))
    else:
        ref = np.asarray(im.convert(mode))
    ref = ref[..., None] if ref.ndim == 2 else ref
    assert got.shape == ref.shape
    assert mad(got, ref) <= 0.5, name  # luma rounding may differ by one level here and there


def test_sixteen_bit_keeps_the_high_byte() -> None:
    data, _ = SOURCES["png-16bit-grey"]
    got = decode_image(data, mode="L")[..., 0]
    raw = np.asarray(Image.open(io.BytesIO(data)), dtype=np.uint32)
    assert np.array_equal(got, (raw >> 8).astype(np.uint8))
    assert got.max() > 200  # not clipped to 255 nor scaled down to nothing


def test_image_info_reads_headers_only() -> None:
    assert image_info(JPEG) == image_info(memoryview(JPEG))
    assert (image_info(JPEG).format, image_info(JPEG).width) == ("jpeg", 256)
    assert image_info(PNG)[1:] == (60, 40)
    assert image_info(SOURCES["webp-lossless"][0]).format == "webp"


# ------------------------------------------------------------------ geometry


def halves(h: int, w: int) -> np.ndarray:
    """Left half red, right half blue, a green stripe in the middle third of columns."""
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : w // 2] = (255, 0, 0)
    img[:, w // 2 :] = (0, 0, 255)
    img[:, w // 3 : 2 * w // 3, 1] = 255
    return img


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_resize_shorter_crops_the_centre(fmt: str) -> None:
    data = encode(halves(100, 300), fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    got = decode_image(data, size=50, resize="shorter").astype(int)
    assert got.shape == (50, 50, 3)
    # the centre third of a 300-wide image becomes the whole 50x50 crop: green everywhere
    assert got[..., 1].mean() > 200


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_resize_longer_pads_around_the_image(fmt: str) -> None:
    data = encode(halves(100, 300), fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    got = decode_image(data, size=(90, 90), resize="longer", pad_value=7)
    assert got.shape == (90, 90, 3)
    assert (got[:30] == 7).all() and (got[-30:] == 7).all()  # 300x100 -> 90x30, centred
    assert got[30:60, :20, 0].mean() > 200  # red left part
    assert got[30:60, -20:, 2].mean() > 200  # blue right part


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "area", "nearest"])
@pytest.mark.parametrize("size", [(224, 224), (100, 37), (300, 500)])
def test_exact_resize_is_close_to_pillow(interpolation: str, size: tuple[int, int]) -> None:
    got = decode_image(JPEG, size=size, interpolation=interpolation)  # type: ignore[arg-type]
    flt = {
        "bilinear": Image.BILINEAR,
        "bicubic": Image.BICUBIC,
        "area": Image.BOX,
        "nearest": Image.NEAREST,
    }[interpolation]
    ref = np.asarray(Image.open(io.BytesIO(JPEG)).convert("RGB").resize(size[::-1], flt))
    assert got.shape == (*size, 3)
    # nearest-neighbour picks differ between OpenCV's and Pillow's pixel-centre conventions
    assert mad(got, ref) < (16 if interpolation == "nearest" else 3)


def test_large_jpegs_are_scaled_in_the_dct_domain_and_stay_accurate(jpeg_path: str) -> None:
    big = encode(photo(1200, 1600, 3), "JPEG", quality=90)
    for size in [(224, 224), (150, 400), (600, 800)]:
        got = decode_image(big, size=size)
        ref = np.asarray(Image.open(io.BytesIO(big)).convert("RGB").resize(size[::-1], Image.BOX))
        assert mad(got, ref) < 3, size


def test_out_buffers_are_written_in_place() -> None:
    batch = np.zeros((3, 256, 256, 3), np.uint8)
    r = decode_image(JPEG, size=256, out=batch[1])
    assert r is batch[1] or np.shares_memory(r, batch)
    assert batch[1].any() and not batch[0].any()
    png_out = np.zeros((2, 40, 60, 3), np.uint8)
    decode_image(PNG, size=(40, 60), out=png_out[1])
    assert np.array_equal(png_out[1], pil_decode(PNG))
    small = np.zeros((10, 12, 3), np.uint8)
    decode_image(JPEG, size=(10, 12), out=small)
    assert small.any()
    with pytest.raises(ValueError, match="out must be uint8"):
        decode_image(JPEG, size=(10, 12), out=np.zeros((10, 12), np.uint8))
    with pytest.raises(ValueError, match="fixed size"):
        decode_image(JPEG, out=np.zeros((256, 256, 3), np.uint8))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation(orientation: int) -> None:
    img = Image.fromarray(halves(40, 60))
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(img, "JPEG", quality=95, exif=exif)
    ref = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    got = decode_image(data, exif=True)
    assert got.shape == ref.shape
    assert mad(got, ref) < 1
    assert decode_image(data).shape == (40, 60, 3)  # ignored unless asked
    resized = decode_image(data, exif=True, size=(20, 20))
    assert resized.shape == (20, 20, 3)


# ------------------------------------------------------------------ batches


def test_batches_are_identical_whatever_the_thread_count() -> None:
    items = [encode(photo(64 + i, 80, i), "JPEG" if i % 2 else "PNG") for i in range(20)]
    one = ImageDecoder((48, 48), threads=1).decode_batch(items)
    two = ImageDecoder((48, 48), threads=2).decode_batch(items)
    assert one.images.shape == (20, 48, 48, 3)
    assert np.array_equal(one.images, two.images)
    assert one.ok.all() and one.errors == ()
    assert np.array_equal(decode_images(items, size=48, threads=2), one.images)
    for i, data in enumerate(items):
        assert np.array_equal(decode_image(data, size=48), one.images[i])


def test_tiny_jpegs_decompress_with_the_gil_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the system binding a tiny JPEG decompresses holding the GIL (two threads that
    hand it to each other twice an image wait on each other more than they decode), a
    larger one releases it; the pixels are the same either way. (Batches of JPEGs at
    the output size take simplejpeg's lean path instead: `test_jpeg_fast`.)"""
    tj = system_turbojpeg()
    calls: Counter[str] = Counter()
    for name in ("_decompress", "_decompress_held"):
        fn = getattr(tj, name)
        monkeypatch.setattr(tj, name, lambda *a, _f=fn, _n=name: (calls.update([_n]), _f(*a))[1])
    monkeypatch.setattr(image_module, "jpeg", lambda: tj)

    def decode(side: int) -> np.ndarray:
        items = [encode(photo(side, side, i), "JPEG", quality=95) for i in range(6)]
        dec = ImageDecoder((side, side))
        return np.stack([dec.decode(x) for x in items])

    tiny = decode(32)
    assert calls == {"_decompress_held": 6}
    calls.clear()
    decode(64)
    assert calls == {"_decompress": 6}
    calls.clear()
    monkeypatch.setattr(turbo_module, "GIL_HELD_PIXELS", 0)
    assert np.array_equal(decode(32), tiny)
    assert calls == {"_decompress": 6}


def test_a_batch_of_tiny_jpegs_to_resize_decodes_on_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decoding tiny JPEGs on the system binding holds the GIL throughout (above), so a
    second thread could only wait for it: a batch that needs that path (its first image
    needs resizing to a tiny output) runs on one thread; tiny JPEGs already at the output
    size (simplejpeg's lean path, which releases the GIL), larger JPEGs, PNGs, and JPEGs
    through simplejpeg as the binding use the pool's threads."""
    tj = system_turbojpeg()
    caps = thread_caps(monkeypatch)
    monkeypatch.setattr(image_module, "jpeg", lambda: tj)

    def threads(side: int, fmt: str = "JPEG", out: int | None = None, **kw: Any) -> int | None:
        items = [encode(photo(side, side, i), fmt, **kw) for i in range(4)]
        size = out or side
        got = ImageDecoder((size, size), threads=2).decode_batch(items)
        ref = ImageDecoder((size, size), threads=1).decode_batch(items)
        assert np.array_equal(got.images, ref.images) and got.ok.all()
        return caps[-2]  # the batch on two threads' cap

    assert threads(40, out=32, quality=95) == 1
    assert threads(64, out=48, quality=90) == 1
    assert threads(32, quality=95) is None  # the lean path
    assert threads(128, out=64, quality=95) is None  # decompresses without the GIL
    assert threads(32, "PNG") is None  # libspng releases the GIL
    mixed = [encode(photo(40, 40, 0), "JPEG"), b"", None]  # not all buffers: not judged
    res = ImageDecoder((32, 32), threads=2).decode_batch(mixed, on_error="skip")
    assert caps[-1] is None and res.ok.tolist() == [True, False, False]
    sj = simplejpeg()
    if sj is not None:  # simplejpeg decodes without the GIL: both threads
        monkeypatch.setattr(image_module, "jpeg", lambda: sj)
        assert threads(40, out=32, quality=95) is None


def test_the_lean_png_path_serves_batches_that_start_with_a_png(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lean PNG path checks each item's header; for a batch of another format that
    is work for nothing (~0.45 us a JPEG, 2% of a tiny one's decode), so a batch takes it
    when its first item is a PNG. PNGs in a batch that starts otherwise decode on the
    general path, to the same pixels."""
    built: list[int] = []
    real = image_module.same_size_png

    def spy(*args: Any, **kw: Any) -> Any:
        built.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(image_module, "same_size_png", spy)
    pngs = [encode(photo(32, 32, i), "PNG") for i in range(3)]
    jpg = encode(photo(32, 32, 9), "JPEG", quality=95)
    dec = ImageDecoder((32, 32), threads=2)
    png_first = dec.decode_batch([*pngs, jpg])
    assert len(built) == 1
    jpeg_first = dec.decode_batch([jpg, *pngs])
    assert len(built) == 1  # not for a batch that starts with a JPEG
    assert np.array_equal(jpeg_first.images, png_first.images[[3, 0, 1, 2]])
    views = dec.decode_batch([memoryview(p) for p in pngs])  # a loader's payloads
    assert len(built) == 2 and np.array_equal(views.images, png_first.images[:3])
    assert dec.decode_batch([None, pngs[0]], on_error="skip").ok.tolist() == [False, True]
    assert len(built) == 2


def test_a_batch_item_that_is_not_a_buffer_is_its_own_decode_error() -> None:
    """Not bytes (None, a str) among PNGs: that item fails with a `DecodeError` naming its
    type, the others decode (the lean PNG path once raised a bare TypeError)."""
    res = ImageDecoder((32, 32), threads=2).decode_batch(
        [PNG, None, "x", PNG], sample_ids=["a", "b", "c", "d"], on_error="skip"
    )
    assert res.ok.tolist() == [True, False, False, True]
    assert [e.sample_id for e in res.errors] == ["b", "c"]
    assert "NoneType" in str(res.errors[0]) and "str" in str(res.errors[1])


def test_batch_errors_name_the_sample() -> None:
    items = [JPEG, JPEG[:300], b"", PNG]
    dec = ImageDecoder((32, 32), threads=2)
    with pytest.raises(DecodeError, match="'s1'") as info:
        dec.decode_batch(items, sample_ids=["s0", "s1", "s2", "s3"])
    assert info.value.sample_id == "s1"
    res = dec.decode_batch(items, sample_ids=["s0", "s1", "s2", "s3"], on_error="skip")
    assert res.ok.tolist() == [True, False, False, True]
    assert [e.sample_id for e in res.errors] == ["s1", "s2"]
    assert not res.images[1].any() and res.images[0].any()
    out = np.full((4, 32, 32, 3), 9, np.uint8)
    assert dec.decode_batch(items, out=out, on_error="warn").images is out
    with pytest.raises(ValueError, match="fixed size"):
        ImageDecoder().decode_batch(items)
    with pytest.raises(ValueError, match="on_error"):
        dec.decode_batch(items, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sample_ids"):
        dec.decode_batch(items, sample_ids=["a"])


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"", DecodeError, "empty"),
        (b"hello, this is not an image at all", UnsupportedFormatError, "not an image format"),
        (JPEG[: len(JPEG) // 2], DecodeError, "damaged JPEG"),
        (JPEG[:20], DecodeError, "JPEG"),
        (JPEG[:600] + bytes(2000) + JPEG[2600:], DecodeError, "JPEG"),
        (PNG[: len(PNG) // 2], DecodeError, "PNG"),
        (PNG[:8], UnsupportedFormatError, "not an image format"),
        (SOURCES["webp-lossless"][0][:40], DecodeError, "WEBP"),
        (SOURCES["gif"][0][:30], DecodeError, "GIF"),
    ],
)
def test_bad_bytes_raise_decode_errors(data: bytes, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        decode_image(data, sample_id="bad1")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FerroloadError)
    assert info.value.sample_id == "bad1"  # type: ignore[attr-defined]
    assert "bad1" in str(info.value)


@pytest.mark.parametrize("data", ["a string", 42, None, [1, 2], np.zeros(3, np.float32)])
def test_non_bytes_are_refused(data: Any) -> None:
    with pytest.raises(DecodeError, match="expected encoded bytes"):
        decode_image(data)


def _png_with_size(w: int, h: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


def _jpeg_with_size(w: int, h: int) -> bytes:
    data = bytearray(encode(photo(16, 16), "JPEG"))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, h, w)
    return bytes(data)


@pytest.mark.parametrize(
    "data", [_png_with_size(100_000, 100_000), _jpeg_with_size(65_000, 65_000)]
)
def test_decompression_bombs_are_refused_from_the_header(data: bytes) -> None:
    with pytest.raises(ImageTooLargeError, match="max_pixels"):
        decode_image(data)


def test_max_pixels_is_configurable() -> None:
    with pytest.raises(ImageTooLargeError):
        decode_image(JPEG, max_pixels=256 * 255)
    assert decode_image(JPEG, max_pixels=256 * 256).shape == (256, 256, 3)
    with pytest.raises(ImageTooLargeError):
        decode_image(SOURCES["gif"][0], max_pixels=100)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 0}, "size"),
        ({"size": (10,)}, "size"),
        ({"size": (10, -1)}, "size"),
        ({"mode": "CMYK"}, "mode"),
        ({"resize": "fill"}, "resize"),
        ({"interpolation": "lanczos"}, "interpolation"),
        ({"max_pixels": 0}, "max_pixels"),
        ({"pad_value": 300}, "pad_value"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_options(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ImageDecoder(**kwargs)


def test_an_output_size_over_max_pixels_is_an_option_error() -> None:
    """Issue 31: `resize=(10**6, 10**6)` was a MemoryError at the first batch. An output
    of more pixels than `max_pixels` is refused when the decoder is made; raising
    `max_pixels` allows it (nothing is allocated until a batch)."""
    with pytest.raises(ValueError, match=r"1,000,000,000,000 pixels .* max_pixels=89,478,485"):
        ImageDecoder((10**6, 10**6))
    with pytest.raises(ValueError, match="max_pixels=1,024"):
        decode_image(PNG, size=33, max_pixels=32 * 32)
    with pytest.raises(ValueError, match="max_pixels"):
        decode_images([PNG], size=(10**6, 10**6))
    assert decode_image(PNG, size=32, max_pixels=32 * 40 * 60).shape == (32, 32, 3)
    assert ImageDecoder((10**6, 10**6), max_pixels=10**12).size == (10**6, 10**6)
    assert ImageDecoder((np.int64(8), np.int32(9))).size == (8, 9)  # numpy ints, as video


def _valid_images() -> list[bytes]:
    return [JPEG, PNG, *(data for data, _ in SOURCES.values())]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_only_decode_errors(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([*_valid_images(), b""]))
    if data.draw(st.booleans()) or not base:
        blob = data.draw(st.binary(max_size=600))
    else:
        raw = bytearray(base)
        for _ in range(data.draw(st.integers(1, 8))):
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(1, len(raw)))
        blob = bytes(raw[:cut])
    try:
        out = decode_image(blob, size=(24, 24), max_pixels=4_000_000)
    except DecodeError:
        return
    assert out.shape == (24, 24, 3)


# ------------------------------------------------------------------ backends and fallbacks


def test_backends_report_the_fast_paths() -> None:
    b = backends()
    assert set(b) >= {"jpeg", "png", "webp", "resize", "pil", "audio", "resample", "video"}
    # the system's libjpeg-turbo where it is installed, else the one simplejpeg bundles
    assert b["jpeg"]
    if turbojpeg() is not None:
        assert b["jpeg"].startswith("system libturbojpeg") and "PyTurboJPEG" in b["jpeg"]
    else:
        assert b["jpeg"].startswith("bundled libjpeg-turbo (simplejpeg")
    assert b["png"] and "libspng" in b["png"]
    assert b["resize"] and "OpenCV" in b["resize"]
    assert b["pil"] and b["pil"].startswith(("Pillow-SIMD", "Pillow"))


FALLBACK_SCRIPT = r"""
import io, sys, warnings, numpy as np
from PIL import Image
import ferroload_codec as fc
warnings.simplefilter("always")
data = {name: bytes.fromhex(h) for name, h in zip(["jpeg", "png"], sys.argv[1:3])}
with warnings.catch_warnings(record=True) as caught:
    j = fc.decode_image(data["jpeg"], size=(100, 120))
    p = fc.decode_image(data["png"], size=(20, 30), mode="L")
    fc.decode_image(data["jpeg"])
ref_j = np.asarray(Image.open(io.BytesIO(data["jpeg"])).convert("RGB").resize((120, 100), Image.BILINEAR))
ref_p = np.asarray(Image.open(io.BytesIO(data["png"])).convert("L").resize((30, 20), Image.BILINEAR))
print(fc.backends())
print(float(np.abs(j.astype(int) - ref_j).mean()), float(np.abs(p[..., 0].astype(int) - ref_p).mean()))
print(len([w for w in caught if "uses Pillow" in str(w.message)]))
"""


def test_everything_works_without_the_fast_libraries(tmp_path: Path) -> None:
    env = {**os.environ, "FERROLOAD_CODEC_DISABLE": "turbojpeg,simplejpeg,opencv,imagecodecs"}
    res = subprocess.run(
        [sys.executable, "-c", FALLBACK_SCRIPT, JPEG.hex(), PNG.hex()],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = res.stdout.strip().splitlines()
    assert "'jpeg': None" in lines[0] and "'resize': None" in lines[0] and "'png': None" in lines[0]
    mad_j, mad_p = map(float, lines[1].split())
    assert mad_j < 1.0 and mad_p < 1.0  # Pillow all the way: the same pixels
    assert lines[2] == "2"  # one warning per slow path (JPEG and PNG), not one per image


def test_without_the_system_libturbojpeg_the_bundled_one_decodes_the_same_pixels() -> None:
    """A machine without libturbojpeg (simulated) decodes JPEGs with the libjpeg-turbo of
    simplejpeg's wheel: no slow-path warning, and bit for bit what this process decodes."""
    script = (
        "import sys, warnings, numpy as np, ferroload_codec as fc\n"
        "warnings.simplefilter('error')\n"
        "data = bytes.fromhex(sys.argv[1])\n"
        "batch = fc.ImageDecoder((100, 120), threads=2).decode_batch([data] * 2).images\n"
        "print(fc.backends()['jpeg'], flush=True)\n"
        "sys.stdout.buffer.write(batch.tobytes() + fc.decode_image(data, mode='L').tobytes())\n"
    )
    env = {**os.environ, "FERROLOAD_CODEC_DISABLE": "turbojpeg"}
    res = subprocess.run(
        [sys.executable, "-c", script, JPEG.hex()], env=env, capture_output=True, check=True
    )
    head, _, raw = res.stdout.partition(b"\n")
    assert head.startswith(b"bundled libjpeg-turbo (simplejpeg") and not res.stderr
    here = ImageDecoder((100, 120), threads=2).decode_batch([JPEG] * 2).images.tobytes()
    assert raw == here + decode_image(JPEG, mode="L").tobytes()


@pytest.mark.parametrize("den", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_both_libjpeg_turbo_bindings_scale_in_the_dct_domain_alike(den: int, mode: str) -> None:
    """The bundled binding decodes to each of libjpeg-turbo's scaled sizes, into strided
    rows too, and gives the system binding's pixels exactly where that one exists."""
    bundled = simplejpeg()
    assert bundled is not None  # simplejpeg is a dependency of ferroload-codec
    system = turbojpeg()
    rng = np.random.default_rng(den)
    for trial in range(6):
        h, w = (int(v) for v in rng.integers(9, 300, 2))
        data = encode(photo(h, w, trial), "JPEG", quality=85, subsampling=trial % 3)
        assert bundled.header(data)[:2] == (w, h)
        c = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
        sh, sw = -(-h // den), -(-w // den)
        padded = np.zeros((sh, sw + 5, c), np.uint8)  # rows longer than the image: strided
        for dst in (np.zeros((sh, sw, c), np.uint8), padded[:, 2 : 2 + sw]):
            bundled.decode_into(data, dst, PIXEL_FORMATS[mode])
            if system is not None:
                ref = np.zeros((sh, sw, c), np.uint8)
                system.decode_into(data, ref, PIXEL_FORMATS[mode])
                assert np.array_equal(dst, ref), (h, w, den, mode)
        assert not padded[:, :2].any() and not padded[:, 2 + sw :].any()
        if den == 1 and mode != "L":  # Pillow's libjpeg gives the same pixels, unscaled
            assert np.array_equal(padded[:, 2 : 2 + sw, :3], pil_decode(data))
    with pytest.raises(TurboError, match="too small"):  # not one of the scaled sizes
        bundled.decode_into(JPEG, np.zeros((100, 100, 3), np.uint8), PIXEL_FORMATS["RGB"])


def test_the_bundled_binding_refuses_damage() -> None:
    bundled = simplejpeg()
    assert bundled is not None
    dst = np.zeros((256, 256, 3), np.uint8)
    for bad in (JPEG[:3], b"\xff\xd8" + b"\x00" * 64):
        with pytest.raises(TurboError):
            bundled.header(bad)
    with pytest.raises(TurboError):
        bundled.decode_into(JPEG[: len(JPEG) // 2], dst, PIXEL_FORMATS["RGB"])


def test_stray_bytes_before_a_marker_are_only_a_warning(jpeg_path: str) -> None:
    """libjpeg warns about stray bytes between segments and then decodes the whole image;
    so does ferroload on either binding (simplejpeg stops there, so Pillow takes it)."""
    sos = JPEG.index(b"\xff\xda")
    stray = JPEG[:sos] + b"\x00\x00" + JPEG[sos:]
    assert np.array_equal(decode_image(stray), pil_decode(JPEG))
    assert image_info(stray)[1:] == (256, 256)


@pytest.mark.parametrize("name", [n for n in SOURCES if n.startswith("webp")])
def test_webp_decodes_without_pillows_libwebp(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Pillow was built without libwebp, WebP goes through imagecodecs' libwebp: the
    same pixels, sizes and errors as through Pillow."""
    data, _ = SOURCES[name]
    through_pillow_or_not = decode_image(data, size=(20, 36), mode="RGBA")
    monkeypatch.setattr(image_module, "webp_fallback", lambda: imagecodecs)
    ref = np.asarray(reference(name, data).convert("RGBA"))
    assert np.array_equal(decode_image(data, mode="RGBA"), ref)
    assert mad(decode_image(data, size=(20, 36), mode="RGBA"), through_pillow_or_not) <= 0.5
    assert image_info(data)[1:] == (50, 30)
    with pytest.raises(DecodeError, match="WEBP"):
        decode_image(data[:40])
    # a canvas of 16384 x 16384 declared in the header is refused before decoding
    bomb = bytearray(imagecodecs.webp_encode(photo(8, 8), lossless=False))
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes(4) + (16383).to_bytes(3, "little") * 2
    bomb[12:12] = vp8x
    struct.pack_into("<I", bomb, 4, len(bomb) - 8)
    with pytest.raises(ImageTooLargeError):
        decode_image(bytes(bomb), max_pixels=10_000_000)


def test_import_stays_light() -> None:
    code = (
        "import sys, ferroload_codec; "
        "print(sorted({'cv2', 'turbojpeg', 'simplejpeg', 'imagecodecs', 'av', 'soundfile', 'soxr', 'PIL'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_damaged_jpegs_never_disturb_the_next_decode_on_the_same_thread(jpeg_path: str) -> None:
    """Decompressors are reused per thread; a failure must not leak into the next image."""
    rng = np.random.default_rng(5)
    good = [encode(photo(48 + 8 * i, 64, i), "JPEG", quality=85) for i in range(6)]
    refs = [decode_image(g) for g in good]
    bomb = _jpeg_with_size(65_000, 65_000)
    for step in range(300):
        k = int(rng.integers(len(good)))
        bad = bytearray(good[k])
        cut = int(rng.integers(2, len(bad)))
        for _ in range(int(rng.integers(0, 4))):
            bad[int(rng.integers(len(bad)))] = int(rng.integers(256))
        for data in (bytes(bad[:cut]), bomb):
            with contextlib.suppress(DecodeError):
                decode_image(data)
        assert np.array_equal(decode_image(good[k]), refs[k]), step
        assert image_info(good[k])[1:] == refs[k].shape[1::-1]


def test_a_jpeg_decodes_with_one_library_call(
    jpeg_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size and colour components come from the frame header, read in Python:
    libjpeg-turbo's own header call cost ~3 us more an image (14% of a batch of 32x32
    JPEGs). `image_info` still cross-checks both."""
    lib = image_module.jpeg()
    assert lib is not None
    headers: list[int] = []
    real = type(lib).header

    def counted(self: Any, data: bytes) -> Any:
        headers.append(len(data))
        return real(self, data)

    monkeypatch.setattr(type(lib), "header", counted)
    small = encode(photo(32, 32, 3), "JPEG", quality=90)
    ref = pil_decode(small, "RGB")
    assert mad(decode_image(small), ref) <= 0.0
    got = ImageDecoder((32, 32), threads=2).decode_batch([small, JPEG, small])
    assert got.ok.all() and mad(got.images[0], ref) <= 0.0
    assert headers == []
    assert image_info(small)[1:] == (32, 32) and headers == [len(small)]


def test_a_jpeg_header_walk_is_bounded() -> None:
    """Marker segments before the frame header are walked in Python: a file of many
    empty ones is damaged past `JPEG_MAX_SEGMENTS` (a bounded walk), not read on. Fill
    bytes and stuffed zeros between markers, which libjpeg passes over, are passed over
    by one regular-expression match each run (linear: megabytes of them take
    milliseconds, the suite's timeout would catch a quadratic scan)."""
    empty_comment = b"\xff\xfe\x00\x02"
    few = JPEG[:2] + empty_comment * 100 + JPEG[2:]
    assert mad(decode_image(few), decode_image(JPEG)) <= 0.0
    many = JPEG[:2] + empty_comment * (JPEG_MAX_SEGMENTS + 1) + JPEG[2:]
    with pytest.raises(DecodeError, match="no complete frame header"):
        decode_image(many)
    for filler in (b"\xff", b"\xff\x00", b"\xff\xff\x00"):
        filled = JPEG[:3] + filler * 2_000_000 + JPEG[2:]  # FF D8 FF <filler...> FF E0
        assert jpeg_frame(filled) == (256, 256, 3)
        assert image_info(filled)[1:] == (256, 256)


def test_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (20, 10), c) for c in [(250, 0, 0), (0, 250, 0), (0, 0, 250)]]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    got = decode_image(buf.getvalue())
    assert got.shape == (10, 20, 3)
    assert got[..., 0].mean() > 200 and got[..., 1:].mean() < 30


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_decoder_used_before_fork_works_in_the_child() -> None:
    """A forked child inherits the pool object but none of its threads."""
    import signal

    dec = ImageDecoder((16, 16), threads=2)
    dec.decode_batch([JPEG] * 4)  # start the pool's threads in the parent
    pid = os.fork()
    if pid == 0:  # the child: a hang here would be killed by the alarm
        signal.alarm(20)
        ok = dec.decode_batch([JPEG] * 4).ok.all()
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_batches_of_memoryviews_decode_like_bytes() -> None:
    """The loader hands the decoder zero-copy views of memory-mapped shards."""
    items = [encode(photo(32, 32, i), "PNG") for i in range(4)] + [JPEG]
    dec = ImageDecoder((32, 32))
    views = dec.decode_batch([memoryview(x) for x in items]).images
    assert np.array_equal(views, dec.decode_batch(items).images)


def test_the_decoder_picks_formats_by_the_one_magic_table() -> None:
    # ferroload_core.sniff_image is the table; the codec's sniff reads only the head
    from ferroload_codec._sniff import sniff
    from ferroload_core import sniff_image

    for head in [b"\xff\xd8\xff\xe0", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"BM\x00\x00",
                 b"RIFF\x00\x00\x00\x00WEBP", b"II*\x00", b"fLaC", b"nothing"]:  # fmt: skip
        data = head + bytes(64)
        assert sniff(data) == sniff_image(data)
    assert sniff(b"\xff\xd8\xff" + bytes(8)) == "jpeg" and sniff(b"fLaC" + bytes(8)) is None
