"""Tiered merging of index parts: many appends leave O(log N) parts, same rows, atomic."""

from __future__ import annotations

import itertools
import json
import math
import signal
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import (
    CommitConflictError,
    Dataset,
    DuplicateSampleError,
    LayerWriter,
    Writer,
    _commit,
    gc,
)
from ferroload_format._commit import MERGE_FACTOR, tiered_merge
from ferroload_format._ids import write_run
from ferroload_format._manifest import Manifest
from ferroload_format._paths import IDS_DIR, INDEX_DIR, part_path
from ferroload_format._records import IndexPart
from ferroload_format._versions import read_manifest
from ferroload_store import open_store

from .conftest import race_writers, spawn_writer


def append(uri: str, first: int, count: int = 1, prefix: str = "s") -> int | None:
    with Writer(uri, "tiers", shard_size=4096) as w:
        w.declare("blob", "bin")
        for i in range(first, first + count):
            w.add(f"{prefix}{i:05d}", {"blob": f"p{i}".encode() * 3}, {"n": i, "tag": f"t{i % 3}"})
    return w.version


def ids_of(uri: str, version: int | None = None) -> list[str]:
    return Dataset.open(uri, version=version).column("sample_id").to_pylist()


def glob_ids(root: str) -> list[str]:
    rows = duckdb.sql(f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet')")
    return [r[0] for r in rows.fetchall()]


def check_tiers(manifest: Manifest) -> None:
    """Each part holds more than MERGE_FACTOR times the rows of the next one; each part
    has exactly one run of its own."""
    rows = [p.num_rows for p in manifest.index_parts]
    assert all(a > MERGE_FACTOR * b for a, b in itertools.pairwise(rows)), rows
    assert len(rows) <= math.log2(max(sum(rows), 1)) + 1
    own = {r.parts for r in manifest.id_runs}
    assert own == {(p.version,) for p in manifest.index_parts}


def part(rows: int, version: int) -> IndexPart:
    return IndexPart(f"index/part-{version:010d}.parquet", "s", rows, 1, version)


def test_the_rule_merges_the_newest_parts_while_small_enough() -> None:
    assert tiered_merge([], 1) == 0
    assert tiered_merge([part(8, 1), part(4, 2), part(2, 3), part(1, 4)], 1) == 4
    assert tiered_merge([part(8, 1), part(4, 2), part(3, 3)], 1) == 0
    assert tiered_merge([part(100, 1), part(5, 2)], 3) == 1  # 5 <= 2*3; 100 > 2*8
    assert tiered_merge([part(1000, 1)], 400) == 0
    assert tiered_merge([part(1000, 1)], 500) == 1
    # never past the limit: large parts stay as they are
    assert tiered_merge([part(8, 1), part(4, 2), part(2, 3), part(1, 4)], 1, limit=8) == 3
    assert tiered_merge([part(10, 1)], 10, limit=15) == 0
    assert tiered_merge([part(10**7, 1)], 10**7) == 0  # MAX_MERGE_ROWS


@pytest.mark.slow
def test_300_appends_leave_log_n_parts_with_the_same_rows(local_uri: str) -> None:
    n = 300
    versions_parts = []
    for i in range(n):
        append(local_uri, i)
        versions_parts.append(len(read_manifest(open_store(local_uri)).index_parts))
    assert max(versions_parts) <= math.log2(n) + 1
    ds = Dataset.open(local_uri)
    assert ds.column("sample_id").to_pylist() == [f"s{i:05d}" for i in range(n)]
    assert ds.column("n").to_pylist() == list(range(n))
    assert [ds[i]["blob"] for i in (0, 137, 299)] == [b"p0" * 3, b"p137" * 3, b"p299" * 3]
    check_tiers(ds.manifest)
    assert ds.manifest.statistics["num_samples"] == n
    assert ds.manifest.statistics["index_bytes"] == sum(p.size for p in ds.manifest.index_parts)
    assert ds.subset("tag = 't1'", return_indices=True).tolist() == list(range(1, n, 3))
    assert ds.verify().ok
    # the glob shows each row of the latest version once; older versions stay readable
    assert sorted(glob_ids(local_uri)) == sorted(ds.column("sample_id").to_pylist())
    for v in (1, 2, 3, 64, 65, 200):
        assert ids_of(local_uri, v) == [f"s{i:05d}" for i in range(v)]
    gc(local_uri, grace=timedelta(0))
    for v in (1, 2, 3, 64, 65, 200, n):
        assert ids_of(local_uri, v) == [f"s{i:05d}" for i in range(v)]
    assert Dataset.open(local_uri, version=65).verify().ok
    # index/ holds one part per version, its own rows (merges never touch the glob);
    # the merged parts ferroload reads are outside it
    store = open_store(local_uri)
    assert {o.path for o in store.list(INDEX_DIR)} == {part_path(v) for v in range(1, n + 1)}
    assert all(not p.path.startswith(INDEX_DIR) for p in ds.manifest.index_parts[:-1])
    for sid in ("s00000", "s00150", "s00299"):
        with pytest.raises(DuplicateSampleError, match=sid):
            append(local_uri, int(sid[1:]))
    assert len(Dataset.open(local_uri)) == n


def test_merges_keep_order_across_backends_and_batch_sizes(uri: str) -> None:
    sizes = [5, 1, 1, 3, 20, 1, 2, 7, 1, 1]
    first = 0
    for size in sizes:
        append(uri, first, size)
        first += size
    ds = Dataset.open(uri)
    assert ds.column("sample_id").to_pylist() == [f"s{i:05d}" for i in range(first)]
    assert ds.column("n").to_pylist() == list(range(first))
    check_tiers(ds.manifest)
    assert ds.verify().ok


def test_layers_stay_aligned_after_merging_appends(local_uri: str) -> None:
    for i in range(6):
        append(local_uri, i)
    ds = Dataset.open(local_uri)
    lw = LayerWriter(ds, "twice", identity="t1", columns={"twice": pa.int64()})
    lw.write_partition(0, np.arange(len(ds)), {"twice": [2 * i for i in range(len(ds))]}, {})
    append(local_uri, 6)  # an append commits between the map and its commit: it merges
    assert Dataset.open(local_uri).manifest.index_parts[-1].since < 7
    layered = lw.commit(1)  # rows of version 6 still sit at positions 0..5
    for i in range(7, 12):
        append(local_uri, i)
    after = Dataset.open(local_uri)
    assert after.manifest.layers == layered.manifest.layers
    assert after.column("twice").to_pylist() == [0, 2, 4, 6, 8, 10] + [None] * 6
    assert after.column("sample_id").to_pylist() == [f"s{i:05d}" for i in range(12)]
    assert after.verify().ok


def test_an_overwrite_after_merges_still_refuses_a_stale_layer(local_uri: str) -> None:
    for i in range(4):
        append(local_uri, i)
    ds = Dataset.open(local_uri)
    lw = LayerWriter(ds, "twice", identity="t1", columns={"twice": pa.int64()})
    lw.write_partition(0, np.arange(len(ds)), {"twice": [0] * len(ds)}, {})
    with Writer(local_uri, "tiers", mode="overwrite") as w:
        w.declare("blob", "bin")
        w.add("x", {"blob": b"x"}, {"n": 0, "tag": "t"})
    append(local_uri, 100)
    with pytest.raises(CommitConflictError, match="overwrote"):
        lw.commit(1)


# --------------------------------------------------------------------------- concurrency


def test_a_rebase_merges_again_on_top_of_the_version_that_won(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        append(local_uri, i)
    before = read_manifest(open_store(local_uri))
    original = _commit._checkpoint
    fired: list[str] = []

    def interleave(name: str) -> None:  # another writer commits while this one is at the claim
        if name == "before-commit" and not fired:
            fired.append(name)
            append(local_uri, 100, 3, prefix="o")

    monkeypatch.setattr(_commit, "_checkpoint", interleave)
    version = append(local_uri, 5, 2)
    monkeypatch.setattr(_commit, "_checkpoint", original)
    assert fired and version == before.version + 2
    ds = Dataset.open(local_uri)
    assert ds.column("sample_id").to_pylist() == [
        *(f"s{i:05d}" for i in range(5)),
        *(f"o{i:05d}" for i in range(100, 103)),
        "s00005",
        "s00006",
    ]
    check_tiers(ds.manifest)
    assert ds.verify().ok
    assert sorted(glob_ids(local_uri)) == sorted(ds.column("sample_id").to_pylist())
    store = open_store(local_uri)  # the run of the lost attempt was deleted
    referenced = {r.path for v in range(1, ds.version + 1) for r in read_manifest(store, v).id_runs}
    assert {o.path for o in store.list(IDS_DIR)} == referenced


def test_a_part_merged_and_retired_before_its_own_publish_leaves_the_glob(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(local_uri, 0, 20)
    fired: list[str] = []

    def interleave(name: str) -> None:  # between this writer's commit and its publish …
        if name == "committed" and not fired:
            fired.append(name)
            append(local_uri, 100, 3)  # … the next one publishes its part, merges, retires it

    monkeypatch.setattr(_commit, "_checkpoint", interleave)
    append(local_uri, 50, 2)  # then puts its part back: it must retire it again
    monkeypatch.undo()
    ds = Dataset.open(local_uri)
    assert fired and [(p.num_rows, p.since) for p in ds.manifest.index_parts] == [(20, 1), (5, 2)]
    assert sorted(glob_ids(local_uri)) == sorted(ds.column("sample_id").to_pylist())
    assert ds.verify().ok
    assert len(Dataset.open(local_uri, version=2)) == 22


def test_a_writer_started_before_a_merge_tells_duplicates_from_conflicts(
    local_uri: str,
) -> None:
    for i in range(4):
        append(local_uri, i)
    stale = Writer(local_uri, "tiers")
    stale.add("s00001", {"blob": b"x"}, {"n": 1, "tag": "t"})  # in its base: a duplicate
    racing = Writer(local_uri, "tiers")
    racing.add("late", {"blob": b"x"}, {"n": 1, "tag": "t"})
    append(local_uri, 4, 4)  # merges every part, old rows included, into one
    assert len(Dataset.open(local_uri).manifest.index_parts) == 1
    with pytest.raises(DuplicateSampleError, match="s00001"):
        stale.close()
    other = Writer(local_uri, "tiers")
    other.add("late00000", {"blob": b"x"}, {"n": 1, "tag": "t"})
    append(local_uri, 0, 1, prefix="late")  # a concurrent writer adds the same id …
    append(local_uri, 50, 6)  # … and a merge swallows it with older rows
    with pytest.raises(CommitConflictError, match="concurrent"):
        other.close()
    assert racing.close() is not None
    assert len(Dataset.open(local_uri)) == 4 + 4 + 1 + 6 + 1


def seed(uri: str, appends: int) -> None:
    """Several small parts in the schema of `_child_writer.py`."""
    for k in range(appends):
        with Writer(uri, "concurrent", shard_size=2048) as w:
            w.declare("image", "jpg", "tensor", "image")
            w.add(f"base{k:05d}", {"image": f"payload-{k}".encode() * 20}, {"label": k % 5})


@pytest.mark.slow
def test_two_writer_processes_both_merge_and_both_land(local_uri: str, tmp_path: Path) -> None:
    seed(local_uri, 3)
    race_writers(local_uri, tmp_path, 2)
    ds = Dataset.open(local_uri)
    ids = ds.column("sample_id").to_pylist()
    assert len(ids) == len(set(ids)) == 3 + 8
    assert ids[:3] == ["base00000", "base00001", "base00002"]
    assert sorted(glob_ids(local_uri)) == sorted(ids)
    check_tiers(ds.manifest)
    assert ds.verify().ok
    for v in range(1, ds.version + 1):
        old = Dataset.open(local_uri, version=v)
        assert len([r["image"] for r in old]) == len(old)


# --------------------------------------------------------------------------- crashes


@pytest.mark.parametrize(
    "point", ["shards-written", "part-staged", "before-commit", "committed", "published"]
)
def test_a_merging_append_killed_at_any_point_leaves_a_readable_dataset(
    local_uri: str, point: str
) -> None:
    seed(local_uri, 4)
    before = read_manifest(open_store(local_uri))
    rows = ids_of(local_uri)
    proc = spawn_writer(local_uri, 0, 3, "--crash-at", point)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    ds = Dataset.open(local_uri)
    committed = point in ("committed", "published")
    assert ds.version == before.version + committed
    want = rows + ([f"s{i:05d}" for i in range(3)] if committed else [])
    assert ds.column("sample_id").to_pylist() == want
    assert [r["sample_id"] for r in ds] == want  # payloads readable, parts from staging
    assert ids_of(local_uri, before.version) == rows
    if committed:
        assert ds.manifest.index_parts[-1].since < ds.version  # it did merge
    if point == "committed":  # merged part not yet published: DuckDB sees the old version
        assert sorted(glob_ids(local_uri)) == sorted(rows)
    else:
        assert sorted(glob_ids(local_uri)) == sorted(want)
    gc(local_uri, grace=timedelta(0))
    assert sorted(glob_ids(local_uri)) == sorted(want)
    assert Dataset.open(local_uri).verify().ok
    assert ids_of(local_uri, before.version) == rows
    append_child = spawn_writer(local_uri, 10, 2)
    append_child.communicate(timeout=60)
    assert append_child.returncode == 0
    final = Dataset.open(local_uri)
    assert final.column("sample_id").to_pylist() == [*want, "s00010", "s00011"]
    assert sorted(glob_ids(local_uri)) == sorted(final.column("sample_id").to_pylist())
    assert final.verify().ok


def test_the_next_writer_finishes_a_dead_merges_publication_and_retirement(
    local_uri: str,
) -> None:
    seed(local_uri, 4)
    proc = spawn_writer(local_uri, 0, 1, "--crash-at", "committed")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    append_child = spawn_writer(local_uri, 1, 1)  # no merge of its own (4+1 rows > 2*1)
    append_child.communicate(timeout=60)
    assert append_child.returncode == 0
    ds = Dataset.open(local_uri)
    assert [p.num_rows for p in ds.manifest.index_parts] == [5, 1]
    assert sorted(glob_ids(local_uri)) == sorted(ds.column("sample_id").to_pylist())


# --------------------------------------------------------------------------- older datasets


def test_a_dataset_from_an_older_ferroload_keeps_working(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what an older ferroload left: one part per append, one run covering several parts
    monkeypatch.setattr(_commit, "tiered_merge", lambda parts, rows: 0)
    append(local_uri, 0, 20)
    for i in range(20, 27):
        append(local_uri, i)
    monkeypatch.undo()
    store = open_store(local_uri)
    m = read_manifest(store)
    assert [p.num_rows for p in m.index_parts] == [20, 1, 1, 1, 1, 1, 1, 1]
    ids = Dataset.open(local_uri).column("sample_id")
    from ferroload_format._ids import hash_ids

    old_run = write_run(
        store,
        f"{IDS_DIR}older-writer-0000000001.parquet",
        hash_ids(ids),
        np.repeat([p.version for p in m.index_parts], [p.num_rows for p in m.index_parts]),
        [p.version for p in m.index_parts],
    )
    path = Path(local_uri, "_ferroload", "versions", f"{m.version:010d}.json")
    raw = json.loads(path.read_text())
    raw["id_runs"] = [old_run.to_json()]
    path.write_text(json.dumps(raw))
    assert Dataset.open(local_uri).verify().ok
    append(local_uri, 27)  # merges the newest small parts; the old run covers the rest
    new = read_manifest(store)
    assert [p.num_rows for p in new.index_parts] == [20, 8]
    assert old_run.path in {r.path for r in new.id_runs}
    assert Dataset.open(local_uri).verify().ok
    for sid in (0, 19, 23, 27):
        with pytest.raises(DuplicateSampleError):
            append(local_uri, sid)
    assert ids_of(local_uri) == [f"s{i:05d}" for i in range(28)]
    assert sorted(glob_ids(local_uri)) == ids_of(local_uri)


def test_a_small_append_whose_shard_was_collected_fails_cleanly(uri: str) -> None:
    append(uri, 0, 3)
    w = Writer(uri, "tiers")
    w.add("late", {"blob": b"x"}, {"n": 0, "tag": "t"})
    w._finish_shard()  # one shard: checked with a HEAD each, not a listing
    gc(uri, grace=timedelta(0))  # run by someone who thought no writer was active
    with pytest.raises(CommitConflictError, match="disappeared"):
        w.close()
    assert len(Dataset.open(uri)) == 3
