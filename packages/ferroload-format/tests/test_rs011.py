"""Datasets written by ferroload-rs 0.1.1 (fixtures made by its published wheel): read as
they are, upgraded in place, refused by writers until then, hostile ones refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from ferroload_core import UnsafePathError
from ferroload_format import (
    Dataset,
    LayerWriter,
    ManifestError,
    NeedsUpgradeError,
    VersionNotFoundError,
    Writer,
    gc,
    upgrade,
)
from ferroload_store import open_store
from ferroload_testing import MotoServer, rs011_dataset

from .conftest import BUCKET

SERVICE_NOT_AVAILABLE = "service not available: "  # the root conftest's skip policy


def _members(root: Path, shard: str) -> dict[str, bytes]:
    with tarfile.open(root / shard) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}  # type: ignore[union-attr]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _glob(root: Path | str) -> tuple[int, int]:
    got = duckdb.sql(
        f"SELECT count(*), count(DISTINCT sample_id) FROM read_parquet('{root}/index/part-*.parquet')"
    ).fetchall()
    return got[0]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    return rs011_dataset("mixed", tmp_path / "mixed")


def _check_mixed(ds: Dataset, root: Path) -> None:
    """The answers 0.1.1 gives for the `mixed` fixture (see make_rs011_fixtures.py)."""
    assert len(ds) == 30
    assert [m.name for m in ds.modalities] == ["audio", "image", "mask", "emb", "note"]
    base = _members(root, "shards/shard-00000.tar")
    notes = _members(root, "shards/parts/shard-1-00000.tar")
    for i in range(30):
        s = ds[i]
        assert s["sample_id"] == f"s{i:04d}"
        assert s["image"] == base[f"s{i:04d}.jpg"]
        assert s["mask"] == (base[f"s{i:04d}.png"] if i % 3 == 0 else None)  # sparse
        assert s["audio"] == (base[f"s{i:04d}.wav"] if i % 2 == 0 else None)
        assert (s["label"], s["caption"], s["score"], s["flag"]) == (
            i % 5,
            f"sample number {i}",
            i / 4,
            i % 2 == 1,
        )
        assert s["extra"] == (i * 10 if i % 4 == 0 else None)
        assert s["tag"] == f"class{i % 5}"  # layer `feats` (version 2)
        assert np.load(__import__("io").BytesIO(s["emb"])).shape == (3,)
        assert s["note"] == (notes[f"{i}.txt"] if i % 2 else None)  # layer `parts` (version 3)
        assert s["square"] == (i * i if i % 2 else None)


def test_a_0_1_1_root_reads_as_it_is(mixed: Path) -> None:
    before = _files(mixed)
    ds = Dataset.open(mixed)
    _check_mixed(ds, mixed)
    assert ds.get(3, ["label", "note"]) == {"label": 3, "note": b"note 3"}
    where = "label IN (1, 3) AND square > 10 AND caption LIKE 'sample%' AND regexp_matches(tag, 'class[13]')"
    assert ds.subset(where, return_indices=True).tolist() == [11, 13, 21, 23]
    assert ds.verify().ok
    assert [(v.version, v.operation) for v in ds.versions()] == [
        (1, "create"),
        (2, "layer"),
        (3, "layer"),
    ]
    assert Dataset.open(mixed, version=1).columns[-1] == "tags"
    assert "tag" in Dataset.open(mixed, version=2).columns
    assert "square" not in Dataset.open(mixed, version=2).columns
    with pytest.raises(VersionNotFoundError, match=r"versions 1\.\.3"):
        Dataset.open(mixed, version=4)
    assert _files(mixed) == before  # reading wrote nothing


def test_keys_that_are_not_sample_ids_get_escaped_ids_and_keep_the_key(tmp_path: Path) -> None:
    ds = Dataset.open(rs011_dataset("oddkeys", tmp_path / "odd"))
    rows = ds.to_table(["sample_id", "basename", "label"]).to_pylist()
    assert [r["basename"] for r in rows] == [
        "plain",
        "with.dot",
        "with space",
        "ünïcode",
        "k" * 90,
        "dup~2e",
        "a..b",
    ]
    ids = [r["sample_id"] for r in rows]
    assert ids[:3] == ["plain", "with~2edot", "with~20space"] and ids[6] == "a~2e~2eb"
    assert len(set(ids)) == 7
    assert ds.subset("basename = 'with.dot'", return_indices=True).tolist() == [1]
    assert ds.verify().ok


def test_upgrade_converts_in_place_without_touching_a_shard(mixed: Path) -> None:
    shards = {k: v for k, v in _files(mixed).items() if k.endswith(".tar")}
    direct = Dataset.open(mixed).to_table()
    report = upgrade(str(mixed), progress=False)
    assert (report.status, report.versions, report.samples) == ("upgraded", 3, 30)
    assert report.bytes_read > 0 and report.bytes_written < 64 << 10  # metadata only
    assert {k: v for k, v in _files(mixed).items() if k.endswith(".tar")} == shards
    ds = Dataset.open(mixed)
    assert ds.manifest.checksum_algorithm == "xxh3_64"
    _check_mixed(ds, mixed)
    after = ds.to_table()
    drop = [m.name for m in ds.modalities]  # locations: same places, checksums now filled
    assert after.drop_columns(drop).equals(direct.drop_columns(drop))
    assert ds.verify().ok
    assert [(v.version, v.operation) for v in ds.versions()] == [
        (1, "create"),
        (2, "layer"),
        (3, "layer"),
    ]
    assert _glob(mixed) == (30, 30)
    # 0.1.1's manifests now name copies outside the glob
    legacy = json.loads((mixed / "manifest.json").read_text())
    assert legacy["index_shards"][0]["path"] == "_ferroload/rs011/index/part-00000.parquet"
    assert (mixed / legacy["index_shards"][0]["path"]).exists()
    again = upgrade(str(mixed))
    assert (again.status, again.bytes_written) == ("current", 0)


def test_an_upgraded_root_takes_writes(mixed: Path) -> None:
    upgrade(str(mixed))
    with Writer(str(mixed), mode="append") as w:
        w.add(
            "new",
            {"image": b"jpeg"},
            {"label": 9, "caption": "c", "score": 1.0, "flag": True, "tags": "t", "extra": 1},
        )
    gc(str(mixed), grace=timedelta(0))
    ds = Dataset.open(mixed)
    assert len(ds) == 31 and ds[30]["note"] is None and ds[3]["note"] == b"note 3"
    assert ds.verify().ok
    assert _glob(mixed) == (31, 31)


def test_writes_on_a_0_1_1_root_name_the_upgrade(mixed: Path) -> None:
    before = _files(mixed)
    ds = Dataset.open(mixed)
    with pytest.raises(NeedsUpgradeError, match="ferroload upgrade"):
        Writer(str(mixed), mode="append")
    with pytest.raises(NeedsUpgradeError, match="ferroload upgrade"):
        Writer(str(mixed), mode="overwrite")
    with pytest.raises(NeedsUpgradeError, match="ferroload upgrade"):
        gc(str(mixed), grace=timedelta(0))
    with pytest.raises(NeedsUpgradeError, match="ferroload upgrade"):
        ds.compact()
    with pytest.raises(NeedsUpgradeError, match="ferroload upgrade"):
        LayerWriter(ds, "more", identity="x", columns={"y": pa.int64()})
    assert _files(mixed) == before


_KILL = """
import os, sys
from ferroload_format import _rs011_upgrade as u
def stop(name):
    if name == sys.argv[2]:
        os._exit(9)
u._checkpoint = stop
u.upgrade(sys.argv[1])
"""


@pytest.mark.parametrize(
    "step",
    [
        "checksummed",
        "moved",
        "barrier",
        "originals-deleted",
        "parts-written",
        "committed-3",
        "committed-1",
    ],
)
def test_an_upgrade_killed_at_any_step_leaves_every_sample_and_a_rerun_finishes(
    mixed: Path, step: str
) -> None:
    got = subprocess.run([sys.executable, "-c", _KILL, str(mixed), step], check=False)
    assert got.returncode == 9
    ds = Dataset.open(mixed)
    assert (
        len(ds) == 30 and ds[7]["image"] == _members(mixed, "shards/shard-00000.tar")["s0007.jpg"]
    )
    report = upgrade(str(mixed))
    assert report.status in ("upgraded", "finished")
    _check_mixed(Dataset.open(mixed), mixed)
    assert Dataset.open(mixed).verify().ok
    assert _glob(mixed) == (30, 30)
    assert upgrade(str(mixed)).status == "current"


def _edit(root: Path, change) -> None:  # type: ignore[no-untyped-def]
    for p in [root / "manifest.json", *sorted((root / "versions").glob("v*.json"))]:
        raw = json.loads(p.read_text())
        change(raw)
        p.write_text(json.dumps(raw))


def test_hostile_paths_in_a_0_1_1_root_are_refused(mixed: Path) -> None:
    def out_of_root(raw: dict) -> None:  # type: ignore[type-arg]
        for la in raw.get("layers", []):
            la["index"] = "../../etc/passwd"

    _edit(mixed, out_of_root)
    with pytest.raises(UnsafePathError, match="etc/passwd"):
        Dataset.open(mixed)
    with pytest.raises(UnsafePathError):
        upgrade(str(mixed))


def test_hostile_offsets_and_side_indexes_are_clear_errors(
    mixed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    part = mixed / "index/part-00000.parquet"
    t = pq.read_table(part)
    off = t.column("image_off").to_pylist()
    off[5] = 10**12
    pq.write_table(
        t.set_column(t.schema.get_field_index("image_off"), "image_off", pa.array(off)), part
    )
    ds = Dataset.open(mixed)
    with pytest.raises(Exception, match="s0005") as err:
        ds[5]
    assert "shards/shard-00000.tar" in str(err.value) and "run verify()" in str(err.value)
    problems = ds.verify().problems
    assert any(p.sample_id == "s0005" for p in problems)
    # a side index that is a bomb or not the 0.1.1 shape: a problem of verify, no crash
    (mixed / "shards/shard-00000.tar.idx").write_text("[" * 100_000 + "]" * 100_000)
    kinds = {p.kind for p in Dataset.open(mixed).verify().problems}
    assert "side-index" in kinds
    from ferroload_format import _rs011

    monkeypatch.setattr(_rs011, "MAX_SIDE_INDEX_BYTES", 10)
    monkeypatch.setattr("ferroload_format._verify.MAX_SIDE_INDEX_BYTES", 10)
    assert any("limit" in p.message for p in Dataset.open(mixed).verify().problems)


def test_malformed_0_1_1_manifests_and_indexes_are_manifest_errors(mixed: Path) -> None:
    (mixed / "versions/v3.json").write_text("{not json")
    with pytest.raises(ManifestError, match=r"v3\.json"):
        Dataset.open(mixed)
    rs011 = mixed.parent / "dense"
    rs011_dataset("mixed", rs011)

    def gap(raw: dict) -> None:  # type: ignore[type-arg]
        raw["index_shards"][0]["start_id"] = 5

    _edit(rs011, gap)
    with pytest.raises(ManifestError, match="starts at 5"):
        Dataset.open(rs011)


@pytest.mark.s3
def test_a_0_1_1_root_on_s3_reads_and_upgrades(
    mixed: Path, moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in moto.environ().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex}/mixed"
    store = open_store(uri)
    for p in mixed.rglob("*"):
        if p.is_file():
            store.put(str(p.relative_to(mixed)), p.read_bytes())
    ds = Dataset.open(uri)
    assert len(ds) == 30 and ds.get(9, ["label", "note", "mask"]) == {
        "label": 4,
        "note": b"note 9",
        "mask": ds[9]["mask"],
    }
    assert ds.subset("square > 500", return_indices=True).tolist() == [23, 25, 27, 29]
    assert upgrade(uri).status == "upgraded"
    up = Dataset.open(uri)
    assert up.manifest.checksum_algorithm == "xxh3_64" and up.verify().ok
    assert up.to_table(["sample_id", "label", "square"]).equals(
        ds.to_table(["sample_id", "label", "square"])
    )
    assert [o.path for o in store.list("index/")] == ["index/part-0000000001.parquet"]


@pytest.fixture(scope="session")
def rs011_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python with the published ferroload-rs 0.1.1 (FERROLOAD_RS011_PYTHON, else a
    virtualenv of its own made with uv: the package names clash with ours)."""
    given = os.environ.get("FERROLOAD_RS011_PYTHON")
    if given:
        return given
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH; the README's set-up command installs it (pip install uv)")
    venv = tmp_path_factory.mktemp("rs011") / "venv"
    made = subprocess.run(
        [uv, "venv", "-q", "--no-config", "-p", sys.executable, str(venv)],
        capture_output=True,
        check=False,
    )
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    got = subprocess.run(
        [uv, "pip", "install", "-q", "--no-config", "ferroload==0.1.1", "numpy", "pillow"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if made.returncode or got.returncode:
        pytest.skip(
            f"{SERVICE_NOT_AVAILABLE}the ferroload==0.1.1 wheel could not be installed from PyPI "
            f"({got.stderr.strip()[-200:]}): give a Python that has it in FERROLOAD_RS011_PYTHON"
        )
    return str(venv / "bin" / "python")


def test_0_1_1_still_reads_an_upgraded_root(mixed: Path, rs011_python: str) -> None:
    upgrade(str(mixed))
    code = (
        "import ferroload, sys; ds = ferroload.Dataset.open(sys.argv[1]); "
        "print(len(ds), ds.verify(), ds.get(3)['meta']['square'])"
    )
    out = subprocess.run(
        [rs011_python, "-c", code, str(mixed)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["30", "30", "9"]


def test_odd_index_columns_are_manifest_errors(mixed: Path) -> None:
    import pyarrow.parquet as pq

    part = mixed / "index/part-00000.parquet"
    t = pq.read_table(part)
    pq.write_table(t.append_column("basename", t.column("basename")), part)
    with pytest.raises(ManifestError, match="'basename' more than once"):
        Dataset.open(mixed)
    off = t.column("image_off").to_pylist()
    off[2] = -1
    pq.write_table(
        t.set_column(t.schema.get_field_index("image_off"), "image_off", pa.array(off)), part
    )
    with pytest.raises(ManifestError, match="negative or half-null 'image' location"):
        Dataset.open(mixed)


def test_versions_keep_their_time_through_the_upgrade(mixed: Path) -> None:
    for p in (mixed / "versions").glob("v*.json"):
        os.utime(p, (1735787045, 1735787045))  # 2025-01-02T03:04:05Z
    times = [v.created_at for v in Dataset.open(mixed).versions()]
    assert times == ["2025-01-02T03:04:05.000000Z"] * 3
    upgrade(str(mixed))
    assert [v.created_at for v in Dataset.open(mixed).versions()] == times
    assert json.loads((mixed / "manifest.json").read_text())["created_utc"] == times[-1]


def test_a_side_index_member_out_of_the_root_is_a_verify_problem(mixed: Path) -> None:
    side = mixed / "shards/shard-00000.tar.idx"
    raw = json.loads(side.read_text())
    raw["members"]["../../etc/passwd.jpg"] = raw["members"].pop("s0001.jpg")
    side.write_text(json.dumps(raw))
    problems = Dataset.open(mixed).verify().problems
    assert [p.kind for p in problems] == ["unsafe-path"]
    assert Dataset.open(mixed)[1]["label"] == 1  # reads go by the index, never by member name


def test_several_base_shards_written_by_0_1_1(tmp_path: Path, rs011_python: str) -> None:
    """0.1.1's Python writer starts a shard at 512 MiB only: the fixture has one sample of
    512 MiB, so it is made here, not committed."""
    script = Path(__file__).parents[2] / "ferroload-testing" / "scripts" / "make_rs011_fixtures.py"
    made = subprocess.run(
        [rs011_python, str(script), str(tmp_path), "--big"], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr[-2000:]
    root = tmp_path / "multishard"
    ds = Dataset.open(root)
    assert len(ds) == 4 and ds.num_shards == 3
    assert ds.manifest.index_parts[0].num_rows == 4
    assert [ds.get(i, ["label"])["label"] for i in range(4)] == [0, 1, 2, 3]
    assert ds.get(3, ["image"])["image"][:2] == b"\xff\xd8"
    assert ds.sizes("blob").tolist() == [0, 512 << 20, 0, 0]
    assert ds.subset("label >= 2", return_indices=True).tolist() == [2, 3]
    report = upgrade(str(root), progress=False)
    assert report.bytes_read > 512 << 20 and report.bytes_written < 1 << 20
    up = Dataset.open(root)
    assert up.num_shards == 3 and up.get(2, ["label"]) == {"label": 2}
    assert _glob(root) == (4, 4)


def test_sample_ids_are_unique_and_valid_whatever_the_keys() -> None:
    from ferroload_format._names import SAMPLE_ID_RE
    from ferroload_format._rs011 import sample_ids

    long = "y" * 80
    keys = ["x", "x", "x~r1", "x", "", "a.b", "a~2eb", "é" * 60, long, long, f"{long}~r9", long]
    ids = sample_ids(keys)
    assert ids[:4] == ["x", "x~r1", "x~r1~r2", "x~r3"] and ids[4] == "~"
    assert ids[5:7] == ["a~2eb", "a~2eb~r6"]
    assert len(set(ids)) == len(ids) and all(SAMPLE_ID_RE.fullmatch(i) for i in ids)
    assert sample_ids(["s1", "s2"]) == ["s1", "s2"]


def test_a_current_manifest_naming_a_translated_part_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with Writer(str(root), "d") as w:
        w.add("a", {}, {"label": 1})
    key = root / "_ferroload/versions/0000000001.json"
    raw = json.loads(key.read_text())
    for name in (
        "_ferroload/rs011-view/x/v1/base.parquet",
        "_ferroload/rs011-view/x/v" + "9" * 5000 + "/b.parquet",
    ):
        raw["index_parts"][0]["path"] = raw["index_parts"][0]["staged"] = name
        key.write_text(json.dumps(raw))
        with pytest.raises(ManifestError, match="no translated index part"):
            Dataset.open(root)[0]


def test_a_folder_with_some_other_manifest_json_is_no_dataset(tmp_path: Path) -> None:
    from ferroload_format import NotADatasetError

    (tmp_path / "manifest.json").write_text('{"name": "my web app", "icons": []}')
    with pytest.raises(NotADatasetError):
        Dataset.open(tmp_path)
    with Writer(str(tmp_path), "d") as w:  # a dataset can be made there, as before
        w.add("a", {}, {"label": 1})
    assert len(Dataset.open(tmp_path)) == 1
