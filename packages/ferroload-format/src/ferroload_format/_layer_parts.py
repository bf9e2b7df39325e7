"""The rules of a layer's partitions: what they are given, their staged files, their merge.

`LayerSchema` checks what `LayerWriter` is given and merges the staged partitions
(docs/format.md §10.2) into the layer's index part; the functions below it check a
layer's name, columns and modalities, and read the shard a staged partition wrote."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ferroload_format._errors import (
    FormatError,
    InvalidLayerError,
    InvalidModalityError,
    InvalidPayloadError,
    InvalidSampleIdError,
    SchemaConflictError,
)
from ferroload_format._index import MODALITY_TYPE
from ferroload_format._index_arrays import arrow_array, numpy_column
from ferroload_format._names import (
    MAX_MEMBER_NAME,
    MODALITY_RE,
    check_modality,
    is_reserved,
    member_name,
)
from ferroload_format._paths import layer_staging_dir
from ferroload_format._records import Modality, ShardInfo, check_shard_paths
from ferroload_format._types import (
    INT64_MAX,
    INT64_MIN,
    PY_SCALARS,
    TypeConflictError,
    fits_in,
    infer_type,
    type_name,
    type_to_json,
)

#: Column of a staged partition holding the base row of each of its rows.
ROW_COLUMN = "_ferroload_row"
#: Key of a staged partition's Parquet metadata describing it (its shard, if any).
PARTITION_META = b"ferroload.layer_partition"
PARTITION_RE = re.compile(r"part-(\d+)\.parquet")
IDENTITY_RE = re.compile(r"[A-Za-z0-9_=-]{1,128}")
_BYTES_LIKE = (bytes, bytearray, memoryview)


@dataclass(frozen=True)
class LayerSchema:
    """A layer's columns and modalities, and the checks its partitions go through.

    Attributes:
        uri: the dataset root (for errors).
        name: the layer's name.
        columns: its metadata columns.
        modalities: its modalities.
        version: its base version.
    """

    uri: str
    name: str
    columns: tuple[pa.Field, ...]
    modalities: tuple[Modality, ...]
    version: int

    def partition_schema(self) -> pa.Schema:
        """Columns of a staged partition: its base rows, then the layer part's columns."""
        return pa.schema([pa.field(ROW_COLUMN, pa.int64(), nullable=False), *self.layer_schema()])

    def layer_schema(self) -> pa.Schema:
        """The schema of the layer's index part (docs/format.md §10.2)."""
        return pa.schema(
            [
                pa.field("sample_id", pa.string(), nullable=False),
                pa.field("shard", pa.string()),
                *(pa.field(m.name, MODALITY_TYPE, nullable=False) for m in self.modalities),
                *self.columns,
            ]
        )

    def error(self, cls: type[FormatError], message: str, **context: Any) -> FormatError:
        """An error of class `cls` naming the dataset and the layer."""
        return cls(
            f"layer {self.name!r} of {self.uri}: {message}",
            uri=self.uri,
            layer=self.name,
            **context,
        )

    def check_rows(self, k: int, rows: npt.ArrayLike, total: int) -> npt.NDArray[np.int64]:
        """`rows` of partition `k` as int64, checked: 1-d, strictly ascending, in range."""
        arr = np.asarray(rows)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise self.error(
                InvalidLayerError,
                f"rows of partition {k} must be a 1-d array of ints, got dtype {arr.dtype} "
                f"shape {arr.shape}",
                partition=k,
            )
        arr = arr.astype(np.int64)
        if arr.size:
            if np.any(np.diff(arr) <= 0):
                raise self.error(
                    InvalidLayerError,
                    f"rows of partition {k} must be strictly ascending",
                    partition=k,
                )
            if arr[0] < 0 or arr[-1] >= total:
                bad = int(arr[0] if arr[0] < 0 else arr[-1])
                raise self.error(
                    InvalidLayerError,
                    f"row {bad} of partition {k} is out of range (version {self.version} "
                    f"has {total} rows)",
                    partition=k,
                )
        return arr

    def value_arrays(
        self, k: int, values: Mapping[str, Sequence[Any]], ids: list[str]
    ) -> list[pa.Array]:
        """The metadata values of partition `k` (rows `ids`) as Arrow arrays of the
        declared types, checked as the writer checks metadata."""
        lists = self._per_column(
            k, values, [f.name for f in self.columns], len(ids), SchemaConflictError,
            what="values", key="column", keys="metadata column",
        )  # fmt: skip
        return [
            self.column_array(f, vals, ids) for vals, f in zip(lists, self.columns, strict=True)
        ]

    def _per_column(
        self,
        k: int,
        given: Mapping[str, Sequence[Any]],
        names: list[str],
        n: int,
        not_mapping: type[FormatError],
        *,
        what: str,
        key: str,
        keys: str,
    ) -> Iterator[Sequence[Any]]:
        """`given[name]` for each of `names`, in that order, checked: `given` is a mapping
        (else `not_mapping`) with exactly these keys, each holding `n` items (the rows of
        partition `k`). `what` names the items ("values"), `key` one key ("column"),
        `keys` the keys in `check_keys`'s message ("metadata column").

        A generator: the mapping and its keys are checked when the first item is asked
        for (put it first in a `zip`), each item's length just before it is handed out,
        so a caller's own checks of one item come before the length check of the next."""
        if not isinstance(given, Mapping):
            raise self.error(
                not_mapping,
                f"{what} of partition {k} must be a mapping of {key} -> {what}, got "
                f"{type(given).__name__}",
            )
        self.check_keys(k, keys, given, names)
        for name in names:
            items = given[name]
            if len(items) != n:
                raise self.error(
                    InvalidLayerError,
                    f"{key} {name!r} of partition {k} has {len(items)} {what} for {n} rows",
                    column=name,
                    partition=k,
                )
            yield items

    def check_keys(self, k: int, what: str, given: Mapping[str, Any], want: list[str]) -> None:
        unknown = [c for c in given if c not in want]
        missing = [c for c in want if c not in given]
        if unknown or missing:
            col = (unknown or missing)[0]
            raise self.error(
                SchemaConflictError,
                f"partition {k} gives {what}s {sorted(map(str, given))}, but the layer "
                f"declares {want or 'none'} ("
                + (f"unknown: {unknown}" if unknown else f"missing: {missing}")
                + ")",
                column=str(col),
                partition=k,
            )

    def column_array(self, f: pa.Field, vals: Sequence[Any], ids: list[str]) -> pa.Array:
        dtype = f.type
        if isinstance(vals, (pa.Array, pa.ChunkedArray)) and vals.type == dtype:
            # Already of the column's type: nothing to check, no trip through Python.
            return vals.combine_chunks() if isinstance(vals, pa.ChunkedArray) else vals
        fast = next((t for t, a in PY_SCALARS.items() if a == dtype), None)
        clean = list(vals)
        for i, v in enumerate(clean):
            if v is None or (
                type(v) is fast and (fast is not int or INT64_MIN <= cast(int, v) <= INT64_MAX)
            ):
                continue
            try:
                vtype = infer_type(v)
            except TypeConflictError as exc:
                raise self.conflict(f, ids[i], str(exc)) from None
            if not fits_in(vtype, dtype):
                raise self.conflict(
                    f, ids[i], f"is {type_name(vtype)}, but the layer declares {type_name(dtype)}"
                )
            if isinstance(v, (np.generic, np.ndarray)):
                clean[i] = v.tolist()
        try:
            return pa.array(clean, type=dtype)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise self.conflict(f, ids[0] if ids else "?", f"cannot be stored: {exc}") from None

    def conflict(self, f: pa.Field, sid: str, why: str) -> Exception:
        return self.error(
            SchemaConflictError,
            f"value of column {f.name!r} for sample {sid!r} {why}",
            column=f.name,
            sample_id=sid,
        )

    def payload_lists(
        self, k: int, payloads: Mapping[str, Sequence[Any]], ids: list[str]
    ) -> list[Sequence[Any]]:
        """The payloads of partition `k`, one list per modality, checked: bytes-like or
        None, and member names that fit a tar header."""
        lists = self._per_column(
            k, payloads, [m.name for m in self.modalities], len(ids), InvalidPayloadError,
            what="payloads", key="modality", keys="modalitie",
        )  # fmt: skip
        out = []
        for items, m in zip(lists, self.modalities, strict=True):
            for sid, item in zip(ids, items, strict=True):
                if item is None:
                    continue
                if not isinstance(item, _BYTES_LIKE):
                    raise self.error(
                        InvalidPayloadError,
                        f"payload {m.name!r} of sample {sid!r} is {type(item).__name__}, "
                        "not bytes or None",
                        column=m.name,
                        sample_id=sid,
                    )
                name = member_name(sid, m.name, m.ext)
                if len(name) > MAX_MEMBER_NAME:
                    raise self.error(
                        InvalidSampleIdError,
                        f"tar member name {name!r} is longer than {MAX_MEMBER_NAME} "
                        "characters; use a shorter modality name",
                        column=m.name,
                        sample_id=sid,
                    )
            out.append(items)
        return out

    def merge(self, tables: list[pa.Table], ids: pa.Array) -> pa.Table:
        """The layer's index part: one row per base row (`ids`: the base version's sample
        ids), in base order, from the rows of the staged partitions `tables` (partition
        `k` at index `k`)."""
        total = len(ids)
        schema = self.partition_schema()
        parts = pa.concat_tables(
            [t.replace_schema_metadata(None) for t in tables] or [schema.empty_table()]
        )
        cols = {name: parts.column(name).combine_chunks() for name in parts.column_names}
        rows = numpy_column(cols[ROW_COLUMN])
        owner = np.repeat(np.arange(len(tables)), [t.num_rows for t in tables])
        if rows.size and (rows.min() < 0 or rows.max() >= total):
            bad = int(rows.min() if rows.min() < 0 else rows.max())
            raise self.error(
                InvalidLayerError,
                f"a partition covers row {bad}, but version {self.version} has {total} rows",
            )
        pos = np.full(total, -1, dtype=np.int64)
        pos[rows] = np.arange(len(rows))
        if len(np.unique(rows)) != len(rows):
            counts = np.bincount(rows, minlength=total)
            row = int(np.flatnonzero(counts > 1)[0])
            both = sorted({int(owner[i]) for i in np.flatnonzero(rows == row)})
            raise self.error(
                InvalidLayerError,
                f"partitions {both} all cover row {row}; each row belongs to one partition",
            )
        if rows.size:
            same = numpy_column(pc.equal(ids.take(arrow_array(rows)), cols["sample_id"]))
            if not same.all():
                i = int(np.flatnonzero(~same)[0])
                raise self.error(
                    InvalidLayerError,
                    f"partition {int(owner[i])} has sample "
                    f"{cols['sample_id'][i].as_py()!r} at row {int(rows[i])}, where "
                    f"version {self.version} has {ids[int(rows[i])].as_py()!r}",
                    partition=int(owner[i]),
                )
        covered = pos >= 0
        take = pa.Array.from_buffers(
            pa.int64(),
            total,
            [
                pa.py_buffer(np.packbits(covered, bitorder="little")),
                pa.py_buffer(np.where(covered, pos, 0)),
            ],
        )
        columns: list[Any] = [ids, cols["shard"].take(take)]
        for m in self.modalities:
            struct = cols[m.name]
            fields = []
            for field in MODALITY_TYPE:
                full = np.zeros(total, dtype=field.type.to_pandas_dtype())
                full[rows] = numpy_column(struct.field(field.name))
                fields.append(arrow_array(full))
            columns.append(pa.StructArray.from_arrays(fields, fields=list(MODALITY_TYPE)))
        columns.extend(cols[f.name].take(take) for f in self.columns)
        return pa.Table.from_arrays(columns, schema=self.layer_schema())


def check_layer_name(name: object, uri: str) -> None:
    if not isinstance(name, str) or not MODALITY_RE.fullmatch(name):
        raise InvalidLayerError(
            f"layer name {name!r} of {uri} is invalid: use lowercase letters, digits and _, "
            "starting with a letter, at most 32 characters",
            uri=uri,
            layer=str(name),
        )


def check_columns(columns: Mapping[str, pa.DataType], layer: str, uri: str) -> tuple[pa.Field, ...]:
    if not isinstance(columns, Mapping):
        raise SchemaConflictError(
            f"columns of layer {layer!r} of {uri} must be a mapping of name -> pyarrow type, "
            f"got {type(columns).__name__}",
            uri=uri,
            layer=layer,
        )
    out = []
    for name, dtype in columns.items():
        if not isinstance(name, str) or not name or is_reserved(name):
            raise SchemaConflictError(
                f"column name {name!r} of layer {layer!r} of {uri} is empty or reserved "
                "(sample_id, shard and _ferroload* / __ferroload* are index columns)",
                uri=uri,
                column=str(name),
                layer=layer,
            )
        try:
            if not isinstance(dtype, pa.DataType):
                raise ValueError(f"{dtype!r} is not a pyarrow type")
            type_to_json(dtype)
        except ValueError as exc:
            raise SchemaConflictError(
                f"column {name!r} of layer {layer!r} of {uri}: {exc}; ferroload stores bool, "
                "int64, float64, string, binary and lists and structs of them",
                uri=uri,
                column=name,
                layer=layer,
            ) from None
        out.append(pa.field(name, dtype))
    return tuple(out)


def check_modalities(modalities: Sequence[Modality], layer: str, uri: str) -> tuple[Modality, ...]:
    out: list[Modality] = []
    for m in modalities:
        if not isinstance(m, Modality):
            raise InvalidModalityError(
                f"modalities of layer {layer!r} of {uri} must be Modality records, got "
                f"{type(m).__name__}",
                uri=uri,
                layer=layer,
            )
        try:
            check_modality(m.name, m.ext, m.kind, m.codec_hint)
        except InvalidModalityError as exc:
            raise InvalidModalityError(
                f"layer {layer!r} of {uri}: {exc}", uri=uri, column=exc.column, layer=layer
            ) from None
        if any(o.name == m.name for o in out):
            raise SchemaConflictError(
                f"layer {layer!r} of {uri} declares modality {m.name!r} twice",
                uri=uri,
                column=m.name,
                layer=layer,
            )
        out.append(Modality(m.name, m.ext, m.kind, m.codec_hint))
    return tuple(out)


def partition_shard(table: pa.Table, *, where: str = "a staged partition") -> ShardInfo | None:
    """The shard a staged partition wrote, from its Parquet metadata.

    Raises:
        UnsafePathError: if the shard's paths could leave the dataset root.
    """
    raw = (table.schema.metadata or {}).get(PARTITION_META)
    meta = json.loads(raw) if raw else {}
    shard = meta.get("shard")
    return check_shard_paths(ShardInfo.from_json(shard), where=where) if shard else None


def staged_partition_path(name: str, identity: str, k: int) -> str:
    """Key of staged partition `k` of layer `name` computed by `identity`."""
    return f"{layer_staging_dir(name, identity)}part-{k:05d}.parquet"
