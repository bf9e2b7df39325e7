"""Shard lists (docs/format.md §6.2): an append's cost does not grow with the shards
before it; the dataset, its history, gc, verify, copy and compact stay the same."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import pickle
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ferroload_core import UnsafePathError
from ferroload_format import (
    Dataset,
    Manifest,
    ManifestError,
    UnsupportedFormatVersionError,
    Writer,
    _commit,
    _shard_lists,
    gc,
)
from ferroload_format._paths import SHARD_LISTS_DIR, version_path
from ferroload_format._records import ShardList
from ferroload_format._shard_lists import checksum, encode_shard_list
from ferroload_format._tiers import MERGE_FACTOR, newest_taken
from ferroload_format._versions import read_manifest
from ferroload_store import Store, open_store

from .conftest import race_writers, spawn_writer

LIMIT = 4


@pytest.fixture(autouse=True)
def small_lists(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """At most LIMIT inline shards, and no list read before a test kept in the cache."""
    monkeypatch.setattr(_shard_lists, "MAX_INLINE_SHARDS", LIMIT)
    _shard_lists.forget_cached_lists()
    yield
    _shard_lists.forget_cached_lists()


def blob(i: int) -> bytes:
    return f"payload-{i}-".encode() * (1 + i % 5)


def append(uri: str, first: int, count: int = 1, prefix: str = "s") -> int | None:
    """`count` samples in one commit, one shard each (shard_size 1)."""
    with Writer(uri, "lists", shard_size=1) as w:
        w.declare("blob", "bin")
        for i in range(first, first + count):
            w.add(f"{prefix}{i:05d}", {"blob": blob(i)}, {"n": i})
    return w.version


def ids(uri: str, version: int | None = None) -> list[str]:
    return Dataset.open(uri, version=version).column("sample_id").to_pylist()


def glob_ids(root: str) -> list[str]:
    rows = duckdb.sql(f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet')")
    return sorted(r[0] for r in rows.fetchall())


def check_lists(m: Manifest) -> None:
    """Inline shards within the limit; each list holds more than MERGE_FACTOR times the
    shards of the next; O(log) lists."""
    assert len(m.inline_shards) <= LIMIT
    sizes = [x.num_shards for x in m.shard_lists]
    assert all(a > MERGE_FACTOR * b for a, b in itertools.pairwise(sizes)), sizes
    assert len(sizes) <= math.log2(max(m.num_shards, 1)) + 1
    assert m.num_shards == sum(sizes) + len(m.inline_shards)


def list_files(store: Store) -> set[str]:
    return {o.path for o in store.list(SHARD_LISTS_DIR)}


def referenced_lists(store: Store, versions: list[int]) -> set[str]:
    return {x.path for v in versions for x in read_manifest(store, v).shard_lists}


def test_lists_and_parts_share_one_tiered_rule() -> None:
    assert newest_taken([], 5) == 0
    assert newest_taken([40, 20, 10], 5) == 3  # the binary counter carries
    assert newest_taken([40, 20, 11], 5) == 0  # 11 > 2 * 5
    assert newest_taken([8, 4, 2, 1], 1, limit=8) == 3
    assert _commit.tiered_merge([], 3) == 0  # parts use it (by rows)


# --------------------------------------------------------------------------- many appends


@pytest.mark.slow
def test_many_appends_keep_the_same_dataset(uri: str) -> None:
    n = 40
    for i in range(n):
        append(uri, i)
    ds = Dataset.open(uri)
    m = ds.manifest
    want = [f"s{i:05d}" for i in range(n)]
    assert ds.column("sample_id").to_pylist() == want
    assert m.shard_lists and ds.num_shards == m.num_shards == len(m.shards) == n
    check_lists(m)
    # shard order: the lists' shards in order, then the inline ones = commit order
    assert [s.version for s in m.shards] == list(range(1, n + 1))
    assert len({s.path for s in m.shards}) == n
    assert [ds[i]["blob"] for i in range(n)] == [blob(i) for i in range(n)]
    assert ds.shard_of().tolist() == list(range(n))
    assert ds.verify().ok
    assert m.statistics["num_shards"] == n
    assert m.shard_bytes == sum(s.size for s in m.shards)
    raw = json.loads(open_store(uri).get(version_path(m.version)))
    assert raw["format_version"] == 2 and raw["required_features"] == ["shard_lists"]
    assert len(raw["shards"]) == len(m.inline_shards)
    if not uri.startswith(("memory://", "s3://")):
        assert glob_ids(uri) == want
    for v in (1, LIMIT, LIMIT + 1, 17, n - 1):  # time travel: each reads its own lists
        old = Dataset.open(uri, version=v)
        assert old.column("sample_id").to_pylist() == want[:v]
        assert [r["blob"] for r in old] == [blob(i) for i in range(v)]
        assert old.manifest.num_shards == v


def test_lists_stay_logarithmic_and_shards_are_rewritten_log_times(local_uri: str) -> None:
    rewritten = 0
    store = open_store(local_uri)
    for k in range(30):
        append(local_uri, 10 * k, 10)  # 10 shards an append: a list every append
        m = read_manifest(store)
        check_lists(m)
        rewritten += sum(x.num_shards for x in m.shard_lists if x.version == m.version)
    total = read_manifest(store).num_shards
    assert total == 300
    # each shard was written into a list at most about log2(N / LIMIT) + 1 times
    assert rewritten <= total * (math.log2(total / LIMIT) + 1)
    assert len(read_manifest(store).shard_lists) <= math.log2(total) + 1


def test_a_small_dataset_writes_no_list_and_stays_format_1(local_uri: str) -> None:
    append(local_uri, 0, LIMIT)
    store = open_store(local_uri)
    raw = json.loads(store.get(version_path(1)))
    assert raw["format_version"] == 1 and "shard_lists" not in raw
    assert "required_features" not in raw and len(raw["shards"]) == LIMIT
    assert not list_files(store)


# --------------------------------------------------------------------------- no list reads


@pytest.fixture
def no_list_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every `Store.get`/`head` of a shard list is recorded."""
    seen: list[str] = []
    get, head = Store.get, Store.head

    def spy_get(self: Store, path: str) -> bytes:
        if path.startswith(SHARD_LISTS_DIR):
            seen.append(path)
        return get(self, path)

    def spy_head(self: Store, path: str) -> Any:
        if path.startswith(SHARD_LISTS_DIR):
            seen.append(path)
        return head(self, path)

    monkeypatch.setattr(Store, "get", spy_get)
    monkeypatch.setattr(Store, "head", spy_head)
    return seen


def test_an_append_opening_and_counting_read_no_list(
    local_uri: str, no_list_reads: list[str]
) -> None:
    for i in range(0, 40, 5):
        append(local_uri, i, 5)  # each spills
    store = open_store(local_uri)
    m = read_manifest(store)
    assert m.shard_lists and not m.inline_shards
    _shard_lists.forget_cached_lists()
    no_list_reads.clear()
    append(local_uri, 100, 2)  # stays inline: no list is read
    ds = Dataset.open(local_uri)
    assert (len(ds), ds.num_shards) == (42, 42)
    assert ds.manifest.size_bytes > ds.manifest.shard_bytes > 0
    assert [v.num_shards for v in ds.versions()] == [5 * k for k in range(1, 9)] + [42]
    assert ds.subset("n >= 100", return_indices=True).tolist() == [40, 41]
    assert no_list_reads == []
    # a spill reads only the lists it takes in, never the others
    before = read_manifest(store)
    append(local_uri, 200, LIMIT)
    after = read_manifest(store)
    taken = set(before.shard_lists) - set(after.shard_lists)
    assert set(no_list_reads) <= {x.path for x in taken}
    assert len(after.shard_lists) >= 2  # the large old list stayed as it was
    assert after.shard_lists[0] == before.shard_lists[0]
    no_list_reads.clear()
    assert ds[0]["blob"] == blob(0)  # reading samples does read them
    assert no_list_reads


def test_num_shards_and_log_without_the_list_files(local_uri: str) -> None:
    append(local_uri, 0, 10)
    store = open_store(local_uri)
    m = read_manifest(store)
    assert len(m.shard_lists) == 1
    Path(local_uri, m.shard_lists[0].path).unlink()
    _shard_lists.forget_cached_lists()
    ds = Dataset.open(local_uri)
    assert (len(ds), ds.num_shards, ds.versions()[0].num_shards) == (10, 10, 10)
    assert ds.manifest.size_bytes > 0
    with pytest.raises(ManifestError, match=r"shard list .* of .*0000000001\.json is missing"):
        ds[0]
    report = ds.verify()
    assert [p.kind for p in report.problems] == ["shard-list"]
    with pytest.raises(ManifestError, match="is missing"):
        gc(local_uri, grace=timedelta(0))  # never deletes the shards it cannot see
    assert len(list(Path(local_uri, "shards").iterdir())) == 20


def test_a_manifest_with_lists_needs_a_store_to_list_its_shards(local_uri: str) -> None:
    append(local_uri, 0, 10)
    data = open_store(local_uri).get(version_path(1))
    m = Manifest.from_bytes(data)
    assert m.num_shards == 10
    with pytest.raises(ManifestError, match="not read from a store"):
        _ = m.shards
    assert len(m.bind(open_store(local_uri)).shards) == 10
    ds = Dataset.open(local_uri)
    again = pickle.loads(pickle.dumps(ds))
    assert again[9]["blob"] == blob(9)
    assert "_all_shards" not in ds.manifest.__getstate__()


# --------------------------------------------------------------------------- compatibility


def old_manifest_module() -> Any:
    """`_manifest.py` as ferroload 1.2 (format minor 2) had it, from git, or skip."""
    root = Path(__file__).resolve().parents[3]
    path = "packages/ferroload-format/src/ferroload_format/_manifest.py"
    try:
        src = subprocess.run(
            ["git", "-C", str(root), "show", f"0bb7344:{path}"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the format 1.2 source is not in this checkout's git history")
    assert "FORMAT_MINOR = 2" in src
    spec = importlib.util.spec_from_loader("ferroload_manifest_1_2", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        exec(compile(src, "ferroload_manifest_1_2.py", "exec"), module.__dict__)
    finally:
        del sys.modules[spec.name]
    return module


def test_a_format_1_2_reader_refuses_lists_and_reads_small_datasets(
    local_uri: str, tmp_path: Path
) -> None:
    old = old_manifest_module()
    append(local_uri, 0, LIMIT)  # small: no list
    store = open_store(local_uri)
    assert len(old.Manifest.from_bytes(store.get(version_path(1))).shards) == LIMIT
    append(local_uri, 10, 3)  # spills
    with pytest.raises(old.UnsupportedFormatVersionError, match="upgrade ferroload"):
        old.Manifest.from_bytes(store.get(version_path(2)))


def test_a_manifest_from_format_1_2_still_reads_and_spills_on_append(local_uri: str) -> None:
    append(local_uri, 0, 3)
    store = open_store(local_uri)
    raw = json.loads(store.get(version_path(1)))
    raw["format_minor"] = 2
    store.put(version_path(1), json.dumps(raw).encode())
    assert ids(local_uri) == ["s00000", "s00001", "s00002"]
    append(local_uri, 3, 2)  # 5 inline > LIMIT: into a list
    m = read_manifest(store)
    assert [x.num_shards for x in m.shard_lists] == [5] and not m.inline_shards
    assert [r["blob"] for r in Dataset.open(local_uri)] == [blob(i) for i in range(5)]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda raw: raw.pop("required_features"), ManifestError, "required_features"),
        (
            lambda raw: raw.update(required_features=["shard_lists", "teleport"]),
            UnsupportedFormatVersionError,
            "'teleport'.*upgrade ferroload",
        ),
        (lambda raw: raw.update(format_version=1), ManifestError, "older ferroload"),
        (lambda raw: raw.update(required_features=[]), ManifestError, "older ferroload"),
        (lambda raw: raw["shard_lists"][0].update(num_shards="9"), ManifestError, "num_shards"),
        (lambda raw: raw["shard_lists"][0].pop("checksum"), ManifestError, "checksum"),
        (lambda raw: raw.update(shard_lists={}), ManifestError, "shard_lists must be"),
        (
            lambda raw: raw["shard_lists"][0].update(path="../../etc/passwd"),
            UnsafePathError,
            "shard list",
        ),
    ],
)
def test_a_bad_shard_list_record_is_refused_on_open(
    local_uri: str, change: Any, error: type[Exception], match: str
) -> None:
    append(local_uri, 0, 10)
    store = open_store(local_uri)
    raw = json.loads(store.get(version_path(1)))
    change(raw)
    store.put(version_path(1), json.dumps(raw).encode())
    with pytest.raises(error, match=match):
        Dataset.open(local_uri)


# --------------------------------------------------------------------------- hostile lists


def rewrite_list(root: str, data: bytes, **record: Any) -> None:
    """Put `data` as version 1's first list, its record made to match (size, checksum)
    unless `record` says otherwise."""
    store = open_store(root)
    raw = json.loads(store.get(version_path(1)))
    entry = raw["shard_lists"][0]
    store.put(entry["path"], data)
    entry.update({"size": len(data), "checksum": checksum(data), **record})
    store.put(version_path(1), json.dumps(raw).encode())


def good_list(root: str) -> bytes:
    m = read_manifest(open_store(root), 1)
    return encode_shard_list(m.shards)


def record_line(**changes: Any) -> bytes:
    rec = {
        "path": "shards/x.tar",
        "side_index": "shards/x.idx.parquet",
        "size": 1024,
        "num_samples": 1,
        "num_members": 1,
        "version": 1,
    }
    rec.update(changes)
    return json.dumps(rec).encode() + b"\n"


def records_astride_lines(good: bytes, *, and_two_on_one: bool) -> bytes:
    """Record 2 of `good` over two lines; with `and_two_on_one`, records 0 and 1 on one
    line, so that the list still holds as many lines as records (spec §6.2 broken twice:
    joined with commas, the lines parse as an array of the right length)."""
    recs = [json.loads(x) for x in good.splitlines()]
    recs[2]["e"] = [1, 2]
    lines = [json.dumps(r).encode() for r in recs]
    head, tail = lines[2].split(b"[1, ", 1)
    first = [lines[0] + b", " + lines[1]] if and_two_on_one else lines[:2]
    return b"\n".join([*first, head + b"[1,", tail, *lines[3:]]) + b"\n"


def with_number(good: bytes, text: bytes) -> bytes:
    return good.replace(b'"num_members": 1', b'"num_members": ' + text, 1)


HOSTILE: list[tuple[str, Any, dict[str, Any], type[Exception], str]] = [
    ("wrong count", lambda good: good, {"num_shards": 9}, ManifestError, "more than 9 lines"),
    ("extra line", lambda good: good + record_line(), {}, ManifestError, "more than 10 lines"),
    ("missing line", lambda good: good.split(b"\n", 1)[1], {}, ManifestError, "holds 9 lines"),
    (
        "two records on a line",
        lambda good: records_astride_lines(good, and_two_on_one=True),
        {},
        ManifestError,
        "line 1 holds more than one JSON value",
    ),
    (
        "a record over two lines",
        lambda good: records_astride_lines(good, and_two_on_one=False),
        {"num_shards": 11},
        ManifestError,
        "line 3 is not JSON",
    ),
    (
        "infinity",
        lambda good: with_number(good, b"Infinity"),
        {},
        ManifestError,
        "line 1.num_members holds Infinity",
    ),
    (
        "5000 digits",
        lambda good: with_number(good, b"1" * 5000),
        {},
        ManifestError,
        "line 1.num_members holds an integer of 5000 digits",
    ),
    (
        "not utf-8",
        lambda good: good.replace(b"shards/", b"shards/\xff", 1),
        {},
        ManifestError,
        "line 1 is not UTF-8",
    ),
    (
        "line too long",
        lambda good: record_line(pad="x" * 70_000) + good.split(b"\n", 1)[1],
        {},
        ManifestError,
        "line 1 is longer than 65536 bytes",
    ),
    (
        "shard bytes",
        lambda good: good,
        {"shard_bytes": 10**18},
        ManifestError,
        "the manifest says 1000000000000000000 \\(shard_bytes\\)",
    ),
    ("empty records", lambda good: b"{}\n" * 10, {}, ManifestError, "claims 30 bytes for 10"),
    (  # lines as long as a record's: a list smaller than its records is refused unread
        "not json",
        lambda good: (b"not json" + b" " * 90 + b"\n") * 10,
        {},
        ManifestError,
        "line 1 is not JSON",
    ),
    (
        "not an object",
        lambda good: (b"5" + b" " * 90 + b"\n") * 10,
        {},
        ManifestError,
        "line 1 must be a JSON object",
    ),
    (
        "deep",
        lambda good: b"[" * 5000 + b"]" * 5000 + b"\n" + good.split(b"\n", 1)[1],
        {},
        ManifestError,
        "line 1 nests deeper",
    ),
    ("no newline", lambda good: good[:-1], {}, ManifestError, "newline"),
    (
        "escape",
        lambda good: record_line(path="../../outside.tar") + good.split(b"\n", 1)[1],
        {},
        UnsafePathError,
        r"outside\.tar.*shard list",
    ),
    (
        "negative size",
        lambda good: record_line(size=-1) + good.split(b"\n", 1)[1],
        {},
        ManifestError,
        "line 1.size",
    ),
    ("huge", lambda good: good, {"size": 10**12}, ManifestError, "claims 1000000000000 bytes"),
    (
        "altered",
        lambda good: good.replace(b'"num_members": 1', b'"num_members": 2', 1),
        {"checksum": "0" * 16},
        ManifestError,
        "does not match its checksum",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "record", "error", "match"),
    [h[1:] for h in HOSTILE],
    ids=[h[0] for h in HOSTILE],
)
def test_a_hostile_shard_list_gets_a_clear_error(
    local_uri: str, mutate: Any, record: dict[str, Any], error: type[Exception], match: str
) -> None:
    append(local_uri, 0, 10)
    rewrite_list(local_uri, mutate(good_list(local_uri)), **record)
    _shard_lists.forget_cached_lists()
    ds = Dataset.open(local_uri)  # opening reads no list
    assert (len(ds), ds.num_shards) == (10, record.get("num_shards", 10))
    with pytest.raises(error, match=match) as info:
        ds[0]
    assert "0000000001.json" in str(info.value) or error is UnsafePathError
    report = ds.verify()
    assert [p.kind for p in report.problems] == ["shard-list"]
    with pytest.raises(error):
        gc(local_uri, grace=timedelta(0))


def test_a_list_of_the_wrong_size_on_disk_is_refused_before_it_is_read(
    local_uri: str, no_list_reads: list[str]
) -> None:
    append(local_uri, 0, 10)
    m = read_manifest(open_store(local_uri))
    path = Path(local_uri, m.shard_lists[0].path)
    path.write_bytes(path.read_bytes() + b" " * 10_000)
    _shard_lists.forget_cached_lists()
    no_list_reads.clear()
    with pytest.raises(ManifestError, match=r"is 1[0-9]+ bytes, the manifest says"):
        Dataset.open(local_uri)[0]
    assert no_list_reads == [m.shard_lists[0].path]  # a head, no get


def test_a_list_too_small_for_its_records_is_refused_before_it_is_read(
    local_uri: str, no_list_reads: list[str]
) -> None:
    # issue 31 point 7: 20 MiB of `{}` lines took +930 MB to parse before the refusal
    append(local_uri, 0, 10)
    rewrite_list(local_uri, b"{}\n" * 100_000, num_shards=100_000)
    _shard_lists.forget_cached_lists()
    no_list_reads.clear()
    with pytest.raises(ManifestError, match="claims 300000 bytes for 100000 shards"):
        Dataset.open(local_uri)[0]
    assert no_list_reads == []  # neither a head nor a get


def test_a_list_is_read_in_pieces_and_refused_at_its_first_bad_line(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(local_uri, 0, 10)
    reads: list[int] = []
    get_range = Store.get_range

    def spy(self: Store, path: str, start: int, length: int) -> bytes:
        if path.startswith(SHARD_LISTS_DIR):
            reads.append(length)
        return get_range(self, path, start, length)

    monkeypatch.setattr(Store, "get_range", spy)
    monkeypatch.setattr(_shard_lists, "READ_PIECE_BYTES", 500)
    good = good_list(local_uri)
    _shard_lists.forget_cached_lists()
    assert [r["blob"] for r in Dataset.open(local_uri)] == [blob(i) for i in range(10)]
    assert len(reads) == math.ceil(len(good) / 500) and max(reads) == 500  # lines cut
    lines = good.splitlines(keepends=True)
    assert len(lines[0] + lines[1]) < 500
    rewrite_list(local_uri, lines[0] + b"x".ljust(len(lines[1]) - 1) + b"\n" + b"".join(lines[2:]))
    _shard_lists.forget_cached_lists()
    reads.clear()
    with pytest.raises(ManifestError, match="line 2 is not JSON"):
        Dataset.open(local_uri)[0]
    assert reads == [500]  # the rest of the list was never read


# --------------------------------------------------------------------------- operations


def test_gc_keeps_what_kept_versions_list_and_drops_merged_lists(local_uri: str) -> None:
    for i in range(0, 30, 3):
        append(local_uri, i, 3)
    store = open_store(local_uri)
    latest = read_manifest(store)
    every = list(range(1, latest.version + 1))
    assert list_files(store) == referenced_lists(store, every)
    assert list_files(store) > referenced_lists(store, [latest.version])  # merged-away ones
    report = gc(local_uri, grace=timedelta(0))
    assert not report.deleted  # every version is kept, and each needs its lists
    for v in every:
        assert len(Dataset.open(local_uri, version=v)) == 3 * v
    gc(local_uri, grace=timedelta(0), keep_versions=3)
    kept = every[-3:]
    assert list_files(store) == referenced_lists(store, kept)
    listed = {
        p for v in kept for s in read_manifest(store, v).shards for p in (s.path, s.side_index)
    }
    assert {o.path for o in store.list("shards/")} == listed
    for v in kept:
        old = Dataset.open(local_uri, version=v)
        assert [r["blob"] for r in old] == [blob(i) for i in range(3 * v)]
    assert Dataset.open(local_uri).verify().ok


def test_copy_to_and_compact_keep_shards_order_and_payloads(local_uri: str, tmp_path: Path) -> None:
    for i in range(0, 24, 3):
        append(local_uri, i, 3)
    ds = Dataset.open(local_uri)
    want = [blob(i) for i in range(24)]
    copy = ds.copy_to(str(tmp_path / "copy"), shard_size=1)
    assert copy.manifest.shard_lists and copy.num_shards == 24
    assert [r["blob"] for r in copy] == want and copy.verify().ok
    before = ds.manifest
    small = ds.compact()
    m = small.manifest
    assert len(m.index_parts) == 1 and len(m.shard_lists) == 1 and not m.inline_shards
    assert m.shards == before.shards
    assert [r["blob"] for r in small] == want and small.verify().ok
    assert small.compact() is small  # nothing left to fold
    assert [r["blob"] for r in Dataset.open(local_uri, version=before.version)] == want
    gc(local_uri, grace=timedelta(0), keep_versions=1)
    store = open_store(local_uri)
    assert list_files(store) == {m.shard_lists[0].path}
    assert glob_ids(local_uri) == [f"s{i:05d}" for i in range(24)]


def test_compact_folds_lists_when_the_index_has_one_part(local_uri: str) -> None:
    append(local_uri, 0, 5)  # a list of 5
    append(local_uri, 5, 3)  # merges the index into one part; 3 shards inline
    ds = Dataset.open(local_uri)
    assert len(ds.manifest.index_parts) == 1
    assert len(ds.manifest.shard_lists) == 1 and len(ds.manifest.inline_shards) == 3
    small = ds.compact()
    assert small.version == ds.version + 1
    assert small.manifest.index_parts == ds.manifest.index_parts
    assert [x.num_shards for x in small.manifest.shard_lists] == [8]
    assert [r["blob"] for r in small] == [blob(i) for i in range(8)]


def test_an_overwrite_starts_without_lists(local_uri: str) -> None:
    for i in range(0, 12, 6):
        append(local_uri, i, 6)
    with Writer(local_uri, mode="overwrite", shard_size=1) as w:
        w.declare("blob", "bin")
        w.add("new", {"blob": b"x"}, {"n": 0})
    m = read_manifest(open_store(local_uri))
    assert not m.shard_lists and m.num_shards == 1
    raw = json.loads(open_store(local_uri).get(version_path(m.version)))
    assert raw["format_version"] == 1
    assert ids(local_uri, 2) == [f"s{i:05d}" for i in range(12)]
    gc(local_uri, grace=timedelta(0), keep_versions=1)
    assert not list_files(open_store(local_uri))


# --------------------------------------------------------------------------- concurrency


def seed(uri: str, appends: int) -> None:
    """Appends in the schema of `_child_writer.py`, spilling."""
    for k in range(appends):
        with Writer(uri, "concurrent", shard_size=2048) as w:
            w.declare("image", "jpg", "tensor", "image")
            for j in range(3):
                w.add(f"base{k}-{j}", {"image": f"payload-{k}".encode() * 100}, {"label": k % 5})


def test_a_rebase_spills_again_on_top_of_the_version_that_won(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(local_uri, 0, 3)
    fired: list[str] = []

    def interleave(name: str) -> None:  # another writer commits (and spills) meanwhile
        if name == "before-commit" and not fired:
            fired.append(name)
            append(local_uri, 100, 3, prefix="o")

    monkeypatch.setattr(_commit, "_checkpoint", interleave)
    version = append(local_uri, 3, 5)  # more than LIMIT inline: spills at each attempt
    monkeypatch.undo()
    monkeypatch.setattr(_shard_lists, "MAX_INLINE_SHARDS", LIMIT)
    assert fired and version == 3
    ds = Dataset.open(local_uri)
    want = [*(f"s{i:05d}" for i in range(3)), *(f"o{i:05d}" for i in range(100, 103))]
    want += [f"s{i:05d}" for i in range(3, 8)]
    assert ds.column("sample_id").to_pylist() == want
    # the winner spilled 6 shards into a list; the retry's list took that one in
    assert [x.num_shards for x in ds.manifest.shard_lists] == [11]
    assert ds.shard_of().tolist() == list(range(11))
    assert ds.verify().ok
    store = open_store(local_uri)  # the lost attempt's list was deleted
    assert list_files(store) == referenced_lists(store, [1, 2, 3])


@pytest.mark.slow
def test_two_writer_processes_append_across_spills(local_uri: str, tmp_path: Path) -> None:
    seed(local_uri, 2)
    race_writers(local_uri, tmp_path, 12, "--max-inline", "2")
    ds = Dataset.open(local_uri)
    got = ds.column("sample_id").to_pylist()
    assert len(got) == len(set(got)) == 6 + 4 * 12
    assert ds.manifest.shard_lists
    assert len(ds.manifest.shards) == ds.num_shards
    assert ds.verify().ok
    assert sorted(glob_ids(local_uri)) == sorted(got)
    for v in range(1, ds.version + 1):
        old = Dataset.open(local_uri, version=v)
        assert len([r["image"] for r in old]) == len(old)
        assert old.verify().ok


@pytest.mark.parametrize(
    "point",
    ["shards-written", "part-staged", "list-written", "before-commit", "committed", "published"],
)
def test_a_spilling_append_killed_at_any_point_leaves_a_readable_dataset(
    local_uri: str, point: str
) -> None:
    seed(local_uri, 2)
    store = open_store(local_uri)
    before = read_manifest(store)
    rows = ids(local_uri)
    proc = spawn_writer(local_uri, 0, 12, "--max-inline", "2", "--crash-at", point)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    _shard_lists.forget_cached_lists()
    ds = Dataset.open(local_uri)
    committed = point in ("committed", "published")
    assert ds.version == before.version + committed
    want = rows + ([f"s{i:05d}" for i in range(12)] if committed else [])
    assert [r["sample_id"] for r in ds] == want
    if committed:
        assert ds.manifest.shard_lists[-1].version == ds.version  # it did spill
    elif point in ("list-written", "before-commit"):
        assert list_files(store) > referenced_lists(store, [1, 2])  # a leftover list
    gc(local_uri, grace=timedelta(0))
    assert list_files(store) == referenced_lists(store, list(range(1, ds.version + 1)))
    assert Dataset.open(local_uri).verify().ok
    assert ids(local_uri, before.version) == rows
    child = spawn_writer(local_uri, 100, 8, "--max-inline", "2")
    child.communicate(timeout=60)
    assert child.returncode == 0
    final = Dataset.open(local_uri)
    assert final.column("sample_id").to_pylist() == [*want, *(f"s{i:05d}" for i in range(100, 108))]
    assert final.verify().ok


def test_shard_list_records_round_trip() -> None:
    rec = ShardList("_ferroload/shardlists/t-0000000001.jsonl", 3, 600, "ab" * 8, 3000, 1)
    assert ShardList.from_json(rec.to_json()) == rec
