from __future__ import annotations

from collections.abc import Iterator

import pytest

from ferroload_testing import MotoServer


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    """moto's S3 server, started once for the session."""
    with MotoServer() as server:
        yield server
