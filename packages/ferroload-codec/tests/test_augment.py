"""Seeded random resized crops and flips, and the float / CHW / normalised output."""

from __future__ import annotations

import io
import math
import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from PIL import Image

from ferroload_codec import ImageDecoder
from ferroload_codec._augment import FLIP_DRAW, bfloat16_bits, crop_box, draws

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB image, asymmetric left to right (so that a flip shows)."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack(
        [255 * x / w, 128 + 100 * np.cos(y / (9 + seed % 4)), 255 * (x + 2 * y) / (w + 2 * h)],
        axis=-1,
    )
    return np.clip(img + r.normal(0, 3, img.shape), 0, 255).astype(np.uint8)


def encode(img: np.ndarray, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, **kw)
    return buf.getvalue()


# JPEGs and PNGs of assorted sizes and aspect ratios, one large enough for DCT scaling
ITEMS = [
    encode(photo(256, 256, 0), "JPEG", quality=90),
    encode(photo(300, 200, 1), "PNG"),
    encode(photo(120, 400, 2), "JPEG", quality=85),
    encode(photo(48, 48, 3), "PNG"),
    encode(photo(768, 1024, 4), "JPEG", quality=90),
    encode(photo(64, 64, 5), "JPEG", quality=95),
]
SEEDS = [7, 2**63 + 5, 12345, 0, 99, 2**64 - 1]


def augmenting(**kw: Any) -> ImageDecoder:
    opts: dict[str, Any] = {"resize": "random", "hflip": 0.5, **kw}
    return ImageDecoder(kw.pop("size", (56, 64)), **opts)


def reference(u8: np.ndarray, layout: str, dtype: Any, norm: bool) -> np.ndarray:
    """torchvision's formula in numpy: x * float32(1/255), then (x - mean) / std, float32."""
    x: np.ndarray = u8.astype(np.float32) * np.float32(1 / 255)
    if norm:
        x = (x - np.asarray(IMAGENET[0], np.float32)) / np.asarray(IMAGENET[1], np.float32)
    if layout == "CHW":
        x = np.moveaxis(x, -1, -3)
    return x.astype(dtype)


# ------------------------------------------------------------------ determinism


def test_the_same_seeds_give_the_same_pixels_whatever_the_threads() -> None:
    kw = {"layout": "CHW", "dtype": "float32", "mean": IMAGENET[0], "std": IMAGENET[1]}
    batches = []
    for threads in (1, 2, 3):
        dec = augmenting(threads=threads, **kw)
        batches.append(dec.decode_batch(ITEMS * 4, seeds=SEEDS * 4).images)
        dec.close()
    assert batches[0].shape == (24, 3, 56, 64) and batches[0].dtype == np.float32
    assert all(np.array_equal(batches[0], b) for b in batches[1:])
    assert np.array_equal(batches[0][:6], batches[0][6:12])  # same bytes + seed, same output


def test_an_items_output_depends_on_its_bytes_and_seed_only() -> None:
    dec = augmenting(threads=2)
    batch = dec.decode_batch(ITEMS, seeds=SEEDS).images
    order = [4, 1, 5, 0, 3, 2]
    permuted = dec.decode_batch([ITEMS[i] for i in order], seeds=[SEEDS[i] for i in order])
    assert np.array_equal(permuted.images, batch[order])
    for i in range(len(ITEMS)):  # one at a time, too
        assert np.array_equal(dec.decode(ITEMS[i], seed=SEEDS[i]), batch[i])


def test_other_seeds_give_other_crops() -> None:
    dec = augmenting(hflip=0.0)
    a = dec.decode_batch(ITEMS, seeds=SEEDS).images
    b = dec.decode_batch(ITEMS, seeds=[s + 1 for s in SEEDS]).images
    assert sum(not np.array_equal(x, y) for x, y in zip(a, b, strict=True)) >= 5


def test_draws_are_a_pure_function_of_seed_and_index() -> None:
    u = draws([1, 2, 1])
    assert u[0] == u[2] and u[0] != u[1]
    assert len(u[0]) == FLIP_DRAW + 1 and all(0 <= v < 1 for row in u for v in row)
    # splitmix64 from state 1: its first output, by the reference algorithm
    z = (1 + 0x9E3779B97F4A7C15) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    z ^= z >> 31
    assert u[0][0] == (z >> 11) / 2**53


# ------------------------------------------------------------------ distributions


def test_crop_boxes_follow_scale_and_ratio() -> None:
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    h, w = 400, 400
    fractions, ratios = [], []
    for u in draws(list(range(4000))):
        y0, y1, x0, x1 = crop_box(h, w, u, scale, ratio)
        assert 0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w
        fractions.append((y1 - y0) * (x1 - x0) / (h * w))
        ratios.append((x1 - x0) / (y1 - y0))
    fr, ra = np.array(fractions), np.array(ratios)
    tol = 0.01  # whole pixels round both sides
    assert fr.min() >= scale[0] - tol and fr.max() <= scale[1] + tol
    assert ra.min() >= ratio[0] - tol and ra.max() <= ratio[1] + tol
    # uniform in the range, less the large boxes that do not fit (torchvision: 0.456)
    assert 0.43 < fr.mean() < 0.48
    assert np.mean(np.log(ra)) == pytest.approx(0.0, abs=0.02)  # log-uniform, centred


def test_crop_boxes_match_torchvisions_distribution() -> None:
    tv = pytest.importorskip("torchvision.transforms")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    h, w, n = 200, 480, 2000
    img = torch.zeros(1, h, w)
    theirs = [tv.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3]) for _ in range(n)]
    ours = [crop_box(h, w, u, (0.08, 1.0), (3 / 4, 4 / 3)) for u in draws(list(range(n)))]
    t_area = np.array([ch * cw for _, _, ch, cw in theirs]) / (h * w)
    o_area = np.array([(y1 - y0) * (x1 - x0) for y0, y1, x0, x1 in ours]) / (h * w)
    t_left = np.array([j / (w - cw) if w > cw else 0.5 for _, j, _, cw in theirs])
    o_left = np.array([x0 / (w - (x1 - x0)) if w > x1 - x0 else 0.5 for _, _, x0, x1 in ours])
    assert abs(t_area.mean() - o_area.mean()) < 0.02
    assert abs(np.median(t_area) - np.median(o_area)) < 0.03
    assert abs(t_left.mean() - o_left.mean()) < 0.03


def test_the_fallback_is_torchvisions_centre_crop() -> None:
    u = [0.999] * (FLIP_DRAW + 1)  # every try asks for the largest, widest box
    # a 1000 x 10 strip: no box of the ratio range fits; ratio clamped to 3/4, centred
    assert crop_box(1000, 10, u, (0.9, 1.0), (3 / 4, 4 / 3)) == (493, 506, 0, 10)
    assert crop_box(10, 1000, u, (0.9, 1.0), (3 / 4, 4 / 3)) == (0, 10, 493, 506)
    # scale 1 fits only the whole image, which has the range's ratio: the whole image
    assert crop_box(30, 40, [0.5] * (FLIP_DRAW + 1), (1.0, 1.0), (4 / 3, 4 / 3)) == (0, 30, 0, 40)


def test_flips_happen_with_the_given_probability() -> None:
    for p in (0.0, 0.3, 1.0):
        flips = np.mean([u[FLIP_DRAW] < p for u in draws(list(range(5000)))])
        assert flips == pytest.approx(p, abs=0.025)


def test_a_flip_mirrors_the_output_and_half_the_images_flip() -> None:
    data = encode(photo(40, 60, 9), "PNG")
    plain = ImageDecoder((40, 60)).decode(data)
    flipped = ImageDecoder((40, 60), hflip=1.0).decode(data, seed=3)
    assert np.array_equal(flipped, plain[:, ::-1])
    dec = ImageDecoder((40, 60), hflip=0.5)
    out = dec.decode_batch([data] * 400, seeds=range(400)).images
    is_flipped = [np.array_equal(o, plain[:, ::-1]) for o in out]
    assert all(f or np.array_equal(o, plain) for f, o in zip(is_flipped, out, strict=True))
    assert 160 < sum(is_flipped) < 240


def test_a_random_crop_is_the_box_resized() -> None:
    """The DCT-scaled JPEG decode lands on the same pixels as crop-then-resize of the
    full image, within what the scaled decode changes."""
    cv2 = pytest.importorskip("cv2")
    y, x = np.mgrid[0:768, 0:1024].astype(np.float64)
    smooth = np.stack([x / 4.02, 128 + 120 * np.sin(y / 90), (x + y) / 7.03], axis=-1)
    big = encode(smooth.astype(np.uint8), "JPEG", quality=95)  # large boxes: 1/8 scale
    full = ImageDecoder().decode(big)
    for scale in ((0.5, 1.0), (0.02, 0.1)):
        dec = ImageDecoder((64, 64), resize="random", crop_scale=scale)
        for seed in range(6):
            u = draws([seed])[0]
            y0, y1, x0, x1 = crop_box(768, 1024, u, scale, (3 / 4, 4 / 3))
            ref = cv2.resize(full[y0:y1, x0:x1], (64, 64), interpolation=cv2.INTER_AREA)
            got = dec.decode(big, seed=seed)
            assert np.abs(got.astype(int) - ref).mean() < 2.0, (scale, seed)  # another box: > 20


# ------------------------------------------------------------------ output conversion


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("norm", [False, True])
def test_converted_output_equals_the_reference_from_uint8(
    layout: str, dtype: str, norm: bool
) -> None:
    if norm and dtype == "uint8":
        return
    stats = {"mean": IMAGENET[0], "std": IMAGENET[1]} if norm else {}
    u8 = augmenting().decode_batch(ITEMS, seeds=SEEDS).images
    dec = augmenting(layout=layout, dtype=dtype, **stats)
    got = dec.decode_batch(ITEMS, seeds=SEEDS).images
    assert got.dtype == np.dtype(dtype) and got.shape[1:] == dec.output_shape
    want = reference(u8, layout, np.float32, norm).astype(dtype) if dtype != "uint8" else u8
    if dtype == "uint8" and layout == "CHW":
        want = np.moveaxis(u8, -1, -3)
    assert np.array_equal(got, want)  # bit for bit: the table holds torchvision's values


@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_bfloat16_is_written_as_its_bit_patterns(layout: str) -> None:
    """numpy has no bfloat16: the decoder writes its bit patterns (uint16), rounded to
    nearest even from the float32 value, which torch then views (no conversion pass)."""
    stats = {"mean": IMAGENET[0], "std": IMAGENET[1]}
    f32 = augmenting(layout=layout, dtype="float32", **stats).decode_batch(ITEMS, seeds=SEEDS)
    dec = augmenting(layout=layout, dtype="bfloat16", **stats)
    assert dec.dtype == np.uint16 and dec.dtype_name == "bfloat16"
    got = dec.decode_batch(ITEMS, seeds=SEEDS).images
    assert got.dtype == np.uint16 and np.array_equal(got, bfloat16_bits(f32.images))
    # bf16 keeps float32's exponent: the patterns, widened, are within half a bf16 step
    widened = (got.astype(np.uint32) << 16).view(np.float32)
    assert np.allclose(widened, f32.images, rtol=2**-8, atol=0)
    torch = pytest.importorskip("torch")
    as_torch = torch.from_numpy(got).view(torch.bfloat16)
    assert torch.equal(as_torch, torch.from_numpy(f32.images).to(torch.bfloat16))
    assert "dtype='bfloat16'" in repr(dec)


@pytest.mark.parametrize("mode", ["L", "RGBA"])
def test_conversion_of_other_channel_counts(mode: str) -> None:
    stats = {"mean": 0.5, "std": [0.25] * (1 if mode == "L" else 4)}
    for layout in ("HWC", "CHW"):
        u8 = ImageDecoder(32, mode=mode, hflip=0.5).decode_batch(ITEMS, seeds=SEEDS).images  # type: ignore[arg-type]
        dec = ImageDecoder(32, mode=mode, hflip=0.5, layout=layout, dtype="float32", **stats)  # type: ignore[arg-type]
        got = dec.decode_batch(ITEMS, seeds=SEEDS).images
        want = (u8.astype(np.float32) * np.float32(1 / 255) - np.float32(0.5)) / np.float32(0.25)
        assert np.array_equal(got, want if layout == "HWC" else np.moveaxis(want, -1, -3))


def test_same_size_pngs_are_converted_too() -> None:
    """The lean same-size PNG path writes uint8 HWC; converting decoders bypass it."""
    img = photo(32, 32, 6)
    data = encode(img, "PNG")
    got = ImageDecoder(32, layout="CHW", dtype="float32").decode_batch([data] * 3).images
    want = np.moveaxis(img.astype(np.float32) * np.float32(1 / 255), -1, 0)
    assert all(np.array_equal(g, want) for g in got)
    flipped = ImageDecoder(32, hflip=1.0).decode_batch([data] * 2, seeds=[0, 1]).images
    assert np.array_equal(flipped[1], img[:, ::-1])


def test_failed_images_are_zero_in_float_batches() -> None:
    dec = augmenting(layout="CHW", dtype="float32", mean=IMAGENET[0], std=IMAGENET[1])
    res = dec.decode_batch([ITEMS[0], b"\x89PNG junk", ITEMS[1]], seeds=[1, 2, 3], on_error="skip")
    assert res.ok.tolist() == [True, False, True]
    assert not res.images[1].any() and res.images[0].any()


def test_decode_into_out_and_without_a_size() -> None:
    dec = augmenting(layout="CHW", dtype="float16")
    out = np.empty(dec.output_shape or (), dtype=np.float16)
    assert dec.decode(ITEMS[2], out=out, seed=4) is out
    assert np.array_equal(out, dec.decode(ITEMS[2], seed=4))
    full = ImageDecoder(dtype="float32", layout="CHW").decode(ITEMS[2])  # its own size
    assert full.shape == (3, 120, 400) and full.dtype == np.float32
    assert np.array_equal(
        full, reference(ImageDecoder().decode(ITEMS[2]), "CHW", np.float32, False)
    )


FALLBACK = """
import pickle, sys, numpy as np
from ferroload_codec import ImageDecoder, backends
items = pickle.load(sys.stdin.buffer)
assert backends()["resize"] is None
seeds = list(range(len(items)))
u8 = ImageDecoder((24, 20), resize="random", hflip=0.5).decode_batch(items, seeds=seeds).images
for layout in ("HWC", "CHW"):
    dec = ImageDecoder((24, 20), resize="random", hflip=0.5, layout=layout, dtype="float32",
                       mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4))
    got = dec.decode_batch(items, seeds=seeds).images
    want = (u8.astype(np.float32) * np.float32(1 / 255) - np.float32([0.5, 0.4, 0.3])) \\
        / np.float32([0.2, 0.3, 0.4])
    assert np.array_equal(got, want if layout == "HWC" else np.moveaxis(want, -1, 1)), layout
print("ok")
"""


def test_conversion_and_flip_without_opencv() -> None:
    env = {**os.environ, "FERROLOAD_CODEC_DISABLE": "opencv"}
    res = subprocess.run(
        [sys.executable, "-c", FALLBACK], input=pickle.dumps(ITEMS), env=env, capture_output=True
    )
    assert res.returncode == 0 and res.stdout.strip() == b"ok", res.stderr[-2000:]


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": None, "resize": "random"}, "needs an output size"),
        ({"resize": "shorter", "crop_scale": (0.5, 1.0)}, "apply to resize='random'"),
        ({"resize": "random", "crop_scale": (0.0, 1.0)}, "0 < low <= high <= 1"),
        ({"resize": "random", "crop_scale": (0.5, 0.2)}, "low <= high"),
        ({"resize": "random", "crop_scale": (0.5, 1.5)}, "0 < low <= high <= 1"),
        ({"resize": "random", "crop_ratio": (-1.0, 2.0)}, "positive"),
        ({"resize": "random", "crop_ratio": "wide"}, "pair of numbers"),
        ({"resize": "random", "crop_ratio": (1.0, math.inf)}, "finite"),
        ({"resize": "sideways"}, "resize must be one of"),
        ({"hflip": 1.5}, r"number in \[0, 1\]"),
        ({"hflip": True}, "probability"),
        ({"dtype": "int32"}, "dtype must be one of"),
        ({"dtype": "float64"}, "dtype must be one of"),
        ({"layout": "WHC"}, "layout must be one of"),
        ({"mean": (0.5, 0.5, 0.5)}, "dtype='float32'"),
        ({"dtype": "float32", "std": (0.2, 0.0, 0.2)}, "positive"),
        ({"dtype": "float32", "mean": (0.5, 0.5)}, "3 finite numbers"),
        ({"dtype": "float32", "mean": "grey"}, "one per channel"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], match: str) -> None:
    size = kwargs.pop("size", 32)
    with pytest.raises(ValueError, match=match):
        ImageDecoder(size, **kwargs)


def test_seeds_are_required_when_augmenting_and_checked() -> None:
    dec = ImageDecoder(32, resize="random", hflip=0.5)
    assert dec.needs_seeds and not ImageDecoder(32, dtype="float32").needs_seeds
    with pytest.raises(ValueError, match=r"resize='random' and hflip=0.5 .* seeds="):
        dec.decode_batch(ITEMS)
    with pytest.raises(ValueError, match="seed="):
        dec.decode(ITEMS[0])
    with pytest.raises(ValueError, match="2 seeds for 6 items"):
        dec.decode_batch(ITEMS, seeds=[1, 2])
    with pytest.raises(TypeError, match="seeds must be ints"):
        dec.decode_batch(ITEMS[:2], seeds=[1, 2.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="out must be float32"):
        ImageDecoder(32, dtype="float32").decode_batch(ITEMS, out=np.empty((6, 32, 32, 3)))
    with pytest.raises(ValueError, match=r"out must be uint8 of shape \(3, 32, 32\)"):
        ImageDecoder(32, layout="CHW").decode(ITEMS[0], out=np.empty((32, 32, 3), np.uint8))


def test_repr_and_shape_tell_the_options() -> None:
    dec = ImageDecoder((20, 30), resize="random", hflip=0.5, layout="CHW", dtype=np.float16,
                       mean=0.5, std=0.5)  # fmt: skip
    assert dec.output_shape == (3, 20, 30) and dec.dtype == np.float16
    text = repr(dec)
    assert "resize='random'" in text and "hflip=0.5" in text and "dtype='float16'" in text
