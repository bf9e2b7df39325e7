"""Self-contained WebDataset exports: `label` as `.cls`, the other metadata as `.json`,
and the round trip ferroload -> export -> import restoring the same columns and types."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
import webdataset as wds
from _convert_data import image_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferroload_convert import ConvertOptionError, export_webdataset, import_webdataset
from ferroload_convert._wds_meta import MARKER
from ferroload_format import Dataset, Writer

META = ["label", "score", "name", "flag", "tags", "note", "blob", "size"]


def make_dataset(uri: str) -> list[dict[str, object]]:
    """A dataset with int / float / str / bool / list / null / bytes / struct metadata."""
    rows: list[dict[str, object]] = []
    with Writer(uri, "demo") as w:
        w.declare("image", "png", "tensor", "image")
        w.declare_column("note", pa.string())  # every value null: the type must survive
        for i in range(6):
            row: dict[str, object] = {
                "label": None if i == 4 else i % 3,
                "score": float(i) if i % 2 else i / 3,  # 1.0 stays a float
                "name": f"ünï {i}" if i else "",
                "flag": i % 2 == 0,
                "tags": [f"t{j}" for j in range(i % 3)],  # [] included
                "note": None,
                "blob": bytes([i, 0, 255]),
                "size": {"w": 10 + i, "h": None if i == 2 else 7},
            }
            w.add(f"s{i}", {"image": image_bytes(i)}, row)
            rows.append(row)
    return rows


def members(root: Path) -> dict[str, list[tuple[str, bytes]]]:
    out = {}
    for path in sorted(root.glob("*.tar")):
        with tarfile.open(path) as tar:
            out[path.name] = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    return out


def test_export_import_restores_columns_and_types(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    rows = make_dataset(uri)
    src = Dataset.open(uri)
    export_webdataset(uri, tmp_path / "wds", samples_per_shard=4)
    tars = sorted(str(p) for p in (tmp_path / "wds").glob("*.tar"))
    # plain WebDataset sees the labels (decoded from .cls) and the metadata (.json)
    seen = list(wds.WebDataset(tars, shardshuffle=False).decode())
    assert [s["__key__"] for s in seen] == [f"s{i}" for i in range(6)]
    assert [s.get("cls") for s in seen] == [r["label"] for r in rows]
    assert seen[5]["json"]["tags"] == ["t0", "t1"] and seen[5]["json"]["flag"] is False
    assert "label" not in seen[0]["json"]
    got = members(tmp_path / "wds")
    assert [n for n, _ in got["shard-000000.tar"][:4]] == [MARKER, "s0.png", "s0.cls", "s0.json"]
    assert [n for n, _ in got["shard-000001.tar"]][:1] == [MARKER]
    assert "s4.cls" not in dict(got["shard-000001.tar"])  # a null label: no .cls

    report = import_webdataset(tmp_path / "wds", tmp_path / "back")
    assert report.num_samples == 6
    back = Dataset.open(tmp_path / "back")
    for column in META:
        assert back.schema.field(column).type == src.schema.field(column).type, column
    assert (
        back.to_table(["sample_id", *META]).to_pylist()
        == src.to_table(["sample_id", *META]).to_pylist()
    )
    # the marker names the modality: it comes back as it was, not named after `.png`
    assert [(m.name, m.ext, m.codec_hint) for m in back.modalities] == [("image", "png", "image")]
    assert back.get(5, ["image"])["image"] == image_bytes(5)

    # exported again (now as an imported WebDataset dataset): the same tars, byte for byte
    export_webdataset(tmp_path / "back", tmp_path / "wds2")
    assert members(tmp_path / "wds2") == got


def test_metadata_can_be_left_out_or_chosen(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    make_dataset(uri)
    export_webdataset(uri, tmp_path / "none", metadata="none")
    names = [n for n, _ in members(tmp_path / "none")["shard-000000.tar"]]
    assert names == [f"s{i}.png" for i in range(6)]
    export_webdataset(uri, tmp_path / "some", metadata_columns=["score", "name"])
    got = dict(members(tmp_path / "some")["shard-000000.tar"])
    assert json.loads(got["s1.json"]) == {"score": 1.0, "name": "ünï 1"}
    assert "s1.cls" not in got
    assert json.loads(got[MARKER])["columns"] == {"score": "float64", "name": "string"}
    import_webdataset(tmp_path / "some", tmp_path / "back")
    columns = set(Dataset.open(tmp_path / "back").metadata_columns)
    assert {"score", "name"} <= columns and not columns & {"label", "flag", "tags"}
    with pytest.raises(ConvertOptionError, match="'nope'") as err:
        export_webdataset(uri, tmp_path / "x", metadata_columns=["score", "nope"])
    assert err.value.column == "nope"
    with pytest.raises(ConvertOptionError, match="metadata must be"):
        export_webdataset(uri, tmp_path / "x", metadata="columns")  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def test_a_label_that_is_not_an_int_goes_into_the_json(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("cls", "cls", "bytes", "raw")  # a modality already writes .cls
        w.add("a", {"cls": b"x"}, {"label": 3})
        w.add("b", None, {"label": 4})
    with Writer(str(tmp_path / "ds2"), "demo") as w:
        w.add("a", None, {"label": "cat"})
    export_webdataset(uri, tmp_path / "o1")
    export_webdataset(tmp_path / "ds2", tmp_path / "o2")
    one = dict(members(tmp_path / "o1")["shard-000000.tar"])
    assert (one["a.cls"], json.loads(one["a.json"])) == (b"x", {"label": 3})
    two = dict(members(tmp_path / "o2")["shard-000000.tar"])
    assert json.loads(two["a.json"]) == {"label": "cat"}
    import_webdataset(tmp_path / "o2", tmp_path / "back")
    assert Dataset.open(tmp_path / "back").column("label").to_pylist() == ["cat"]


def test_json_of_a_foreign_tar_or_a_bad_marker_stays_text(tmp_path: Path) -> None:
    path = tmp_path / "in.tar"
    with wds.TarWriter(str(path)) as sink:
        sink.write({"__key__": "k0", "json": {"a": 1}, "cls": 2})
    with tarfile.open(tmp_path / "odd.tar", "w") as tar:
        for name, data in [
            (MARKER, b'{"ferroload": 1, "json": "json", "columns": {"a": "int64"}}'),
            ("k0.json", b'{"a": 1, "b": 2}'),  # a key the marker does not name
            ("k1.json", b'{"a": 5}'),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    import_webdataset(path, tmp_path / "a")
    a = Dataset.open(tmp_path / "a")
    assert a.get(0, ["label", "json_text"]) == {"label": 2, "json_text": '{"a": 1}'}
    import_webdataset(tmp_path / "odd.tar", tmp_path / "b")
    b = Dataset.open(tmp_path / "b")
    assert b.to_table(["json_text", "a"]).to_pylist() == [
        {"json_text": '{"a": 1, "b": 2}', "a": None},
        {"json_text": None, "a": 5},
    ]
    export_webdataset(tmp_path / "b", tmp_path / "out")
    assert dict(members(tmp_path / "out")["odd.tar"])["k0.json"] == b'{"a": 1, "b": 2}'
    assert json.loads(dict(members(tmp_path / "out")["odd.tar"])["k1.json"]) == {"a": 5}


def write_members(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _marker(columns: dict[str, object]) -> bytes:
    return json.dumps({"ferroload": 1, "json": "json", "columns": columns}).encode()


@pytest.mark.parametrize(
    "columns",
    [
        {"wds_key": "int64"},  # one of ours
        {"sample_id": "string"},
        {"a": "int64", "wds_members": "string"},
        {"a": "no-such-type"},
        {"a": {"list": "int64"}, "b": ["not", "a", "type"]},
    ],
)
def test_a_hostile_marker_is_ignored_and_the_json_stays_text(
    tmp_path: Path, columns: dict[str, object]
) -> None:
    write_members(
        tmp_path / "t.tar",
        [(MARKER, _marker(columns)), ("k.json", b'{"wds_key": 5}'), ("k.cls", b"1")],
    )
    import_webdataset(tmp_path / "t.tar", tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    assert ds.get(0, ["wds_key", "label", "json_text"]) == {
        "wds_key": "k",
        "label": 1,
        "json_text": '{"wds_key": 5}',
    }


@pytest.mark.parametrize("depth", [500, 5000])
def test_a_marker_nested_too_deep_is_ignored(tmp_path: Path, depth: int) -> None:
    """Deep enough to exhaust the recursion of the JSON parser or of the type parser."""
    deep = '{"list": ' * depth + '"int64"' + "}" * depth
    marker = ('{"ferroload": 1, "json": "json", "columns": {"a": ' + deep + "}}").encode()
    write_members(tmp_path / "t.tar", [(MARKER, marker), ("k.json", b'{"a": 5}')])
    import_webdataset(tmp_path / "t.tar", tmp_path / "ds")
    assert Dataset.open(tmp_path / "ds").get(0, ["json_text"]) == {"json_text": '{"a": 5}'}


def test_marker_values_that_do_not_fit_and_conflicting_markers(tmp_path: Path) -> None:
    write_members(
        tmp_path / "a.tar",
        [
            (MARKER, _marker({"score": "float64", "png": "string"})),
            ("k0.json", b'{"score": 1, "png": "x"}'),  # an int for a float: a float
            ("k1.json", b'{"score": "high"}'),  # does not fit: kept as text
            ("k0.png", image_bytes(0)),
        ],
    )
    write_members(
        tmp_path / "b.tar",
        [(MARKER, _marker({"score": "string"})), ("k2.json", b'{"score": "x"}')],
    )
    report = import_webdataset([tmp_path / "a.tar", tmp_path / "b.tar"], tmp_path / "ds")
    assert report.columns["png"] != "png"  # the column keeps its name, the modality moves
    ds = Dataset.open(tmp_path / "ds")
    assert ds.schema.field("score").type == pa.float64()
    assert ds.to_table(["score", "png", "json_text"]).to_pylist() == [
        {"score": 1.0, "png": "x", "json_text": None},
        {"score": None, "png": None, "json_text": '{"score": "high"}'},
        {"score": None, "png": None, "json_text": '{"score": "x"}'},
    ]
    assert ds.get(0, [report.columns["png"]])[report.columns["png"]] == image_bytes(0)


def test_a_string_label_from_a_marker_keeps_cls_members_as_payloads(tmp_path: Path) -> None:
    write_members(
        tmp_path / "a.tar",
        [(MARKER, _marker({"label": "string"})), ("k0.json", b'{"label": "cat"}')],
    )
    write_members(tmp_path / "b.tar", [("k1.cls", b"7")])
    report = import_webdataset([tmp_path / "a.tar", tmp_path / "b.tar"], tmp_path / "ds")
    assert report.columns == {"cls": "cls"}
    ds = Dataset.open(tmp_path / "ds")
    assert ds.to_table(["label", "cls"]).to_pylist()[0]["label"] == "cat"
    assert ds.get(1, ["label", "cls"]) == {"label": None, "cls": b"7"}
    export_webdataset(tmp_path / "ds", tmp_path / "out")
    assert members(tmp_path / "out")["b.tar"] == [("k1.cls", b"7")]


_ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
_rows = st.lists(
    st.fixed_dictionaries(
        {
            "label": _ints,
            "n": _ints,
            "x": st.one_of(st.none(), st.floats(allow_nan=False)),
            "s": st.one_of(st.none(), st.text(max_size=8)),
            "b": st.one_of(st.none(), st.booleans()),
            "l": st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3)),
            "raw": st.one_of(st.none(), st.binary(max_size=6)),
        }
    ),
    min_size=1,
    max_size=8,
)
_TYPES = {
    "label": pa.int64(),
    "n": pa.int64(),
    "x": pa.float64(),
    "s": pa.string(),
    "b": pa.bool_(),
    "l": pa.list_(pa.string()),
    "raw": pa.binary(),
}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_rows)
def test_metadata_round_trip_of_any_values(rows: list[dict[str, object]]) -> None:
    """Whatever the values (int64 extremes, infinities, any text, nulls everywhere):
    export -> import gives the same columns, types and values."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with Writer(str(root / "ds"), "demo") as w:
            w.declare("image", "png", "tensor", "image")
            for column, dtype in _TYPES.items():
                w.declare_column(column, dtype)
            for i, row in enumerate(rows):
                w.add(f"s{i}", {"image": image_bytes(0)}, row)
        export_webdataset(root / "ds", root / "wds", samples_per_shard=3)
        import_webdataset(root / "wds", root / "back")
        src, back = Dataset.open(root / "ds"), Dataset.open(root / "back")
        for column, dtype in _TYPES.items():
            assert back.schema.field(column).type == dtype, column
        assert (
            back.to_table(["sample_id", *_TYPES]).to_pylist()
            == src.to_table(["sample_id", *_TYPES]).to_pylist()
        )


def test_members_take_the_extension_of_their_bytes(tmp_path: Path) -> None:
    """A PNG in a `jpg` modality was exported as `<key>.jpg` (issue 36): tools that trust
    the extension decoded it as a JPEG. Each member now has its format's extension, the
    marker maps every such extension to the modality, and the import puts them back in
    the one modality."""
    uri = str(tmp_path / "ds")
    with Writer(uri, "demo") as w:
        w.declare("image", "jpg", "tensor", "image")
        w.declare("mask", "png", "tensor", "image")
        w.declare("clip", "bin", "bytes", "raw")  # not media: never sniffed
        for i in range(4):
            image = image_bytes(i, "PNG" if i % 2 else "JPEG")
            mask = image_bytes(10 + i, "JPEG" if i == 3 else "PNG")
            payloads = {"image": image, "mask": mask, "clip": b"\x89PNG\r\n\x1a\n?"}
            w.add(f"s{i}", payloads, {"label": i, "score": i / 2})
    export_webdataset(uri, tmp_path / "wds")
    got = members(tmp_path / "wds")["shard-000000.tar"]
    # `png` is the mask's own extension, so a PNG image is `image.png`; a JPEG mask
    # `mask.jpg`; the raw modality keeps its extension whatever its bytes look like
    assert [n for n, _ in got] == [
        MARKER,
        "s0.jpg", "s0.png", "s0.bin", "s0.cls", "s0.json",
        "s1.image.png", "s1.png", "s1.bin", "s1.cls", "s1.json",
        "s2.jpg", "s2.png", "s2.bin", "s2.cls", "s2.json",
        "s3.image.png", "s3.mask.jpg", "s3.bin", "s3.cls", "s3.json",
    ]  # fmt: skip
    said = json.loads(dict(got)[MARKER])["modalities"]
    assert said["image"]["members"][:3] == ["jpg", "image.png", "gif"]
    assert said["mask"]["members"][:2] == ["png", "mask.jpg"]
    assert said["clip"] == {"ext": "bin", "kind": "bytes", "codec_hint": "raw", "members": ["bin"]}
    # WebDataset's own decoder trusts the extension: every image decodes
    tars = [str(tmp_path / "wds" / "shard-000000.tar")]
    for s in wds.WebDataset(tars, shardshuffle=False).decode("rgb8"):
        for key, value in s.items():
            if key.endswith(("jpg", "png")):  # decoded by the extension's decoder
                assert getattr(value, "ndim", 0) == 3, (s["__key__"], key)

    report = import_webdataset(tmp_path / "wds", tmp_path / "back")
    back, src = Dataset.open(tmp_path / "back"), Dataset.open(uri)
    assert report.num_ignored == 0
    # the members met, not every extension the marker names (`gif`, `webp`, …)
    assert report.columns == {"cls": "label", "jpg": "image", "png": "mask", "bin": "clip",
                              "image.png": "image", "mask.jpg": "mask"}  # fmt: skip
    assert [(m.name, m.ext, m.kind, m.codec_hint) for m in back.modalities] == [
        (m.name, m.ext, m.kind, m.codec_hint) for m in src.modalities
    ]
    for i in range(4):
        assert back.get(i, ["image", "mask", "clip"]) == src.get(i, ["image", "mask", "clip"])
    # and that import exports back to the same tars, byte for byte (the marker comes back
    # with the metadata member it was written with)
    export_webdataset(tmp_path / "back", tmp_path / "wds2")
    assert members(tmp_path / "wds2") == members(tmp_path / "wds")
    # without metadata there is no marker: the names still follow the bytes
    export_webdataset(uri, tmp_path / "plain", metadata="none")
    assert [n for n, _ in members(tmp_path / "plain")["shard-000000.tar"]][:4] == [
        "s0.jpg", "s0.png", "s0.bin", "s1.image.png",
    ]  # fmt: skip


def _modality_marker(modalities: object) -> bytes:
    return json.dumps(
        {"ferroload": 1, "json": "json", "columns": {}, "modalities": modalities}
    ).encode()


@pytest.mark.parametrize(
    "modalities",
    [
        {"../x": {"ext": "png", "kind": "tensor", "codec_hint": "image", "members": ["png"]}},
        {"img": {"ext": "p/ng", "kind": "tensor", "codec_hint": "image", "members": ["png"]}},
        {"img": {"ext": "png", "kind": "wat", "codec_hint": "image", "members": ["png"]}},
        {"img": {"ext": "png", "kind": "tensor", "codec_hint": "image", "members": ["../png"]}},
        {"img": {"ext": "png", "kind": "tensor", "codec_hint": "image", "members": []}},
        {"img": {"ext": "png", "kind": "tensor", "codec_hint": "image"}},
        {f"m{i}": {"ext": "png", "kind": "tensor", "codec_hint": "image", "members": [f"e{i}"]}
         for i in range(65)},
        ["img"],
    ],
)  # fmt: skip
def test_a_marker_naming_bad_modalities_is_ignored(tmp_path: Path, modalities: object) -> None:
    write_members(
        tmp_path / "t.tar",
        [(MARKER, _modality_marker(modalities)), ("k.png", image_bytes(0)), ("k.cls", b"1")],
    )
    import_webdataset(tmp_path / "t.tar", tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    assert [m.name for m in ds.modalities] == ["png"]  # named by its extension, as any tar's
    assert ds.get(0, ["label"]) == {"label": 1}


def test_a_marker_modality_that_cannot_be_one_here_keeps_extension_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier tar without a marker already made `.png` a modality of its own: the
    marker's `image` cannot take it over; its members are named by their extensions."""
    spec = {"ext": "jpg", "kind": "tensor", "codec_hint": "image", "members": ["jpg", "png"]}
    write_members(tmp_path / "a.tar", [("a.png", image_bytes(1))])
    write_members(
        tmp_path / "b.tar",
        [(MARKER, _modality_marker({"image": spec})), ("b.jpg", image_bytes(2, "JPEG")),
         ("c.png", image_bytes(3))],
    )  # fmt: skip
    write_members(
        tmp_path / "c.tar",
        [(MARKER, _modality_marker({"label": spec})), ("d.jpg", image_bytes(4, "JPEG"))],
    )
    with caplog.at_level("WARNING"):
        import_webdataset([str(tmp_path / n) for n in ("a.tar", "b.tar", "c.tar")], tmp_path / "ds")
    ds = Dataset.open(tmp_path / "ds")
    assert [m.name for m in ds.modalities] == ["png", "jpg"]
    assert ds.get(2, ["png"])["png"] == image_bytes(3)
    assert "names modality 'image', which cannot be one here" in caplog.text
    assert "names modality 'label'" in caplog.text  # a column of ours (`.cls`)
