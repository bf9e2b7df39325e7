"""Range reads of an object store through the block cache (moto S3)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferroload_store import BlockCache, ObjectTruncatedError, Store, open_store
from ferroload_store._blocks import BlockReader
from ferroload_testing import FaultProxy, MotoServer

pytestmark = pytest.mark.s3

BS = 64 << 10  # small blocks: several per object


def blob(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.fixture
def cache(tmp_path: Path) -> BlockCache:
    return BlockCache(tmp_path / "cache", max_bytes=64 << 20, block_size=BS)


def cached(uri: str, options: dict[str, Any], cache: BlockCache) -> Store:
    return open_store(uri, storage_options=options, cache=cache)


def test_ranges_match_the_object_and_each_block_is_fetched_once(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    data = blob(10 * BS + 123)
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", data)
    rng = np.random.default_rng(1)
    starts = rng.integers(0, len(data) - 1, 300)
    lengths = np.minimum(rng.integers(0, 3 * BS, 300), len(data) - starts)
    store.stats.reset()
    views = store.get_ranges("obj", starts, lengths, size=len(data), version="v1")
    for s, n, v in zip(starts.tolist(), lengths.tolist(), views, strict=True):
        assert bytes(v) == data[s : s + n]
    # every block was needed; contiguous missing blocks are one coalesced read
    assert store.stats.get_requests == 1
    assert store.stats.bytes_read == len(data)
    again = store.get_ranges("obj", starts, lengths, size=len(data), version="v1")
    assert [bytes(v) for v in again] == [bytes(v) for v in views]
    assert store.stats.get_requests == 1  # all served from the cache


def test_a_new_process_reads_the_disk_cache_without_requests(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    data = blob(5 * BS)
    first = cached(s3_uri, s3_options, cache)
    first.put("obj", data)
    first.get_ranges("obj", [0], [len(data)], size=len(data), version="v1")
    # a fresh store (as in another process: nothing in memory) over the same directory
    other = cached(s3_uri, s3_options, BlockCache(cache.directory, max_bytes=cache.max_bytes,
                                                   block_size=BS))  # fmt: skip
    views = other.get_ranges("obj", [10, 3 * BS], [BS, 100], size=len(data), version="v1")
    assert bytes(views[0]) == data[10 : 10 + BS]
    assert bytes(views[1]) == data[3 * BS : 3 * BS + 100]
    assert other.stats.get_requests == 0
    assert other.cache is not None and other.cache.stats.hits >= 2


def test_without_a_known_version_one_head_per_object_keys_the_blocks(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", b"first version " * 1000)
    assert bytes(store.get_ranges("obj", [0], [5])[0]) == b"first"
    assert store.stats.head_requests == 1
    store.get_ranges("obj", [6], [7])
    assert store.stats.head_requests == 1  # remembered
    # the object changes: a fresh store sees the new ETag, so the old blocks never serve
    store.put("obj", b"SECOND VERSION " * 1000)
    fresh = cached(s3_uri, s3_options, cache)
    assert bytes(fresh.get_ranges("obj", [0], [6])[0]) == b"SECOND"


def test_prefetch_fills_the_cache_and_reads_then_make_no_requests(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    data = blob(8 * BS + 5)
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", data)
    store.stats.reset()
    store.prefetch_blocks("obj", [0, 1, 2, 5, 8], size=len(data), version="v1")
    assert store.stats.get_requests == 3  # runs 0-2, 5, 8
    store.prefetch_blocks("obj", [0, 1, 2], size=len(data), version="v1")
    assert store.stats.get_requests == 3  # cached already
    views = store.get_ranges(
        "obj", [0, 5 * BS + 7, 8 * BS], [3 * BS, 100, 5], size=len(data), version="v1"
    )
    assert [bytes(v) for v in views] == [data[: 3 * BS], data[5 * BS + 7 : 5 * BS + 107],
                                         data[8 * BS :]]  # fmt: skip
    assert store.stats.get_requests == 3


def test_cold_blocks_are_evicted_first(
    s3_uri: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    cache = BlockCache(tmp_path / "small", max_bytes=6 * BS, block_size=BS)
    data = blob(8 * BS)
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", data)
    store.prefetch_blocks("obj", [0, 1, 2, 3], size=len(data), version="v1")
    store.mark_cold_blocks("obj", [2, 3], size=len(data), version="v1")
    store.prefetch_blocks("obj", [4, 5, 6], size=len(data), version="v1")  # over the limit
    keys = dict(enumerate(store.cache_keys("obj", range(7), size=len(data), version="v1")))
    assert not cache.contains(keys[2]) and not cache.contains(keys[3])
    assert all(cache.contains(keys[b]) for b in (0, 1, 4, 5, 6))


def test_a_damaged_entry_is_fetched_again(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    data = blob(2 * BS)
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", data)
    store.prefetch_blocks("obj", [0, 1], size=len(data), version="v1")
    entry = cache._entry_path(store.cache_keys("obj", [0], size=len(data), version="v1")[0])
    with open(entry, "r+b") as f:
        f.seek(os.path.getsize(entry) - 10)
        f.write(b"\x00" * 10)
    fresh = cached(s3_uri, s3_options, cache)  # nothing verified in memory yet
    assert bytes(fresh.get_ranges("obj", [0], [BS], size=len(data), version="v1")[0]) == data[:BS]
    assert fresh.stats.get_requests == 1
    assert cache.stats.corrupt == 1


def test_an_object_shorter_than_its_recorded_size_is_truncated(
    s3_uri: str, s3_options: dict[str, Any], cache: BlockCache
) -> None:
    store = cached(s3_uri, s3_options, cache)
    store.put("obj", blob(BS + 10))
    with pytest.raises(ObjectTruncatedError) as info:
        store.get_ranges("obj", [BS], [100], size=2 * BS, version="v1")
    assert info.value.size == BS + 10
    with pytest.raises(ObjectTruncatedError):  # past the size the caller gave
        store.get_ranges("obj", [0], [BS + 20], size=BS + 10, version="v2")


def test_concurrent_readers_of_a_block_make_one_request(
    moto: MotoServer, s3_uri: str, cache: BlockCache
) -> None:
    data = blob(4 * BS)
    with FaultProxy(*moto.address, delay=0.2) as proxy:
        store = cached(s3_uri, moto.storage_options(endpoint=proxy.endpoint), cache)
        store.put("obj", data)
        store.stats.reset()
        out: list[bytes] = []
        errors: list[BaseException] = []

        def read() -> None:
            try:
                v = store.get_ranges("obj", [100], [1000], size=len(data), version="v1")[0]
                out.append(bytes(v))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=read) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert out == [data[100:1100]] * 6
    assert store.stats.get_requests == 1


def test_cache_none_and_local_stores_have_no_blocks(
    s3_uri: str, s3_options: dict[str, Any], tmp_path: Path
) -> None:
    assert open_store(s3_uri, storage_options=s3_options, cache=None).block_size is None
    local = open_store(tmp_path / "root")
    assert local.block_size is None and local.cache is None
    local.prefetch_blocks("missing", [0])  # a no-op without a cache
    with pytest.raises(TypeError, match="cache must be"):
        open_store(s3_uri, storage_options=s3_options, cache="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("keep", [True, False])
def test_a_block_stored_by_another_fetch_just_before_the_claim_is_not_fetched_again(
    cache: BlockCache, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """The window between a reader's cache lookup and its claim of the block: another
    thread (the readahead) stores the block and ends its fetch right there. The reader
    must take the stored block, not fetch it a second time."""
    data = blob(2 * BS, seed=5)
    reader = BlockReader(cache, "s3://bucket/ds")
    key = reader.keys("obj", "v1", [0])[0]
    lookup = "get" if keep else "contains"
    first_lookup = getattr(cache, lookup)
    raced = []

    def lookup_then_race(k: str) -> Any:
        found = first_lookup(k)
        if k == key and not raced:  # the other thread's fetch ends just after this miss
            raced.append(k)
            cache.put(k, memoryview(data[:BS]))
        return found

    monkeypatch.setattr(cache, lookup, lookup_then_race)
    fetched: list[tuple[list[int], list[int]]] = []

    def fetch(starts: Any, lengths: Any) -> list[bytes]:
        fetched.append((list(starts), list(lengths)))
        return [data[s : s + n] for s, n in zip(starts, lengths, strict=True)]

    got = reader.blocks("obj", [0], size=len(data), version="v1", fetch=fetch, keep=keep)
    assert raced and fetched == []
    if keep:
        assert bytes(got[0]) == data[:BS]
    assert not reader._inflight  # the claim was released
