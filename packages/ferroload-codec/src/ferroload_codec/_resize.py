"""Resize geometry (exact, shorter-then-crop, longer-then-pad) and resizing into a buffer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ferroload_codec._backends import opencv

ResizeMode = Literal["exact", "shorter", "longer"]
Interpolation = Literal["bilinear", "bicubic", "area", "nearest"]
RESIZE_MODES = ("exact", "shorter", "longer")
#: The resize modes of images: those of `geometry`, and a seeded random resized crop.
ImageResize = Literal["exact", "shorter", "longer", "random"]
IMAGE_RESIZE_MODES = (*RESIZE_MODES, "random")
INTERPOLATIONS = ("bilinear", "bicubic", "area", "nearest")


def check_max_pixels(max_pixels: object) -> int:
    """`max_pixels`, which must be a positive int (not a bool).

    Raises:
        ValueError: naming the value.
    """
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels <= 0:
        raise ValueError(f"max_pixels must be a positive int, got {max_pixels!r}")
    return max_pixels


def check_size(size: object, max_pixels: int) -> tuple[int, int] | None:
    """An output `size` as `(height, width)` (an int is a square, None stays None).

    Raises:
        ValueError: unless positive ints, or for an output of more than `max_pixels`
            pixels: no image that decodes may have that many, and its buffers would
            only fail to allocate (`size=(10**6, 10**6)` was a `MemoryError` at the
            first batch).
    """

    def ok(v: object) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool) and int(v) > 0

    if size is None:
        return None
    if isinstance(size, int | np.integer) and ok(size):
        dims = int(size), int(size)
    elif isinstance(size, tuple | list) and len(size) == 2 and all(ok(v) for v in size):
        dims = int(size[0]), int(size[1])
    else:
        raise ValueError(f"size must be (height, width) of positive ints or an int, got {size!r}")
    if dims[0] * dims[1] > max_pixels:
        raise ValueError(
            f"size={size!r} is {dims[0] * dims[1]:,} pixels an image, more than "
            f"max_pixels={max_pixels:,}; raise max_pixels if you mean it"
        )
    return dims


@dataclass(frozen=True)
class Geometry:
    """How a source image maps onto the output.

    The source box `[y0, y1) x [x0, x1)` is resized to `(height, width)` and placed at
    `(top, left)` of the output; the rest of the output (mode `longer`) is padding.
    """

    y0: int
    y1: int
    x0: int
    x1: int
    height: int
    width: int
    top: int
    left: int

    @property
    def pads(self) -> bool:
        """True when the resized box does not cover the whole output."""
        return self.top > 0 or self.left > 0

    @property
    def box_shape(self) -> tuple[int, int]:
        return self.y1 - self.y0, self.x1 - self.x0

    def scaled(self, num: int, den: int, src_h: int, src_w: int) -> Geometry:
        """The same geometry on a source decoded at scale num/den (libjpeg's rounding)."""

        def s(v: int, full: int, scaled_full: int) -> int:
            return scaled_full if v == full else min(scaled_full, (v * num + den // 2) // den)

        sh, sw = -(-src_h * num // den), -(-src_w * num // den)
        return Geometry(
            s(self.y0, src_h, sh), max(1, s(self.y1, src_h, sh)),
            s(self.x0, src_w, sw), max(1, s(self.x1, src_w, sw)),
            self.height, self.width, self.top, self.left,
        )  # fmt: skip


def geometry(src_h: int, src_w: int, out_h: int, out_w: int, mode: ResizeMode) -> Geometry:
    """Where the source goes in an `out_h` x `out_w` output under `mode`."""
    if mode == "exact":
        return Geometry(0, src_h, 0, src_w, out_h, out_w, 0, 0)
    if mode == "shorter":  # scale to cover the output, crop the centre of the source
        scale = max(out_h / src_h, out_w / src_w)
        box_h = min(src_h, max(1, round(out_h / scale)))
        box_w = min(src_w, max(1, round(out_w / scale)))
        y0, x0 = (src_h - box_h) // 2, (src_w - box_w) // 2
        return Geometry(y0, y0 + box_h, x0, x0 + box_w, out_h, out_w, 0, 0)
    # longer: scale to fit inside the output, pad around it
    scale = min(out_h / src_h, out_w / src_w)
    h = min(out_h, max(1, round(src_h * scale)))
    w = min(out_w, max(1, round(src_w * scale)))
    return Geometry(0, src_h, 0, src_w, h, w, (out_h - h) // 2, (out_w - w) // 2)


def dct_scale(box_h: int, box_w: int, out_h: int, out_w: int) -> tuple[int, int]:
    """The smallest fast libjpeg DCT scale (1/8, 1/4, 1/2, 1) that keeps the box at least
    as large as the output, so that the final resize only ever shrinks by less than 2x."""
    for den in (8, 4, 2):
        if box_h // den >= out_h and box_w // den >= out_w:
            return 1, den
    return 1, 1


_CV_FLAGS = {"bilinear": 1, "bicubic": 2, "area": 3, "nearest": 0}  # cv2.INTER_*
_PIL_FILTERS = {"bilinear": 2, "bicubic": 3, "area": 4, "nearest": 0}  # Image.Resampling


def resize_into(
    src: npt.NDArray[np.uint8], dst: npt.NDArray[np.uint8], interpolation: Interpolation
) -> None:
    """Resize HWC `src` into HWC `dst` (any strides), with OpenCV or else Pillow."""
    h, w = dst.shape[:2]
    if src.shape[:2] == (h, w):
        dst[...] = src
        return
    cv2 = opencv()
    if cv2 is not None:
        flag = _CV_FLAGS[interpolation]
        if interpolation == "bilinear" and (src.shape[0] > 2 * h or src.shape[1] > 2 * w):
            flag = _CV_FLAGS["area"]  # bilinear without antialiasing would alias
        if dst.shape[2] == 1:
            cv2.resize(src[..., 0], (w, h), dst=dst[..., 0], interpolation=flag)
        else:
            cv2.resize(src, (w, h), dst=dst, interpolation=flag)
        return
    dst[...] = _pil_resize(src, h, w, interpolation)


def _pil_resize(src: npt.NDArray[np.uint8], h: int, w: int, interpolation: Interpolation) -> Any:
    from PIL import Image

    channels = src.shape[2]
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    img = Image.fromarray(src[..., 0] if channels == 1 else np.ascontiguousarray(src), mode)
    out = np.asarray(img.resize((w, h), _PIL_FILTERS[interpolation]))
    return out[..., None] if channels == 1 else out
