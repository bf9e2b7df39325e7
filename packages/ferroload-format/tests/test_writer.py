from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import (
    Dataset,
    DatasetNameError,
    DatasetNotFoundError,
    DuplicateSampleError,
    FormatError,
    InvalidModalityError,
    InvalidPayloadError,
    InvalidSampleIdError,
    SchemaConflictError,
    UndeclaredModalityError,
    Writer,
    WriterClosedError,
)
from ferroload_store import FerroloadError, open_store

from .conftest import WriteFn, payload


def test_quickstart(uri: str) -> None:
    jpg_bytes = b"\xff\xd8 not really a jpeg"
    w = Writer(uri, "demo")
    w.declare("image", "jpg", "tensor", "image")
    w.add("s0000", {"image": jpg_bytes}, {"label": 3, "caption": "a cat"})
    assert w.close() == 1
    ds = Dataset.open(uri)
    assert ds[0] == {"sample_id": "s0000", "image": jpg_bytes, "label": 3, "caption": "a cat"}
    assert ds.get(0, ["image"]) == {"image": jpg_bytes}
    assert ds.subset("label = 3", return_indices=True).tolist() == [0]
    assert ds.name == "demo"


def test_exception_inside_with_commits_nothing(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    with pytest.raises(RuntimeError, match="boom"), Writer(uri) as w:
        w.add("new1", {"image": b"x"}, {"label": 1})
        raise RuntimeError("boom")
    ds = Dataset.open(uri)
    assert (ds.version, len(ds)) == (1, 3)
    store = open_store(uri)
    assert not [o.path for o in store.list("shards/") if w.txn in o.path]
    with pytest.raises(WriterClosedError):
        w.add("new2", {"image": b"x"})


def test_exception_before_the_first_commit_leaves_no_dataset(uri: str) -> None:
    with pytest.raises(ValueError, match="stop"), Writer(uri, "x") as w:
        w.declare("image", "jpg")
        w.add("a", {"image": b"1"})
        raise ValueError("stop")
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(uri)


def test_writer_with_nothing_added_commits_nothing(uri: str) -> None:
    w = Writer(uri, "x")
    w.declare("image", "jpg")
    assert w.close() is None
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(uri)


def test_append_creates_versions_and_old_ones_stay_readable(uri: str, write: WriteFn) -> None:
    write(uri, 10)
    write(uri, 5, start=10)
    ds = Dataset.open(uri)
    assert ds.version == 2
    assert len(ds) == 15
    assert [v.num_samples for v in ds.versions()] == [10, 15]
    assert [v.operation for v in ds.versions()] == ["create", "append"]
    old = Dataset.open(uri, version=1)
    assert len(old) == 10
    assert old[9]["sample_id"] == "s00009"
    assert ds[14]["sample_id"] == "s00014"
    assert ds.get(12, ["image"])["image"] == payload(12)


def test_shards_roll_over_at_the_target_size(uri: str, write: WriteFn) -> None:
    ds = write(uri, 60, shard_size=4096)
    assert ds.num_shards > 5
    store = open_store(uri)
    for s in ds.manifest.shards:
        # a shard exceeds the target only when a single sample does
        assert s.size <= 4096 or s.num_samples == 1
        assert store.head(s.path).size == s.size
    assert sum(s.num_samples for s in ds.manifest.shards) == 60
    assert [r["image"] for r in ds] == [payload(i) for i in range(60)]


def test_missing_modalities_are_masked(uri: str, write: WriteFn) -> None:
    ds = write(uri, 6, with_text=True)
    assert ds[0]["text"] is None
    assert ds[1]["text"] == payload(1, "text")
    present = ds.to_table(["text"]).column("text").combine_chunks().field("present")
    assert present.to_pylist() == [False, True] * 3
    assert ds.manifest.statistics["modalities"]["text"]["count"] == 3


def test_metadata_only_samples_and_missing_keys(uri: str) -> None:
    with Writer(uri, "m") as w:
        w.declare("image", "png")
        w.add("a", None, {"label": 1})
        w.add("b", {"image": b"png"}, {"other": "x"})
        w.add("c")
    ds = Dataset.open(uri)
    assert ds[0] == {"sample_id": "a", "image": None, "label": 1, "other": None}
    assert ds[1] == {"sample_id": "b", "image": b"png", "label": None, "other": "x"}
    assert ds[2] == {"sample_id": "c", "image": None, "label": None, "other": None}


def test_inferred_metadata_types(uri: str) -> None:
    rows: list[dict[str, Any]] = [
        {
            "i": 1,
            "f": 1,
            "s": "x",
            "b": True,
            "raw": b"\x00",
            "l": [1, 2],
            "d": {"url": "u", "size": 3},
            "n": None,
            "arr": np.array([0.5, 1.5]),
        },
        {
            "i": np.int16(2),
            "f": 2.5,
            "s": None,
            "b": False,
            "raw": b"",
            "l": [],
            "d": {"url": "v"},
            "n": None,
            "arr": [2.0],
        },
    ]
    with Writer(uri, "t") as w:
        for k, r in enumerate(rows):
            w.add(f"r{k}", None, r)
    ds = Dataset.open(uri)
    types = {f.name: f.type for f in ds.manifest.metadata}
    assert types == {
        "i": pa.int64(),
        "f": pa.float64(),
        "s": pa.string(),
        "b": pa.bool_(),
        "raw": pa.binary(),
        "l": pa.list_(pa.int64()),
        "d": pa.struct([("url", pa.string()), ("size", pa.int64())]),
        "n": pa.null(),
        "arr": pa.list_(pa.float64()),
    }
    assert ds[0]["f"] == 1.0
    assert ds[1]["d"] == {"url": "v", "size": None}
    assert ds[0]["arr"] == [0.5, 1.5]


@pytest.mark.parametrize(
    ("first", "second"),
    [(1, "one"), ("x", 2), (True, 1), ([1], 1), ({"a": 1}, [1]), (1.5, "x"), (b"x", "x")],
)
def test_conflicting_metadata_types_are_refused(uri: str, first: Any, second: Any) -> None:
    w = Writer(uri, "c")
    w.add("a", None, {"v": first})
    with pytest.raises(SchemaConflictError, match="'v' of sample 'b'") as info:
        w.add("b", None, {"v": second})
    assert info.value.sample_id == "b"
    assert info.value.column == "v"
    assert isinstance(info.value, TypeError)
    # the refused sample left no trace; the writer goes on
    w.add("c", None, {"v": first})
    assert w.close() == 1
    assert [r["sample_id"] for r in Dataset.open(uri)] == ["a", "c"]


def test_unstorable_metadata_is_refused(uri: str) -> None:
    w = Writer(uri, "c")
    for bad in ({"v": object()}, {"sample_id": 1}, {"shard": "x"}, {"": 1}, {"v": 2**70}):
        with pytest.raises(SchemaConflictError):
            w.add("a", None, bad)
    w.abort()


def test_duplicate_ids_in_one_writer_and_across_versions(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    w = Writer(uri)
    w.add("n1", {"image": b"x"}, {"label": 1})
    with pytest.raises(DuplicateSampleError, match="'n1'"):
        w.add("n1", {"image": b"y"}, {"label": 1})
    w.add("s00001", {"image": b"x"}, {"label": 1})  # exists in version 1: found at commit
    with pytest.raises(DuplicateSampleError, match="'s00001' is already in") as info:
        w.close()
    assert info.value.sample_id == "s00001"
    ds = Dataset.open(uri)
    assert (ds.version, len(ds)) == (1, 3)


@pytest.mark.parametrize("sid", ["", "a/b", "..", "a.b", "x\x00", "../../etc", "/abs"])
def test_bad_sample_ids(uri: str, sid: str) -> None:
    w = Writer(uri, "x")
    with pytest.raises(InvalidSampleIdError):
        w.add(sid, None, {"label": 1})
    w.abort()


def test_too_long_member_names(uri: str) -> None:
    w = Writer(uri, "x")
    w.declare("a_long_modality_name", "extension")
    with pytest.raises(InvalidSampleIdError, match="longer than 100"):
        w.add("x" * 80, {"a_long_modality_name": b"1"})
    w.abort()


def test_undeclared_modality_and_bad_payloads(uri: str) -> None:
    w = Writer(uri, "x")
    w.declare("image", "jpg")
    with pytest.raises(UndeclaredModalityError, match="'audio'") as info:
        w.add("a", {"audio": b"x"})
    assert info.value.column == "audio"
    for bad in ("text", 3, None, np.zeros(3, np.uint8), [1, 2]):
        with pytest.raises(InvalidPayloadError, match="not bytes") as pinfo:
            w.add("a", {"image": bad})
        assert isinstance(pinfo.value, TypeError)
    with pytest.raises(InvalidPayloadError, match="mapping"):
        w.add("a", [b"x"])  # type: ignore[arg-type]
    w.add("a", {"image": bytearray(b"ok")})
    w.add("b", {"image": memoryview(b"ok2")})
    assert w.close() == 1
    assert Dataset.open(uri).get(1, "image") == {"image": b"ok2"}


def test_declaration_rules(uri: str, write: WriteFn) -> None:
    w = Writer(uri, "x")
    w.declare("image", "jpg", "tensor", "image")
    w.declare("image", "jpg", "tensor", "image")  # identical: fine
    with pytest.raises(InvalidModalityError, match="already declared"):
        w.declare("image", "png", "tensor", "image")
    w.add("a", None, {"label": 1})
    with pytest.raises(InvalidModalityError, match="metadata column"):
        w.declare("label", "txt")
    w.abort()
    write(uri, 2)
    w = Writer(uri)
    w.declare("image", "jpg", "tensor", "image")
    with pytest.raises(SchemaConflictError, match="cannot add modality"):
        w.declare("audio", "flac", "tensor", "audio")
    w.abort()


def test_modality_declared_after_samples(uri: str) -> None:
    with Writer(uri, "x") as w:
        w.declare("image", "jpg")
        w.add("a", {"image": b"1"})
        w.declare("mask", "png")
        w.add("b", {"image": b"2", "mask": b"m"})
    ds = Dataset.open(uri)
    assert ds[0]["mask"] is None
    assert ds[1]["mask"] == b"m"


def test_append_keeps_the_schema(uri: str, write: WriteFn) -> None:
    write(uri, 2)
    w = Writer(uri)
    with pytest.raises(SchemaConflictError, match="no column"):
        w.add("n1", {"image": b"x"}, {"brand_new": 1})
    with pytest.raises(SchemaConflictError, match="int64"):
        w.add("n1", {"image": b"x"}, {"label": "three"})
    w.add("n1", {"image": b"x"}, {"label": 7})  # missing columns are null
    assert w.close() == 2
    ds = Dataset.open(uri)
    assert ds[-1] == {"sample_id": "n1", "image": b"x", "label": 7, "caption": None, "score": None}


def test_append_into_float_column_accepts_ints(uri: str, write: WriteFn) -> None:
    write(uri, 2)
    with Writer(uri) as w:
        w.add("n1", None, {"score": 3})
    assert Dataset.open(uri)[-1]["score"] == 3.0


def test_name_must_match_when_appending(uri: str, write: WriteFn) -> None:
    write(uri, 1, name="first")
    with pytest.raises(DatasetNameError, match="'first'"):
        Writer(uri, "second")
    assert Writer(uri, None).name == "first"


def test_closed_writer_refuses_more(uri: str) -> None:
    w = Writer(uri, "x")
    w.add("a")
    assert w.close() == 1
    assert w.close() == 1
    with pytest.raises(WriterClosedError):
        w.add("b")
    with pytest.raises(WriterClosedError):
        w.declare("image", "jpg")


@pytest.mark.parametrize("kwargs", [{"shard_size": 0}, {"shard_size": -1}, {"row_group_size": 0}])
def test_bad_writer_options(uri: str, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be a positive"):
        Writer(uri, "x", **kwargs)


def test_every_error_is_a_ferroload_error() -> None:
    import ferroload_format

    for name in ferroload_format.__all__:
        obj = getattr(ferroload_format, name)
        if isinstance(obj, type) and issubclass(obj, BaseException) and obj is not FormatError:
            assert issubclass(obj, FerroloadError), name
            assert issubclass(obj, FormatError), name
            builtin = [
                b
                for b in obj.__mro__
                if b.__module__ == "builtins" and b not in (Exception, BaseException, object)
            ]
            assert builtin, f"{name} subclasses no builtin error"


def test_index_parts_use_row_groups_with_statistics(local_uri: str) -> None:
    import pyarrow.parquet as pq

    with Writer(local_uri, "rg", row_group_size=100) as w:
        for i in range(1000):
            w.add(f"s{i:04d}", None, {"label": i})
    part = Dataset.open(local_uri).manifest.index_parts[0]
    meta = pq.ParquetFile(f"{local_uri}/{part.path}").metadata
    assert meta.num_row_groups == 10
    label = meta.schema.names.index("label")
    stats = meta.row_group(3).column(label).statistics
    assert (stats.min, stats.max) == (300, 399)
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_integers_beyond_int64_are_refused_at_add(uri: str) -> None:
    w = Writer(uri, "big")
    w.add("a", None, {"label": 1})
    with pytest.raises(SchemaConflictError, match="int64") as info:
        w.add("b", None, {"label": 2**70})
    assert info.value.sample_id == "b"
    w.add("c", None, {"label": -(2**63)})
    assert w.close() == 1
    assert Dataset.open(uri)[1]["label"] == -(2**63)


def test_enum_values_are_stored_as_their_base_type(uri: str) -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 1

    class Split(enum.StrEnum):
        TRAIN = "train"

    with Writer(uri, "e") as w:
        w.add("a", None, {"color": Color.RED, "split": Split.TRAIN})
        w.add("b", None, {"color": 2, "split": "test"})
    ds = Dataset.open(uri)
    assert [ds[0]["color"], ds[0]["split"], ds[1]["color"]] == [1, "train", 2]


@pytest.mark.parametrize(
    "values",
    [
        [2**53 + 1, 0.5],  # the float arrives after the big int
        [0.5, 2**53 + 1],  # the big int arrives in a float column
        [[2**53 + 1], [0.5]],  # the same inside lists
        [{"a": 2**53 + 1}, {"a": 0.5}],
    ],
)
def test_integers_that_float64_cannot_hold_are_refused_at_add(uri: str, values: list[Any]) -> None:
    w = Writer(uri, "f")
    w.add("a", None, {"v": values[0]})
    with pytest.raises(SchemaConflictError, match="'v' of sample 'b'"):
        w.add("b", None, {"v": values[1]})
    assert w.close() == 1
    assert Dataset.open(uri)[0]["v"] == values[0]


def test_columns_widen_across_row_groups(uri: str) -> None:
    with Writer(uri, "w", row_group_size=4) as w:
        for i in range(10):
            w.add(f"a{i}", None, {"n": i, "s": {"x": i}, "l": [i]})
        w.add("b", None, {"n": 0.5, "s": {"y": "new"}, "l": [0.5]})
    ds = Dataset.open(uri)
    assert ds[3] == {"sample_id": "a3", "n": 3.0, "s": {"x": 3, "y": None}, "l": [3.0]}
    assert ds[10] == {"sample_id": "b", "n": 0.5, "s": {"x": None, "y": "new"}, "l": [0.5]}


def test_a_refused_sample_leaves_no_trace_in_the_schema(uri: str) -> None:
    w = Writer(uri, "t")
    w.add("a", None, {"score": 1, "label": 1})
    with pytest.raises(SchemaConflictError, match="'label'"):
        w.add("b", None, {"score": 0.5, "brand_new": "x", "label": "bad"})
    w.add("c", None, {"score": 2, "label": 2})
    w.close()
    ds = Dataset.open(uri)
    assert [(f.name, f.type) for f in ds.manifest.metadata] == [
        ("score", pa.int64()),
        ("label", pa.int64()),
    ]
