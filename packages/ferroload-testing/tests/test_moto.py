"""MotoServer: buckets, and the storage options that point a store at it."""

from __future__ import annotations

import pytest

from ferroload_store import open_store
from ferroload_testing import MotoServer


@pytest.mark.s3
def test_moto_server_buckets_and_options(moto: MotoServer) -> None:
    options = moto.storage_options("another-bucket")  # created on the way
    store = open_store("s3://another-bucket/x", storage_options=options)
    store.put("k", b"v")
    assert store.get("k") == b"v"
    moto.create_bucket("another-bucket")  # exists already: fine
    with pytest.raises(ValueError, match="refused to create bucket"):
        moto.create_bucket("X")
    assert moto.endpoint.startswith("http://127.0.0.1:")
    assert MotoServer().__repr__() == "MotoServer(stopped)"
