"""Seeded crop boxes and flips, and the dtype/layout/normalisation conversion of images.

`ImageDecoder` does both in its decode threads.

Every random choice comes from a counter-based hash of the image's seed: draw `k` of seed
`s` is splitmix64's `k+1`-th output from state `s`, turned into a float in [0, 1) from its
top 53 bits. It is a pure function of `(s, k)`, the same on every machine and in every
thread, so a batch decodes to the same pixels whatever thread decodes which image. The
crop box depends on the image's size, known only from its header: the draws are made up
front for the whole batch (one vectorised pass) and turned into a box once the header has
been read.

The conversion of a uint8 image to float is a table lookup per channel: an 8-bit value
has 256 possible results, computed once per decoder exactly as torchvision computes them
(`x.float() * (1/255)`, then `(x - mean) / std` in float32), so the output equals
torchvision's `ToDtype(float32, scale=True)` + `Normalize` bit for bit. OpenCV's `LUT`
applies the table in one SIMD pass per plane, writing straight into the batch array.
"""

from __future__ import annotations

import math
import operator
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ferroload_codec._backends import opencv

Layout = Literal["HWC", "CHW"]
LAYOUTS = ("HWC", "CHW")
#: The output dtypes `ImageDecoder` writes.
DTYPES = ("uint8", "float32", "float16", "bfloat16")
#: numpy has no bfloat16: such images are uint16 arrays of bfloat16 bit patterns
BFLOAT16_STORAGE = np.dtype(np.uint16)
#: torchvision's `RandomResizedCrop` defaults: area fraction and aspect ratio ranges.
DEFAULT_CROP_SCALE = (0.08, 1.0)
DEFAULT_CROP_RATIO = (3 / 4, 4 / 3)
#: Tries at a random box before the centre-crop fallback (as torchvision).
CROP_TRIES = 10
_DRAWS_PER_TRY = 4  # area, log aspect ratio, top, left
FLIP_DRAW = CROP_TRIES * _DRAWS_PER_TRY  # the index of the flip's draw
NUM_DRAWS = FLIP_DRAW + 1

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's output function (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def check_seeds(seeds: Sequence[Any], n: int) -> list[int]:
    """`seeds` as n Python ints (any int; only its low 64 bits count).

    Raises:
        ValueError: for a count other than n.
        TypeError: for a seed that is not an int.
    """
    if len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} items")
    out = []
    for s in seeds:
        if isinstance(s, bool) or s is None:
            raise TypeError(f"seeds must be ints, got {s!r}")
        try:
            out.append(operator.index(s) & _MASK64)
        except TypeError:
            raise TypeError(f"seeds must be ints, got {s!r}") from None
    return out


def draws(seeds: Sequence[int], count: int = NUM_DRAWS) -> list[list[float]]:
    """The first `count` uniforms in [0, 1) of each seed (seeds already reduced to 64 bits).

    Draw k of seed s is splitmix64 at state `s + (k + 1) * 0x9E3779B97F4A7C15`, its top 53
    bits scaled to [0, 1).
    """
    s = np.fromiter(seeds, dtype=np.uint64, count=len(seeds))
    k = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = s[:, None] + k[None, :] * np.uint64(_GAMMA)
    u = (_mix(z) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    rows: list[list[float]] = u.tolist()
    return rows


def _pair(value: Any, what: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair of numbers (low, high), got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise ValueError(f"{what} must be finite with low <= high, got {value!r}")
    return lo, hi


def check_crop(scale: Any, ratio: Any) -> tuple[tuple[float, float], tuple[float, float]]:
    """Validated `(scale, ratio)` of a random resized crop (None: torchvision's defaults).

    Raises:
        ValueError: a scale outside (0, 1] or a ratio that is not positive, or low > high.
    """
    sc = DEFAULT_CROP_SCALE if scale is None else _pair(scale, "crop_scale")
    ra = DEFAULT_CROP_RATIO if ratio is None else _pair(ratio, "crop_ratio")
    if not 0 < sc[0] <= sc[1] <= 1:
        raise ValueError(f"crop_scale must satisfy 0 < low <= high <= 1, got {scale!r}")
    if ra[0] <= 0:
        raise ValueError(f"crop_ratio must be positive (width / height), got {ratio!r}")
    return sc, ra


def crop_box(
    h: int,
    w: int,
    u: Sequence[float],
    scale: tuple[float, float],
    ratio: tuple[float, float],
) -> tuple[int, int, int, int]:
    """The box `(y0, y1, x0, x1)` of a random resized crop of an `h` x `w` image.

    torchvision's `RandomResizedCrop.get_params` with its random numbers taken from the
    draws `u`: up to 10 tries at an area fraction uniform in `scale` and an aspect ratio
    (width / height) log-uniform in `ratio`, rounded to whole pixels; the first box that
    fits is placed uniformly; if none fits, the centre crop of the whole image with its
    ratio clamped to `ratio`.
    """
    area = h * w
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    s0, ds = scale[0], scale[1] - scale[0]
    for t in range(0, CROP_TRIES * _DRAWS_PER_TRY, _DRAWS_PER_TRY):
        target = area * (s0 + ds * u[t])
        aspect = math.exp(lo + (hi - lo) * u[t + 1])
        cw = round(math.sqrt(target * aspect))
        ch = round(math.sqrt(target / aspect))
        if 0 < cw <= w and 0 < ch <= h:
            y0 = min(int(u[t + 2] * (h - ch + 1)), h - ch)
            x0 = min(int(u[t + 3] * (w - cw + 1)), w - cw)
            return y0, y0 + ch, x0, x0 + cw
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, min(h, max(1, round(w / ratio[0])))
    elif in_ratio > ratio[1]:
        cw, ch = min(w, max(1, round(h * ratio[1]))), h
    else:
        cw, ch = w, h
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    return y0, y0 + ch, x0, x0 + cw


def flip_inplace(img: npt.NDArray[Any]) -> None:
    """Mirror an HWC image left-right, in place."""
    cv2 = opencv()
    if cv2 is not None and img.flags.c_contiguous:
        src = img[..., 0] if img.shape[2] == 1 else img
        if cv2.flip(src, 1, dst=src) is src:  # OpenCV hands back `dst` when it wrote there
            return
    img[...] = img[:, ::-1].copy()


def check_dtype(dtype: Any) -> str:
    """The name of `dtype` (a name, a numpy dtype, or any object whose name ends in
    `bfloat16`, such as `torch.bfloat16`), one of `DTYPES`.

    Raises:
        ValueError: any other dtype.
    """
    name = str(dtype).rsplit(".", 1)[-1] if not isinstance(dtype, np.dtype) else dtype.name
    if name != "bfloat16":
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = ""
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return name


def bfloat16_bits(values: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """The bfloat16 bit patterns of float32 `values`, rounded to nearest even (as
    `torch.Tensor.to(torch.bfloat16)` rounds finite values)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def _per_channel(value: Any, channels: int, what: str) -> tuple[float, ...]:
    values = [value] if isinstance(value, int | float) else value
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(
            f"{what} must be a number or {channels} numbers (one per channel), got {value!r}"
        ) from None
    if len(out) == 1:
        out *= channels
    if len(out) != channels or not all(math.isfinite(v) for v in out):
        raise ValueError(
            f"{what} must be a number or {channels} finite numbers (one per channel), got {value!r}"
        )
    return out


_local = threading.local()


def _planes(shape: tuple[int, int], channels: int) -> list[npt.NDArray[np.uint8]]:
    """Per-thread uint8 planes (reused) for splitting an HWC image."""
    planes: list[npt.NDArray[np.uint8]] | None = getattr(_local, "planes", None)
    if planes is None or len(planes) != channels or planes[0].shape != shape:
        planes = _local.planes = [np.empty(shape, dtype=np.uint8) for _ in range(channels)]
    return planes


class OutputFormat:
    """How a decoded uint8 HWC image is written out: dtype, layout, scaling.

    Args:
        channels: of the image.
        dtype: `uint8`, `float32` or `float16` (a name or a numpy dtype); floats are
            scaled to [0, 1].
        layout: `HWC` or `CHW`.
        mean: per-channel means on the [0, 1] scale (floats only), subtracted.
        std: per-channel standard deviations on the [0, 1] scale, divided by.

    Raises:
        ValueError: an unknown dtype or layout, mean/std with uint8, a std that is not
            positive, or mean/std with the wrong number of values.
    """

    def __init__(self, channels: int, *, dtype: Any, layout: Any, mean: Any, std: Any) -> None:
        name = check_dtype(dtype)
        dt = BFLOAT16_STORAGE if name == "bfloat16" else np.dtype(name)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        if (mean is not None or std is not None) and dt == np.uint8:
            raise ValueError(
                "mean/std normalise float output: pass dtype='float32' (or 'float16') too"
            )
        m = None if mean is None else _per_channel(mean, channels, "mean")
        s = None if std is None else _per_channel(std, channels, "std")
        if s is not None and any(v <= 0 for v in s):
            raise ValueError(f"std must be positive, got {std!r}")
        x = np.arange(256, dtype=np.float32)[:, None].repeat(channels, axis=1)
        table: npt.NDArray[Any]
        if dt == np.uint8:
            table = x.astype(np.uint8)
        else:
            # torchvision: ToDtype(float32, scale=True) multiplies by 1/255 (in float32),
            # Normalize subtracts the mean and divides by the std (float32 tensors)
            y: npt.NDArray[Any] = x * np.float32(1 / 255)
            if m is not None:
                y = y - np.asarray(m, dtype=np.float32)
            if s is not None:
                y = y / np.asarray(s, dtype=np.float32)
            table = bfloat16_bits(y) if name == "bfloat16" else y.astype(dt)
        self.channels = channels
        #: `uint8`, `float32`, `float16` or `bfloat16`
        self.name = name
        #: the arrays' dtype (uint16 for bfloat16's bit patterns)
        self.dtype: np.dtype[Any] = dt
        self.layout: Layout = layout
        self.mean = m
        self.std = s
        #: `(256, channels)`: the output value of each 8-bit input value
        self.table: npt.NDArray[Any] = np.ascontiguousarray(table)
        # OpenCV's lookup tables: 16-bit floats as their bit patterns (OpenCV copies those)
        self._cv_view: Any = np.int16 if dt.itemsize == 2 else None
        lut = table.view(np.int16) if dt.itemsize == 2 else table
        self._lut = np.ascontiguousarray(lut).reshape(1, 256, channels)
        self._lut_planes = [
            np.ascontiguousarray(lut[:, k]).reshape(1, 256) for k in range(channels)
        ]

    @property
    def identity(self) -> bool:
        """True when the values are the decoded uint8 ones (only the layout may change)."""
        return self.dtype == np.uint8

    @property
    def converts(self) -> bool:
        """False when the decoded uint8 HWC image is the output as it is."""
        return self.dtype != np.uint8 or self.layout == "CHW"

    def shape(self, h: int, w: int) -> tuple[int, int, int]:
        """The output shape of an `h` x `w` image."""
        return (self.channels, h, w) if self.layout == "CHW" else (h, w, self.channels)

    def write(self, src: npt.NDArray[np.uint8], dst: npt.NDArray[Any]) -> None:
        """Convert the uint8 HWC `src` into `dst` (this format's dtype and shape)."""
        c = self.channels
        cv2 = opencv()
        if cv2 is not None and dst.flags.c_contiguous and src.flags.c_contiguous:
            # OpenCV hands back `dst` itself when it wrote there (else a new array)
            d = dst if self._cv_view is None else dst.view(self._cv_view)
            if self.layout == "HWC":
                s2, d2 = (src[..., 0], d[..., 0]) if c == 1 else (src, d)
                lut = self._lut if c > 1 else self._lut_planes[0]
                if cv2.LUT(s2, lut, dst=d2) is d2:
                    return
            elif self.identity and c > 1:  # uint8 CHW: a split straight into the planes
                planes = list(d)
                if all(a is b for a, b in zip(cv2.split(src, planes), planes, strict=True)):
                    return
            else:
                planes = [src[..., 0]] if c == 1 else cv2.split(src, _planes(src.shape[:2], c))
                ok = True
                for plane, lut, dk in zip(planes, self._lut_planes, d, strict=True):
                    ok = cv2.LUT(plane, lut, dst=dk) is dk and ok
                if ok:
                    return
        # numpy: a fancy-indexed lookup per channel
        for k in range(c):
            plane = self.table[:, k][src[..., k]]
            if self.layout == "CHW":
                dst[k] = plane
            else:
                dst[..., k] = plane


def check_hflip(hflip: Any) -> float:
    """`hflip` as a probability.

    Raises:
        ValueError: anything but a number in [0, 1] (a bool too: say 0.5 or 1.0).
    """
    if isinstance(hflip, bool) or not isinstance(hflip, int | float) or not 0 <= hflip <= 1:
        raise ValueError(f"hflip is the probability of a flip, a number in [0, 1]; got {hflip!r}")
    return float(hflip)
