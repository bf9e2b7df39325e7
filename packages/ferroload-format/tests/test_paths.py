"""Issue 13: no path read from a dataset leads outside its root (docs/format.md, "Paths").

Each test writes a real dataset with `Writer`, then tampers with its manifest or files
the way a stranger's bucket could, and checks for the clear error, or that nothing
outside the root is read, published or deleted.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ferroload_core import FerroloadError, UnsafePathError
from ferroload_format import Dataset, Writer, gc
from ferroload_format._layer_parts import PARTITION_META, partition_shard
from ferroload_store import open_store

MANIFEST = "_ferroload/versions/0000000001.json"
PART = "index/part-0000000001.parquet"


def write(uri: str) -> None:
    w = Writer(uri, "demo")
    w.declare("blob", "bin")
    for i in range(3):
        w.add(f"s{i}", {"blob": f"blob-{i}".encode() * 8}, {"label": i})
    w.close()


def tamper(uri: str, change: Any) -> None:
    """Rewrite the manifest of version 1 with `change(manifest_json)` applied."""
    store = open_store(uri)
    raw = json.loads(store.get(MANIFEST))
    change(raw)
    store.put(MANIFEST, json.dumps(raw).encode())


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 4)
    return d


BAD = [
    "/etc/passwd",
    "../secret.txt",
    "../other/index/part-0000000001.parquet",
    "s3://b/x",
    "a\x00b",
]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("shards", "path"),
        ("shards", "side_index"),
        ("index_parts", "path"),
        ("index_parts", "staged"),
    ],
)
def test_a_manifest_path_that_leaves_the_root_is_refused_on_open(
    uri: str, section: str, key: str, bad: str
) -> None:
    write(uri)

    def change(raw: dict[str, Any]) -> None:
        raw[section][0][key] = bad
        if section == "shards" and key == "path":
            raw[section][0]["size"] = 32

    tamper(uri, change)
    with pytest.raises(UnsafePathError) as info:
        Dataset.open(uri).get(0, ["blob"])
    err = info.value
    assert isinstance(err, FerroloadError)
    assert isinstance(err, ValueError)
    assert err.path == bad
    assert "manifest" in err.what
    assert MANIFEST in str(err)


def test_an_absolute_shard_path_never_reads_the_file(local_uri: str, outside: Path) -> None:
    write(local_uri)
    secret = str(outside / "secret.txt")

    def change(raw: dict[str, Any]) -> None:
        raw["shards"][0].update(path=secret, size=32)

    tamper(local_uri, change)
    with pytest.raises(UnsafePathError, match="absolute"):
        Dataset.open(local_uri).get(0, ["blob"])


def test_a_shard_replaced_by_a_symlink_out_of_the_root_is_not_read(
    local_uri: str, outside: Path
) -> None:
    write(local_uri)
    shard = Dataset.open(local_uri).manifest.shards[0].path
    target = Path(local_uri) / shard
    target.unlink()
    os.symlink(outside / "secret.txt", target)
    with pytest.raises(UnsafePathError, match="symlink"):
        Dataset.open(local_uri).get(0, ["blob"])


def test_gc_and_writer_never_publish_a_staged_part_from_outside(
    local_uri: str, outside: Path
) -> None:
    write(local_uri)
    (Path(local_uri) / PART).unlink()  # as if its writer died between commit and publish

    def change(raw: dict[str, Any]) -> None:
        raw["index_parts"][0]["staged"] = str(outside / "secret.txt")

    tamper(local_uri, change)
    with pytest.raises(UnsafePathError, match="staged path"):
        gc(local_uri, grace=timedelta(0))
    assert not (Path(local_uri) / PART).exists()
    with pytest.raises(UnsafePathError, match="staged path"):  # when it opens, or commits
        w = Writer(local_uri, "demo")
        w.declare("blob", "bin")
        w.add("s9", {"blob": b"x"})
        w.close()
    assert not (Path(local_uri) / PART).exists()


def _age(path: Path) -> None:
    old = time.time() - 7200
    os.utime(path, (old, old), follow_symlinks=True)


def test_gc_does_not_follow_a_symlinked_folder(local_uri: str, outside: Path) -> None:
    write(local_uri)
    _age(outside / "secret.txt")
    os.symlink(outside, Path(local_uri) / "shards" / "link")
    report = gc(local_uri, grace=timedelta(0))
    assert not any("link" in p for p in report.deleted)
    assert (outside / "secret.txt").exists()
    assert len(Dataset.open(local_uri)) == 3


def test_gc_does_not_follow_a_symlinked_staging_folder(local_uri: str, outside: Path) -> None:
    write(local_uri)
    _age(outside / "secret.txt")
    staging = Path(local_uri) / "_ferroload" / "staging"
    if staging.exists():
        staging.rmdir()
    os.symlink(outside, staging)
    report = gc(local_uri, grace=timedelta(0))
    assert report.deleted == []
    assert (outside / "secret.txt").exists()


def test_a_staged_partition_naming_an_unsafe_shard_is_refused() -> None:
    import pyarrow as pa

    meta = {
        "shard": {
            "path": "../../elsewhere.tar",
            "side_index": "x.idx.parquet",
            "size": 1,
            "num_samples": 1,
            "num_members": 1,
            "version": 0,
        }
    }
    table = pa.table({"sample_id": ["a"]}).replace_schema_metadata(
        {PARTITION_META: json.dumps(meta).encode()}
    )
    with pytest.raises(UnsafePathError, match="elsewhere"):
        partition_shard(table, where="staged partition p")


def test_verify_reports_a_shard_symlinked_out_of_the_root(local_uri: str, outside: Path) -> None:
    write(local_uri)
    shard = Dataset.open(local_uri).manifest.shards[0].path
    (Path(local_uri) / shard).unlink()
    os.symlink(outside / "secret.txt", Path(local_uri) / shard)
    report = Dataset.open(local_uri).verify()
    assert [p.kind for p in report.problems] == ["unsafe-path"]
    assert report.problems[0].shard == shard
    assert "symlink" in report.problems[0].message


def test_verify_reports_a_side_index_member_that_leaves_the_root(local_uri: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    write(local_uri)
    shard = Dataset.open(local_uri).manifest.shards[0]
    side = Path(local_uri) / shard.side_index
    table = pq.read_table(side)
    members = table.column("member").to_pylist()
    members[0] = "../../etc/passwd"
    i = table.schema.get_field_index("member")
    pq.write_table(table.set_column(i, "member", pa.array(members, pa.string())), side)
    report = Dataset.open(local_uri).verify()
    unsafe = [p for p in report.problems if p.kind == "unsafe-path"]
    assert len(unsafe) == 1
    assert "../../etc/passwd" in unsafe[0].message
    assert shard.side_index in unsafe[0].message


def test_an_index_part_symlinked_out_of_the_root_is_not_read(
    local_uri: str, tmp_path: Path
) -> None:
    write(local_uri)
    other = str(tmp_path / "other")
    write(other)  # another dataset's part, a valid Parquet index
    part = Path(local_uri) / PART
    part.unlink()
    os.symlink(Path(other) / PART, part)
    with pytest.raises(UnsafePathError, match="symlink"):
        Dataset.open(local_uri).get(0, ["blob"])


def test_a_writer_does_not_write_through_a_symlinked_folder(local_uri: str, outside: Path) -> None:
    write(local_uri)
    shards = Path(local_uri) / "shards"
    for f in shards.iterdir():
        f.rename(outside / f.name)
    shards.rmdir()
    os.symlink(outside, shards)
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(UnsafePathError, match="symlink"):
        w = Writer(local_uri, "demo")
        w.declare("blob", "bin")
        w.add("s9", {"blob": b"x"})
        w.close()
    assert sorted(p.name for p in outside.iterdir()) == before


def _layer(uri: str) -> Any:
    from ferroload_format import LayerWriter, Modality

    lw = LayerWriter(
        Dataset.open(uri),
        "derived",
        identity="v1",
        columns={},
        modalities=[Modality("thumb", "bin")],
    )
    lw.write_partition(0, np.arange(3, dtype=np.int64), {}, {"thumb": [b"a", b"bb", b"ccc"]})
    return lw


def test_a_staged_layer_partition_naming_a_shard_outside_is_refused(local_uri: str) -> None:
    import pyarrow.parquet as pq

    write(local_uri)
    lw = _layer(local_uri)
    staged = Path(local_uri) / "layers/derived/_staging/v1/part-00000.parquet"
    table = pq.read_table(staged)
    meta = dict(table.schema.metadata)
    info = json.loads(meta[PARTITION_META])
    info["shard"]["path"] = "../../elsewhere.tar"
    meta[PARTITION_META] = json.dumps(info).encode()
    pq.write_table(table.replace_schema_metadata(meta), staged)
    with pytest.raises(UnsafePathError, match=r"elsewhere\.tar.*part-00000\.parquet"):
        lw.commit(1)


def test_a_layer_path_in_the_manifest_that_leaves_the_root_is_refused(uri: str) -> None:
    write(uri)
    _layer(uri).commit(1)
    store = open_store(uri)
    key = "_ferroload/versions/0000000002.json"
    raw = json.loads(store.get(key))
    raw["layers"][0]["shards"][0]["path"] = "/etc/passwd"
    store.put(key, json.dumps(raw).encode())
    with pytest.raises(UnsafePathError, match="layer 'derived'") as info:
        Dataset.open(uri)
    assert info.value.path == "/etc/passwd"
