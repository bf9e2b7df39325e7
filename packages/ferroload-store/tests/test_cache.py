"""`BlockCache`: round trips, verification, crash safety, the size limit, eviction order,
several threads and processes on one directory, and `default()`'s environment."""

from __future__ import annotations

import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import platformdirs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_core import FerroloadError
from ferroload_store import (
    BlockCache,
    CacheConfigError,
    CacheError,
    InvalidCacheKeyError,
    StoreError,
)
from ferroload_store._cache_entry import HEADER as _HEADER

BIG = (256 << 10) + 12345  # a large entry (once mapped, now read like the rest)
SMALL = 1000  # read with read()


def key(i: int, version: str = "v1") -> str:
    return BlockCache.key("s3://bucket/ds", "shards/000.tar", version, i, 1 << 20)


def payload(i: int, n: int) -> bytes:
    """Data that differs between keys: a wrong entry served under a key is caught."""
    return (i % 251).to_bytes(1, "little") * n


def read(cache: BlockCache, k: str) -> bytes | None:
    got = cache.get(k)
    return None if got is None else bytes(got)


def entry_path(cache: BlockCache, k: str) -> Path:
    return cache.directory / k[:2] / k[2:4] / k


def set_mtime(cache: BlockCache, k: str, seconds: float) -> None:
    ns = int(seconds * 1e9)
    os.utime(entry_path(cache, k), ns=(ns, ns))


def entry_size(k: str, n: int) -> int:
    return _HEADER.size + len(k) + n


@pytest.fixture
def cache(tmp_path: Path) -> BlockCache:
    return BlockCache(tmp_path / "cache", max_bytes=64 << 20)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("n", [0, 1, SMALL, BIG])
def test_round_trip(cache: BlockCache, n: int) -> None:
    k = key(n)
    assert cache.get(k) is None
    assert not cache.contains(k)
    cache.put(k, payload(7, n))
    assert cache.contains(k)
    got = cache.get(k)
    assert got is not None
    assert got.readonly
    assert bytes(got) == payload(7, n)
    assert cache.size() == entry_size(k, n)
    assert cache.count() == 1
    assert cache.stats.snapshot() == {
        "hits": 1,
        "misses": 1,
        "hit_bytes": n,
        "puts": 1,
        "put_bytes": n,
        "corrupt": 0,
        "evictions": 0,
        "evicted_bytes": 0,
    }


def test_put_accepts_buffers(cache: BlockCache) -> None:
    arr = np.arange(4096, dtype=np.uint32).reshape(64, 64)
    cache.put(key(0), bytearray(b"abc"))
    cache.put(key(1), memoryview(arr))  # 2-D, 4-byte items
    cache.put(key(2), memoryview(arr[:, ::2]))  # not contiguous
    assert read(cache, key(0)) == b"abc"
    assert read(cache, key(1)) == arr.tobytes()
    assert read(cache, key(2)) == arr[:, ::2].tobytes()


def test_put_replaces(cache: BlockCache) -> None:
    cache.put(key(0), b"old")
    cache.put(key(0), b"new!")
    assert read(cache, key(0)) == b"new!"
    assert cache.size() == entry_size(key(0), 4)
    assert cache.count() == 1


@given(data=st.binary(max_size=4096))
def test_round_trip_property(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    cache = BlockCache(tmp_path_factory.mktemp("c"), max_bytes=1 << 20)
    cache.put(key(0), data)
    assert read(cache, key(0)) == data


def test_entry_larger_than_the_cache_is_not_stored(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path, max_bytes=1000)
    cache.put(key(0), b"x" * 1000)
    assert not cache.contains(key(0))
    assert cache.stats.puts == 0


# --------------------------------------------------------------------------- keys


def test_key_is_a_stable_hex_digest() -> None:
    k = BlockCache.key("s3://b/ds", "a.tar", "etag", 3, 4 << 20)
    assert k == BlockCache.key("s3://b/ds", "a.tar", "etag", 3, 4 << 20)
    assert len(k) == 32
    assert int(k, 16) >= 0
    variants = {
        BlockCache.key("s3://b/ds2", "a.tar", "etag", 3, 4 << 20),
        BlockCache.key("s3://b/ds", "b.tar", "etag", 3, 4 << 20),
        BlockCache.key("s3://b/ds", "a.tar", "etag2", 3, 4 << 20),
        BlockCache.key("s3://b/ds", "a.tar", "etag", 4, 4 << 20),
        BlockCache.key("s3://b/ds", "a.tar", "etag", 3, 8 << 20),
        # a plain concatenation would make these two equal
        BlockCache.key("s3://b/ds", "a.taretag", "", 3, 4 << 20),
        BlockCache.key("s3://b/dsa.tar", "", "etag", 3, 4 << 20),
    }
    assert k not in variants
    assert len(variants) == 7


@given(
    a=st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.integers(0, 9)),
    b=st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.integers(0, 9)),
)
def test_distinct_tuples_have_distinct_keys(
    a: tuple[str, str, str, int], b: tuple[str, str, str, int]
) -> None:
    assert (BlockCache.key(*a, 4096) == BlockCache.key(*b, 4096)) == (a == b)


def test_key_rejects_bad_blocks() -> None:
    with pytest.raises(CacheConfigError):
        BlockCache.key("u", "p", "v", -1, 4096)
    with pytest.raises(CacheConfigError):
        BlockCache.key("u", "p", "v", 0, 0)


@pytest.mark.parametrize(
    "bad", ["", "abc", "../../../../etc/passwd0", "A" * 32, "g" * 32, "a" * 129]
)
def test_invalid_keys_are_rejected(cache: BlockCache, bad: str) -> None:
    for op in (cache.get, cache.contains, lambda k: cache.put(k, b"x")):
        with pytest.raises(InvalidCacheKeyError) as info:
            op(bad)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, FerroloadError)
    with pytest.raises(InvalidCacheKeyError):
        cache.mark_cold([bad])


# --------------------------------------------------------------------------- verification


def _flip_data(raw: bytearray, k: str) -> bytes:
    raw[-1] ^= 0x01
    return bytes(raw)


def _flip_digest(raw: bytearray, k: str) -> bytes:
    raw[_HEADER.size - 1] ^= 0x80
    return bytes(raw)


def _truncate(raw: bytearray, k: str) -> bytes:
    return bytes(raw[:-1])


def _truncate_header(raw: bytearray, k: str) -> bytes:
    return bytes(raw[: _HEADER.size - 3])


def _empty(raw: bytearray, k: str) -> bytes:
    return b""


def _garbage(raw: bytearray, k: str) -> bytes:
    return os.urandom(len(raw))


def _append(raw: bytearray, k: str) -> bytes:
    return bytes(raw) + b"\0"


def _wrong_magic(raw: bytearray, k: str) -> bytes:
    raw[0:4] = b"XXXX"
    return bytes(raw)


def _future_version(raw: bytearray, k: str) -> bytes:
    raw[4] += 1
    return bytes(raw)


@pytest.mark.parametrize(
    "damage",
    [
        _flip_data,
        _flip_digest,
        _truncate,
        _truncate_header,
        _empty,
        _garbage,
        _append,
        _wrong_magic,
        _future_version,
    ],
)
@pytest.mark.parametrize("n", [SMALL, BIG])
def test_damaged_entry_is_a_miss_and_deleted(cache: BlockCache, damage: object, n: int) -> None:
    k = key(1)
    cache.put(k, payload(1, n))
    path = entry_path(cache, k)
    path.write_bytes(damage(bytearray(path.read_bytes()), k))  # type: ignore[operator]
    assert cache.get(k) is None
    assert not path.exists()
    assert cache.stats.corrupt == 1
    assert cache.stats.misses == 1
    assert cache.stats.hits == 0
    cache.put(k, payload(1, n))  # fetched again
    assert read(cache, k) == payload(1, n)


@pytest.mark.parametrize("n", [SMALL, BIG])
def test_entry_of_another_key_is_not_served(cache: BlockCache, n: int) -> None:
    a, b = key(1), key(2)
    cache.put(a, payload(1, n))
    cache.put(b, payload(2, n))
    # a valid entry of `a` under the name of `b` (a bug, a bad copy): the header says `a`
    entry_path(cache, b).write_bytes(entry_path(cache, a).read_bytes())
    assert cache.get(b) is None
    assert not entry_path(cache, b).exists()
    assert cache.stats.corrupt == 1
    assert read(cache, a) == payload(1, n)


# --------------------------------------------------------------------------- crash safety


def test_leftover_temporary_file_is_never_served_and_swept_when_old(cache: BlockCache) -> None:
    k = key(5)
    cache.put(k, payload(5, SMALL))
    good = entry_path(cache, k).read_bytes()
    entry_path(cache, k).unlink()
    # a whole, valid entry that a killed writer never renamed into place
    tmp = entry_path(cache, k).with_name(f".tmp-{k}.12345.abcd")
    tmp.write_bytes(good)
    assert cache.get(k) is None
    assert not cache.contains(k)
    assert cache.size() == 0
    assert cache.evict() == 0  # a fresh temporary file may belong to a live writer
    assert tmp.exists()
    old = time.time() - 120
    os.utime(tmp, (old, old))
    assert cache.evict() == len(good)
    assert not tmp.exists()


_CRASH_WRITER = """
import sys
from ferroload_store import BlockCache
cache = BlockCache(sys.argv[1], max_bytes=int(sys.argv[2]))
i = 0
while True:
    k = BlockCache.key("s3://crash", "obj", "v", i % 40, 1 << 20)
    cache.put(k, (i % 40 % 251).to_bytes(1, "little") * (6 << 20) + bytes([i % 40]) * (i % 40))
    if i == 2:
        print("ready", flush=True)
    i += 1
"""


def test_writer_killed_mid_put_leaves_only_valid_entries(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    keys = {BlockCache.key("s3://crash", "obj", "v", j, 1 << 20): j for j in range(40)}
    for delay in (0.0, 0.05, 0.2):
        proc = subprocess.Popen(
            [sys.executable, "-c", _CRASH_WRITER, str(directory), str(48 << 20)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    cache = BlockCache(directory, max_bytes=48 << 20)
    found = [name for _, _, files in os.walk(directory) for name in files if name in keys]
    assert found
    for name in found:
        j = keys[name]
        got = cache.get(name)
        assert got is not None, f"entry {j} did not verify"
        assert bytes(got) == (j % 251).to_bytes(1, "little") * (6 << 20) + bytes([j]) * j
    assert cache.stats.corrupt == 0
    # whatever the kills left half-written is a temporary file, swept once stale
    old = time.time() - 120
    for root, _, files in os.walk(directory):
        for name in files:
            if name.startswith(".tmp-"):
                os.utime(os.path.join(root, name), (old, old))
    cache.evict()
    assert not [n for _, _, files in os.walk(directory) for n in files if n.startswith(".tmp-")]


# --------------------------------------------------------------------------- size and eviction


def test_size_stays_under_the_limit(tmp_path: Path) -> None:
    one = entry_size(key(0), 10_000)
    cache = BlockCache(tmp_path, max_bytes=10 * one + one // 2)
    for i in range(60):
        cache.put(key(i), payload(i, 10_000))
        assert cache.size() <= cache.max_bytes + one
        assert read(cache, key(i)) == payload(i, 10_000)  # the newest stays
    assert cache.stats.evictions >= 45
    assert cache.stats.evicted_bytes == cache.stats.evictions * one
    assert cache.size() >= 8 * one  # evicts down to ~90%, not to nothing


def test_size_limit_counts_what_was_there_before(tmp_path: Path) -> None:
    one = entry_size(key(0), 10_000)
    first = BlockCache(tmp_path, max_bytes=100 * one)
    for i in range(20):
        first.put(key(i), payload(i, 10_000))
    second = BlockCache(tmp_path, max_bytes=10 * one)  # a process started later, smaller
    second.put(key(99), payload(99, 10_000))
    assert second.size() <= 10 * one


def test_size_limit_without_a_usage_file(tmp_path: Path) -> None:
    one = entry_size(key(0), 10_000)
    first = BlockCache(tmp_path, max_bytes=100 * one)
    for i in range(20):
        first.put(key(i), payload(i, 10_000))
    (tmp_path / ".usage").unlink()  # a directory from before the estimate existed
    second = BlockCache(tmp_path, max_bytes=10 * one)
    second.put(key(99), payload(99, 10_000))
    assert second.size() <= 10 * one
    assert (tmp_path / ".usage").stat().st_size * 4096 >= second.size()


def test_eviction_goes_oldest_first(cache: BlockCache) -> None:
    now = time.time()
    for i in range(6):
        cache.put(key(i), payload(i, SMALL))
    for age, i in enumerate([3, 0, 5, 1, 4, 2]):  # key 3 newest ... key 2 oldest
        set_mtime(cache, key(i), now - 100 - age)
    one = entry_size(key(0), SMALL)
    assert cache.evict(target_bytes=3 * one) == 3 * one
    assert [cache.contains(key(i)) for i in range(6)] == [True, False, False, True, False, True]
    assert cache.stats.evictions == 3


def test_cold_entries_go_first_even_if_written_later(cache: BlockCache) -> None:
    now = time.time()
    for i in range(4):
        cache.put(key(i), payload(i, SMALL))
        set_mtime(cache, key(i), now - 100 + i)  # key 0 oldest
    cache.mark_cold([key(3), key(2), key(77)])  # the newest two, and one never stored
    one = entry_size(key(0), SMALL)
    cache.evict(target_bytes=2 * one)
    assert [cache.contains(key(i)) for i in range(4)] == [True, True, False, False]


def test_a_cold_entry_read_again_is_warm_again(cache: BlockCache) -> None:
    now = time.time()
    for i in range(3):
        cache.put(key(i), payload(i, SMALL))
        set_mtime(cache, key(i), now - 100 + i)
    cache.mark_cold([key(2)])
    assert entry_path(cache, key(2)).stat().st_mtime == 0
    assert cache.get(key(2)) is not None  # read again: not done with after all
    assert entry_path(cache, key(2)).stat().st_mtime >= now - 1
    cache.evict(target_bytes=2 * entry_size(key(0), SMALL))
    assert [cache.contains(key(i)) for i in range(3)] == [False, True, True]


def test_a_hit_refreshes_an_old_entry_but_not_a_recent_one(cache: BlockCache) -> None:
    now = time.time()
    cache.put(key(0), b"old")
    cache.put(key(1), b"recent")
    set_mtime(cache, key(0), now - 3600)
    set_mtime(cache, key(1), now - 2)
    assert cache.get(key(0)) is not None
    assert cache.get(key(1)) is not None
    assert entry_path(cache, key(0)).stat().st_mtime >= now - 1
    assert entry_path(cache, key(1)).stat().st_mtime == pytest.approx(now - 2, abs=1e-3)


def test_evict_rejects_a_negative_target(cache: BlockCache) -> None:
    with pytest.raises(CacheConfigError):
        cache.evict(target_bytes=-1)


def test_clear(cache: BlockCache) -> None:
    for i in range(5):
        cache.put(key(i), payload(i, SMALL))
    (cache.directory / "NOTES").write_text("not ours")
    cache.clear()
    assert cache.size() == 0
    assert not any(cache.contains(key(i)) for i in range(5))
    assert sorted(p.name for p in cache.directory.iterdir()) == [".lock", ".usage", "NOTES"]
    cache.put(key(0), b"again")  # the fan-out directories come back
    assert read(cache, key(0)) == b"again"


# --------------------------------------------------------------------------- concurrency


def test_threads_share_a_cache(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path, max_bytes=200_000)
    errors: list[BaseException] = []
    counts = [0] * 8

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        try:
            for _ in range(300):
                i = int(rng.integers(32))
                n = 1000 + 997 * i
                got = cache.get(key(i))
                if got is None:
                    cache.put(key(i), payload(i, n))
                else:
                    assert bytes(got) == payload(i, n)
                    counts[t] += 1
                if rng.random() < 0.05:
                    cache.mark_cold([key(int(rng.integers(32)))])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    snap = cache.stats.snapshot()
    assert snap["hits"] == sum(counts) > 0
    assert snap["hits"] + snap["misses"] == 8 * 300
    assert snap["corrupt"] == 0
    assert snap["evictions"] > 0
    assert cache.size() <= cache.max_bytes + entry_size(key(31), 1000 + 997 * 31)


_HAMMER = """
import json, random, sys
from ferroload_store import BlockCache
cache = BlockCache(sys.argv[1], max_bytes=int(sys.argv[2]))
rng = random.Random(int(sys.argv[3]))
for _ in range(400):
    i = rng.randrange(24)
    k = BlockCache.key("s3://hammer", "obj", "v", i, 1 << 20)
    n = 300_000 + i if i % 6 == 0 else 1000 + 1500 * i  # some entries are mapped
    want = (i % 251).to_bytes(1, "little") * n
    got = cache.get(k)
    if got is None:
        cache.put(k, want)
    elif bytes(got) != want:
        sys.exit(f"wrong bytes for block {i}")
    if rng.random() < 0.05:
        cache.mark_cold([k])
print(json.dumps(cache.stats.snapshot()))
"""


def test_processes_share_a_directory(tmp_path: Path) -> None:
    max_bytes = 600_000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HAMMER, str(tmp_path), str(max_bytes), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    stats = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        stats.append(json.loads(out))
    assert sum(s["hits"] for s in stats) > 0
    assert sum(s["evictions"] for s in stats) > 0
    assert sum(s["corrupt"] for s in stats) == 0
    # the processes share one size estimate: the limit holds once they are done (with
    # at most one entry of slack for a write that raced an eviction's scan)
    assert BlockCache(tmp_path, max_bytes=max_bytes).size() <= max_bytes + 300_100


def test_pickles_to_the_same_directory(cache: BlockCache) -> None:
    cache.put(key(0), b"shared")
    clone = pickle.loads(pickle.dumps(cache))
    assert (clone.directory, clone.max_bytes, clone.block_size) == (
        cache.directory,
        cache.max_bytes,
        cache.block_size,
    )
    assert read(clone, key(0)) == b"shared"
    assert clone.stats.hits == 1
    assert cache.stats.hits == 0


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50GiB", 50 << 30),
        ("200MB", 200_000_000),
        ("1048576", 1 << 20),
        ("1.5 KiB", 1536),
        (" 2g ", 2 << 30),
        ("3T", 3 << 40),
        ("10kb", 10_000),
        ("", 50 << 30),
        ("  ", 50 << 30),
        (None, 50 << 30),
    ],
)
def test_default_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str | None, expected: int
) -> None:
    monkeypatch.setenv("FERROLOAD_CACHE_DIR", str(tmp_path / "c"))
    if text is None:
        monkeypatch.delenv("FERROLOAD_CACHE_SIZE", raising=False)
    else:
        monkeypatch.setenv("FERROLOAD_CACHE_SIZE", text)
    cache = BlockCache.default()
    assert cache.directory == tmp_path / "c"
    assert cache.max_bytes == expected
    assert cache.block_size == 4 << 20
    assert (tmp_path / "c").is_dir()
    other = BlockCache.default(tmp_path / "d")  # a directory given wins; the size still applies
    assert (other.directory, other.max_bytes) == (tmp_path / "d", expected)


def test_default_directory_is_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FERROLOAD_CACHE_DIR", raising=False)
    monkeypatch.delenv("FERROLOAD_CACHE_SIZE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # keep the real home untouched
    monkeypatch.setenv("HOME", str(tmp_path))
    assert BlockCache.default().directory == platformdirs.user_cache_path("ferroload")


@pytest.mark.parametrize("text", ["lots", "-5", "0", "0.0001", "5 XB", "1e9", "GiB", "1..5MB"])
def test_default_rejects_a_bad_size(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str
) -> None:
    monkeypatch.setenv("FERROLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FERROLOAD_CACHE_SIZE", text)
    with pytest.raises(CacheConfigError, match="FERROLOAD_CACHE_SIZE") as info:
        BlockCache.default()
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FerroloadError)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1GiB"])
def test_bad_limits_are_rejected(tmp_path: Path, bad: object) -> None:
    with pytest.raises(CacheConfigError, match="max_bytes"):
        BlockCache(tmp_path, max_bytes=bad)  # type: ignore[arg-type]
    with pytest.raises(CacheConfigError, match="block_size"):
        BlockCache(tmp_path, max_bytes=1 << 20, block_size=bad)  # type: ignore[arg-type]


def test_a_directory_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    with pytest.raises(CacheError) as info:
        BlockCache(blocker / "cache", max_bytes=1 << 20)
    assert isinstance(info.value, StoreError)
    assert isinstance(info.value, OSError)
    assert isinstance(info.value, FerroloadError)
    assert str(blocker / "cache") in str(info.value)
    assert "FERROLOAD_CACHE_DIR" in str(info.value)
    assert info.value.path == str(blocker / "cache")


def test_an_entry_that_cannot_be_written(cache: BlockCache) -> None:
    k = key(0)
    (cache.directory / k[:2]).write_text("a file where a fan-out directory goes")
    assert cache.get(k) is None
    with pytest.raises(CacheError) as info:
        cache.put(k, b"data")
    assert str(cache.directory) in str(info.value)


def _plant(path: Path, kind: str, outside: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":  # like /dev/zero (c 1 5): mknod needs root
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    else:
        path.symlink_to(outside)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "chardev", "symlink"])
def test_an_entry_that_is_no_regular_file_is_a_miss_and_deleted(
    cache: BlockCache, tmp_path: Path, kind: str
) -> None:
    """A FIFO in an entry's place blocked get() for ever, a device was read without end,
    a symlink was followed: each is now damaged (a miss, deleted) without being read."""
    if kind == "chardev" and os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not an entry")
    k = key(1)
    cache.put(k, payload(1, SMALL))
    path = entry_path(cache, k)
    _plant(path, kind, outside)
    assert cache.get(k) is None
    assert not path.exists() and not path.is_symlink()
    assert outside.read_bytes() == b"not an entry"
    assert (cache.stats.corrupt, cache.stats.misses) == (1, 1)
    cache.put(k, payload(1, SMALL))  # fetched again
    assert read(cache, k) == payload(1, SMALL)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_usage_file_that_is_no_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    """`.usage` is opened for appends: a FIFO blocked that open (no reader), a symlink
    made every put grow the file it points at."""
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"victim")
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / ".usage").write_bytes(b"")
    _plant(directory / ".usage", kind, outside)
    cache = BlockCache(directory, max_bytes=64 << 20)
    why = "is a symlink" if kind == "symlink" else "cannot be opened"
    with pytest.raises(CacheError, match=rf"\.usage {why}"):
        cache.put(key(1), payload(1, SMALL))
    assert outside.read_bytes() == b"victim"
