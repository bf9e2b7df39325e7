from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ferroload_testing import MotoServer

#: The bucket the S3 tests of this folder write to, each under its own prefix.
BUCKET = "ferroload-tests"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local two-CPU Ray cluster for a test module (the `ray` module), shut down after
    it: a cluster left running would serve every later test of this process (the docs'
    pages, `auto_executor`); its workers keep their block cache in a temporary folder."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    cache = tmp_path_factory.mktemp("ray-block-cache")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"FERROLOAD_CACHE_DIR": str(cache)}},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """moto's S3 server, started once for the session, with `BUCKET` created."""
    with MotoServer() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def s3_uri(moto: MotoServer) -> tuple[str, dict[str, Any]]:
    """A fresh dataset root on the moto server, and the storage options that reach it."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex}/ds", moto.storage_options()
