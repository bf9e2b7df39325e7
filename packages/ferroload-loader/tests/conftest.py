from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ferroload_format import Writer


def index_png(i: int, size: tuple[int, int] = (12, 16)) -> bytes:
    """A PNG whose pixels spell its index: R = i % 256, G = i // 256, B = 7."""
    img = np.zeros((*size, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = i % 256, i // 256, 7
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def decoded_index(images: np.ndarray) -> list[int]:
    """Inverse of index_png on a decoded NHWC batch."""
    return (images[:, 0, 0, 0].astype(int) + 256 * images[:, 0, 0, 1].astype(int)).tolist()


MakeDataset = Callable[..., str]


@pytest.fixture
def make_dataset(tmp_path: Path) -> MakeDataset:
    """Write `n` samples s00000… with an index-spelling PNG, label and name; return the URI."""
    counter = iter(range(1000))

    def make(
        n: int = 100,
        *,
        shard_size: int = 1 << 14,
        corrupt: tuple[int, ...] = (),
        missing: tuple[int, ...] = (),
        name: str = "loader-test",
    ) -> str:
        root = str(tmp_path / f"ds{next(counter)}")
        with Writer(root, name, shard_size=shard_size) as w:
            w.declare("image", "png", "tensor", "image")
            for i in range(n):
                data = (
                    {}
                    if i in missing
                    else {"image": b"\x89PNG junk" if i in corrupt else index_png(i)}
                )
                w.add(f"s{i:05d}", data, {"label": i % 7, "name": f"n{i}", "score": i / 2})
        return root

    return make
