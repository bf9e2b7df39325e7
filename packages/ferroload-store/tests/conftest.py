from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ferroload_store import BlockCache, Store, open_store
from ferroload_testing import MotoServer

#: The bucket every S3 test writes to, each under its own fresh prefix.
BUCKET = "ferroload-store-tests"


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """moto's S3 server, started once for the session, with `BUCKET` created."""
    with MotoServer() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_options(moto: MotoServer) -> dict[str, Any]:
    """`storage_options` for the moto server."""
    return moto.storage_options()


@pytest.fixture
def s3_uri(moto: MotoServer) -> str:
    """A fresh, empty prefix of the test bucket."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture(
    params=[
        "local",
        "memory",
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("s3-cached", marks=pytest.mark.s3),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An empty store on each backend: local disk, memory, and S3 (moto), the last both
    with range reads straight from the server and through a block cache."""
    if request.param == "local":
        return open_store(tmp_path / "root")
    if request.param == "memory":
        return open_store(f"memory://store-tests-{uuid.uuid4().hex}/root")
    moto: MotoServer = request.getfixturevalue("moto")
    cache = BlockCache(tmp_path / "cache", max_bytes=1 << 30, block_size=4096)
    return open_store(
        f"s3://{BUCKET}/{uuid.uuid4().hex}/root",
        storage_options=moto.storage_options(),
        cache=cache if request.param == "s3-cached" else None,
    )
