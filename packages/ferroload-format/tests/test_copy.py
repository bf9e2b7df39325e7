"""`Dataset.copy_to` (materializing views) and `Writer.declare_column`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from ferroload_format import (
    Dataset,
    DatasetNotFoundError,
    DuplicateSampleError,
    SchemaConflictError,
    Writer,
)


def _source(root: str, n: int = 600) -> Dataset:
    with Writer(root, "src", shard_size=64 << 10) as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("txt", "txt", "text")
        w.declare_column("never", pa.int64())  # every value null: the type must survive
        for i in range(n):
            data = {"image": bytes([i % 251]) * (50 + i)} if i % 7 else {}
            if i % 2:
                data["txt"] = f"caption {i}".encode()
            meta = {"label": i % 3, "score": i / 4, "tags": [f"t{i}"], "box": {"x": i}}
            w.add(f"s{i:05d}", data, meta)
    return Dataset.open(root)


def test_copy_of_a_subset_keeps_bytes_metadata_types_and_order(uri: str) -> None:
    ds = _source(uri)
    view = ds.subset("label = 1 AND score > 10").take(list(range(150))[::-1])
    seen: list[tuple[int, int]] = []
    out = view.copy_to(
        uri + "-copy", name="small", shard_size=16 << 10, progress=lambda d, t: seen.append((d, t))
    )
    assert (out.name, out.version, len(out)) == ("small", 1, 150)
    assert out.schema.equals(ds.schema)
    assert out.manifest.metadata == ds.manifest.metadata
    for i in range(len(out)):
        assert out[i] == view[i]
    assert seen[-1] == (150, 150) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert out.verify().ok
    assert out.num_shards > 1
    # the copy stands alone: the source's history is not part of it
    assert [v.version for v in out.versions()] == [1]


def test_copy_into_an_existing_dataset_appends(tmp_path: Path) -> None:
    ds = _source(str(tmp_path / "src"), n=30)
    ds.subset("label = 0").copy_to(tmp_path / "dst")
    out = ds.subset("label = 2").copy_to(tmp_path / "dst")
    assert out.version == 2
    assert out.column("sample_id").to_pylist() == [
        f"s{i:05d}" for i in [*range(0, 30, 3), *range(2, 30, 3)]
    ]


def test_a_view_repeating_a_sample_cannot_be_copied_and_leaves_nothing(tmp_path: Path) -> None:
    ds = _source(str(tmp_path / "src"), n=10)
    with pytest.raises(DuplicateSampleError, match="s00002"):
        ds.take([1, 2, 2]).copy_to(tmp_path / "dst")
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "dst")


def test_declare_column() -> None:
    root = f"memory://copy-tests-{uuid.uuid4().hex}/ds"
    w = Writer(root, "d")
    w.declare("image", "jpg")
    w.declare_column("label", pa.int64())
    w.declare_column("label", pa.int64())  # the same again: nothing happens
    with pytest.raises(SchemaConflictError, match="already int64"):
        w.declare_column("label", pa.string())
    with pytest.raises(SchemaConflictError, match="cannot have type"):
        w.declare_column("small", pa.int16())
    with pytest.raises(SchemaConflictError, match="reserved"):
        w.declare_column("image", pa.int64())
    with pytest.raises(SchemaConflictError, match="label"):
        w.add("a", None, {"label": "three"})
    w.add("b", None, {"other": 1})
    w.declare_column("late", pa.float64())  # earlier rows are null in it
    w.add("c", None, {"label": 2, "late": 1})  # an int fits a float64 column
    w.close()
    ds = Dataset.open(root)
    assert ds.schema.field("late").type == pa.float64()
    assert ds.column("late").to_pylist() == [None, 1.0]
    assert ds.column("label").to_pylist() == [None, 2]
    with Writer(root) as w2, pytest.raises(SchemaConflictError, match="no column"):
        w2.declare_column("new", pa.int64())
