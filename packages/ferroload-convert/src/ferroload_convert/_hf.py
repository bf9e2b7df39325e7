"""Hugging Face `datasets` to a dataset (the `hf` extra; `datasets` is imported lazily)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ferroload_convert._errors import (
    BadInputError,
    ConvertOptionError,
    InputNotFoundError,
    MissingDependencyError,
)
from ferroload_convert._files import DEFAULT_MAX_FILE_BYTES, check_max_bytes
from ferroload_convert._ids import column_name, metadata_name
from ferroload_convert._pipeline import Failed, ordered_map
from ferroload_convert._report import DEFAULT_WORKERS, ImportReport, OnError, Progress, check_common
from ferroload_convert._rows import Batch, Column, convert_rows, media_ext
from ferroload_convert._session import ImportSession
from ferroload_format import DEFAULT_SHARD_SIZE

#: Rows converted per task (several tasks per worker are in flight).
BATCH_ROWS = 64
#: Media features read as bytes (never decoded) -> codec hint.
MEDIA = {"Image": "image", "Audio": "audio", "Video": "video", "Pdf": "raw", "Nifti": "raw"}


def import_hf(
    src: Any,
    dst: str | os.PathLike[str],
    *,
    split: str | None = None,
    id_column: str | None = None,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress | None = None,
    storage_options: Mapping[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> ImportReport:
    """Import a Hugging Face dataset: a `save_to_disk` folder or a `datasets.Dataset`.

    Columns become:

    * `Image`, `Audio`, `Video` (and `Pdf`, `Nifti`) features: a modality of the same
      name holding the stored bytes, never decoded (a cell stored as a path is read
      from that file, if it is a regular file of at most `max_file_bytes`: never a
      FIFO or a device); the extension is sniffed from the first value's bytes (or its
      path). A non-null stored path is kept as metadata `<column>_path`.
    * `ClassLabel`: the int column, and `<column>_name` with the class name.
    * `binary` values: a modality of kind `bytes`, extension sniffed.
    * everything else (numbers, strings, lists, dicts): metadata of the same name
      (dates and decimals as strings, see the docs).

    A modality name is the column name lowercased, made valid; a metadata column that
    clashes with a modality or a reserved name gets `src_` in front; `columns` in the
    report lists the mapping. Sample ids come from `id_column` (sanitized), else the row
    number (`<split>-00000042`). Rows are read in Arrow batches; `workers` threads
    convert and check them.

    Args:
        src: a `save_to_disk` folder (of a `Dataset` or a `DatasetDict`), or a
            `datasets.Dataset` / `datasets.DatasetDict` in memory.
        dst: the dataset URI.
        split: the split of a `DatasetDict` (needed when it has more than one).
        id_column: a column whose values become the sample ids.
        name: the dataset name (default: the last part of `dst`).
        workers: threads converting batches of rows.
        on_error: a bad row (a missing media file, a damaged image) raises
            `BadInputError` (`"raise"`, nothing is committed), or is left out and
            listed (`"skip"`, `"warn"`).
        shard_size: target bytes per tar shard.
        progress: `progress(done, total)` in rows.
        storage_options: backend options of `dst`.
        max_file_bytes: the largest media file read for a cell stored as a path
            (default 2 GiB); a larger one makes the row bad.

    Returns:
        What was imported; `columns` maps each input column to its dataset column(s).

    Raises:
        MissingDependencyError: if `datasets` is not installed
            (`pip install 'ferroload-convert[hf]'`).
        InputNotFoundError: if the folder does not exist or is not a `save_to_disk` folder.
        ConvertOptionError: for a missing or unknown split, or an unknown `id_column`.
        BadInputError: for a bad row (with `on_error="raise"`).

    Examples:
        >>> import datasets
        >>> hf = datasets.Dataset.from_dict({"text": ["a", "b"], "score": [0.5, 1.0]})
        >>> import_hf(hf, "memory://docs/hf-import").num_samples
        2
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/hf-import").get(1)
        {'sample_id': '00000001', 'text': 'b', 'score': 1.0}
    """
    check_common(on_error, workers)
    check_max_bytes(max_file_bytes)
    ds, split, where = _load(src, split)
    columns, modalities = _plan(ds, id_column)
    total = len(ds)
    width = max(8, len(str(max(total - 1, 0))))
    prefix = f"{split}-" if split else ""
    with ImportSession(
        dst,
        name=name,
        shard_size=shard_size,
        storage_options=storage_options,
        on_error=on_error,
        progress=progress,
        total=total,
    ) as session:
        for modality, ext, kind, hint in modalities:
            session.declare(modality, ext, kind, hint)
        convert = functools.partial(
            convert_rows, columns=columns, id_column=id_column, max_file_bytes=max_file_bytes
        )
        id_format = f"{prefix}{{:0{width}d}}"
        batches = (Batch(where, id_format, start, table) for start, table in _batches(ds))
        for _, rows in ordered_map(batches, convert, workers=workers, window=workers + 2):
            if isinstance(rows, Failed):
                raise rows.error
            for row in rows:
                if isinstance(row, BadInputError):
                    session.bad(row)
                else:
                    session.add(row.name, row.data, row.meta)
            session.advance(len(rows))
        mapping = {c.source: ", ".join(c.names) for c in columns}
        return session.finish(mapping)


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            "importing Hugging Face datasets needs the `datasets` package: "
            "pip install 'ferroload-convert[hf]'"
        ) from exc
    return datasets


def _load(src: Any, split: str | None) -> tuple[Any, str | None, str]:
    """(the `datasets.Dataset`, its split name, how errors name it)."""
    datasets = _datasets()
    where = "<datasets.Dataset>"
    obj = src
    if isinstance(src, str | os.PathLike):
        where = os.fspath(src)
        if not os.path.isdir(where):
            raise InputNotFoundError(
                f"{where} is not a folder (expected a save_to_disk folder)", path=where
            )
        try:
            obj = datasets.load_from_disk(where)
        except (FileNotFoundError, ValueError) as exc:
            raise InputNotFoundError(
                f"{where} is not a folder written by save_to_disk: {exc}", path=where
            ) from exc
    if isinstance(obj, datasets.DatasetDict):
        splits = list(obj)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split is None or split not in obj:
            problem = "has several splits" if split is None else f"has no split {split!r}"
            raise ConvertOptionError(
                f"{where} {problem}: {', '.join(splits)}; pass split= to choose one",
                path=where,
                column="split",
            )
        return obj[split], split, f"{where} [{split}]"
    if isinstance(obj, datasets.Dataset):
        own = str(obj.split) if obj.split is not None else None
        if split is not None and own is not None and split != own:
            raise ConvertOptionError(
                f"{where} is split {own!r}, not {split!r}", path=where, column="split"
            )
        return obj, split or own, where
    raise ConvertOptionError(
        f"import_hf reads a save_to_disk folder, a datasets.Dataset or a DatasetDict, not "
        f"{type(obj).__name__} (materialize a streaming dataset first)",
        column="src",
    )


def _plan(ds: Any, id_column: str | None) -> tuple[list[Column], list[tuple[str, str, str, str]]]:
    """How each column is imported, and the modalities to declare."""
    datasets = _datasets()
    if id_column is not None and id_column not in ds.column_names:
        raise ConvertOptionError(
            f"id_column {id_column!r} is not a column; columns: {', '.join(ds.column_names)}",
            column=id_column,
        )
    table: pa.Table = ds.data.table if hasattr(ds.data, "table") else ds.data
    columns: list[Column] = []
    modalities: list[tuple[str, str, str, str]] = []
    taken: set[str] = set()
    for col, feature in ds.features.items():
        kind = type(feature).__name__
        storage = table.schema.field(col).type
        if kind in MEDIA and pa.types.is_struct(storage) and storage.get_field_index("bytes") >= 0:
            mod = column_name(col, taken)
            taken.add(mod)
            ext = media_ext(table.column(col))
            hint = MEDIA[kind]
            modalities.append((mod, ext, "bytes" if hint == "raw" else "tensor", hint))
            path_col = None
            if storage.get_field_index("path") >= 0 and _any_valid(table.column(col), "path"):
                path_col = f"{mod}_path"
            columns.append(Column(col, "media", mod, extra=path_col, check=hint == "image"))
        elif pa.types.is_binary(storage) or pa.types.is_large_binary(storage):
            mod = column_name(col, taken)
            taken.add(mod)
            modalities.append((mod, media_ext(table.column(col)), "bytes", "raw"))
            columns.append(Column(col, "binary", mod))
        elif isinstance(feature, datasets.ClassLabel):
            columns.append(Column(col, "label", col, extra=f"{col}_name", labels=feature.names))
        else:
            columns.append(Column(col, "meta", col))
    # metadata names last: they yield to modality names
    for c in columns:
        if c.kind in ("label", "meta"):
            c.target = metadata_name(c.source, taken)
            taken.add(c.target)
        if c.extra is not None:
            c.extra = metadata_name(c.extra if c.kind != "label" else f"{c.target}_name", taken)
            taken.add(c.extra)
    return columns, modalities


def _any_valid(column: pa.ChunkedArray, field: str) -> bool:
    return any(
        pc.any(pc.is_valid(pc.struct_field(chunk, field))).as_py() for chunk in column.chunks
    )


def _batches(ds: Any) -> Iterator[tuple[int, pa.Table]]:
    start = 0
    for table in ds.with_format("arrow").iter(batch_size=BATCH_ROWS):
        yield start, table
        start += table.num_rows
