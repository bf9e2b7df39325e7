"""Sorted sample-id runs: the duplicate check of an append without reading every part."""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ferroload_format import Dataset, DuplicateSampleError, Writer, _commit, gc
from ferroload_format._ids import _SCHEMA as RUN_SCHEMA
from ferroload_format._ids import RUN_ROW_GROUP, RunMismatchError, hash_ids, read_run
from ferroload_format._index import write_part
from ferroload_format._paths import IDS_DIR, version_path
from ferroload_format._records import IdRun
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


def _rewrite_run(root: str, edit: Any, *, record: bool = True) -> IdRun:
    """Rewrite the newest run of the latest version with `edit(table)`; with `record`, its
    manifest record made to match the new file (num_ids, size), as a forger would."""
    store = open_store(root)
    manifest = read_manifest(store)
    run = manifest.id_runs[-1]
    table = edit(pq.read_table(pa.BufferReader(store.get(run.path))))
    data = write_part(table, row_group_size=RUN_ROW_GROUP)
    store.put(run.path, data)
    if record:
        path = Path(root, version_path(manifest.version))
        raw = json.loads(path.read_bytes())
        raw["id_runs"][-1].update(num_ids=table.num_rows, size=len(data))
        path.write_text(json.dumps(raw))
    return run


def _without(sid: str) -> Any:
    return lambda t: t.filter(pc.not_equal(t["hash"], int(hash_ids([sid])[0])))


def _part_of(sid: str, part: int) -> Any:
    def edit(t: pa.Table) -> pa.Table:
        hit = pc.equal(t["hash"], int(hash_ids([sid])[0]))
        return t.set_column(1, RUN_SCHEMA.field("part"), pc.if_else(hit, part, t["part"]))

    return edit


def _reversed(t: pa.Table) -> pa.Table:
    return t.take(pa.array(range(t.num_rows - 1, -1, -1)))


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (
            _without("a"),
            r"holds 4 ids, but the index parts it covers \(\[2\]\) of version 2 hold 5",
        ),
        (_part_of("a", 99), r"covers part 2 but has rows of other parts"),
        (_reversed, "is not sorted"),
    ],
    ids=["omits an id", "names another part", "not sorted"],
)
def test_a_lying_run_never_lets_an_id_in_twice(
    local_uri: str, caplog: pytest.LogCaptureFixture, edit: Any, why: str
) -> None:
    # issue 31 point 4: a run omitting one id (its record made to match) let an append
    # commit that id a second time; verify() flagged the run beforehand
    append(local_uri, "a", "b", "c")
    append(local_uri, "d", "e")  # merges part 1: one run, covering part 2, of 5 ids
    run = _rewrite_run(local_uri, edit)
    assert read_manifest(open_store(local_uri)).id_runs[-1].parts == (2,)
    assert [p.kind for p in Dataset.open(local_uri).verify().problems] == ["id-run"]
    with pytest.raises(DuplicateSampleError, match="'a'"):
        append(local_uri, "z", "a")
    assert re.search(why, caplog.text) and run.path in caplog.text
    assert Dataset.open(local_uri).version == 2  # nothing committed
    append(local_uri, "f")  # the next version gets a true run instead of the lying one
    ds = Dataset.open(local_uri)
    assert run.path not in {r.path for r in ds.manifest.id_runs}
    assert ds.verify().ok and sorted(ds.column("sample_id").to_pylist()) == list("abcdef")
    with pytest.raises(DuplicateSampleError, match="'a'"):
        append(local_uri, "a")


def test_a_run_claiming_more_ids_than_its_bytes_hold_is_refused_unread(
    local_uri: str,
) -> None:
    # issue 31 point 8: 775 KB declaring 10^8 ids (a constant column compresses to
    # nothing) made verify() of an 8-sample dataset allocate 5.6 GB
    append(local_uri, *(f"s{i}" for i in range(8)))
    store = open_store(local_uri)
    manifest = read_manifest(store)
    run = manifest.id_runs[0]
    n = 1 << 21
    table = pa.table(
        {"hash": np.zeros(n, np.int64), "part": np.full(n, 1, np.int64)},
        schema=RUN_SCHEMA,
    )
    data = write_part(table, row_group_size=RUN_ROW_GROUP)
    assert len(data) < n // 16
    store.put(run.path, data)
    path = Path(local_uri, version_path(1))
    raw = json.loads(path.read_bytes())
    raw["id_runs"][0].update(num_ids=n, size=len(data))
    path.write_text(json.dumps(raw))
    problems = Dataset.open(local_uri).verify().problems
    assert [p.kind for p in problems] == ["id-run"]
    assert f"claims {n} ids in {len(data)} bytes" in problems[0].message
    with pytest.raises(RunMismatchError, match="claims"):
        read_run(store, read_manifest(store).id_runs[0])
    with pytest.raises(DuplicateSampleError, match="s3"):
        append(local_uri, "s3")
    append(local_uri, "s8")
    assert Dataset.open(local_uri).verify().ok
