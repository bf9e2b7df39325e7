from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferroload_format import Dataset, Writer


@pytest.fixture(params=["local", "memory"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh dataset root on each backend that needs no service."""
    if request.param == "local":
        return str(tmp_path / "ds")
    return f"memory://format-tests-{uuid.uuid4().hex}/ds"


@pytest.fixture
def local_uri(tmp_path: Path) -> str:
    return str(tmp_path / "ds")


def payload(i: int, modality: str = "image") -> bytes:
    """Deterministic payload bytes of varying size for sample `i`."""
    return (f"{modality}-{i}-".encode() * (1 + i % 7))[: 10 + (i * 37) % 900]


def sample_meta(i: int) -> dict[str, Any]:
    return {"label": i % 5, "caption": "a cat" if i % 3 == 0 else "a dog", "score": i / 10}


WriteFn = Callable[..., Dataset]


@pytest.fixture
def write() -> WriteFn:
    """Write `n` samples (ids s00000…) with an image and metadata, return the Dataset."""

    def _write(
        uri: str,
        n: int = 20,
        *,
        start: int = 0,
        name: str | None = "test",
        shard_size: int = 4096,
        with_text: bool = False,
    ) -> Dataset:
        with Writer(uri, name, shard_size=shard_size) as w:
            w.declare("image", "jpg", "tensor", "image")
            if with_text:
                w.declare("text", "txt", "text", "raw")
            for i in range(start, start + n):
                data = {"image": payload(i)}
                if with_text and i % 2:
                    data["text"] = payload(i, "text")
                w.add(f"s{i:05d}", data, sample_meta(i))
        return Dataset.open(uri)

    return _write
