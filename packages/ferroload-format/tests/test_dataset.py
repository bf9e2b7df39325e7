from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ferroload_format import (
    ChecksumMismatchError,
    ColumnNotFoundError,
    Dataset,
    DatasetNotFoundError,
    NotADatasetError,
    SampleIndexError,
    ShardNotFoundError,
    ShardTruncatedError,
    VersionNotFoundError,
)
from ferroload_store import FerroloadError, open_store

from .conftest import WriteFn, payload, sample_meta


def test_open_reads_only_the_manifest(uri: str, write: WriteFn) -> None:
    write(uri, 50)
    ds = Dataset.open(uri)
    stats = ds.store.stats.snapshot()
    manifest_bytes = len(ds.manifest.to_bytes())
    # the latest hint and the manifest, nothing else; one listing
    assert stats["get_requests"] == 2
    assert stats["bytes_read"] <= manifest_bytes + 20
    assert stats["list_requests"] == 1
    assert len(ds) == 50  # from the manifest, still no index read
    assert ds.store.stats.get_requests == 2


def test_index_columns_load_lazily_and_only_those_asked(uri: str, write: WriteFn) -> None:
    ds = write(uri, 30)
    ds = Dataset.open(uri)
    assert ds.get(3, ["label"]) == {"label": 3}
    assert ds._index.loaded_columns() == {"label"}
    ds.get(3, ["image"])
    assert ds._index.loaded_columns() == {"label", "image"}


def test_positions_slices_and_iteration(uri: str, write: WriteFn) -> None:
    ds = write(uri, 25)
    assert ds[-1]["sample_id"] == "s00024"
    assert ds[np.int64(2)]["sample_id"] == "s00002"
    view = ds[5:20:5]
    assert [r["sample_id"] for r in view] == ["s00005", "s00010", "s00015"]
    assert len(view) == 3 and view.is_view
    assert [r["sample_id"] for r in ds] == [f"s{i:05d}" for i in range(25)]
    for bad in (25, -26):
        with pytest.raises(SampleIndexError) as info:
            ds[bad]
        assert isinstance(info.value, IndexError)
    with pytest.raises(TypeError, match=r"indexed by sample position.*ds.column\('label'\)"):
        ds["label"]  # type: ignore[call-overload]  # a column, as Hugging Face datasets reads it


@pytest.mark.parametrize(
    ("name", "hint"),
    [("to_pandas", "ds.to_table().to_pandas()"), ("filter", "ds.subset("),
     ("select", "ds.take(indices)"), ("shuffle", "make_loader(ds, seed=...)"),
     ("column_names", "ds.columns"), ("with_format", "out='torch'")],
)  # fmt: skip
def test_hugging_face_habits_name_ferroloads_way(
    uri: str, write: WriteFn, name: str, hint: str
) -> None:
    """`ds.to_pandas()` or `ds.filter(...)` said only "no attribute"."""
    ds = write(uri, 3)
    with pytest.raises(AttributeError, match="Hugging Face datasets") as info:
        getattr(ds, name)
    assert hint in str(info.value) and info.value.name == name
    assert not hasattr(ds, "to_pandas")  # what libraries probe for stays False
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ds.nope  # type: ignore[attr-defined]  # noqa: B018


def test_full_sample_and_projection(uri: str, write: WriteFn) -> None:
    ds = write(uri, 10)
    assert ds[7] == {"sample_id": "s00007", "image": payload(7), **sample_meta(7)}
    assert ds.get(7, ["caption", "sample_id"]) == {
        "caption": sample_meta(7)["caption"],
        "sample_id": "s00007",
    }
    assert ds.get(7, "image") == {"image": payload(7)}
    with pytest.raises(ColumnNotFoundError, match="'nope'") as info:
        ds.get(0, ["nope"])
    assert info.value.column == "nope"
    assert isinstance(info.value, KeyError)


def test_get_many_is_ordered_and_coalesced(uri: str, write: WriteFn) -> None:
    ds = write(uri, 200, shard_size=64 << 10)
    ds = Dataset.open(uri)
    idx = np.random.default_rng(0).permutation(200)[:120]
    ds.get_many([0], ["image", "label"])  # load index columns first
    ds.store.stats.reset()
    rows = ds.get_many(idx, ["image", "label"])
    assert [r["image"] for r in rows] == [payload(int(i)) for i in idx]
    assert [r["label"] for r in rows] == [sample_meta(int(i))["label"] for i in idx]
    # one coalesced request per shard region, never one per sample
    assert ds.store.stats.get_requests <= ds.num_shards < 60
    assert ds.get_many([3, 3, -1], ["sample_id"]) == [
        {"sample_id": "s00003"},
        {"sample_id": "s00003"},
        {"sample_id": "s00199"},
    ]
    assert ds.get_many([], None) == []
    with pytest.raises(SampleIndexError):
        ds.get_many([0, 200])
    with pytest.raises(TypeError):
        ds.get_many([0.5])


def test_schema_and_to_table(uri: str, write: WriteFn) -> None:
    ds = write(uri, 8)
    assert ds.schema.names == ["sample_id", "shard", "image", "label", "caption", "score"]
    assert ds.columns == ("sample_id", "image", "label", "caption", "score")
    t = ds.to_table(["sample_id", "label"])
    assert t.column("label").to_pylist() == [i % 5 for i in range(8)]
    view = ds.subset("label >= 3")
    assert view.to_table(["sample_id"]).column(0).to_pylist() == ["s00003", "s00004"]
    full = ds.to_table()
    assert full.schema.equals(ds.schema)
    assert isinstance(full, pa.Table)


def test_take_views_compose(uri: str, write: WriteFn) -> None:
    ds = write(uri, 20)
    view = ds.take([10, 2, 15])
    assert [r["sample_id"] for r in view] == ["s00010", "s00002", "s00015"]
    inner = view.take([2, 0])
    assert [r["sample_id"] for r in inner] == ["s00015", "s00010"]
    assert inner.get(0, ["image"])["image"] == payload(15)


def test_versions_and_opening_old_ones(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    write(uri, 2, start=3)
    write(uri, 1, start=5)
    ds = Dataset.open(uri)
    assert [(v.version, v.num_samples, v.num_shards) for v in ds.versions()] == [
        (1, 3, 1),
        (2, 5, 2),
        (3, 6, 3),
    ]
    assert len(Dataset.open(uri, version=2)) == 5
    with pytest.raises(VersionNotFoundError, match=r"versions 1\.\.3"):
        Dataset.open(uri, version=4)
    with pytest.raises(VersionNotFoundError):
        Dataset.open(uri, version=0)


def test_stale_latest_hint_is_harmless(uri: str, write: WriteFn) -> None:
    write(uri, 3)
    write(uri, 2, start=3)
    store = open_store(uri)
    store.put("_ferroload/latest", b"1")
    assert Dataset.open(uri).version == 2
    store.put("_ferroload/latest", b"garbage")
    assert Dataset.open(uri).version == 2
    store.delete("_ferroload/latest")
    assert Dataset.open(uri).version == 2


def test_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="no ferroload dataset") as info:
        Dataset.open(tmp_path / "missing")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"x")
    with pytest.raises(NotADatasetError, match="not a ferroload dataset"):
        Dataset.open(tmp_path / "photos")
    with pytest.raises(NotADatasetError, match="is a file"):
        Dataset.open(tmp_path / "photos" / "cat.jpg")
    with pytest.raises(DatasetNotFoundError):
        Dataset.open("memory://nothing-here/at-all")


def _shard_of(ds: Dataset, position: int) -> str:
    code = ds._index.modality("image").shard[position]
    return ds.manifest.shards[code].path


def test_missing_shard_names_shard_and_sample(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 40, shard_size=4096)
    shard = _shard_of(ds, 30)
    Path(local_uri, shard).unlink()
    ds = Dataset.open(local_uri)
    with pytest.raises(ShardNotFoundError) as info:
        ds.get(30, ["image"])
    assert info.value.shard == shard
    assert info.value.sample_id == "s00030"
    assert shard in str(info.value) and "s00030" in str(info.value)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, FerroloadError)
    with pytest.raises(ShardNotFoundError):
        ds.get_many([0, 30], ["image"])
    assert ds.get(30, ["label"]) == {"label": 0}  # metadata still readable


def test_truncated_shard_names_the_first_sample_cut_off(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 12, shard_size=1 << 20)
    shard = ds.manifest.shards[0].path
    a = ds._index.modality("image")
    cut = int(a.offset[8]) + 5  # inside sample 8's payload
    with open(Path(local_uri, shard), "r+b") as f:
        f.truncate(cut)
    ds = Dataset.open(local_uri)
    assert ds.get(7, ["image"])["image"] == payload(7)
    with pytest.raises(ShardTruncatedError) as info:
        ds.get(9, ["image"])
    assert (info.value.shard, info.value.sample_id) == (shard, "s00009")
    with pytest.raises(ShardTruncatedError) as info:
        ds.get_many(range(12), ["image"])
    assert info.value.sample_id == "s00008"
    assert isinstance(info.value, EOFError)


def test_checksum_mismatch_on_read_when_asked(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 5)
    a = ds._index.modality("image")
    shard = Path(local_uri, ds.manifest.shards[0].path)
    raw = bytearray(shard.read_bytes())
    raw[int(a.offset[2])] ^= 0xFF
    shard.write_bytes(bytes(raw))
    plain = Dataset.open(local_uri)
    assert plain.get(2, ["image"])["image"] != payload(2)  # not checked unless asked
    checked = Dataset.open(local_uri, verify_checksums=True)
    assert checked.get(1, ["image"])["image"] == payload(1)
    with pytest.raises(ChecksumMismatchError) as info:
        checked.get(2, ["image"])
    assert (info.value.sample_id, info.value.column) == ("s00002", "image")
    with pytest.raises(ChecksumMismatchError):
        checked.get_many([0, 1, 2, 3])
    with pytest.raises(ChecksumMismatchError):
        checked.take([2]).get(0)


def test_dataset_repr(uri: str, write: WriteFn) -> None:
    ds = write(uri, 3)
    assert "samples=3" in repr(ds) and "version=1" in repr(ds)


def test_datasets_and_views_pickle_for_worker_processes(local_uri: str, write: WriteFn) -> None:
    import pickle

    ds = write(local_uri, 12)
    view = ds.subset("label = 2")
    for d in (ds, view):
        clone = pickle.loads(pickle.dumps(d))
        assert (clone.uri, clone.version, len(clone)) == (d.uri, d.version, len(d))
        assert clone.get_many(range(len(d))) == d.get_many(range(len(d)))
