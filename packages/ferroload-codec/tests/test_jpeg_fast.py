"""The lean path for batches of JPEGs already at the output size (`_jpeg_fast`, issue 34).

Each test compares the lean path with the general path it stands in for, run on the same
batch with the lean path turned off (`general`): the same pixels, `ok` flags and errors,
whatever the output held before.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np
import pytest
from PIL import Image

import ferroload_codec._image as image_module
import ferroload_codec._jpeg_fast as jpeg_fast_module
from ferroload_codec import DecodedBatch, DecodeError, ImageDecoder
from ferroload_codec._backends import simplejpeg
from ferroload_codec._jpeg_fast import jpeg_plain_frame, same_size_jpeg
from ferroload_codec._sniff import jpeg_frame

from ._jpegs import system_turbojpeg, thread_caps, use_jpeg_backend


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth gradients with noise: JPEG-friendly, different for every seed."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack(
        [
            128 + 100 * np.sin(x / (3 + seed % 5) + r.uniform(0, 6)),
            128 + 100 * np.cos(y / (4 + seed % 3) + r.uniform(0, 6)),
            255 * (x + y) / (h + w),
        ],
        axis=-1,
    )
    return np.clip(img + r.normal(0, 12, img.shape), 0, 255).astype(np.uint8)


def jpeg(img: np.ndarray | Image.Image, **kw: Any) -> bytes:
    im = Image.fromarray(img) if isinstance(img, np.ndarray) else img
    buf = io.BytesIO()
    im.save(buf, "JPEG", **{"quality": 90, **kw})
    return buf.getvalue()


#: 32x32 JPEGs of several kinds an encoder writes: chroma subsampling 4:4:4, 4:2:2,
#: 4:2:0, progressive, optimised tables, grey, and an EXIF segment.
KINDS: dict[str, dict[str, Any]] = {
    "444": {"subsampling": 0},
    "422": {"subsampling": 1},
    "420": {"subsampling": 2},
    "progressive": {"progressive": True},
    "optimize": {"optimize": True, "quality": 75},
}
TINY = [jpeg(photo(32, 32, i), **KINDS[k]) for i, k in enumerate(list(KINDS) * 4)]
GREY = [jpeg(Image.fromarray(photo(32, 32, 50 + i)).convert("L")) for i in range(4)]


@pytest.fixture(params=["system", "bundled"])
def jpeg_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The general path on the system's libjpeg-turbo and on simplejpeg's, the reference
    the lean path (always simplejpeg's) is compared with."""
    return use_jpeg_backend(str(request.param), monkeypatch)


@pytest.fixture
def lean_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What the lean path answered for each item it was offered (True: it decoded it)."""
    calls: list[bool] = []
    real = image_module.same_size_jpeg

    def spy(*args: Any, **kw: Any) -> Any:
        fast = real(*args, **kw)
        if fast is None:
            return None

        def counted(item: Any, target: np.ndarray) -> bool:
            done = fast(item, target)
            calls.append(done)
            return done

        return counted

    monkeypatch.setattr(image_module, "same_size_jpeg", spy)
    return calls


def general(dec: ImageDecoder, items: list[Any], **kw: Any) -> DecodedBatch:
    """`dec.decode_batch(items, **kw)` on the general path alone."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(image_module, "same_size_jpeg", lambda *a, **k: None)
        return dec.decode_batch(items, **kw)


def assert_same(a: DecodedBatch, b: DecodedBatch) -> None:
    assert np.array_equal(a.images, b.images)
    assert a.ok.tolist() == b.ok.tolist()
    assert [(type(e), str(e)) for e in a.errors] == [(type(e), str(e)) for e in b.errors]


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_the_lean_path_gives_the_general_paths_pixels(
    mode: str, jpeg_path: str, lean_calls: list[bool]
) -> None:
    """Bit for bit the general path's pixels, on either libjpeg-turbo (simplejpeg's
    bundled one may be another version than the system's), in every output mode, from
    colour and grey JPEGs; for RGB Pillow's too."""
    items = TINY + GREY
    dec = ImageDecoder(32, mode=mode, threads=2)  # type: ignore[arg-type]
    got = dec.decode_batch(items)
    assert lean_calls == [True] * len(items)
    assert_same(got, general(dec, items))
    if mode == "RGB":
        pil = [np.asarray(Image.open(io.BytesIO(x)).convert("RGB")) for x in items]
        assert np.array_equal(got.images, np.stack(pil))
    assert got.images.shape == (len(items), 32, 32, {"RGB": 3, "L": 1, "RGBA": 4}[mode])


def test_items_not_at_the_output_size_take_the_general_path(
    jpeg_path: str, lean_calls: list[bool]
) -> None:
    """Larger and smaller JPEGs, a CMYK one (Pillow's conversion on the general path),
    a 12-bit frame header, other formats and non-buffers in a batch that starts with a
    32x32 JPEG: the lean path refuses them, the general path decodes them (resized) or
    reports them, and no output keeps what it held before."""
    cmyk = jpeg(Image.fromarray(photo(32, 32, 7)).convert("CMYK"))
    png = io.BytesIO()
    Image.fromarray(photo(32, 32, 8)).save(png, "PNG")
    twelve = bytearray(TINY[1])
    assert TINY[1].count(b"\xff\xc0") == 1
    twelve[TINY[1].index(b"\xff\xc0") + 4] = 12  # the frame's sample precision
    items: list[Any] = [
        TINY[0], jpeg(photo(40, 40, 1)), jpeg(photo(16, 16, 2)), jpeg(photo(32, 64, 3)),
        cmyk, png.getvalue(), bytes(twelve), None, TINY[2],
    ]  # fmt: skip
    dec = ImageDecoder(32, threads=1)  # the items in order (threads: below)
    results = []
    for fill in (0, 255, 77):
        lean_calls.clear()
        out = np.full((len(items), 32, 32, 3), fill, np.uint8)
        results.append(dec.decode_batch(items, out=out, on_error="skip"))
        assert lean_calls == [True, False, False, False, False, False, False, False, True]
        assert_same(results[-1], general(dec, items, on_error="skip"))
    assert all(np.array_equal(r.images, results[0].images) for r in results[1:])
    assert results[0].ok.tolist() == [True] * 6 + [False, False, True]
    cmyk_ref = np.asarray(Image.open(io.BytesIO(cmyk)).convert("RGB"))
    assert np.array_equal(results[0].images[4], cmyk_ref)


def test_simplejpeg_refuses_a_truncated_or_lying_jpeg() -> None:
    """What the lean path relies on: with `strict=True` simplejpeg raises for a JPEG
    whose frame header says 32x32 but whose data stops short or holds a smaller image
    (libjpeg only warns, and fills the rest with grey); with a buffer larger than the
    image it writes the image's bytes and says its shape."""
    sj = simplejpeg()
    assert sj is not None
    small = jpeg(photo(16, 16, 4))
    lying = bytearray(small)
    sof = small.index(b"\xff\xc0")
    struct.pack_into(">HH", lying, sof + 5, 32, 32)
    assert jpeg_plain_frame(bytes(lying)) == (8, 32, 32, 3)
    buf = np.zeros((32, 32, 3), np.uint8)
    for bad in (TINY[0][: len(TINY[0]) * 2 // 3], TINY[0][:-2], bytes(lying)):
        with pytest.raises(ValueError, match=r"[Pp]remature end"):  # only a warning to libjpeg
            sj.module.decode_jpeg(bad, "RGB", buffer=buf, strict=True)
    assert sj.module.decode_jpeg(small, "RGB", buffer=buf, strict=True).shape == (16, 16, 3)


def test_damaged_jpegs_fail_or_decode_as_on_the_general_path(jpeg_path: str) -> None:
    """Cut and bit-flipped 32x32 JPEGs after a good one (so the batch takes the lean
    path): each decodes to the general path's pixels (libjpeg does not notice every
    flipped bit) or fails with its error, whatever the output held before."""
    rng = np.random.default_rng(34)
    bad = []
    for k in range(150):
        data = bytearray(TINY[k % len(TINY)])
        if k % 3 == 0:
            data = data[: int(rng.integers(2, len(data)))]
        else:
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        bad.append(bytes(data))
    dec = ImageDecoder(32, threads=2)
    items = [TINY[0], *bad]
    ref = general(dec, items, on_error="skip")
    assert 10 < ref.ok.sum() < len(items) - 10  # both kinds are there
    for fill in (0, 99):
        out = np.full((len(items), 32, 32, 3), fill, np.uint8)
        assert_same(dec.decode_batch(items, out=out, on_error="skip"), ref)
    ids = [f"s{i}" for i in range(len(items))]
    with pytest.raises(DecodeError) as lean:
        dec.decode_batch(items, sample_ids=ids)
    with pytest.raises(DecodeError) as ref_error:
        general(dec, items, sample_ids=ids)
    assert type(lean.value) is type(ref_error.value) and str(lean.value) == str(ref_error.value)
    assert lean.value.sample_id == f"s{int(np.flatnonzero(~ref.ok)[0])}"


def test_two_threads_decode_what_one_does(lean_calls: list[bool]) -> None:
    """Batches on the lean path are deterministic across thread counts, damaged items
    and outputs included."""
    items: list[Any] = [*TINY, TINY[3][:200], *GREY, b"\xff\xd8\xff", *TINY]
    one = ImageDecoder(32, threads=1).decode_batch(items, on_error="skip")
    for _ in range(3):
        two = ImageDecoder(32, threads=2).decode_batch(
            items, on_error="skip", out=np.full((len(items), 32, 32, 3), 5, np.uint8)
        )
        assert_same(two, one)
    assert one.ok.tolist().count(False) == 2
    assert lean_calls.count(True) == 4 * (len(items) - 2)


def test_the_batch_decodes_on_all_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """simplejpeg releases the GIL while decoding: a batch on the lean path uses the
    pool's threads, where the general path decodes tiny JPEGs on one (the system
    binding keeps the GIL for them, `_turbo`); without simplejpeg, as before."""
    tj = system_turbojpeg()
    monkeypatch.setattr(image_module, "jpeg", lambda: tj)
    caps = thread_caps(monkeypatch)
    dec = ImageDecoder(32, threads=2)
    at_size = dec.decode_batch(TINY).images
    assert caps[-1] is None
    dec.decode_batch([jpeg(photo(40, 40, 1)), *TINY])  # the first needs a resize
    assert caps[-1] == 1
    monkeypatch.setattr(jpeg_fast_module, "simplejpeg", lambda: None)
    assert np.array_equal(dec.decode_batch(TINY).images, at_size)
    assert caps[-1] == 1


def test_what_the_lean_path_is_not_for(lean_calls: list[bool]) -> None:
    """Decoders that read EXIF orientation, augment or convert, outputs that are not
    C-contiguous, and batches whose first item is no 32x32 JPEG keep the general path."""
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: only a decoder with exif=True turns it
    rotated = jpeg(photo(32, 32, 9), exif=exif)
    assert jpeg_plain_frame(rotated) == (8, 32, 32, 3)
    plain = ImageDecoder(32)
    got = plain.decode_batch([rotated, *TINY[:2]]).images
    assert lean_calls == [True] * 3
    assert np.array_equal(got[0], np.asarray(Image.open(io.BytesIO(rotated))))  # not turned
    lean_calls.clear()
    turned = ImageDecoder(32, exif=True).decode_batch([rotated, *TINY[:2]]).images
    assert np.array_equal(turned[0], np.rot90(got[0], -1)) and lean_calls == []
    assert np.array_equal(turned[1:], got[1:])
    for dec in (ImageDecoder(32, dtype="float32"), ImageDecoder(32, hflip=0.5)):
        dec.decode_batch(TINY[:2], seeds=[1, 2])
    fortran = np.asfortranarray(np.zeros((1, 32, 32, 3), np.uint8))
    plain.decode_batch(TINY[:1], out=fortran)
    assert np.array_equal(fortran, got[1:2])
    plain.decode_batch([jpeg(photo(48, 48, 1)), *TINY])
    assert lean_calls == []
    assert same_size_jpeg(TINY[0], (32, 32), 3, max_pixels=1000, exif=False) is None
    assert same_size_jpeg(TINY[0], (32, 32), 3, max_pixels=2000, exif=False) is not None


def test_memoryviews_decode_like_bytes(lean_calls: list[bool]) -> None:
    """A loader's payloads are views of mapped shards: the lean path reads them in place;
    a strided view (whose bytes simplejpeg would read as if contiguous) it leaves."""
    dec = ImageDecoder(32, threads=2)
    ref = dec.decode_batch(TINY).images
    assert np.array_equal(dec.decode_batch([memoryview(x) for x in TINY]).images, ref)
    assert lean_calls.count(True) == 2 * len(TINY)
    lean_calls.clear()
    doubled = [np.repeat(np.frombuffer(x, np.uint8), 2) for x in TINY]
    strided = [memoryview(d)[::2] for d in doubled]
    got = dec.decode_batch([memoryview(TINY[0]), *strided]).images
    assert sorted(lean_calls) == [False] * len(TINY) + [True]
    assert np.array_equal(got[1:], ref)


def test_the_plain_walk_finds_the_frame_libjpeg_reads() -> None:
    """`jpeg_plain_frame` agrees with `jpeg_frame` where it answers, and leaves any
    layout but the plainest to it."""
    for data in [*TINY, *GREY]:
        frame = jpeg_frame(data)
        assert frame is not None and jpeg_plain_frame(data) == (8, frame[1], frame[0], frame[2])
    sof = TINY[0].index(b"\xff\xc0")
    for stray in (b"\xff\xd0", b"\xff\xff", b"\x00", b"\xff\xfe\x00\x00", b"\xff\x01"):
        assert jpeg_plain_frame(TINY[0][:sof] + stray + TINY[0][sof:]) is None
    assert jpeg_plain_frame(TINY[0][: sof + 6]) is None
    assert jpeg_plain_frame(b"\x89PNG\r\n\x1a\n" + TINY[0][8:]) is None
    comment = b"\xff\xfe\x00\x05abc"  # a plain segment: the frame is still found
    assert jpeg_plain_frame(TINY[0][:sof] + comment + TINY[0][sof:]) == (8, 32, 32, 3)
