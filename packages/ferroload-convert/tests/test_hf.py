from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pytest
from _convert_data import flac_bytes, image_bytes, wav_bytes

from ferroload_convert import BadInputError, ConvertOptionError, InputNotFoundError, import_hf
from ferroload_format import Dataset, DatasetNotFoundError

datasets.disable_progress_bars()

N = 12


def make_hf(n: int = N) -> datasets.Dataset:
    """Images (PNG and JPEG, one missing), audio (WAV and FLAC), a class label, a string,
    a list and a dict per row. Audio is cast from its stored struct: encoding audio would
    need torchcodec."""
    features = datasets.Features(
        image=datasets.Image(),
        label=datasets.ClassLabel(names=["cat", "dog", "emu"]),
        caption=datasets.Value("string"),
        scores=datasets.Sequence(datasets.Value("float32")),
        info=datasets.Features({"w": datasets.Value("int32"), "src": datasets.Value("string")}),
        audio_raw=datasets.Features(
            {"bytes": datasets.Value("binary"), "path": datasets.Value("string")}
        ),
    )
    rows: dict[str, list[Any]] = {
        "image": [
            None if i == 3 else {"bytes": image_bytes(i, "JPEG" if i % 2 else "PNG"), "path": None}
            for i in range(n)
        ],
        "label": [i % 3 for i in range(n)],
        "caption": [f"caption {i}" if i != 5 else None for i in range(n)],
        "scores": [[i / 4, 0.1] for i in range(n)],
        "info": [{"w": i, "src": f"web/{i}"} for i in range(n)],
        "audio_raw": [
            {"bytes": wav_bytes(i) if i % 2 else flac_bytes(i), "path": f"clip{i}.x"}
            for i in range(n)
        ],
    }
    ds = datasets.Dataset.from_dict(rows, features=features)
    return ds.rename_column("audio_raw", "audio").cast_column("audio", datasets.Audio())


def stored(ds: datasets.Dataset) -> list[dict[str, Any]]:
    """The rows as Hugging Face stores them (no decoding)."""
    return ds.with_format("arrow")[:].to_pylist()  # type: ignore[no-any-return]


def check_equal(hf: datasets.Dataset, uri: Path, ids: list[str]) -> None:
    """Payloads equal HF's stored bytes; metadata equals the other columns."""
    ds = Dataset.open(uri)
    rows = list(ds)
    names = hf.features["label"].names
    assert [r["sample_id"] for r in rows] == ids
    for r, h in zip(rows, stored(hf), strict=True):
        assert r["image"] == (h["image"]["bytes"] if h["image"] else None)
        assert r["audio"] == h["audio"]["bytes"]
        assert r["audio_path"] == h["audio"]["path"]
        assert (r["label"], r["label_name"]) == (h["label"], names[h["label"]])
        assert (r["caption"], r["scores"], r["info"]) == (h["caption"], h["scores"], h["info"])


def test_in_memory_dataset_round_trips(tmp_path: Path) -> None:
    hf = make_hf()
    report = import_hf(hf, tmp_path / "ds", workers=3)
    assert report.num_samples == N
    assert dict(report.columns) == {
        "image": "image",
        "label": ["label", "label_name"],  # one input column, two dataset columns
        "caption": "caption",
        "scores": "scores",
        "info": "info",
        "audio": ["audio", "audio_path"],
    }
    ds = Dataset.open(tmp_path / "ds")
    mods = {m.name: (m.ext, m.kind, m.codec_hint) for m in ds.modalities}
    assert mods == {"image": ("png", "tensor", "image"), "audio": ("flac", "tensor", "audio")}
    assert "image_path" not in ds.metadata_columns  # every stored path is null
    check_equal(hf, tmp_path / "ds", [f"{i:08d}" for i in range(N)])
    assert ds.subset("label_name = 'dog'", return_indices=True).tolist() == [1, 4, 7, 10]


def test_save_to_disk_folders_and_splits(tmp_path: Path) -> None:
    hf = make_hf()
    dd = datasets.DatasetDict(train=hf, test=hf.select([5, 0, 7]))
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ConvertOptionError, match="no split 'valid'; its splits: train, test"):
        import_hf(tmp_path / "dd", tmp_path / "ds", split="valid")
    import_hf(tmp_path / "dd", tmp_path / "ds", split="test")
    check_equal(dd["test"], tmp_path / "ds", ["test-00000000", "test-00000001", "test-00000002"])

    hf.save_to_disk(str(tmp_path / "single"))
    import_hf(str(tmp_path / "single"), tmp_path / "ds2", id_column="caption", on_error="skip")
    ids = Dataset.open(tmp_path / "ds2").column("sample_id").to_pylist()
    assert ids == [f"caption_{i}" for i in range(N) if i != 5]  # row 5 has no caption

    with pytest.raises(InputNotFoundError):
        import_hf(tmp_path / "missing", tmp_path / "ds3")
    # a Hub name, as an HF user would try first: told how to pass it
    with pytest.raises(InputNotFoundError, match=r"import_hf\(datasets.load_dataset\('mnist'\)"):
        import_hf("mnist", tmp_path / "ds3")
    (tmp_path / "notsaved").mkdir()
    with pytest.raises(InputNotFoundError, match="save_to_disk"):
        import_hf(tmp_path / "notsaved", tmp_path / "ds3")


def test_cells_stored_as_paths_are_read_and_missing_files_are_bad_rows(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        files.append(tmp_path / f"img{i}.png")
        files[-1].write_bytes(image_bytes(i))
    files[2] = tmp_path / "gone.png"
    hf = datasets.Dataset.from_dict(
        {"image": [str(f) for f in files], "n": list(range(4))},
        features=datasets.Features(image=datasets.Image(), n=datasets.Value("int64")),
    )
    with pytest.raises(BadInputError) as err:
        import_hf(hf, tmp_path / "ds")
    assert (err.value.row, err.value.column) == (2, "image")
    assert str(files[2]) in str(err.value)
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")
    report = import_hf(hf, tmp_path / "ds", on_error="skip")
    assert [s.where for s in report.skipped] == ["<datasets.arrow_dataset.Dataset> (row 2)"]
    ds = Dataset.open(tmp_path / "ds")
    assert ds.column("n").to_pylist() == [0, 1, 3]
    assert ds.column("image_path").to_pylist() == [str(files[i]) for i in (0, 1, 3)]
    assert [ds.get(k)["image"] for k in range(3)] == [image_bytes(i) for i in (0, 1, 3)]


def test_damaged_image_row_is_named(tmp_path: Path) -> None:
    hf = make_hf(4)
    bad = hf.cast_column("image", datasets.Image(decode=False)).map(
        lambda row, i: (
            {"image": {"bytes": row["image"]["bytes"][:40], "path": None}} if i == 2 else row
        ),
        with_indices=True,
    )
    with pytest.raises(BadInputError) as err:
        import_hf(bad, tmp_path / "ds")
    where = "<datasets.arrow_dataset.Dataset>"
    assert f"row 2 of {where}: 'image' is not a usable image" in str(err.value)


def test_views_and_workers_give_the_same_dataset(tmp_path: Path) -> None:
    hf = make_hf(150).shuffle(seed=3)  # an indices mapping over the table
    calls: list[tuple[int, int | None]] = []
    import_hf(hf, tmp_path / "one", workers=1)
    import_hf(hf, tmp_path / "eight", workers=8, progress=lambda d, t: calls.append((d, t)))
    one, eight = Dataset.open(tmp_path / "one"), Dataset.open(tmp_path / "eight")
    assert list(one) == list(eight)
    assert one.column("caption").to_pylist() == hf["caption"]
    assert calls[-1] == (150, 150)


def test_dataset_dict_imports_every_split_with_a_split_column(tmp_path: Path) -> None:
    hf = make_hf()
    dd = datasets.DatasetDict(train=hf, test=hf.select([5, 0, 7]), valid=hf.select([1]))
    report = import_hf(dd, tmp_path / "all", workers=2)
    assert report.num_samples == N + 4
    ds = Dataset.open(tmp_path / "all")
    assert ds.column("split").to_pylist() == ["train"] * N + ["test"] * 3 + ["valid"]
    ids = ds.column("sample_id").to_pylist()
    assert ids[:2] == ["train-00000000", "train-00000001"]
    assert ids[N:] == ["test-00000000", "test-00000001", "test-00000002", "valid-00000000"]
    assert ds.column("caption").to_pylist()[N:] == [None, "caption 0", "caption 7", "caption 1"]
    assert ds.subset("split = 'test'", return_indices=True).tolist() == [N, N + 1, N + 2]

    # saved to disk, only the splits named: the same rows, in the order named
    dd.save_to_disk(str(tmp_path / "dd"))
    import_hf(tmp_path / "dd", tmp_path / "two", splits=["valid", "test"])
    two = Dataset.open(tmp_path / "two")
    assert two.column("split").to_pylist() == ["valid", "test", "test", "test"]
    assert two.column("label").to_pylist() == [1, 2, 0, 1]
    with pytest.raises(ConvertOptionError, match="no split 'dev'; its splits: train, test, valid"):
        import_hf(dd, tmp_path / "x", splits=["test", "dev"])
    with pytest.raises(ConvertOptionError, match="not both"):
        import_hf(dd, tmp_path / "x", split="test", splits=["test"])
    with pytest.raises(ConvertOptionError, match="splits= is empty"):
        import_hf(dd, tmp_path / "x", splits=[])
    with pytest.raises(ConvertOptionError, match="splits= selects splits of a DatasetDict"):
        import_hf(hf, tmp_path / "x", splits=["train"])


def test_ids_from_a_column_stay_unique_across_splits(tmp_path: Path) -> None:
    part = datasets.Dataset.from_dict({"key": ["a", "b"], "split": ["x", "y"]})
    dd = datasets.DatasetDict(train=part, test=part)
    report = import_hf(dd, tmp_path / "ds", id_column="key")
    ds = Dataset.open(tmp_path / "ds")
    assert ds.column("sample_id").to_pylist() == ["train-a", "train-b", "test-a", "test-b"]
    assert ds.column("split").to_pylist() == ["train", "train", "test", "test"]
    assert ds.column("src_split").to_pylist() == ["x", "y", "x", "y"]  # the input's own column
    assert report.columns["split"] == "src_split"
    # one split alone: no split column, ids as the column gives them (prefixed by nothing)
    import_hf(dd, tmp_path / "one", split="test", id_column="key")
    one = Dataset.open(tmp_path / "one")
    assert one.column("sample_id").to_pylist() == ["a", "b"]
    assert one.column("split").to_pylist() == ["x", "y"]


def test_splits_with_other_features_are_refused(tmp_path: Path) -> None:
    dd = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"text": ["a"], "n": [1]}),
        test=datasets.Dataset.from_dict({"text": ["b"], "n": [0.5]}),
    )
    with pytest.raises(ConvertOptionError, match=r"\[test\] has other features .* differ in n"):
        import_hf(dd, tmp_path / "ds")
    import_hf(dd, tmp_path / "ds", split="test")  # one at a time works
    assert Dataset.open(tmp_path / "ds").column("n").to_pylist() == [0.5]


def test_unsupported_objects_are_named_by_their_real_type(tmp_path: Path) -> None:
    hf = datasets.Dataset.from_dict({"text": ["a", "b"]})
    with pytest.raises(ConvertOptionError) as err:
        import_hf(hf.to_iterable_dataset(), tmp_path / "ds")
    assert "not a datasets.iterable_dataset.IterableDataset (a streaming dataset" in str(err.value)
    with pytest.raises(ConvertOptionError, match=r"not a builtins\.dict$"):
        import_hf({"text": ["a"]}, tmp_path / "ds")
    dd = datasets.DatasetDict(train=hf)
    with pytest.raises(ConvertOptionError, match=r"^<datasets\.dataset_dict\.DatasetDict> has no"):
        import_hf(dd, tmp_path / "ds", split="test")
