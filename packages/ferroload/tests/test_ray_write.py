"""`ferroload.ray.Sink` / `write` on a local two-CPU Ray cluster: every write task stages
its own shards, the driver commits them as one version."""

from __future__ import annotations

import io
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from PIL import Image

from ferroload_codec import ImageDecoder
from ferroload_format import Dataset, DatasetExistsError, InvalidModalityError, gc
from ferroload_store import open_store

pytestmark = pytest.mark.ray

ray = pytest.importorskip("ray", reason="the ray extra is not installed")
fray = pytest.importorskip("ferroload.ray")
# Ray workers cannot import this test module by name: its classes and functions travel
# by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8 + i % 5, 8), (i * 7 % 256, 40, 90)).save(buf, "PNG")
    return buf.getvalue()


def rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"sample_id": f"s{i:04d}", "image": png(i), "label": i % 4, "caption": f"c{i}"}
        for i in range(start, start + n)
    ]


def shard_txns(uri: str) -> set[str]:
    """The transactions whose shards the latest version lists."""
    return {s.path.rsplit("-", 1)[0] for s in Dataset.open(uri).manifest.inline_shards}


def test_write_tasks_stage_and_one_commit_publishes(ray_cluster: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = ray.data.from_items(rows(40), override_num_blocks=4)
    assert fray.write(ds, uri, shard_size=4096) == 1
    got = Dataset.open(uri)
    assert got.column("sample_id").to_pylist() == [f"s{i:04d}" for i in range(40)]
    assert [got.get(i)["image"] for i in (0, 17, 39)] == [png(0), png(17), png(39)]
    assert got.to_table(["label"]).column("label").to_pylist() == [i % 4 for i in range(40)]
    (image,) = got.modalities
    assert (image.name, image.ext, image.kind, image.codec_hint) == (
        "image",
        "png",
        "tensor",
        "image",
    )
    assert len(shard_txns(uri)) >= 2  # several tasks, each its own shards, one version
    assert [v.version for v in got.versions()] == [1]


def test_modes_and_auto_ids(ray_cluster: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    fray.write(ray.data.from_items(rows(6)), uri)
    with pytest.raises(Exception) as info:  # noqa: PT011 (Ray may wrap it)
        fray.write(ray.data.from_items(rows(2, 50)), uri)
    assert isinstance(info.value, DatasetExistsError) or "already holds" in str(info.value)
    no_ids = [{k: v for k, v in r.items() if k != "sample_id"} for r in rows(4, 100)]
    sink = fray.Sink(uri, mode="append")
    ray.data.from_items(no_ids, override_num_blocks=2).write_datasink(sink)
    assert sink.version == 2
    ids = Dataset.open(uri).column("sample_id").to_pylist()
    assert len(ids) == 10 == len(set(ids)) and all(i.count("-") == 2 for i in ids[6:])
    assert fray.write(ray.data.from_items(rows(3, 200)), uri, mode="overwrite") == 3
    assert len(Dataset.open(uri)) == 3


def _fail_on_block_2(batch: dict[str, Any]) -> dict[str, Any]:
    if "s0012" in list(batch["sample_id"]):
        raise ValueError("bad block")
    return batch


def test_a_failed_job_commits_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    fray.write(ray.data.from_items(rows(4)), uri)
    ds = ray.data.from_items(rows(20, 4), override_num_blocks=4).map_batches(_fail_on_block_2)
    with pytest.raises(Exception, match="bad block"):
        fray.write(ds, uri, mode="append")
    assert len(Dataset.open(uri)) == 4
    assert [v.version for v in Dataset.open(uri).versions()] == [1]


class KilledOnce(fray.Sink):  # type: ignore[misc,name-defined]
    """Kills its worker process after the first block of its first task's first attempt,
    with shards already written: Ray runs the task again."""

    def __init__(self, uri: str, marker: str) -> None:
        super().__init__(uri, shard_size=2048, min_rows_per_write=24)
        self.marker = marker

    def write(self, blocks: Any, ctx: Any) -> Any:
        if ctx.task_idx != 0 or os.path.exists(self.marker):
            return super().write(blocks, ctx)

        def first_then_die() -> Any:
            for i, block in enumerate(blocks):
                if i == 1:
                    Path(self.marker).touch()
                    os._exit(1)  # the worker dies mid-write, its shards left behind
                yield block

        return super().write(first_then_die(), ctx)


def test_a_task_killed_mid_write_is_retried_without_duplicates(
    ray_cluster: Any, tmp_path: Path
) -> None:
    uri, marker = str(tmp_path / "ds"), str(tmp_path / "killed")
    ds = ray.data.from_items(rows(48), override_num_blocks=8)
    sink = KilledOnce(uri, marker)
    ds.write_datasink(sink)
    assert os.path.exists(marker)  # the first attempt did die
    got = Dataset.open(uri)
    assert got.column("sample_id").to_pylist() == [f"s{i:04d}" for i in range(48)]
    assert got.get(5)["image"] == png(5)
    listed = {s.path for s in got.manifest.inline_shards}
    on_disk = {o.path for o in open_store(uri).list("shards/") if o.path.endswith(".tar")}
    assert listed < on_disk  # the dead attempt's shards: leftovers, not in the version
    gc(uri, grace=timedelta(0))
    assert {o.path for o in open_store(uri).list("shards/") if o.path.endswith(".tar")} == listed


def test_decoded_arrays_are_refused_naming_the_column(ray_cluster: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    fray.write(ray.data.from_items(rows(4)), uri)
    decoded = fray.read(uri, columns=["image"], decode={"image": ImageDecoder((8, 8))})
    with pytest.raises(ValueError, match=r"'image' holds .*\(decoded arrays\?\)"):
        fray.write(decoded, str(tmp_path / "copy"))


def test_a_block_without_a_modality_s_bytes_keeps_it_a_modality(tmp_path: Path) -> None:
    """A write task whose later block has only nulls in an image column (Arrow types it
    null there) still stores that column as the modality, absent in those samples."""
    from ferroload.ray._write import _Task
    from ferroload_format import commit_staged

    uri = str(tmp_path / "ds")
    task = _Task(fray.Sink(uri), 0)
    task.add(pa.table({"sample_id": ["a", "b"], "image": [png(0), png(1)]}))
    task.add(pa.table({"sample_id": ["c"], "image": pa.nulls(1)}))
    commit_staged(uri, [task.writer.stage()], mode="create")
    got = Dataset.open(uri)
    assert [m.name for m in got.modalities] == ["image"] and got.metadata_columns == ()
    assert got.present("image").tolist() == [True, True, False]


@pytest.mark.parametrize("spec", [{"kind": "tensor"}, "../x", {"ext": 5}])
def test_a_bad_modality_spec_is_refused_naming_the_column(spec: Any, tmp_path: Path) -> None:
    """`modalities=` is checked when the sink is made, not first in a write task."""
    with pytest.raises(InvalidModalityError, match="of modality 'image' is invalid") as info:
        fray.Sink(str(tmp_path / "ds"), modalities={"image": spec})
    assert info.value.column == "image"


def test_a_bad_shard_size_is_refused_before_any_task_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shard_size must be a positive number of bytes"):
        fray.Sink(str(tmp_path / "ds"), shard_size=0).on_write_start(None)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("meta", [b"{not json", b"[1, 2]", b"7"])
def test_bad_modality_field_metadata_is_refused_naming_the_column(
    meta: bytes, tmp_path: Path
) -> None:
    """A column's `ferroload.modality` metadata that is no modality raised a bare
    JSONDecodeError (or a TypeError) from inside a write task."""
    from ferroload.ray._read import MODALITY_KEY
    from ferroload.ray._write import _Task

    field = pa.field("image", pa.binary(), metadata={MODALITY_KEY: meta})
    table = pa.table({"sample_id": ["a"], "image": [png(0)]}, schema=pa.schema(
        [pa.field("sample_id", pa.string()), field]))  # fmt: skip
    with pytest.raises(InvalidModalityError, match=r"column 'image' has 'ferroload\.modality'"):
        _Task(fray.Sink(str(tmp_path / "ds")), 0).add(table)
