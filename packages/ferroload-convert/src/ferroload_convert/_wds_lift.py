"""Small `.cls`, `.txt` and `.json` members lifted into metadata columns as a tar is imported.

A member is lifted when its bytes come back exactly from the value, so that the export
writes the same bytes back; a ferroload export's `.json` member turns back into the
columns its tar's `__ferroload__` member names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from ferroload_convert._wds_meta import MarkerInfo, from_json

#: Small text members also lifted into queryable metadata: extension -> (column, type).
LIFTED: dict[str, tuple[str, type]] = {
    "cls": ("label", int),
    "txt": ("text", str),
    "json": ("json_text", str),
}
_LIFTED_TYPES = {int: pa.int64(), str: pa.string()}
#: Lifted text larger than this stays a payload only.
MAX_LIFTED_BYTES = 1 << 16


def lift(
    ext: str,
    payload: bytes,
    meta: dict[str, Any],
    marker: MarkerInfo | None,
    declared: Mapping[str, pa.DataType],
) -> tuple[bool, str | None]:
    """Lift a small `.cls` / `.txt` / `.json` member into `meta`: (whether it is kept
    there only, what `wds_members` records as its modality: the column, or None for the
    metadata member of a ferroload export, whose columns the marker names).

    A member is kept as metadata only when its bytes come back exactly from the value
    (`.cls` the decimal of an int64 as `str(int)` writes it; UTF-8 text); a `.cls` that
    reads as an int but is spelled otherwise (`" 4\\n"`) gives `label` and keeps its
    payload as well; anything else stays a payload only.
    """
    if marker is not None and ext == marker.json_ext and _expand(payload, meta, marker):
        return True, None
    lifted = LIFTED.get(ext.lower())
    if lifted is None or len(payload) > MAX_LIFTED_BYTES or lifted[0] in meta:
        return False, None
    if declared.get(lifted[0], _LIFTED_TYPES[lifted[1]]) != _LIFTED_TYPES[lifted[1]]:
        return False, None  # a ferroload export made the column another type
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return False, None
    if lifted[1] is not int:
        meta[lifted[0]] = text
        return True, lifted[0]
    try:
        label = int(text.strip())
    except ValueError:  # a class that is not an integer: the payload only
        return False, None
    if not -(2**63) <= label < 2**63:
        return False, None
    meta[lifted[0]] = label
    return str(label) == text, lifted[0]


def _expand(payload: bytes, meta: dict[str, Any], marker: MarkerInfo) -> bool:
    """Put the columns of a ferroload export's metadata member into `meta`; False (and
    `meta` unchanged) when it is not a JSON object of the marker's columns."""
    try:
        doc = json.loads(payload)
        if not isinstance(doc, dict) or not set(doc) <= set(marker.columns) - set(meta):
            return False
        values = {k: from_json(v, marker.columns[k]) for k, v in doc.items()}
        for k, v in values.items():  # each value fits its declared type
            pa.array([v], type=marker.columns[k])
    except (ValueError, TypeError, AttributeError, OverflowError, pa.ArrowException):
        return False
    meta.update(values)
    return True
