"""The block cache under hostile neighbours: entries truncated, corrupted or replaced
under a running reader, and cache keys that tell stores and objects apart (moto S3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferroload_store import BlockCache, Store, open_store
from ferroload_testing import MotoServer

from .conftest import BUCKET

pytestmark = pytest.mark.s3

BS = 1 << 20  # large enough that entries used to be memory-mapped (>= 256 KiB)


def blob(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def cached(uri: str, options: dict[str, Any], directory: Path) -> Store:
    cache = BlockCache(directory, max_bytes=256 << 20, block_size=BS)
    return open_store(uri, storage_options=options, cache=cache)


_CHILD = """
import json, os, sys
import numpy as np
from ferroload_store import BlockCache, open_store

uri, options, directory, bs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
data = np.random.default_rng(0).integers(0, 256, 3 * bs, dtype=np.uint8).tobytes()

def store():
    return open_store(uri, storage_options=options,
                      cache=BlockCache(directory, max_bytes=256 << 20, block_size=bs))

first = store()
first.put("obj", data)
held = first.get_ranges("obj", [0, bs], [bs, bs], size=len(data), version="v1")
entries = first.cache_keys("obj", [0, 1, 2], size=len(data), version="v1")
paths = [first.cache._entry_path(k) for k in entries]
for p in paths[:2]:
    os.truncate(p, 100)  # in place: the inode a mapping would hold shrinks
assert bytes(held[0]) == data[:bs] and bytes(held[1]) == data[bs : 2 * bs]
again = store()  # a second reader in this process: reads the truncated entries
got = again.get_ranges("obj", [0, 2 * bs], [3 * bs, bs], size=len(data), version="v1")
assert bytes(got[0]) == data and bytes(got[1]) == data[2 * bs :]
assert again.cache.stats.corrupt == 2, again.cache.stats.snapshot()
print("ok")
"""


def test_truncating_an_entry_under_a_running_reader_does_not_crash(
    moto: MotoServer, s3_uri: str, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, s3_uri, json.dumps(moto.storage_options()),
         str(tmp_path / "cache"), str(BS)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # SIGBUS would be rc -7 (or 135 through a shell)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"


def test_corrupting_an_entry_in_place_serves_the_right_bytes(
    s3_options: dict[str, Any], s3_uri: str, tmp_path: Path
) -> None:
    data = blob(2 * BS, seed=3)
    store = cached(s3_uri, s3_options, tmp_path / "cache")
    store.put("obj", data)
    held = store.get_ranges("obj", [0], [2 * BS], size=len(data), version="v1")[0]
    key = store.cache_keys("obj", [0], size=len(data), version="v1")[0]
    assert store.cache is not None
    entry = store.cache._entry_path(key)
    with open(entry, "r+b") as f:  # in place, the same inode
        f.seek(os.path.getsize(entry) // 2)
        f.write(b"\xff" * 4096)
    assert bytes(held) == data  # a private copy: the reader's bytes never change
    fresh = cached(s3_uri, s3_options, tmp_path / "cache")
    view = fresh.get_ranges("obj", [0], [BS], size=len(data), version="v1")[0]
    assert bytes(view) == data[:BS]
    assert fresh.cache is not None and fresh.cache.stats.corrupt == 1
    assert fresh.stats.get_requests == 1  # refetched


def test_the_view_cache_is_bounded_by_bytes(
    s3_options: dict[str, Any], s3_uri: str, tmp_path: Path
) -> None:
    from ferroload_store._blocks import VIEW_CACHE_BYTES

    data = blob(6 * BS, seed=4)
    store = cached(s3_uri, s3_options, tmp_path / "cache")
    store.put("obj", data)
    reader = store._block_reader()
    assert reader is not None and reader.view_cache_bytes == VIEW_CACHE_BYTES
    reader.view_cache_bytes = 2 * BS
    views = store.get_ranges("obj", [0], [len(data)], size=len(data), version="v1")
    assert bytes(views[0]) == data
    assert sum(v.nbytes for v in reader._views.values()) <= 2 * BS
    assert len(reader._views) == 2


def test_one_uri_on_two_endpoints_never_shares_entries(tmp_path: Path) -> None:
    data = blob(BS + 10, seed=5)
    with MotoServer() as a, MotoServer() as b:
        uri = f"s3://{BUCKET}/{uuid.uuid4().hex}"
        sa = cached(uri, a.storage_options(BUCKET), tmp_path / "cache")
        sb = cached(uri, b.storage_options(BUCKET), tmp_path / "cache")
        sa.put("obj", data)
        sb.put("obj", data)  # the same bytes: only the endpoint tells them apart
        assert sa.uri == sb.uri
        assert set(sa.cache_keys("obj", [0, 1])).isdisjoint(sb.cache_keys("obj", [0, 1]))
        assert bytes(sa.get_ranges("obj", [0], [len(data)])[0]) == data
        assert sb.stats.get_requests == 0
        assert bytes(sb.get_ranges("obj", [0], [len(data)])[0]) == data
        assert sb.stats.get_requests == 1  # fetched from its own endpoint, not A's entries
        # and different bytes at the same key on B are served as B's
        other = blob(BS + 10, seed=6)
        sb.put("obj2", other)
        sa.put("obj2", data)
        assert bytes(sa.get_ranges("obj2", [0], [10], size=len(data), version="t")[0]) == data[:10]
        got = sb.get_ranges("obj2", [0], [10], size=len(other), version="t")[0]
        assert bytes(got) == other[:10]


def test_cache_identity_names_the_endpoint_not_the_secrets(
    moto: MotoServer, s3_uri: str, tmp_path: Path
) -> None:
    options = {**moto.storage_options(), "secret_access_key": "sekrit-value"}
    store = cached(s3_uri, options, tmp_path / "cache")
    identity = store._cache_identity()
    assert moto.endpoint in identity and moto.region in identity
    assert "sekrit-value" not in identity and "testing" not in identity


def test_an_object_recreated_with_the_same_tag_is_fetched_fresh(
    s3_options: dict[str, Any], s3_uri: str, tmp_path: Path
) -> None:
    old, new = blob(BS, seed=7), blob(BS, seed=8)
    first = cached(s3_uri, s3_options, tmp_path / "cache")
    first.put("part-0.parquet", old)
    # the format layer's tag (manifest version and size) is the same for both objects
    got = first.get_ranges("part-0.parquet", [0], [BS], size=BS, version="v1-s1048576")
    assert bytes(got[0]) == old
    first.delete("part-0.parquet")
    first.put("part-0.parquet", new)  # deleted and re-created at the same URI
    again = cached(s3_uri, s3_options, tmp_path / "cache")
    got = again.get_ranges("part-0.parquet", [0], [BS], size=BS, version="v1-s1048576")
    assert bytes(got[0]) == new


def test_object_identities_cost_one_head_then_one_list_per_directory(
    s3_options: dict[str, Any], s3_uri: str, tmp_path: Path
) -> None:
    store = cached(s3_uri, s3_options, tmp_path / "cache")
    objs = {f"shards/{i:03d}.tar": blob(1000, seed=i) for i in range(6)}
    for path, data in objs.items():
        store.put(path, data)
    store.stats.reset()
    for path, data in objs.items():
        got = store.get_ranges(path, [0], [100], size=len(data), version="v1-s1000")
        assert bytes(got[0]) == data[:100]
    assert store.stats.head_requests == 1 and store.stats.list_requests == 1
    store.put("shards/late.tar", b"late" * 100)  # not in the listing: a HEAD of its own
    assert bytes(store.get_ranges("shards/late.tar", [0], [4])[0]) == b"late"
    assert store.stats.head_requests == 2 and store.stats.list_requests == 1
