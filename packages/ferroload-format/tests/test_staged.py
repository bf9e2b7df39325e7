"""Writes staged by many writers (`Writer.stage`) and committed as one version
(`commit_staged`): what a Ray sink or a cluster import does, one writer per task."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ferroload_format import (
    Dataset,
    DatasetExistsError,
    DatasetNotFoundError,
    DuplicateSampleError,
    SchemaConflictError,
    StagedWrite,
    Writer,
    WriterClosedError,
    commit_staged,
    gc,
    list_versions,
)
from ferroload_store import open_store

from .conftest import WriteFn, payload, sample_meta


def stage(
    uri: str,
    ids: range,
    *,
    mode: Any = "create",
    meta: Any = sample_meta,
    modalities: tuple[str, ...] = ("image",),
) -> StagedWrite:
    """One task's write: samples `ids`, staged, not committed."""
    w = Writer(uri, "staged" if mode == "create" else None, shard_size=2048, mode=mode)
    for m in modalities:
        w.declare(m, "jpg", "tensor", "image")
    for i in ids:
        w.add(f"s{i:05d}", {m: payload(i, m) for m in modalities}, meta(i))
    return w.stage()


def shards_on_disk(uri: str) -> set[str]:
    return {o.path for o in open_store(uri).list("shards/") if o.path.endswith(".tar")}


def test_many_tasks_commit_one_version_in_order(uri: str) -> None:
    staged = [stage(uri, range(a, a + 7)) for a in (0, 7, 14)]
    with pytest.raises(DatasetNotFoundError):  # nothing is visible before the commit
        Dataset.open(uri)
    # what a Ray task hands back to the driver travels pickled
    staged = [pickle.loads(pickle.dumps(s)) for s in staged]
    assert commit_staged(uri, staged, mode="create") == 1
    ds = Dataset.open(uri)
    assert list_versions(open_store(uri)) == [1]
    assert ds.column("sample_id").to_pylist() == [f"s{i:05d}" for i in range(21)]
    assert ds.get(15)["image"] == payload(15)
    assert ds.to_table(["label"]).column("label").to_pylist() == [i % 5 for i in range(21)]
    assert ds.num_shards == sum(len(s.shards) for s in staged) > 3


def test_the_glob_shows_every_task_s_rows(local_uri: str) -> None:
    commit_staged(local_uri, [stage(local_uri, range(a, a + 5)) for a in (0, 5)], mode="create")
    glob = f"{local_uri}/index/part-*.parquet"
    got = duckdb.sql(f"SELECT count(*), count(DISTINCT shard) FROM read_parquet('{glob}')")
    assert got.fetchall()[0] == (10, len(Dataset.open(local_uri).manifest.inline_shards))


def test_a_retried_task_leaves_no_duplicate(local_uri: str) -> None:
    first_try = stage(local_uri, range(5, 10))  # its result never reached the driver
    staged = [stage(local_uri, range(5)), stage(local_uri, range(5, 10))]
    commit_staged(local_uri, staged, mode="create")
    ds = Dataset.open(local_uri)
    assert len(ds) == 10 and len(set(ds.column("sample_id").to_pylist())) == 10
    orphans = {s.path for s in first_try.shards}
    assert orphans <= shards_on_disk(local_uri)  # leftovers until gc
    report = gc(local_uri, grace=timedelta(0))
    assert report is not None
    assert not orphans & shards_on_disk(local_uri)
    assert Dataset.open(local_uri).get(7)["image"] == payload(7)


def test_a_sample_in_two_tasks_commits_nothing_and_cleans_up(local_uri: str) -> None:
    staged = [stage(local_uri, range(5)), stage(local_uri, range(4, 8))]
    with pytest.raises(DuplicateSampleError, match=r"s00004.*staged writes 0, 1"):
        commit_staged(local_uri, staged, mode="create")
    assert not list_versions(open_store(local_uri))
    assert not shards_on_disk(local_uri)


def test_columns_unite_across_tasks(local_uri: str) -> None:
    staged = [
        stage(local_uri, range(3), meta=lambda i: {"score": i}),  # int64
        stage(local_uri, range(3, 6), meta=lambda i: {"score": i / 2, "extra": "x"}),
        stage(local_uri, range(6, 8), meta=lambda i: {"score": None}, modalities=("image", "aux")),
    ]
    commit_staged(local_uri, staged, mode="create")
    ds = Dataset.open(local_uri)
    assert ds.schema.field("score").type == pa.float64()
    assert [m.name for m in ds.modalities] == ["image", "aux"]
    table = ds.to_table(["score", "extra"])
    assert table.column("score").to_pylist() == [0.0, 1.0, 2.0, 1.5, 2.0, 2.5, None, None]
    assert table.column("extra").to_pylist() == [None] * 3 + ["x"] * 3 + [None] * 2
    assert ds.present("aux").tolist() == [False] * 6 + [True] * 2
    assert ds.get(7)["aux"] == payload(7, "aux")


def test_a_column_of_two_types_is_a_conflict(local_uri: str) -> None:
    staged = [
        stage(local_uri, range(3), meta=lambda i: {"tag": i}),
        stage(local_uri, range(3, 6), meta=lambda i: {"tag": str(i)}),
    ]
    with pytest.raises(SchemaConflictError, match=r"'tag' is int64 .* string in staged write 1"):
        commit_staged(local_uri, staged, mode="create")
    assert not shards_on_disk(local_uri)


def test_modes(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 4)
    with pytest.raises(DatasetExistsError):
        stage(local_uri, range(10, 12))  # create: each task's writer refuses at once
    appended = [stage(local_uri, range(10, 12), mode="append")]
    # another writer commits between the tasks' start and the driver's commit: both land
    write(local_uri, 2, start=20)
    assert commit_staged(local_uri, appended, mode="append") == 3
    assert len(Dataset.open(local_uri)) == 8
    assert commit_staged(local_uri, [stage(local_uri, range(0), mode="append")]) is None
    new = [stage(local_uri, range(30, 33), mode="overwrite", meta=lambda i: {"k": "v"})]
    assert commit_staged(local_uri, new, mode="overwrite") == 4
    ds = Dataset.open(local_uri)
    assert ds.column("sample_id").to_pylist() == ["s00030", "s00031", "s00032"]
    assert ds.metadata_columns == ("k",)
    with pytest.raises(DuplicateSampleError):
        again = [stage(local_uri, range(31, 33), mode="append", meta=lambda i: {"k": "w"})]
        commit_staged(local_uri, again, mode="append")


def test_mixed_modes_and_roots_are_refused(local_uri: str, tmp_path: Any) -> None:
    s = stage(local_uri, range(2))
    with pytest.raises(ValueError, match="mode='create', not 'append'"):
        commit_staged(local_uri, [s], mode="append")
    with pytest.raises(ValueError, match="was written to"):
        commit_staged(str(tmp_path / "other"), [s], mode="create")


def test_a_staged_writer_is_closed(local_uri: str) -> None:
    w = Writer(local_uri, mode="create")
    w.declare("image", "bin", "bytes", "raw")
    w.add("a", {"image": b"x"})
    w.stage()
    with pytest.raises(WriterClosedError):
        w.add("b", {"image": b"y"})
    with pytest.raises(WriterClosedError):
        w.stage()


def test_an_empty_create_commits_an_empty_version(local_uri: str) -> None:
    assert commit_staged(local_uri, [stage(local_uri, range(0))], mode="create") == 1
    assert len(Dataset.open(local_uri)) == 0
    assert not shards_on_disk(local_uri)
