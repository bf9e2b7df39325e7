"""The Parquet index (docs/format.md §5): building parts and reading their columns lazily."""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from ferroload_format._errors import (
    ColumnNotFoundError,
    ManifestError,
    PayloadRangeError,
    SchemaConflictError,
)
from ferroload_format._manifest import IndexPart, LayerInfo, Manifest, Modality, ShardInfo
from ferroload_format._names import RESERVED_COLUMNS, RESERVED_PREFIX
from ferroload_format._rowgroups import (
    SCAN_SHARE,
    GroupCache,
    RowPlan,
    default_cache_bytes,
    plan_rows,
)
from ferroload_format._shard_lists import shards_of
from ferroload_format._tar import BLOCK
from ferroload_format._types import (
    INT64_MAX,
    INT64_MIN,
    PY_SCALARS,
    TypeConflictError,
    fits_in,
    has_lone_surrogate,
    infer_type,
    merge_types,
    nesting_problem,
    type_name,
)
from ferroload_store import ObjectNotFoundError, RangeFile, Store

ROW_GROUP_SIZE = 65_536
#: Threads that read the row groups of one large read (16 groups each) side by side.
_READ_THREADS = max(1, min(8, os.cpu_count() or 1))
#: Row groups read together by the row-group path (one coalesced fetch on an object store).
_GROUPS_PER_READ = 16
#: Opened index parts, by (key, dictionary-read columns): the file and, on an object
#: store, the `RangeFile` under it (None for a local file).
PartFiles = dict[tuple[str, tuple[str, ...]], tuple[pq.ParquetFile, "RangeFile | None"]]
MODALITY_TYPE = pa.struct(
    [
        pa.field("present", pa.bool_(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("length", pa.int64(), nullable=False),
        pa.field("checksum", pa.uint64(), nullable=False),
    ]
)


def index_schema(modalities: Iterable[str], metadata: Iterable[pa.Field]) -> pa.Schema:
    """The Arrow schema every index part of a dataset has."""
    return pa.schema(
        [
            pa.field("sample_id", pa.string(), nullable=False),
            pa.field("shard", pa.string(), nullable=False),
            *(pa.field(m, MODALITY_TYPE, nullable=False) for m in modalities),
            *metadata,
        ]
    )


def write_part(table: pa.Table, *, row_group_size: int = ROW_GROUP_SIZE) -> bytes:
    """Serialize an index part: zstd, statistics, page index, bounded row groups; every
    column dictionary-encoded where it pays, but `sample_id`: ids are unique, so a
    dictionary only grows to its page limit and falls back to plain, which made the
    column 3.5x larger and 1.7x slower to decode than plain + zstd (65,536 ids
    `s0000000000…`: 2.47 against 1.46 ms per row group)."""
    sink = pa.BufferOutputStream()
    leaves = [f.name for f in table.flatten().schema if f.name != "sample_id"]
    pq.write_table(
        table,
        sink,
        row_group_size=row_group_size,
        compression="zstd",
        use_dictionary=leaves,
        write_statistics=True,
        write_page_index=True,
    )
    data: bytes = sink.getvalue().to_pybytes()
    return data


class _MetaColumn:
    """Values of one metadata column, type-checked as they arrive."""

    __slots__ = ("chunks", "fast", "locked", "name", "type", "values")

    def __init__(self, name: str, dtype: pa.DataType, *, locked: bool, pad: int = 0) -> None:
        self.name = name
        self.type = dtype
        self.locked = locked
        self.values: list[Any] = [None] * pad
        self.chunks: list[pa.Array] = []
        # The Python type whose values need no checking (the column's exact scalar type).
        self.fast: type | None = next((t for t, a in PY_SCALARS.items() if a == dtype), None)

    def plan(
        self, value: Any, sample_id: str, uri: str | None
    ) -> tuple[pa.DataType, list[pa.Array]] | None:
        """Check a value that is not of the column's fast type, changing nothing.

        Returns:
            None when the column can take the value as it is, else the widened type and the
            column's frozen chunks converted to it (for `widen`).

        Raises:
            SchemaConflictError: when the value does not fit the column.
        """

        def conflict(why: str) -> SchemaConflictError:
            return SchemaConflictError(
                f"metadata {self.name!r} of sample {sample_id!r} {why}",
                uri=uri,
                sample_id=sample_id,
                column=self.name,
            )

        problem = nesting_problem(value)
        if problem is not None:
            raise conflict(problem)
        try:
            vtype = infer_type(value)
        except TypeConflictError as exc:
            raise conflict(f": {exc}") from None
        if self.locked:
            if not fits_in(vtype, self.type):
                raise conflict(
                    f"is {type_name(vtype)}, but the dataset's column is {type_name(self.type)}"
                )
            new = self.type
        else:
            try:
                new = merge_types(self.type, vtype)
            except TypeConflictError:
                raise conflict(
                    f"is {type_name(vtype)}, but earlier samples gave {type_name(self.type)}"
                ) from None
        try:
            # Arrow refuses what the type rules alone allow in a few cases (an integer
            # beyond 2**53 in a float64 column): find out now, not at commit time.
            pa.array([value], type=new)
            if new == self.type:
                return None
            chunks = [_convert(c, new) for c in self.chunks]
            if self.values:
                pa.array(self.values, type=new)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise conflict(f"cannot be stored as {type_name(new)}: {exc}") from None
        return new, chunks

    def widen(self, dtype: pa.DataType, chunks: list[pa.Array]) -> None:
        """Apply a change `plan` returned."""
        self.type = dtype
        self.chunks = chunks
        self.fast = next((t for t, a in PY_SCALARS.items() if a == dtype), None)

    def freeze(self) -> None:
        if self.values:
            self.chunks.append(pa.array(self.values, type=self.type))
            self.values = []

    def array(self) -> pa.ChunkedArray:
        self.freeze()
        return pa.chunked_array(self.chunks, type=self.type)


def _convert(chunk: pa.Array, dtype: pa.DataType) -> pa.Array:
    """`chunk` as `dtype` (a widening allowed by `merge_types`); raises if it loses data."""
    if chunk.type == dtype:
        return chunk
    try:
        return chunk.cast(dtype)
    except pa.ArrowNotImplementedError:  # e.g. a struct gaining a field
        return pa.array(chunk.to_pylist(), type=dtype)


class IndexBuilder:
    """Collects the index rows of one writer session and turns them into a part.

    Rows are frozen into Arrow/numpy chunks every `row_group_size` rows so that a large
    write holds compact arrays, not Python objects.
    """

    def __init__(
        self,
        modalities: Sequence[str],
        metadata: Sequence[pa.Field] = (),
        *,
        locked: bool = False,
        uri: str | None = None,
        row_group_size: int = ROW_GROUP_SIZE,
    ) -> None:
        self.uri = uri
        self.locked = locked
        self.row_group_size = row_group_size
        self.num_rows = 0
        self._modalities = list(modalities)
        self._cols: dict[str, _MetaColumn] = {
            f.name: _MetaColumn(f.name, f.type, locked=locked) for f in metadata
        }
        self._ids: list[str] = []
        self._id_chunks: list[pa.Array] = []
        self._shard: list[int] = []
        self._shard_chunks: list[npt.NDArray[np.int32]] = []
        # per modality: [present, offset, length, checksum] lists, and frozen chunks
        self._mod: dict[str, list[list[int]]] = {m: [[], [], [], []] for m in modalities}
        self._mod_chunks: dict[str, list[list[npt.NDArray[Any]]]] = {m: [] for m in modalities}

    def add_modality(self, name: str) -> None:
        """Start a modality column (earlier rows lack it)."""
        self._modalities.append(name)
        n_open = len(self._ids)
        self._mod[name] = [[0] * n_open, [0] * n_open, [0] * n_open, [0] * n_open]
        frozen = self.num_rows - n_open
        self._mod_chunks[name] = (
            [
                [
                    np.zeros(frozen, np.bool_),
                    *(np.zeros(frozen, np.int64) for _ in range(2)),
                    np.zeros(frozen, np.uint64),
                ]
            ]
            if frozen
            else []
        )

    def add(
        self,
        sample_id: str,
        shard: int,
        members: Mapping[str, tuple[int, int, int]],
        meta: Mapping[str, Any] | None,
    ) -> None:
        """Append one row. `members` maps modality -> (offset, length, checksum).

        `meta` must have passed `check_meta` first.
        """
        self._ids.append(sample_id)
        self._shard.append(shard)
        for name, cols in self._mod.items():
            entry = members.get(name)
            if entry is None:
                cols[0].append(0)
                cols[1].append(0)
                cols[2].append(0)
                cols[3].append(0)
            else:
                cols[0].append(1)
                cols[1].append(entry[0])
                cols[2].append(entry[1])
                cols[3].append(entry[2])
        if meta:
            for name, col in self._cols.items():
                col.values.append(meta.get(name))
        else:
            for col in self._cols.values():
                col.values.append(None)
        self.num_rows += 1
        if len(self._ids) >= self.row_group_size:
            self._freeze()

    def declare_column(self, name: str, dtype: pa.DataType) -> None:
        """Fix the type of metadata column `name` (new, or already of that type).

        Raises:
            SchemaConflictError: for a reserved name, or a column that has another type.
        """
        col = self._cols.get(name)
        if col is not None:
            if col.type != dtype:
                raise SchemaConflictError(
                    f"metadata {name!r} is already {type_name(col.type)}, not {type_name(dtype)}",
                    uri=self.uri,
                    column=name,
                )
            col.locked = True
            return
        col = self._new_column(name, "(declared)")
        col.type = dtype
        col.locked = True
        col.fast = next((t for t, a in PY_SCALARS.items() if a == dtype), None)
        if col.chunks:  # rows frozen before the declaration: nulls of the declared type
            col.chunks = [pa.nulls(len(c), type=dtype) for c in col.chunks]
        self._cols[name] = col

    def check_meta(self, sample_id: str, meta: Mapping[str, Any]) -> None:
        """Type-check one sample's metadata, growing the schema where it may.

        Raises:
            SchemaConflictError: for a reserved or (in an append) unknown key, or a value
                whose type conflicts with the column's.
        """
        # Check everything first and change the schema only if the whole sample fits, so
        # that a refused sample leaves no trace (no new column, no widened type).
        cols = self._cols
        new_cols: dict[str, _MetaColumn] = {}
        changes: list[tuple[_MetaColumn, pa.DataType, list[pa.Array]]] = []
        for name, value in meta.items():
            col = cols.get(name)
            if col is None:
                col = new_cols[name] = self._new_column(name, sample_id)
            if value is None:
                continue
            fast = col.fast
            if type(value) is not fast or (
                (fast is int and not INT64_MIN <= cast(int, value) <= INT64_MAX)
                or (
                    fast is str
                    and not cast(str, value).isascii()
                    and has_lone_surrogate(cast(str, value))
                )
            ):
                change = col.plan(value, sample_id, self.uri)
                if change is not None:
                    changes.append((col, *change))
        cols.update(new_cols)
        for col, dtype, chunks in changes:
            col.widen(dtype, chunks)

    def _new_column(self, name: str, sample_id: str) -> _MetaColumn:
        """A column for a key first seen in `sample_id` (not yet registered)."""
        if not isinstance(name, str) or not name:
            raise SchemaConflictError(
                f"metadata keys must be non-empty str, got {name!r} in sample {sample_id!r}",
                uri=self.uri,
                sample_id=sample_id,
            )
        if name in RESERVED_COLUMNS or name.startswith(RESERVED_PREFIX) or name in self._mod:
            raise SchemaConflictError(
                f"metadata key {name!r} of sample {sample_id!r} is reserved "
                "(sample_id, shard, modality names and _ferroload* are index columns)",
                uri=self.uri,
                sample_id=sample_id,
                column=name,
            )
        if self.locked:
            raise SchemaConflictError(
                f"sample {sample_id!r} has metadata {name!r}, which the dataset has no column "
                f"for; an append must keep the schema ({', '.join(self._cols) or 'no metadata'})",
                uri=self.uri,
                sample_id=sample_id,
                column=name,
            )
        col = _MetaColumn(name, pa.null(), locked=False, pad=len(self._ids))
        if self.num_rows > len(self._ids):
            col.chunks.append(pa.nulls(self.num_rows - len(self._ids)))
        return col

    def _freeze(self) -> None:
        if not self._ids:
            return
        self._id_chunks.append(pa.array(self._ids, type=pa.string()))
        self._ids = []
        self._shard_chunks.append(np.asarray(self._shard, dtype=np.int32))
        self._shard = []
        for name, cols in self._mod.items():
            self._mod_chunks[name].append(
                [
                    np.asarray(cols[0], dtype=np.bool_),
                    np.asarray(cols[1], dtype=np.int64),
                    np.asarray(cols[2], dtype=np.int64),
                    np.asarray(cols[3], dtype=np.uint64),
                ]
            )
            self._mod[name] = [[], [], [], []]
        for col in self._cols.values():
            col.freeze()

    def sample_ids(self) -> pa.ChunkedArray:
        """Every sample id added so far."""
        self._freeze()
        return pa.chunked_array(self._id_chunks, type=pa.string())

    @property
    def metadata_fields(self) -> list[pa.Field]:
        """The metadata schema as inferred so far."""
        return [pa.field(c.name, c.type) for c in self._cols.values()]

    def table(self, shard_paths: Sequence[str]) -> pa.Table:
        """The part as an Arrow table with `index_schema(...)` as its schema."""
        self._freeze()
        schema = index_schema(self._modalities, self.metadata_fields)
        codes = np.concatenate(self._shard_chunks) if self._shard_chunks else np.zeros(0, np.int32)
        columns: list[Any] = [
            self.sample_ids(),
            pc.take(pa.array(list(shard_paths), type=pa.string()), pa.array(codes)),
        ]
        for name in self._modalities:
            chunks = self._mod_chunks[name]
            fields: list[Any] = [
                np.concatenate([c[i] for c in chunks]) if chunks else [] for i in range(4)
            ]
            columns.append(
                pa.StructArray.from_arrays(
                    [pa.array(f, type=t.type) for f, t in zip(fields, MODALITY_TYPE, strict=True)],
                    fields=list(MODALITY_TYPE),
                )
            )
        columns.extend(c.array() for c in self._cols.values())
        return pa.Table.from_arrays(columns, schema=schema)


def arrow_array(values: npt.ArrayLike) -> pa.Array:
    """A 1-d numeric numpy array as an Arrow array over the same memory (`pa.array` on a
    numpy array imports pandas, ~0.3-1 s, the first time).

    Examples:
        >>> arrow_array(np.array([2, 0, 1])).to_pylist()
        [2, 0, 1]
    """
    a = np.ascontiguousarray(values).reshape(-1)
    if a.dtype == np.bool_:
        bits = np.packbits(a, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(a), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def numpy_column(arr: pa.Array, *, writable: bool = False) -> npt.NDArray[Any]:
    """A numeric or boolean Arrow array without nulls as a numpy array, read straight
    from its buffers (pyarrow's `to_numpy` imports pandas, ~0.3 s, on first use).

    Raises:
        ValueError: for nulls or a type that is not fixed-width numeric or boolean.

    Examples:
        >>> numpy_column(pa.array([True, False, True])).tolist()
        [True, False, True]
        >>> numpy_column(pa.array([3, 1, 2], pa.int64()).slice(1)).tolist()
        [1, 2]
    """
    t = arr.type
    if arr.null_count:
        raise ValueError(f"numpy_column needs an array without nulls ({arr.null_count} nulls)")
    n, off = len(arr), arr.offset
    if pa.types.is_boolean(t):
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8) if n else np.zeros(0, np.uint8)
        return np.unpackbits(bits, bitorder="little")[off : off + n].astype(bool)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise ValueError(f"numpy_column needs a numeric or boolean array, got {t}")
    dtype = np.dtype(t.to_pandas_dtype())
    out = np.frombuffer(arr.buffers()[1], dtype=dtype)[off : off + n] if n else np.zeros(0, dtype)
    return out.copy() if writable else out


@dataclass(frozen=True)
class ModalityArrays:
    """Where every sample's payload of one modality lives, as flat numpy arrays."""

    present: npt.NDArray[np.bool_]
    shard: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    checksum: npt.NDArray[np.uint64]


def column_chunks(
    metadata: pq.FileMetaData,
    columns: Sequence[str] | None,
    groups: Iterable[int] | None = None,
) -> tuple[list[int], list[int]]:
    """(starts, lengths) of the column chunks holding `columns` (top-level names; None:
    all) in row groups `groups` (None: every one): what a read of those fetches."""
    wanted = None if columns is None else set(columns)
    starts: list[int] = []
    lengths: list[int] = []
    for rg in range(metadata.num_row_groups) if groups is None else groups:
        group = metadata.row_group(rg)
        for ci in range(group.num_columns):
            col = group.column(ci)
            if wanted is not None and col.path_in_schema.split(".")[0] not in wanted:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            starts.append(start)
            lengths.append(col.total_compressed_size)
    return starts, lengths


def read_part_table(
    store: Store,
    part: IndexPart,
    columns: Sequence[str] | None,
    files: PartFiles | None = None,
    **kwargs: Any,
) -> pa.Table:
    """Read some columns of one part, from its published path or, failing that, staging.

    The published path is tried again last: the part may have been published, and its
    staged copy removed, while this function was between the two.
    """
    try:
        table = _read_part_table(store, part, columns, files, **kwargs)
    except KeyError as exc:  # pyarrow: a `read_dictionary` column the part does not have
        name = exc.args[0].decode() if isinstance(exc.args[0], bytes) else str(exc.args[0])
        raise _no_column(store, part, name) from None
    for name in columns or ():
        if table.schema.get_field_index(name) < 0:
            raise _no_column(store, part, name)
    check_part_rows(store, part, table.num_rows)
    return table


def check_part_rows(store: Store, part: IndexPart, num_rows: int) -> None:
    """Refuse an index part holding another number of rows than the manifest says.

    Raises:
        ManifestError: naming the part.
    """
    if num_rows != part.num_rows:
        raise ManifestError(
            f"index part {part.path} of {store.uri} holds {num_rows} rows; the manifest "
            f"says {part.num_rows}. The manifest or the part was altered; run verify()",
            uri=store.uri,
            part=part.path,
        )


def _no_column(store: Store, part: IndexPart, name: str) -> ManifestError:
    return ManifestError(
        f"index part {part.path} of {store.uri} has no column {name!r}, which the manifest's "
        "schema names. The manifest or the part was altered; run verify()",
        uri=store.uri,
        part=part.path,
        column=name,
    )


def _read_part_table(
    store: Store,
    part: IndexPart,
    columns: Sequence[str] | None,
    files: PartFiles | None,
    **kwargs: Any,
) -> pa.Table:
    last_exc: Exception | None = None
    for key in (part.path, part.staged, part.path):
        try:
            local = store.local_path(key)
            if local is not None:
                # ParquetFile, not read_table: that imports pyarrow.dataset (and pandas)
                pf = pq.ParquetFile(local, memory_map=True, **kwargs)
                return pf.read(columns=columns)
            if files is None:
                with RangeFile(store, key, size=part.size) as f:
                    return pq.read_table(f, columns=columns, pre_buffer=True, **kwargs)
            # remote: the footer is read once per part and kept; each later read fetches
            # only the asked columns' chunks (coalesced by pre_buffer)
            cache_key = (key, tuple(sorted(kwargs.get("read_dictionary", ()))))
            entry = files.get(cache_key)
            if entry is None:
                new = _PartFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
                entry = files[cache_key] = (pq.ParquetFile(new, **kwargs), new)
            pf, rf = entry
            assert rf is not None  # only remote parts are cached here
            rf.prefetch(*column_chunks(pf.metadata, columns))
            try:
                return pf.read(columns=columns)
            finally:
                _forget(rf)
        except (FileNotFoundError, ObjectNotFoundError) as exc:
            last_exc = exc
    raise ManifestError(
        f"index part {part.path} of {store.uri} is missing (also at {part.staged})",
        uri=store.uri,
    ) from last_exc


def open_part(
    store: Store,
    part: IndexPart,
    files: PartFiles,
) -> tuple[pq.ParquetFile, RangeFile | None]:
    """One index part as a `ParquetFile` (its footer read once and kept in `files`) and,
    on an object store, the `RangeFile` under it: for reads of some row groups. Tried at
    its published path, then staging, then the published path again (see
    `read_part_table`).

    Raises:
        ManifestError: the part is missing (also at its staged path).
    """
    last_exc: Exception | None = None
    for key in (part.path, part.staged, part.path):
        entry = files.get((key, ()))
        if entry is not None:
            return entry
        try:
            local = store.local_path(key)
            if local is not None:
                entry = (pq.ParquetFile(local, memory_map=True), None)
            else:
                f = _PartFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
                entry = (pq.ParquetFile(f), f)
        except (FileNotFoundError, ObjectNotFoundError) as exc:
            last_exc = exc
            continue
        files[(key, ())] = entry
        return entry
    raise ManifestError(
        f"index part {part.path} of {store.uri} is missing (also at {part.staged})",
        uri=store.uri,
    ) from last_exc


def read_row_groups(
    opened: tuple[pq.ParquetFile, RangeFile | None], groups: Sequence[int], names: Sequence[str]
) -> pa.Table:
    """Columns `names` of row groups `groups` of a part from `open_part`; on an object
    store only those column chunks are fetched (coalesced)."""
    pf, f = opened
    if f is None:
        return pf.read_row_groups(list(groups), columns=list(names))
    f.prefetch(*column_chunks(pf.metadata, names, groups))
    try:
        return pf.read_row_groups(list(groups), columns=list(names))
    finally:
        _forget(f)  # a part stays open for the whole run: its fetched chunks must not pile up


class _PartFile(RangeFile):
    """The `RangeFile` of an opened index part, whose prefetched ranges are dropped once
    the read they were fetched for is done (the part stays open, with its footer, for as
    long as the dataset; row groups read in an epoch would otherwise all stay in memory)."""

    def __init__(
        self, store: Store, path: str, size: int | None = None, version: str | None = None
    ) -> None:
        super().__init__(store, path, size=size, version=version)
        self.part_store = store
        self.part_key = path
        self.part_version = version

    def again(self) -> _PartFile:
        """Another file over the same object (for a read in another thread)."""
        return _PartFile(self.part_store, self.part_key, size=self.size, version=self.part_version)

    def forget(self) -> None:
        """Drop the prefetched ranges (later reads fetch again)."""
        self._prefetched.clear()
        self._starts = []


def _forget(f: RangeFile) -> None:
    if isinstance(f, _PartFile):
        f.forget()


class _Room:
    """What one call over row groups may still put in the row-group cache: `left` bytes
    (-1: no bound; None: not decided before its first value)."""

    __slots__ = ("groups", "left")

    def __init__(self, groups: int) -> None:
        self.groups = groups
        self.left: int | None = None


class IndexColumns:
    """The index of one version, read lazily: some rows by row group (`take`, `locate`,
    `shard_runs`), or whole columns on first use and cached (`columns`, `modality`).

    The row-group path reads only the asked columns of only the row groups holding the
    asked rows (an object store fetches only those column chunks) and keeps what it read
    in an LRU bounded by `cache_bytes` (default `INDEX_CACHE_BYTES`, 256 MiB, or
    `FERROLOAD_INDEX_CACHE_BYTES`); a column already loaded whole is used as it is.

    Layer columns (docs/format.md §10) are part of it: they are read from the layer's own
    index part, only when asked for, and padded to the version's length (null metadata,
    absent payloads) when the version has rows the layer does not cover. Thread-safe;
    views of a dataset (subsets) share one instance.

    Attributes:
        shards: the base shards, then every layer's shards: the list that modality shard
            codes (`modality(name).shard`) index into.
        modalities: every modality, base then layers, by name.
    """

    def __init__(self, store: Store, manifest: Manifest, *, cache_bytes: int | None = None) -> None:
        self.store = store
        self.manifest = manifest
        base = index_schema([m.name for m in manifest.modalities], manifest.metadata)
        fields = list(base)
        self.modalities: dict[str, Modality] = {m.name: m for m in manifest.modalities}
        self._layer_of: dict[str, LayerInfo] = {}
        self._shard_start: dict[str, int] = {}
        start = manifest.num_shards  # no shard list read: `shards` reads them when needed
        for layer in manifest.layers:
            self._shard_start[layer.name] = start
            start += len(layer.shards)
            own = [pa.field(m.name, MODALITY_TYPE, nullable=False) for m in layer.modalities]
            for f in (*own, *layer.columns):
                if f.name in base.names or f.name in self._layer_of:
                    raise ManifestError(
                        f"column {f.name!r} of layer {layer.name!r} of {store.uri} is also "
                        "a column of the dataset or of another layer",
                        uri=store.uri,
                        column=f.name,
                        layer=layer.name,
                    )
                self._layer_of[f.name] = layer
                fields.append(f)
            self.modalities.update((m.name, m) for m in layer.modalities)
        self._shards: tuple[ShardInfo, ...] | None = None
        self.schema = pa.schema(fields)
        self._cache: dict[str, pa.Array] = {}
        self._modality: dict[str, ModalityArrays] = {}
        self._shard_codes: npt.NDArray[np.int32] | None = None
        self._layer_codes: dict[str, npt.NDArray[np.int32]] = {}
        self._files: PartFiles = {}
        self._lock = threading.RLock()
        # the lazy path: row groups read on demand, kept in a byte-bounded LRU
        self._groups = GroupCache(default_cache_bytes() if cache_bytes is None else cache_bytes)
        self._scopes: dict[str, _Scope] = {}
        self._group_starts: dict[tuple[str, int], npt.NDArray[np.int64]] = {}
        self._lookups: dict[str, dict[str, int]] = {}
        # the last plan: a loader reads several columns of the same rows in turn
        self._last_plan: tuple[str, int, int, RowPlan] | None = None
        self._runs: tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]] | None = None
        self._local: dict[int, str] = {}  # opened local part -> its path

    @property
    def shards(self) -> tuple[ShardInfo, ...]:
        """The base shards, then every layer's: what modality shard codes index into
        (the manifest's shard lists are read on first use)."""
        got = self._shards
        if got is None:
            base = shards_of(self.store, self.manifest)
            got = self._shards = base + tuple(s for la in self.manifest.layers for s in la.shards)
        return got

    @property
    def column_names(self) -> list[str]:
        """Every index column (layer columns included)."""
        return list(self.schema.names)

    def layer_of(self, name: str) -> LayerInfo | None:
        """The layer that column `name` belongs to (None: a base column)."""
        return self._layer_of.get(name)

    def _require(self, name: str) -> None:
        if self.schema.get_field_index(name) < 0:
            raise ColumnNotFoundError(
                f"{self.store.uri} has no column {name!r}; columns are "
                f"{', '.join(self.schema.names)}",
                uri=self.store.uri,
                column=name,
            )

    def _read(self, names: Sequence[str], **kwargs: Any) -> list[pa.Table]:
        return [
            read_part_table(self.store, p, names, self._files, **kwargs)
            for p in self.manifest.index_parts
        ]

    def read_layer(self, layer: LayerInfo, names: Sequence[str], **kwargs: Any) -> list[pa.Table]:
        """Some columns of a layer's part(s), checked to hold `layer.num_rows` rows."""
        tables = [
            read_part_table(self.store, p, names, self._files, **kwargs) for p in layer.index_parts
        ]
        rows = sum(t.num_rows for t in tables)
        if rows != layer.num_rows or rows > self.manifest.num_samples:
            raise ManifestError(
                f"layer {layer.name!r} of {self.store.uri} has {rows} index rows; its "
                f"manifest entry says {layer.num_rows} (version {self.manifest.version} "
                f"has {self.manifest.num_samples} samples)",
                uri=self.store.uri,
                layer=layer.name,
            )
        return tables

    def columns(self, names: Sequence[str]) -> dict[str, pa.Array]:
        """Arrow arrays (one chunk each) of the named columns, loading those not cached."""
        cache = self._cache
        if all(n in cache for n in names):  # the hot path: no lock, no checks
            return {n: cache[n] for n in names}
        for name in names:
            self._require(name)
        with self._lock:
            missing = [n for n in dict.fromkeys(names) if n not in self._cache]
            base = [n for n in missing if n not in self._layer_of]
            if base:
                self._load(base, self._read(base), pad=0)
            by_layer: dict[str, list[str]] = {}
            for n in missing:
                if n in self._layer_of:
                    by_layer.setdefault(self._layer_of[n].name, []).append(n)
            for lnames in by_layer.values():
                layer = self._layer_of[lnames[0]]
                pad = self.manifest.num_samples - layer.num_rows
                self._load(lnames, self.read_layer(layer, lnames), pad=pad)
            return {n: self._cache[n] for n in names}

    def _load(self, names: Sequence[str], tables: list[pa.Table], *, pad: int) -> None:
        for name in names:
            field_type = self.schema.field(name).type
            chunks = [self._typed(name, t.column(name)) for t in tables]
            if pad:
                chunks.append(_absent(field_type, pad))
            self._cache[name] = (
                pa.concat_arrays(chunks) if chunks else pa.array([], type=field_type)
            )

    def column(self, name: str) -> pa.Array:
        """One column (see `columns`)."""
        return self.columns([name])[name]

    def shard_codes(self) -> npt.NDArray[np.int32]:
        """For every row, the position of its shard in `manifest.shards`."""
        with self._lock:
            if self._shard_codes is None:
                scope = self._scope(None)
                parts = [
                    self._codes_of(scope, chunk)
                    for table in self._read(["shard"], read_dictionary=["shard"])
                    for chunk in table.column("shard").chunks
                ]
                self._shard_codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            return self._shard_codes

    def layer_shard_codes(self, layer: LayerInfo) -> npt.NDArray[np.int32]:
        """For every row, the position in `shards` of the layer shard holding the row's
        payloads of `layer`'s modalities; -1 where the layer stored none."""
        with self._lock:
            codes = self._layer_codes.get(layer.name)
            if codes is not None:
                return codes
            scope = self._scope(layer)
            parts = [
                self._codes_of(scope, chunk)
                for table in self.read_layer(layer, ["shard"], read_dictionary=["shard"])
                for chunk in table.column("shard").chunks
            ]
            pad = self.manifest.num_samples - layer.num_rows
            parts.append(np.full(pad, -1, dtype=np.int32))
            codes = self._layer_codes[layer.name] = np.concatenate(parts)
            return codes

    def modality(self, name: str) -> ModalityArrays:
        """Flat numpy arrays locating every sample's payload of modality `name` (its
        `shard` codes index into `shards`)."""
        arrays = self._modality.get(name)
        if arrays is not None:  # the hot path
            return arrays
        if name not in self.modalities:
            raise ColumnNotFoundError(
                f"{self.store.uri} has no modality {name!r}; modalities are "
                f"{', '.join(self.modalities) or 'none'}",
                uri=self.store.uri,
                column=name,
            )
        with self._lock:
            arrays = self._modality.get(name)
            if arrays is None:
                arrays = self.unchecked_modality(name)
                self._check_ranges(name, arrays)
                self._modality[name] = arrays
            return arrays

    def unchecked_modality(self, name: str) -> ModalityArrays:
        """`modality(name)` without the range check, for `verify` to report bad ranges."""
        struct = self.column(name)
        layer = self._layer_of.get(name)
        return ModalityArrays(
            present=numpy_column(struct.field("present")),
            shard=self.shard_codes() if layer is None else self.layer_shard_codes(layer),
            offset=numpy_column(struct.field("offset")),
            length=numpy_column(struct.field("length")),
            checksum=numpy_column(struct.field("checksum")),
        )

    def bad_ranges(self, a: ModalityArrays) -> npt.NDArray[np.bool_]:
        """For every row, whether its payload is present but its range cannot be a tar
        member's data inside its shard (see `_check_ranges`)."""
        present = a.present.astype(bool, copy=False)
        sizes = np.asarray([s.size for s in self.shards] or [-1], dtype=np.int64)
        codes = a.shard
        known = (codes >= 0) & (codes < len(self.shards))
        size = np.where(known, sizes[np.where(known, codes, 0)], np.int64(-1))
        off, length = a.offset, a.length
        with np.errstate(over="ignore"):
            bad: npt.NDArray[np.bool_] = present & (
                ~known
                | (off < BLOCK)
                | (off % BLOCK != 0)
                | (length < 0)
                | (off > size - np.maximum(length, 0))
            )
        return bad

    def _check_ranges(self, name: str, a: ModalityArrays) -> None:
        """Refuse payload ranges that do not fit their shard (docs/format.md, "Limits").

        One vectorised pass when a modality's index columns are loaded: a present payload
        starts on a tar block after its member header (offset >= 512, a multiple of 512),
        has a non-negative length, and ends inside its shard (`offset + length <= size`,
        written so that it cannot overflow).
        """
        bad = self.bad_ranges(a)
        if not bad.any():
            return
        row = int(np.flatnonzero(bad)[0])
        code = int(a.shard[row])
        known = 0 <= code < len(self.shards)
        shard = self.shards[code].path if known else None
        sid = str(self.column("sample_id")[row].as_py())
        where = f"shard {shard}" if shard is not None else f"unknown shard code {code}"
        limit = f" of {self.shards[code].size} bytes" if known else ""
        off, length = a.offset, a.length
        raise PayloadRangeError(
            f"index of {self.store.uri} is damaged: {name!r} of sample {sid!r} claims bytes "
            f"[{int(off[row])}, +{int(length[row])}) of {where}{limit}, which is not a tar "
            f"member's data inside the shard ({int(bad.sum())} such sample(s)); run verify()",
            uri=self.store.uri,
            shard=shard,
            sample_id=sid,
            column=name,
        )

    # ------------------------------------------------------------- the row-group path

    def loaded_columns(self) -> set[str]:
        """Columns read so far, whole or some row groups of them (modalities by name)."""
        with self._lock:
            names = set(self._cache) | set(self._modality)
            names.update(str(k[4]) for k in self._groups.held() if k[3] != "codes")
            return names

    def _scope(self, layer: LayerInfo | None) -> _Scope:
        key = "" if layer is None else layer.name
        scope = self._scopes.get(key)
        if scope is not None:
            return scope
        parts = self.manifest.index_parts if layer is None else layer.index_parts
        bounds = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([p.num_rows for p in parts], out=bounds[1:])
        if layer is not None and (
            int(bounds[-1]) != layer.num_rows or layer.num_rows > self.manifest.num_samples
        ):
            raise ManifestError(
                f"layer {layer.name!r} of {self.store.uri} has {int(bounds[-1])} index rows; "
                f"its manifest entry says {layer.num_rows} (version {self.manifest.version} "
                f"has {self.manifest.num_samples} samples)",
                uri=self.store.uri,
                layer=layer.name,
            )
        scope = self._scopes[key] = _Scope(key, tuple(parts), bounds, layer)
        return scope

    def _starts(self, scope: _Scope, p: int) -> npt.NDArray[np.int64]:
        """Cumulative row counts of the row groups of part `p` of `scope` (its footer)."""
        starts = self._group_starts.get((scope.key, p))
        if starts is not None:
            return starts
        part = scope.parts[p]
        md = open_part(self.store, part, self._files)[0].metadata
        check_part_rows(self.store, part, md.num_rows)
        starts = np.zeros(md.num_row_groups + 1, dtype=np.int64)
        np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)], out=starts[1:])
        self._group_starts[(scope.key, p)] = starts
        return starts

    def _plan(self, scope: _Scope, rows: npt.NDArray[np.int64]) -> RowPlan:
        """Which row groups hold `rows`, and where (the last plan is kept: a loader asks
        for several columns of the same rows, and planning sorts them)."""
        # rows < scope.bounds[-1]: the manifest's sample count is its parts' rows, and
        # a layer's rows beyond its parts are taken out by the callers
        big = len(rows) >= 1024  # small plans cost less than the fingerprint
        digest = xxhash.xxh3_64_intdigest(np.ascontiguousarray(rows).data) if big else 0
        last = self._last_plan
        if last is not None and last[:3] == (scope.key, len(rows), digest):
            return last[3]
        plan = plan_rows(rows, scope.bounds, lambda p: self._starts(scope, p))
        if big:
            self._last_plan = (scope.key, len(rows), digest, plan)
        return plan

    def _lookup(self, scope: _Scope) -> dict[str, int]:
        lookup = self._lookups.get(scope.key)
        if lookup is None:
            if scope.layer is None:
                lookup = {s.path: i for i, s in enumerate(shards_of(self.store, self.manifest))}
            else:
                start = self._shard_start[scope.key]
                lookup = {s.path: start + i for i, s in enumerate(scope.layer.shards)}
            self._lookups[scope.key] = lookup
        return lookup

    def _codes_of(self, scope: _Scope, arr: pa.Array) -> npt.NDArray[np.int32]:
        """Shard codes (into `shards`) of a row group's `shard` values; -1 where a layer
        stored no payload."""
        layer = scope.layer
        where = "" if layer is None else f" of layer {layer.name!r}"
        if pa.types.is_null(arr.type) and layer is not None:
            return np.full(len(arr), -1, dtype=np.int32)
        d = arr if pa.types.is_dictionary(arr.type) else None
        if d is None and (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            d = pc.dictionary_encode(arr)
        if d is None or not (
            pa.types.is_string(d.type.value_type) or pa.types.is_large_string(d.type.value_type)
        ):
            raise ManifestError(
                f"the shard column of the index{where} of {self.store.uri} holds {arr.type}, "
                "not strings. The index was altered; run verify()",
                uri=self.store.uri,
                column="shard",
            )
        if d.null_count and layer is None:
            raise ManifestError(
                f"the shard column of the index of {self.store.uri} has nulls. The index "
                "was altered; run verify()",
                uri=self.store.uri,
                column="shard",
            )
        lookup = self._lookup(scope)
        try:
            mapping = np.asarray(
                [lookup[s] for s in d.dictionary.to_pylist()] or [-1], dtype=np.int32
            )
        except KeyError as exc:
            raise ManifestError(
                f"index{where} of {self.store.uri} names shard {exc.args[0]!r}, which the "
                "manifest does not list",
                uri=self.store.uri,
                shard=str(exc.args[0]),
                **({} if layer is None else {"layer": layer.name}),
            ) from None
        codes: npt.NDArray[np.int32] = mapping[numpy_column(pc.fill_null(d.indices, 0))]
        if d.null_count:
            codes = np.where(numpy_column(d.is_valid()), codes, np.int32(-1)).astype(np.int32)
        return codes

    def _one_shard(self, p: int, g: int) -> int | None:
        """The code of the one base shard that the statistics of row group `g` of base
        part `p` say all its rows are in; None when they do not say so."""
        pf = open_part(self.store, self.manifest.index_parts[p], self._files)[0]
        md = pf.metadata
        col = next((i for i in range(md.num_columns) if md.schema.column(i).path == "shard"), None)
        if col is None:
            return None
        stats = md.row_group(g).column(col).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            return None
        value = stats.min.decode() if isinstance(stats.min, bytes) else stats.min
        code = self._lookup(self._scope(None)).get(str(value))
        if code is None:
            raise ManifestError(
                f"index of {self.store.uri} names shard {value!r}, which the manifest does "
                "not list",
                uri=self.store.uri,
                shard=str(value),
            )
        return code

    def _each_group(
        self,
        scope: _Scope,
        groups: Sequence[tuple[int, int]],
        kind: str,
        name: str,
        use: Callable[[int, Any], None],
    ) -> None:
        """Call `use(i, value)` with what row group `groups[i]` holds of `name`, read
        where not cached: `kind` "col" (the column as an Arrow array), "loc" (a
        modality's `ModalityArrays`, range checked) or "codes" (shard codes). Values are
        handed over as they are read, so a call touching many row groups holds a few at
        a time beyond the cache. A call over more row groups than the cache holds (a
        shuffled loader's window touches all of them, and at 10^8 rows they are ten times
        the cache) keeps at most `1 / SCAN_SHARE` of the cache and reads the rest through,
        instead of evicting everything else for values it will not read again (the full
        cache of such passes was 350 MB of a loader's peak RSS at 10^8 rows); a call whose
        groups fit is cached whole (at 10^7 rows, the next window's pass hits it)."""
        room = _Room(len(groups))
        missing: dict[int, dict[int, list[int]]] = {}
        for i, (p, g) in enumerate(groups):
            value = self._groups.get((scope.key, p, g, kind, name))
            if value is None:
                missing.setdefault(p, {}).setdefault(g, []).append(i)
            else:
                use(i, value)
        for p, by_group in missing.items():

            def hand(g: int, value: Any, by_group: dict[int, list[int]] = by_group) -> None:
                for i in by_group[g]:
                    use(i, value)

            self._load_groups(scope, p, sorted(by_group), kind, name, hand, room)

    def _load_groups(
        self,
        scope: _Scope,
        p: int,
        gs: list[int],
        kind: str,
        name: str,
        use: Callable[[int, Any], None],
        room: _Room,
    ) -> None:
        part = scope.parts[p]
        starts = self._starts(scope, p)
        opened = open_part(self.store, part, self._files)
        phys = ([] if kind == "codes" else [name]) + ([] if kind == "col" else ["shard"])
        for c in phys:
            if opened[0].schema_arrow.get_field_index(c) < 0:
                raise _no_column(self.store, part, c)
        # a few row groups per read: what one read holds at once stays small
        chunks = [gs[c0 : c0 + _GROUPS_PER_READ] for c0 in range(0, len(gs), _GROUPS_PER_READ)]
        for chunk, table in zip(chunks, self._read_chunks(opened, chunks, phys), strict=True):
            off = 0
            for g in chunk:
                n = int(starts[g + 1] - starts[g])
                t = table.slice(off, n)
                off += n
                codes = None
                if "shard" in phys:
                    codes = self._codes_of(scope, t.column("shard").combine_chunks())
                    if scope.layer is None:
                        one = self._one_shard(p, g)
                        if one is not None and bool((codes != one).any()):
                            raise ManifestError(
                                f"row group {g} of index part {part.path} of {self.store.uri} "
                                "holds rows of several shards; its statistics say one. The index "
                                "was altered; run verify()",
                                uri=self.store.uri,
                                part=part.path,
                            )
                    self._keep(room, (scope.key, p, g, "codes", "shard"), codes, codes.nbytes)
                if kind == "codes":
                    use(g, codes)
                    continue
                arr = self._typed(name, t.column(name))
                if kind == "col":
                    value: Any = arr
                    nbytes = arr.nbytes
                else:
                    assert codes is not None
                    value = ModalityArrays(
                        present=numpy_column(arr.field("present"), writable=True),
                        shard=codes,
                        offset=numpy_column(arr.field("offset"), writable=True),
                        length=numpy_column(arr.field("length"), writable=True),
                        checksum=numpy_column(arr.field("checksum"), writable=True),
                    )
                    self._check_group(name, value, int(scope.bounds[p] + starts[g]))
                    nbytes = sum(
                        x.nbytes
                        for x in (value.present, value.offset, value.length, value.checksum)
                    )
                self._keep(room, (scope.key, p, g, kind, name), value, nbytes)
                use(g, value)

    def _keep(self, room: _Room, key: tuple[Any, ...], value: Any, nbytes: int) -> None:
        """Cache a loaded row group unless the call is a scan out of `room` (see
        `_each_group`); the call's first value (not shard codes) decides which it is."""
        if room.left is None and key[3] != "codes":
            fits = room.groups * nbytes <= self._groups.max_bytes
            room.left = -1 if fits else self._groups.max_bytes // SCAN_SHARE
        keep = room.left is None or room.left < 0 or nbytes <= room.left
        if keep and room.left is not None and room.left >= 0:
            room.left -= nbytes
        self._groups.put(key, value, nbytes, keep=keep)

    def _own_file(
        self, opened: tuple[pq.ParquetFile, RangeFile | None]
    ) -> tuple[pq.ParquetFile, RangeFile | None]:
        """A file of the part `opened` for one read (with the part's footer, not read
        again): reads in several threads share nothing but the footer. A local part is
        memory-mapped again, an object-store part gets a `RangeFile` of its own."""
        pf, f = opened
        if isinstance(f, _PartFile):
            own = f.again()
            return pq.ParquetFile(own, metadata=pf.metadata), own
        local = self._local.get(id(opened))
        if local is None:
            key = next((k[0] for k, v in list(self._files.items()) if v is opened), None)
            path = None if key is None else self.store.local_path(key)
            if path is None:
                return opened  # not found again (cannot happen): the shared file
            local = self._local[id(opened)] = str(path)
        return pq.ParquetFile(local, memory_map=True, metadata=pf.metadata), None

    def _read_chunks(
        self,
        opened: tuple[pq.ParquetFile, RangeFile | None],
        chunks: list[list[int]],
        names: list[str],
    ) -> Iterator[pa.Table]:
        """`read_row_groups` of each chunk of row groups, in order, each with a file of
        its own (`_own_file`); several chunks are read side by side in threads (decoding
        releases the GIL), a few ahead of the one handed over."""

        def one(chunk: list[int]) -> pa.Table:
            return read_row_groups(self._own_file(opened), chunk, names)

        if len(chunks) == 1 or _READ_THREADS == 1:
            for chunk in chunks:
                yield one(chunk)
            return
        with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(chunks))) as pool:
            todo = iter(chunks)
            running: deque[Future[pa.Table]] = deque(
                pool.submit(one, c) for c in itertools.islice(todo, _READ_THREADS)
            )
            while running:
                table = running.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    running.append(pool.submit(one, nxt))
                yield table

    def _typed(self, name: str, col: pa.ChunkedArray) -> pa.Array:
        """A column read (of a part or a row group) as the schema's type, in memory of
        its own (not a slice of the table read, which would keep the other groups alive).

        Raises:
            ManifestError: its values do not convert to the schema's type.
        """
        field_type = self.schema.field(name).type
        try:
            return pa.concat_arrays(
                [_as_type(c, field_type) for c in col.chunks] or [pa.array([], type=field_type)]
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ManifestError(
                f"column {name!r} of the index of {self.store.uri} does not hold "
                f"{field_type} as the manifest's schema says ({exc}). The manifest or "
                "the index was altered; run verify()",
                uri=self.store.uri,
                column=name,
            ) from exc

    def _check_group(self, name: str, a: ModalityArrays, first: int) -> None:
        """`_check_ranges` for one row group whose first row is `first`."""
        bad = self.bad_ranges(a)
        if not bad.any():
            return
        k = int(np.flatnonzero(bad)[0])
        code = int(a.shard[k])
        known = 0 <= code < len(self.shards)
        shard = self.shards[code].path if known else None
        sid = str(self.take(["sample_id"], np.asarray([first + k]))["sample_id"][0].as_py())
        where = f"shard {shard}" if shard is not None else f"unknown shard code {code}"
        limit = f" of {self.shards[code].size} bytes" if known else ""
        raise PayloadRangeError(
            f"index of {self.store.uri} is damaged: {name!r} of sample {sid!r} claims bytes "
            f"[{int(a.offset[k])}, +{int(a.length[k])}) of {where}{limit}, which is not a tar "
            f"member's data inside the shard ({int(bad.sum())} such sample(s) in its row "
            "group); run verify()",
            uri=self.store.uri,
            shard=shard,
            sample_id=sid,
            column=name,
        )

    def take(self, names: Sequence[str], rows: npt.NDArray[np.int64]) -> dict[str, pa.Array]:
        """Columns `names` at `rows` (row numbers of the version, any order, repeats
        allowed), in that order: whole columns already loaded are indexed, others read
        only the row groups holding `rows`. A modality comes back as its location struct.

        Raises:
            ColumnNotFoundError: for an unknown column.
        """
        for name in names:
            self._require(name)
        rows = np.asarray(rows, dtype=np.int64)
        out: dict[str, pa.Array] = {}
        for name in dict.fromkeys(names):
            whole = self._cache.get(name)
            if whole is not None:
                out[name] = whole.take(arrow_array(rows))
                continue
            out[name] = self._take_lazy(name, rows)
        return {n: out[n] for n in names}

    def _take_lazy(self, name: str, rows: npt.NDArray[np.int64]) -> pa.Array:
        layer = self._layer_of.get(name)
        scope = self._scope(layer)
        field_type = self.schema.field(name).type
        covered = rows if layer is None else rows[rows < scope.bounds[-1]]
        plan = self._plan(scope, covered)
        segments = plan.segments()
        found: list[list[pa.Array]] = [[] for _ in segments]

        def use(i: int, v: pa.Array) -> None:
            inner = plan.inner[segments[i][1]]
            if len(inner) <= 4:  # random positions: a row or two per group: slices are
                # type-exact and ~5x cheaper than a take; copied at once, so that the
                # group itself can go (a read touching every group would hold them all)
                found[i] = [pa.concat_arrays([v.slice(k, 1) for k in inner.tolist()])]
            else:
                found[i] = [v.take(arrow_array(inner))]

        self._each_group(scope, plan.groups, "col", name, use)
        pieces = [a for f in found for a in f]
        found.clear()  # the pieces go as soon as they are merged
        order = plan.order
        if layer is not None and len(covered) < len(rows):
            # rows the layer does not cover: absent / null, placed after the covered ones
            inside = np.flatnonzero(rows < scope.bounds[-1])
            outside = np.flatnonzero(rows >= scope.bounds[-1])
            pieces.append(_absent(field_type, len(outside)))
            order = np.concatenate([inside[order], outside])
        if not pieces:
            return pa.array([], type=field_type)
        merged = pa.concat_arrays(pieces)
        pieces.clear()
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.arange(len(order), dtype=np.int64)
        return merged.take(arrow_array(inverse))

    def locate(self, name: str, rows: npt.NDArray[np.int64]) -> ModalityArrays:
        """Where modality `name`'s payloads of `rows` (row numbers of the version) live,
        one entry per row in the order given, range checked (each row group once, when
        it is read; see `_check_ranges`).

        Raises:
            ColumnNotFoundError: for an unknown modality.
            PayloadRangeError: a row group holding one of `rows` has a bad range.
        """
        whole = self._modality.get(name)
        rows = np.asarray(rows, dtype=np.int64)
        if whole is not None:
            return ModalityArrays(
                present=whole.present[rows],
                shard=whole.shard[rows],
                offset=whole.offset[rows],
                length=whole.length[rows],
                checksum=whole.checksum[rows],
            )
        if name not in self.modalities:
            self.modality(name)  # raises ColumnNotFoundError
        n = len(rows)
        out = ModalityArrays(
            present=np.zeros(n, dtype=np.bool_),
            shard=np.full(n, -1, dtype=np.int32),
            offset=np.zeros(n, dtype=np.int64),
            length=np.zeros(n, dtype=np.int64),
            checksum=np.zeros(n, dtype=np.uint64),
        )
        layer = self._layer_of.get(name)
        scope = self._scope(layer)
        inside = np.flatnonzero(rows < scope.bounds[-1]) if layer is not None else None
        covered = rows if inside is None else rows[inside]
        plan = self._plan(scope, covered)
        segments = plan.segments()

        def use(i: int, v: ModalityArrays) -> None:
            sel = segments[i][1]
            at = sel if inside is None else inside[sel]
            k = plan.inner[sel]
            out.present[at] = v.present[k]
            out.shard[at] = v.shard[k]
            out.offset[at] = v.offset[k]
            out.length[at] = v.length[k]
            out.checksum[at] = v.checksum[k]

        self._each_group(scope, plan.groups, "loc", name, use)
        return out

    def shard_codes_at(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """The base shard code of each of `rows` (see `shard_codes`), by row group."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._shard_codes is not None:
            return self._shard_codes[rows]
        out = np.empty(len(rows), dtype=np.int32)
        scope = self._scope(None)
        plan = self._plan(scope, rows)
        segments = plan.segments()

        def use(i: int, v: npt.NDArray[np.int32]) -> None:
            sel = segments[i][1]
            out[sel] = v[plan.inner[sel]]

        self._each_group(scope, plan.groups, "codes", "shard", use)
        return out

    def shard_runs(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        """The rows of the version split into runs of one base shard: (first row of each
        run, its shard code).

        A row group whose Parquet statistics say one shard (min = max; the Writer fills
        shards in row order, so most groups do) is one run without reading it; the shard
        column of the others is read (dictionary indices, cheap). A group read later
        that contradicts its statistics is refused (`ManifestError`).
        """
        with self._lock:
            if self._runs is not None:
                return self._runs
            if self._shard_codes is not None:
                self._runs = _runs_of(self._shard_codes, 0)
                return self._runs
            scope = self._scope(None)
            starts: list[npt.NDArray[np.int64]] = []
            codes: list[npt.NDArray[np.int32]] = []
            for p in range(len(scope.parts)):
                gstarts = self._starts(scope, p)
                base = int(scope.bounds[p])
                ones = [self._one_shard(p, g) for g in range(len(gstarts) - 1)]
                mixed = [(p, g) for g, one in enumerate(ones) if one is None]
                runs: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = {}

                def use(
                    i: int,
                    v: npt.NDArray[np.int32],
                    mixed: Any = mixed,
                    runs: Any = runs,
                    base: int = base,
                    gstarts: Any = gstarts,
                ) -> None:
                    g = mixed[i][1]
                    runs[g] = _runs_of(v, base + int(gstarts[g]))

                self._each_group(scope, mixed, "codes", "shard", use)
                for g, one in enumerate(ones):
                    if one is not None:
                        starts.append(np.asarray([base + int(gstarts[g])], dtype=np.int64))
                        codes.append(np.asarray([one], dtype=np.int32))
                    elif g in runs:
                        starts.append(runs[g][0])
                        codes.append(runs[g][1])
            if not starts:
                self._runs = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
                return self._runs
            s_all = np.concatenate(starts)
            c_all = np.concatenate(codes)
            keep = np.concatenate([[True], c_all[1:] != c_all[:-1]])
            self._runs = (s_all[keep], c_all[keep])
            return self._runs

    def all_present(self, name: str) -> bool:
        """Whether every row of the version has a payload of modality `name`: from the
        Parquet statistics of its `present` field where they say so, else by reading the
        row groups they leave open."""
        if name not in self.modalities:
            self.modality(name)  # raises ColumnNotFoundError
        whole = self._modality.get(name)
        if whole is not None:
            return bool(whole.present.all())
        layer = self._layer_of.get(name)
        with self._lock:
            scope = self._scope(layer)
            if int(scope.bounds[-1]) < self.manifest.num_samples:
                return False  # rows a layer does not cover read as absent
            path = f"{name}.present"
            for p, part in enumerate(scope.parts):
                starts = self._starts(scope, p)
                md = open_part(self.store, part, self._files)[0].metadata
                col = next(
                    (i for i in range(md.num_columns) if md.schema.column(i).path == path),
                    None,
                )
                for g in range(len(starts) - 1):
                    stats = None if col is None else md.row_group(g).column(col).statistics
                    if stats is not None and stats.has_min_max:
                        if stats.min is False:
                            return False
                        if stats.min is True:
                            continue
                    found: list[bool] = []

                    def seen(_: int, v: ModalityArrays, found: list[bool] = found) -> None:
                        found.append(bool(v.present.all()))

                    self._each_group(scope, [(p, g)], "loc", name, seen)
                    if not all(found):
                        return False
            return True


def _as_type(arr: pa.Array, dtype: pa.DataType) -> pa.Array:
    return arr if arr.type == dtype else arr.cast(dtype)


def absent_modality(n: int) -> pa.StructArray:
    """`n` location structs of absent payloads (present false, zeros)."""
    zeros = np.zeros(n, np.int64)
    return pa.StructArray.from_arrays(
        [
            arrow_array(np.zeros(n, np.bool_)),
            arrow_array(zeros),
            arrow_array(zeros),
            arrow_array(zeros.view(np.uint64)),
        ],
        fields=list(MODALITY_TYPE),
    )


def _absent(dtype: pa.DataType, n: int) -> pa.Array:
    """What `n` rows that a layer does not cover read as: absent payloads, null values."""
    if dtype == MODALITY_TYPE:
        return absent_modality(n)
    return pa.nulls(n, type=dtype)


@dataclass(frozen=True)
class _Scope:
    """The index parts of the base ("") or of one layer, and their cumulative rows."""

    key: str
    parts: tuple[IndexPart, ...]
    bounds: npt.NDArray[np.int64]
    layer: LayerInfo | None


def _runs_of(
    codes: npt.NDArray[np.int32], first: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """(starts, codes) of the runs of equal `codes`, starts offset by `first`."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1]).astype(np.int64)
    return starts + first, codes[starts].astype(np.int32)
