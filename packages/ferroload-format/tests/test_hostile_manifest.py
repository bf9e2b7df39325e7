"""Malformed manifests and metadata that could not be read back get clear errors
(issue 13, point 10 and the unclear errors)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ferroload_format import (
    MAX_MANIFEST_DEPTH,
    MAX_METADATA_DEPTH,
    Dataset,
    ManifestError,
    SchemaConflictError,
    Writer,
    gc,
)
from ferroload_format._manifest import FORMAT_MINOR
from ferroload_format._paths import version_path
from ferroload_store import InvalidURIError

from .conftest import WriteFn


def _tamper(root: str, edit: Any) -> None:
    ds = Dataset.open(root)
    path = Path(root, version_path(ds.version))
    raw = json.loads(path.read_bytes())
    edit(raw)
    path.write_text(json.dumps(raw))


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_manifest_nested_2000_deep_is_refused(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 3)
    ds = Dataset.open(local_uri)
    path = Path(local_uri, version_path(ds.version))
    text = path.read_text()
    path.write_text(text[:-1].rstrip() + ', "x": ' + "[" * 2000 + "]" * 2000 + "}")
    with pytest.raises(ManifestError, match="nests deeper than"):
        Dataset.open(local_uri)


def test_a_manifest_nested_over_the_limit_is_refused(local_uri: str, write: WriteFn) -> None:
    write(local_uri, 3)
    _tamper(local_uri, lambda raw: raw.update(extensions={"x": _nested(MAX_MANIFEST_DEPTH)}))
    with pytest.raises(ManifestError, match=f"nests deeper than {MAX_MANIFEST_DEPTH} levels"):
        Dataset.open(local_uri)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: raw.update(index_parts=[1]), r"index_parts\[0\] must be a JSON object"),
        (lambda raw: raw.update(index_parts={}), "index_parts must be a JSON array"),
        (lambda raw: raw.update(shards=["x"]), r"shards\[0\] must be a JSON object"),
        (lambda raw: raw.update(modalities=[None]), r"modalities\[0\] must be a JSON object"),
        (lambda raw: raw.update(layers=[7]), r"layers\[0\] must be a JSON object"),
        (lambda raw: raw.update(schema=[]), "schema must be a JSON object"),
        (lambda raw: raw["schema"].update(metadata=[3]), r"schema.metadata\[0\]"),
        (lambda raw: raw["shards"][0].update(size=-1), r"shards\[0\].size must be a non-negative"),
        (lambda raw: raw["shards"][0].update(size="9"), r"shards\[0\].size must be a non-negative"),
        (lambda raw: raw["shards"][0].update(path=5), r"shards\[0\].path must be a string"),
        (
            lambda raw: raw["index_parts"][0].update(num_rows=True),
            r"index_parts\[0\].num_rows must be a non-negative",
        ),
        (lambda raw: raw["index_parts"][0].pop("size"), r"index_parts\[0\]: .*size"),
        (lambda raw: raw.pop("shards"), "missing key 'shards'"),
        (lambda raw: raw.update(version=-3), "version must be a non-negative"),
        (lambda raw: raw.update(extensions=[1]), "extensions must be a JSON object"),
        (lambda raw: raw.update(statistics="x"), "statistics must be a JSON object"),
    ],
)
def test_manifest_fields_of_the_wrong_type_are_refused_naming_the_key(
    local_uri: str, write: WriteFn, edit: Any, message: str
) -> None:
    write(local_uri, 3)
    _tamper(local_uri, edit)
    with pytest.raises(ManifestError, match=message) as info:
        Dataset.open(local_uri)
    assert isinstance(info.value, ValueError)


def test_metadata_nested_at_the_limit_round_trips(local_uri: str) -> None:
    deep: Any = 1
    for i in range(MAX_METADATA_DEPTH):
        deep = [deep] if i % 2 else {"k": deep}
    with Writer(local_uri, "t") as w:
        w.add("s0", {}, {"a": deep, "b": _nested(MAX_METADATA_DEPTH)})
    ds = Dataset.open(local_uri)
    assert ds[0]["a"] == deep and ds[0]["b"] == _nested(MAX_METADATA_DEPTH)
    assert ds.subset("sample_id = 's0'", return_indices=True).tolist() == [0]


@pytest.mark.parametrize("depth", [MAX_METADATA_DEPTH + 1, 101, 5000])
def test_metadata_nested_too_deep_is_refused_at_add(local_uri: str, depth: int) -> None:
    with Writer(local_uri, "t") as w:
        w.add("s0", {}, {"a": 1})
        with pytest.raises(SchemaConflictError, match="deeper than 32 levels") as info:
            w.add("s1", {}, {"deep": _nested(depth)})
        assert (info.value.sample_id, info.value.column) == ("s1", "deep")
    ds = Dataset.open(local_uri)  # the version committed without the refused sample
    assert len(ds) == 1 and ds[0]["a"] == 1


@pytest.mark.parametrize(
    "meta",
    [
        {"bad\ud800": 1},
        {"a": {"\udc00": 1}},
        {"a": "text \ud800"},
        {"a": ["x", "\udfff"]},
    ],
)
def test_lone_surrogates_in_metadata_are_refused_at_add(
    local_uri: str, meta: dict[str, Any]
) -> None:
    with Writer(local_uri, "t") as w:
        w.add("s0", {}, {"a": "plain"} if isinstance(meta.get("a"), str) else {})
        with pytest.raises(SchemaConflictError, match="lone surrogate") as info:
            w.add("s1", {}, meta)
        assert info.value.sample_id == "s1"
    assert len(Dataset.open(local_uri)) == 1


@pytest.mark.parametrize("uri", ["memory://a/../b", "memory://x/./y", "memory://../z"])
def test_object_store_uris_with_dot_segments_are_refused(uri: str) -> None:
    for call in (lambda: Dataset.open(uri), lambda: Writer(uri, "t"), lambda: gc(uri)):
        with pytest.raises(InvalidURIError, match=r"'\.' and '\.\.' segments") as info:
            call()
        assert isinstance(info.value, ValueError) and info.value.uri == uri


def test_a_local_path_with_dot_dot_still_opens(tmp_path: Path, write: WriteFn) -> None:
    write(str(tmp_path / "ds"), 2)
    assert len(Dataset.open(str(tmp_path / "sub" / ".." / "ds"))) == 2


def _edit_text(root: str, old: str, new: str) -> None:
    path = Path(root, version_path(Dataset.open(root).version))
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


MINOR = f'"format_minor": {FORMAT_MINOR}'


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('"version": 1', '"version": 1' + "0" * 5000, "version holds an integer of 5001 digits"),
        ('"size": ', '"size": Infinity, "x": ', r"shards\[0\].size holds Infinity"),
        ('"extensions": {}', '"extensions": {"a": [NaN]}', r"extensions.a\[0\] holds NaN"),
        (MINOR, '"format_minor": 1e999', "format_minor holds 1e999, out of"),
        (MINOR, '"format_minor": -Infinity', "format_minor holds -Infinity"),
        ('"statistics": {', '"statistics": {"z": -' + "9" * 4400 + ",", "statistics.z holds an"),
        ('"parent_version": null', '"parent_version": "1"', "parent_version must be a non-neg"),
        (MINOR, '"format_minor": "3"', "format_minor must be a non-negative"),
        ('"format_version": 1', '"format_version": true', "no integer format_version"),
    ],
)
def test_numbers_no_field_may_hold_are_refused_naming_the_field(
    local_uri: str, write: WriteFn, old: str, new: str, message: str
) -> None:
    # issue 31 point 12: a bare ValueError / OverflowError (a traceback from `ferroload
    # info`) for an integer of over 4,300 digits or Infinity
    write(local_uri, 3)
    _edit_text(local_uri, old, new)
    with pytest.raises(ManifestError, match=message) as info:
        Dataset.open(local_uri)
    assert "0000000001.json" in str(info.value) and isinstance(info.value, ValueError)


def test_a_long_integer_is_refused_where_python_lifted_its_limit(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 3)
    _edit_text(local_uri, '"version": 1', '"version": 1' + "0" * 5000)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a program may; json would then convert any length
    try:
        with pytest.raises(ManifestError, match="version holds an integer of 5001 digits"):
            Dataset.open(local_uri)
    finally:
        sys.set_int_max_str_digits(limit)


def test_integers_of_forty_digits_in_unknown_fields_round_trip(
    local_uri: str, write: WriteFn
) -> None:
    write(local_uri, 3)
    big = -(10**39)
    _tamper(local_uri, lambda raw: raw["extensions"].update(h=big, f=1.5e300))
    assert Dataset.open(local_uri).manifest.extensions == {"h": big, "f": 1.5e300}


@pytest.mark.parametrize("hint", ["7" * 5000, "99999999999999999999", "-1", "1e3"])
def test_a_latest_hint_that_is_not_a_version_number_is_ignored(
    local_uri: str, write: WriteFn, hint: str
) -> None:
    write(local_uri, 3)
    Path(local_uri, "_ferroload", "latest").write_text(hint)
    assert Dataset.open(local_uri).version == 1
