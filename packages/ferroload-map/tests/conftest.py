from __future__ import annotations

import io
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ferroload_format import Dataset, Writer

# The map functions of the tests live in _map_fns.py, importable by name in worker
# processes (spawn passes sys.path on) and Ray workers (PYTHONPATH, see test_ray.py).
TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def png(i: int) -> bytes:
    """A deterministic RGB PNG of varying size and colour for sample `i`."""
    rng = np.random.default_rng(i)
    h, w = 12 + (i * 7) % 20, 10 + (i * 5) % 24
    img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    img[: h // 2] = (i * 40 % 256, i * 15 % 256, 200)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


MakeDataset = Callable[..., Dataset]


@pytest.fixture
def make_dataset(tmp_path: Path) -> MakeDataset:
    """Write `n` samples `s00000…` (a PNG `image`, `label` = i % 5, `caption`) to a fresh
    root (on disk by default, `memory=True` for memory://) and open it."""

    def make(n: int = 20, *, memory: bool = False, images: bool = True) -> Dataset:
        uri = (
            f"memory://map-tests-{uuid.uuid4().hex}/ds"
            if memory
            else str(tmp_path / f"ds-{uuid.uuid4().hex[:8]}")
        )
        with Writer(uri, "maptest", shard_size=1 << 16) as w:
            if images:
                w.declare("image", "png", "tensor", "image")
            for i in range(n):
                w.add(
                    f"s{i:05d}",
                    {"image": png(i)} if images else None,
                    {"label": i % 5, "caption": f"caption {i}"},
                )
        return Dataset.open(uri)

    return make


@pytest.fixture
def seen() -> list[str]:
    """`_map_fns.SEEN`, emptied for the test."""
    import _map_fns

    _map_fns.SEEN.clear()
    return _map_fns.SEEN
