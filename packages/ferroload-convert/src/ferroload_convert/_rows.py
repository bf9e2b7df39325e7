"""Rows of a table (Hugging Face, Parquet) to samples, a batch at a time.

A batch is converted column-wise (`to_pylist` per column, no per-row Arrow access) on a
worker thread; the calling thread then only adds the rows it gets back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ferroload_convert._arrow import meta_values
from ferroload_convert._errors import BadInputError
from ferroload_convert._files import DEFAULT_MAX_FILE_BYTES, read_regular
from ferroload_convert._sniff import check_image
from ferroload_core import sniff_ext


@dataclass
class Column:
    """How one input column is imported.

    `kind`: `media` (a struct<bytes, path> cell: the bytes, else the file at the path),
    `binary` (the cell's bytes), `label` (a class index, plus its name in `extra`), or
    `meta` (the value as metadata). `target` is the modality or metadata column; `extra`
    the metadata column of a media cell's path or a label's name.
    """

    source: str
    kind: str
    target: str
    extra: str | None = None
    labels: Sequence[str] | None = None
    check: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """The dataset columns this column fills."""
        return (self.target,) if self.extra is None else (self.target, self.extra)


@dataclass(frozen=True)
class Row:
    """One converted row: a name for its sample id, payloads and metadata."""

    name: str
    data: dict[str, bytes]
    meta: dict[str, Any]


@dataclass(frozen=True)
class Batch:
    """Rows `start …` of the input `where`; `id_format.format(row)` names a row without
    an id column."""

    where: str
    id_format: str
    start: int
    table: pa.Table | pa.RecordBatch = field(repr=False)


def convert_rows(
    batch: Batch,
    *,
    columns: Sequence[Column],
    id_column: str | None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> list[Row | BadInputError]:
    """The rows of `batch` as samples, or a `BadInputError` for each bad row (a media
    cell's file is read only if it is a regular file of at most `max_file_bytes`)."""
    table, n = batch.table, batch.table.num_rows
    out: list[Row | BadInputError] = []
    bad: dict[int, BadInputError] = {}
    values: list[tuple[Column, list[Any], list[Any] | None]] = []
    for col in columns:
        arr = table.column(col.source)
        if col.kind == "media":
            cells, paths = _media_cells(arr, batch, col, bad, max_file_bytes)
            values.append((col, cells, paths if col.extra is not None else None))
        elif col.kind == "binary":
            cells = arr.to_pylist()
            values.append((col, _checked(cells, batch, col, bad), None))
        else:
            values.append((col, meta_values(arr), None))
    if id_column is not None:
        ids: list[Any] = meta_values(table.column(id_column))
    for i in range(n):
        if i in bad:
            out.append(bad[i])
            continue
        if id_column is None:
            name = batch.id_format.format(batch.start + i)
        elif ids[i] is None:
            out.append(
                BadInputError(
                    f"row {batch.start + i} of {batch.where} has no {id_column!r} (the id column)",
                    path=batch.where,
                    row=batch.start + i,
                    column=id_column,
                )
            )
            continue
        else:
            name = str(ids[i])
        data: dict[str, bytes] = {}
        meta: dict[str, Any] = {}
        for col, cells, extra in values:
            value: Any = cells[i]
            if col.kind in ("media", "binary"):
                if value is not None:
                    data[col.target] = value
                if extra is not None:
                    meta[col.extra] = extra[i]  # type: ignore[index]
            elif col.kind == "label":
                meta[col.target] = value
                ok = col.labels is not None and value is not None and 0 <= value < len(col.labels)
                meta[col.extra] = col.labels[value] if ok else None  # type: ignore[index]
            else:
                meta[col.target] = value
        out.append(Row(name, data, meta))
    return out


def _media_cells(
    arr: pa.ChunkedArray | pa.Array,
    batch: Batch,
    col: Column,
    bad: dict[int, BadInputError],
    max_bytes: int,
) -> tuple[list[bytes | None], list[Any]]:
    """The bytes of each struct<bytes, path> cell (stored bytes, else the file's), and
    each cell's stored path (all None without a `path` field)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    cells: list[bytes | None] = pc.struct_field(arr, "bytes").to_pylist()
    has_path = arr.type.get_field_index("path") >= 0
    paths = meta_values(pc.struct_field(arr, "path")) if has_path else [None] * len(cells)
    for i, (data, path) in enumerate(zip(cells, paths, strict=True)):
        if data is None and path is not None:
            try:
                cells[i] = read_regular(path, max_bytes=max_bytes)
            except BadInputError as exc:
                bad[i] = BadInputError(
                    f"row {batch.start + i} of {batch.where}: {col.source!r} refers to "
                    f"a file that cannot be imported: {exc}",
                    path=batch.where,
                    row=batch.start + i,
                    column=col.source,
                )
    return _checked(cells, batch, col, bad), paths


def _checked(
    cells: list[bytes | None], batch: Batch, col: Column, bad: dict[int, BadInputError]
) -> list[bytes | None]:
    if col.check:
        for i, data in enumerate(cells):
            problem = check_image(data) if data is not None and i not in bad else None
            if problem is not None:
                bad[i] = BadInputError(
                    f"row {batch.start + i} of {batch.where}: {col.source!r} is not a usable "
                    f"image: {problem}; pass on_error='skip' to leave the row out",
                    path=batch.where,
                    row=batch.start + i,
                    column=col.source,
                )
    return cells


def first_value(column: pa.ChunkedArray | pa.Array) -> tuple[bytes | None, str | None]:
    """(bytes, path) of the first non-null value of a binary or struct<bytes, path>
    column, without copying the column."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    for chunk in chunks:
        if pa.types.is_struct(chunk.type):
            data = pc.struct_field(chunk, "bytes")
            has_path = chunk.type.get_field_index("path") >= 0
            path = pc.struct_field(chunk, "path") if has_path else None
        else:
            data, path = chunk, None
        i = pc.index(pc.is_valid(data), True).as_py()
        if i >= 0:
            return data[i].as_py(), None
        if path is not None:
            j = pc.index(pc.is_valid(path), True).as_py()
            if j >= 0:
                return None, path[j].as_py()
    return None, None


def ext_of(data: bytes | None, path: str | None) -> str | None:
    """The extension of a value: its bytes' format, else its path's suffix."""
    ext = sniff_ext(data)
    if ext is None and path and "." in path.rsplit("/", 1)[-1]:
        suffix = path.rsplit(".", 1)[-1].lower()
        if suffix.isalnum() and len(suffix) <= 16:
            ext = suffix
    return ext


def media_ext(column: pa.ChunkedArray | pa.Array) -> str:
    """The extension of a column's first value (`bin` when unknown)."""
    return ext_of(*first_value(column)) or "bin"
