"""Pixel modes and array helpers for decoded images: scratch arrays, orientation, channels."""

from __future__ import annotations

import threading
from typing import Literal

import numpy as np
import numpy.typing as npt

ImageMode = Literal["RGB", "L", "RGBA"]
#: Channels of each image mode.
CHANNELS = {"RGB": 3, "L": 1, "RGBA": 4}

_scratch_local = threading.local()


def scratch(shape: tuple[int, int, int], slot: str = "decode") -> npt.NDArray[np.uint8]:
    """A per-thread scratch array (reused, grown as needed) for a decode before resizing
    (`slot="decode"`) or a uint8 image before its conversion (`slot="convert"`).

    A fresh array per image would be a `mmap`/`munmap` pair above glibc's threshold (128
    KiB: a 256x256 RGB image) plus page faults, and those serialise the decode threads.
    """
    need = shape[0] * shape[1] * shape[2]
    buf: npt.NDArray[np.uint8] | None = getattr(_scratch_local, slot, None)
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1 << 20), dtype=np.uint8)
        setattr(_scratch_local, slot, buf)
    return buf[:need].reshape(shape)


def orient(arr: npt.NDArray[np.uint8], orientation: int) -> npt.NDArray[np.uint8]:
    """Apply an EXIF orientation (as PIL.ImageOps.exif_transpose does) to an HWC array."""
    if orientation == 2:
        return arr[:, ::-1]
    if orientation == 3:
        return arr[::-1, ::-1]
    if orientation == 4:
        return arr[::-1]
    if orientation == 5:
        return arr.transpose(1, 0, 2)
    if orientation == 6:
        return np.rot90(arr, -1)
    if orientation == 7:
        return np.rot90(arr, -1)[::-1]
    if orientation == 8:
        return np.rot90(arr, 1)
    return arr


def convert_channels(arr: npt.NDArray[np.uint8], channels: int) -> npt.NDArray[np.uint8]:
    """HWC array with `channels` channels, converting like Pillow's `convert`."""
    have = arr.shape[2]
    if have == channels:
        return arr
    if channels == 1:  # ITU-R 601-2 luma with Pillow's fixed-point rounding
        rgb = arr[..., :3].astype(np.uint32)
        luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
        return luma.astype(np.uint8)[..., None]
    if have == 1:
        grey = np.repeat(arr, 3, axis=2)
        return grey if channels == 3 else np.concatenate([grey, _opaque(arr)], axis=2)
    if channels == 3:  # RGBA -> RGB drops alpha
        return arr[..., :3]
    return np.concatenate([arr, _opaque(arr)], axis=2)  # RGB -> RGBA


def _opaque(arr: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    return np.full((*arr.shape[:2], 1), 255, dtype=np.uint8)
