from __future__ import annotations

from pathlib import Path

import pytest

from ferroload_format import Dataset, DatasetDamagedError

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
