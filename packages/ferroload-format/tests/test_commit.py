"""Atomic commits: concurrent writer processes, writers killed at every step, gc."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from ferroload_format import Dataset, Writer, gc
from ferroload_store import open_store

from .conftest import spawn_writer

spawn = spawn_writer


def glob_count(root: str) -> int:
    rows = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{root}/index/part-*.parquet')"
    ).fetchall()
    return int(rows[0][0])


def glob_ids(root: str) -> list[str]:
    rows = duckdb.sql(
        f"SELECT sample_id FROM read_parquet('{root}/index/part-*.parquet') ORDER BY sample_id"
    ).fetchall()
    return [r[0] for r in rows]


def seed(uri: str, n: int = 10) -> None:
    with Writer(uri, "concurrent", shard_size=2048) as w:
        w.declare("image", "jpg", "tensor", "image")
        for i in range(n):
            w.add(f"base{i:05d}", {"image": f"payload-{i}".encode() * 20}, {"label": i % 5})


def race(
    uri: str, tmp_path: Path, specs: list[tuple[int, int, list[str]]]
) -> list[tuple[int, str]]:
    """Start one child per spec; let them all commit at the same moment."""
    go = tmp_path / f"go-{time.monotonic_ns()}"
    procs = [
        spawn(uri, first, count, "--go-file", str(go), *extra) for first, count, extra in specs
    ]
    time.sleep(1.5)  # every child has opened its writer and added its samples
    go.touch()
    out = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        out.append((p.returncode, err))
    return out


@pytest.mark.slow
def test_concurrent_writers_with_disjoint_ids_all_land(local_uri: str, tmp_path: Path) -> None:
    seed(local_uri)
    results = race(
        local_uri,
        tmp_path,
        [(0, 40, ["--prefix", "a"]), (0, 40, ["--prefix", "b"]), (0, 40, ["--prefix", "c"])],
    )
    assert [rc for rc, _ in results] == [0, 0, 0], results
    ds = Dataset.open(local_uri)
    assert ds.version == 4
    ids = [r["sample_id"] for r in ds.get_many(range(len(ds)), ["sample_id"])]
    assert len(ids) == len(set(ids)) == 130
    assert glob_ids(local_uri) == sorted(ids)
    for r in ds:  # every sample readable, bytes intact
        n = (
            int(r["sample_id"][-5:])
            if not r["sample_id"].startswith("base")
            else int(r["sample_id"][4:])
        )
        assert r["image"] == f"payload-{n}".encode() * 20
    assert ds.verify().ok


@pytest.mark.slow
def test_concurrent_writers_with_the_same_ids_one_gets_a_conflict(
    local_uri: str, tmp_path: Path
) -> None:
    seed(local_uri)
    results = race(local_uri, tmp_path, [(0, 30, []), (20, 30, [])])
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 3], results
    loser = next(err for rc, err in results if rc == 3)
    assert "concurrent commit" in loser and "s000" in loser
    ds = Dataset.open(local_uri)
    assert ds.version == 2
    ids = [r["sample_id"] for r in ds.get_many(range(len(ds)), ["sample_id"])]
    assert len(ids) == len(set(ids)) == 40
    assert glob_count(local_uri) == 40


@pytest.mark.slow
def test_concurrent_creation_with_different_schemas_conflicts(
    local_uri: str, tmp_path: Path
) -> None:
    results = race(
        local_uri,
        tmp_path,
        [(0, 10, ["--prefix", "a"]), (0, 10, ["--prefix", "b", "--label-type", "str"])],
    )
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 3], results
    assert "does not match" in next(err for rc, err in results if rc == 3)
    assert len(Dataset.open(local_uri)) == 10


def test_concurrent_creation_with_the_same_schema_both_land(local_uri: str, tmp_path: Path) -> None:
    results = race(local_uri, tmp_path, [(0, 10, ["--prefix", "a"]), (0, 10, ["--prefix", "b"])])
    assert [rc for rc, _ in results] == [0, 0], results
    ds = Dataset.open(local_uri)
    assert (ds.version, len(ds)) == (2, 20)
    assert [v.operation for v in ds.versions()] == ["create", "append"]


def snapshot(uri: str) -> list[tuple[str, bytes]]:
    return [(r["sample_id"], r["image"]) for r in Dataset.open(uri)]


@pytest.mark.parametrize("point", ["shards-written", "part-staged", "before-commit"])
def test_killed_before_the_commit_point_leaves_the_last_version_intact(
    local_uri: str, point: str
) -> None:
    seed(local_uri)
    before = snapshot(local_uri)
    proc = spawn(local_uri, 0, 25, "--crash-at", point)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    ds = Dataset.open(local_uri)
    assert ds.version == 1
    assert snapshot(local_uri) == before
    assert glob_count(local_uri) == 10  # leftovers are invisible to plain DuckDB too
    store = open_store(local_uri)
    leftovers = {o.path for o in store.list("shards/")} - {
        p for s in ds.manifest.shards for p in (s.path, s.side_index)
    }
    assert leftovers  # the dead writer did leave shards behind …
    report = gc(local_uri, grace=timedelta(0))
    assert leftovers <= set(report.deleted)  # … and gc removes them
    assert not any(p.startswith(("index/", "_ferroload/versions")) for p in report.deleted)
    assert {o.path for o in store.list("shards/")} == {
        p for s in ds.manifest.shards for p in (s.path, s.side_index)
    }
    assert not store.list("_ferroload/staging/")
    assert snapshot(local_uri) == before
    seed_more = spawn(local_uri, 0, 5)  # the dataset takes new writes normally
    seed_more.communicate(timeout=60)
    assert seed_more.returncode == 0
    assert len(Dataset.open(local_uri)) == 15


def test_killed_after_the_commit_point_the_version_is_complete(local_uri: str) -> None:
    seed(local_uri)
    proc = spawn(local_uri, 0, 25, "--crash-at", "committed")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    ds = Dataset.open(local_uri)
    assert (ds.version, len(ds)) == (2, 35)
    # the part is not published yet: plain DuckDB still sees version 1, never half of 2 …
    assert glob_count(local_uri) == 10
    # … while ferroload reads it from staging
    assert ds[34]["image"] == b"payload-24" * 20
    assert ds.subset("sample_id = 's00024'", return_indices=True).tolist() == [34]
    report = gc(local_uri, grace=timedelta(0))
    # the merged part (outside the glob), then the version's own rows in the glob
    assert report.published == [
        "_ferroload/merged/part-0000000002.parquet",
        "index/part-0000000002.parquet",
    ]
    assert glob_count(local_uri) == 35
    assert Dataset.open(local_uri).verify().ok


def test_next_writer_publishes_a_dead_writers_part(local_uri: str) -> None:
    seed(local_uri)
    proc = spawn(local_uri, 0, 5, "--crash-at", "committed")
    proc.communicate(timeout=60)
    assert glob_count(local_uri) == 10
    proc = spawn(local_uri, 5, 5)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert glob_count(local_uri) == 20
    assert Dataset.open(local_uri).version == 3


def test_killed_after_publishing_the_hint_lags_harmlessly(local_uri: str) -> None:
    seed(local_uri)
    proc = spawn(local_uri, 0, 5, "--crash-at", "published")
    proc.communicate(timeout=60)
    assert open_store(local_uri).get("_ferroload/latest") == b"1"
    ds = Dataset.open(local_uri)
    assert (ds.version, len(ds)) == (2, 15)
    assert glob_count(local_uri) == 15


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.4, 0.9, 1.5])
def test_killed_at_a_random_moment_of_a_long_write(local_uri: str, delay: float) -> None:
    seed(local_uri)
    before = snapshot(local_uri)
    proc = spawn(local_uri, 0, 20_000)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    ds = Dataset.open(local_uri)
    if ds.version == 1:
        assert snapshot(local_uri) == before
        assert glob_count(local_uri) == 10
    else:  # the write finished before the kill
        assert len(ds) == 20_010
    assert ds.verify().ok
    gc(local_uri, grace=timedelta(0))
    assert Dataset.open(local_uri).verify().ok


def test_gc_respects_the_grace_period_and_dry_run(local_uri: str) -> None:
    seed(local_uri)
    proc = spawn(local_uri, 0, 5, "--crash-at", "before-commit")
    proc.communicate(timeout=60)
    young = gc(local_uri)  # default grace: an hour
    assert young.deleted == [] and young.kept_young > 0
    dry = gc(local_uri, grace=timedelta(0), dry_run=True)
    assert dry.deleted and dry.bytes_freed > 0
    assert all(os.path.exists(os.path.join(local_uri, p)) for p in dry.deleted)
    real = gc(local_uri, grace=timedelta(0))
    assert sorted(real.deleted) == sorted(dry.deleted)
    assert not any(os.path.exists(os.path.join(local_uri, p)) for p in real.deleted)


def test_gc_keeps_every_committed_version_readable(uri: str) -> None:
    seed(uri, 4)
    with Writer(uri) as w:
        w.add("x1", {"image": b"1"}, {"label": 1})
    with pytest.raises(RuntimeError), Writer(uri) as w:
        w.add("x2", {"image": b"2"}, {"label": 2})
        w._finish_shard()
        raise RuntimeError("abort after a shard was written")
    gc(uri, grace=timedelta(0))
    assert len(Dataset.open(uri, version=1)) == 4
    assert Dataset.open(uri, version=1).verify().ok
    assert Dataset.open(uri).verify().ok


def test_a_commit_whose_shards_were_collected_fails_cleanly(uri: str) -> None:
    from ferroload_format import CommitConflictError

    seed(uri, 3)
    w = Writer(uri, shard_size=1024)
    for i in range(5):
        w.add(f"late{i}", {"image": b"x" * 600}, {"label": i})
    w._finish_shard()
    gc(uri, grace=timedelta(0))  # run by someone who thought no writer was active
    with pytest.raises(CommitConflictError, match="disappeared"):
        w.close()
    ds = Dataset.open(uri)
    assert (ds.version, len(ds)) == (1, 3)
    assert ds.verify().ok
