"""A tiny learnable image task for the training tests: the label is the dominant colour."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

import ferroload


def colour_png(label: int, rng: np.random.Generator) -> bytes:
    """A 16x16 image whose label is its dominant colour (red 0, blue 1), with noise."""
    from PIL import Image

    img = rng.integers(0, 90, size=(16, 16, 3), dtype=np.uint8)
    img[..., 0 if label == 0 else 2] += 150
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def write_colours(uri: str, name: str, n: int, *, seed: int, id_prefix: str, **writer: Any) -> str:
    """`n` samples `<id_prefix>000`, … of colour images (`image`) and their `label`."""
    rng = np.random.default_rng(seed)
    with ferroload.Writer(uri, name, **writer) as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(n):
            w.add(f"{id_prefix}{i:03d}", {"image": colour_png(i % 2, rng)}, {"label": i % 2})
    return uri
