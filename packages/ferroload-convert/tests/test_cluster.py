"""Imports run as tasks on an executor (`executor=`): one commit, and the same dataset as
the one-machine import, sample for sample, whatever order the tasks finish in."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _convert_data import image_bytes
from test_webdataset import write_tar

from ferroload_convert import (
    BadInputError,
    export_webdataset,
    import_hf,
    import_image_folder,
    import_parquet,
    import_webdataset,
)
from ferroload_format import Dataset, DatasetNotFoundError, Writer
from ferroload_store import open_store

T = TypeVar("T")
R = TypeVar("R")


class Shuffled:
    """An executor that runs every task on a copy that went through pickle (as on a
    worker), last task first: results come out of order."""

    def __init__(self) -> None:
        self.rounds: list[int] = []

    def run(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        self.rounds.append(len(items))
        # a task carries its own units only, not the whole input's
        assert all(not item.job.units for item in items)
        for item in reversed(list(items)):
            yield pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(item)))))


def same(a: Path, b: Path) -> None:
    """Both datasets hold the same samples in the same order, with the same schema."""
    x, y = Dataset.open(a), Dataset.open(b)
    assert [(m.name, m.ext, m.kind, m.codec_hint) for m in x.modalities] == [
        (m.name, m.ext, m.kind, m.codec_hint) for m in y.modalities
    ]
    assert x.schema.remove_metadata() == y.schema.remove_metadata()
    assert list(x) == list(y)


def report_fields(report: Any) -> tuple[Any, ...]:
    return (report.num_samples, report.num_bytes, report.num_skipped, report.num_ignored,
            dict(report.columns), [tuple(s) for s in report.skipped])  # fmt: skip


def test_webdataset_on_tasks_equals_one_machine(tmp_path: Path) -> None:
    src = tmp_path / "src"
    # keys repeated across tars (ids get #2 in input order), extensions met in different
    # orders (jpg, then JPG named jpg_2 only after it), a bad tar, ignored members
    write_tar(
        src / "0.tar", [("a.png", image_bytes(0)), ("a.cls", b"1"), ("b.png", image_bytes(1))]
    )
    write_tar(src / "1.tar", [("a.JPG", image_bytes(2, "JPEG")), ("c.png", image_bytes(3))])
    write_tar(
        src / "2.tar", [("a.jpg", image_bytes(4, "JPEG")), ("a.txt", b"hi"), ("README", b"x")]
    )
    (src / "3.tar").write_bytes(b"not a tar at all" * 100)
    write_tar(src / "4.tar", [("b.png", image_bytes(5)), ("d.JPG", image_bytes(6, "JPEG"))])
    one = import_webdataset(src, tmp_path / "one", on_error="skip", workers=2)
    executor = Shuffled()
    many = import_webdataset(src, tmp_path / "many", on_error="skip", executor=executor)
    same(tmp_path / "one", tmp_path / "many")
    assert report_fields(one) == report_fields(many)
    assert many.version == 1 and executor.rounds[0] == 5
    assert len(executor.rounds) > 1  # a repeated key and a name taken: chunks ran again
    assert Dataset.open(tmp_path / "many").column("sample_id").to_pylist()[:4] == [
        "a",
        "b",
        "a#2",
        "c",
    ]


def test_webdataset_with_markers_on_tasks(tmp_path: Path) -> None:
    """A ferroload export (every tar has a `__ferroload__` marker with the columns)."""
    with Writer(tmp_path / "orig", "orig") as w:
        w.declare("image", "png", "tensor", "image")
        for i in range(9):
            w.add(f"s{i}", {"image": image_bytes(i)}, {"label": i % 3, "score": i / 4})
    export_webdataset(tmp_path / "orig", tmp_path / "tars", samples_per_shard=3)
    import_webdataset(tmp_path / "tars", tmp_path / "one")
    executor = Shuffled()
    import_webdataset(tmp_path / "tars", tmp_path / "many", executor=executor)
    same(tmp_path / "one", tmp_path / "many")
    assert len(executor.rounds) <= 2  # at most one round of re-runs


def test_image_folder_on_tasks(tmp_path: Path) -> None:
    for cls in ("cat", "dog"):
        for i in range(5):
            fmt = "JPEG" if i % 2 else "PNG"
            (tmp_path / "src" / cls).mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / cls / f"x{i // 2}.{fmt.lower()}").write_bytes(image_bytes(i, fmt))
    (tmp_path / "src" / "cat" / "notes.txt").write_text("ignored")
    one = import_image_folder(tmp_path / "src", tmp_path / "one")
    many = import_image_folder(
        tmp_path / "src", tmp_path / "many", executor=Shuffled(), chunk_size=3
    )
    same(tmp_path / "one", tmp_path / "many")
    assert report_fields(one) == report_fields(many)

    # in splits (src/<split>/<class>/…): the split column alike
    (tmp_path / "split").mkdir()
    for split in ("train", "val"):
        shutil.copytree(tmp_path / "src", tmp_path / "split" / split)
    one = import_image_folder(tmp_path / "split", tmp_path / "one-split")
    many = import_image_folder(
        tmp_path / "split", tmp_path / "many-split", executor=Shuffled(), chunk_size=3
    )
    same(tmp_path / "one-split", tmp_path / "many-split")
    assert "split" in Dataset.open(tmp_path / "many-split").columns


def test_parquet_and_appends_on_tasks(tmp_path: Path) -> None:
    for f in range(3):
        table = pa.table({
            "key": [f"k{i % 4}" for i in range(6)],  # the same keys in every file
            "blob": [image_bytes(f * 6 + i) for i in range(6)],
            "n": list(range(6)),
        })  # fmt: skip
        pq.write_table(table, tmp_path / f"part-{f}.parquet")
    for dst, executor in (("one", None), ("many", Shuffled())):
        import_parquet(tmp_path / "part-0.parquet", tmp_path / dst, id_column="key")
        import_parquet(sorted(map(str, tmp_path.glob("*.parquet"))), tmp_path / dst,
                       id_column="key", mode="append", executor=executor)  # fmt: skip
    same(tmp_path / "one", tmp_path / "many")
    assert len(Dataset.open(tmp_path / "many").versions()) == 2


def test_hf_rows_on_tasks(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"id": [f"r{i % 700}" for i in range(2100)], "text": [str(i) for i in range(2100)]}
    ds = datasets.Dataset.from_dict(rows)
    import_hf(ds, tmp_path / "one", id_column="id")
    executor = Shuffled()
    import_hf(ds, tmp_path / "many", id_column="id", executor=executor, chunk_size=1)
    same(tmp_path / "one", tmp_path / "many")
    assert executor.rounds[0] == 3  # units of 1,024 rows


def test_a_failed_task_commits_nothing_and_leaves_no_shard(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tar(src / "0.tar", [("a.png", image_bytes(0))])
    write_tar(src / "1.tar", [("b.png", b"\x89PNG\r\n\x1a\n broken")])
    with pytest.raises(BadInputError, match="b"):
        import_webdataset(src, tmp_path / "dst", executor=Shuffled())
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "dst")
    assert not [o for o in open_store(tmp_path / "dst").list("") if o.path.endswith(".tar")]


def test_bad_chunk_size(tmp_path: Path) -> None:
    write_tar(tmp_path / "src" / "0.tar", [("a.png", image_bytes(0))])
    with pytest.raises(ValueError, match="chunk_size"):
        import_webdataset(tmp_path / "src", tmp_path / "dst", executor=Shuffled(), chunk_size=0)
