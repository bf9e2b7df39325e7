"""Names that end up in tar members and index columns, and the rules they follow."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime

from ferroload_format._errors import (
    InvalidModalityError,
    InvalidSampleIdError,
    SchemaConflictError,
)

SAMPLE_ID_RE = re.compile(r"[A-Za-z0-9_+=,@~#-]{1,100}")
MODALITY_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
EXT_RE = re.compile(r"[A-Za-z0-9_]{1,16}")
CODEC_HINT_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
KINDS = ("tensor", "bytes", "text")
#: Index columns every dataset has; metadata and modalities cannot use these names.
RESERVED_COLUMNS = frozenset({"sample_id", "shard"})
RESERVED_PREFIX = "_ferroload"
#: Every name `is_reserved` refuses for a new column: the prefix after any number of
#: underscores, in any case (the query sandbox steps its positions column aside by adding
#: underscores, and DuckDB compares names without case).
_RESERVED_RE = re.compile(r"_+ferroload", re.IGNORECASE)
#: USTAR's name field.
MAX_MEMBER_NAME = 100


def check_sample_id(sample_id: object, *, uri: str | None = None) -> str:
    """Return `sample_id` if it is a valid sample id, else raise `InvalidSampleIdError`."""
    if isinstance(sample_id, str) and SAMPLE_ID_RE.fullmatch(sample_id):
        return sample_id
    raise InvalidSampleIdError(_sample_id_problem(sample_id), uri=uri, sample_id=repr(sample_id))


def _sample_id_problem(sample_id: object) -> str:
    if not isinstance(sample_id, str):
        return f"sample id must be a str, got {type(sample_id).__name__} {sample_id!r}"
    if sample_id == "":
        return "sample id must not be empty"
    if len(sample_id) > 100:
        return f"sample id is {len(sample_id)} characters long; the limit is 100"
    bad = sorted({c for c in sample_id if not SAMPLE_ID_RE.fullmatch(c)})
    why = ""
    if "." in bad:
        why = " (a dot would end the WebDataset sample key and '..' could escape the shard)"
    elif "/" in bad or "\\" in bad:
        why = " (path separators could escape the dataset root)"
    elif "\x00" in bad:
        why = " (NUL ends a tar member name)"
    return (
        f"sample id {sample_id!r} contains {''.join(bad)!r}{why}; "
        "use ASCII letters, digits and _ + = , @ ~ # -"
    )


def check_modality(name: str, ext: str, kind: str, codec_hint: str) -> None:
    """Validate a modality declaration; raise `InvalidModalityError` naming the bad part."""
    if not isinstance(name, str) or not MODALITY_RE.fullmatch(name):
        raise InvalidModalityError(
            f"modality name {name!r} is invalid: use lowercase letters, digits and _, "
            "starting with a letter, at most 32 characters",
            column=str(name),
        )
    if name in RESERVED_COLUMNS or name.startswith(RESERVED_PREFIX):
        raise InvalidModalityError(f"modality name {name!r} is reserved", column=name)
    if not isinstance(ext, str) or not EXT_RE.fullmatch(ext):
        raise InvalidModalityError(
            f"extension {ext!r} of modality {name!r} is invalid: use letters, digits and _ "
            "(no dot), at most 16 characters, e.g. 'jpg'",
            column=name,
        )
    if kind not in KINDS:
        raise InvalidModalityError(
            f"kind {kind!r} of modality {name!r} is invalid: choose one of {', '.join(KINDS)}",
            column=name,
        )
    if not isinstance(codec_hint, str) or not CODEC_HINT_RE.fullmatch(codec_hint):
        raise InvalidModalityError(
            f"codec hint {codec_hint!r} of modality {name!r} is invalid: use a lowercase word "
            "such as image, audio, video or raw",
            column=name,
        )


def is_reserved(name: str) -> bool:
    """Whether a new column may not be called `name`: `sample_id`, `shard` (in any case),
    or a name starting with `_ferroload`, `__ferroload`, ... (in any case)."""
    return name.lower() in RESERVED_COLUMNS or _RESERVED_RE.match(name) is not None


def check_column_name(
    name: str,
    taken: Mapping[str, str],
    *,
    uri: str | None = None,
    sample_id: str | None = None,
) -> None:
    """Refuse a new column `name` that is reserved or differs from a column of `taken`
    (lowercased name -> name) only by case: DuckDB, which runs `subset` and `sql`, could
    not tell the two apart.

    Raises:
        SchemaConflictError: naming both columns (and `sample_id`, if given).
    """
    where = f" of sample {sample_id!r}" if sample_id is not None else ""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaConflictError(
            f"metadata key {name!r}{where} holds a lone surrogate, which is not valid UTF-8 "
            "(Parquet and JSON could not store it); decode the name properly first",
            uri=uri,
            sample_id=sample_id,
            column=name,
        ) from None
    if is_reserved(name):
        raise SchemaConflictError(
            f"metadata key {name!r}{where} is reserved (sample_id, shard and names starting "
            "with _ferroload or __ferroload, in any case, are the format's own)",
            uri=uri,
            sample_id=sample_id,
            column=name,
        )
    other = taken.get(name.lower())
    if other is not None and other != name:
        raise SchemaConflictError(
            f"metadata key {name!r}{where} differs from column {other!r} only by case; "
            "SQL (subset, sql) compares names without case and could not tell them apart: "
            f"use {other!r} or another name",
            uri=uri,
            sample_id=sample_id,
            column=name,
        )


def member_name(sample_id: str, modality: str, ext: str) -> str:
    """The tar member name of one payload: `<sample_id>.<modality>.<ext>`."""
    return f"{sample_id}.{modality}.{ext}"


def new_txn_id() -> str:
    """A fresh transaction id: UTC time then 16 random hex digits (sortable, unique)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(8)}"
