from __future__ import annotations

import base64
import io
import json
import re
import tarfile
import tempfile
from pathlib import Path

import pytest
import webdataset as wds
from _convert_data import image_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferroload_convert import (
    BadInputError,
    ConvertOptionError,
    InputNotFoundError,
    UnsafeNameError,
    export_webdataset,
    import_webdataset,
)
from ferroload_format import Dataset, DatasetNotFoundError, Writer


def write_tar(path: Path, members: list[tuple[str, bytes]], *, dirs: tuple[str, ...] = ()) -> None:
    """A tar with these regular members, in this order (and directory entries first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def members_of(path: Path) -> list[tuple[str, bytes]]:
    """(name, bytes) of the regular members of a tar, in order."""
    with tarfile.open(path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers() if m.isreg()]  # type: ignore[union-attr]


def tars_of(root: Path) -> dict[str, list[tuple[str, bytes]]]:
    return {p.relative_to(root).as_posix(): members_of(p) for p in sorted(root.rglob("*.tar"))}


def wds_samples(paths: list[Path]) -> list[dict[str, object]]:
    """What WebDataset itself reads from these tars (no decoding)."""
    ds = wds.WebDataset([str(p) for p in paths], shardshuffle=False)
    return [{k: v for k, v in s.items() if k not in ("__url__", "__local_path__")} for s in ds]


def write_with_tarwriter(root: Path) -> list[Path]:
    paths = []
    root.mkdir(parents=True, exist_ok=True)
    for shard in range(2):
        path = root / f"train-{shard:03d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(shard * 5, shard * 5 + 5):
                sample = {
                    "__key__": f"n{i % 2}/img{i:04d}",
                    "jpg": image_bytes(i, "JPEG"),
                    "cls": i % 3,
                    "json": {"width": 10 + i, "tags": ["a", str(i)]},
                    "txt": f"caption {i}",
                }
                if i % 2:
                    sample["seg.png"] = image_bytes(100 + i)
                sink.write(sample)
        paths.append(path)
    return paths


def test_tarwriter_shards_import_and_export_back_identically(tmp_path: Path) -> None:
    paths = write_with_tarwriter(tmp_path / "src")
    report = import_webdataset(tmp_path / "src", tmp_path / "ds")
    assert report.num_samples == 10
    # .cls, .txt and .json are stored once, as metadata columns (their bytes come back)
    assert dict(report.columns) == {
        "cls": "label",
        "jpg": "jpg",
        "json": "json_text",
        "seg.png": "seg_png",
        "txt": "text",
    }
    ds = Dataset.open(tmp_path / "ds")
    mods = {m.name: (m.ext, m.kind, m.codec_hint) for m in ds.modalities}
    assert mods == {"jpg": ("jpg", "tensor", "image"), "seg_png": ("png", "tensor", "image")}
    first = ds[1]
    assert first["sample_id"] == "n1~img0001"
    assert (first["wds_key"], first["wds_shard"], first["label"]) == (
        "n1/img0001",
        "train-000.tar",
        1,
    )
    assert first["text"] == "caption 1"
    assert json.loads(first["json_text"]) == {"width": 11, "tags": ["a", "1"]}
    assert first["jpg"] == image_bytes(1, "JPEG")
    assert first["wds_members"] == [
        {"ext": e, "modality": m}
        for e, m in [
            ("cls", "label"),
            ("jpg", "jpg"),
            ("json", "json_text"),
            ("seg.png", "seg_png"),
            ("txt", "text"),
        ]
    ]
    assert ds.subset("label = 2", return_indices=True).tolist() == [2, 5, 8]
    assert ds[0]["seg_png"] is None

    report = export_webdataset(tmp_path / "ds", tmp_path / "out")
    assert (report.num_samples, report.num_files) == (10, 2)
    assert tars_of(tmp_path / "out") == tars_of(tmp_path / "src")
    out = sorted((tmp_path / "out").glob("*.tar"))
    assert wds_samples(out) == wds_samples(paths)


def test_any_member_layout_round_trips_exactly(tmp_path: Path) -> None:
    jpg, png = image_bytes(1, "JPEG"), image_bytes(2)
    members = [
        ("a.jpg", jpg),
        ("b/c.d/x.seg.png", png),  # dots in folders; a multi-part extension
        ("a.cls", b"7"),  # 'a' again, not adjacent: still one sample
        ("b/c.d/x.JPG", jpg),  # the same extension in another case: another modality
        ("b/c.d/x.jpg", jpg),
        ("README", b"no extension"),  # not a sample member (WebDataset skips it too)
        ("__meta__", b"skipped by WebDataset"),
        ("only.txt", "ünïcode".encode()),
        ("a.weird-ext!", b"kept"),
        ("z.seg_png", b"the same modality name as seg.png"),
    ]
    write_tar(tmp_path / "src" / "sub" / "mixed.tar", members, dirs=("b/", "b/c.d/"))
    write_tar(tmp_path / "src" / "other.tar", [("a.jpg", image_bytes(3, "JPEG")), ("a.cls", b"x")])
    report = import_webdataset(tmp_path / "src", tmp_path / "ds", workers=2)
    assert report.num_samples == 5
    assert report.num_ignored == 4  # 2 directories, README, __meta__
    assert dict(report.columns) == {
        "jpg": "jpg",
        "cls": "cls",
        "seg.png": "seg_png",
        "JPG": "jpg_2",
        "txt": "text",
        "weird-ext!": "weird_ext_",
        "seg_png": "seg_png_2",
    }
    ds = Dataset.open(tmp_path / "ds")
    assert ds.column("sample_id").to_pylist() == ["a", "a#2", "b~c_d~x", "only", "z"]
    assert ds.column("wds_shard").to_pylist() == ["other.tar", *["sub/mixed.tar"] * 4]
    assert ds.column("label").to_pylist() == [None, 7, None, None, None]  # b"x" is no class

    export_webdataset(tmp_path / "ds", tmp_path / "out")
    m = dict(members)
    # each key's members together, keys in first-seen order, members in tar order
    mixed = ["a.jpg", "a.cls", "a.weird-ext!", "b/c.d/x.seg.png", "b/c.d/x.JPG", "b/c.d/x.jpg"]
    mixed += ["only.txt", "z.seg_png"]
    assert tars_of(tmp_path / "out") == {
        "other.tar": members_of(tmp_path / "src" / "other.tar"),
        "sub/mixed.tar": [(name, m[name]) for name in mixed],
    }


def test_generic_dataset_exports_to_tars_webdataset_reads(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("thumb", "jpg", "tensor", "image")
        w.declare("caption", "txt", "text")
        for i in range(7):
            data = {"image": image_bytes(i, "JPEG"), "caption": f"c{i}".encode()}
            if i % 2:
                data["thumb"] = image_bytes(50 + i, "JPEG")
            w.add(f"s{i}", data, {"label": i % 3, "blob": bytes([i]), "score": i / 2})
    report = export_webdataset(
        uri, tmp_path / "out", samples_per_shard=3, where="sample_id != 's6'"
    )
    tars = sorted((tmp_path / "out").glob("*.tar"))
    assert [t.name for t in tars] == ["shard-000000.tar", "shard-000001.tar"]
    assert (report.num_samples, report.num_files) == (6, 2)
    samples = wds_samples(tars)
    assert [s["__key__"] for s in samples] == [f"s{i}" for i in range(6)]
    for i, s in enumerate(samples):
        assert s["image.jpg"] == image_bytes(i, "JPEG")  # extensions shared: <modality>.<ext>
        assert s.get("thumb.jpg") == (image_bytes(50 + i, "JPEG") if i % 2 else None)
        assert s["txt"] == f"c{i}".encode()
        assert s["cls"] == str(i % 3).encode()  # the int label as WebDataset's .cls
        meta = {"blob": base64.b64encode(bytes([i])).decode(), "score": i / 2}
        assert json.loads(s["json"]) == meta
    # re-importing the export keeps every payload and restores the modalities (named and
    # declared as they were: the marker says so) and the columns
    report = import_webdataset(tmp_path / "out", tmp_path / "back")
    assert report.num_ignored == 0  # the __ferroload__ members are read, not ignored
    back = Dataset.open(tmp_path / "back")
    assert [(m.name, m.ext, m.kind) for m in back.modalities] == [
        (m.name, m.ext, m.kind) for m in Dataset.open(uri).modalities
    ]
    assert back.get(1, ["image", "thumb", "caption", "label", "blob", "score"]) == {
        "image": image_bytes(1, "JPEG"),
        "thumb": image_bytes(51, "JPEG"),
        "caption": Dataset.open(uri).get(1, ["caption"])["caption"],
        "label": 1,
        "blob": bytes([1]),
        "score": 0.5,
    }


def test_damaged_tar_is_a_bad_input_named_by_path(tmp_path: Path) -> None:
    write_with_tarwriter(tmp_path / "src")
    good = members_of(tmp_path / "src" / "train-000.tar")
    bad = tmp_path / "src" / "train-001.tar"
    data = bad.read_bytes()
    with tarfile.open(bad) as tar:
        last = tar.getmembers()[-1]
    # inside the first member, inside the last one, right before the last header
    for cut in (700, last.offset_data + 3, last.offset):
        bad.write_bytes(data[:cut])
        with pytest.raises(BadInputError) as err:
            import_webdataset(tmp_path / "src", tmp_path / "ds")
        assert err.value.path == str(bad), cut
        assert str(bad) in str(err.value)
        with pytest.raises(DatasetNotFoundError):
            Dataset.open(tmp_path / "ds")
    report = import_webdataset(tmp_path / "src", tmp_path / "ds", on_error="skip")
    assert report.num_samples == 5
    assert [s.where for s in report.skipped] == [str(bad)]
    assert Dataset.open(tmp_path / "ds").column("jpg").to_pylist()[0]["length"] == len(good[1][1])


def test_damaged_image_member_is_named_and_its_sample_skippable(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    write_tar(
        path,
        [
            ("k0.jpg", image_bytes(0, "JPEG")),
            ("k1.jpg", image_bytes(1, "JPEG")[:200]),
            ("k1.cls", b"1"),
            ("k2.png", image_bytes(2)),
        ],
    )
    with pytest.raises(BadInputError) as err:
        import_webdataset(path, tmp_path / "ds")
    assert (err.value.path, err.value.member) == (str(path), "k1.jpg")
    report = import_webdataset(path, tmp_path / "ds", on_error="warn")
    assert Dataset.open(tmp_path / "ds").column("wds_key").to_pylist() == ["k0", "k2"]
    assert report.skipped[0].where == f"{path} (member k1.jpg)"


def test_same_dataset_whatever_the_workers(tmp_path: Path) -> None:
    for shard in range(6):
        write_tar(
            tmp_path / "src" / f"{shard}.tar",
            [(f"k{shard}_{i}.png", image_bytes(shard * 10 + i)) for i in range(4)],
        )
    calls: list[tuple[int, int | None]] = []
    import_webdataset(tmp_path / "src", tmp_path / "one", workers=1)
    import_webdataset(
        tmp_path / "src" / "*.tar",
        tmp_path / "eight",
        workers=8,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert list(Dataset.open(tmp_path / "one")) == list(Dataset.open(tmp_path / "eight"))
    assert calls[-1] == (24, 24)


def test_compressed_tars_and_resharding(tmp_path: Path) -> None:
    members = [(f"k{i}.cls", str(i).encode()) for i in range(5)]
    write_tar(tmp_path / "plain.tar", members)
    with tarfile.open(tmp_path / "src.tar.gz", "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    import_webdataset([tmp_path / "src.tar.gz"], tmp_path / "ds")
    export_webdataset(tmp_path / "ds", tmp_path / "out")
    assert tars_of(tmp_path / "out") == {"src.tar": members}  # uncompressed now
    export_webdataset(tmp_path / "ds", tmp_path / "out2", samples_per_shard=2)
    assert [len(m) for m in tars_of(tmp_path / "out2").values()] == [2, 2, 1]
    # keys repeated across original tars cannot share a re-sharded tar
    import_webdataset([tmp_path / "plain.tar"], tmp_path / "ds", mode="append")
    with pytest.raises(ConvertOptionError, match="samples_per_shard=None"):
        export_webdataset(tmp_path / "ds", tmp_path / "out3", samples_per_shard=10)
    assert not (tmp_path / "out3").exists()  # nothing of the failed export remains
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ds",
        "out",
        "out2",
        "plain.tar",
        "src.tar.gz",
    ]


@pytest.mark.parametrize("key", ["../../x", "/tmp/evil", "a/./b", "a\x01b", "a\\b"])
def test_unsafe_member_names_are_refused_naming_the_sample(tmp_path: Path, key: str) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("txt", "txt", "bytes", "raw")
        w.add(
            "ok",
            {"txt": b"fine"},
            {
                "wds_key": "ok",
                "wds_shard": "a.tar",
                "wds_members": [{"modality": "txt", "ext": "txt"}],
            },
        )
        w.add(
            "s1",
            {"txt": b"evil"},
            {
                "wds_key": key,
                "wds_shard": "a.tar",
                "wds_members": [{"modality": "txt", "ext": "txt"}],
            },
        )
    (tmp_path / "out").mkdir()  # an empty destination stays as it was
    with pytest.raises(UnsafeNameError, match="'s1'") as info:
        export_webdataset(uri, tmp_path / "out")
    assert isinstance(info.value, ValueError)
    assert info.value.member == f"{key}.txt"
    assert list((tmp_path / "out").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]
    with pytest.raises(UnsafeNameError, match="'s1'"):  # re-sharding checks too
        export_webdataset(uri, tmp_path / "out", samples_per_shard=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]


def test_missing_source_is_reported(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError):
        import_webdataset(tmp_path / "nothing-*.tar", tmp_path / "ds")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFoundError, match="no WebDataset tars"):
        import_webdataset(tmp_path / "empty", tmp_path / "ds")


_JPEG = image_bytes(0, "JPEG")
_members = st.lists(
    st.tuples(
        st.sampled_from(["", "d/", "d.x/", "d_x/", "d/e/"]),
        st.text("ab_9", min_size=1, max_size=3),
        st.sampled_from(["jpg", "JPG", "seg.png.txt", "txt", "cls", "a.b.c", "bin", "TXT"]),
        st.binary(max_size=40),
    ),
    min_size=1,
    max_size=25,
    unique_by=lambda m: m[0] + m[1] + "." + m[2],
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(_members)
def test_round_trip_of_any_layout(members: list[tuple[str, str, str, bytes]]) -> None:
    """Whatever the keys, extensions and member order: import -> export gives each key's
    members together, in tar order, keys in first-seen order, names and bytes unchanged."""
    named = [(f"{d}{k}.{e}", _JPEG if e.lower() == "jpg" else data) for d, k, e, data in members]
    expected: dict[str, list[tuple[str, bytes]]] = {}
    for name, data in named:
        expected.setdefault(_key(name), []).append((name, data))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tar(root / "in.tar", named)
        uri = str(root / "ds")  # memory:// cannot read back empty payloads (store bug)
        import_webdataset(root / "in.tar", uri, workers=3)
        export_webdataset(uri, root / "out")
        assert tars_of(root / "out") == {"in.tar": [m for g in expected.values() for m in g]}
        ids = Dataset.open(uri).column("sample_id").to_pylist()
        assert len(ids) == len(expected) == len(set(ids))


def _key(name: str) -> str:
    """WebDataset's key: the path up to the first dot of the file name."""
    folder, _, base = name.rpartition("/")
    return folder + _ + base.split(".", 1)[0]


def test_lifted_metadata_only_when_it_fits(tmp_path: Path) -> None:
    members = [
        ("a.cls", b"99999999999999999999"),  # no int64
        ("a.txt", b"\xff\xfe not utf-8"),
        ("b.cls", b" 4\n"),
        ("b.json", b'{"w": 3}'),
    ]
    write_tar(tmp_path / "s.tar", members)
    import_webdataset(tmp_path / "s.tar", tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    assert "text" not in ds.metadata_columns  # no .txt was UTF-8
    assert ds.to_table(["label", "json_text"]).to_pylist() == [
        {"label": None, "json_text": None},
        {"label": 4, "json_text": '{"w": 3}'},
    ]
    assert ds.get(0, ["cls", "txt"]) == {"cls": members[0][1], "txt": members[1][1]}


def test_member_names_that_are_not_utf8_are_bad_inputs_naming_them(tmp_path: Path) -> None:
    # a USTAR name is raw bytes; tarfile keeps the ones that are not UTF-8 as surrogates
    with tarfile.open(tmp_path / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in [(b"ok.cls", b"1"), (b"\xff.cls", b"2")]:
            info = tarfile.TarInfo(name.decode("utf-8", "surrogateescape"))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BadInputError, match=re.escape("member b'\\xff.cls'")) as info_:
        import_webdataset(tmp_path / "a.tar", tmp_path / "ds")
    assert (info_.value.path, info_.value.member) == (str(tmp_path / "a.tar"), "\\xff.cls")
    with pytest.raises(DatasetNotFoundError):
        Dataset.open(tmp_path / "ds")
    report = import_webdataset(tmp_path / "a.tar", tmp_path / "ds", on_error="skip")
    assert report.num_samples == 1
    assert [s.where for s in report.skipped] == [f"{tmp_path / 'a.tar'} (member \\xff.cls)"]
    assert Dataset.open(tmp_path / "ds").column("wds_key").to_pylist() == ["ok"]


def test_unsafe_original_tar_names_are_replaced_and_an_empty_dst_is_reused(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ds")
    members = [{"modality": "txt", "ext": "txt"}]
    with Writer(uri, "demo") as w:
        w.declare("txt", "txt", "bytes", "raw")
        for i, shard in enumerate(["../../evil.tar", "/tmp/evil.tar", "ok/a.tar"]):
            meta = {"wds_key": f"k{i}", "wds_shard": shard, "wds_members": members}
            w.add(f"s{i}", {"txt": str(i).encode()}, meta)
    (tmp_path / "out").mkdir()
    export_webdataset(uri, tmp_path / "out")
    assert tars_of(tmp_path / "out") == {
        "shard-000000.tar": [("k0.txt", b"0")],
        "shard-000001.tar": [("k1.txt", b"1")],
        "ok/a.tar": [("k2.txt", b"2")],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "out"]


def test_members_left_out_are_named_with_their_reason(tmp_path: Path) -> None:
    write_tar(
        tmp_path / "src" / "0.tar",
        [("a.png", image_bytes(0)), ("README", b"no extension"), ("__meta__", b"{}")],
        dirs=("folder",),
    )
    report = import_webdataset(tmp_path / "src", tmp_path / "ds")
    assert report.num_samples == 1 and report.num_ignored == 3
    tar = str(tmp_path / "src" / "0.tar")
    assert sorted(report.ignored) == sorted([
        (f"folder in {tar}", "a directory entry"),
        (f"README in {tar}", "no extension: WebDataset cannot tell which field it is"),
        (f"__meta__ in {tar}", "a WebDataset meta member (__…__)"),
    ])  # fmt: skip


def test_files_a_search_passes_over_are_named(tmp_path: Path) -> None:
    write_tar(tmp_path / "src" / "0.tar", [("a.png", image_bytes(0))])
    (tmp_path / "src" / "README.md").write_text("how the shards were made")
    (tmp_path / "src" / ".cache").write_text("hidden")
    report = import_webdataset(tmp_path / "src", tmp_path / "ds")
    assert sorted(report.ignored) == [
        (str(tmp_path / "src" / ".cache"), "a hidden file"),
        (str(tmp_path / "src" / "README.md"),
         "not one of the WebDataset tars (names ending in .tar, .tar.gz, .tgz)"),
    ]  # fmt: skip
    # the same from an object-store prefix
    from ferroload_store import open_store

    store = open_store("memory://wds-ignored/src")
    store.put("0.tar", (tmp_path / "src" / "0.tar").read_bytes())
    store.put("notes.txt", b"x")
    remote = import_webdataset("memory://wds-ignored/src/", "memory://wds-ignored/ds")
    assert remote.ignored == (
        ("memory://wds-ignored/src/notes.txt",
         "not one of the WebDataset tars (names ending in .tar, .tar.gz, .tgz)"),
    )  # fmt: skip
