"""Parquet files with binary columns to a dataset."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ferroload_convert._cluster import Executor, SessionOptions, StatelessJob, run_job
from ferroload_convert._errors import BadInputError, ConvertOptionError
from ferroload_convert._files import check_regular, check_utf8_name
from ferroload_convert._ids import column_name, metadata_name
from ferroload_convert._pipeline import Failed, ordered_streams
from ferroload_convert._report import (
    DEFAULT_WORKERS,
    ImportReport,
    OnError,
    PassedOver,
    Progress,
    check_common,
)
from ferroload_convert._rows import Batch, Column, Row, convert_rows, ext_of, first_value
from ferroload_convert._session import ImportSession
from ferroload_convert._sniff import is_image_ext, kind_of
from ferroload_convert._sources import Source, input_files
from ferroload_format import DEFAULT_SHARD_SIZE, WriteMode

#: Rows per record batch read from a file (each active file runs at most 2 batches ahead).
BATCH_ROWS = 64
PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")


def import_parquet(
    src: Source,
    dst: str | os.PathLike[str],
    *,
    id_column: str | None = None,
    binary_columns: Mapping[str, str] | None = None,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    mode: WriteMode = "create",
    executor: Executor | None = None,
    chunk_size: int | None = None,
) -> ImportReport:
    """Import Parquet files: binary columns become modalities, the others metadata.

    Each binary column becomes a modality named after it (lowercased, made valid), with
    its bytes as they are; a null cell means the sample lacks that modality. Every other
    column becomes metadata of the same name (`src_<name>` if it clashes with a modality
    or a reserved name; dates and decimals as strings). Sample ids come from `id_column`
    (sanitized; the column stays as metadata too), else `<file>-<row>` (`part-0-000042`
    for row 42 of `part-0.parquet`). Files are read in record batches, `workers` at a
    time; rows keep the files' order.

    Args:
        src: a Parquet file, a folder searched for `*.parquet`, a glob, or a list.
        dst: the dataset URI.
        id_column: the column that names the samples.
        binary_columns: column -> extension of the columns to import as modalities
            (default: every `binary` / `large_binary` column, the extension sniffed from
            its first non-null value, `bin` when unknown).
        name: the dataset name (default: the last part of `dst`).
        workers: files read at once.
        on_error: a bad file or row (a damaged image in an image column, a null id)
            raises `BadInputError` (`"raise"`, nothing is committed), or is left out and
            listed (`"skip"`, `"warn"`).
        shard_size: target bytes per tar shard.
        progress: `True` draws a bar of rows on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, total)` in rows.
        storage_options: backend options of `dst`.
        mode: what to do with a dataset already at `dst`: `"create"` (the default)
            refuses it with `DatasetExistsError`; `"append"` adds to it (the schemas
            must agree; an id it already has gets a `#2` suffix); `"overwrite"` replaces
            its content in a new version (history kept).

        executor: run the import as tasks on a cluster (`ferroload_map.RayExecutor()`),
            each staging `chunk_size` files (default 1), with one commit: the
            same dataset as on this machine, sample for sample (docs/convert.md). The
            destination and the input must be reachable from every worker.
        chunk_size: units per task with an `executor`.
    Returns:
        What was imported; `columns` maps each input column to its dataset column.

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `dst`.
        InputNotFoundError: if `src` matches no file.
        ConvertOptionError: for an `id_column` or binary column the files do not have.
        BadInputError: for an unreadable file, a file with two columns of one name, or a
            bad row (with `on_error="raise"`).

    Examples:
        >>> import tempfile, os, pyarrow as pa, pyarrow.parquet as pq
        >>> path = os.path.join(tempfile.mkdtemp(), "part-0.parquet")
        >>> table = pa.table({"key": ["a", "b"], "blob": [b"\\x00\\x01", None], "n": [1, 2]})
        >>> pq.write_table(table, path)
        >>> report = import_parquet(path, "memory://docs/parquet", id_column="key")
        >>> report.num_samples, dict(report.columns)
        (2, {'key': 'key', 'blob': 'blob', 'n': 'n'})
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/parquet").get(1)
        {'sample_id': 'b', 'blob': None, 'key': 'b', 'n': 2}
    """
    check_common(on_error, workers)
    ignored = PassedOver()
    files = input_files(src, suffixes=PARQUET_SUFFIXES, what="Parquet files", ignored=ignored)
    readable: list[tuple[str, str, pq.FileMetaData]] = []
    bad: list[BadInputError] = []
    fields: dict[str, pa.DataType] = {}
    for path, rel, root in files:
        try:
            check_utf8_name(path, path)  # pyarrow cannot open such a path
            check_regular(path, root)  # a FIFO would block the open below
            meta = pq.read_metadata(path)
            schema = meta.schema.to_arrow_schema()
            _check_unique_columns(path, schema)
        except BadInputError as exc:
            bad.append(exc)
            continue
        except (OSError, pa.ArrowException) as exc:
            bad.append(BadInputError(f"{path} is not a readable Parquet file: {exc}", path=path))
            continue
        readable.append((path, rel, meta))
        for f in schema:
            fields.setdefault(f.name, f.type)
    columns, modalities = _plan(readable, fields, id_column, binary_columns)
    job = _ParquetJob(readable, columns, modalities, fields, id_column, workers, bad, ignored)
    options = SessionOptions(
        os.fspath(dst), name, shard_size, storage_options, on_error, mode,
        "import parquet", "row", total=sum(meta.num_rows for _, _, meta in readable),
    )  # fmt: skip
    return run_job(job, options, progress=progress, executor=executor, chunk_size=chunk_size)


@dataclass(frozen=True)
class _ParquetJob(StatelessJob):
    """`import_parquet` as a job: the readable files in order."""

    units: list[tuple[str, str, pq.FileMetaData]]
    columns: list[Column]
    modalities: list[tuple[str, str]]
    fields: dict[str, pa.DataType]
    id_column: str | None
    workers: int
    bad: list[BadInputError]
    ignored: PassedOver
    kind: str = "parquet"

    def start(self, session: ImportSession) -> None:
        for modality, ext in self.modalities:
            session.declare(modality, ext, *kind_of(ext))

    def run(
        self, session: ImportSession, units: Sequence[tuple[str, str, pq.FileMetaData]], state: None
    ) -> None:
        read = functools.partial(
            _read_file, columns=self.columns, fields=self.fields, id_column=self.id_column
        )
        for _, rows in ordered_streams(units, read, workers=self.workers, buffer=2):
            if isinstance(rows, Failed):
                if not isinstance(rows.error, BadInputError):
                    raise rows.error
                session.bad(rows.error)
                continue
            for row in rows:
                if isinstance(row, Row):
                    session.add(row.name, row.data, row.meta)
                else:
                    session.bad(row)
            session.advance(len(rows))

    def report_columns(self, state: None) -> dict[str, str]:
        return {c.source: c.target for c in self.columns}


def _check_unique_columns(path: str, schema: pa.Schema) -> None:
    """Refuse a file with two columns of one name (pyarrow can write it; nothing can
    tell its values apart), naming the file and the column."""
    seen: set[str] = set()
    for name in schema.names:
        if name in seen:
            raise BadInputError(
                f"{path} has more than one column named {name!r}; rename the columns so "
                "each is unique, or pass on_error='skip' to leave the file out",
                path=path,
                column=name,
            )
        seen.add(name)


def _plan(
    files: list[tuple[str, str, pq.FileMetaData]],
    fields: dict[str, pa.DataType],
    id_column: str | None,
    binary_columns: Mapping[str, str] | None,
) -> tuple[list[Column], list[tuple[str, str]]]:
    """How each column is imported, and the (modality, ext) to declare."""
    names = ", ".join(fields) or "none"
    if id_column is not None and id_column not in fields:
        raise ConvertOptionError(
            f"id_column {id_column!r} is not a column of the files; columns: {names}",
            column=id_column,
        )
    if binary_columns is None:
        binary = {
            c: "" for c, t in fields.items() if pa.types.is_binary(t) or pa.types.is_large_binary(t)
        }
    else:
        binary = dict(binary_columns)
        missing = [c for c in binary if c not in fields]
        if missing:
            raise ConvertOptionError(
                f"binary_columns {missing} are not columns of the files; columns: {names}",
                column=missing[0],
            )
    columns: list[Column] = []
    modalities: list[tuple[str, str]] = []
    taken: set[str] = set()
    for col, ext in binary.items():
        ext = ext.lstrip(".") or _sniff_column(files, col) or "bin"
        mod = column_name(col, taken)
        taken.add(mod)
        modalities.append((mod, ext))
        columns.append(Column(col, "binary", mod, check=is_image_ext(ext)))
    for col in fields:
        if col not in binary:
            target = metadata_name(col, taken)
            taken.add(target)
            columns.append(Column(col, "meta", target))
    order = list(fields)
    columns.sort(key=lambda c: order.index(c.source))
    return columns, modalities


def _sniff_column(files: list[tuple[str, str, pq.FileMetaData]], col: str) -> str | None:
    """The extension of the first non-null value of `col`, reading only that column."""
    for path, _, meta in files:
        pf = pq.ParquetFile(path, metadata=meta)
        if col not in pf.schema_arrow.names:
            continue
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[col]):
            data, _ = first_value(batch.column(0))
            if data is not None:
                return ext_of(data, None)
    return None


def _read_file(
    item: tuple[str, str, pq.FileMetaData],
    *,
    columns: list[Column],
    fields: dict[str, pa.DataType],
    id_column: str | None,
) -> Iterator[list[Row | BadInputError]]:
    """The converted rows of one file, a record batch at a time (runs on the pool)."""
    path, rel, meta = item
    num_rows = meta.num_rows
    stem = rel
    for suffix in PARQUET_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    id_format = f"{stem}-{{:0{max(6, len(str(max(num_rows - 1, 0))))}d}}"
    start = 0
    try:
        pf = pq.ParquetFile(path, metadata=meta)
        present = set(pf.schema_arrow.names)
        for rb in pf.iter_batches(
            batch_size=BATCH_ROWS, columns=[c for c in fields if c in present]
        ):
            table = pa.Table.from_batches([rb])
            for c in fields:  # a column another file has: nulls here
                if c not in present:
                    table = table.append_column(c, pa.nulls(table.num_rows, fields[c]))
            yield convert_rows(
                Batch(path, id_format, start, table), columns=columns, id_column=id_column
            )
            start += table.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise BadInputError(
            f"{path} cannot be read after row {start}: {exc}", path=path, row=start
        ) from exc
