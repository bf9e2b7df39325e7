"""Reading datasets written by ferroload-rs 0.1.1, the Rust original (docs/format.md §11).

A 0.1.1 root has `manifest.json` (its commit point) and `versions/vN.json` at the top,
`index/part-NNNNN.parquet` (one per data shard: `sample_id` = row number, `shard_id`,
`basename` = the key, `shard`, `<modality>_off`/`_len`, then metadata), tar shards
`shards/shard-NNNNN.tar` with a JSON side index `<shard>.tar.idx`, and enrichment layers
(`index/<layer>.parquet`, `shards/<layer>/`) listed in the manifest's `layers`.

This module translates one of its versions into this format's concepts: a `Manifest`
(built as JSON and parsed by `Manifest.from_json`, so every check of a manifest applies)
and index parts with this format's columns. The shards are read where they are. The
translated parts are not stored: their keys lie under `VIEW_DIR`, and `part_bytes`
makes their bytes again, in any process, from the 0.1.1 files (`_part_files` asks it
before the store). `ferroload upgrade` writes the same translation as real files.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ferroload_core import UnsafePathError, check_relative_path
from ferroload_format._errors import ManifestError
from ferroload_format._index import MODALITY_TYPE, write_part
from ferroload_format._index_arrays import arrow_array, numpy_column
from ferroload_format._manifest import (
    FORMAT_MINOR,
    FORMAT_NAME,
    FORMAT_VERSION,
    NO_CHECKSUMS,
    Manifest,
)
from ferroload_format._names import (
    EXT_RE,
    MODALITY_RE,
    SAMPLE_ID_RE,
    check_column_name,
    is_reserved,
)
from ferroload_format._paths import VERSIONS_DIR
from ferroload_format._types import type_to_json
from ferroload_store import ObjectNotFoundError, Store

#: The commit point of a 0.1.1 root.
LEGACY_MANIFEST = "manifest.json"
#: Where 0.1.1 keeps a snapshot of each version's manifest (`vN.json`).
LEGACY_VERSIONS = "versions/"
#: Keys of translated index parts: never stored, made by `part_bytes`.
VIEW_DIR = "_ferroload/rs011-view/"
#: Where `upgrade` keeps 0.1.1's own index files (out of the `index/part-*` glob).
MOVED_DIR = "_ferroload/rs011/"
#: The largest 0.1.1 manifest read (a real one is a few KiB).
MAX_MANIFEST_BYTES = 16 << 20
#: The largest 0.1.1 index file read (its rows are read whole).
MAX_INDEX_BYTES = 2 << 30
#: The largest 0.1.1 side index (`<shard>.tar.idx`, JSON) read by verify.
MAX_SIDE_INDEX_BYTES = 256 << 20
#: The marker a translated manifest carries (a top-level field: kept, never written).
MARKER = "rs011"
#: The checksum algorithm of a translated version: 0.1.1 recorded none.

_VERSION_KEY = re.compile(r"versions/v([1-9][0-9]{0,9})\.json")
_CODECS = {"image": "image", "audio": "audio", "video": "video", "npy": "npy"}


def _error(uri: str, what: str) -> ManifestError:
    return ManifestError(f"{uri}: {what} (a dataset written by ferroload-rs 0.1.1)", uri=uri)


def is_rs011_root(store: Store) -> bool:
    """Whether `store` holds a dataset of ferroload-rs 0.1.1 that was not upgraded: no
    manifest of this format, and a `manifest.json` that says it is 0.1.1's (a JSON object
    with `format_version` 1, a `name` and an `index` or `index_shards`; a folder with
    some other `manifest.json` is no dataset)."""
    try:
        if store.list(VERSIONS_DIR) or store.head(LEGACY_MANIFEST).size > MAX_MANIFEST_BYTES:
            return False
        raw = json.loads(store.get(LEGACY_MANIFEST))
    except (ObjectNotFoundError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return (
        isinstance(raw, dict)
        and raw.get("format_version") == 1
        and isinstance(raw.get("name"), str)
        and ("index_shards" in raw or "index" in raw)
    )


def legacy_versions(store: Store) -> list[int]:
    """The 0.1.1 versions of `store` (its `versions/vN.json`, else the manifest's)."""
    found = sorted(
        int(m.group(1))
        for o in store.list(LEGACY_VERSIONS)
        if (m := _VERSION_KEY.fullmatch(o.path)) is not None
    )
    if found:
        return found
    raw, _ = read_legacy(store, None)
    return [_count(raw.get("version", 1), "version", store.uri)]


def read_legacy(store: Store, version: int | None) -> tuple[dict[str, Any], bytes]:
    """The 0.1.1 manifest of `version` (None: `manifest.json`) and its bytes."""
    key = LEGACY_MANIFEST if version is None else f"{LEGACY_VERSIONS}v{version}.json"
    uri = f"{store.uri}/{key}"
    try:
        size = store.head(key).size
        if size > MAX_MANIFEST_BYTES:
            raise _error(uri, f"manifest is {size} bytes; the limit is {MAX_MANIFEST_BYTES}")
        data = store.get(key)
    except ObjectNotFoundError:
        if version is not None:
            latest, data = read_legacy(store, None)
            if latest.get("version") == version:
                return latest, data
        raise
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _error(uri, f"manifest is not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise _error(uri, "manifest is not a JSON object with a name")
    if raw.get("format_version") != 1 or not isinstance(raw.get("min_reader_version", 1), int):
        raise _error(uri, f"unknown format_version {raw.get('format_version')!r}")
    if raw.get("min_reader_version", 1) > 2:
        raise _error(uri, "manifest needs a newer reader than ferroload-rs 0.1.1's")
    if version is not None and raw.get("version", 1) != version:
        raise _error(uri, f"manifest claims to be version {raw.get('version')!r}")
    return raw, data


def _count(value: Any, what: str, uri: str) -> int:
    if type(value) is not int or value < 0:
        raise _error(uri, f"{what} must be a non-negative integer, got {value!r}")
    return value


def _path(value: Any, what: str, uri: str) -> str:
    try:
        return check_relative_path(value, what=f"{what} of {uri}")
    except UnsafePathError:
        raise
    except (
        TypeError,
        ValueError,
    ) as exc:  # pragma: no cover  (check_relative_path raises UnsafePathError)
        raise _error(uri, str(exc)) from None


def side_members(data: bytes, *, what: str) -> dict[str, tuple[int, int]]:
    """The members of a 0.1.1 side index: `{"members": {"<key>.<ext>": [offset, length]}}`.

    Raises:
        ValueError: naming `what`, when it is not that.
    """
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    members = raw.get("members") if isinstance(raw, dict) else None
    if not isinstance(members, dict):
        raise ValueError(f"{what} has no members object")
    out = {}
    for name, loc in members.items():
        if not (
            isinstance(loc, list)
            and len(loc) == 2
            and all(type(v) is int and 0 <= v < 1 << 63 for v in loc)
        ):
            raise ValueError(f"{what}: member {name[:100]!r} has no [offset, length] pair")
        out[name] = (loc[0], loc[1])
    return out


# ---------------------------------------------------------------- sample ids


def sample_ids(keys: list[str]) -> list[str]:
    """This format's sample id for each 0.1.1 key, in order: the key itself when it is a
    valid id not seen before; otherwise the key with every other character written as
    `~` and two hex digits of its UTF-8 bytes (`with.dot` -> `with~2edot`), cut to 83
    characters plus `~` and 16 hex digits of its hash when longer than 100, and, when
    that is taken, cut to 80 and suffixed with `~r` and the row number (then `~1`, `~2`,
    … until it is free)."""
    out: list[str] = []
    seen: set[str] = set()
    for row, key in enumerate(keys):
        sid = key if SAMPLE_ID_RE.fullmatch(key) else _escape(key)
        if sid in seen:
            base, k = f"{sid[:80]}~r{row}", 0
            sid = base
            while sid in seen:  # ends: each try is new, and `seen` is finite
                k += 1
                sid = f"{base}~{k}"
        seen.add(sid)
        out.append(sid)
    return out


def _escape(key: str) -> str:
    sid = (
        "".join(
            c
            if SAMPLE_ID_RE.fullmatch(c)
            else "".join(f"~{b:02x}" for b in c.encode("utf-8", "surrogatepass"))
            for c in key
        )
        or "~"
    )
    if len(sid) > 100:
        sid = f"{sid[:83]}~{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return sid


# ---------------------------------------------------------------- translation


@dataclass
class _Layer:
    name: str
    table: pa.Table  # this format's layer part: one row per base row
    columns: list[pa.Field]
    modalities: list[dict[str, Any]]
    shards: list[dict[str, Any]]


@dataclass
class Translation:
    """One 0.1.1 version in this format's terms: the manifest (JSON) and the tables of its
    index parts (the base part, then one per layer), each with the key it is read from."""

    manifest: dict[str, Any]
    parts: dict[str, pa.Table]


def _read_index(store: Store, key: str, uri: str) -> pa.Table:
    try:
        size = store.head(key).size
    except ObjectNotFoundError:
        raise _error(uri, f"index file {key} is missing") from None
    if size > MAX_INDEX_BYTES:
        raise _error(uri, f"index file {key} is {size} bytes; the limit is {MAX_INDEX_BYTES}")
    mapped = store.map_local(key)
    data = mapped if mapped is not None else store.get(key)
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _error(uri, f"index file {key} is not readable Parquet: {exc}") from None


def _np(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A numeric or boolean column without nulls as numpy (`numpy_column`: pyarrow's own
    `to_numpy` of a chunked array imports pandas, seconds on first use)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return numpy_column(values)


def _strings_array(values: list[str | None]) -> pa.Array:
    """`values` as an Arrow string array, built from buffers (`pa.array` of a list
    imports pandas, seconds, the first time)."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    nulls = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    valid = None
    if nulls.any():
        valid = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    large = pa.Array.from_buffers(
        pa.large_string(),
        len(values),
        [valid, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
        null_count=int(nulls.sum()),
    )
    return large.cast(pa.string())


def _one(table: pa.Table, name: str, key: str, uri: str) -> None:
    if len(table.schema.get_all_field_indices(name)) > 1:
        raise _error(uri, f"index file {key} has the column {name!r} more than once")


def _ints(table: pa.Table, name: str, key: str, uri: str, *, nulls: bool = False) -> np.ndarray:
    _one(table, name, key, uri)
    if name not in table.column_names or not pa.types.is_integer(table.schema.field(name).type):
        raise _error(uri, f"index file {key} has no integer column {name!r}")
    col = table.column(name)
    if not nulls and col.null_count:
        raise _error(uri, f"index file {key} has nulls in {name!r}")
    try:
        col = pc.cast(col, pa.int64())
    except pa.ArrowInvalid:
        raise _error(uri, f"index file {key} has values of {name!r} past int64") from None
    arr = col.combine_chunks()
    # nulls read as -1 from the data buffer (pa.scalar and fill_null import pandas: seconds)
    data = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr)]
    data = data.copy() if len(data) else np.zeros(0, dtype=np.int64)
    if arr.null_count:
        data[~_np(arr.is_valid())] = -1
    return data


def _strings(table: pa.Table, name: str, key: str, uri: str) -> pa.ChunkedArray:
    _one(table, name, key, uri)
    if name not in table.column_names or not pa.types.is_string(table.schema.field(name).type):
        raise _error(uri, f"index file {key} has no string column {name!r}")
    return table.column(name)


def _modality(name: Any, raw: Any, uri: str) -> dict[str, Any]:
    if not isinstance(name, str) or not MODALITY_RE.fullmatch(name) or is_reserved(name):
        raise _error(
            uri,
            f"modality name {name!r} cannot be read by this ferroload (lowercase letters, "
            "digits and _, starting with a letter, at most 32 characters)",
        )
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("ext"), str)
        or not EXT_RE.fullmatch(raw["ext"])
    ):
        raise _error(uri, f"modality {name!r} has no usable ext ([A-Za-z0-9_], at most 16)")
    codec = raw.get("codec", "raw")
    hint = _CODECS.get(codec if isinstance(codec, str) else "", "raw")
    kind = "tensor" if hint in ("image", "audio", "video") else "bytes"
    return {"name": name, "ext": raw["ext"], "kind": kind, "codec_hint": hint}


def _unify(types: list[pa.DataType]) -> pa.DataType:
    """The type a metadata column gets when 0.1.1 inferred it per index file."""
    kinds = set(types)
    if len(kinds) == 1:
        return types[0]
    if kinds <= {pa.int64(), pa.float64()}:
        return pa.float64()
    return pa.string()


def _cast(col: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    if col.type == to:
        return col
    if pa.types.is_null(col.type):
        return pa.chunked_array([pa.nulls(len(col), to)])
    if to == pa.string() and pa.types.is_boolean(col.type):
        return pc.if_else(col, "true", "false")
    return pc.cast(col, to)


def _locations(
    table: pa.Table,
    name: str,
    key: str,
    uri: str,
    checksums: Mapping[tuple[str, int, int], int] | None,
    paths: np.ndarray,
) -> tuple[pa.Array, np.ndarray]:
    """The location structs of modality `name` (absent where 0.1.1 has nulls) and its
    presence mask."""
    n = table.num_rows
    if f"{name}_off" not in table.column_names:
        present = np.zeros(n, dtype=bool)
        off = length = np.zeros(n, dtype=np.int64)
    else:
        off = _ints(table, f"{name}_off", key, uri, nulls=True)
        length = _ints(table, f"{name}_len", key, uri, nulls=True)
        off_null = _np(table.column(f"{name}_off").is_null())
        len_null = _np(table.column(f"{name}_len").is_null())
        present = ~off_null & ~len_null
        if (off_null != len_null).any() or (off[present] < 0).any() or (length[present] < 0).any():
            raise _error(uri, f"index file {key} has a negative or half-null {name!r} location")
        off = np.where(present, off, 0)
        length = np.where(present, length, 0)
    sums = np.zeros(n, dtype=np.uint64)
    if checksums is not None:
        for i in np.flatnonzero(present):
            sums[i] = checksums[(str(paths[i]), int(off[i]), int(length[i]))]
    array = pa.StructArray.from_arrays(
        [arrow_array(present), arrow_array(off), arrow_array(length), arrow_array(sums)],
        fields=list(MODALITY_TYPE),
    )
    return array, present


def _shard_paths(table: pa.Table, prefix: str, key: str, uri: str) -> np.ndarray:
    """The root-relative shard of each row: `prefix` + the row's `shard`, or
    `shard-<shard_id>.tar`."""
    ids = _ints(table, "shard_id", key, uri)
    named: list[str | None] = [None] * table.num_rows
    if "shard" in table.column_names:
        column = _strings(table, "shard", key, uri)
        if column.null_count < len(column):
            named = column.to_pylist()
    if not any(named):  # the common case: every row by shard_id, a path per shard
        uniq, inverse = np.unique(ids, return_inverse=True)
        found = [
            _path(f"{prefix.rstrip('/')}/shard-{u:05d}.tar", "shard", uri) for u in uniq.tolist()
        ]
        return (
            np.asarray(found, dtype=object)[inverse] if len(found) else np.asarray([], dtype=object)
        )
    cache: dict[Any, str] = {}
    out = []
    for sid, name in zip(ids.tolist(), named, strict=True):
        k = (sid, name)
        path = cache.get(k)
        if path is None:
            rel = name if name is not None else f"shard-{sid:05d}.tar"
            path = cache[k] = _path(f"{prefix.rstrip('/')}/{rel}", "shard", uri)
        out.append(path)
    return np.asarray(out, dtype=object)


def _shard_records(
    store: Store, paths: np.ndarray, present: list[np.ndarray], version: int
) -> list[dict[str, Any]]:
    """One shard record per shard a payload is in (first-seen order)."""
    has = np.zeros(len(paths), dtype=bool)
    members = np.zeros(len(paths), dtype=np.int64)
    for p in present:
        has |= p
        members += p
    records: dict[str, dict[str, Any]] = {}
    for path, m in zip(paths[has].tolist(), members[has].tolist(), strict=True):
        rec = records.get(path)
        if rec is None:
            try:
                size = store.head(path).size
            except ObjectNotFoundError:
                size = 0  # read as missing: verify reports it, reads name it
            rec = records[path] = {
                "path": path,
                "side_index": f"{path}.idx",
                "size": size,
                "num_samples": 0,
                "num_members": 0,
                "version": version,
                MARKER: True,
            }
        rec["num_samples"] += 1
        rec["num_members"] += m
    return list(records.values())


def _iso(value: Any) -> str | None:
    """`value` as this format's time, when it is an ISO 8601 time (else None)."""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return f"{when.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%fZ}"


def version_time(store: Store, version: int, raw: dict[str, Any] | None = None) -> str:
    """When 0.1.1 version `version` (manifest `raw`, read if None) was committed, as far as
    anyone can tell: its `created_utc`, which 0.1.1 left empty, else the time its
    `versions/vN.json` was last modified (`upgrade` writes that time into `created_utc`
    when it rewrites the file)."""
    if raw is None:
        raw, _ = read_legacy(store, version)
    given = _iso(raw.get("created_utc"))
    if given is not None:
        return given
    try:
        when = store.head(f"{LEGACY_VERSIONS}v{version}.json").last_modified
    except (ObjectNotFoundError, OSError):
        when = None
    if not isinstance(when, datetime):
        when = datetime(1970, 1, 1, tzinfo=UTC)
    return f"{when.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%fZ}"


def translate(
    store: Store,
    version: int,
    *,
    checksums: Mapping[tuple[str, int, int], int] | None = None,
    part_keys: Mapping[str, str] | None = None,
    created_at: str | None = None,
) -> Translation:
    """Translate 0.1.1 version `version` of `store`.

    `checksums` ((shard, offset, length) -> xxh3-64) fills the location structs (None:
    zeros, and the manifest says `checksum_algorithm: none`); `part_keys` names where each
    part lives ("base", then each layer's name; default: keys under `VIEW_DIR`);
    `created_at` is the version's time (default: that of its `versions/vN.json`, see
    `created_at`).

    Raises:
        ManifestError: for anything this format cannot represent or that is malformed,
            naming the file.
        UnsafePathError: for a path that could leave the root.
    """
    raw, data = read_legacy(store, version)
    uri = f"{store.uri}/{LEGACY_VERSIONS}v{version}.json"
    digest = hashlib.sha256(data).hexdigest()[:16]

    def key_of(what: str) -> str:
        if part_keys is not None:
            return part_keys[what]
        return f"{VIEW_DIR}{digest}/v{version}/{what}.parquet"

    mods_raw = raw.get("modalities") or {}
    if not isinstance(mods_raw, dict):
        raise _error(uri, "modalities is not an object")
    modalities = [_modality(k, v, uri) for k, v in mods_raw.items()]
    mod_names = {m["name"] for m in modalities}

    # the base index: parts in start_id order, dense and contiguous from 0
    refs = raw.get("index_shards") or []
    if not isinstance(refs, list):
        raise _error(uri, "index_shards is not a list")
    tables: list[pa.Table] = []
    start = 0
    for i, ref in enumerate(refs):
        if not isinstance(ref, dict):
            raise _error(uri, f"index_shards[{i}] is not an object")
        key = _path(ref.get("path"), f"index_shards[{i}].path", uri)
        rows = _count(ref.get("rows"), f"index_shards[{i}].rows", uri)
        if ref.get("start_id") != start:
            raise _error(uri, f"index_shards[{i}] starts at {ref.get('start_id')!r}, not {start}")
        t = _read_index(store, key, uri)
        if t.num_rows != rows:
            raise _error(uri, f"index file {key} holds {t.num_rows} rows; the manifest says {rows}")
        ids = _ints(t, "sample_id", key, uri)
        if not np.array_equal(ids, np.arange(start, start + rows)):
            raise _error(
                uri, f"index file {key} has sample_ids that are not {start}..{start + rows - 1}"
            )
        tables.append(t)
        start += rows
    declared = (
        (raw.get("index") or {}).get("rows", start) if isinstance(raw.get("index"), dict) else start
    )
    if declared != start:
        raise _error(uri, f"index.rows is {declared!r}, the index files hold {start}")
    n = start

    key_chunks = [
        c
        for t, ref in zip(tables, refs, strict=True)
        for c in _strings(t, "basename", ref["path"], uri).chunks
    ]
    key_array = pa.chunked_array(key_chunks, pa.string())
    valid = pc.match_substring_regex(key_array, f"^{SAMPLE_ID_RE.pattern}$")
    if n and pc.all(valid).as_py() and pc.count_distinct(key_array).as_py() == n:
        keys: list[str] = []  # the common case: every key is its id, nothing to escape
        ids_column: pa.Array | pa.ChunkedArray = key_array
        renamed = False
    else:
        keys = key_array.to_pylist()
        ids_list = sample_ids(keys)
        renamed = any(a != b for a, b in zip(ids_list, keys, strict=True))
        ids_column = _strings_array(list(ids_list))

    fixed = {"sample_id", "shard_id", "basename", "shard"}
    loc_cols = {f"{m}_{s}" for m in mod_names for s in ("off", "len")}
    meta_types: dict[str, list[pa.DataType]] = {}
    for t in tables:
        for f in t.schema:
            if f.name not in fixed and f.name not in loc_cols:
                meta_types.setdefault(f.name, []).append(f.type)
    taken: dict[str, str] = {}
    meta_fields: list[pa.Field] = []
    for name, types in meta_types.items():
        _check_column(name, taken, mod_names, uri)
        if not all(
            pa.types.is_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_boolean(t)
            or pa.types.is_string(t)
            or pa.types.is_null(t)
            for t in types
        ):
            raise _error(
                uri, f"metadata column {name!r} has a type 0.1.1 does not write: {types[0]}"
            )
        unified = _unify(
            [
                pa.int64()
                if pa.types.is_integer(t)
                else pa.float64()
                if pa.types.is_floating(t)
                else t
                for t in types
            ]
        )
        meta_fields.append(pa.field(name, pa.string() if pa.types.is_null(unified) else unified))
    if renamed:
        _check_column("basename", taken, mod_names, uri)
        meta_fields.append(pa.field("basename", pa.string()))

    base_paths: list[np.ndarray] = []
    mod_arrays: dict[str, list[pa.Array]] = {m["name"]: [] for m in modalities}
    presents: dict[str, list[np.ndarray]] = {m["name"]: [] for m in modalities}
    meta_chunks: dict[str, list[pa.Array]] = {f.name: [] for f in meta_fields}
    for t, ref in zip(tables, refs, strict=True):
        paths = _shard_paths(t, "shards", ref["path"], uri)
        base_paths.append(paths)
        for m in modalities:
            arr, present = _locations(t, m["name"], ref["path"], uri, checksums, paths)
            mod_arrays[m["name"]].append(arr)
            presents[m["name"]].append(present)
        for f in meta_fields:
            if f.name == "basename" and renamed:
                continue
            if f.name in t.column_names:
                meta_chunks[f.name] += _cast(t.column(f.name), f.type).chunks
            else:
                meta_chunks[f.name].append(pa.nulls(t.num_rows, f.type))
    if renamed:
        meta_chunks["basename"] = [_strings_array(list(keys))]
    all_paths = np.concatenate(base_paths) if base_paths else np.asarray([], dtype=object)
    columns: dict[str, Any] = {
        "sample_id": ids_column,
        "shard": _strings_array(all_paths.tolist()),
    }
    for m in modalities:
        columns[m["name"]] = pa.chunked_array(mod_arrays[m["name"]], MODALITY_TYPE)
    for f in meta_fields:
        columns[f.name] = pa.chunked_array(meta_chunks[f.name], f.type)
    base = pa.table(columns)
    mod_present = {k: np.concatenate(v) if v else np.zeros(0, bool) for k, v in presents.items()}
    shards = _shard_records(store, all_paths, list(mod_present.values()), 1)

    layers = [
        _translate_layer(store, la, i, ids_column, taken, mod_names, uri, checksums)
        for i, la in enumerate(raw.get("layers") or [])
    ]

    parts: dict[str, pa.Table] = {key_of("base"): base}
    parts_json = []
    base_key = key_of("base")
    parts_json.append(
        {"path": base_key, "staged": base_key, "num_rows": n, "size": 0, "version": 1}
    )
    created = created_at or version_time(store, version, raw)
    layer_json = []
    for la in layers:
        k = key_of(la.name)
        parts[k] = la.table
        layer_json.append(
            {
                "name": la.name,
                "identity": f"rs011-{la.name}",
                "base_version": 1,
                "num_rows": n,
                "columns": [{"name": f.name, "type": type_to_json(f.type)} for f in la.columns],
                "modalities": la.modalities,
                "shards": la.shards,
                "index_parts": [
                    {"path": k, "staged": k, "num_rows": n, "size": 0, "version": version}
                ],
                "created_at": created,
            }
        )
    stats_mods = {}
    for m in modalities:
        p = mod_present[m["name"]]
        lengths = _np(pc.struct_field(base.column(m["name"]), "length"))
        stats_mods[m["name"]] = {"count": int(p.sum()), "bytes": int(lengths[p].sum())}
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "format_minor": FORMAT_MINOR,
        "name": raw["name"],
        "version": version,
        "parent_version": None if version == 1 else version - 1,
        "created_at": created,
        "txn": f"{created[:4]}{created[5:7]}{created[8:10]}T{created[11:13]}{created[14:16]}{created[17:19]}Z-{digest}",
        "operation": "create" if version == 1 else "layer",
        "checksum_algorithm": NO_CHECKSUMS if checksums is None else "xxh3_64",
        "modalities": modalities,
        "schema": {
            "metadata": [{"name": f.name, "type": type_to_json(f.type)} for f in meta_fields]
        },
        "shards": shards,
        "index_parts": parts_json,
        "statistics": {
            "num_samples": n,
            "num_shards": len(shards),
            "shard_bytes": sum(s["size"] for s in shards),
            "index_bytes": 0,
            "modalities": stats_mods,
        },
        "extensions": {},
    }
    if layer_json:
        manifest["layers"] = layer_json
    return Translation(manifest, parts)


def _check_column(name: str, taken: dict[str, str], modalities: set[str], uri: str) -> None:
    if name in modalities:
        raise _error(uri, f"metadata column {name!r} has the name of a modality")
    try:
        check_column_name(name, taken, uri=uri)
    except Exception as exc:
        raise _error(
            uri, f"metadata column {name!r} cannot be read by this ferroload: {exc}"
        ) from None
    taken[name.lower()] = name


def _translate_layer(
    store: Store,
    la: Any,
    i: int,
    ids: pa.Array | pa.ChunkedArray,
    taken: dict[str, str],
    base_mods: set[str],
    uri: str,
    checksums: Mapping[tuple[str, int, int], int] | None,
) -> _Layer:
    where = f"layers[{i}]"
    if not isinstance(la, dict):
        raise _error(uri, f"{where} is not an object")
    name = la.get("name")
    if not isinstance(name, str) or not MODALITY_RE.fullmatch(name) or is_reserved(name):
        raise _error(
            uri,
            f"layer name {name!r} cannot be read by this ferroload (lowercase letters, "
            "digits and _, starting with a letter, at most 32 characters)",
        )
    key = _path(la.get("index"), f"{where}.index", uri)
    shards_dir = _path(str(la.get("shards_dir", "")).rstrip("/"), f"{where}.shards_dir", uri)
    mods_raw = la.get("modalities") or {}
    if not isinstance(mods_raw, dict):
        raise _error(uri, f"{where}.modalities is not an object")
    modalities = [_modality(k, v, uri) for k, v in mods_raw.items()]
    for m in modalities:
        if m["name"] in base_mods or m["name"].lower() in taken:
            raise _error(uri, f"layer {name!r} repeats the column {m['name']!r}")
        taken[m["name"].lower()] = m["name"]
    t = _read_index(store, key, uri)
    n = len(ids)
    sid = _ints(t, "sample_id", key, uri)
    if len(sid) and (sid.min() < 0 or sid.max() >= n):
        raise _error(uri, f"layer index {key} names sample_ids outside 0..{n - 1}")
    # 0.1.1 joins on sample_id and a later row of the same id wins: keep the last
    last = np.full(n, -1, dtype=np.int64)
    last[sid] = np.arange(len(sid))
    rows = np.flatnonzero(last >= 0)
    take = arrow_array(last[rows])
    sub = t.take(take)
    paths = _shard_paths(sub, shards_dir, key, uri)
    fixed = {"sample_id", "shard_id", "basename", "shard"}
    loc_cols = {f"{m['name']}_{s}" for m in modalities for s in ("off", "len")}
    full_paths = np.full(n, None, dtype=object)
    any_present = np.zeros(n, dtype=bool)
    columns: dict[str, Any] = {"sample_id": ids}
    mod_cols = {}
    presents = []
    for m in modalities:
        arr, present = _locations(sub, m["name"], key, uri, checksums, paths)
        scattered_p = np.zeros(n, dtype=bool)
        scattered_p[rows] = present
        any_present[rows] |= present
        presents.append(scattered_p)
        struct = {
            f: np.zeros(n, dtype=np.uint64 if f == "checksum" else np.int64)
            for f in ("offset", "length", "checksum")
        }
        for f in struct:
            struct[f][rows] = _np(pc.struct_field(arr, f))
        mod_cols[m["name"]] = pa.StructArray.from_arrays(
            [
                arrow_array(scattered_p),
                arrow_array(struct["offset"]),
                arrow_array(struct["length"]),
                arrow_array(struct["checksum"]),
            ],
            fields=list(MODALITY_TYPE),
        )
    full_paths[rows] = paths
    full_paths[~any_present] = None
    columns["shard"] = _strings_array(full_paths.tolist())
    columns.update(mod_cols)
    meta_fields = []
    where_rows = np.full(n, -1, dtype=np.int64)
    where_rows[rows] = np.arange(len(rows))
    for f in sub.schema:
        if f.name in fixed or f.name in loc_cols:
            continue
        if f.name in base_mods or f.name.lower() in taken:
            raise _error(uri, f"layer {name!r} repeats the column {f.name!r}")
        _check_column(f.name, taken, base_mods, uri)
        typ = (
            pa.int64()
            if pa.types.is_integer(f.type)
            else pa.float64()
            if pa.types.is_floating(f.type)
            else f.type
        )
        if not (
            pa.types.is_boolean(typ) or pa.types.is_string(typ) or typ in (pa.int64(), pa.float64())
        ):
            typ = pa.string()
        col = _cast(sub.column(f.name), typ).combine_chunks()
        idx = arrow_array(np.where(where_rows >= 0, where_rows, 0))
        full = col.take(idx) if len(col) else pa.nulls(n, typ)
        mask = arrow_array(where_rows < 0)
        columns[f.name] = pc.if_else(mask, pa.nulls(n, typ), full) if n else full
        meta_fields.append(pa.field(f.name, typ))
    shards = _shard_records(store, full_paths, presents, 1)
    return _Layer(name, pa.table(columns), meta_fields, modalities, shards)


# ---------------------------------------------------------------- the view


_LOCK = threading.Lock()
_CACHE: OrderedDict[tuple[str, int, str], Translation] = OrderedDict()
_CACHE_ENTRIES = 4
_BYTES: OrderedDict[tuple[str, str], bytes] = OrderedDict()
_BYTES_ENTRIES = 16


def _cached(store: Store, version: int) -> Translation:
    _, data = read_legacy(store, version)
    key = (store.uri, version, hashlib.sha256(data).hexdigest())
    with _LOCK:
        got = _CACHE.get(key)
        if got is not None:
            _CACHE.move_to_end(key)
            return got
    got = translate(store, version)
    with _LOCK:
        _CACHE[key] = got
        while len(_CACHE) > _CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return got


def read_manifest(store: Store, version: int | None) -> Manifest:
    """This format's manifest of 0.1.1 version `version` (None: the latest).

    Raises:
        VersionNotFoundError: naming the versions there are.
    """
    from ferroload_format._errors import VersionNotFoundError

    known = legacy_versions(store)
    if version is None:
        version = known[-1]
    elif version not in known:
        raise VersionNotFoundError(
            f"{store.uri} has no version {version}; it has versions {known[0]}..{known[-1]} "
            "(written by ferroload-rs 0.1.1)",
            uri=store.uri,
            version=version,
        )
    translation = _cached(store, version)
    doc = dict(translation.manifest)
    doc[MARKER] = {"version": version}
    return Manifest.from_json(doc, uri=f"{store.uri}/{LEGACY_VERSIONS}v{version}.json")


def is_view(manifest: Manifest) -> bool:
    """Whether `manifest` is a 0.1.1 version read as it is (not upgraded)."""
    return MARKER in manifest.extra


def refuse_write(manifest: Manifest | None, uri: str, what: str) -> None:
    """Refuse `what` (a write) on a 0.1.1 version read as it is.

    Raises:
        NeedsUpgradeError: naming `ferroload upgrade`.
    """
    if manifest is not None and is_view(manifest):
        from ferroload_format._errors import NeedsUpgradeError

        shown = uri.removeprefix("file://") if uri.startswith("file:///") else uri
        raise NeedsUpgradeError(
            f"{shown} was written by ferroload-rs 0.1.1: this ferroload reads it as it is, "
            f"but {what} needs it in the current format. Run `ferroload upgrade {shown}` "
            "(or ferroload.upgrade(uri)) once: it converts the index and manifests in "
            "place, without rewriting a shard",
            uri=uri,
        )


def part_bytes(store: Store, key: str) -> bytes | None:
    """The bytes of the translated part at `key` (None when `key` is not one)."""
    if not key.startswith(VIEW_DIR):
        return None
    with _LOCK:
        got = _BYTES.get((store.uri, key))
        if got is not None:
            return got
    bits = key[len(VIEW_DIR) :].split("/")
    missing = ManifestError(f"{store.uri}: no translated index part {key}", uri=store.uri)
    if len(bits) != 3 or not _VERSION_KEY.fullmatch(f"versions/{bits[1]}.json"):
        raise missing
    try:
        translation = _cached(store, int(bits[1][1:]))
    except ObjectNotFoundError:  # no 0.1.1 manifest of that version: a made-up key
        raise missing from None
    table = translation.parts.get(key)
    if table is None:
        raise ManifestError(
            f"{store.uri} changed since it was opened (ferroload-rs 0.1.1 index {key} is "
            "gone); open it again",
            uri=store.uri,
        )
    data = write_part(table)
    with _LOCK:
        _BYTES[(store.uri, key)] = data
        while len(_BYTES) > _BYTES_ENTRIES:
            _BYTES.popitem(last=False)
    return data
