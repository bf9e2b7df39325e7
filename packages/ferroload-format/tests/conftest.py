from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferroload_format import Dataset, Writer
from ferroload_testing import MotoServer

#: The bucket every S3 test writes to, each under its own fresh prefix.
BUCKET = "ferroload-format-tests"


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """moto's S3 server, started once for the session, with `BUCKET` created."""
    with MotoServer() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh dataset root on each backend: local disk, memory, and S3 (moto).

    For S3 the moto server's settings are in the `AWS_*` environment variables for the
    test (obstore reads them), so tests open the URI without `storage_options`, as a
    user with configured credentials would.
    """
    if request.param == "local":
        return str(tmp_path / "ds")
    if request.param == "memory":
        return f"memory://format-tests-{uuid.uuid4().hex}/ds"
    moto: MotoServer = request.getfixturevalue("moto")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    for name, value in moto.environ().items():
        monkeypatch.setenv(name, value)
    return f"s3://{BUCKET}/{uuid.uuid4().hex}/ds"


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


CHILD_WRITER = Path(__file__).with_name("_child_writer.py")


def spawn_writer(uri: str, first: int, count: int, *args: str) -> subprocess.Popen[str]:
    """A `_child_writer.py` process appending `count` samples from `first` to `uri`."""
    return subprocess.Popen(
        [sys.executable, str(CHILD_WRITER), uri, str(first), str(count), *args],
        stderr=subprocess.PIPE,
        text=True,
    )


def race_writers(uri: str, tmp_path: Path, count: int, *args: str, rounds: int = 2) -> None:
    """`rounds` times, two writer processes (prefixes a<round>, b<round>) that start their
    `count` appends together, released by a go-file; both must succeed."""
    for round_ in range(rounds):
        go = tmp_path / f"go-{round_}"
        procs = [
            spawn_writer(uri, 0, count, *args, "--go-file", str(go), "--prefix", f"{p}{round_}")
            for p in "ab"
        ]
        time.sleep(1.5)
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
