"""The index read by row group (issue 16, "Index at scale"): some positions read only the
row groups holding them, in a byte-bounded cache; layers, views, damaged ranges, remote."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ferroload_format import (
    Dataset,
    LayerWriter,
    ManifestError,
    Modality,
    PayloadRangeError,
    Writer,
)
from ferroload_format import _part_files as part_files_module
from ferroload_format._index import write_part
from ferroload_format._index_columns import IndexColumns
from ferroload_format._index_groups import GroupReader
from ferroload_format._paths import version_path
from ferroload_store import open_store

from .conftest import payload, sample_meta

PART = 40  # rows per append (index part)
GROUP = 8  # rows per row group once rewritten


def write_parts(uri: str, parts: int = 3, *, shard_size: int = 4096) -> Dataset:
    """`parts` index parts of `PART` samples each (ids s00000…), with row groups of
    `GROUP` rows."""
    with Writer(uri, "lazy", shard_size=shard_size) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(parts * PART):
            w.add(f"s{i:05d}", {"image": payload(i)}, sample_meta(i))
    return small_groups(uri)


def small_groups(uri: str, rows: int = GROUP, *, per_part: int = PART, edit: Any = None) -> Dataset:
    """Rewrite the base index of the latest version as parts of `per_part` rows with
    row groups of `rows` rows (`edit(table) -> table` applied to the whole index first),
    and the manifest to list them."""
    store = open_store(uri)
    ds = Dataset.open(uri)
    key = version_path(ds.version)
    manifest = json.loads(store.get(key))
    old = manifest["index_parts"]
    table = pa.concat_tables(
        pq.read_table(pa.BufferReader(store.get(p["path"]))) for p in old
    ).combine_chunks()
    if edit is not None:
        table = edit(table)
    new = []
    for k, start in enumerate(range(0, table.num_rows, per_part)):
        data = write_part(table.slice(start, per_part), row_group_size=rows)
        path = f"index/part-v{ds.version}-{k:04d}.parquet"
        store.put(path, data)
        n = min(per_part, table.num_rows - start)
        new.append({**old[0], "path": path, "staged": path, "num_rows": n, "size": len(data)})
    manifest["index_parts"] = new
    store.put(key, json.dumps(manifest).encode())
    return Dataset.open(uri)


def one_shard_per_part(uri: str) -> Dataset:
    """Three appends of `PART` samples, one shard each, split as `small_groups` does."""
    for k in range(3):
        with Writer(uri, "lazy", shard_size=1 << 30) as w:
            if k == 0:
                w.declare("image", "jpg", "tensor", "image")
            for i in range(k * PART, (k + 1) * PART):
                w.add(f"s{i:05d}", {"image": payload(i)}, sample_meta(i))
    return small_groups(uri)


class Reads:
    """Records every `read_row_groups` call: (part key, groups, columns)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple[int, ...], tuple[str, ...]]] = []
        real = part_files_module.read_row_groups

        def spy(opened: Any, groups: Any, names: Any, **kw: Any) -> pa.Table:
            self.calls.append((str(opened[0].metadata.num_rows), tuple(groups), tuple(names)))
            return real(opened, groups, names, **kw)

        monkeypatch.setattr(part_files_module, "read_row_groups", spy)

    def groups(self) -> list[tuple[int, ...]]:
        return [g for _, g, _ in self.calls]


def test_some_positions_read_only_their_row_groups(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri)
    reads = Reads(monkeypatch)
    ds = Dataset.open(uri)
    got = ds.get_many([3, 50, 51, 119], ["sample_id", "label"])
    assert got == [{"sample_id": f"s{i:05d}", "label": i % 5} for i in (3, 50, 51, 119)]
    # part 0 group 0, part 1 group 1 (rows 48..55), part 2 group 4 (rows 112..119)
    assert sorted(reads.groups()) == [(0,), (0,), (1,), (1,), (4,), (4,)]
    assert sorted({names for _, _, names in reads.calls}) == [("label",), ("sample_id",)]
    assert ds._index._cache == {}  # no whole column was read
    n = len(reads.calls)
    assert ds.column("label", [52, 4]).to_pylist() == [2, 4]  # cached groups: no read
    assert len(reads.calls) == n
    assert ds.column("sample_id", [119, 0, 119]).to_pylist() == ["s00119", "s00000", "s00119"]


def test_locate_and_reads_match_the_whole_columns(tmp_path: Any) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri)
    whole = Dataset.open(uri)._index.modality("image")
    ds = Dataset.open(uri)
    pos = np.random.default_rng(0).permutation(120)[:50]
    a = ds.locate("image", pos)
    for f in ("present", "shard", "offset", "length", "checksum"):
        assert getattr(a, f).tolist() == getattr(whole, f)[pos].tolist(), f
    assert ds.read(pos, "image") == [payload(int(i)) for i in pos]
    assert ds._index._modality == {} and ds._index._shard_codes is None
    assert ds.get(77) == {"sample_id": "s00077", "image": payload(77), **sample_meta(77)}


def test_the_cache_is_bounded_in_bytes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri)
    opened = Dataset.open(uri)
    one_group = 4 * GROUP * 8 + GROUP  # a group's location arrays, roughly
    index = IndexColumns(opened.store, opened.manifest, cache_bytes=3 * one_group)
    ds = Dataset(opened.store, opened.manifest, index=index)
    reads = Reads(monkeypatch)
    for start in range(0, 120, GROUP):
        ds.locate("image", [start])
        assert index._groups.nbytes <= 3 * one_group + 64 * GROUP  # + codes
    assert len(reads.calls) == 120 // GROUP
    ds.locate("image", [119])  # the latest groups are kept
    assert len(reads.calls) == 120 // GROUP
    ds.locate("image", [0])  # the first was evicted: read again
    assert len(reads.calls) == 120 // GROUP + 1


def test_the_default_bound_comes_from_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri, 1)
    monkeypatch.setenv("FERROLOAD_INDEX_CACHE_BYTES", "1000")
    assert Dataset.open(uri)._index._groups.max_bytes == 1000
    monkeypatch.delenv("FERROLOAD_INDEX_CACHE_BYTES")
    assert Dataset.open(uri)._index._groups.max_bytes == 256 << 20


def test_shard_runs_match_the_shard_column(tmp_path: Any) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri, shard_size=4096)  # many shards, some row groups span several
    ds = Dataset.open(uri)
    codes = Dataset.open(uri).shard_of()
    starts, run_codes = ds.shard_runs()
    expect = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1])
    assert starts.tolist() == expect.tolist()
    assert run_codes.tolist() == codes[expect].tolist()
    assert ds._index._shard_codes is None
    view = ds.take(np.random.default_rng(1).permutation(120)[:60])
    vcodes = Dataset.open(uri).take(view._rows).shard_of()
    vs, vc = view.shard_runs()
    vexpect = np.concatenate([[0], np.flatnonzero(np.diff(vcodes)) + 1])
    assert vs.tolist() == vexpect.tolist() and vc.tolist() == vcodes[vexpect].tolist()


def test_shard_runs_of_one_shard_groups_read_no_rows(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    one_shard_per_part(uri)
    reads = Reads(monkeypatch)
    ds = Dataset.open(uri)
    starts, codes = ds.shard_runs()
    assert starts.tolist() == [0, 40, 80] and codes.tolist() == [0, 1, 2]
    assert reads.calls == []  # the row groups' statistics said it


def test_a_row_group_contradicting_its_statistics_is_refused(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    one_shard_per_part(uri)
    ds = Dataset.open(uri)
    # statistics claiming shard 0 for every group (a forged footer)
    monkeypatch.setattr(GroupReader, "one_shard", lambda self, p, g: 0)
    assert ds.shard_runs()[1].tolist() == [0]
    with pytest.raises(ManifestError, match="statistics say one"):
        ds.locate("image", [45])


def test_layers_read_by_row_group_and_pad_rows_they_do_not_cover(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "ds")
    base = write_parts(uri, 2)
    thumb = Modality("thumb", "png", "tensor", "image")
    lw = LayerWriter(base, "extra", identity="t1", columns={"double": pa.int64()},
                     modalities=[thumb])  # fmt: skip
    rows = np.arange(0, 80, 3, dtype=np.int64)
    lw.write_partition(0, rows, {"double": [int(r) * 2 for r in rows]},
                       {"thumb": [b"t%d" % r for r in rows]})  # fmt: skip
    lw.commit(1)
    with Writer(uri, "lazy", mode="append") as w:  # rows 80..89: beyond the layer
        for i in range(80, 90):
            w.add(f"s{i:05d}", {"image": payload(i)}, sample_meta(i))
    whole = Dataset.open(uri)
    want_double = whole.column("double").to_pylist()
    want_thumb = whole._index.modality("thumb")
    ds = Dataset.open(uri)
    pos = np.asarray([85, 3, 4, 78, 89, 0, 81])
    assert ds.column("double", pos).to_pylist() == [want_double[i] for i in pos]
    a = ds.locate("thumb", pos)
    for f in ("present", "shard", "offset", "length", "checksum"):
        assert getattr(a, f).tolist() == getattr(want_thumb, f)[pos].tolist(), f
    assert ds.read(pos, "thumb") == [b"t%d" % i if i < 80 and i % 3 == 0 else None for i in pos]
    assert ds.get(85, ["double", "thumb"]) == {"double": None, "thumb": None}
    assert not ds.all_present("thumb") and ds.all_present("image")
    assert ds._index._cache == {} and ds._index._modality == {}


def test_views_read_their_positions_lazily(tmp_path: Any) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri)
    ds = Dataset.open(uri)
    view = ds.take([100, 5, 60, 6])
    assert view.column("sample_id", [0, 3, 1]).to_pylist() == ["s00100", "s00006", "s00005"]
    assert view.locate("image", [2]).length.tolist() == [len(payload(60))]
    assert view.get_many([1, 2], ["label"]) == [{"label": 0}, {"label": 0}]
    assert ds._index._cache == {}


def test_all_present_from_statistics_and_views(tmp_path: Any) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "t", shard_size=4096) as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("text", "txt", "text", "raw")
        for i in range(30):
            data = {"image": payload(i)} | ({"text": b"x"} if i % 2 else {})
            w.add(f"s{i:05d}", data, sample_meta(i))
    ds = small_groups(uri, 4)
    assert ds.all_present("image") and not ds.all_present("text")
    assert ds.take(np.arange(1, 30, 2)).all_present("text")
    assert not ds.take([1, 2]).all_present("text")
    assert ds._index._modality == {}


def test_damaged_ranges_are_refused_when_their_row_group_is_read(tmp_path: Any) -> None:
    uri = str(tmp_path / "ds")
    write_parts(uri, 1)

    def damage(table: pa.Table) -> pa.Table:
        struct = table.column("image").combine_chunks()
        offsets = struct.field("offset").to_pylist()
        offsets[13] = 513  # not on the tar block grid
        fields = [struct.field(f.name) for f in struct.type]
        fields[1] = pa.array(offsets, pa.int64())
        new = pa.StructArray.from_arrays(fields, fields=list(struct.type))
        return table.set_column(table.schema.get_field_index("image"), "image", new)

    small_groups(uri, edit=damage)
    for read in (
        lambda ds: ds.get(13),
        lambda ds: ds.read([12], "image"),  # the same row group
        lambda ds: ds.locate("image", [15, 0]),
        lambda ds: ds.get_many([0, 13]),
    ):
        with pytest.raises(PayloadRangeError, match="s00013") as info:
            read(Dataset.open(uri))
        assert info.value.sample_id == "s00013" and info.value.column == "image"
    ds = Dataset.open(uri)
    assert ds.get(2)["image"] == payload(2)  # another row group: readable
    assert ds.read([30], "image") == [payload(30)]


def test_remote_reads_fetch_only_the_asked_chunks(uri: str) -> None:
    rng = np.random.default_rng(0)
    with Writer(uri, "wide") as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(4000):
            blob = rng.bytes(60).hex()  # incompressible: the part is mostly this column
            w.add(f"s{i:05d}", {"image": payload(i)} if i < 5 else None,
                  {"label": i % 5, "blob": blob})  # fmt: skip
    small_groups(uri, 500, per_part=2000)
    ds = Dataset.open(uri, cache=None)  # bytes as requested, not in cache blocks
    part = ds.manifest.index_parts[1]
    before = ds.store.stats.snapshot()
    assert ds.get(2345, ["label"]) == {"label": 0}
    after = ds.store.stats.snapshot()
    remote = ds.store.local_path("") is None
    if remote:
        # the footer (the part's tail), then the one column chunk, nothing of `blob`
        assert after["get_requests"] - before["get_requests"] <= 3
        assert after["bytes_read"] - before["bytes_read"] < part.size / 2
    ds.get(2346, ["label"])  # the same row group: cached
    again = ds.store.stats.snapshot()
    assert again["get_requests"] == after["get_requests"]
    assert ds.get(3999, ["label"]) == {"label": 4}  # another group: that chunk only
    last = ds.store.stats.snapshot()
    if remote:
        assert last["get_requests"] - again["get_requests"] == 1
        assert last["bytes_read"] - again["bytes_read"] < 2000
    assert ds.read([4, 3999], "image") == [payload(4), None]


def test_large_reads_run_in_threads(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    write_parts(uri)
    small_groups(uri, 2)  # 20 row groups per part: a read of them all is 5 chunks of 4
    monkeypatch.setattr(part_files_module, "_GROUPS_PER_READ", 4)
    monkeypatch.setattr(part_files_module, "_READ_THREADS", 2)
    threads: set[str] = set()
    real = part_files_module.read_row_groups

    def spy(opened: Any, groups: Any, names: Any, **kw: Any) -> pa.Table:
        threads.add(threading.current_thread().name)
        return real(opened, groups, names, **kw)

    monkeypatch.setattr(part_files_module, "read_row_groups", spy)
    ds = Dataset.open(uri)
    pos = np.random.default_rng(2).permutation(120)
    assert ds.column("sample_id", pos).to_pylist() == [f"s{i:05d}" for i in pos]
    assert ds.column("label", pos).to_pylist() == [i % 5 for i in pos]
    assert ds.read(pos[:30], "image") == [payload(int(i)) for i in pos[:30]]
    assert len(threads) > 1


def test_threads_read_one_index_side_by_side(uri: str) -> None:
    write_parts(uri)
    small_groups(uri, 4)
    ds = Dataset.open(uri)
    index = IndexColumns(ds.store, ds.manifest, cache_bytes=2000)  # evicts all the time
    ds = Dataset(ds.store, ds.manifest, index=index)
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                pos = rng.integers(0, 120, 10)
                assert ds.column("sample_id", pos).to_pylist() == [f"s{i:05d}" for i in pos]
                assert ds.read(pos, "image") == [payload(int(i)) for i in pos]
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_read_of_more_row_groups_than_fit_keeps_a_quarter_of_the_cache(
    tmp_path: Any,
) -> None:
    # a shuffled loader's window touches every row group: caching them all would evict
    # everything else for values it will not read again
    uri = str(tmp_path / "ds")
    write_parts(uri)
    opened = Dataset.open(uri)
    one_group = 4 * GROUP * 8 + GROUP
    index = IndexColumns(opened.store, opened.manifest, cache_bytes=8 * one_group)
    ds = Dataset(opened.store, opened.manifest, index=index)
    ds.locate("image", np.arange(120))  # 15 row groups in one call: more than fit
    assert index._groups.loads == 2 * 15  # every group was read (locations and codes)
    assert 0 < index._groups.nbytes <= 2 * one_group + 64 * GROUP
    ds.locate("image", np.arange(24, 56))  # a call of 4 row groups: they fit, all kept
    held = {(k[1], k[2]) for k in index._groups.held() if k[3] == "loc"}
    assert {(0, 3), (0, 4), (1, 0), (1, 1)} <= held  # (part, group) of rows 24..55


def test_sample_ids_are_written_plain(tmp_path: Any) -> None:
    # ids are unique: a dictionary only grows to its limit, then falls back to plain
    uri = str(tmp_path / "ds")
    write_parts(uri, 1)
    ds = Dataset.open(uri)
    part = ds.manifest.index_parts[0]
    md = pq.ParquetFile(str(tmp_path / "ds" / part.path)).metadata
    encodings = {
        md.row_group(0).column(i).path_in_schema: md.row_group(0).column(i).encodings
        for i in range(md.num_columns)
    }
    assert "RLE_DICTIONARY" not in encodings["sample_id"]
    assert "RLE_DICTIONARY" in encodings["shard"]
