"""The Parquet index (docs/format.md §5): building parts and reading their columns lazily."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ferroload_format._errors import (
    ColumnNotFoundError,
    ManifestError,
    PayloadRangeError,
    SchemaConflictError,
)
from ferroload_format._manifest import IndexPart, LayerInfo, Manifest, Modality, ShardInfo
from ferroload_format._names import RESERVED_COLUMNS, RESERVED_PREFIX
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
    """Serialize an index part: zstd, statistics, page index, bounded row groups."""
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=row_group_size,
        compression="zstd",
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
    if table.num_rows != part.num_rows:
        raise ManifestError(
            f"index part {part.path} of {store.uri} holds {table.num_rows} rows; the manifest "
            f"says {part.num_rows}. The manifest or the part was altered; run verify()",
            uri=store.uri,
            part=part.path,
        )
    return table


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
                f = RangeFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
                entry = files[cache_key] = (pq.ParquetFile(f, **kwargs), f)
            pf, f = entry
            assert f is not None  # only remote parts are cached here
            f.prefetch(*column_chunks(pf.metadata, columns))
            return pf.read(columns=columns)
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
                f = RangeFile(store, key, size=part.size, version=f"v{part.version}-s{part.size}")
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
    if f is not None:
        f.prefetch(*column_chunks(pf.metadata, names, groups))
    return pf.read_row_groups(list(groups), columns=list(names))


class IndexColumns:
    """The index of one version, loaded column by column on first use and cached.

    Layer columns (docs/format.md §10) are part of it: they are read from the layer's own
    index part, only when asked for, and padded to the version's length (null metadata,
    absent payloads) when the version has rows the layer does not cover. Thread-safe;
    views of a dataset (subsets) share one instance.

    Attributes:
        shards: the base shards, then every layer's shards: the list that modality shard
            codes (`modality(name).shard`) index into.
        modalities: every modality, base then layers, by name.
    """

    def __init__(self, store: Store, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        base = index_schema([m.name for m in manifest.modalities], manifest.metadata)
        fields = list(base)
        self.modalities: dict[str, Modality] = {m.name: m for m in manifest.modalities}
        self._layer_of: dict[str, LayerInfo] = {}
        self._shard_start: dict[str, int] = {}
        shards = list(manifest.shards)
        for layer in manifest.layers:
            self._shard_start[layer.name] = len(shards)
            shards.extend(layer.shards)
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
        self.shards: tuple[ShardInfo, ...] = tuple(shards)
        self.schema = pa.schema(fields)
        self._cache: dict[str, pa.Array] = {}
        self._modality: dict[str, ModalityArrays] = {}
        self._shard_codes: npt.NDArray[np.int32] | None = None
        self._layer_codes: dict[str, npt.NDArray[np.int32]] = {}
        self._files: PartFiles = {}
        self._lock = threading.RLock()

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
            try:
                chunks = [_as_type(t.column(name).combine_chunks(), field_type) for t in tables]
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise ManifestError(
                    f"column {name!r} of the index of {self.store.uri} does not hold "
                    f"{field_type} as the manifest's schema says ({exc}). The manifest or "
                    "the index was altered; run verify()",
                    uri=self.store.uri,
                    column=name,
                ) from exc
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
                lookup = {s.path: i for i, s in enumerate(self.manifest.shards)}
                parts = []
                for table in self._read(["shard"], read_dictionary=["shard"]):
                    for chunk in table.column("shard").chunks:
                        if not pa.types.is_dictionary(chunk.type) or not pa.types.is_string(
                            chunk.type.value_type
                        ):
                            raise ManifestError(
                                f"the shard column of the index of {self.store.uri} holds "
                                f"{chunk.type}, not strings. The index was altered; run verify()",
                                uri=self.store.uri,
                                column="shard",
                            )
                        try:
                            mapping = np.asarray(
                                [lookup[s] for s in chunk.dictionary.to_pylist()], dtype=np.int32
                            )
                        except KeyError as exc:
                            raise ManifestError(
                                f"index of {self.store.uri} names shard {exc.args[0]!r}, "
                                "which the manifest does not list",
                                uri=self.store.uri,
                                shard=str(exc.args[0]),
                            ) from None
                        idx = numpy_column(chunk.indices)
                        parts.append(mapping[idx] if len(mapping) else idx.astype(np.int32))
                self._shard_codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            return self._shard_codes

    def layer_shard_codes(self, layer: LayerInfo) -> npt.NDArray[np.int32]:
        """For every row, the position in `shards` of the layer shard holding the row's
        payloads of `layer`'s modalities; -1 where the layer stored none."""
        with self._lock:
            codes = self._layer_codes.get(layer.name)
            if codes is not None:
                return codes
            start = self._shard_start[layer.name]
            lookup = {s.path: start + i for i, s in enumerate(layer.shards)}
            parts = []
            for table in self.read_layer(layer, ["shard"], read_dictionary=["shard"]):
                for chunk in table.column("shard").chunks:
                    if not isinstance(chunk, pa.DictionaryArray):  # all null
                        parts.append(np.full(len(chunk), -1, dtype=np.int32))
                        continue
                    try:
                        mapping = np.asarray(
                            [lookup[s] for s in chunk.dictionary.to_pylist()] or [-1],
                            dtype=np.int32,
                        )
                    except KeyError as exc:
                        raise ManifestError(
                            f"index of layer {layer.name!r} of {self.store.uri} names shard "
                            f"{exc.args[0]!r}, which the manifest does not list",
                            uri=self.store.uri,
                            shard=str(exc.args[0]),
                            layer=layer.name,
                        ) from None
                    idx = numpy_column(pc.fill_null(chunk.indices, 0))
                    valid = numpy_column(chunk.is_valid())
                    parts.append(np.where(valid, mapping[idx], np.int32(-1)).astype(np.int32))
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
