"""Deterministic benchmark data: natural-looking images encoded once, with int labels.

scikit-image's sample photos are used when `skimage` is installed; otherwise a few large
"photos" are synthesized with numpy (smooth colour gradients, multi-octave value noise for
texture, textured shapes as objects). Every sample is a random crop of one of them, resized
to the target size, with sensor-noise grain added (real photos are never noise-free, and
the grain brings encoded sizes close to real ones: about 2.2 KB per 32x32 PNG and 18 KB
per 256x256 JPEG at quality 90). Payloads thus vary in content and size the way a real
image set does. The same seed always gives the same bytes.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import io
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image

__all__ = [
    "Samples",
    "base_images",
    "encode_natural",
    "encode_samples",
    "image_source",
    "natural_photos",
    "natural_source",
]

_BASE_SIZE = 768
_NUM_BASES = 12
_GRAIN_TILES = 8
#: Standard deviation of the sensor noise, in 8-bit levels.
GRAIN_SIGMA = 6.0


@dataclass(frozen=True)
class Samples:
    """Encoded payloads and labels of one benchmark set.

    Attributes:
        name: short name of the set (`tiny`, `jpeg`).
        ext: file extension of the payloads (`png`, `jpg`).
        payloads: encoded image bytes, one per sample.
        labels: int label of each sample.
    """

    name: str
    ext: str
    payloads: list[bytes]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def payload_bytes(self) -> int:
        """Total size of the payloads."""
        return sum(len(p) for p in self.payloads)

    @functools.cached_property
    def keys(self) -> list[str]:
        """Sample ids / WebDataset keys (`s000000`, `s000001`, …), made once, not timed."""
        return [f"s{i:06d}" for i in range(len(self.payloads))]


def _value_noise(rng: np.random.Generator, size: int, cells: int) -> npt.NDArray[np.float32]:
    """Smooth noise in [0, 1]: a `cells` x `cells` random grid upsampled bicubically."""
    grid = (rng.random((cells, cells)) * 255).astype(np.uint8)
    img = Image.fromarray(grid, mode="L").resize((size, size), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.float32) / 255.0


def _synthetic_photo(rng: np.random.Generator, size: int) -> npt.NDArray[np.uint8]:
    """One natural-looking RGB image: gradients, blobs and texture at several scales."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    angle = rng.uniform(0, 2 * np.pi)
    ramp = np.cos(angle) * xx + np.sin(angle) * yy
    ramp = (ramp - ramp.min()) / (np.ptp(ramp) + 1e-6)
    octaves = [(4, 0.35), (12, 0.25), (40, 0.15), (160, 0.12), (size // 3, 0.13)]
    channels = []
    for _ in range(3):
        tex = sum(w * _value_noise(rng, size, c) for c, w in octaves)
        base = rng.uniform(0.2, 0.8)
        span = rng.uniform(0.2, 0.6)
        channels.append(base * 0.5 + span * (0.5 * ramp + 0.5 * tex))
    img: npt.NDArray[np.float32] = np.stack(channels, axis=-1)
    # Hard-edged, textured shapes (objects) over the background: discs and boxes.
    for _ in range(int(rng.integers(8, 16))):
        cx, cy = rng.uniform(0, 1, 2)
        r = rng.uniform(0.03, 0.2)
        if rng.random() < 0.5:
            mask = ((xx - cx) ** 2 + (yy - cy) ** 2) < r * r
        else:
            mask = (np.abs(xx - cx) < r) & (np.abs(yy - cy) < r * rng.uniform(0.3, 1.5))
        shade = 0.6 + 0.4 * _value_noise(rng, size, int(rng.integers(20, 120)))[mask]
        colour = rng.uniform(0, 1, 3).astype(np.float32)
        img[mask] = img[mask] * 0.3 + shade[:, None] * colour * 0.7
    img += rng.normal(0, 0.02, img.shape).astype(np.float32)  # sensor noise
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def image_source() -> str:
    """Where the base images come from: `skimage.data` or `synthetic`."""
    return "skimage.data" if _skimage_photos() else "synthetic"


@functools.cache
def _skimage_photos() -> list[npt.NDArray[np.uint8]]:
    """scikit-image's colour sample photos, or [] when it is not installed."""
    if importlib.util.find_spec("skimage") is None:
        return []
    sd = importlib.import_module("skimage.data")
    names = [
        "astronaut",
        "chelsea",
        "coffee",
        "rocket",
        "immunohistochemistry",
        "hubble_deep_field",
    ]
    out = []
    for name in names:
        try:
            img = np.asarray(getattr(sd, name)())
        except Exception:  # a photo that needs a download, or is missing
            continue
        if img.ndim == 3 and img.shape[2] == 3 and min(img.shape[:2]) >= 256:
            out.append(img.astype(np.uint8))
    return out


def base_images(seed: int = 0) -> list[npt.NDArray[np.uint8]]:
    """The large images every sample is cropped from (deterministic for a seed)."""
    photos = _skimage_photos()
    if photos:
        return list(photos)
    rng = np.random.default_rng(seed)
    return [_synthetic_photo(rng, _BASE_SIZE) for _ in range(_NUM_BASES)]


def _shrink(base: npt.NDArray[np.uint8], side: int) -> npt.NDArray[np.uint8]:
    """`base` downscaled so that its shorter side is at most `side` (crops stay cheap)."""
    h, w = base.shape[:2]
    if min(h, w) <= side:
        return base
    scale = side / min(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray(base).resize(size, Image.Resampling.LANCZOS))


def _grain(rng: np.random.Generator, size: int, sigma: float) -> list[npt.NDArray[np.int16]]:
    """A few tiles of sensor noise, added to resized crops (photos are never noise-free)."""
    return [
        np.round(rng.normal(0, sigma, (size, size, 3))).astype(np.int16)
        for _ in range(_GRAIN_TILES)
    ]


def _crop_resize(
    rng: np.random.Generator,
    bases: list[npt.NDArray[np.uint8]],
    grain: list[npt.NDArray[np.int16]],
    size: int,
) -> Image.Image:
    base = bases[int(rng.integers(len(bases)))]
    h, w = base.shape[:2]
    side = int(rng.integers(max(size, min(h, w) // 4), min(h, w) + 1))
    y = int(rng.integers(0, h - side + 1))
    x = int(rng.integers(0, w - side + 1))
    img = Image.fromarray(base[y : y + side, x : x + side])
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    arr = np.asarray(img.resize((size, size), Image.Resampling.BILINEAR), dtype=np.int16)
    noise = np.roll(grain[int(rng.integers(len(grain)))], int(rng.integers(size)), axis=0)
    return Image.fromarray(np.clip(arr + noise, 0, 255).astype(np.uint8))


def _encode(img: Image.Image, fmt: str, quality: int) -> bytes:
    """`img` as PNG (`fmt` png) or JPEG at `quality` (`fmt` jpg)."""
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, format="PNG")
    else:
        img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def encode_samples(
    name: str,
    n: int,
    *,
    size: int,
    fmt: str,
    seed: int,
    num_classes: int = 1000,
    quality: int = 90,
    bases: list[npt.NDArray[np.uint8]] | None = None,
) -> Samples:
    """Encode `n` images of `size` x `size` as PNG or JPEG, with labels in [0, num_classes).

    Args:
        name: name of the set.
        n: number of samples.
        size: side of the square images, in pixels.
        fmt: `png` or `jpg`.
        seed: seed of the crops and labels.
        num_classes: labels are drawn uniformly from `range(num_classes)`.
        quality: JPEG quality.
        bases: the images to crop from (default: `base_images(seed)`).
    """
    if fmt not in ("png", "jpg"):
        raise ValueError(f"fmt must be 'png' or 'jpg', got {fmt!r}")
    rng = np.random.default_rng(seed)
    bases = base_images(seed) if bases is None else bases
    sources = [_shrink(b, 4 * size) for b in bases]
    grain = _grain(rng, size, GRAIN_SIGMA)
    labels = rng.integers(0, num_classes, n).tolist()
    payloads = []
    for _ in range(n):
        img = _crop_resize(rng, sources, grain, size)
        payloads.append(_encode(img, fmt, quality))
    return Samples(name, fmt, payloads, labels)


# --------------------------------------------------------------------------- natural crops
# Used by bench_codec.py: crops of real photos at a random scale, no added grain.

#: scikit-image's colour photos that ship with it (no download needed).
_NATURAL_NAMES = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
)


@functools.cache
def _natural_skimage() -> tuple[npt.NDArray[np.uint8], ...]:
    if importlib.util.find_spec("skimage") is None:
        return ()
    sd = importlib.import_module("skimage.data")
    out = []
    for name in _NATURAL_NAMES:
        try:
            img = np.asarray(getattr(sd, name)())
        except Exception:  # a photo that needs a download, or is missing
            continue
        if img.ndim == 3 and img.shape[2] == 3:
            out.append(np.ascontiguousarray(img, dtype=np.uint8))
    return tuple(out)


def natural_source() -> str:
    """Where `natural_photos` come from: `skimage.data (N photos)` or `synthetic`."""
    photos = _natural_skimage()
    return f"skimage.data ({len(photos)} photos)" if photos else "synthetic"


def natural_photos(seed: int = 0) -> list[npt.NDArray[np.uint8]]:
    """scikit-image's bundled colour photos (astronaut, chelsea, coffee, rocket, hubble deep
    field, immunohistochemistry, retina), or the synthetic base images without skimage."""
    photos = _natural_skimage()
    return list(photos) if photos else base_images(seed)


def _natural_crop(
    rng: np.random.Generator, photos: list[npt.NDArray[np.uint8]], out_h: int, out_w: int
) -> Image.Image:
    """A crop of a random photo, with the output's aspect ratio, at a random scale (between
    half and all of the largest such box, and never under half the output size), mirrored
    half of the time, resized to `out_w` x `out_h` with Pillow's BICUBIC filter."""
    photo = photos[int(rng.integers(len(photos)))]
    h, w = photo.shape[:2]
    fit = min(h / out_h, w / out_w)  # the largest box of the output's aspect ratio
    low = min(fit, max(0.5 * fit, 0.5))
    scale = float(rng.uniform(low, fit))
    ch = max(1, min(h, round(out_h * scale)))
    cw = max(1, min(w, round(out_w * scale)))
    y = int(rng.integers(0, h - ch + 1))
    x = int(rng.integers(0, w - cw + 1))
    img = Image.fromarray(photo[y : y + ch, x : x + cw])
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return img.resize((out_w, out_h), Image.Resampling.BICUBIC)


def encode_natural(
    name: str,
    n: int,
    *,
    fmt: str,
    seed: int,
    size: int | None = None,
    short_side: tuple[int, int] = (300, 700),
    max_aspect: float = 1.5,
    landscape: float = 0.7,
    quality: int = 90,
    photos: list[npt.NDArray[np.uint8]] | None = None,
) -> Samples:
    """Encode `n` natural-image crops (see `_natural_crop`) as JPEG or RGB PNG.

    Args:
        name: name of the set.
        n: number of images.
        fmt: `jpg` or `png`.
        seed: seed of the crops, shapes and labels.
        size: side of square images; None draws each image's shape: the short side uniform
            in `short_side` (inclusive), the long side that times a uniform aspect ratio in
            [1, `max_aspect`], landscape with probability `landscape`.
        quality: JPEG quality.
        photos: the photos to crop from (default: `natural_photos(seed)`).
    """
    if fmt not in ("png", "jpg"):
        raise ValueError(f"fmt must be 'png' or 'jpg', got {fmt!r}")
    rng = np.random.default_rng(seed)
    photos = natural_photos(seed) if photos is None else photos
    labels = rng.integers(0, 1000, n).tolist()
    payloads = []
    for _ in range(n):
        if size is not None:
            oh = ow = size
        else:
            short = int(rng.integers(short_side[0], short_side[1] + 1))
            long = round(short * float(rng.uniform(1.0, max_aspect)))
            oh, ow = (short, long) if rng.random() < landscape else (long, short)
        img = _natural_crop(rng, photos, oh, ow)
        payloads.append(_encode(img, fmt, quality))
    return Samples(name, fmt, payloads, labels)
