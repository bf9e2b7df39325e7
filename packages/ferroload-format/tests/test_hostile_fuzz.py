"""Fuzzing a small real dataset: hostile manifests, index parts and shard bytes end in a
`FerroloadError` (or a correct answer), never another exception or a read outside the root
(issue 13, the reliability suite).

Each property copies a dataset written once per module into a fresh temporary folder next
to a canary file, damages one part of the copy with a hypothesis-drawn edit, then opens it
and reads it (`len`, `get`, `subset`, `verify`). The examples are few so the module runs in
well under a minute; set ``FERROLOAD_FUZZ_LONG=1`` to multiply them for a long run::

    FERROLOAD_FUZZ_LONG=1 uv run pytest packages/ferroload-format/tests/test_hostile_fuzz.py
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ferroload_core import FerroloadError
from ferroload_format import Dataset, ManifestError, Writer
from ferroload_format._paths import version_path

#: Examples per property; FERROLOAD_FUZZ_LONG=1 multiplies them for a long run.
EXAMPLES = 150 * (50 if os.environ.get("FERROLOAD_FUZZ_LONG") == "1" else 1)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Bytes no read of the dataset may ever hand back: they live next to the root, outside it.
CANARY = b"CANARY-0b9f2c41d7e3-outside-the-root"
#: Stands for the absolute path of the canary in drawn strings (known only per example).
ABS_CANARY = "<abs-canary>"
#: Stands for a list nested 2000 deep, spliced into the JSON text (json.dumps would recurse).
DEEP = "<deep-2000>"
NUM_SAMPLES = 4


def _image(i: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + bytes([i]) * (40 + 9 * i)


@pytest.fixture(scope="module")
def template() -> Iterator[Path]:
    """A folder holding `ds/` (a real 4-sample dataset) and `canary.txt` beside it."""
    with tempfile.TemporaryDirectory(prefix="ferroload-fuzz-") as tmp:
        base = Path(tmp)
        with Writer(str(base / "ds"), "fuzz") as w:
            w.declare("image", "png")
            for i in range(NUM_SAMPLES):
                w.add(f"s{i}", {"image": _image(i)}, {"label": i, "caption": f"c{i}"})
        (base / "canary.txt").write_bytes(CANARY)
        yield base


def _copy(template: Path, tmp: str) -> Path:
    """A fresh copy of the template in `tmp`; returns the dataset root."""
    shutil.copytree(template, Path(tmp, "t"), symlinks=True)
    return Path(tmp, "t", "ds")


def _manifest_path(root: Path) -> Path:
    return root / version_path(int((root / "_ferroload" / "latest").read_text().strip()))


def _exercise(root: Path, *, verify_checksums: bool = False) -> list[Any]:
    """Open and read `root` as a user would; every failure must be a `FerroloadError`.

    Returns what came back (values and error messages) for the caller to inspect.
    """
    out: list[Any] = []
    try:
        ds = Dataset.open(str(root), verify_checksums=verify_checksums)
    except FerroloadError as exc:
        return [str(exc)]
    steps = [
        len,
        lambda d: d.get(0),
        lambda d: d.subset("true", return_indices=True),
        lambda d: d.verify(),
    ]
    for step in steps:
        try:
            out.append(step(ds))
        except FerroloadError as exc:
            out.append(str(exc))
    return out


def _assert_no_canary(out: list[Any]) -> None:
    assert CANARY.decode() not in repr(out)


# --- 1. the manifest ------------------------------------------------------------------

_HOSTILE_PATHS = [
    "../canary.txt",
    "shards/../../canary.txt",
    "../../../../../../etc/passwd",
    ABS_CANARY,
    "/etc/passwd",
    "file:///etc/passwd",
    "s3://other-bucket/x.tar",
    "memory://x/y",
    "C:/x.tar",
    "C:\\x.tar",
    "shards\\x.tar",
    "shards/x\x00.tar",
    "shards/x\x1b[31m.tar",
    "shards/\n.tar",
    "",
    ".",
    "shards/",
    "shards//x.tar",
    "shards/./x.tar",
    "index/part-0000000001.parquet",
    "_ferroload/latest",
    "x" * 5000,
    "a/" * 2000 + "b",
]
_hostile_strings = st.one_of(st.sampled_from(_HOSTILE_PATHS), st.text(max_size=12))
_hostile_numbers = st.one_of(
    st.sampled_from([-1, -(2**63), 2**63 - 1, 2**63, 2**64, 2**200, 0]),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)


def _nested(depth: int, value: Any = 1) -> Any:
    for _ in range(depth):
        value = [value]
    return value


_hostile_values = st.one_of(
    _hostile_strings,
    _hostile_numbers,
    st.sampled_from([None, True, False, [], {}, [1, "a"], {"path": 1}]),
    st.sampled_from([126, 127, 128, 129]).map(_nested),
    st.just(DEEP),
)


def _locations(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path into a JSON value (the root excluded)."""
    if isinstance(value, (dict, list)):
        items: Any = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield (*prefix, key)
            yield from _locations(child, (*prefix, key))


def _apply(manifest: Any, location: tuple[Any, ...], action: str, value: Any) -> None:
    parent = manifest
    for key in location[:-1]:
        parent = parent[key]
    last = location[-1]
    if action == "drop":
        del parent[last]
    elif action == "nest":
        parent[last] = _nested(200, parent[last])
    else:
        parent[last] = value


@st.composite
def manifest_edits(draw: st.DrawFn, manifest: dict[str, Any]) -> list[Any]:
    """Up to 3 (location, action, value) edits of the manifest, applied in order."""
    locations = sorted(_locations(manifest), key=repr)
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        location = draw(st.sampled_from(locations))
        action = draw(st.sampled_from(["replace", "replace", "replace", "drop", "nest"]))
        edits.append((location, action, draw(_hostile_values)))
    return edits


def _substitute(value: Any, canary: Path) -> Any:
    return str(canary) if value == ABS_CANARY else value


@FUZZ
@given(data=st.data())
def test_a_mutated_manifest_is_read_or_refused(template: Path, data: st.DataObject) -> None:
    manifest = json.loads(_manifest_path(template / "ds").read_bytes())
    edits = data.draw(manifest_edits(manifest))
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(template, tmp)
        canary = root.parent / "canary.txt"
        for location, action, value in edits:
            try:
                _apply(manifest, location, action, copy.deepcopy(_substitute(value, canary)))
            except (KeyError, IndexError, TypeError):
                continue  # an earlier edit removed or replaced this location
        text = json.dumps(manifest).replace(json.dumps(DEEP), "[" * 2000 + "]" * 2000)
        _manifest_path(root).write_text(text)
        _assert_no_canary(_exercise(root))
        assert canary.read_bytes() == CANARY


@pytest.mark.parametrize("key", ["size", "num_samples", "version"])
def test_a_shard_count_past_int64_is_refused(template: Path, key: str) -> None:
    # found by this suite: a size of 2**63 was an OverflowError when the index loaded
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(template, tmp)
        manifest = json.loads(_manifest_path(root).read_bytes())
        manifest["shards"][0][key] = 2**63
        _manifest_path(root).write_text(json.dumps(manifest))
        with pytest.raises(ManifestError, match=f"shards\\[0\\].{key} must be a non-negative"):
            Dataset.open(str(root))


# --- 2. the index part ----------------------------------------------------------------

_index_ints = st.one_of(
    st.sampled_from([-1, -512, -(2**63), 2**63 - 1, 2**62, 0, 1, 511, 512, 513, 5120]),
    st.integers(-(2**63), 2**63 - 1),
)


@st.composite
def index_edits(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["offset", "length", "shard", "retype", "drop", "rows"]))
    if kind in ("offset", "length"):
        return kind, draw(st.lists(_index_ints, min_size=NUM_SAMPLES, max_size=NUM_SAMPLES))
    if kind == "shard":
        return kind, draw(st.lists(_hostile_strings, min_size=NUM_SAMPLES, max_size=NUM_SAMPLES))
    if kind == "retype":
        column = draw(st.sampled_from(["sample_id", "shard", "image", "label", "caption"]))
        return kind, (column, draw(st.sampled_from([pa.int32(), pa.string(), pa.float64()])))
    if kind == "drop":
        return kind, draw(st.sampled_from(["sample_id", "shard", "image", "label", "caption"]))
    return kind, draw(st.integers(0, 2 * NUM_SAMPLES))


def _image_struct(table: pa.Table, **changes: list[Any]) -> pa.StructArray:
    struct = table.column("image").combine_chunks()
    fields = {f.name: struct.field(f.name).to_pylist() for f in struct.type}
    fields.update(changes)
    return pa.StructArray.from_arrays(
        [pa.array(v, f.type) for v, f in zip(fields.values(), struct.type, strict=True)],
        fields=list(struct.type),
    )


def _retyped(column: pa.ChunkedArray, to: pa.DataType) -> pa.Array:
    """`column` as `to`, or nulls of `to` where the values do not cast."""
    try:
        return column.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.nulls(len(column), to)


def _edit_index(table: pa.Table, kind: str, arg: Any) -> pa.Table:
    if kind in ("offset", "length"):
        new = _image_struct(table, **{kind: arg})
        return table.set_column(table.schema.get_field_index("image"), "image", new)
    if kind == "shard":
        shard = pa.array(arg, pa.string())
        return table.set_column(table.schema.get_field_index("shard"), "shard", shard)
    if kind == "retype":
        name, to = arg
        i = table.schema.get_field_index(name)
        return table.set_column(i, name, _retyped(table.column(name), to))
    if kind == "drop":
        return table.drop_columns([arg])
    return pa.concat_tables([table] * 2).slice(0, arg)


@pytest.mark.slow
@FUZZ
@given(edit=index_edits(), fix_size=st.booleans())
# found by this suite: a KeyError, an AttributeError and an ArrowNotImplementedError
@example(edit=("drop", "sample_id"), fix_size=True)
@example(edit=("drop", "shard"), fix_size=True)
@example(edit=("retype", ("shard", pa.int32())), fix_size=True)
@example(edit=("retype", ("image", pa.int32())), fix_size=True)
def test_a_mutated_index_part_is_read_or_refused(
    template: Path, edit: tuple[str, Any], fix_size: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(template, tmp)
        canary = root.parent / "canary.txt"
        mpath = _manifest_path(root)
        manifest = json.loads(mpath.read_bytes())
        (part,) = manifest["index_parts"]
        ppath = root / part["path"]
        kind, arg = edit
        if kind == "shard":
            arg = [_substitute(v, canary) for v in arg]
        pq.write_table(_edit_index(pq.read_table(ppath), kind, arg), ppath)
        if fix_size:
            part["size"] = ppath.stat().st_size
            mpath.write_text(json.dumps(manifest))
        _assert_no_canary(_exercise(root))


# --- 3. shard bytes -------------------------------------------------------------------


@st.composite
def byte_edits(draw: st.DrawFn, size: int) -> tuple[int | None, list[tuple[int, int]]]:
    """A truncation point (or None) and (position, xor mask) byte flips."""
    cut = draw(st.one_of(st.none(), st.integers(0, size - 1)))
    flips = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(1, 255)), max_size=6))
    return cut, flips


def _damage(path: Path, cut: int | None, flips: list[tuple[int, int]]) -> bool:
    """Apply the edit to the file at `path`; True if its bytes changed."""
    before = path.read_bytes()
    data = bytearray(before)
    for pos, mask in flips:
        data[pos] ^= mask
    if cut is not None:
        del data[cut:]
    path.write_bytes(bytes(data))
    return bytes(data) != before


@pytest.mark.slow
@FUZZ
@given(data=st.data(), target=st.sampled_from(["tar", "side_index"]))
def test_damaged_shard_bytes_read_right_or_fail_clearly(
    template: Path, data: st.DataObject, target: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(template, tmp)
        shard = json.loads(_manifest_path(root).read_bytes())["shards"][0]
        path = root / shard["path" if target == "tar" else "side_index"]
        cut, flips = data.draw(byte_edits(path.stat().st_size))
        changed = _damage(path, cut, flips)

        checked = Dataset.open(str(root), verify_checksums=True)
        plain = Dataset.open(str(root))
        wrong = False
        for i in range(NUM_SAMPLES):
            with contextlib.suppress(FerroloadError):
                assert checked.get(i)["image"] == _image(i)
            try:
                wrong |= plain.get(i)["image"] != _image(i)
            except FerroloadError:
                wrong = True
        report = plain.verify()
        if target == "tar" and changed and wrong:
            assert report.problems, "damaged payloads read back wrong but verify() saw nothing"
        if target == "tar" and cut is not None:
            assert report.problems, f"a shard cut at {cut} of {shard['size']} was not reported"
        _assert_no_canary(_exercise(root))


def test_a_side_index_member_name_that_is_not_utf8_is_a_problem(template: Path) -> None:
    # found by this suite: a flipped byte in a side index was a UnicodeDecodeError in verify()
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(template, tmp)
        shard = json.loads(_manifest_path(root).read_bytes())["shards"][0]
        path = root / shard["side_index"]
        table = pq.read_table(path)
        names = pa.array([b"\xf3" + m.encode() for m in table.column("member").to_pylist()])
        member = names.view(pa.string())  # no UTF-8 check, as a damaged file would read
        pq.write_table(
            table.set_column(table.schema.get_field_index("member"), "member", member), path
        )
        report = Dataset.open(str(root)).verify()
        assert [p.kind for p in report.problems] == ["side-index"]
