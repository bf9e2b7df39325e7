"""Enrichment layers: staging, commit, reading merged, resume, append, subset, gc."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import (
    ColumnNotFoundError,
    Dataset,
    FormatError,
    IncompleteLayerError,
    InvalidLayerError,
    InvalidPayloadError,
    LayerExistsError,
    LayerInfo,
    LayerWriter,
    Manifest,
    Modality,
    SchemaConflictError,
    Writer,
    gc,
)
from ferroload_store import open_store

from .conftest import WriteFn, payload

CHILD = Path(__file__).with_name("_child_layer.py")
THUMB = Modality("thumb", "png", "tensor", "image")
COLUMNS = {"double": pa.int64(), "tag": pa.string(), "vec": pa.list_(pa.float64())}


def run_killed_child(uri: str, *args: str) -> None:
    """Run `_child_layer.py` on `uri` and check that it was killed where it was told to."""
    proc = subprocess.run(
        [sys.executable, str(CHILD), uri, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def thumb(i: int) -> bytes:
    return f"thumb-{i}-".encode() * (1 + i % 4)


def layer(ds: Dataset, identity: str = "v1", **kwargs: Any) -> LayerWriter:
    kwargs.setdefault("columns", COLUMNS)
    kwargs.setdefault("modalities", [THUMB])
    return LayerWriter(ds, "derived", identity=identity, **kwargs)


def stage(lw: LayerWriter, k: int, rows: Sequence[int], *, skip: Sequence[int] = ()) -> None:
    """Stage partition `k` over `rows`; rows in `skip` get nulls and no payload."""
    lw.write_partition(
        k,
        np.asarray(rows, dtype=np.int64),
        {
            "double": [None if r in skip else 2 * r for r in rows],
            "tag": [None if r in skip else f"t{r}" for r in rows],
            "vec": [None if r in skip else np.array([r, 0.5], np.float32) for r in rows],
        },
        {"thumb": [None if r in skip else thumb(r) for r in rows]},
    )


def expected(i: int) -> dict[str, Any]:
    return {"double": 2 * i, "tag": f"t{i}", "vec": [float(i), 0.5], "thumb": thumb(i)}


def glob(root: str, pattern: str) -> list[tuple[Any, ...]]:
    return duckdb.sql(f"SELECT * FROM read_parquet('{root}/{pattern}')").fetchall()


# --------------------------------------------------------------------------- round trip


def test_layer_round_trip(uri: str, write: WriteFn) -> None:
    ds = write(uri, 20)
    lw = layer(ds)
    assert lw.staged() == set() and not lw.committed
    for k, rows in enumerate([range(0, 7), range(7, 14), range(14, 20)]):
        stage(lw, k, list(rows))
    assert lw.staged() == {0, 1, 2}
    out = lw.commit(3)
    assert out.version == 2 and lw.committed
    ds2 = Dataset.open(uri)
    assert ds2.version == 2 and len(ds2) == 20
    (info,) = ds2.layers
    assert (info.name, info.identity, info.base_version, info.num_rows) == ("derived", "v1", 1, 20)
    assert [m.name for m in ds2.modalities] == ["image", "thumb"]
    assert ds2.metadata_columns == ("label", "caption", "score", "double", "tag", "vec")
    assert ds2.columns[:3] == ("sample_id", "image", "thumb")
    assert ds2.schema.field("vec").type == pa.list_(pa.float64())
    for i in range(20):
        sample = ds2[i]
        assert sample["image"] == payload(i) and sample["label"] == i % 5
        assert {k: sample[k] for k in expected(i)} == expected(i)
    assert ds2.get(3, ["thumb", "double"]) == {"double": 6, "thumb": thumb(3)}
    many = ds2.get_many([19, 0, 5], ["tag", "thumb"])
    assert many == [{"tag": f"t{i}", "thumb": thumb(i)} for i in (19, 0, 5)]
    assert [s["double"] for s in ds2] == [2 * i for i in range(20)]
    assert ds2.column("double").to_pylist() == [2 * i for i in range(20)]
    assert ds2.to_table(["sample_id", "tag"]).column("tag").to_pylist()[4] == "t4"
    assert ds2.to_table().num_columns == len(ds2.schema)
    assert ds2.present("thumb").all()
    assert ds2.sizes("thumb").tolist() == [len(thumb(i)) for i in range(20)]
    views = ds2.read([2, 11], "thumb", copy=False)
    assert [bytes(v) for v in views if v is not None] == [thumb(2), thumb(11)]
    # per-modality shard codes: layer codes follow the base shards and resolve too
    codes = ds2.shard_of("thumb")
    assert (codes >= ds2.num_shards).all()
    assert {ds2.shard_ref(int(c))[0] for c in codes} == {s.path for s in info.shards}
    assert len(info.shards) == 3
    off, size = int(ds2.offsets("thumb")[7]), int(ds2.sizes("thumb")[7])
    path = ds2.shard_ref(int(codes[7]))[0]
    assert ds2.store.get_range(path, off, size) == thumb(7)
    assert (ds2.shard_of() == ds.shard_of()).all()
    assert ds2.verify().ok
    # the base version is unchanged
    old = Dataset.open(uri, version=1)
    assert old.layers == () and "double" not in old.columns
    with pytest.raises(ColumnNotFoundError):
        old.get(0, ["double"])


def test_rows_a_layer_does_not_cover_read_as_null(uri: str, write: WriteFn) -> None:
    ds = write(uri, 12)
    lw = layer(ds)
    stage(lw, 0, [0, 1, 2, 3], skip=[2])
    stage(lw, 1, [8, 9])  # rows 4..7 and 10, 11: no partition covers them
    ds2 = lw.commit(2)
    got = ds2.get_many(range(12), ["double", "thumb", "vec"])
    for i, sample in enumerate(got):
        if i in (0, 1, 3, 8, 9):
            assert sample == {k: expected(i)[k] for k in ("double", "thumb", "vec")}
        else:
            assert sample == {"double": None, "thumb": None, "vec": None}
    assert ds2.present("thumb").tolist() == [i in (0, 1, 3, 8, 9) for i in range(12)]
    assert ds2.shard_of("thumb")[4] == -1
    assert ds2.subset("double IS NULL", return_indices=True).tolist() == [2, 4, 5, 6, 7, 10, 11]
    assert ds2.verify().ok


def test_metadata_only_layer_writes_no_shard(uri: str, write: WriteFn) -> None:
    ds = write(uri, 5)
    lw = LayerWriter(ds, "meta", identity="m1", columns={"flag": pa.bool_()})
    lw.write_partition(0, np.arange(5), {"flag": [i % 2 == 0 for i in range(5)]}, {})
    ds2 = lw.commit(1)
    assert ds2.layers[0].shards == () and ds2.layers[0].modalities == ()
    assert ds2.column("flag").to_pylist() == [True, False, True, False, True]
    assert ds2.verify().ok


# --------------------------------------------------------------------------- identity


def test_a_committed_identity_makes_commit_a_noop(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6)
    lw = layer(ds)
    stage(lw, 0, range(6))
    assert lw.commit(1).version == 2
    again = layer(ds)  # the same map, run again on the same version
    assert again.committed
    assert again.commit(1).version == 2  # nothing staged, nothing to do
    assert lw.commit(1).version == 2
    assert [v.version for v in Dataset.open(uri).versions()] == [1, 2]


def test_another_identity_is_refused_unless_overwrite(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6)
    lw = layer(ds)
    stage(lw, 0, range(6))
    lw.commit(1)
    with pytest.raises(LayerExistsError, match="derived") as info:
        layer(ds, "v2")
    assert isinstance(info.value, FileExistsError) and isinstance(info.value, FormatError)
    assert info.value.identity == "v1"
    over = layer(ds, "v2", columns={"double": pa.float64()}, modalities=[], overwrite=True)
    over.write_partition(0, np.arange(6), {"double": [0.5] * 6}, {})
    ds3 = over.commit(1)
    assert ds3.version == 3 and ds3.column("double").to_pylist() == [0.5] * 6
    assert [la.identity for la in ds3.layers] == ["v2"]
    assert "thumb" not in ds3.columns
    v2 = Dataset.open(uri, version=2)  # older versions keep the old layer
    assert v2.column("double").to_pylist() == [2 * i for i in range(6)]


def test_a_concurrent_commit_of_another_identity_is_refused(uri: str, write: WriteFn) -> None:
    ds = write(uri, 4)
    a, b = layer(ds, "a"), layer(ds, "b")
    stage(a, 0, range(4))
    stage(b, 0, range(4))
    a.commit(1)
    with pytest.raises(LayerExistsError):
        b.commit(1)
    assert Dataset.open(uri).layers[0].identity == "a"


def test_missing_partitions_are_named(uri: str, write: WriteFn) -> None:
    ds = write(uri, 9)
    lw = layer(ds)
    stage(lw, 0, range(3))
    stage(lw, 2, range(6, 9))
    with pytest.raises(IncompleteLayerError, match=r"1 of 4 partitions .*\(1, 3\)|2 of 4") as info:
        lw.commit(4)
    assert isinstance(info.value, RuntimeError)
    assert info.value.missing == [1, 3]
    assert Dataset.open(uri).version == 1


# --------------------------------------------------------------------------- visibility


def test_staging_is_invisible_until_the_commit(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 8)
    lw = layer(ds)
    stage(lw, 0, range(4))
    stage(lw, 1, range(4, 8))
    assert Dataset.open(local_uri).version == 1
    assert Dataset.open(local_uri).layers == ()
    with pytest.raises(duckdb.IOException):  # no layer part matches the glob yet
        glob(local_uri, "layers/*/index/part-*.parquet")
    assert len(glob(local_uri, "index/part-*.parquet")) == 8
    lw.commit(2)
    assert len(glob(local_uri, "layers/*/index/part-*.parquet")) == 8
    assert not open_store(local_uri).list("layers/derived/_staging/")


def test_duckdb_joins_base_and_layer_parts(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 10)
    lw = layer(ds)
    stage(lw, 0, range(10), skip=[3])
    lw.commit(1)
    rows = duckdb.sql(
        f"""
        SELECT b.sample_id, b.label, l.double, l.thumb.present
        FROM read_parquet('{local_uri}/index/part-*.parquet') b
        JOIN read_parquet('{local_uri}/layers/derived/index/part-*.parquet') l
        USING (sample_id) ORDER BY b.sample_id
        """
    ).fetchall()
    assert rows == [(f"s{i:05d}", i % 5, None if i == 3 else 2 * i, i != 3) for i in range(10)]


def test_killed_map_resumes_from_its_staged_partitions(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 12)
    run_killed_child(local_uri, "--stage", "0,1", "--crash-partition", "2")
    ds = Dataset.open(local_uri)
    assert ds.version == 1 and ds.layers == ()
    lw = LayerWriter(
        ds, "derived", identity="v1", columns={"double": pa.int64()}, modalities=[THUMB]
    )
    assert lw.staged() == {0, 1}  # partition 2 wrote its shard, not its rows
    with pytest.raises(IncompleteLayerError):
        lw.commit(4)
    for k in (2, 3):
        rows = np.arange(3 * k, 3 * k + 3)
        lw.write_partition(k, rows, {"double": [2 * int(r) for r in rows]}, {"thumb": [b"t"] * 3})
    ds2 = lw.commit(4)
    assert ds2.column("double").to_pylist() == [2 * i for i in range(12)]
    assert ds2.get(0)["thumb"] == b"thumb-0" and ds2.get(11)["thumb"] == b"t"
    assert ds2.verify().ok
    # the dead run's half-written partition left a shard nothing references: gc takes it
    store = open_store(local_uri)
    referenced = {p for s in ds2.layers[0].shards for p in (s.path, s.side_index)}
    leftovers = {o.path for o in store.list("layers/derived/shards/")} - referenced
    assert leftovers
    report = gc(local_uri, grace=timedelta(0))
    assert leftovers <= set(report.deleted)
    assert Dataset.open(local_uri).verify().ok


def test_killed_after_the_commit_point_the_layer_reads_from_staging(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 6)
    run_killed_child(local_uri, "--stage", "0,1", "--commit", "2")
    ds = Dataset.open(local_uri)
    assert ds.version == 2 and ds.column("double").to_pylist() == [0, 2, 4, 6, 8, 10]
    with pytest.raises(duckdb.IOException):  # not yet published
        glob(local_uri, "layers/derived/index/part-*.parquet")
    report = gc(local_uri, grace=timedelta(0))
    assert report.published == ["layers/derived/index/part-0000000002.parquet"]
    assert len(glob(local_uri, "layers/derived/index/part-*.parquet")) == 6
    assert not open_store(local_uri).list("layers/derived/_staging/")
    assert Dataset.open(local_uri).verify().ok


# --------------------------------------------------------------------------- later versions


def test_append_after_a_layer_keeps_it_and_new_rows_read_null(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6)
    lw = layer(ds)
    stage(lw, 0, range(6))
    lw.commit(1)
    write(uri, 3, start=6)
    ds3 = Dataset.open(uri)
    assert ds3.version == 3 and len(ds3) == 9
    assert ds3.layers == Dataset.open(uri, version=2).layers
    assert ds3.column("double").to_pylist() == [0, 2, 4, 6, 8, 10, None, None, None]
    assert ds3[7]["thumb"] is None and ds3[7]["image"] == payload(7)
    assert ds3.present("thumb").tolist() == [True] * 6 + [False] * 3
    assert ds3.shard_of("thumb")[6:].tolist() == [-1, -1, -1]
    assert ds3.subset("double > 4", return_indices=True).tolist() == [3, 4, 5]
    assert ds3.verify().ok
    with pytest.raises(SchemaConflictError), Writer(uri) as w:  # layer columns are not base
        w.add("x0", None, {"label": 1, "caption": "c", "score": 0.1, "double": 1})
    # a layer on the new version covers the new rows
    lw2 = LayerWriter(ds3, "more", identity="m", columns={"half": pa.float64()})
    lw2.write_partition(0, np.arange(9), {"half": [i / 2 for i in range(9)]}, {})
    ds4 = lw2.commit(1)
    assert [la.name for la in ds4.layers] == ["derived", "more"]
    assert ds4.get(8, ["half", "double"]) == {"half": 4.0, "double": None}


def test_subset_filters_on_layer_columns(uri: str, write: WriteFn) -> None:
    ds = write(uri, 15)
    lw = layer(ds)
    stage(lw, 0, range(15))
    ds2 = lw.commit(1)
    assert ds2.subset("double >= 20 AND label = 0", return_indices=True).tolist() == [10]
    assert ds2.subset("tag LIKE 't1%' AND thumb.present", return_indices=True).tolist() == [
        1,
        *range(10, 15),
    ]
    assert ds2.subset("vec[1] = 3").get(0, ["sample_id"]) == {"sample_id": "s00003"}
    view = ds2.subset("double > 24")
    assert [s["double"] for s in view] == [26, 28]
    assert view.read([1], "thumb") == [thumb(14)]


# --------------------------------------------------------------------------- plumbing


def test_a_layer_writer_pickles(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6)
    lw = layer(ds)
    clone = pickle.loads(pickle.dumps(lw))
    assert (clone.name, clone.identity, clone.base_version) == ("derived", "v1", 1)
    assert clone.columns == lw.columns and clone.modalities == lw.modalities
    stage(clone, 0, range(3))
    stage(pickle.loads(pickle.dumps(clone)), 1, range(3, 6))
    assert lw.staged() == {0, 1}
    assert lw.commit(2).column("tag").to_pylist() == [f"t{i}" for i in range(6)]


def test_verify_finds_a_damaged_layer_shard(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 6)
    lw = layer(ds)
    stage(lw, 0, range(6))
    ds2 = lw.commit(1)
    row = 4
    path = Path(local_uri, ds2.shard_ref(int(ds2.shard_of("thumb")[row]))[0])
    data = bytearray(path.read_bytes())
    data[int(ds2.offsets("thumb")[row])] ^= 0xFF
    path.write_bytes(bytes(data))
    report = Dataset.open(local_uri).verify()
    assert [(p.kind, p.sample_id, p.column) for p in report.problems] == [
        ("checksum", "s00004", "thumb")
    ]
    assert ds2.get(3)["thumb"] == thumb(3)


def test_manifest_json_round_trips_layers(uri: str, write: WriteFn) -> None:
    ds = write(uri, 3)
    lw = layer(ds)
    stage(lw, 0, range(3))
    manifest = lw.commit(1).manifest
    raw = manifest.to_json()
    raw["layers"][0]["future_field"] = {"x": 1}
    again = Manifest.from_json(json.loads(json.dumps(raw)))
    assert again.layers == manifest.layers
    assert again.layers[0].extra == {"future_field": {"x": 1}}
    assert again.to_json()["layers"][0]["future_field"] == {"x": 1}
    assert isinstance(again.layers[0], LayerInfo)
    assert again.layers[0].columns == (
        pa.field("double", pa.int64()),
        pa.field("tag", pa.string()),
        pa.field("vec", pa.list_(pa.float64())),
    )
    # datasets without layers write no "layers" key; older manifests read as before
    assert "layers" not in Dataset.open(uri, version=1).manifest.to_json()


# --------------------------------------------------------------------------- bad input


def test_names_that_collide_are_refused(uri: str, write: WriteFn) -> None:
    ds = write(uri, 3)
    for columns in (
        {"label": pa.int64()},
        {"sample_id": pa.string()},
        {"_ferroload_x": pa.int64()},
    ):
        with pytest.raises(SchemaConflictError):
            LayerWriter(ds, "bad", identity="x", columns=columns)
    with pytest.raises(SchemaConflictError, match="image"):
        LayerWriter(ds, "bad", identity="x", columns={}, modalities=[Modality("image", "png")])
    with pytest.raises(SchemaConflictError, match="int32"):
        LayerWriter(ds, "bad", identity="x", columns={"c": pa.int32()})
    with pytest.raises(InvalidLayerError):
        LayerWriter(ds, "Bad/Name", identity="x", columns={})
    with pytest.raises(InvalidLayerError):
        LayerWriter(ds, "ok", identity="../escape", columns={})
    lw = layer(ds)
    stage(lw, 0, range(3))
    ds2 = lw.commit(1)
    with pytest.raises(SchemaConflictError, match="layer 'derived'"):
        LayerWriter(ds2, "other", identity="x", columns={"double": pa.int64()})


def test_bad_partitions_are_refused_clearly(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6)
    lw = LayerWriter(ds, "derived", identity="v1", columns={"double": pa.int64()})
    with pytest.raises(SchemaConflictError, match=r"'double'.*'s00001'") as info:
        lw.write_partition(0, np.arange(3), {"double": [1, "two", 3]}, {})
    assert (info.value.column, info.value.sample_id) == ("double", "s00001")
    with pytest.raises(SchemaConflictError, match="missing"):
        lw.write_partition(0, np.arange(3), {}, {})
    with pytest.raises(SchemaConflictError, match="unknown"):
        lw.write_partition(0, np.arange(3), {"double": [1, 2, 3], "x": [1, 2, 3]}, {})
    with pytest.raises(InvalidLayerError, match="3 rows"):
        lw.write_partition(0, np.arange(3), {"double": [1, 2]}, {})
    with pytest.raises(InvalidLayerError, match="ascending"):
        lw.write_partition(0, np.array([2, 1]), {"double": [1, 2]}, {})
    with pytest.raises(InvalidLayerError, match="out of range"):
        lw.write_partition(0, np.array([5, 6]), {"double": [1, 2]}, {})
    with pytest.raises(InvalidLayerError):
        lw.write_partition(-1, np.array([0]), {"double": [1]}, {})
    with pytest.raises(InvalidPayloadError):
        layer(ds).write_partition(
            0, np.array([0]), {"double": [1], "tag": ["a"], "vec": [[1.0]]}, {"thumb": ["str"]}
        )
    assert lw.staged() == set()
    lw.write_partition(0, np.arange(4), {"double": [0, 1, 2, 3]}, {})
    lw.write_partition(1, np.arange(3, 6), {"double": [3, 4, 5]}, {})
    with pytest.raises(InvalidLayerError, match="row 3"):  # partitions overlap
        lw.commit(2)
    assert Dataset.open(uri).version == 1


# --------------------------------------------------------------------------- gc


def _age(root: str, paths: set[str], hours: float = 2) -> None:
    for p in paths:
        full = Path(root, p)
        t = full.stat().st_mtime - hours * 3600
        os.utime(full, (t, t))


def test_gc_keeps_young_staging_and_collects_abandoned_staging(
    local_uri: str, write: WriteFn
) -> None:
    ds = write(local_uri, 6)
    lw = layer(ds)
    stage(lw, 0, range(3))
    store = open_store(local_uri)
    staged = {o.path for o in store.list("layers/")}
    assert len(staged) == 3  # shard, side index, partition
    assert gc(local_uri).deleted == []  # a map may still be running
    # a staging folder whose newest object is young is kept, and the (old) shards its
    # partitions wrote with it
    shard_files = {p for p in staged if "/shards/" in p}
    _age(local_uri, shard_files)
    young = gc(local_uri)
    assert young.deleted == [] and young.kept_young >= 1
    # once everything in it is older than the grace period, it is abandoned: collected
    _age(local_uri, staged - shard_files)
    assert set(gc(local_uri).deleted) == staged
    assert lw.staged() == set()
    stage(lw, 0, range(3))
    stage(lw, 1, range(3, 6))
    ds2 = lw.commit(2)
    assert gc(local_uri, grace=timedelta(0)).deleted == []
    assert Dataset.open(local_uri).verify().ok and ds2.version == 2


def test_concurrent_commits_of_one_identity_land_once(uri: str, write: WriteFn) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ds = write(uri, 8)
    first = layer(ds)
    stage(first, 0, range(4))
    stage(first, 1, range(4, 8))
    writers = [first, *(layer(Dataset.open(uri)) for _ in range(3))]
    with ThreadPoolExecutor(len(writers)) as pool:
        results = list(pool.map(lambda lw: lw.commit(2), writers))
    assert {r.version for r in results} == {2}
    assert [v.version for v in Dataset.open(uri).versions()] == [1, 2]
    assert Dataset.open(uri).column("double").to_pylist() == [2 * i for i in range(8)]
    assert Dataset.open(uri).verify().ok
