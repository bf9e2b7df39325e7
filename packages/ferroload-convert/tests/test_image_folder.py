from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from _convert_data import files_under, image_bytes

from ferroload_convert import (
    BadInputError,
    ConvertOptionError,
    InputNotFoundError,
    OutputExistsError,
    export_image_folder,
    import_image_folder,
)
from ferroload_format import Dataset, DatasetNotFoundError, Writer


def make_folder(root: Path) -> dict[str, bytes]:
    """An image folder with three classes (one empty), nested folders, mixed formats and
    case, odd names, and a few files that are not images. Returns its images."""
    images = {
        "cat/001.jpg": image_bytes(1, "JPEG"),
        "cat/002.JPG": image_bytes(2, "JPEG"),
        "cat/sub/deep/003.png": image_bytes(3),
        "cat/été 4.v2.jpeg": image_bytes(4, "JPEG"),
        "dog/001.jpg": image_bytes(5, "JPEG"),
        "dog/a-b.webp": image_bytes(6, "WEBP"),
        "dog/x.bmp": image_bytes(7, "BMP"),
        "dog/y.gif": image_bytes(8, "GIF"),
        "dog/z.tiff": image_bytes(9, "TIFF"),
    }
    for rel, data in images.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "bird").mkdir()  # an empty class: still numbered
    (root / "README.txt").write_text("not a class")
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "dog" / ".hidden.jpg").write_bytes(b"hidden")
    return images


def test_import_records_labels_classes_and_paths(tmp_path: Path) -> None:
    images = make_folder(tmp_path / "src")
    report = import_image_folder(tmp_path / "src", tmp_path / "ds")
    assert (report.num_samples, report.num_skipped, report.version) == (9, 0, 1)
    assert report.num_ignored == 3  # README.txt, notes.txt, .hidden.jpg
    assert report.num_bytes == sum(len(b) for b in images.values())
    ds = Dataset.open(tmp_path / "ds")
    assert [(m.name, m.ext, m.kind, m.codec_hint) for m in ds.modalities] == [
        ("image", "jpg", "tensor", "image")
    ]
    rows = list(ds)
    # sorted path order within sorted classes; the empty "bird" is class 0
    assert [r["path"] for r in rows] == sorted(images, key=lambda p: Path(p).parts)
    assert {r["class_name"]: r["label"] for r in rows} == {"cat": 1, "dog": 2}
    for r in rows:
        assert r["image"] == images[r["path"]]
    ids = [r["sample_id"] for r in rows]
    assert ids[:4] == ["cat~001", "cat~002", "cat~sub~deep~003", "cat~_t__4_v2"]
    assert len(set(ids)) == len(ids)


def test_import_export_round_trip_is_byte_identical(tmp_path: Path) -> None:
    images = make_folder(tmp_path / "src")
    import_image_folder(tmp_path / "src", tmp_path / "ds", workers=3)
    report = export_image_folder(tmp_path / "ds", tmp_path / "out")
    assert (report.num_samples, report.num_files) == (9, 9)
    assert files_under(tmp_path / "out") == images
    # the exported folder imports to the same dataset (ids, bytes, metadata)
    import_image_folder(tmp_path / "out", tmp_path / "ds2")
    a, b = list(Dataset.open(tmp_path / "ds")), list(Dataset.open(tmp_path / "ds2"))
    assert [{k: v for k, v in r.items() if k != "label"} for r in a] == [
        {k: v for k, v in r.items() if k != "label"} for r in b
    ]  # labels differ only because the empty "bird" is not exported


def make_split_folder(root: Path) -> dict[str, bytes]:
    """`root/<split>/<class>/…`, as Hugging Face's imagefolder reads splits: a class
    only in `val`, a file beside the class folders of a split."""
    images = {
        "train/cat/1.png": image_bytes(1),
        "train/dog/2.jpg": image_bytes(2, "JPEG"),
        "train/dog/deep/3.png": image_bytes(3),
        "val/ant/4.png": image_bytes(4),
        "val/cat/5.png": image_bytes(5),
        "Test/dog/6.png": image_bytes(6),
    }
    for rel, data in images.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "train" / "notes.txt").write_text("beside the classes")
    return images


def test_a_folder_of_splits_gets_a_split_column(tmp_path: Path) -> None:
    """`train/cat/…` and `val/cat/…` were read as the classes `train` and `val`: every
    label was the split's."""
    images = make_split_folder(tmp_path / "src")
    report = import_image_folder(tmp_path / "src", tmp_path / "ds")
    assert report.columns["<split folder>"] == "split"
    assert [i.where for i in report.ignored] == [str(tmp_path / "src" / "train" / "notes.txt")]
    rows = (
        Dataset.open(tmp_path / "ds")
        .to_table(["sample_id", "split", "class_name", "label", "path"])
        .to_pylist()
    )
    assert [(r["split"], r["class_name"], r["label"]) for r in rows] == [
        ("Test", "dog", 2), ("train", "cat", 1), ("train", "dog", 2), ("train", "dog", 2),
        ("val", "ant", 0), ("val", "cat", 1),
    ]  # fmt: skip  # one numbering over every split's classes
    assert rows[3] == {"sample_id": "train~dog~deep~3", "split": "train",
                       "class_name": "dog", "label": 2, "path": "train/dog/deep/3.png"}  # fmt: skip
    # export writes <split>/<class>/…: the same folder, byte for byte
    export_image_folder(tmp_path / "ds", tmp_path / "out")
    assert files_under(tmp_path / "out") == images

    # splits=False: torchvision's ImageFolder on the root (the splits are the classes)
    import_image_folder(tmp_path / "src", tmp_path / "flat", splits=False)
    flat = Dataset.open(tmp_path / "flat")
    assert "split" not in flat.columns
    assert sorted(set(flat.column("class_name").to_pylist())) == ["Test", "train", "val"]


def test_split_layout_is_read_only_when_every_folder_is_a_split(tmp_path: Path) -> None:
    make_split_folder(tmp_path / "src")
    (tmp_path / "src" / "extra").mkdir()
    (tmp_path / "src" / "extra" / "7.png").write_bytes(image_bytes(7))
    import_image_folder(tmp_path / "src", tmp_path / "ds")  # `extra` is no split: classes
    assert "split" not in Dataset.open(tmp_path / "ds").columns
    with pytest.raises(InputNotFoundError, match="'extra' is not named as a split"):
        import_image_folder(tmp_path / "src", tmp_path / "ds2", splits=True)
    # a split folder with images but no class folders is not the layout either
    (tmp_path / "flat" / "train").mkdir(parents=True)
    (tmp_path / "flat" / "train" / "1.png").write_bytes(image_bytes(1))
    import_image_folder(tmp_path / "flat", tmp_path / "ds3")
    assert Dataset.open(tmp_path / "ds3").get(0, ["class_name"]) == {"class_name": "train"}
    with pytest.raises(ConvertOptionError, match="splits must be"):
        import_image_folder(tmp_path / "src", tmp_path / "ds4", splits="yes")  # type: ignore[arg-type]


def test_duplicate_stems_get_unique_ids(tmp_path: Path) -> None:
    for rel, i in [("c/a.png", 1), ("c/a.jpg", 2), ("c/a#2.png", 3)]:
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / rel).write_bytes(
            image_bytes(i, "PNG" if rel.endswith("png") else "JPEG")
        )
    import_image_folder(tmp_path / "src", tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    assert ds.to_table(["sample_id", "path"]).to_pylist() == [
        {"sample_id": "c~a#2", "path": "c/a#2.png"},  # '#' sorts before '.'
        {"sample_id": "c~a", "path": "c/a.jpg"},
        {"sample_id": "c~a#3", "path": "c/a.png"},  # c~a#2 is taken
    ]


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("cut.jpg", lambda b: b[: len(b) // 2]),  # truncated JPEG
        ("text.png", lambda b: b"this is not an image at all"),
        ("header.jpg", lambda b: b[:3] + b"\x00" * 40),  # JPEG magic, garbage header
        ("cut.png", lambda b: b[:-20]),  # PNG without IEND
    ],
)
def test_bad_image_raises_naming_it_and_commits_nothing(tmp_path: Path, name: str, damage) -> None:  # type: ignore[no-untyped-def]
    make_folder(tmp_path / "src")
    fmt = "PNG" if name.endswith("png") else "JPEG"
    bad = tmp_path / "src" / "dog" / name
    bad.write_bytes(damage(image_bytes(42, fmt)))
    with pytest.raises(BadInputError) as err:
        import_image_folder(tmp_path / "src", tmp_path / "ds")
    assert err.value.path == str(bad)
    assert str(bad) in str(err.value)
    assert isinstance(err.value, ValueError)
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_bad_image_is_skipped_and_reported_when_asked(
    tmp_path: Path, on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    images = make_folder(tmp_path / "src")
    bad = tmp_path / "src" / "cat" / "bad.jpg"
    bad.write_bytes(image_bytes(42, "JPEG")[:100])
    report = import_image_folder(tmp_path / "src", tmp_path / "ds", on_error=on_error)  # type: ignore[arg-type]
    assert report.num_samples == len(images)
    assert report.num_skipped == 1
    assert report.skipped[0].where == str(bad)
    assert "cut short" in report.skipped[0].reason
    assert "cat/bad.jpg" not in Dataset.open(tmp_path / "ds").column("path").to_pylist()
    warned = [r for r in caplog.records if r.levelname == "WARNING" and str(bad) in r.getMessage()]
    assert len(warned) == (1 if on_error == "warn" else 0)


def test_same_dataset_whatever_the_workers_and_progress_reaches_total(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(60):
        (src / f"c{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 4}" / f"{i:03d}.png").write_bytes(image_bytes(i))
    calls: list[tuple[int, int | None]] = []
    import_image_folder(src, tmp_path / "one", workers=1)
    import_image_folder(
        src, tmp_path / "eight", workers=8, progress=lambda d, t: calls.append((d, t))
    )
    one, eight = Dataset.open(tmp_path / "one"), Dataset.open(tmp_path / "eight")
    assert list(one) == list(eight)
    assert len(one) == 60
    assert calls[-1] == (60, 60)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_import_appends_to_an_existing_dataset(tmp_path: Path) -> None:
    make_folder(tmp_path / "src")
    import_image_folder(tmp_path / "src", tmp_path / "ds")
    report = import_image_folder(tmp_path / "src", tmp_path / "ds", mode="append")
    assert report.version == 2
    ids = Dataset.open(tmp_path / "ds").column("sample_id").to_pylist()
    assert len(ids) == 18 and len(set(ids)) == 18
    assert ids[9] == "cat~001#2"


def test_import_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError, match="not a folder"):
        import_image_folder(tmp_path / "missing", tmp_path / "ds")
    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "a.txt").write_text("x")
    with pytest.raises(InputNotFoundError, match="no images in class folders"):
        import_image_folder(tmp_path / "src", tmp_path / "ds")
    with pytest.raises(ConvertOptionError, match="on_error"):
        import_image_folder(tmp_path / "src", tmp_path / "ds", on_error="ignore")  # type: ignore[arg-type]


def test_export_by_label_with_where_and_generated_names(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("image", "png", "tensor", "image")
        w.declare("mask", "png", "tensor", "image")
        for i in range(6):
            fmt = "JPEG" if i % 2 else "PNG"
            w.add(f"s{i}", {"image": image_bytes(i, fmt)} if i != 5 else None, {"label": i % 3})
    with pytest.raises(ConvertOptionError, match="2 image modalities"):
        export_image_folder(uri, tmp_path / "out0")
    report = export_image_folder(
        uri, tmp_path / "out", modality="image", where="label < 2 OR sample_id = 's5'"
    )
    assert files_under(tmp_path / "out") == {
        "0/s0.png": image_bytes(0, "PNG"),
        "1/s1.jpg": image_bytes(1, "JPEG"),  # the file's format, not the modality's ext
        "0/s3.jpg": image_bytes(3, "JPEG"),
        "1/s4.png": image_bytes(4, "PNG"),
    }
    assert report.skipped == (("s5", "has no 'image'"),)
    with pytest.raises(OutputExistsError):
        export_image_folder(uri, tmp_path / "out", modality="image")


def test_export_never_escapes_the_destination(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.add(
            "a",
            {"image": image_bytes(0, "JPEG")},
            {"class_name": "../up", "path": "../../evil.jpg"},
        )
        w.add("b", {"image": image_bytes(1, "JPEG")}, {"class_name": "ok", "path": "/abs/x.jpg"})
    export_image_folder(uri, tmp_path / "out")
    assert sorted(files_under(tmp_path / "out")) == [
        ".._up/a.jpg",
        "ok/b.jpg",
    ]  # one safe folder name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]


def test_export_file_and_folder_of_one_name_and_failure_leaves_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.add("a", {"image": image_bytes(0, "JPEG")}, {"path": "cat/x"})
        w.add("b", {"image": image_bytes(1, "JPEG")}, {"path": "cat/x/y.png"})
        w.add("c", {"image": image_bytes(2, "JPEG")}, {"path": "dog/d/e.jpg"})
        w.add("d", {"image": image_bytes(3, "JPEG")}, {"path": "DOG/D"})
        w.add("e", {"image": image_bytes(4, "JPEG")}, {"path": "cat/x"})
    report = export_image_folder(uri, tmp_path / "out")
    assert files_under(tmp_path / "out") == {
        "cat/x": image_bytes(0, "JPEG"),
        "b.jpg": image_bytes(1, "JPEG"),  # cat/x is a file: named by its sample id
        "dog/d/e.jpg": image_bytes(2, "JPEG"),
        "d.jpg": image_bytes(3, "JPEG"),  # dog/d is a folder (case-insensitively)
        "e.jpg": image_bytes(4, "JPEG"),  # a duplicate
    }
    assert report.num_files == 5

    # a failure mid-export (here: the destination filled up meanwhile) leaves nothing
    (tmp_path / "out2").mkdir()

    def fill(done: int, total: int) -> None:
        (tmp_path / "out2" / "intruder").write_text("x")

    with pytest.raises(OutputExistsError):
        export_image_folder(uri, tmp_path / "out2", progress=fill)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out", "out2"]
    assert [p.name for p in (tmp_path / "out2").iterdir()] == ["intruder"]


def test_file_names_that_are_not_utf8_are_bad_inputs_naming_the_path(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    (src / "cat" / "ok.png").write_bytes(image_bytes(0))
    raw = os.fsencode(src)
    try:
        with open(os.path.join(raw, b"cat", b"\xff.png"), "wb") as f:
            f.write(image_bytes(1))
    except OSError as exc:  # pragma: no cover - file systems that only store UTF-8 names
        pytest.skip(f"this file system refuses names that are not UTF-8: {exc}")
    os.mkdir(os.path.join(raw, b"\xfedog"))
    with open(os.path.join(raw, b"\xfedog", b"a.png"), "wb") as f:
        f.write(image_bytes(2))
    with pytest.raises(BadInputError, match=re.escape(repr(raw + b"/cat/\xff.png"))) as info:
        import_image_folder(src, tmp_path / "ds")
    assert info.value.path == f"{src}/cat/\\xff.png"
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")
    report = import_image_folder(src, tmp_path / "ds", on_error="skip")
    assert report.num_samples == 1
    assert [s.where for s in report.skipped] == [
        f"{src}/cat/\\xff.png",
        f"{src}/\\xfedog/a.png",
    ]
    assert Dataset.open(tmp_path / "ds").column("path").to_pylist() == ["cat/ok.png"]


def test_every_file_left_out_is_named_with_its_reason(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    (src / "a" / "x.jpg").write_bytes(image_bytes(0, "JPEG"))
    (src / "a" / "y.jfif").write_bytes(image_bytes(1, "JPEG"))  # JPEG, by another name
    (src / "a" / "z.JPEG").write_bytes(image_bytes(2, "JPEG"))
    (src / "a" / "README.txt").write_text("about the cats")
    (src / "b" / "p.png").write_bytes(image_bytes(3))
    (src / "b" / "q.avif").write_bytes(b"\x00\x00\x00\x1cftypavif")
    (src / "b" / "noext").write_bytes(image_bytes(4))
    (src / "notes.txt").write_text("at the top")
    report = import_image_folder(src, tmp_path / "ds")
    assert report.num_samples == 4
    assert sorted(Dataset.open(tmp_path / "ds").column("path").to_pylist()) == [
        "a/x.jpg", "a/y.jfif", "a/z.JPEG", "b/p.png"
    ]  # fmt: skip
    reasons = {Path(where).relative_to(src).as_posix(): why for where, why in report.ignored}
    assert report.num_ignored == len(reasons) == 4
    assert reasons["notes.txt"] == "not in a class folder (root/<class>/<images>)"
    assert reasons["a/README.txt"].startswith("not an image format ferroload reads (.txt;")
    assert ".jfif" in reasons["b/q.avif"] and "(.avif;" in reasons["b/q.avif"]
    assert reasons["b/noext"] == "no extension: not an image file"


def test_files_passed_over_are_counted_and_only_the_first_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder of many other files (an annotation beside each image) costs a count past
    the listed ones, not an entry each, also while the import plans."""
    import ferroload_convert._report as report_module

    monkeypatch.setattr(report_module, "MAX_SKIPPED_LISTED", 3)
    for i in range(4):
        (tmp_path / "src" / "cat").mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / "cat" / f"{i}.png").write_bytes(image_bytes(i))
        (tmp_path / "src" / "cat" / f"{i}.json").write_text("{}")
    report = import_image_folder(tmp_path / "src", tmp_path / "ds")
    assert (report.num_samples, report.num_ignored, len(report.ignored)) == (4, 4, 3)
