from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ferroload_format import Dataset, DatasetDamagedError, LayerWriter, Writer, _shard_lists
from ferroload_format._paths import version_path

from .conftest import WriteFn


def test_a_healthy_dataset_verifies(uri: str, write: WriteFn) -> None:
    ds = write(uri, 40, with_text=True)
    seen: list[tuple[int, int]] = []
    report = ds.verify(progress=lambda done, total: seen.append((done, total)))
    assert report.ok
    n = ds.num_shards
    assert seen == [(k, n) for k in range(n + 1)]
    assert report.payloads_checked == 40 + 20
    assert report.shards_checked == ds.num_shards
    ds.verify(raise_on_error=True)


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x55
    path.write_bytes(bytes(raw))


def test_verify_lists_each_damaged_payload(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 30, shard_size=1 << 20)
    a = ds._index.modality("image")
    shard = ds.manifest.shards[0].path
    for pos in (4, 17):
        _flip(Path(local_uri, shard), int(a.offset[pos]) + 1)
    report = Dataset.open(local_uri).verify()
    assert not report.ok
    assert [(p.kind, p.shard, p.sample_id, p.column) for p in report.problems] == [
        ("checksum", shard, "s00004", "image"),
        ("checksum", shard, "s00017", "image"),
    ]
    with pytest.raises(DatasetDamagedError, match="s00004") as info:
        report.raise_for_problems()
    assert len(info.value.problems) == 2
    with pytest.raises(DatasetDamagedError):
        Dataset.open(local_uri).verify(raise_on_error=True)


def test_verify_reports_missing_and_truncated_shards(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 40, shard_size=4096)
    first, second = ds.manifest.shards[0], ds.manifest.shards[1]
    Path(local_uri, first.path).unlink()
    with open(Path(local_uri, second.path), "r+b") as f:
        f.truncate(second.size // 2)
    report = Dataset.open(local_uri).verify()
    kinds = {(p.kind, p.shard) for p in report.problems}
    assert ("missing-shard", first.path) in kinds
    assert ("shard-size", second.path) in kinds
    truncated = [p for p in report.problems if p.kind == "truncated"]
    assert truncated and all(p.shard == second.path and p.sample_id for p in truncated)


def test_verify_checks_the_side_index(local_uri: str, write: WriteFn) -> None:
    ds = write(local_uri, 5)
    Path(local_uri, ds.manifest.shards[0].side_index).unlink()
    report = Dataset.open(local_uri).verify()
    assert [p.kind for p in report.problems] == ["side-index"]


def test_side_index_alone_locates_every_member(uri: str, write: WriteFn) -> None:
    import io

    import pyarrow.parquet as pq
    import xxhash

    from ferroload_store import open_store

    from .conftest import payload

    ds = write(uri, 25, shard_size=4096)
    store = open_store(uri)
    found = {}
    for shard in ds.manifest.shards:
        side = pq.read_table(io.BytesIO(store.get(shard.side_index))).to_pylist()
        assert [r["offset"] for r in side] == sorted(r["offset"] for r in side)
        for r in side:
            data = store.get_range(shard.path, r["offset"], r["length"])
            assert xxhash.xxh3_64_intdigest(data) == r["checksum"]
            found[r["member"]] = data
    assert found == {f"s{i:05d}.image.jpg": payload(i) for i in range(25)}


def test_verify_progress_true_draws_a_bar_and_false_nothing(
    local_uri: str, write: WriteFn, capfd: pytest.CaptureFixture[str]
) -> None:
    ds = write(local_uri, 40)
    capfd.readouterr()
    assert ds.verify(progress=True).ok
    err = capfd.readouterr().err
    assert "verify" in err and f"{ds.num_shards}/{ds.num_shards}" in err and "shard" in err
    assert ds.verify(progress=False).ok
    assert capfd.readouterr().err == ""


def test_verify_refuses_statistics_that_do_not_bound_the_values(local_uri: str) -> None:
    """subset() skips row groups by their Parquet statistics: a part whose statistics
    were altered (here the footer's max of `label` lowered) would lose rows, so verify
    reports it."""
    import struct

    from ferroload_format import Writer

    with Writer(local_uri, "stats") as w:
        for i in range(50):
            w.add(f"s{i:03d}", None, {"label": 123_456_700 + i})
    ds = Dataset.open(local_uri)
    assert ds.verify().ok
    assert len(ds.subset("label >= 123456749")) == 1
    part = Path(ds.store.local_path(ds.manifest.index_parts[0].path))
    raw = bytearray(part.read_bytes())
    footer_len = struct.unpack("<I", raw[-8:-4])[0]
    start = len(raw) - 8 - footer_len
    old, new = struct.pack("<q", 123_456_749), struct.pack("<q", 123_456_740)
    footer = bytes(raw[start:-8])
    assert old in footer
    raw[start:-8] = footer.replace(old, new)
    part.write_bytes(bytes(raw))
    report = Dataset.open(local_uri).verify()
    kinds = {p.kind for p in report.problems}
    assert kinds == {"statistics"}, report.problems
    problem = report.problems[0]
    assert problem.column == "label" and "123456749" in problem.message


def _two_parts(root: str) -> Dataset:
    """A dataset whose latest version (2) has two index parts: 20 rows, then 3 (an
    append that small does not merge the first part)."""
    for first, count in ((0, 20), (100, 3)):
        with Writer(root, "parts", shard_size=4096) as w:
            w.declare("image", "jpg", "tensor", "image")
            for i in range(first, first + count):
                w.add(f"s{i:03d}", {"image": b"x" * (10 + i)}, {"label": i, "caption": f"c{i}"})
    ds = Dataset.open(root)
    assert len(ds.manifest.index_parts) == 2 and ds.verify().ok
    return ds


def _rewrite_part(root: str, k: int, change: Callable[[pa.Table], pa.Table]) -> str:
    """Rewrite index part `k` of the latest version with `change`, recording its new size
    in the latest manifest (the only lie is in the part's columns); the part's path."""
    ds = Dataset.open(root)
    part = ds.manifest.index_parts[k]
    path = Path(root, part.path)
    pq.write_table(change(pq.read_table(path)), path)
    mpath = Path(root, version_path(ds.version))
    manifest = json.loads(mpath.read_bytes())
    manifest["index_parts"][k]["size"] = path.stat().st_size
    mpath.write_text(json.dumps(manifest))
    return part.path


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, values)


#: Index parts that open and count their rows, but do not hold the version's schema:
#: (what was done, the column named, a phrase of the problem).
PART_CHANGES: list[tuple[Callable[[pa.Table], pa.Table], str, str]] = [
    (lambda t: t.drop_columns(["label"]), "label", "has no column 'label'"),
    (
        lambda t: _set(t, "label", pa.array([f"x{i}" for i in range(len(t))])),
        "label",
        "stores column 'label' as string; the manifest's schema says int64",
    ),
    (
        lambda t: _set(t, "image", pa.array([{"present": True}] * len(t))),
        "image",
        "stores column 'image' as struct<present: bool>",
    ),
    (
        lambda t: t.append_column("extra", pa.array(range(len(t)))),
        "extra",
        "has a column 'extra' that the manifest's schema does not name",
    ),
    (
        lambda t: pa.Table.from_arrays([*t.columns, t.column("label")], [*t.schema.names, "label"]),
        "label",
        "has 2 columns named 'label'",
    ),
]


@pytest.mark.parametrize(("change", "column", "says"), PART_CHANGES)
def test_verify_compares_each_index_part_with_the_schema(
    local_uri: str, change: Callable[[pa.Table], pa.Table], column: str, says: str
) -> None:
    _two_parts(local_uri)
    path = _rewrite_part(local_uri, 0, change)
    report = Dataset.open(local_uri).verify()
    assert [(p.kind, p.shard, p.column) for p in report.problems] == [
        ("index-schema", path, column)
    ], report.problems
    assert says in report.problems[0].message
    with pytest.raises(DatasetDamagedError, match="index-schema"):
        report.raise_for_problems()


def test_verify_compares_a_layer_part_with_the_layer_schema(local_uri: str) -> None:
    ds = _two_parts(local_uri)
    lw = LayerWriter(ds, "extra", identity="v1", columns={"double": pa.int64()})
    lw.write_partition(0, np.arange(len(ds)), {"double": [2 * i for i in range(len(ds))]}, {})
    lw.commit(1)
    ds = Dataset.open(local_uri)
    assert ds.verify().ok
    (part,) = ds.manifest.layers[0].index_parts
    path = Path(local_uri, part.path)
    table = pq.read_table(path)
    pq.write_table(_set(table, "double", table.column("double").cast(pa.string())), path)
    mpath = Path(local_uri, version_path(ds.version))
    manifest = json.loads(mpath.read_bytes())
    manifest["layers"][0]["index_parts"][0]["size"] = path.stat().st_size
    mpath.write_text(json.dumps(manifest))
    report = Dataset.open(local_uri).verify()
    assert [(p.kind, p.shard, p.column) for p in report.problems] == [
        ("index-schema", part.path, "double")
    ]


def test_verify_compares_an_index_part_with_its_recorded_size(local_uri: str) -> None:
    ds = _two_parts(local_uri)
    mpath = Path(local_uri, version_path(ds.version))
    manifest = json.loads(mpath.read_bytes())
    manifest["index_parts"][1]["size"] = 10**15
    mpath.write_text(json.dumps(manifest))
    report = Dataset.open(local_uri).verify()
    assert [(p.kind, p.shard) for p in report.problems] == [
        ("index-part", ds.manifest.index_parts[1].path)
    ]
    assert "the manifest says 1000000000000000" in report.problems[0].message


def test_verify_adds_up_the_shard_bytes_of_a_shard_list(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ferroload info` counts a list's recorded `shard_bytes`: a list recording 10^18
    (909,494.7 TiB) passed verify, whose records and shards were right. The list's reader
    now refuses it, and verify, which reads every list again, reports it."""
    monkeypatch.setattr(_shard_lists, "MAX_INLINE_SHARDS", 2)
    for k in range(4):
        with Writer(local_uri, "lists", shard_size=1) as w:
            w.declare("blob", "bin")
            w.add(f"s{k}", {"blob": b"payload" * (k + 1)}, {})
    ds = Dataset.open(local_uri)
    assert ds.manifest.shard_lists and ds.verify().ok
    mpath = Path(local_uri, version_path(ds.version))
    manifest = json.loads(mpath.read_bytes())
    manifest["shard_lists"][0]["shard_bytes"] = 10**18
    mpath.write_text(json.dumps(manifest))
    assert Dataset.open(local_uri).manifest.shard_bytes > 10**18
    report = Dataset.open(local_uri).verify()
    assert [(p.kind, p.shard) for p in report.problems] == [
        ("shard-list", ds.manifest.shard_lists[0].path)
    ]
    assert "1000000000000000000 (shard_bytes)" in report.problems[0].message


def test_verify_checks_an_older_version(local_uri: str) -> None:
    _two_parts(local_uri)
    _rewrite_part(local_uri, 1, lambda t: t.drop_columns(["caption"]))
    assert [p.kind for p in Dataset.open(local_uri).verify().problems] == ["index-schema"]
    report = Dataset.open(local_uri, version=1).verify()
    assert report.ok and report.version == 1
