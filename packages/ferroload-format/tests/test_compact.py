"""`Dataset.compact`: one index part, same rows, atomic against a concurrent appender."""

from __future__ import annotations

import threading
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
    _compact,
    gc,
)
from ferroload_format._paths import INDEX_DIR, MERGED_DIR, merged_part_path, part_path
from ferroload_store import open_store


def append(uri: str, first: int, count: int) -> None:
    with Writer(uri, "compact", shard_size=4096) as w:
        w.declare("blob", "bin")
        for i in range(first, first + count):
            meta = {"label": i % 3, "score": i / 2, "tags": [f"t{i}"], "note": None}
            if i % 4 == 0:
                meta["note"] = f"n{i}"
            w.add(f"s{i:04d}", {"blob": f"payload-{i}".encode() * 5}, meta)


def grown(uri: str, appends: int = 6) -> None:
    for k in range(appends):
        append(uri, k * 3, 3)


def snapshot(ds: Dataset) -> tuple[list[dict[str, object]], str]:
    return [ds[i] for i in range(len(ds))], str(ds.to_table().schema)


def test_compact_keeps_rows_order_types_and_payloads(uri: str) -> None:
    grown(uri)
    before = Dataset.open(uri)
    rows, schema = snapshot(before)
    after = before.compact()
    assert after.version == before.version + 1
    assert after.manifest.operation == "compact"
    assert len(after.manifest.index_parts) == 1
    assert after.manifest.shards == before.manifest.shards
    reopened = Dataset.open(uri)
    assert reopened.version == after.version
    assert snapshot(reopened) == (rows, schema)
    assert reopened.subset("label = 1", return_indices=True).tolist() == [
        i for i in range(len(rows)) if i % 3 == 1
    ]
    assert reopened.verify().ok
    assert snapshot(Dataset.open(uri, version=before.version)) == (rows, schema)
    assert reopened.compact() is reopened  # one part already: nothing to commit
    with pytest.raises(DuplicateSampleError, match="s0004"):
        append(uri, 4, 1)
    append(uri, 100, 2)
    assert len(Dataset.open(uri)) == len(rows) + 2


def test_the_glob_sees_each_row_once_and_gc_keeps_old_versions(local_uri: str) -> None:
    grown(local_uri)
    root = local_uri.removeprefix("file://")
    Dataset.open(local_uri).compact()
    append(local_uri, 500, 2)
    rows = duckdb.sql(
        f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet')"
    ).fetchall()
    ids = [r[0] for r in rows]
    assert sorted(ids) == sorted(Dataset.open(local_uri).to_table()["sample_id"].to_pylist())
    assert len(ids) == len(set(ids)) == 20
    gc(local_uri, grace=timedelta(0))
    for v in range(1, 9):
        ds = Dataset.open(local_uri, version=v)
        assert len([ds[i] for i in range(len(ds))]) == len(ds)
    gc(local_uri, grace=timedelta(0), keep_versions=2)
    store = open_store(local_uri)
    # the glob keeps one file per version that added rows (a compaction adds none); the
    # compacted part, outside it, is what ferroload reads
    left = sorted(o.path for o in store.list(INDEX_DIR))
    assert left == [part_path(v) for v in (1, 2, 3, 4, 5, 6, 8)]
    assert [o.path for o in store.list(MERGED_DIR)] == [merged_part_path(7)]
    assert duckdb.sql(
        f"SELECT count(DISTINCT sample_id), count(*) FROM read_parquet('{root}/index/part-*.parquet')"
    ).fetchall() == [(20, 20)]
    assert Dataset.open(local_uri).verify().ok
    assert not Path(root, "_ferroload", "staging").exists() or not any(
        Path(root, "_ferroload", "staging").iterdir()
    )


def test_an_append_started_before_compact_rebases_on_top(uri: str) -> None:
    grown(uri)
    w = Writer(uri, "compact")
    w.declare("blob", "bin")
    w.add("late", {"blob": b"late"}, {"label": 0, "score": 0.5, "tags": [], "note": None})
    compacted = Dataset.open(uri).compact()
    assert w.close() == compacted.version + 1
    ds = Dataset.open(uri)
    assert ds.manifest.operation == "append"
    assert [p.version for p in ds.manifest.index_parts] == [compacted.version, ds.version]
    assert ds.to_table()["sample_id"].to_pylist()[-1] == "late"
    assert len(ds) == 19
    assert ds.verify().ok


def test_a_compact_of_an_older_version_is_refused_before_anything_is_written(
    local_uri: str,
) -> None:
    """`Dataset.open(root, version=2).compact()` merged the parts, then answered "run
    compact() again", which could never succeed on that object (and a version with one
    part returned itself, as if compacted)."""
    append(local_uri, 0, 20)
    append(local_uri, 100, 3)  # version 2: two parts
    append(local_uri, 200, 2)  # version 3: two parts still (20 rows, 5)
    files = sorted(Path(local_uri).rglob("*"))
    for version in (1, 2):
        old = Dataset.open(local_uri, version=version)
        with pytest.raises(CommitConflictError) as info:
            old.compact()
        message = str(info.value)
        assert f"is open at version {version}, but version 3 is the latest" in message
        assert "open the dataset again, without version=" in message
        assert "run compact() again" not in message.lower()
    assert sorted(Path(local_uri).rglob("*")) == files
    assert Dataset.open(local_uri).compact().version == 4


def test_a_compact_of_a_version_appended_to_since_conflicts(uri: str) -> None:
    grown(uri)
    stale = Dataset.open(uri)
    append(uri, 200, 1)
    with pytest.raises(CommitConflictError, match="compact"):
        stale.compact()
    ds = Dataset.open(uri)
    assert ds.version == stale.version + 1
    assert ds.manifest.operation == "append"
    assert len(ds.manifest.index_parts) > 1
    assert len(ds.compact()) == 19


def test_compact_keeps_layers_readable(local_uri: str) -> None:
    grown(local_uri)
    ds = Dataset.open(local_uri)
    lw = LayerWriter(ds, "meta", identity="m1", columns={"double": pa.int64()})
    lw.write_partition(0, np.arange(len(ds)), {"double": [2 * i for i in range(len(ds))]}, {})
    layered = lw.commit(1)
    compacted = layered.compact()
    assert compacted.manifest.layers == layered.manifest.layers
    assert compacted.column("double").to_pylist() == [2 * i for i in range(18)]
    assert compacted.verify().ok


def _race(uri: str, round_: int) -> list[CommitConflictError]:
    """Compact and append at the same moment, from two threads."""
    start = threading.Barrier(2)
    errors: list[CommitConflictError] = []

    def do_compact() -> None:
        ds = Dataset.open(uri)
        start.wait()
        try:
            ds.compact()
        except CommitConflictError as exc:
            errors.append(exc)

    def do_append() -> None:
        w = Writer(uri, "compact")
        w.declare("blob", "bin")
        meta = {"label": 0, "score": 0.0, "tags": [], "note": None}
        w.add(f"race{round_}", {"blob": b"r"}, meta)
        start.wait()
        w.close()

    threads = [threading.Thread(target=do_compact), threading.Thread(target=do_append)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_compact_and_append_racing_in_threads_lose_nothing(local_uri: str) -> None:
    for round_ in range(4):
        append(local_uri, 1000 * round_, 3)
        append(local_uri, 1000 * round_ + 3, 3)
        errors = _race(local_uri, round_)
        ds = Dataset.open(local_uri)
        ids = ds.to_table()["sample_id"].to_pylist()
        assert len(ids) == len(set(ids)) == 7 * (round_ + 1)
        assert f"race{round_}" in ids
        assert ds.verify().ok
        if errors:  # the append committed first: the compaction left nothing behind
            assert ds.manifest.operation == "append"


class SimulatedCrashError(Exception):
    """Stands for the process dying at a checkpoint."""


@pytest.mark.parametrize("point", ["compact-staged", "compact-committed"])
def test_a_compaction_that_dies_leaves_a_readable_dataset(
    local_uri: str, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    grown(local_uri)
    rows = snapshot(Dataset.open(local_uri))

    def die(name: str) -> None:
        if name == point:
            raise SimulatedCrashError(name)

    monkeypatch.setattr(_compact, "_checkpoint", die)
    with pytest.raises(SimulatedCrashError):
        Dataset.open(local_uri).compact()
    ds = Dataset.open(local_uri)
    assert ds.version == (6 if point == "compact-staged" else 7)
    assert snapshot(ds) == rows
    report = gc(local_uri, grace=timedelta(0))
    if point == "compact-staged":  # the staged part and the run are leftovers
        assert len(report.deleted) == 2
    else:  # gc publishes the part (outside the glob, which it leaves as it is)
        assert report.published == [merged_part_path(7)]
    root = local_uri.removeprefix("file://")
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{root}/index/part-*.parquet')")
    assert n.fetchall() == [(18,)]
    append(local_uri, 300, 1)
    assert snapshot(Dataset.open(local_uri))[0][:18] == rows[0]
    assert Dataset.open(local_uri).verify().ok
