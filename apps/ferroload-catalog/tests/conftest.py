from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ferroload_catalog import Catalog
from ferroload_format import Writer


def write_dataset(root: Path, samples: int = 3, name: str = "demo") -> str:
    """Commit one version of `samples` samples at `root`; return its path as a string."""
    with Writer(str(root), name) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(samples):
            w.add(f"s{i:04d}", {"image": b"jpeg bytes %d" % i}, {"label": i})
    return str(root)


@pytest.fixture
def make_dataset(tmp_path: Path) -> Callable[..., str]:
    def make(name: str = "ds", samples: int = 3) -> str:
        return write_dataset(tmp_path / "data" / name, samples)

    return make


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Catalog:
    monkeypatch.delenv("FERROLOAD_CATALOG", raising=False)
    return Catalog(tmp_path / "cat" / "catalog.duckdb", lock_timeout=5.0)
