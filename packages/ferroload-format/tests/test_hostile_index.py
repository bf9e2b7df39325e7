"""Tampered index parts and side indexes: bad payload ranges and row counts get clear errors
(issue 13, point 9)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ferroload_core import FerroloadError
from ferroload_format import (
    Dataset,
    ManifestError,
    PayloadRangeError,
    ShardTruncatedError,
    Writer,
)
from ferroload_format._paths import version_path

from .conftest import WriteFn
from .test_verify import PART_CHANGES, _rewrite_part, _set, _two_parts


def _manifest(root: str) -> tuple[Path, dict[str, Any]]:
    ds = Dataset.open(root)
    path = Path(root, version_path(ds.version))
    return path, json.loads(path.read_bytes())


def _rewrite_image(root: str, row: int, **changes: int) -> None:
    """Rewrite the dataset's (only) index part with `changes` to row `row`'s image range."""
    mpath, manifest = _manifest(root)
    (part,) = manifest["index_parts"]
    ppath = Path(root, part["path"])
    table = pq.read_table(ppath)
    struct = table.column("image").combine_chunks()
    fields = {f: struct.field(f).to_pylist() for f in ("present", "offset", "length", "checksum")}
    for key, value in changes.items():
        fields[key][row] = value
    types = {f.name: f.type for f in struct.type}
    new = pa.StructArray.from_arrays(
        [pa.array(v, types[k]) for k, v in fields.items()],
        fields=list(struct.type),
    )
    table = table.set_column(table.schema.get_field_index("image"), table.field("image"), new)
    pq.write_table(table, ppath, compression="zstd")
    part["size"] = ppath.stat().st_size
    mpath.write_text(json.dumps(manifest))


def _shard_size(root: str) -> int:
    return int(Dataset.open(root).manifest.shards[0].size)


@pytest.mark.parametrize(
    "change",
    [
        {"offset": -200},
        {"offset": 2**63 - 10},
        {"length": 2**62},
        {"length": -1},
        {"offset": 2**63 - 512, "length": 2**62},  # offset + length overflows int64
        {"offset": 0},  # inside the first member's tar header
        {"offset": 513},  # not on the tar block grid
    ],
)
def test_bad_payload_ranges_are_refused_on_every_read_path(
    local_uri: str, write: WriteFn, change: dict[str, int]
) -> None:
    write(local_uri, 6, shard_size=1 << 20)
    _rewrite_image(local_uri, 3, **change)
    shard = Dataset.open(local_uri).manifest.shards[0].path
    for read in (
        lambda ds: ds.get(3),
        lambda ds: ds.get_many([0, 3]),
        lambda ds: ds.read([3], "image"),
        lambda ds: ds.get(0),  # the whole column is checked when it is loaded
    ):
        with pytest.raises(PayloadRangeError, match="s00003") as info:
            read(Dataset.open(local_uri))
        err = info.value
        assert isinstance(err, FerroloadError) and isinstance(err, ValueError)
        assert err.uri.endswith(local_uri)
        assert (err.shard, err.sample_id, err.column) == (shard, "s00003", "image")


def test_a_range_past_the_shard_end_is_refused(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 6, shard_size=1 << 20)
    _rewrite_image(local_uri, 2, length=_shard_size(local_uri))
    with pytest.raises(PayloadRangeError, match="s00002"):
        Dataset.open(local_uri).read([2], "image")


def test_a_tampered_side_index_is_reported_by_verify(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 6, shard_size=1 << 20)
    shard = ds.manifest.shards[0]
    side = Path(local_uri, shard.side_index)
    table = pq.read_table(side)
    offsets = table.column("offset").to_pylist()
    offsets[1] = -200
    table = table.set_column(
        table.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64())
    )
    pq.write_table(table, side)
    report = Dataset.open(local_uri).verify()
    assert [p.kind for p in report.problems] == ["side-index"]
    assert report.problems[0].sample_id == "s00001"
    assert Dataset.open(local_uri).get(1)["image"]  # reads trust the index, not the side index


def test_verify_reports_ranges_outside_the_shard(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 6, shard_size=1 << 20)
    _rewrite_image(local_uri, 4, offset=-200)
    report = Dataset.open(local_uri).verify()
    assert ("payload-range", "s00004") in {(p.kind, p.sample_id) for p in report.problems}


def test_verify_reports_a_range_over_a_tar_header(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 6, shard_size=1 << 20)
    a = ds._index.modality("image")
    # row 2's data moved one block back: onto row 2's own member header
    _rewrite_image(local_uri, 2, offset=int(a.offset[2]) - 512)
    report = Dataset.open(local_uri).verify()
    kinds = {(p.kind, p.sample_id) for p in report.problems}
    assert ("tar-header", "s00002") in kinds
    assert ("checksum", "s00002") in kinds


def test_verify_reports_two_samples_sharing_a_range(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 6, shard_size=1 << 20)
    a = ds._index.modality("image")
    _rewrite_image(
        local_uri,
        3,
        offset=int(a.offset[1]),
        length=int(a.length[1]),
        checksum=int(a.checksum[1]),
    )
    report = Dataset.open(local_uri).verify()
    overlaps = [p for p in report.problems if p.kind == "overlap"]
    assert len(overlaps) == 1 and overlaps[0].sample_id in ("s00001", "s00003")


@pytest.mark.parametrize("num_rows", [10**12, 3, 0])
def test_a_manifest_num_rows_that_differs_from_the_part_is_refused(
    local_uri: str, write: WriteFn, num_rows: int
) -> None:
    write(local_uri, 4)
    mpath, manifest = _manifest(local_uri)
    manifest["index_parts"][0]["num_rows"] = num_rows
    mpath.write_text(json.dumps(manifest))
    ds = Dataset.open(local_uri)
    with pytest.raises(ManifestError, match="holds 4 rows; the manifest says"):
        ds.subset("label = 3")
    if num_rows:
        with pytest.raises(ManifestError, match="holds 4 rows"):
            Dataset.open(local_uri).get(0)
    report = Dataset.open(local_uri).verify()
    assert [p.kind for p in report.problems] == ["num-rows"]


def test_a_healthy_index_passes_the_range_check(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 30, shard_size=4096, with_text=True)
    for name in ("image", "text"):
        a = ds._index.modality(name)
        assert not ds._index.bad_ranges(a).any()
        assert np.all(a.offset[a.present] % 512 == 0)
    assert pc.sum(ds.column("label")).as_py() is not None
    assert ds.verify().ok


def test_a_huge_range_in_a_huge_claimed_shard_is_never_allocated(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 6, shard_size=1 << 20)
    mpath, manifest = _manifest(local_uri)
    manifest["shards"][0]["size"] = 2**62  # the manifest lies about the shard too
    mpath.write_text(json.dumps(manifest))
    _rewrite_image(local_uri, 1, length=2**61)
    for read in (
        lambda ds: ds.get(1),
        lambda ds: ds.get_many([0, 1]),
        lambda ds: ds.read([1], "image"),
    ):
        with pytest.raises(ShardTruncatedError, match="s00001"):
            read(Dataset.open(local_uri))
    assert Dataset.open(local_uri).get(0)["image"]


@pytest.mark.parametrize(("change", "column", "says"), PART_CHANGES)
def test_parts_that_do_not_hold_the_schema_are_refused_by_compact_and_merges(
    local_uri: str, change: Callable[[pa.Table], pa.Table], column: str, says: str
) -> None:
    """`compact()` (and an append that merges the part) cast each part to the schema: a
    part missing a column, holding another or storing one as another type was a raw
    `ArrowInvalid` / `ValueError` from the cast."""
    _two_parts(local_uri)
    path = _rewrite_part(local_uri, 0, change)
    with pytest.raises(ManifestError, match=re.escape(says)) as info:
        Dataset.open(local_uri).compact()
    assert (info.value.part, info.value.column) == (path, column)
    assert isinstance(info.value, FerroloadError) and isinstance(info.value, ValueError)
    assert path in str(info.value) and "run verify()" in str(info.value)
    # the newest part (3 rows), which an append of 2 merges (at most MERGE_FACTOR times)
    path = _rewrite_part(local_uri, 1, change)
    with (
        pytest.raises(ManifestError, match=re.escape(says)) as info,
        Writer(local_uri, "parts", shard_size=4096) as w,
    ):
        w.declare("image", "jpg", "tensor", "image")
        for i in (998, 999):
            w.add(f"s{i}", {"image": b"y"}, {"label": 1, "caption": "c"})
    assert (info.value.part, info.value.column) == (path, column)


def test_values_that_do_not_convert_are_refused_by_compact(local_uri: str) -> None:
    """A column the schema widens (`int64` stored for a `float64` column) whose values
    do not convert exactly fails the cast itself: named too."""
    for first, count in ((0, 20), (100, 3)):
        with Writer(local_uri, "floats", shard_size=4096) as w:
            for i in range(first, first + count):
                w.add(f"s{i:03d}", None, {"score": i / 2})
    path = _rewrite_part(
        local_uri, 0, lambda t: _set(t, "score", pa.array([2**62 + 1] * len(t), pa.int64()))
    )
    with pytest.raises(
        ManifestError, match="values of column 'score' that are not float64"
    ) as info:
        Dataset.open(local_uri).compact()
    assert (info.value.part, info.value.column) == (path, "score")
