"""`Writer(mode=...)`: create refuses, append adds, overwrite replaces in a new version; and
`gc(keep_versions=...)` reclaims what overwritten versions alone reference."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ferroload_core import FerroloadError
from ferroload_format import (
    CommitConflictError,
    Dataset,
    DatasetExistsError,
    LayerWriter,
    Writer,
    gc,
)

from .conftest import WriteFn, payload


def _objects(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def _glob_ids(root: str) -> list[str]:
    rows = duckdb.sql(
        f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet') ORDER BY 1"
    ).fetchall()
    return [r[0] for r in rows]


def _overwrite(uri: str, ids: list[str], **kwargs: object) -> int | None:
    with Writer(uri, mode="overwrite", **kwargs) as w:  # type: ignore[arg-type]
        w.declare("text", "txt", "text")
        for sid in ids:
            w.add(sid, {"text": sid.encode()}, {"tag": f"t-{sid}"})
    return w.version


def test_create_refuses_an_existing_dataset_before_writing_anything(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 5)
    before = _objects(local_uri)
    with pytest.raises(DatasetExistsError, match=r"mode='append'.*mode='overwrite'") as info:
        Writer(local_uri, mode="create")
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, FerroloadError)
    assert info.value.uri == Dataset.open(local_uri).uri
    assert "--append" in str(info.value)
    assert _objects(local_uri) == before


def test_create_makes_a_new_dataset(uri: str) -> None:
    with Writer(uri, "fresh", mode="create") as w:
        w.declare("image", "jpg")
        w.add("a", {"image": b"1"})
    ds = Dataset.open(uri)
    assert (ds.version, ds.manifest.operation, len(ds)) == (1, "create", 1)


def test_append_is_the_default_and_adds_a_version(uri: str, write: WriteFn) -> None:
    write(uri, 5)
    with Writer(uri) as w:
        assert w.mode == "append"
        w.add("z", {"image": b"1"}, {"label": 1})
    ds = Dataset.open(uri)
    assert (ds.version, ds.manifest.operation, len(ds)) == (2, "append", 6)


def test_an_unknown_mode_is_refused(local_uri: str) -> None:
    with pytest.raises(ValueError, match="'create', 'append' or 'overwrite'"):
        Writer(local_uri, mode="replace")  # type: ignore[arg-type]


def test_overwrite_commits_a_new_version_and_keeps_history(uri: str, write: WriteFn) -> None:
    write(uri, 8)
    assert _overwrite(uri, ["x", "y"]) == 2
    ds = Dataset.open(uri)
    assert (ds.version, ds.manifest.parent_version, ds.manifest.operation) == (2, 1, "overwrite")
    # only what the overwrite wrote, with its own schema
    assert [s["sample_id"] for s in ds] == ["x", "y"]
    assert ds.columns == ("sample_id", "text", "tag")
    assert ds.num_samples == ds.manifest.statistics["num_samples"] == 2
    assert ds.num_shards == 1
    # history: version 1 reads as before, checksums and all
    old = Dataset.open(uri, version=1)
    assert len(old) == 8 and old[3]["image"] == payload(3)
    assert old.verify().ok and ds.verify().ok
    assert [v.operation for v in ds.versions()] == ["create", "overwrite"]


def test_overwrite_keeps_the_name_unless_given_and_may_rename(local_uri: str) -> None:
    _overwrite(local_uri, ["a"], name="first")
    _overwrite(local_uri, ["b"])
    assert Dataset.open(local_uri).name == "first"
    _overwrite(local_uri, ["c"], name="second")
    assert Dataset.open(local_uri).name == "second"


def test_the_index_glob_shows_only_the_overwritten_content(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 4)
    write(local_uri, 2, start=4)
    _overwrite(local_uri, ["x", "y"])
    assert _glob_ids(local_uri) == ["x", "y"]
    with Writer(local_uri) as w:  # an append after an overwrite joins the glob
        w.add("z", {"text": b"z"}, {"tag": "t"})
    assert _glob_ids(local_uri) == ["x", "y", "z"]
    assert len(Dataset.open(local_uri, version=2)) == 6


def test_overwrite_with_nothing_commits_an_empty_version(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    with Writer(uri, mode="overwrite") as w:
        pass
    assert w.version == 2
    ds = Dataset.open(uri)
    assert (len(ds), ds.num_shards, ds.manifest.operation) == (0, 0, "overwrite")
    assert list(ds) == [] and ds.verify().ok
    assert len(Dataset.open(uri, version=1)) == 3


def test_create_with_nothing_commits_an_empty_dataset(uri: str) -> None:
    with Writer(uri, "empty", mode="create") as w:
        w.declare("image", "jpg")
    ds = Dataset.open(uri)
    assert (ds.version, len(ds), ds.name, [m.name for m in ds.modalities]) == (
        1,
        0,
        "empty",
        ["image"],
    )


def test_an_append_committed_during_an_overwrite_makes_it_conflict(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 3)
    ow = Writer(local_uri, mode="overwrite")
    ow.declare("text", "txt", "text")
    ow.add("x", {"text": b"x"})
    with Writer(local_uri) as ap:
        ap.add("new", {"image": b"n"}, {"label": 1})
    with pytest.raises(CommitConflictError, match="after this overwrite started"):
        ow.close()
    ds = Dataset.open(local_uri)
    assert (ds.version, len(ds)) == (2, 4)  # the append landed, the overwrite did not
    assert not any("staging" in p for p in _objects(local_uri))


def test_an_overwrite_committed_during_an_append_is_kept_or_conflicts(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 3)
    same = Writer(local_uri)  # started from version 1, same schema as the overwrite
    same.add("late", {"image": b"l"}, {"label": 1, "caption": "c", "score": 0.5})
    other = Writer(local_uri)
    other.add("late2", {"image": b"l"}, {"label": 1})
    with Writer(local_uri, mode="overwrite") as ow:
        ow.declare("image", "jpg", "tensor", "image")
        ow.add("x", {"image": b"x"}, {"label": 2, "caption": "d", "score": 1.0})
    # an append that fits lands on top of the overwrite: both land, in order
    assert same.close() == 3
    assert [s["sample_id"] for s in Dataset.open(local_uri)] == ["x", "late"]
    # one whose schema no longer fits gets a clear conflict, never a silent loss
    with Writer(local_uri, mode="overwrite") as ow:
        ow.declare("text", "txt", "text")
        ow.add("t", {"text": b"t"})
    with pytest.raises(CommitConflictError, match="modalities"):
        other.close()
    assert [s["sample_id"] for s in Dataset.open(local_uri)] == ["t"]


def test_two_creates_race_and_the_second_is_refused(local_uri: str) -> None:
    first = Writer(local_uri, "a", mode="create")
    second = Writer(local_uri, "a", mode="create")
    for w in (first, second):
        w.declare("image", "jpg")
        w.add(f"s-{id(w)}", {"image": b"1"})
    assert first.close() == 1
    with pytest.raises(DatasetExistsError, match="concurrent writer created"):
        second.close()
    assert len(Dataset.open(local_uri)) == 1


def test_gc_keeps_overwritten_data_until_versions_expire(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 6)
    old_shards = {s.path for s in Dataset.open(local_uri).manifest.shards}
    _overwrite(local_uri, ["x"])
    # by default every version stays readable, so nothing of version 1 goes
    report = gc(local_uri, grace=timedelta(0))
    assert report.deleted == [] and report.expired == []
    assert Dataset.open(local_uri, version=1).verify().ok
    # the retention rule: a version goes only once its successor is older than `grace`
    report = gc(local_uri, keep_versions=1)
    assert report.expired == [] and Dataset.open(local_uri, version=1).verify().ok
    report = gc(local_uri, grace=timedelta(0), keep_versions=1, dry_run=True)
    assert report.expired == [1] and old_shards <= set(report.deleted)
    assert Dataset.open(local_uri, version=1).verify().ok
    report = gc(local_uri, grace=timedelta(0), keep_versions=1)
    assert report.expired == [1] and old_shards <= set(report.deleted)
    assert report.bytes_freed > 0
    assert [v.version for v in Dataset.open(local_uri).versions()] == [2]
    assert not any(p in _objects(local_uri) for p in old_shards)
    ds = Dataset.open(local_uri)
    assert ds.verify().ok and [s["sample_id"] for s in ds] == ["x"]
    assert _glob_ids(local_uri) == ["x"]


def test_gc_keep_versions_is_checked(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 2)
    with pytest.raises(ValueError, match="keep_versions"):
        gc(local_uri, keep_versions=0)


def test_gc_finishes_an_overwrite_that_died_before_retiring_parts(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 4)
    _overwrite(local_uri, ["x"])
    # what a writer killed between its commit and the retirement leaves: the old part
    # still in the glob
    old = Dataset.open(local_uri, version=1).manifest.index_parts[0]
    root = Path(local_uri)
    (root / old.path).write_bytes((root / old.staged).read_bytes())
    assert len(_glob_ids(local_uri)) == 5
    report = gc(local_uri, grace=timedelta(0))
    assert report.retired == [old.path] and report.deleted == []
    assert _glob_ids(local_uri) == ["x"]
    assert Dataset.open(local_uri, version=1).verify().ok


def test_a_layer_computed_before_an_overwrite_cannot_commit_onto_it(
    local_uri: str, write: WriteFn
) -> None:
    ds = write(local_uri, 5)
    lw = LayerWriter(ds, "meta", identity="m1", columns={"flag": pa.bool_()})
    lw.write_partition(0, np.arange(5), {"flag": [True] * 5}, {})
    _overwrite(local_uri, ["a", "b", "c", "d", "e"])  # same row count, other samples
    with pytest.raises(CommitConflictError, match="overwrote the content"):
        lw.commit(1)
    latest = Dataset.open(local_uri)
    assert (latest.version, latest.layers) == (2, ())


def test_an_overwrite_drops_the_layers_of_the_old_content(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 3)
    lw = LayerWriter(ds, "meta", identity="m1", columns={"flag": pa.bool_()})
    lw.write_partition(0, np.arange(3), {"flag": [True] * 3}, {})
    assert [la.name for la in lw.commit(1).layers] == ["meta"]
    _overwrite(local_uri, ["x"])
    assert Dataset.open(local_uri).layers == ()
    assert Dataset.open(local_uri, version=2).column("flag").to_pylist() == [True] * 3
