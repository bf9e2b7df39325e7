"""Hugging Face `datasets` to a dataset (the `hf` extra; `datasets` is imported lazily)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ferroload_convert._cluster import Executor, SessionOptions, StatelessJob, run_job
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
from ferroload_format import DEFAULT_SHARD_SIZE, WriteMode

#: Rows converted per task (several tasks per worker are in flight).
BATCH_ROWS = 64
#: Rows of one unit of a cluster import (`chunk_size` units make one task).
UNIT_ROWS = 1024
#: Media features read as bytes (never decoded) -> codec hint.
MEDIA = {"Image": "image", "Audio": "audio", "Video": "video", "Pdf": "raw", "Nifti": "raw"}
#: The metadata column naming each sample's split when a `DatasetDict`'s splits are imported.
SPLIT_COLUMN = "split"


def import_hf(
    src: Any,
    dst: str | os.PathLike[str],
    *,
    split: str | None = None,
    splits: Sequence[str] | None = None,
    id_column: str | None = None,
    name: str | None = None,
    workers: int = DEFAULT_WORKERS,
    on_error: OnError = "raise",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress = None,
    storage_options: Mapping[str, Any] | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    mode: WriteMode = "create",
    executor: Executor | None = None,
    chunk_size: int | None = None,
) -> ImportReport:
    """Import a Hugging Face dataset: a `save_to_disk` folder, a `Dataset` or a `DatasetDict`.

    A `DatasetDict` is imported whole: every split (or those `splits` names), one after
    the other, into one dataset with a `split` metadata column holding each sample's
    split (an input column called `split` becomes `src_split`). `split=` imports one
    split alone, without that column. The splits must have the same features.

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
    number (`<split>-00000042`); when several splits are imported, an `id_column` value
    gets its split in front too (`train-<id>`), so ids stay unique across splits. Rows
    are read in Arrow batches; `workers` threads convert and check them.

    Args:
        src: a `save_to_disk` folder (of a `Dataset` or a `DatasetDict`), or a
            `datasets.Dataset` / `datasets.DatasetDict` in memory.
        dst: the dataset URI.
        split: one split of a `DatasetDict` to import alone (no `split` column).
        splits: the splits of a `DatasetDict` to import, with a `split` column
            (default: all of them).
        id_column: a column whose values become the sample ids.
        name: the dataset name (default: the last part of `dst`).
        workers: threads converting batches of rows.
        on_error: a bad row (a missing media file, a damaged image) raises
            `BadInputError` (`"raise"`, nothing is committed), or is left out and
            listed (`"skip"`, `"warn"`).
        shard_size: target bytes per tar shard.
        progress: `True` draws a bar of rows on standard error, `False` nothing, None
            (the default) a bar when standard error is a terminal; a callable is called
            as `progress(done, total)` in rows.
        storage_options: backend options of `dst`.
        max_file_bytes: the largest media file read for a cell stored as a path
            (default 2 GiB); a larger one makes the row bad.
        mode: what to do with a dataset already at `dst`: `"create"` (the default)
            refuses it with `DatasetExistsError`; `"append"` adds to it (the schemas
            must agree; an id it already has gets a `#2` suffix); `"overwrite"` replaces
            its content in a new version (history kept).

        executor: run the import as tasks on a cluster (`ferroload_map.RayExecutor()`),
            each staging `chunk_size` rows (units of 1,024 rows) (default 8 units: 8,192 rows), with one commit: the
            same dataset as on this machine, sample for sample (docs/convert.md). The
            destination and the input must be reachable from every worker.
        chunk_size: units per task with an `executor`.
    Returns:
        What was imported; `columns` maps each input column to its dataset column(s).

    Raises:
        DatasetExistsError: with `mode="create"`, if a dataset is already at `dst`.
        MissingDependencyError: if `datasets` is not installed
            (`pip install 'ferroload-convert[hf]'`).
        InputNotFoundError: if the folder does not exist or is not a `save_to_disk` folder.
        ConvertOptionError: for an unknown split, splits with different features, an
            unknown `id_column`, or an object that is not a dataset (named by its type).
        BadInputError: for a bad row (with `on_error="raise"`).

    Examples:
        >>> import datasets
        >>> hf = datasets.Dataset.from_dict({"text": ["a", "b"], "score": [0.5, 1.0]})
        >>> import_hf(hf, "memory://docs/hf-import").num_samples
        2
        >>> from ferroload_format import Dataset
        >>> Dataset.open("memory://docs/hf-import").get(1)
        {'sample_id': '00000001', 'text': 'b', 'score': 1.0}
        >>> dd = datasets.DatasetDict(train=hf, test=hf.select([0]))
        >>> import_hf(dd, "memory://docs/hf-import-dict").num_samples
        3
        >>> Dataset.open("memory://docs/hf-import-dict").get(2)
        {'sample_id': 'test-00000000', 'text': 'a', 'score': 0.5, 'split': 'test'}
    """
    check_common(on_error, workers)
    check_max_bytes(max_file_bytes)
    parts, split_column = _load(src, split, splits)
    columns, modalities = _plan(parts, id_column, split_column)
    total = sum(len(part.ds) for part in parts)
    units = [
        (p, start, min(start + UNIT_ROWS, len(part.ds)))
        for p, part in enumerate(parts)
        for start in range(0, len(part.ds), UNIT_ROWS)
    ]
    job = _HfJob(units, parts, split_column, columns, modalities, id_column, workers,
                 max_file_bytes)  # fmt: skip
    options = SessionOptions(
        os.fspath(dst), name, shard_size, storage_options, on_error, mode, "import hf", "row",
        total=total,
    )  # fmt: skip
    return run_job(job, options, progress=progress, executor=executor, chunk_size=chunk_size)


@dataclass(frozen=True)
class _HfJob(StatelessJob):
    """`import_hf` as a job: ranges of `UNIT_ROWS` rows, split after split."""

    units: list[tuple[int, int, int]]  # (part, first row, end row)
    parts: list[_Part]
    split_column: bool
    columns: list[Column]
    modalities: list[tuple[str, str, str, str]]
    id_column: str | None
    workers: int
    max_file_bytes: int
    kind: str = "hf"

    def start(self, session: ImportSession) -> None:
        for modality, ext, kind, hint in self.modalities:
            session.declare(modality, ext, kind, hint)

    def _batches(self, units: Sequence[tuple[int, int, int]]) -> Iterator[tuple[int, Batch]]:
        width = max(8, len(str(max(max(len(part.ds) for part in self.parts) - 1, 0))))
        for p, first, end in units:
            part = self.parts[p]
            prefix = f"{part.split}-" if part.split else ""
            rows = (
                part.ds.select(range(first, end)) if (first, end) != (0, len(part.ds)) else part.ds
            )
            for start, table in _batches(rows):
                yield p, Batch(part.where, f"{prefix}{{:0{width}d}}", first + start, table)

    def run(
        self, session: ImportSession, units: Sequence[tuple[int, int, int]], state: None
    ) -> None:
        convert = functools.partial(
            convert_rows, columns=self.columns, id_column=self.id_column,
            max_file_bytes=self.max_file_bytes,
        )  # fmt: skip
        batches = self._batches(units)
        window = self.workers + 2
        for (p, _), rows in ordered_map(
            batches, lambda pb: convert(pb[1]), workers=self.workers, window=window
        ):
            if isinstance(rows, Failed):
                raise rows.error
            part = self.parts[p]
            # several splits: an id column's values get the split in front (unique ids)
            id_prefix = f"{part.split}-" if self.split_column and self.id_column is not None else ""
            for row in rows:
                if isinstance(row, BadInputError):
                    session.bad(row)
                    continue
                if self.split_column:
                    row.meta[SPLIT_COLUMN] = part.split
                session.add(id_prefix + row.name, row.data, row.meta)
            session.advance(len(rows))

    def report_columns(self, state: None) -> dict[str, str | list[str]]:
        return {c.source: c.target if c.extra is None else list(c.names) for c in self.columns}


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            "importing Hugging Face datasets needs the `datasets` package: "
            "pip install 'ferroload-convert[hf]'"
        ) from exc
    return datasets


@dataclass(frozen=True)
class _Part:
    """One split to import: the `datasets.Dataset`, its split name, how errors name it."""

    ds: Any
    split: str | None
    where: str


def type_name(obj: object) -> str:
    """The qualified name of `obj`'s type: `datasets.dataset_dict.DatasetDict`."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _load(src: Any, split: str | None, splits: Sequence[str] | None) -> tuple[list[_Part], bool]:
    """(the splits to import, whether they get a `split` column)."""
    datasets = _datasets()
    if split is not None and splits is not None:
        raise ConvertOptionError(
            "pass split= (one split, no split column) or splits= (several, with a split "
            "column), not both",
            column="splits",
        )
    if splits is not None:
        splits = [splits] if isinstance(splits, str) else list(dict.fromkeys(splits))
        if not splits:
            raise ConvertOptionError("splits= is empty; name at least one split", column="splits")
    obj = src
    if isinstance(src, str | os.PathLike):
        where = os.fspath(src)
        if not os.path.isdir(where):
            raise InputNotFoundError(
                f"{where} is not a folder (expected a save_to_disk folder); for a dataset on "
                f"the Hub, load it first and pass the object: "
                f"import_hf(datasets.load_dataset({where!r}), ...)",
                path=where,
            )
        try:
            obj = datasets.load_from_disk(where)
        except (FileNotFoundError, ValueError) as exc:
            raise InputNotFoundError(
                f"{where} is not a folder written by save_to_disk: {exc}", path=where
            ) from exc
    else:
        where = f"<{type_name(src)}>"
    if isinstance(obj, datasets.DatasetDict):
        names = list(obj)
        wanted = [split] if split is not None else splits if splits is not None else names
        for name in wanted:
            if name not in obj:
                raise ConvertOptionError(
                    f"{where} has no split {name!r}; its splits: {', '.join(names) or 'none'}",
                    path=where,
                    column="split",
                )
        if not wanted:
            raise ConvertOptionError(f"{where} has no split to import", path=where)
        return [_Part(obj[name], name, f"{where} [{name}]") for name in wanted], split is None
    if isinstance(obj, datasets.Dataset):
        if splits is not None:
            raise ConvertOptionError(
                f"{where} is a single split (a datasets.Dataset); splits= selects splits of "
                "a DatasetDict",
                path=where,
                column="splits",
            )
        own = str(obj.split) if obj.split is not None else None
        if split is not None and own is not None and split != own:
            raise ConvertOptionError(
                f"{where} is split {own!r}, not {split!r}", path=where, column="split"
            )
        return [_Part(obj, split or own, where)], False
    streaming = "Iterable" in type(obj).__name__
    hint = " (a streaming dataset: materialize it first, e.g. load_dataset(..., streaming=False))"
    raise ConvertOptionError(
        f"import_hf reads a save_to_disk folder, a datasets.Dataset or a "
        f"datasets.DatasetDict, not a {type_name(obj)}{hint if streaming else ''}",
        column="src",
    )


def _plan(
    parts: Sequence[_Part], id_column: str | None, split_column: bool
) -> tuple[list[Column], list[tuple[str, str, str, str]]]:
    """How each column is imported, and the modalities to declare (the splits must have
    the same features)."""
    datasets = _datasets()
    ds = parts[0].ds
    for part in parts[1:]:
        if part.ds.features != ds.features:
            a, b = dict(ds.features), dict(part.ds.features)
            diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            raise ConvertOptionError(
                f"{part.where} has other features than {parts[0].where} (they differ in "
                f"{', '.join(diff)}); import the splits separately with split=",
                path=part.where,
                column=diff[0] if diff else None,
            )
    if id_column is not None and id_column not in ds.column_names:
        raise ConvertOptionError(
            f"id_column {id_column!r} is not a column; columns: {', '.join(ds.column_names)}",
            column=id_column,
        )
    table: pa.Table = ds.data.table if hasattr(ds.data, "table") else ds.data
    columns: list[Column] = []
    modalities: list[tuple[str, str, str, str]] = []
    taken: set[str] = {SPLIT_COLUMN} if split_column else set()
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
