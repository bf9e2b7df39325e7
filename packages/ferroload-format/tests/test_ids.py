"""Sorted sample-id runs: the duplicate check of an append without reading every part."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ferroload_format import Dataset, DuplicateSampleError, Writer, _commit, gc
from ferroload_format._index import write_part
from ferroload_format._paths import IDS_DIR, version_path
from ferroload_format._versions import read_manifest
from ferroload_store import open_store


def append(uri: str, *ids: str) -> int | None:
    w = Writer(uri, "ids")
    w.declare("blob", "bin")
    for sid in ids:
        w.add(sid, {"blob": sid.encode()}, {"n": len(sid)})
    return w.close()


@pytest.mark.slow
def test_runs_stay_few_and_catch_every_duplicate(uri: str) -> None:
    n = 24
    for i in range(n):
        append(uri, f"s{i:03d}")
    manifest = read_manifest(open_store(uri))
    assert len(manifest.id_runs) <= math.log2(n) + 2
    covered = sorted(v for r in manifest.id_runs for v in r.parts)
    assert covered == [p.version for p in manifest.index_parts]  # each part in one run
    assert sum(r.num_ids for r in manifest.id_runs) == n
    for sid in ("s000", "s017", "s023"):
        with pytest.raises(DuplicateSampleError, match=sid):
            append(uri, "fresh-" + sid, sid)
    assert Dataset.open(uri).num_samples == n
    append(uri, "s024", "s025")
    assert Dataset.open(uri).num_samples == n + 2


def test_a_hash_collision_is_resolved_against_the_real_ids(
    local_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every id hashes alike: each lookup names every part, the exact check decides
    monkeypatch.setattr(_commit, "hash_ids", lambda ids: np.zeros(len(ids), dtype=np.int64))
    for i in range(6):
        append(local_uri, f"c{i}")
    with pytest.raises(DuplicateSampleError, match="c3"):
        append(local_uri, "c9", "c3")
    assert Dataset.open(local_uri).num_samples == 6


def _strip_runs(root: Path) -> None:
    for f in (root / "_ferroload" / "versions").glob("*.json"):
        raw = json.loads(f.read_text())
        raw.pop("id_runs", None)
        f.write_text(json.dumps(raw))
    for f in (root / IDS_DIR).glob("*"):
        f.unlink()


def test_a_dataset_without_runs_is_checked_in_full_then_gets_them(
    local_uri: str, tmp_path: Path
) -> None:
    for i in range(5):
        append(local_uri, f"o{i}")
    _strip_runs(Path(local_uri.removeprefix("file://")))
    with pytest.raises(DuplicateSampleError, match="o2"):
        append(local_uri, "o2")
    version = append(local_uri, "o5")
    manifest = read_manifest(open_store(local_uri))
    assert manifest.version == version
    # every part is covered by a run again (appends merge parts: fewer than 6 parts)
    parts = [p.version for p in manifest.index_parts]
    assert sorted(v for r in manifest.id_runs for v in r.parts if v in parts) == parts
    assert manifest.num_samples == 6
    with pytest.raises(DuplicateSampleError, match="o1"):
        append(local_uri, "o1")


def test_a_missing_run_falls_back_to_reading_the_parts(
    local_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(4):
        append(local_uri, f"m{i}")
    for f in Path(local_uri.removeprefix("file://"), IDS_DIR).glob("*"):
        f.unlink()
    with pytest.raises(DuplicateSampleError, match="m0"):
        append(local_uri, "m0")
    assert "unreadable" in caplog.text
    append(local_uri, "m4")
    with pytest.raises(DuplicateSampleError, match="m3"):
        append(local_uri, "m3")


def test_an_overwrite_starts_fresh_runs(uri: str) -> None:
    append(uri, "a", "b")
    with Writer(uri, "ids", mode="overwrite") as w:
        w.declare("blob", "bin")
        w.add("c", {"blob": b"c"}, {"n": 1})
    manifest = read_manifest(open_store(uri))
    assert [r.parts for r in manifest.id_runs] == [(manifest.version,)]
    append(uri, "a")  # replaced content: no longer a duplicate
    with pytest.raises(DuplicateSampleError, match="'c'"):
        append(uri, "c")


def test_gc_keeps_the_runs_a_version_references(local_uri: str) -> None:
    for i in range(5):
        append(local_uri, f"g{i}")
    store = open_store(local_uri)
    stray = f"{IDS_DIR}dead-writer-0000000099.parquet"
    store.put(stray, b"left by a writer that lost")
    report = gc(local_uri, grace=timedelta(0))
    assert report.deleted == [stray]
    referenced = {r.path for v in range(1, 6) for r in read_manifest(store, v).id_runs}
    assert {o.path for o in store.list(IDS_DIR)} == referenced
    with pytest.raises(DuplicateSampleError):
        append(local_uri, "g4")
    assert store.exists(version_path(5))


def test_verify_checks_the_runs(local_uri: str) -> None:
    for i in range(5):
        append(local_uri, f"v{i}")
    assert Dataset.open(local_uri).verify().ok
    store = open_store(local_uri)
    run = read_manifest(store).id_runs[0]
    table = pq.read_table(pa.BufferReader(store.get(run.path)))
    store.put(run.path, write_part(table.slice(1)))  # one id dropped
    problems = Dataset.open(local_uri).verify().problems
    assert [p.kind for p in problems] == ["id-run"]
    assert run.path in problems[0].message
