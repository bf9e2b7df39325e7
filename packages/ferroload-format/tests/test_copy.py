"""`Dataset.copy_to` (materializing views) and `Writer.declare_column`."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from ferroload_format import (
    MAX_METADATA_DEPTH,
    Dataset,
    DatasetExistsError,
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


def test_copy_into_an_existing_dataset_needs_a_mode(tmp_path: Path) -> None:
    ds = _source(str(tmp_path / "src"), n=30)
    ds.subset("label = 0").copy_to(tmp_path / "dst")
    with pytest.raises(DatasetExistsError, match="mode='append'") as info:
        ds.subset("label = 2").copy_to(tmp_path / "dst")
    assert info.value.uri == Dataset.open(tmp_path / "dst").uri
    assert Dataset.open(tmp_path / "dst").version == 1  # nothing was written
    out = ds.subset("label = 2").copy_to(tmp_path / "dst", mode="append")
    assert out.version == 2
    assert out.column("sample_id").to_pylist() == [
        f"s{i:05d}" for i in [*range(0, 30, 3), *range(2, 30, 3)]
    ]
    out = ds.subset("label = 1").copy_to(tmp_path / "dst", mode="overwrite")
    assert (out.version, out.manifest.operation) == (3, "overwrite")
    assert out.column("sample_id").to_pylist() == [f"s{i:05d}" for i in range(1, 30, 3)]
    assert len(Dataset.open(tmp_path / "dst", version=2)) == 20  # history kept


def test_appending_a_copy_keeps_the_destinations_name(tmp_path: Path) -> None:
    ds = _source(str(tmp_path / "src"), n=9)
    ds.subset("label = 0").copy_to(tmp_path / "dst", name="mine")
    out = ds.subset("label = 1").copy_to(tmp_path / "dst", mode="append")
    assert (out.name, len(out)) == ("mine", 6)
    out = ds.subset("label = 2").copy_to(tmp_path / "new", mode="append")
    assert (out.name, len(out)) == ("src", 3)  # a new destination takes the source's


@pytest.mark.parametrize("mode", ["create", "append", "overwrite"])
def test_an_empty_view_copies_to_an_empty_dataset(tmp_path: Path, mode: str) -> None:
    ds = _source(str(tmp_path / "src"), n=12)
    empty = ds.subset("label = 99")
    out = empty.copy_to(tmp_path / "empty", mode=mode)  # type: ignore[arg-type]
    assert (out.version, len(out), out.num_shards) == (1, 0, 0)
    assert out.schema.equals(ds.schema) and out.verify().ok
    assert list(out) == []


def test_an_empty_view_overwriting_empties_the_dataset(tmp_path: Path) -> None:
    ds = _source(str(tmp_path / "src"), n=12)
    ds.copy_to(tmp_path / "dst")
    out = ds.subset("label = 99").copy_to(tmp_path / "dst", mode="overwrite")
    assert (out.version, len(out)) == (2, 0)
    # appending nothing to an existing dataset commits nothing
    out = ds.subset("label = 99").copy_to(tmp_path / "dst", mode="append")
    assert out.version == 2


def test_copy_progress_true_draws_a_bar_false_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ds = _source(str(tmp_path / "src"), n=20)
    ds.copy_to(tmp_path / "a", progress=True)
    err = capfd.readouterr().err
    assert "copy" in err and "20/20" in err and "sample" in err
    ds.copy_to(tmp_path / "b", progress=False)
    assert capfd.readouterr().err == ""
    with pytest.raises(DatasetExistsError):  # refused before any bar is drawn
        ds.copy_to(tmp_path / "b", progress=True)
    assert capfd.readouterr().err == ""
    seen: list[tuple[int, int | None]] = []
    ds.copy_to(tmp_path / "c", progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 20) and seen[-1] == (20, 20)
    assert capfd.readouterr().err == ""


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
    deep: pa.DataType = pa.int64()
    for _ in range(MAX_METADATA_DEPTH):
        deep = pa.list_(deep)
    w.declare_column("deepest", deep)  # as deep as a readable column goes
    with pytest.raises(SchemaConflictError, match="MAX_METADATA_DEPTH"):
        w.declare_column("deeper", pa.list_(deep))  # a version nothing could read back
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
    assert ds.schema.field("deepest").type == deep
    with Writer(root) as w2, pytest.raises(SchemaConflictError, match="no column"):
        w2.declare_column("new", pa.int64())
