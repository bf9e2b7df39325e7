from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ferroload_store import Store, open_store


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """An empty store on each backend that needs no service."""
    if request.param == "local":
        return open_store(tmp_path / "root")
    return open_store(f"memory://store-tests-{uuid.uuid4().hex}/root")
