from __future__ import annotations

import datetime
import decimal
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _convert_data import image_bytes, wav_bytes

from ferroload_convert import BadInputError, ConvertOptionError, import_parquet
from ferroload_format import Dataset, DatasetNotFoundError


def make_table(start: int, n: int) -> pa.Table:
    rows = range(start, start + n)
    return pa.table(
        {
            "key": [f"item/{i}" for i in rows],
            "Image": [image_bytes(i, "JPEG") for i in rows],
            "audio": pa.array([wav_bytes(i) if i % 4 else None for i in rows], pa.large_binary()),
            "label": pa.array([i % 5 for i in rows], pa.int32()),
            "caption": [f"c{i}" if i % 3 else None for i in rows],
            "box": [[float(i), 1.5] for i in rows],
            "image": [f"meta named like a modality {i}" for i in rows],
            "sample_id": [i * 10 for i in rows],
        }
    )


def write_files(root: Path) -> list[pa.Table]:
    tables = [make_table(0, 300), make_table(300, 7)]
    (root / "b").mkdir(parents=True)
    pq.write_table(tables[0], root / "a.parquet", row_group_size=100)
    pq.write_table(tables[1], root / "b" / "part-0.parquet")
    (root / "notes.txt").write_text("ignored")
    return tables


def test_binary_columns_and_metadata_equal_the_input(tmp_path: Path) -> None:
    tables = write_files(tmp_path / "src")
    report = import_parquet(tmp_path / "src", tmp_path / "ds", workers=2)
    assert report.num_samples == 307
    assert dict(report.columns) == {
        "key": "key",
        "Image": "image",
        "audio": "audio",
        "label": "label",
        "caption": "caption",
        "box": "box",
        "image": "src_image",  # the modality has the name
        "sample_id": "src_sample_id",  # reserved
    }
    ds = Dataset.open(tmp_path / "ds")
    mods = {m.name: (m.ext, m.kind, m.codec_hint) for m in ds.modalities}
    assert mods == {"image": ("jpg", "tensor", "image"), "audio": ("wav", "tensor", "audio")}
    ids = ds.column("sample_id").to_pylist()
    assert ids[:2] == ["a-000000", "a-000001"] and ids[-1] == "b~part-0-000006"
    source = pa.concat_tables(tables).to_pylist()
    rows = list(ds)
    for r, s in zip(rows, source, strict=True):
        assert (r["image"], r["audio"]) == (s["Image"], s["audio"])  # a null cell: absent
        assert (r["key"], r["label"], r["caption"], r["box"]) == (
            s["key"],
            s["label"],
            s["caption"],
            s["box"],
        )
        assert (r["src_image"], r["src_sample_id"]) == (s["image"], s["sample_id"])


def test_id_column_and_explicit_binary_columns(tmp_path: Path) -> None:
    write_files(tmp_path / "src")
    import_parquet(
        [tmp_path / "src" / "b" / "part-0.parquet", tmp_path / "src" / "a.parquet"],
        tmp_path / "ds",
        id_column="key",
        binary_columns={"audio": "wav"},
    )
    ds = Dataset.open(tmp_path / "ds")
    assert [m.name for m in ds.modalities] == ["audio"]
    assert ds.column("sample_id").to_pylist()[:3] == ["item~300", "item~301", "item~302"]
    assert ds.get(0, ["Image"])["Image"] == image_bytes(300, "JPEG")  # binary metadata
    with pytest.raises(ConvertOptionError, match="nope"):
        import_parquet(tmp_path / "src", tmp_path / "ds2", id_column="nope")
    with pytest.raises(ConvertOptionError, match="nope"):
        import_parquet(tmp_path / "src", tmp_path / "ds2", binary_columns={"nope": "bin"})


def test_types_without_a_metadata_form_are_cast(tmp_path: Path) -> None:
    table = pa.table(
        {
            "when": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5), None], pa.timestamp("us")),
            "day": pa.array([datetime.date(2024, 1, 2), datetime.date(1999, 12, 31)]),
            "price": pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50")]),
            "half": pa.array([1.5, 2.25], pa.float16()),
            "cat": pa.array(["a", "b"]).dictionary_encode(),
            "tags": pa.array([{"x": 1}, {}], pa.map_(pa.string(), pa.int64())),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    import_parquet(tmp_path / "t.parquet", tmp_path / "ds")
    rows = Dataset.open(tmp_path / "ds").to_table().drop_columns(["shard"]).to_pylist()
    assert rows == [
        {
            "sample_id": "t-000000",
            "when": "2024-01-02 03:04:05.000000",
            "day": "2024-01-02",
            "price": "1.25",
            "half": 1.5,
            "cat": "a",
            "tags": [{"key": "x", "value": 1}],
        },
        {
            "sample_id": "t-000001",
            "when": None,
            "day": "1999-12-31",
            "price": "-3.50",
            "half": 2.25,
            "cat": "b",
            "tags": [],
        },
    ]


def test_bad_rows_and_files(tmp_path: Path) -> None:
    table = make_table(0, 20)
    images = table.column("Image").to_pylist()
    images[13] = images[13][:50]
    table = table.set_column(1, "Image", pa.array(images))
    pq.write_table(table, tmp_path / "a.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    with pytest.raises(BadInputError) as err:
        import_parquet(tmp_path / "a.parquet", tmp_path / "ds")
    assert (err.value.path, err.value.row, err.value.column) == (
        str(tmp_path / "a.parquet"),
        13,
        "Image",
    )
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")
    with pytest.raises(BadInputError, match="not a readable Parquet file"):
        import_parquet(tmp_path, tmp_path / "ds")
    report = import_parquet(tmp_path, tmp_path / "ds", on_error="skip")
    assert report.num_samples == 19
    # footers are read first, then rows
    assert [s.where for s in report.skipped] == [
        str(tmp_path / "broken.parquet"),
        f"{tmp_path / 'a.parquet'} (row 13)",
    ]
    keys = Dataset.open(tmp_path / "ds").column("key").to_pylist()
    assert keys == [f"item/{i}" for i in range(20) if i != 13]


def test_same_dataset_whatever_the_workers(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    for k in range(5):
        pq.write_table(
            make_table(k * 60, 60), tmp_path / "src" / f"p{k}.parquet", row_group_size=17
        )
    calls: list[tuple[int, int | None]] = []
    import_parquet(tmp_path / "src" / "p*.parquet", tmp_path / "one", workers=1)
    import_parquet(
        tmp_path / "src", tmp_path / "eight", workers=8, progress=lambda d, t: calls.append((d, t))
    )
    assert list(Dataset.open(tmp_path / "one")) == list(Dataset.open(tmp_path / "eight"))
    assert calls[-1] == (300, 300)


def test_duplicate_column_names_are_a_bad_input_naming_file_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "src" / "a-dup.parquet"
    bad.parent.mkdir()
    dup = pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["n", "n"])
    pq.write_table(dup, bad)
    pq.write_table(pa.table({"n": [3]}), tmp_path / "src" / "b-ok.parquet")
    with pytest.raises(BadInputError, match="column named 'n'") as info:
        import_parquet(tmp_path / "src", tmp_path / "ds")
    assert info.value.path == str(bad)
    assert info.value.column == "n"
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")
    report = import_parquet(tmp_path / "src", tmp_path / "ds", on_error="skip")
    assert report.num_samples == 1
    assert [s.where for s in report.skipped] == [str(bad)]
    assert Dataset.open(tmp_path / "ds").column("n").to_pylist() == [3]


def test_file_names_that_are_not_utf8_are_bad_inputs(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"n": [1]}), tmp_path / "src" / "a.parquet")
    pq.write_table(pa.table({"n": [2]}), tmp_path / "src" / "b.parquet")
    raw = os.fsencode(tmp_path / "src")
    try:
        os.rename(os.path.join(raw, b"b.parquet"), os.path.join(raw, b"\xff.parquet"))
    except OSError as exc:  # pragma: no cover - file systems that only store UTF-8 names
        pytest.skip(f"this file system refuses names that are not UTF-8: {exc}")
    with pytest.raises(BadInputError, match=re.escape(repr(raw + b"/\xff.parquet"))):
        import_parquet(tmp_path / "src", tmp_path / "ds")
    report = import_parquet(tmp_path / "src", tmp_path / "ds", on_error="skip")
    assert report.num_samples == 1
    assert [s.where for s in report.skipped] == [f"{tmp_path / 'src'}/\\xff.parquet"]


def test_files_a_folder_search_passes_over_are_named(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "src" / "part-0.parquet")
    (tmp_path / "src" / "_SUCCESS").write_text("")
    report = import_parquet(tmp_path / "src", tmp_path / "ds")
    assert report.num_samples == 2
    assert report.ignored == (
        (str(tmp_path / "src" / "_SUCCESS"),
         "not one of the Parquet files (names ending in .parquet, .parq, .pq)"),
    )  # fmt: skip
