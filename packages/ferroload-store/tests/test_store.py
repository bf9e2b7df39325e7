from __future__ import annotations

import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from ferroload_store import (
    FerroloadError,
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectTruncatedError,
    Store,
    open_store,
)


def test_put_get_head_exists_delete(store: Store) -> None:
    store.put("a/b.bin", b"hello world")
    assert store.get("a/b.bin") == b"hello world"
    assert store.head("a/b.bin").size == 11
    assert store.exists("a/b.bin")
    store.delete("a/b.bin")
    assert not store.exists("a/b.bin")
    store.delete("a/b.bin")  # deleting a missing object is fine


def test_missing_object_errors_are_ferroload_and_builtin(store: Store) -> None:
    for call in (
        lambda: store.get("nope"),
        lambda: store.get_range("nope", 0, 1),
        lambda: store.head("nope"),
    ):
        with pytest.raises(ObjectNotFoundError) as info:
            call()
        assert isinstance(info.value, FileNotFoundError)
        assert isinstance(info.value, FerroloadError)
        assert "nope" in str(info.value)


def test_put_if_absent_is_exclusive(store: Store) -> None:
    store.put_if_absent("k", b"first")
    with pytest.raises(ObjectExistsError) as info:
        store.put_if_absent("k", b"second")
    assert isinstance(info.value, FileExistsError)
    assert store.get("k") == b"first"


def test_put_if_absent_has_exactly_one_winner_among_threads(store: Store) -> None:
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            store.put_if_absent("race", str(i).encode())
            wins.append(i)
        except ObjectExistsError:
            pass

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert store.get("race") == str(wins[0]).encode()


def test_range_reads_and_coalescing(store: Store) -> None:
    data = bytes(range(256)) * 1000
    store.put("blob", data)
    assert store.get_range("blob", 10, 5) == data[10:15]
    starts = np.array([5000, 10, 100, 200_000, 120])
    lengths = np.array([10, 20, 30, 40, 0])
    store.stats.reset()
    views = store.get_ranges("blob", starts, lengths, max_gap=8192)
    assert [bytes(v) for v in views] == [
        data[s : s + n] for s, n in zip(starts, lengths, strict=True)
    ]
    # 10..130 and 5000 are within the gap of each other; 200_000 is far away. A local
    # file is served from its memory map: one access for the whole call.
    assert store.stats.get_requests == (1 if store.is_local else 2)
    assert store.get_ranges("blob", [], []) == []
    # empty ranges alone (an empty payload): nothing to fetch, even at the very end
    store.stats.reset()
    assert [bytes(v) for v in store.get_ranges("blob", [512, len(data)], [0, 0])] == [b"", b""]
    assert [bytes(v) for v in store.get_ranges("blob", [7, len(data)], [3, 0])] == [data[7:10], b""]
    assert store.stats.get_requests == (2 if store.is_local else 1)  # local: one per call


def test_truncated_range_read_says_where(store: Store) -> None:
    store.put("short", b"x" * 100)
    with pytest.raises(ObjectTruncatedError) as info:
        store.get_range("short", 90, 20)
    assert (info.value.size, info.value.end) == (100, 110)
    assert isinstance(info.value, EOFError)
    with pytest.raises(ObjectTruncatedError) as info:
        store.get_ranges("short", [0, 95], [10, 10])
    assert info.value.size == 100


def test_list_is_sorted_and_honours_prefix_and_offset(store: Store) -> None:
    for key in ["v/3", "v/1", "v/2", "w/1", "vv/1"]:
        store.put(key, b"")
    assert [o.path for o in store.list("v/")] == ["v/1", "v/2", "v/3"]
    assert [o.path for o in store.list("v/", offset="v/1")] == ["v/2", "v/3"]
    assert store.list("none/") == []
    assert [o.path for o in store.list("v/")] == [o.path for o in store.list("v")][:3]
    store.put("v/abc-1", b"")
    store.put("v/abd-1", b"")
    assert [o.path for o in store.list("v/ab")] == ["v/abc-1", "v/abd-1"]
    assert [o.path for o in store.list("v/abc-")] == ["v/abc-1"]


def test_open_writer_commits_on_close_and_drops_on_abort(store: Store) -> None:
    w = store.open_writer("streamed")
    w.write(b"abc")
    w.write(memoryview(b"def"))
    assert not store.exists("streamed")
    w.close()
    assert store.get("streamed") == b"abcdef"
    w = store.open_writer("dropped")
    w.write(b"xyz")
    w.abort()
    assert not store.exists("dropped")
    assert [o.path for o in store.list("")] == ["streamed"]


def test_stats_count_requests_and_bytes(store: Store) -> None:
    store.put("x", b"12345")
    store.stats.reset()
    store.get("x")
    store.get_range("x", 1, 2)
    snap = store.stats.snapshot()
    assert snap["get_requests"] == 2
    assert snap["bytes_read"] == 7


def test_store_pickles_to_the_same_root(store: Store) -> None:
    store.put("p", b"1")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.uri == store.uri
    assert clone.get("p") == b"1"


def test_memory_stores_are_shared_by_name() -> None:
    a = open_store("memory://shared-by-name/x")
    b = open_store("memory://shared-by-name/x")
    a.put("k", b"v")
    assert b.get("k") == b"v"
    assert not open_store("memory://shared-by-name/y").exists("k")


def test_local_reads_of_missing_root_do_not_create_it(tmp_path: Path) -> None:
    store = open_store(tmp_path / "absent")
    assert store.list("") == []
    with pytest.raises(ObjectNotFoundError):
        store.get("x")
    assert not (tmp_path / "absent").exists()
    store.put("sub/x", b"1")
    assert (tmp_path / "absent" / "sub" / "x").read_bytes() == b"1"


def test_local_delete_removes_empty_directories(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.put("a/b/c", b"1")
    store.delete("a/b/c")
    assert not (tmp_path / "a" / "b").exists()
    assert tmp_path.exists()


def test_range_file_reads_like_a_file(store: Store) -> None:
    import io

    store.put("f", b"0123456789")
    with store.open_input("f") as f:
        assert f.read(3) == b"012"
        f.seek(-2, io.SEEK_END)
        assert f.read() == b"89"
        f.seek(4)
        assert f.tell() == 4
        buf = bytearray(3)
        assert f.readinto(buf) == 3
        assert bytes(buf) == b"456"


def test_a_file_truncated_after_it_was_mapped_reports_truncation(tmp_path: Path) -> None:
    """Local ranges are served from a memory map; a truncated file must not crash (SIGBUS)."""
    store = open_store(tmp_path)
    store.put("f", bytes(range(256)) * 64)
    views = store.get_ranges("f", [0, 10_000], [10, 10])  # maps the file
    assert bytes(views[1]) == (bytes(range(256)) * 64)[10_000:10_010]
    with open(tmp_path / "f", "r+b") as f:
        f.truncate(5000)
    with pytest.raises(ObjectTruncatedError) as info:
        store.get_ranges("f", [0, 10_000], [10, 10])
    assert info.value.size == 5000
    assert bytes(store.get_ranges("f", [100], [5])[0]) == bytes(range(100, 105))
    with open(tmp_path / "f", "r+b") as f:
        f.truncate(0)
    with pytest.raises(ObjectTruncatedError):
        store.get_ranges("f", [0], [1])


def _rss_file_kib() -> int:
    """This process's resident pages of mapped files (Linux), in KiB; -1 elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def test_mapped_reads_drop_their_pages_so_rss_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch of local reads would keep every mapped page of every shard resident (RSS
    as large as the data read); past MAPPED_TRIM_BYTES the store drops them, and views
    handed out before still read the same bytes."""
    from ferroload_store import _mapped

    data = np.random.default_rng(0).integers(0, 256, 48 << 20, dtype=np.uint8).tobytes()
    store = open_store(tmp_path)
    store.put("big", data)
    monkeypatch.setattr(_mapped, "MAPPED_TRIM_BYTES", 1 << 40)  # no trim while we fill
    starts = np.arange(0, len(data) - 100, 4096)
    kept = store.get_ranges("big", starts[:5], [100] * 5)
    views = store.get_ranges("big", starts, [100] * len(starts))
    assert sum(v[0] for v in views) == sum(data[int(s)] for s in starts)  # touch every page
    before = _rss_file_kib()
    assert store.stats.mapped_trims == 0
    monkeypatch.setattr(_mapped, "MAPPED_TRIM_BYTES", 1 << 20)
    store.get_ranges("big", starts[:20], [100] * 20)
    assert store.stats.mapped_trims == 1
    after = _rss_file_kib()
    if before >= 0:  # Linux: the file's 48 MiB of pages left the process
        assert before - after > 40 << 10, (before, after)
    assert [bytes(v) for v in kept] == [data[int(s) : int(s) + 100] for s in starts[:5]]


def test_mapped_reads_of_small_files_are_never_trimmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's pages are resident once however often they are read: reads of files
    smaller than MAPPED_TRIM_BYTES in all never trim (each trim made every page fault back
    in: 5,000 faults and ~100 ms of system time an epoch of 20,000 tiny samples), and
    reads spread over more than that still do."""
    from ferroload_store import _mapped

    monkeypatch.setattr(_mapped, "MAPPED_TRIM_BYTES", 1 << 20)
    rng = np.random.default_rng(1)
    store = open_store(tmp_path)
    small = rng.integers(0, 256, 300 << 10, dtype=np.uint8).tobytes()
    store.put("a", small)
    store.put("b", small[::-1])
    starts = np.arange(0, len(small) - 100, 97)  # 3,166 ranges: ~200 MiB by the estimate
    for _ in range(20):
        for name in ("a", "b"):
            views = store.get_ranges(name, starts, [100] * len(starts))
    assert store.stats.mapped_trims == 0
    assert bytes(views[3]) == small[::-1][int(starts[3]) : int(starts[3]) + 100]
    for name in ("c", "d", "e", "f"):  # 600 KiB more: 1.2 MiB mapped in all
        store.put(name, small)
        store.get_ranges(name, starts, [100] * len(starts))
    assert store.stats.mapped_trims == 1
