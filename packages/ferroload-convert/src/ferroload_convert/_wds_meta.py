"""Metadata in WebDataset tars: the `<key>.json` and `__ferroload__` members of exports.

The `<key>.json` member of ferroload's exports holds a sample's metadata columns; the
`__ferroload__` member tells the importer those columns and their types.

`export_webdataset` writes each sample's metadata columns (but an int `label`, which
becomes `<key>.cls`) as one JSON object per sample, and, once per tar, a member named
`__ferroload__` (WebDataset's readers skip `__…__` members):
`{"ferroload": 1, "json": "json", "cls": "cls", "columns": {"label": "int64", ...}}`:
the extensions of the two members and each column's type in the manifest's form
(docs/format.md §6). `import_webdataset` reads it and turns those `.json` members back
into the same columns, of the same types (`bytes` travel as base64).

The marker also names the dataset's modalities and the member extensions that hold each
(`"modalities": {"image": {"ext": "jpg", "kind": "tensor", "codec_hint": "image",
"members": ["jpg", "png", …]}}`): a member takes its extension from its bytes' format
(a PNG in a `jpg` modality is `<key>.png`), and the importer puts every one of those
members back into the one modality, declared as it was.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from ferroload_core import FerroloadError
from ferroload_format import check_modality, type_from_json
from ferroload_format import type_to_json as format_type_to_json

#: The name of the member describing a tar's metadata.
MARKER = "__ferroload__"
#: The largest marker read (a bigger one is ignored).
MAX_MARKER_BYTES = 1 << 20


#: The most modalities, and member extensions per modality, a marker may name.
MAX_MARKER_MODALITIES = 64


@dataclass(frozen=True)
class ModalityMembers:
    """A modality as a `__ferroload__` member declares it, with the member extensions
    (`<key>.<extension>`) that hold its payloads."""

    ext: str
    kind: str
    codec_hint: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class MarkerInfo:
    """What a tar's `__ferroload__` member says: its metadata member's extension, the
    types of the columns that member holds, and the modalities (none in markers written
    before 0.2's exports named them)."""

    json_ext: str
    columns: dict[str, pa.DataType]
    modalities: dict[str, ModalityMembers] = field(default_factory=dict)


def type_to_json(t: pa.DataType) -> Any:
    """A column's type in the manifest's JSON form; Arrow's large types (as a Parquet or
    HF source may hold) take the form of their regular ones (`ValueError` for others)."""
    return format_type_to_json(_regular(t))


def _regular(t: pa.DataType) -> pa.DataType:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_regular(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _regular(f.type)) for f in t])
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def to_json(value: Any) -> Any:
    """A metadata value as JSON can hold it (`bytes` as base64 text)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def from_json(value: Any, t: pa.DataType) -> Any:
    """The inverse of `to_json` for a value of type `t` (`ValueError` if it does not fit)."""
    if value is None:
        return None
    if t == pa.binary():
        return base64.b64decode(value, validate=True)
    if pa.types.is_list(t) and isinstance(value, list):
        return [from_json(v, t.value_type) for v in value]
    if pa.types.is_struct(t) and isinstance(value, dict):
        return {f.name: from_json(value.get(f.name), f.type) for f in t}
    if t == pa.float64() and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def dumps(obj: Any) -> bytes:
    """JSON text of `obj`, as the export writes it."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=True).encode("utf-8")


def read_marker(data: bytes) -> MarkerInfo | None:
    """What a `__ferroload__` member says, or None when it is not one of ours (or names
    an invalid modality or member extension)."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("ferroload") != 1:
            return None
        columns = {str(k): type_from_json(v) for k, v in doc["columns"].items()}
        json_ext, cls_ext = doc["json"], doc.get("cls")
        if not isinstance(json_ext, str) or not (cls_ext is None or isinstance(cls_ext, str)):
            return None
        modalities = _read_modalities(doc.get("modalities", {}))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, FerroloadError):
        return None
    return MarkerInfo(json_ext, columns, modalities)


#: A member extension a marker may name: dot-separated words (`png`, `seg.png`).
_MEMBER_EXT = re.compile(r"[A-Za-z0-9_-]{1,32}(\.[A-Za-z0-9_-]{1,32}){0,3}")


def _read_modalities(doc: Any) -> dict[str, ModalityMembers]:
    """The `modalities` of a marker, checked (`ValueError`, `InvalidModalityError`)."""
    if not isinstance(doc, dict) or len(doc) > MAX_MARKER_MODALITIES:
        raise ValueError("modalities is not an object of at most 64 entries")
    out: dict[str, ModalityMembers] = {}
    for name, spec in doc.items():
        members = spec["members"]
        if not isinstance(members, list) or not 0 < len(members) <= MAX_MARKER_MODALITIES:
            raise ValueError(f"the members of {name!r} are not a list of 1 to 64")
        if not all(isinstance(m, str) and _MEMBER_EXT.fullmatch(m) for m in members):
            raise ValueError(f"a member extension of {name!r} is not a plain extension")
        check_modality(name, spec["ext"], spec["kind"], spec["codec_hint"])
        out[name] = ModalityMembers(spec["ext"], spec["kind"], spec["codec_hint"],
                                    tuple(dict.fromkeys(members)))  # fmt: skip
    return out


def marker(
    json_ext: str,
    cls_ext: str | None,
    columns: dict[str, pa.DataType],
    modalities: dict[str, ModalityMembers],
) -> bytes:
    """The `__ferroload__` member for these columns and modalities."""
    return dumps(
        {
            "ferroload": 1,
            "json": json_ext,
            "cls": cls_ext,
            "columns": {k: type_to_json(t) for k, t in columns.items()},
            "modalities": {name: asdict(m) for name, m in modalities.items()},
        }
    )
